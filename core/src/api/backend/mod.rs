//! The one place a store's backend is chosen: a [`Backend`] is picked at
//! `open` or `connect`, and every call of a [`Store`](crate::Store) and its
//! handles goes through it. [`owned`] serves the store from this process's
//! engine; [`connected`] reaches another process's over the client;
//! [`cluster`] keeps the store's locks in an etcd cluster.
//!
//! The traits name no handle of the api: a backend gives a lease or a
//! subscription as its own object, and the handle
//! ([`RawLease`](crate::locks::RawLease),
//! [`RawSubscription`](crate::channels::RawSubscription)) wraps it, so the
//! handles import this module and not the other way round.

pub(crate) mod cluster;
pub(crate) mod connected;
pub(crate) mod owned;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::api::publish::Publish;
use crate::base::error::{Error, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::engine::channels::{Event, Resume, Scope};
use crate::engine::locks::{Holder, Kind, Terms};
use crate::engine::tickets::Held;
use crate::net::client::LoopReader;
use crate::net::nats::Jet;
use crate::net::wire::Address;

/// The function a publish's outcome is given to, once.
pub(crate) type Done = Box<dyn FnOnce(Result<()>) + Send>;

/// A future a backend gives back, boxed so the traits stay object safe.
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A part of a burst as a backend sent it ([`Backend::publish_burst`]):
/// its first message's index, how many messages, and their publish.
pub(crate) type BurstPart = (usize, usize, Publish);

/// A lease as a backend gives it, for a `RawLease` to wrap.
pub(crate) type BackendLease = Arc<dyn LeaseBackend>;

/// A subscription as a backend gives it, for a `RawSubscription` to wrap.
pub(crate) type BackendSubscription = Box<dyn SubscriptionBackend>;

/// Where a store's calls go. Names, keys and the store's own open state are
/// checked by [`Store`](crate::Store) before a call reaches it.
pub(crate) trait Backend: Send + Sync {
    /// True when this process owns the store.
    fn is_owner(&self) -> bool;
    /// The owner's epoch: the high 64 bits of every fence.
    fn epoch(&self) -> u64;
    /// Ok while a publish could leave now (connected: while the connection is up).
    fn check_can_publish(&self) -> Result<()>;
    /// True when this backend checks that a raw publish's bytes are one
    /// JSON value itself (so the store does not check them twice).
    fn checks_json(&self) -> bool {
        false
    }
    /// Publishes checked JSON bytes; the future resolves once the store has them.
    fn publish(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Publish;
    /// Publishes a burst of checked messages to one branch, in their order
    /// (names, keys, sizes and nesting checked by the store): the parts
    /// it went in, each as (its first message's index, how many, the
    /// publish that resolves once the store has them all). `Err` names a
    /// message refused before any left. By default one publish a message.
    fn publish_burst(&self, channel: &str, branch: &[Key], data: Vec<Box<[u8]>>) -> std::result::Result<Vec<BurstPart>, (usize, Error)> {
        Ok(data.into_iter().enumerate().map(|(i, d)| (i, 1, self.publish(channel, branch, d))).collect())
    }
    /// As [`publish`](Self::publish), the outcome given to the function
    /// `keep_done()` gives, unless it is known within this call: then `Some`,
    /// and `keep_done` is not called.
    fn publish_then(&self, channel: &str, branch: &[Key], data: &[u8], keep_done: &mut dyn FnMut() -> Done) -> Option<Result<()>>;
    /// A ticket for a transaction's messages to `channels`, taken before
    /// its commit while it holds the database's write lock (CHAN-03).
    fn take_ticket(&self, channels: Vec<Arc<str>>) -> Result<u64>;
    /// Ends a ticket after the commit: the store delivers `msgs` after the
    /// earlier tickets' (`None`: gives it up, the commit failed).
    fn end_ticket(&self, ticket: u64, msgs: Option<Vec<Held>>) -> Result<()>;
    /// Subscribes; resolves once the store has the subscription.
    fn subscribe<'a>(&'a self, channel: &'a str, branch: &'a [Key], scope: Scope, resume: Option<Resume>) -> BoxFuture<'a, Result<BackendSubscription>>;
    /// The lock or semaphore `name` of `kind`, declared with the store.
    fn lock<'a>(&'a self, name: &'a str, kind: Kind) -> BoxFuture<'a, Result<Arc<dyn LockBackend>>>;
    /// The status as JSON, with the owner's connections.
    fn status_json(&self, dir: &Path) -> Result<serde_json::Value>;
    /// Asks the owner to stop (`tinystore stop`).
    fn shutdown_owner(&self) -> Result<()>;
    /// Ok where the store's files (its SQL databases) are reachable from here.
    fn check_files_here(&self, dir: &Path) -> Result<()>;
    /// Serves the store on `address` too (only an owner serves).
    fn serve(&self, address: &Address, tls_files: Option<(&Path, &Path)>, shutdown: Option<Arc<tokio::sync::Notify>>) -> Result<()>;
    /// Lets clients stop this owner: `n` is notified then.
    fn on_shutdown(&self, n: Arc<tokio::sync::Notify>);
    /// The connection's socket for a language's event loop, where there is one.
    fn loop_reader(&self) -> Option<LoopReader>;
    /// Waits (up to `limit`) for the answers of publishes already sent.
    fn settle(&self, limit: Duration) -> BoxFuture<'_, ()>;
    /// Closes: subscriptions end, leases are let go or lost. Idempotent.
    fn close(&self, dir: &Path);
    /// The NATS channels of a cluster store: a transaction's messages go
    /// through its database's outbox (`api/outbox.rs`) instead of a ticket.
    fn nats(&self) -> Option<Arc<Jet>> {
        None
    }
}

/// A lock or semaphore as a backend holds it.
pub(crate) trait LockBackend: Send + Sync {
    fn name(&self) -> &str;
    fn kind(&self) -> Kind;
    /// Takes `key`, waiting up to `wait` in line (LOCK-03).
    fn acquire(&self, key: Key, holder: Holder, terms: Terms, wait: Duration) -> BoxFuture<'_, Result<BackendLease>>;
    /// Takes `key` at once if free and nobody waits; `None` to wait in line.
    fn acquire_now(&self, key: &Key, holder: Holder, terms: Terms) -> Result<Option<BackendLease>>;
    /// Takes `key` if it is free now; `None` otherwise.
    fn try_acquire(&self, key: Key, holder: Holder, terms: Terms) -> BoxFuture<'_, Result<Option<BackendLease>>>;
}

/// A lease as a backend holds it.
pub(crate) trait LeaseBackend: Send + Sync {
    fn id(&self) -> u64;
    fn fence(&self) -> Option<Fence>;
    fn key(&self) -> &Key;
    fn is_lost(&self) -> bool;
    fn lost(&self) -> BoxFuture<'_, ()>;
    fn on_lost(&self, f: Box<dyn FnOnce() + Send>);
    fn renew(&self) -> Result<()>;
    fn time_left(&self) -> Option<Duration>;
    /// Lets the key go, started within this call (later calls on the
    /// connection follow it); the future resolves once the store let the
    /// key go (LOCK-01). `lost` if the lease had been lost. Idempotent.
    fn release(&self) -> BoxFuture<'static, Result<()>>;
    fn lost_error(&self) -> Error;
}

/// A subscription as a backend holds it, read by pulling.
pub(crate) trait SubscriptionBackend: Send + Sync {
    fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>>;
    /// The events ready now, appended to `out` until it holds `max`.
    fn read_ready(&self, out: &mut Vec<Event>, max: usize) {
        while out.len() < max {
            match self.read(None) {
                Poll::Ready(Some(e)) => out.push(e),
                _ => break,
            }
        }
    }
    fn is_ended(&self) -> bool;
    fn stop(&self);
    fn resume_point(&self) -> Resume;
}
