//! The owned backend: this process owns the store directory, keeps its
//! channels and locks in its [`Engine`], and serves it to other processes.

use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;

use super::{Backend, BackendLease, BackendSubscription, BoxFuture, Done, LeaseBackend, LockBackend, SubscriptionBackend};
use crate::api::publish::Publish;
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::engine::Engine;
use crate::engine::channels::{Event, LocalSubscription, Resume, Scope};
use crate::engine::locks::{Holder, Kind, LeaseShared, LocalLease, Table, Terms};
use crate::engine::tickets::Held;
use crate::net::client::LoopReader;
use crate::net::files::{DirLock, Listener, record_listener, socket_path};
use crate::net::server::Server;
use crate::net::wire::Address;

pub(crate) struct Owned {
    engine: Arc<Engine>,
    dir: std::path::PathBuf,
    dir_lock: Mutex<Option<DirLock>>,
    servers: Mutex<Vec<Arc<Server>>>,
}

impl Owned {
    /// The backend of a store this process owns: `dir_lock` is its
    /// `owner.lock`, held until the store closes.
    pub(crate) fn new(engine: Arc<Engine>, dir: &Path, dir_lock: DirLock) -> Owned {
        Owned { engine, dir: dir.to_path_buf(), dir_lock: Mutex::new(Some(dir_lock)), servers: Mutex::new(Vec::new()) }
    }
}

impl Backend for Owned {
    fn is_owner(&self) -> bool {
        true
    }

    fn epoch(&self) -> u64 {
        self.engine.epoch()
    }

    fn check_can_publish(&self) -> Result<()> {
        Ok(())
    }

    fn publish(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Publish {
        Publish::done(self.engine.publish_checked(channel, branch, data))
    }

    fn publish_then(&self, channel: &str, branch: &[Key], data: &[u8], _keep_done: &mut dyn FnMut() -> Done) -> Option<Result<()>> {
        Some(self.engine.publish_checked(channel, branch, data.into()))
    }

    fn take_ticket(&self, channels: Vec<Arc<str>>) -> Result<u64> {
        self.engine.take_ticket(channels)
    }

    fn end_ticket(&self, ticket: u64, msgs: Option<Vec<Held>>) -> Result<()> {
        self.engine.end_ticket(ticket, msgs)
    }

    fn subscribe<'a>(&'a self, channel: &'a str, branch: &'a [Key], scope: Scope, resume: Option<Resume>) -> BoxFuture<'a, Result<BackendSubscription>> {
        let sub = self.engine.subscribe(channel, branch, scope, resume);
        Box::pin(async move { Ok(Box::new(sub?) as BackendSubscription) })
    }

    fn lock<'a>(&'a self, name: &'a str, kind: Kind) -> BoxFuture<'a, Result<Arc<dyn LockBackend>>> {
        let table = self.engine.lock_table(name, kind);
        Box::pin(async move { Ok(Arc::new(OwnedLock(table?)) as Arc<dyn LockBackend>) })
    }

    fn status_json(&self, dir: &Path) -> Result<serde_json::Value> {
        let mut v = serde_json::to_value(self.engine.status(dir)?)?;
        let conns: Vec<serde_json::Value> = self.servers.lock().iter().flat_map(|s| s.connections().as_array().cloned().unwrap_or_default()).collect();
        v["connections"] = conns.into();
        Ok(v)
    }

    fn shutdown_owner(&self) -> Result<()> {
        Err(Error::invalid("this process owns the store: close it instead"))
    }

    fn check_files_here(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    fn serve(&self, address: &Address, tls_files: Option<(&Path, &Path)>, shutdown: Option<Arc<tokio::sync::Notify>>) -> Result<()> {
        let server = Server::new(Arc::downgrade(&self.engine), self.dir.clone(), shutdown);
        // Kept for a process that takes the store over (STORE-01); written
        // before the first client can connect, so it is there by then.
        if !matches!(address, Address::Unix(_)) {
            let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
            record_listener(
                &self.dir,
                Listener { address: address.to_string(), cert: tls_files.map(|(c, _)| abs(c)), key: tls_files.map(|(_, k)| abs(k)) },
            )?;
        }
        server.listen(address, tls_files)?;
        self.servers.lock().push(server);
        Ok(())
    }

    fn on_shutdown(&self, n: Arc<tokio::sync::Notify>) {
        for s in self.servers.lock().iter() {
            *s.shutdown.lock() = Some(n.clone());
        }
    }

    fn loop_reader(&self) -> Option<LoopReader> {
        None
    }

    fn settle(&self, _limit: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn close(&self, dir: &Path) {
        // Leases held over connections outlive a clean close as they outlive
        // a death: their holders re-present them to the next owner, whose
        // grace needs the longest ttls (STORE-01). Nothing else is waited for.
        let leases_kept = self.engine.leases_over_connections();
        for s in self.servers.lock().drain(..) {
            s.stop();
        }
        self.engine.close();
        if !leases_kept {
            let _ = crate::net::files::forget_remote_lock_ttls(dir);
        }
        let _ = std::fs::remove_file(socket_path(dir));
        self.dir_lock.lock().take();
    }
}

/// A lock table of the engine. Its leases end with their holder's function
/// or at `maxHold`: `terms.ttl` does not apply in the owning process.
struct OwnedLock(Arc<Table>);

fn local(lease: LocalLease) -> BackendLease {
    lease.into_shared()
}

impl LockBackend for OwnedLock {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn kind(&self) -> Kind {
        self.0.kind()
    }

    fn acquire(&self, key: Key, holder: Holder, terms: Terms, wait: Duration) -> BoxFuture<'_, Result<BackendLease>> {
        Box::pin(async move { self.0.acquire(key, holder, Terms { ttl: None, ..terms }, wait).await.map(local) })
    }

    fn acquire_now(&self, key: &Key, holder: Holder, terms: Terms) -> Result<Option<BackendLease>> {
        Ok(self.0.acquire_now(key, holder, Terms { ttl: None, ..terms })?.map(local))
    }

    fn try_acquire(&self, key: Key, holder: Holder, terms: Terms) -> BoxFuture<'_, Result<Option<BackendLease>>> {
        let r = self.0.try_acquire(key, holder, Terms { ttl: None, ..terms }).map(|l| l.map(local));
        Box::pin(std::future::ready(r))
    }
}

impl LeaseBackend for LeaseShared {
    fn id(&self) -> u64 {
        LeaseShared::id(self)
    }
    fn fence(&self) -> Option<Fence> {
        LeaseShared::fence(self)
    }
    fn key(&self) -> &Key {
        LeaseShared::key(self)
    }
    fn is_lost(&self) -> bool {
        LeaseShared::is_lost(self)
    }
    fn lost(&self) -> BoxFuture<'_, ()> {
        Box::pin(LeaseShared::lost(self))
    }
    fn on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        LeaseShared::on_lost(self, f)
    }
    fn renew(&self) -> Result<()> {
        LeaseShared::renew(self)
    }
    fn time_left(&self) -> Option<Duration> {
        LeaseShared::time_left(self)
    }
    fn release(&self) -> BoxFuture<'static, Result<()>> {
        Box::pin(std::future::ready(LeaseShared::release(self)))
    }
    fn lost_error(&self) -> Error {
        LeaseShared::lost_error(self)
    }
}

impl SubscriptionBackend for LocalSubscription {
    fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        LocalSubscription::read(self, cx)
    }
    fn read_ready(&self, out: &mut Vec<Event>, max: usize) {
        let _ = LocalSubscription::read_many(self, None, max.saturating_sub(out.len()), |e, _| out.push(e));
    }
    fn is_ended(&self) -> bool {
        LocalSubscription::is_ended(self)
    }
    fn stop(&self) {
        LocalSubscription::stop(self)
    }
    fn resume_point(&self) -> Resume {
        LocalSubscription::resume_point(self)
    }
}
