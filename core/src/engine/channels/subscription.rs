//! A subscription as the engine keeps it: a cursor into one log, read by
//! pulling, so each language runs its handler on its own event loop.

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

/// A subscription of the engine, read by pulling: a cursor into one branch
/// log. The api layer's [`RawSubscription`](crate::channels::RawSubscription)
/// wraps it in the owning process; the server forwards it to a connection.
/// Dropping it stops it.
pub(crate) struct LocalSubscription {
    shared: Arc<Shared>,
}

impl LocalSubscription {
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
    ) -> LocalSubscription {
        LocalSubscription {
            shared: Arc::new(Shared {
                channels,
                channel,
                node,
                log,
                log_id,
                scope,
                state: Mutex::new(State { cursor, resumed, told: None, stopped: false, waker: None }),
            }),
        }
    }

    /// A handle `status` uses to see how far behind this subscription is.
    pub(super) fn probe(&self) -> std::sync::Weak<Shared> {
        Arc::downgrade(&self.shared)
    }

    /// Tells `missed` before anything else (a resume the store could not place).
    pub(crate) fn tell_first(&self, missed: Missed) {
        self.shared.state.lock().told = Some(missed);
    }

    /// Where a resumed subscription would go on from.
    pub(crate) fn resume_point(&self) -> Resume {
        Resume { log: self.shared.log_id, next: self.shared.state.lock().cursor }
    }

    /// The next event if one is ready now (`cx` given: woken when one is).
    pub(crate) fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        let shared = &*self.shared;
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

    /// Up to `max` events that are ready, each given to `push` with the
    /// position after it: `Ready(n)` with how many, `Ready(0)` once ended,
    /// `Pending` when none was ready (`cx` given: woken when one is). One
    /// look at the log for all of them ([`Log::read_many`]).
    pub(crate) fn read_many(&self, cx: Option<&mut Context<'_>>, max: usize, mut push: impl FnMut(Event, u64)) -> Poll<usize> {
        let shared = &*self.shared;
        let mut st = shared.state.lock();
        if st.stopped || max == 0 {
            return Poll::Ready(0);
        }
        let mut n = 0;
        if let Some(m) = st.told.take() {
            st.resumed = false;
            push(Event::Missed(m), st.cursor);
            n += 1;
        }
        let mut cursor = st.cursor;
        let mut resumed = st.resumed;
        let waker = cx.as_ref().filter(|_| n == 0).map(|c| c.waker());
        let end = shared.log.read_many(&mut cursor, waker, max - n, |r, at| {
            let ev = match r {
                Read::Msg(m) => {
                    resumed = false;
                    Event::Message(m)
                }
                Read::Missed(k) => {
                    let reason = if std::mem::take(&mut resumed) { MissedReason::Reconnect } else { MissedReason::Behind };
                    Event::Missed(Missed { count: Some(k), reason })
                }
                Read::Empty | Read::Closed => return,
            };
            push(ev, at);
            n += 1;
        });
        st.cursor = cursor;
        st.resumed = resumed;
        match end {
            _ if n > 0 => Poll::Ready(n),
            Some(Read::Empty) => {
                if let Some(cx) = cx {
                    st.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            _ => Poll::Ready(0),
        }
    }

    /// True once stopped, or once its store closed and everything was read.
    pub(crate) fn is_ended(&self) -> bool {
        let s = &self.shared;
        let st = s.state.lock();
        st.stopped || (st.told.is_none() && matches!(s.log.read(&mut st.cursor.clone()), Read::Closed))
    }

    /// Stops the subscription: a pending read ends, and the branch no
    /// longer keeps messages for it. Idempotent.
    pub(crate) fn stop(&self) {
        let s = &self.shared;
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

impl Drop for LocalSubscription {
    fn drop(&mut self) {
        self.stop();
    }
}
