//! A subscription as a store gives it, read by pulling, so each language
//! runs its handler on its own event loop.

use std::future::poll_fn;
use std::task::{Context, Poll};

use crate::api::backend::SubscriptionBackend;
use crate::engine::channels::{Event, Resume};

/// A subscription of the engine, read by pulling: [`next`](Self::next) (async),
/// [`try_next`](Self::try_next) or [`next_batch`](Self::next_batch).
///
/// This is the boundary the language bindings build on; Rust programs use
/// [`Subscription`](crate::Subscription) instead. Dropping it stops it.
pub struct RawSubscription {
    inner: Box<dyn SubscriptionBackend>,
}

impl RawSubscription {
    pub(crate) fn new(inner: Box<dyn SubscriptionBackend>) -> RawSubscription {
        RawSubscription { inner }
    }

    /// Where a resumed subscription would go on from (in the owning process).
    pub fn resume_point(&self) -> Resume {
        self.inner.resume_point()
    }

    /// The next event if one is ready now; `None` if nothing is ready (see
    /// [`is_ended`](Self::is_ended) to tell an ended subscription).
    pub fn try_next(&self) -> Option<Event> {
        match self.inner.read(None) {
            Poll::Ready(e) => e,
            Poll::Pending => None,
        }
    }

    /// The next event; `None` once the subscription is stopped or its store closed.
    pub async fn next(&self) -> Option<Event> {
        poll_fn(|cx| self.inner.read(Some(cx))).await
    }

    /// Waits for at least one event, then takes up to `max` that are ready.
    /// Empty once the subscription is stopped or its store closed.
    pub async fn next_batch(&self, max: usize) -> Vec<Event> {
        let Some(first) = self.next().await else { return Vec::new() };
        let mut out = vec![first];
        self.inner.read_ready(&mut out, max);
        out
    }

    /// The events ready now, appended to `out` until it holds `max`
    /// events; none when nothing is ready or the subscription ended (see
    /// [`is_ended`](Self::is_ended)). One look for a burst instead of a
    /// [`try_next`](Self::try_next) each.
    pub fn read_ready(&self, out: &mut Vec<Event>, max: usize) {
        self.inner.read_ready(out, max)
    }

    /// Polls for the next event: `Ready(None)` once ended.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.inner.read(Some(cx))
    }

    /// True once stopped, or once its store closed and everything was read.
    pub fn is_ended(&self) -> bool {
        self.inner.is_ended()
    }

    /// Stops the subscription: a pending `next` returns `None`, and the
    /// branch no longer keeps messages for it. Idempotent.
    pub fn stop(&self) {
        self.inner.stop()
    }
}

impl Drop for RawSubscription {
    fn drop(&mut self) {
        self.stop();
    }
}
