//! The connected backend: another process owns the store; every call goes
//! to it over the [`Client`]'s connection.

use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{Backend, BackendLease, BackendSubscription, BoxFuture, BurstPart, Done, LeaseBackend, LockBackend, SubscriptionBackend};
use crate::base::limits::MAX_MESSAGE_BYTES;
use crate::api::publish::Publish;
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::engine::channels::{Event, Resume, Scope, check_message};
use crate::engine::locks::{Holder, Kind, Terms};
use crate::engine::tickets::Held;
use crate::net::client::{Client, LoopReader, RemoteLeaseHandle, RemoteSub, raw_json};
use crate::net::files::owner_lock_held_here;
use crate::net::wire::{Address, MAX_BURST_MESSAGES};
use crate::runtime;

pub(crate) struct Connected {
    client: Arc<Client>,
}

impl Connected {
    pub(crate) fn new(client: Arc<Client>) -> Connected {
        Connected { client }
    }
}

impl Backend for Connected {
    fn is_owner(&self) -> bool {
        false
    }

    fn epoch(&self) -> u64 {
        self.client.epoch()
    }

    /// Waits for a connection being re-established, up to the request timeout.
    fn check_can_publish(&self) -> Result<()> {
        self.client.wait_connected()
    }

    fn publish(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Publish {
        match check_message(&data).and_then(|_| self.client.publish_send(channel, branch, &data)) {
            Ok((rx, lead)) => Publish::waiting(rx, lead),
            Err(e) => Publish::done(Err(e)),
        }
    }

    /// Every message is checked as JSON before any leaves; then the burst
    /// goes in requests of at most 1,024 messages and 1 MiB, each answered
    /// once. While the connection is down, one publish a message instead,
    /// queued for the reconnect in order (STORE-02).
    fn publish_burst(&self, channel: &str, branch: &[Key], data: Vec<Box<[u8]>>) -> std::result::Result<Vec<BurstPart>, (usize, Error)> {
        let raws = data.iter().enumerate().map(|(i, d)| raw_json(d).map_err(|e| (i, e))).collect::<std::result::Result<Vec<_>, _>>()?;
        let one = |i: usize| match self.client.publish_send(channel, branch, &data[i]) {
            Ok((rx, lead)) => Publish::waiting(rx, lead),
            Err(e) => Publish::done(Err(e)),
        };
        let mut parts = Vec::new();
        let mut start = 0;
        while start < raws.len() {
            let (mut end, mut bytes) = (start + 1, raws[start].get().len());
            while end < raws.len() && end - start < MAX_BURST_MESSAGES && bytes + raws[end].get().len() <= MAX_MESSAGE_BYTES {
                bytes += raws[end].get().len();
                end += 1;
            }
            if end - start == 1 {
                parts.push((start, 1, one(start)));
            } else {
                match self.client.publish_burst_send(channel, branch, &raws[start..end]) {
                    Ok(Some((rx, lead))) => parts.push((start, end - start, Publish::waiting(rx, lead))),
                    Ok(None) => {
                        parts.extend((start..raws.len()).map(|i| (i, 1, one(i))));
                        break;
                    }
                    Err(e) => parts.push((start, end - start, Publish::done(Err(e)))),
                }
            }
            start = end;
        }
        Ok(parts)
    }

    fn publish_then(&self, channel: &str, branch: &[Key], data: &[u8], keep_done: &mut dyn FnMut() -> Done) -> Option<Result<()>> {
        match check_message(data).and_then(|_| self.client.publish_then(channel, branch, data, keep_done())) {
            Ok(()) => None,
            Err(e) => Some(Err(e)),
        }
    }

    fn checks_json(&self) -> bool {
        true
    }

    fn take_ticket(&self, channels: Vec<Arc<str>>) -> Result<u64> {
        runtime::block_on(self.client.take_ticket(&channels))
    }

    fn end_ticket(&self, ticket: u64, msgs: Option<Vec<Held>>) -> Result<()> {
        if let Some(m) = &msgs {
            m.iter().try_for_each(|m| check_message(&m.data))?;
        }
        runtime::block_on(self.client.end_ticket(ticket, msgs))
    }

    fn subscribe<'a>(&'a self, channel: &'a str, branch: &'a [Key], scope: Scope, _resume: Option<Resume>) -> BoxFuture<'a, Result<BackendSubscription>> {
        Box::pin(async move {
            let sub = self.client.subscribe(channel, branch, scope).await?;
            Ok(Box::new(ConnectedSubscription(sub)) as BackendSubscription)
        })
    }

    fn lock<'a>(&'a self, name: &'a str, kind: Kind) -> BoxFuture<'a, Result<Arc<dyn LockBackend>>> {
        Box::pin(async move {
            self.client.declare_async(name, kind).await?;
            Ok(Arc::new(ConnectedLock { client: self.client.clone(), name: name.to_owned(), kind }) as Arc<dyn LockBackend>)
        })
    }

    fn status_json(&self, _dir: &Path) -> Result<serde_json::Value> {
        self.client.status()
    }

    fn shutdown_owner(&self) -> Result<()> {
        self.client.shutdown_owner()
    }

    /// Only where the owner holds `<dir>/owner.lock` on this machine: over
    /// `tcp:` or `tls:` from another machine the same path would be another
    /// file, or none (SQL runs next to the store).
    fn check_files_here(&self, dir: &Path) -> Result<()> {
        if owner_lock_held_here(dir) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "the store's directory {} is not on this machine (no owner holds {} here): its SQL databases are files next to the store, so run SQL in a process on the owner's machine",
            dir.display(),
            dir.join("owner.lock").display()
        )))
    }

    fn serve(&self, _address: &Address, _tls_files: Option<(&Path, &Path)>, _shutdown: Option<Arc<tokio::sync::Notify>>) -> Result<()> {
        Err(Error::invalid("only the process that owns the store serves it; this one is connected"))
    }

    fn on_shutdown(&self, _n: Arc<tokio::sync::Notify>) {}

    fn loop_reader(&self) -> Option<LoopReader> {
        LoopReader::of(&self.client)
    }

    fn settle(&self, limit: Duration) -> BoxFuture<'_, ()> {
        Box::pin(self.client.settle_publishes(limit))
    }

    fn close(&self, _dir: &Path) {
        self.client.close()
    }
}

/// A lock of the owner: each hold is a request over the connection, its
/// lease renewed every third of its ttl (LOCK-05).
struct ConnectedLock {
    client: Arc<Client>,
    name: String,
    kind: Kind,
}

fn remote(h: RemoteLeaseHandle) -> BackendLease {
    Arc::new(h)
}

impl LockBackend for ConnectedLock {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> Kind {
        self.kind
    }

    fn acquire(&self, key: Key, holder: Holder, terms: Terms, wait: Duration) -> BoxFuture<'_, Result<BackendLease>> {
        Box::pin(async move {
            self.client
                .acquire(&self.name, self.kind, &key, holder, terms, Some(wait))
                .await?
                .map(remote)
                .ok_or_else(|| Error::internal("the store answered a wait with no lease"))
        })
    }

    /// Never at once over a connection: every hold asks the owner.
    fn acquire_now(&self, _key: &Key, _holder: Holder, _terms: Terms) -> Result<Option<BackendLease>> {
        Ok(None)
    }

    fn try_acquire(&self, key: Key, holder: Holder, terms: Terms) -> BoxFuture<'_, Result<Option<BackendLease>>> {
        Box::pin(async move { Ok(self.client.acquire(&self.name, self.kind, &key, holder, terms, None).await?.map(remote)) })
    }
}

impl LeaseBackend for RemoteLeaseHandle {
    fn id(&self) -> u64 {
        RemoteLeaseHandle::id(self)
    }
    fn fence(&self) -> Option<Fence> {
        RemoteLeaseHandle::fence(self)
    }
    fn key(&self) -> &Key {
        RemoteLeaseHandle::key(self)
    }
    fn is_lost(&self) -> bool {
        RemoteLeaseHandle::is_lost(self)
    }
    fn lost(&self) -> BoxFuture<'_, ()> {
        Box::pin(RemoteLeaseHandle::lost(self))
    }
    fn on_lost(&self, f: Box<dyn FnOnce() + Send>) {
        RemoteLeaseHandle::on_lost(self, f)
    }
    fn renew(&self) -> Result<()> {
        RemoteLeaseHandle::renew(self)
    }
    fn time_left(&self) -> Option<Duration> {
        RemoteLeaseHandle::time_left(self)
    }
    fn release(&self) -> BoxFuture<'static, Result<()>> {
        RemoteLeaseHandle::release(self)
    }
    fn lost_error(&self) -> Error {
        RemoteLeaseHandle::lost_error(self)
    }
}

/// A subscription of the owner's, its events pushed over the connection.
struct ConnectedSubscription(Arc<RemoteSub>);

impl SubscriptionBackend for ConnectedSubscription {
    fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        self.0.read(cx)
    }
    fn read_ready(&self, out: &mut Vec<Event>, max: usize) {
        self.0.read_ready(out, max)
    }
    fn is_ended(&self) -> bool {
        self.0.is_ended()
    }
    fn stop(&self) {
        self.0.stop()
    }
    /// The owner keeps the position: nothing to resume from here.
    fn resume_point(&self) -> Resume {
        Resume { log: 0, next: 0 }
    }
}
