//! The store: open or connect, close, and the handles made from it.

use napi::bindgen_prelude::{BigInt, Either, PromiseRaw};
use napi::Env;
use napi_derive::napi;
use tinystore::{ConnectOptions, Store};
use tinystore::channels::Scope;
use tinystore::locks::{Kind, LockOptions};

use crate::convert::{self, JsDuration, JsKey};
use crate::database::NativeDatabase;
use crate::errors::{IntoNapi, blocking};
use crate::lock::NativeLock;
use crate::ready::now_or_promise;
use crate::subscription::NativeSubscription;
use crate::uvread::UvReader;

/// What `connect` takes instead of the environment; each unset one keeps
/// the engine's default.
#[napi(object)]
pub struct NativeConnectOptions {
    /// The token for `tcp:` and `tls:`; default `TINYSTORE_TOKEN`.
    pub token: Option<String>,
    /// For `tls:`, the CA's PEM file; default `TINYSTORE_CA`.
    pub ca_file: Option<String>,
    /// How long a request may go unanswered; default 10 s.
    pub request_timeout: Option<JsDuration>,
    /// For `etcd://`, etcd's user; default `TINYSTORE_ETCD_USER`.
    pub etcd_user: Option<String>,
    /// Its password; default `TINYSTORE_ETCD_PASSWORD`.
    pub etcd_password: Option<String>,
    /// For `etcds://`, this process's client certificate (PEM file); default `TINYSTORE_ETCD_CERT`.
    pub etcd_cert: Option<String>,
    /// Its private key (PEM file); default `TINYSTORE_ETCD_KEY`.
    pub etcd_key: Option<String>,
    /// For `?nats=`, NATS's user; default `TINYSTORE_NATS_USER`.
    pub nats_user: Option<String>,
    /// Its password; default `TINYSTORE_NATS_PASSWORD`.
    pub nats_password: Option<String>,
    /// NATS's token; default `TINYSTORE_NATS_TOKEN`.
    pub nats_token: Option<String>,
    /// A NATS credentials file; default `TINYSTORE_NATS_CREDS`.
    pub nats_credentials: Option<String>,
    /// For `tls://` NATS servers, this process's client certificate (PEM file); default `TINYSTORE_NATS_CERT`.
    pub nats_cert: Option<String>,
    /// Its private key (PEM file); default `TINYSTORE_NATS_KEY`.
    pub nats_key: Option<String>,
}

/// Runs the `tinystore` command with `args` (the first, the program's name)
/// on this thread until it is done, and returns its exit status.
#[napi]
pub fn cli(args: Vec<String>) -> i32 {
    tinystore::cli::run(args)
}

/// A store, owned by this process or connected to another's.
#[napi]
pub struct NativeStore {
    store: Store,
    /// Over a Unix socket: the socket read on the JavaScript thread.
    uv: Option<std::sync::Arc<UvReader>>,
}

impl NativeStore {
    /// The engine's store.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }
}

#[napi]
impl NativeStore {
    /// Opens (creating it if needed) the store directory `dir` and owns it.
    #[napi(factory)]
    pub async fn open(dir: String) -> napi::Result<NativeStore> {
        let store = blocking(move || Store::open(dir)).await?;
        Ok(NativeStore { store, uv: None })
    }

    /// Connects to the store served at `address`: `unix:PATH`,
    /// `tcp:HOST:PORT` (the token, else `TINYSTORE_TOKEN`), `tls:HOST:PORT`
    /// (the token, and the CA's PEM file, else `TINYSTORE_CA`) or a cluster
    /// store's `etcd:` or `etcds:` address (etcd's user and password, client
    /// certificate and key, CA; else the environment's).
    #[napi(factory)]
    pub async fn connect(address: String, options: Option<NativeConnectOptions>) -> napi::Result<NativeStore> {
        let mut opts = ConnectOptions::new();
        if let Some(o) = options {
            if let Some(t) = o.token {
                opts = opts.token(t);
            }
            if let Some(f) = o.ca_file {
                opts = opts.ca_file(f);
            }
            if let Some(t) = convert::opt_duration("requestTimeout", o.request_timeout)? {
                opts = opts.request_timeout(t);
            }
            // The core refuses half a pair, naming the missing one.
            opts = opts.etcd_user_parts(o.etcd_user, o.etcd_password).etcd_identity_parts(o.etcd_cert.map(Into::into), o.etcd_key.map(Into::into));
            if let Some(t) = o.nats_token {
                opts = opts.nats_token(t);
            }
            if let Some(f) = o.nats_credentials {
                opts = opts.nats_credentials(f);
            }
            opts = opts.nats_user_parts(o.nats_user, o.nats_password).nats_identity_parts(o.nats_cert.map(Into::into), o.nats_key.map(Into::into));
        }
        let store = blocking(move || Store::connect_with(&address, opts)).await?;
        Ok(NativeStore { uv: UvReader::new(&store), store })
    }

    /// Ends subscriptions and lets held keys go. Idempotent.
    #[napi]
    pub fn close(&self) {
        if let Some(uv) = &self.uv {
            uv.stop();
        }
        self.store.close();
    }

    /// Closes once the publishes already sent have their answers (over a
    /// connection, up to 2 s), so they resolve as delivered rather than
    /// `closed`. Nothing when owned, else a promise. Idempotent.
    #[napi(ts_return_type = "void | Promise<void>")]
    pub fn close_settled<'env>(&self, env: &'env Env) -> napi::Result<Either<(), PromiseRaw<'env, ()>>> {
        if let Some(uv) = &self.uv {
            uv.stop();
        }
        let store = self.store.clone();
        now_or_promise(env, async move {
            store.close_settled().await;
            Ok(())
        })
    }

    /// True once closed.
    #[napi(getter)]
    pub fn closed(&self) -> bool {
        self.store.is_closed()
    }

    /// The store directory.
    #[napi(getter)]
    pub fn dir(&self) -> String {
        self.store.dir().display().to_string()
    }

    /// This open's epoch: the high 64 bits of every fence.
    #[napi(getter)]
    pub fn epoch(&self) -> BigInt {
        BigInt::from(self.store.epoch())
    }

    /// The store's status as JSON text (`tinystore status --json`), asked of
    /// the owner over a connection; holder ids as text, every digit kept.
    /// Errors: `closed` once the store is closed (the engine's check, never
    /// the figures from before), the owner's errors over a connection.
    #[napi]
    pub async fn status_json(&self) -> napi::Result<String> {
        let store = self.store.clone();
        blocking(move || {
            let mut v = store.status_json()?;
            // A holder id uses all 64 bits, past what a JavaScript number keeps.
            let locks = v.get_mut("locks").and_then(|l| l.as_array_mut());
            for key in locks.into_iter().flatten() {
                for h in key.get_mut("holders").and_then(|h| h.as_array_mut()).into_iter().flatten() {
                    if let Some(id) = h.get_mut("holder").filter(|id| id.is_u64()) {
                        *id = id.to_string().into();
                    }
                }
            }
            Ok(v.to_string())
        })
        .await
    }

    /// Checks a channel name (and that the store is open) when a handle is made.
    #[napi]
    pub fn check_channel(&self, name: String) -> napi::Result<()> {
        self.store.channel::<()>(&name).open().napi().map(drop)
    }

    /// Publishes JSON text to a branch. Gives nothing when the store took
    /// the message at once (always, in the owning process), else a promise.
    #[napi(ts_return_type = "void | Promise<void>")]
    pub fn publish<'env>(
        &self,
        env: &'env Env,
        channel: String,
        branch: Vec<JsKey>,
        json: String,
    ) -> napi::Result<Either<(), PromiseRaw<'env, ()>>> {
        let store = self.store.clone();
        let branch = convert::keys(branch)?;
        let data = json.into_bytes().into_boxed_slice();
        if let Some(uv) = &self.uv {
            uv.ensure(env);
        }
        now_or_promise(env, async move { store.publish_raw(&channel, &branch, data).await.napi() })
    }

    /// Writes the publishes that wait for the end of this burst of calls
    /// (connected: a publish waits for this, for 32 to gather, for an
    /// answer read or for the loop's turn to end).
    /// Nothing to do when owned.
    #[napi]
    pub fn flush_publishes(&self) {
        if let Some(uv) = &self.uv {
            uv.flush();
        }
    }

    /// Subscribes to a branch (and every branch below it when `recursive`);
    /// resolves once the store has the subscription.
    #[napi]
    pub async fn subscribe(&self, channel: String, branch: Vec<JsKey>, recursive: bool) -> napi::Result<NativeSubscription> {
        let branch = convert::keys(branch)?;
        let scope = if recursive { Scope::Recursive } else { Scope::Branch };
        let sub = self.store.subscribe_raw(&channel, &branch, scope, None).await.napi()?;
        Ok(NativeSubscription::new(sub, self.uv.clone(), self.store.clone()))
    }

    /// A lock handle; the engine checks the name and the durations now
    /// (over a connection, the owner checks the kind at the first hold).
    #[napi]
    pub fn lock(
        &self,
        name: String,
        ttl: Option<JsDuration>,
        max_hold: Option<JsDuration>,
        wait: Option<JsDuration>,
    ) -> napi::Result<NativeLock> {
        let opts = options(ttl, max_hold, wait)?;
        NativeLock::new(&self.store, &name, Kind::Lock, opts, self.uv.clone())
    }

    /// A semaphore handle of `limit` permits per key; the engine checks the
    /// limit (and refuses another limit for the same name, over a
    /// connection at the first hold: one declare, in the background).
    #[napi]
    pub fn semaphore(
        &self,
        name: String,
        limit: f64,
        ttl: Option<JsDuration>,
        max_hold: Option<JsDuration>,
        wait: Option<JsDuration>,
    ) -> napi::Result<NativeLock> {
        // A JS number: the engine's rule takes it whole and within u32, or refuses it (never wrapped).
        let limit = tinystore::limits::semaphore_limit(limit, convert::js_number(limit)).napi()?;
        let opts = options(ttl, max_hold, wait)?;
        NativeLock::new(&self.store, &name, Kind::Semaphore { limit }, opts, self.uv.clone())
    }

    /// Opens `<dir>/<name>.db`, applying the numbered `.sql` files of `migrations`.
    #[napi]
    pub async fn database(&self, name: String, migrations: Option<String>) -> napi::Result<NativeDatabase> {
        let store = self.store.clone();
        let db = blocking(move || {
            let mut b = store.database(&name);
            if let Some(m) = migrations {
                b = b.migrations(m);
            }
            b.open()
        })
        .await?;
        Ok(NativeDatabase::new(db))
    }
}

/// A lock handle's options, checked by the engine (ttl 1 s to 1 h, positive
/// `maxHold` and `wait`); unset ones take the engine's defaults.
fn options(ttl: Option<JsDuration>, max_hold: Option<JsDuration>, wait: Option<JsDuration>) -> napi::Result<LockOptions> {
    let d = LockOptions::default();
    LockOptions {
        ttl: convert::opt_duration("ttl", ttl)?.unwrap_or(d.ttl),
        max_hold: convert::opt_duration("maxHold", max_hold)?,
        wait: convert::opt_duration("wait", wait)?.unwrap_or(d.wait),
    }
    .check()
    .napi()
}
