//! The cluster backend: the store's locks, semaphores and fences live in
//! an etcd cluster ([`Etcd`]), reached at `etcd://HOST:PORT,.../PREFIX`.
//! No process owns it. Channels are not on a cluster store yet (they come
//! from NATS, a later change); SQL databases are files on this machine.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::{Backend, BackendLease, BackendSubscription, BoxFuture, Done, LeaseBackend, LockBackend};
use crate::api::publish::Publish;
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::engine::channels::{Resume, Scope};
use crate::engine::locks::{Holder, Kind, Terms};
use crate::engine::tickets::Held;
use crate::net::client::LoopReader;
use crate::net::etcd::{ClusterLease, ClusterLock, Etcd};
use crate::net::wire::Address;
use crate::runtime;

pub(crate) struct Cluster {
    etcd: Arc<Etcd>,
}

impl Cluster {
    pub(crate) fn new(etcd: Arc<Etcd>) -> Cluster {
        Cluster { etcd }
    }
}

/// What a channel call on a cluster store says.
fn no_channels() -> Error {
    Error::invalid(
        "channels are not on a cluster (etcd://) store yet: on a cluster they will come from NATS JetStream (a later release); use a store opened on one machine (open(dir), unix:, tcp:, tls:) for channels, and this one for locks and fences",
    )
}

impl Backend for Cluster {
    fn is_owner(&self) -> bool {
        false
    }

    fn epoch(&self) -> u64 {
        self.etcd.epoch()
    }

    fn check_can_publish(&self) -> Result<()> {
        Err(no_channels())
    }

    fn publish(&self, _channel: &str, _branch: &[Key], _data: Box<[u8]>) -> Publish {
        Publish::done(Err(no_channels()))
    }

    fn publish_then(&self, _channel: &str, _branch: &[Key], _data: &[u8], _keep_done: &mut dyn FnMut() -> Done) -> Option<Result<()>> {
        Some(Err(no_channels()))
    }

    fn take_ticket(&self, _channels: Vec<Arc<str>>) -> Result<u64> {
        Err(no_channels())
    }

    fn end_ticket(&self, _ticket: u64, msgs: Option<Vec<Held>>) -> Result<()> {
        match msgs {
            None => Ok(()),
            Some(_) => Err(no_channels()),
        }
    }

    fn subscribe<'a>(&'a self, _channel: &'a str, _branch: &'a [Key], _scope: Scope, _resume: Option<Resume>) -> BoxFuture<'a, Result<BackendSubscription>> {
        Box::pin(std::future::ready(Err(no_channels())))
    }

    fn lock<'a>(&'a self, name: &'a str, kind: Kind) -> BoxFuture<'a, Result<Arc<dyn LockBackend>>> {
        Box::pin(async move { Ok(Arc::new(ClusterLockHandle(self.etcd.lock(name, kind).await?)) as Arc<dyn LockBackend>) })
    }

    fn status_json(&self, _dir: &Path) -> Result<serde_json::Value> {
        self.etcd.check_open()?;
        runtime::block_on(self.etcd.status())
    }

    fn shutdown_owner(&self) -> Result<()> {
        Err(Error::invalid("a cluster store has no owner process to stop: stop etcd's members to stop the cluster"))
    }

    /// SQL databases of a cluster store are files on this machine, in the
    /// directory the store was given (made here on first use).
    fn check_files_here(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(&format!("could not make {} for this cluster store's SQL databases on this machine", dir.display()), e))
    }

    fn serve(&self, _address: &Address, _tls_files: Option<(&Path, &Path)>, _shutdown: Option<Arc<tokio::sync::Notify>>) -> Result<()> {
        Err(Error::invalid("a cluster store is served by its etcd members: there is nothing for this process to serve"))
    }

    fn on_shutdown(&self, _n: Arc<tokio::sync::Notify>) {}

    fn loop_reader(&self) -> Option<LoopReader> {
        None
    }

    fn settle(&self, _limit: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Revokes this process's etcd leases: its keys are let go at once.
    fn close(&self, _dir: &Path) {
        let etcd = self.etcd.clone();
        if tokio::task::try_id().is_some() {
            runtime::spawn(async move { etcd.close().await });
        } else {
            runtime::block_on(etcd.close());
        }
    }
}

/// A lock or semaphore in etcd.
struct ClusterLockHandle(Arc<ClusterLock>);

fn cluster(l: Arc<ClusterLease>) -> BackendLease {
    Arc::new(ClusterLeaseHandle(l))
}

impl LockBackend for ClusterLockHandle {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn kind(&self) -> Kind {
        self.0.kind()
    }

    fn acquire(&self, key: Key, holder: Holder, terms: Terms, wait: Duration) -> BoxFuture<'_, Result<BackendLease>> {
        Box::pin(async move {
            self.0.acquire(key, holder, terms, Some(wait)).await?.map(cluster).ok_or_else(|| Error::internal("a wait on the cluster ended with no lease"))
        })
    }

    /// Never at once: every hold is a transaction in etcd.
    fn acquire_now(&self, _key: &Key, _holder: Holder, _terms: Terms) -> Result<Option<BackendLease>> {
        Ok(None)
    }

    fn try_acquire(&self, key: Key, holder: Holder, terms: Terms) -> BoxFuture<'_, Result<Option<BackendLease>>> {
        Box::pin(async move { Ok(self.0.acquire(key, holder, terms, None).await?.map(cluster)) })
    }
}

struct ClusterLeaseHandle(Arc<ClusterLease>);

impl LeaseBackend for ClusterLeaseHandle {
    fn id(&self) -> u64 {
        self.0.id()
    }
    fn fence(&self) -> Option<Fence> {
        self.0.fence()
    }
    fn key(&self) -> &Key {
        self.0.key()
    }
    fn is_lost(&self) -> bool {
        self.0.is_lost()
    }
    fn lost(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.lost())
    }
    fn on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        self.0.on_lost(f)
    }
    fn renew(&self) -> Result<()> {
        self.0.renew()
    }
    fn time_left(&self) -> Option<Duration> {
        self.0.time_left()
    }
    fn release(&self) -> BoxFuture<'static, Result<()>> {
        self.0.release()
    }
    fn lost_error(&self) -> Error {
        self.0.lost_error()
    }
}
