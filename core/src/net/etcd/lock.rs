//! Locks and semaphores on etcd, as etcd's own `concurrency.Mutex` does
//! them: a hold puts a waiter's key under the lock's key with its
//! session's etcd lease; waiters are in the order etcd committed their keys
//! (create revision); a waiter watches the delete of the key just before
//! its own (a semaphore's, of any key before its own) and looks again.
//!
//! Keys: `/PREFIX/locks/NAME/KEY/SESSION-SEQ`, KEY percent-encoded. The
//! fence is `(epoch << 64) | revision`, the revision of the write that made
//! the holder's key the holder: its create revision when it got the key at
//! once, else a write of its key made when its turn came, so fences grow
//! in grant order across every key of the store, as on one machine.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse, WatchFilterType, WatchOptions};
use parking_lot::Mutex;

use super::lease::{ClusterLease, Holding, Session};
use super::{Etcd, bounded, epoch_of};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::base::limits::{DEFAULT_TTL, format_duration};
use crate::engine::locks::{Holder, Kind, Terms};

/// A key's text as a part of an etcd key: bytes other than letters,
/// digits and `_.~-` as `%XX`, so `/` in a key cannot make another path.
pub(super) fn encode_key(key: &Key) -> String {
    let mut out = String::new();
    for b in key.as_str().bytes() {
        if b.is_ascii_alphanumeric() || b"_.~-".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The key [`encode_key`] wrote.
pub(super) fn decode_key(part: &str) -> String {
    let b = part.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = part.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The fence of a holder's key under `epoch`: the revision of its last write.
pub(super) fn fence_of(epoch: u64, kv: &etcd_client::KeyValue) -> Fence {
    Fence::new(epoch, kv.mod_revision() as u64)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// A lock or semaphore of a cluster store.
pub(crate) struct ClusterLock {
    etcd: Arc<Etcd>,
    name: String,
    kind: Kind,
    holding: Holding,
}

/// A waiter's key, deleted when the wait ends without the key (timeout,
/// error, or the waiting task dropped: LOCK-04) unless disarmed.
struct Waiting {
    etcd: Arc<Etcd>,
    key: String,
    armed: bool,
}

impl Waiting {
    async fn delete_now(mut self) {
        self.armed = false;
        let _ = bounded(self.etcd.timeout, "taking a waiter out of line", || async { self.etcd.client.kv_client().delete(self.key.clone(), None).await }).await;
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.armed {
            let (etcd, key) = (self.etcd.clone(), std::mem::take(&mut self.key));
            crate::runtime::spawn(async move {
                let _ = bounded(etcd.timeout, "taking a waiter out of line", || async { etcd.client.kv_client().delete(key.clone(), None).await }).await;
            });
        }
    }
}

/// Takes the (key, holder) pair out of the holding set on drop, unless kept.
struct Entry {
    holding: Holding,
    pair: Option<(Key, u64)>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Some(p) = self.pair.take() {
            self.holding.lock().remove(&p);
        }
    }
}

impl ClusterLock {
    pub(super) fn new(etcd: Arc<Etcd>, name: &str, kind: Kind) -> Arc<ClusterLock> {
        Arc::new(ClusterLock { etcd, name: name.to_owned(), kind, holding: Arc::new(Mutex::new(Default::default())) })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    fn limit(&self) -> i64 {
        match self.kind {
            Kind::Lock => 1,
            Kind::Semaphore { limit } => i64::from(limit),
        }
    }

    /// `/PREFIX/locks/NAME/KEY/`: the waiters' keys of `key`.
    fn dir(&self, key: &Key) -> String {
        format!("{}locks/{}/{}/", self.etcd.root, self.name, encode_key(key))
    }

    /// Takes `key`: at once if free, else in line up to `wait` (`None`:
    /// never waits, and leaves no key behind). Errors: `conflict` when
    /// `holder` already holds or waits for `key` here and `wait` is set
    /// (LOCK-08), `timeout`, `unavailable`, `lost` (the waiter's lease ran
    /// out while it waited), `closed`.
    pub(crate) async fn acquire(&self, key: Key, holder: Holder, terms: Terms, wait: Option<Duration>) -> Result<Option<Arc<ClusterLease>>> {
        self.etcd.check_open()?;
        let mut entry = Entry { holding: self.holding.clone(), pair: None };
        if holder.0 != 0 {
            let pair = (key.clone(), holder.0);
            if !self.holding.lock().insert(pair.clone()) {
                return match wait {
                    None => Ok(None),
                    Some(_) => Err(Error::conflict(format!(
                        "key {key} of {:?} is already held (or waited for) by this same holder: a hold inside a hold of the same key would wait on itself; use the lease you have",
                        self.name
                    ))),
                };
            }
            entry.pair = Some(pair);
        }
        let ttl = terms.ttl.unwrap_or(DEFAULT_TTL);
        let session = self.etcd.session(ttl).await?;
        let seq = self.etcd.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = self.dir(&key);
        let me = format!("{dir}{:016x}-{seq:x}", session.id);
        let value = |granted: bool| {
            let when = if granted { "granted_ms" } else { "asked_ms" };
            serde_json::json!({"holder": holder.0, "process": process_name(), when: now_ms(), "ttl_ms": ttl.as_millis() as u64}).to_string()
        };
        let put = |granted: bool| TxnOp::put(me.clone(), value(granted), Some(PutOptions::new().with_lease(session.id)));
        let epoch = TxnOp::get(self.etcd.epoch_key(), None);
        let limit = self.limit();
        // A call may be made twice (the first answer lost): the revision is
        // read back from the key itself, never taken from the answer.
        let mine = || TxnOp::get(me.clone(), Some(GetOptions::new().with_keys_only()));
        // Armed before the put: a caller dropped while it is in flight
        // leaves no key behind either (LOCK-04).
        let mut waiting = Waiting { etcd: self.etcd.clone(), key: me.clone(), armed: true };
        if wait.is_none() && limit == 1 {
            // Put only if no key is under the lock's: nothing is left behind.
            let t = Txn::new()
                .when([Compare::create_revision(dir.clone(), CompareOp::Equal, 0).with_prefix()])
                .and_then([put(true), epoch.clone(), mine()])
                .or_else([mine(), epoch]);
            let r = self.etcd.txn(&format!("trying key {key} of {:?}", self.name), t).await?;
            let ops = r.op_responses();
            let (rev, e) = if r.succeeded() { (created(&ops, 2)?, epoch_of(&ops, 1)?) } else { (created(&ops, 0)?, epoch_of(&ops, 1)?) };
            waiting.armed = false;
            if rev == 0 {
                return Ok(None);
            }
            return Ok(Some(self.lease(session, me, rev, rev, e, key, holder, terms, entry)));
        }
        let first = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(limit).with_keys_only();
        let t = Txn::new().and_then([put(false), epoch, TxnOp::get(dir.clone(), Some(first)), mine()]);
        let r = self.etcd.txn(&format!("asking for key {key} of {:?}", self.name), t).await?;
        let ops = r.op_responses();
        let rev = created(&ops, 3)?;
        let e = epoch_of(&ops, 1)?;
        let among_first = match ops.get(2) {
            Some(TxnOpResponse::Get(g)) => g.kvs().iter().any(|kv| kv.key() == me.as_bytes()),
            _ => false,
        };
        if among_first {
            waiting.armed = false;
            return Ok(Some(self.lease(session, me, rev, rev, e, key, holder, terms, entry)));
        }
        let Some(wait) = wait else {
            waiting.delete_now().await;
            return Ok(None);
        };
        let turn = self.wait_turn(&session, &dir, &me, rev, put(true));
        match tokio::time::timeout(wait, turn).await {
            Ok(Ok((granted, e))) => {
                waiting.armed = false;
                Ok(Some(self.lease(session, me, rev, granted, e, key, holder, terms, entry)))
            }
            Ok(Err(err)) => {
                waiting.delete_now().await;
                // Closing revokes the waiter's session too: a waiter is told
                // the store closed, as on one machine, not that it lost a lease.
                self.etcd.check_open()?;
                Err(err)
            }
            Err(_) => {
                waiting.delete_now().await;
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "key {key} of {:?} stayed held for the whole wait of {}: nothing ran; retry later, or give hold a longer wait",
                        self.name,
                        format_duration(wait)
                    ),
                ))
            }
        }
    }

    /// Waits until fewer than `limit` keys under `dir` were made before
    /// `me` (made at revision `rev`), then marks the grant by writing `me`
    /// again (`grant`). Gives the grant's revision and the epoch then.
    async fn wait_turn(&self, session: &Arc<Session>, dir: &str, me: &str, rev: i64, grant: TxnOp) -> Result<(i64, u64)> {
        let limit = self.limit();
        loop {
            let before = if limit == 1 {
                GetOptions::new().with_prefix().with_max_create_revision(rev - 1).with_sort(SortTarget::Create, SortOrder::Descend).with_limit(1).with_keys_only()
            } else {
                // Not count-only: etcd's count ignores the revision filter.
                GetOptions::new().with_prefix().with_max_create_revision(rev - 1).with_keys_only()
            };
            let t = Txn::new().and_then([TxnOp::get(me, Some(GetOptions::new().with_keys_only())), TxnOp::get(dir, Some(before))]);
            let r = self.etcd.txn(&format!("waiting in line for {:?}", self.name), t).await?;
            let now = revision(&r)?;
            let ops = r.op_responses();
            let (mine, ahead) = match (ops.first(), ops.get(1)) {
                (Some(TxnOpResponse::Get(m)), Some(TxnOpResponse::Get(a))) => (m.kvs().len(), a),
                _ => return Err(Error::new(ErrorKind::Protocol, "etcd's answer to a transaction lacks its reads")),
            };
            if mine == 0 {
                return Err(Error::lost(format!(
                    "the waiter's key for {:?} was gone from etcd while it waited ({}): retry the hold",
                    self.name,
                    if session.is_lost() { session.why() } else { "deleted by someone else".into() }
                )));
            }
            let watch = if limit == 1 {
                ahead.kvs().first().map(|kv| (kv.key().to_vec(), WatchOptions::new()))
            } else if (ahead.kvs().len() as i64) < limit {
                None
            } else {
                Some((dir.as_bytes().to_vec(), WatchOptions::new().with_prefix()))
            };
            let Some((key, opts)) = watch else {
                let t = Txn::new()
                    .when([Compare::create_revision(me, CompareOp::Equal, rev)])
                    .and_then([grant, TxnOp::get(self.etcd.epoch_key(), None)]);
                let r = self.etcd.txn(&format!("taking the key of {:?}", self.name), t).await?;
                if !r.succeeded() {
                    return Err(Error::lost(format!("the waiter's key for {:?} was gone from etcd when its turn came: retry the hold", self.name)));
                }
                return Ok((revision(&r)?, epoch_of(&r.op_responses(), 1)?));
            };
            // From the revision just read: a delete after it is never missed.
            let opts = opts.with_start_revision(now + 1).with_filters([WatchFilterType::NoPut]);
            let mut stream = bounded(self.etcd.timeout, "watching the key before this waiter's", || async { self.etcd.client.watch_client().watch(key.clone(), Some(opts.clone())).await }).await?;
            loop {
                tokio::select! {
                    m = stream.message() => match m {
                        Ok(Some(w)) if w.canceled() => break,
                        Ok(Some(w)) if w.events().iter().any(|e| e.event_type() == EventType::Delete) => break,
                        Ok(Some(_)) => continue,
                        // The stream broke (a member went away): look again.
                        _ => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            break;
                        }
                    },
                    _ = session.lost() => return Err(Error::lost(format!("the waiter for {:?} lost its etcd lease while it waited: {}", self.name, session.why()))),
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn lease(&self, session: Arc<Session>, me: String, created: i64, granted: i64, epoch: u64, key: Key, holder: Holder, terms: Terms, mut entry: Entry) -> Arc<ClusterLease> {
        self.etcd.saw_epoch(epoch);
        // The pair stays in the holding set until the lease is released.
        entry.pair = None;
        let fence = matches!(self.kind, Kind::Lock).then(|| Fence::new(epoch, granted as u64));
        ClusterLease::new(session, me, created, key, &self.name, fence, holder.0, self.holding.clone(), terms.max_hold.map(|m| (Instant::now(), m)))
    }
}

/// The create revision of the key read by the get at `i` (0: no such key).
fn created(ops: &[TxnOpResponse], i: usize) -> Result<i64> {
    match ops.get(i) {
        Some(TxnOpResponse::Get(g)) => Ok(g.kvs().first().map_or(0, |kv| kv.create_revision())),
        _ => Err(Error::new(ErrorKind::Protocol, "etcd's answer to a transaction lacks a read")),
    }
}

/// The revision a transaction's answer was made at.
fn revision(r: &etcd_client::TxnResponse) -> Result<i64> {
    r.header().map(|h| h.revision()).ok_or_else(|| Error::new(ErrorKind::Protocol, "etcd's answer has no header"))
}

/// `host:pid`, shown by `tinystore status` for each holder and waiter.
fn process_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let host = if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "?".into()
    };
    format!("{host}:{}", std::process::id())
}
