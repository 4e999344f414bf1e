//! The cluster backend: the store's locks, semaphores and fences live in
//! an etcd cluster ([`Etcd`]), reached at `etcd://HOST:PORT,.../PREFIX`;
//! its channels on NATS JetStream ([`Jet`]) when the address names NATS
//! servers (`?nats=...`). No process owns it. SQL databases are files on
//! this machine.

use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{Backend, BackendLease, BackendSubscription, BoxFuture, Done, LeaseBackend, LockBackend, SubscriptionBackend};
use crate::api::publish::Publish;
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::engine::channels::{Event, Resume, Scope, check_message};
use crate::engine::locks::{Holder, Kind, Terms};
use crate::engine::tickets::Held;
use crate::net::client::LoopReader;
use crate::net::etcd::{ClusterLease, ClusterLock, Etcd};
use crate::net::nats::{Finish, Jet, NatsSubscription};
use crate::net::wire::Address;
use crate::runtime;

pub(crate) struct Cluster {
    etcd: Arc<Etcd>,
    /// The store's channels, when its address names NATS servers.
    jet: Option<Arc<Jet>>,
}

impl Cluster {
    pub(crate) fn new(etcd: Arc<Etcd>, jet: Option<Arc<Jet>>) -> Cluster {
        Cluster { etcd, jet }
    }

    fn jet(&self) -> Result<&Arc<Jet>> {
        self.jet.as_ref().ok_or_else(no_channels)
    }
}

/// What a channel call on a cluster store without NATS says.
fn no_channels() -> Error {
    Error::invalid(
        "this cluster (etcd://) store has no channels: on a cluster they come from NATS JetStream, so name its servers in the address, like etcd://10.0.0.1:2379/myapp?nats=nats://10.0.0.1:4222,10.0.0.2:4222 (docs/cluster.md); or use a store opened on one machine (open(dir), unix:, tcp:, tls:) for channels",
    )
}

/// A ticket on a cluster store: its transactions publish through their
/// database's outbox (`api/outbox.rs`), never through a ticket.
fn no_transactions() -> Error {
    Error::internal("a cluster store's transactions publish through their database's outbox, not a ticket")
}

impl Backend for Cluster {
    fn is_owner(&self) -> bool {
        false
    }

    fn epoch(&self) -> u64 {
        self.etcd.epoch()
    }

    fn check_can_publish(&self) -> Result<()> {
        self.jet()?.check_open()
    }

    /// Resolves once the stream has the message (its branch's earlier ones first).
    fn publish(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Publish {
        let jet = match self.jet() {
            Ok(j) => j,
            Err(e) => return Publish::done(Err(e)),
        };
        if let Err(e) = check_message(&data) {
            return Publish::done(Err(e));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        jet.publish(channel, branch, data, Finish::Oneshot(tx));
        Publish::waiting(rx, None)
    }

    fn publish_then(&self, channel: &str, branch: &[Key], data: &[u8], keep_done: &mut dyn FnMut() -> Done) -> Option<Result<()>> {
        let jet = match self.jet() {
            Ok(j) => j,
            Err(e) => return Some(Err(e)),
        };
        if let Err(e) = check_message(data) {
            return Some(Err(e));
        }
        jet.publish(channel, branch, data.into(), Finish::Call(keep_done()));
        None
    }

    fn take_ticket(&self, _channels: Vec<Arc<str>>) -> Result<u64> {
        self.jet()?;
        Err(no_transactions())
    }

    fn end_ticket(&self, _ticket: u64, msgs: Option<Vec<Held>>) -> Result<()> {
        match msgs {
            None => Ok(()),
            Some(_) => Err(no_transactions()),
        }
    }

    fn subscribe<'a>(&'a self, channel: &'a str, branch: &'a [Key], scope: Scope, _resume: Option<Resume>) -> BoxFuture<'a, Result<BackendSubscription>> {
        Box::pin(async move {
            let sub = self.jet()?.subscribe(channel, branch, scope).await?;
            Ok(Box::new(ClusterSubscription(sub)) as BackendSubscription)
        })
    }

    fn lock<'a>(&'a self, name: &'a str, kind: Kind) -> BoxFuture<'a, Result<Arc<dyn LockBackend>>> {
        Box::pin(async move { Ok(Arc::new(ClusterLockHandle(self.etcd.lock(name, kind).await?)) as Arc<dyn LockBackend>) })
    }

    fn status_json(&self, _dir: &Path) -> Result<serde_json::Value> {
        self.etcd.check_open()?;
        let mut v = runtime::block_on(self.etcd.status())?;
        if let Some(j) = &self.jet {
            v["cluster"]["nats"] = j.status();
            v["branches"] = runtime::block_on(j.branches_status())?.into();
            v["subscriptions"] = j.subscription_count().into();
        }
        Ok(v)
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

    fn nats(&self) -> Option<Arc<Jet>> {
        self.jet.clone()
    }

    /// Waits for the publishes taken so far to be in their streams.
    fn settle(&self, limit: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(j) = &self.jet {
                j.settle(limit).await;
            }
        })
    }

    /// Revokes this process's etcd leases: its keys are let go at once.
    /// Subscriptions end once what they hold is read.
    fn close(&self, _dir: &Path) {
        let etcd = self.etcd.clone();
        let jet = self.jet.clone();
        let both = async move {
            if let Some(j) = jet {
                j.close().await;
            }
            etcd.close().await
        };
        if tokio::task::try_id().is_some() {
            runtime::spawn(both);
        } else {
            runtime::block_on(both);
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

/// A subscription on NATS: an ordered consumer read into a bounded queue.
struct ClusterSubscription(NatsSubscription);

impl SubscriptionBackend for ClusterSubscription {
    fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        self.0.read(cx)
    }
    fn is_ended(&self) -> bool {
        self.0.is_ended()
    }
    fn stop(&self) {
        self.0.stop()
    }
    /// The subscription resumes by itself after a reconnect: nothing to keep here.
    fn resume_point(&self) -> Resume {
        Resume { log: 0, next: 0 }
    }
}
