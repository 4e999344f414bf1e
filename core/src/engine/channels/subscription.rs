//! A subscription as the engine keeps it: a cursor into one log, read by
//! pulling, so each language runs its handler on its own event loop.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;

use super::log::{Log, Msg, Read};
use super::{Channels, Node, Resume, Scope};

/// Why a subscription missed messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MissedReason {
    /// It fell behind the branch's log: the oldest messages left before it read them.
    Behind,
    /// Its connection to the store dropped, or the store restarted.
    Reconnect,
}

impl MissedReason {
    /// `"behind"` or `"reconnect"`.
    pub fn as_str(self) -> &'static str {
        match self {
            MissedReason::Behind => "behind",
            MissedReason::Reconnect => "reconnect",
        }
    }
}

/// Messages a subscription will never get (CHAN-02, CHAN-04).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Missed {
    /// How many; `None` where it cannot be known (the store restarted).
    pub count: Option<u64>,
    /// Why.
    pub reason: MissedReason,
}

/// What a subscription reads next: a message, or word of missed ones.
#[derive(Debug, Clone)]
pub enum Event {
    /// A message; its `data` is the JSON that was published.
    Message(Arc<Msg>),
    /// Messages missed just before the next one.
    Missed(Missed),
}

struct State {
    cursor: u64,
    /// Set by a resume: the first miss is then the reconnect's, not lag.
    resumed: bool,
    /// Told once before anything else (a resume the store could not place).
    told: Option<Missed>,
    stopped: bool,
    waker: Option<std::task::Waker>,
}

pub(super) struct Shared {
    channels: Arc<Channels>,
    channel: Arc<str>,
    node: Arc<Node>,
    log: Arc<Log>,
    log_id: u64,
    scope: Scope,
    state: Mutex<State>,
}

/// A subscription of the engine, read by pulling: [`next`](Self::next) (async),
/// [`try_next`](Self::try_next) or [`next_batch`](Self::next_batch).
///
/// This is the boundary the language bindings build on; Rust programs use
/// [`Subscription`](crate::Subscription) instead. Dropping it stops it.
pub struct RawSubscription {
    src: Src,
}

enum Src {
    Local(Arc<Shared>),
    Remote(Arc<crate::net::client::RemoteSub>),
}

impl RawSubscription {
    pub(crate) fn remote(sub: Arc<crate::net::client::RemoteSub>) -> RawSubscription {
        RawSubscription { src: Src::Remote(sub) }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        channels: Arc<Channels>,
        channel: Arc<str>,
        node: Arc<Node>,
        log: Arc<Log>,
        log_id: u64,
        scope: Scope,
        cursor: u64,
        resumed: bool,
    ) -> RawSubscription {
        RawSubscription {
            src: Src::Local(Arc::new(Shared {
                channels,
                channel,
                node,
                log,
                log_id,
                scope,
                state: Mutex::new(State { cursor, resumed, told: None, stopped: false, waker: None }),
            })),
        }
    }

    /// A handle `status` uses to see how far behind this subscription is.
    pub(super) fn probe(&self) -> Option<std::sync::Weak<Shared>> {
        match &self.src {
            Src::Local(s) => Some(Arc::downgrade(s)),
            Src::Remote(_) => None,
        }
    }

    pub(crate) fn tell_first(&self, missed: Missed) {
        if let Src::Local(s) = &self.src {
            s.state.lock().told = Some(missed);
        }
    }

    /// Where a resumed subscription would go on from (in the owning process).
    pub fn resume_point(&self) -> Resume {
        match &self.src {
            Src::Local(s) => Resume { log: s.log_id, next: s.state.lock().cursor },
            Src::Remote(_) => Resume { log: 0, next: 0 },
        }
    }

    /// The next event if one is ready now; `None` if nothing is ready (see
    /// [`is_ended`](Self::is_ended) to tell an ended subscription).
    pub fn try_next(&self) -> Option<Event> {
        match self.read(None) {
            Poll::Ready(e) => e,
            Poll::Pending => None,
        }
    }

    /// The next event; `None` once the subscription is stopped or its store closed.
    pub async fn next(&self) -> Option<Event> {
        poll_fn(|cx| self.read(Some(cx))).await
    }

    /// Waits for at least one event, then takes up to `max` that are ready.
    /// Empty once the subscription is stopped or its store closed.
    pub async fn next_batch(&self, max: usize) -> Vec<Event> {
        let Some(first) = self.next().await else { return Vec::new() };
        let mut out = vec![first];
        while out.len() < max {
            match self.try_next() {
                Some(e) => out.push(e),
                None => break,
            }
        }
        out
    }

    /// Polls for the next event: `Ready(None)` once ended.
    pub fn poll_next(&self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        self.read(Some(cx))
    }

    fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        match &self.src {
            Src::Local(s) => Self::read_local(s, cx),
            Src::Remote(r) => r.read(cx),
        }
    }

    fn read_local(shared: &Shared, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        let mut st = shared.state.lock();
        if st.stopped {
            return Poll::Ready(None);
        }
        if let Some(m) = st.told.take() {
            st.resumed = false;
            return Poll::Ready(Some(Event::Missed(m)));
        }
        let mut cursor = st.cursor;
        let r = match &cx {
            Some(cx) => shared.log.read_or_wait(&mut cursor, cx.waker()),
            None => shared.log.read(&mut cursor),
        };
        st.cursor = cursor;
        match r {
            Read::Msg(m) => {
                st.resumed = false;
                Poll::Ready(Some(Event::Message(m)))
            }
            Read::Missed(n) => {
                let reason = if std::mem::take(&mut st.resumed) { MissedReason::Reconnect } else { MissedReason::Behind };
                Poll::Ready(Some(Event::Missed(Missed { count: Some(n), reason })))
            }
            Read::Closed => Poll::Ready(None),
            Read::Empty => {
                if let Some(cx) = cx {
                    st.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    /// True once stopped, or once its store closed and everything was read.
    pub fn is_ended(&self) -> bool {
        match &self.src {
            Src::Local(s) => {
                let st = s.state.lock();
                st.stopped || (st.told.is_none() && matches!(s.log.read(&mut st.cursor.clone()), Read::Closed))
            }
            Src::Remote(r) => r.is_ended(),
        }
    }

    /// Stops the subscription: a pending `next` returns `None`, and the
    /// branch no longer keeps messages for it. Idempotent.
    pub fn stop(&self) {
        let s = match &self.src {
            Src::Local(s) => s,
            Src::Remote(r) => return r.stop(),
        };
        let waker = {
            let mut st = s.state.lock();
            if st.stopped {
                return;
            }
            st.stopped = true;
            st.waker.take()
        };
        s.channels.unsubscribed(&s.channel, &s.node, &s.log, s.scope);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Shared {
    /// Messages published to its log that it has not read yet.
    pub(super) fn lag(&self) -> u64 {
        let st = self.state.lock();
        if st.stopped {
            return 0;
        }
        self.log.next_position().saturating_sub(st.cursor)
    }
}

impl Drop for RawSubscription {
    fn drop(&mut self) {
        self.stop();
    }
}
