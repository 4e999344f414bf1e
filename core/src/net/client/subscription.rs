//! A subscription over the wire: the events the owner pushes land in a
//! bounded inbox, read by pulling like a subscription of the engine.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use std::collections::VecDeque;

use super::Client;
use crate::base::key::Key;
use crate::base::limits::{BRANCH_LOG_BYTES, BRANCH_LOG_MESSAGES};
use crate::engine::channels::{Event, Missed, MissedReason, Scope};
use crate::runtime;

/// A message's branch as its JSON and as keys.
pub(super) type LastBranch = (Box<[u8]>, Arc<[Key]>);

/// A subscription over the wire: events land in a bounded inbox read by pulling.
pub(crate) struct RemoteSub {
    pub(super) id: u64,
    pub(super) client: std::sync::Weak<Client>,
    pub(super) channel: String,
    pub(super) branch: Vec<Key>,
    pub(super) scope: Scope,
    pub(super) inbox: Inbox,
    /// (epoch, log, next) of the last event read from the socket.
    pub(super) resume: Mutex<Option<(u64, u64, u64)>>,
    /// The last message's branch, as its JSON and as keys: the messages of
    /// a subscription mostly share one, read once then.
    pub(super) last_branch: Mutex<Option<LastBranch>>,
}

impl RemoteSub {
    /// The keys of a message's `branch` (its JSON array); `None` when it is
    /// not an array of keys.
    pub(super) fn branch_of(&self, json: &[u8]) -> Option<Arc<[Key]>> {
        let mut last = self.last_branch.lock();
        if let Some((bytes, keys)) = &*last
            && **bytes == *json
        {
            return Some(keys.clone());
        }
        let keys: Arc<[Key]> = serde_json::from_slice::<Vec<Key>>(json).ok()?.into();
        *last = Some((json.into(), keys.clone()));
        Some(keys)
    }

    pub(super) fn note_position(&self, epoch: u64, next: Option<u64>) {
        if let Some(n) = next {
            let mut r = self.resume.lock();
            let log = r.map_or(0, |x| x.1);
            *r = Some((epoch, log, n));
        }
    }

    pub(crate) fn set_log(&self, epoch: u64, log: u64, next: u64) {
        *self.resume.lock() = Some((epoch, log, next));
    }

    pub(crate) fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        let waiting = cx.is_some();
        let p = self.inbox.read(cx);
        if waiting && p.is_pending() {
            runtime::read_while_blocked(|| self.client.upgrade()?.current().ok()?.blocked_reader());
        }
        p
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.inbox.is_ended()
    }

    /// The events queued now, appended to `out` until it holds `max`.
    pub(crate) fn read_ready(&self, out: &mut Vec<Event>, max: usize) {
        self.inbox.read_ready(out, max)
    }

    pub(crate) fn stop(&self) {
        if self.inbox.stop()
            && let Some(c) = self.client.upgrade()
        {
            c.unsubscribe(self.id);
        }
    }
}

/// The client's side of a subscription's log: bounded like a branch's log
/// (1,024 messages or 4 MiB); what it drops is counted, never lost silently.
#[derive(Default)]
pub(crate) struct Inbox {
    pub(super) s: Mutex<InboxState>,
}

#[derive(Default)]
pub(super) struct InboxState {
    pub(super) queue: VecDeque<Event>,
    pub(super) bytes: usize,
    pub(super) messages: usize,
    pub(super) waker: Option<Waker>,
    pub(super) ended: bool,
    pub(super) stopped: bool,
}

impl InboxState {
    /// Queues `ev`, dropping the oldest messages past the bound (counted
    /// as missed, told just before the next one).
    fn push(&mut self, ev: Event) {
        let s = self;
        if let Event::Message(m) = &ev {
            s.bytes += m.data.len();
            s.messages += 1;
        }
        s.queue.push_back(ev);
        let mut dropped: Option<Missed> = None;
        while s.messages > BRANCH_LOG_MESSAGES || (s.bytes > BRANCH_LOG_BYTES && s.messages > 1) {
            match s.queue.pop_front() {
                Some(Event::Message(m)) => {
                    s.bytes -= m.data.len();
                    s.messages -= 1;
                    dropped = Some(merge(dropped, Missed { count: Some(1), reason: MissedReason::Behind }));
                }
                Some(Event::Missed(m)) => dropped = Some(merge(dropped, m)),
                None => break,
            }
        }
        if let Some(m) = dropped {
            // Anything missed just after the dropped ones belongs to the same gap.
            let m = match s.queue.front() {
                Some(Event::Missed(n)) => {
                    let n = *n;
                    s.queue.pop_front();
                    merge(Some(m), n)
                }
                _ => m,
            };
            s.queue.push_front(Event::Missed(m));
        }
    }
}

impl Inbox {
    pub(super) fn push(&self, ev: Event) {
        let waker = {
            let mut s = self.s.lock();
            if s.stopped {
                return;
            }
            s.push(ev);
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// [`push`](Self::push) of each of `events` (emptied), in order, under
    /// one lock and with one wake-up.
    pub(super) fn push_all(&self, events: &mut Vec<Event>) {
        let waker = {
            let mut s = self.s.lock();
            if s.stopped {
                events.clear();
                return;
            }
            for ev in events.drain(..) {
                s.push(ev);
            }
            s.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    pub(super) fn read(&self, cx: Option<&mut Context<'_>>) -> Poll<Option<Event>> {
        let mut s = self.s.lock();
        if s.stopped {
            return Poll::Ready(None);
        }
        if let Some(ev) = s.queue.pop_front() {
            if let Event::Message(m) = &ev {
                s.bytes -= m.data.len();
                s.messages -= 1;
            }
            return Poll::Ready(Some(ev));
        }
        if s.ended {
            return Poll::Ready(None);
        }
        if let Some(cx) = cx {
            s.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// The events queued now, appended to `out` until it holds `max`.
    pub(super) fn read_ready(&self, out: &mut Vec<Event>, max: usize) {
        let mut s = self.s.lock();
        if s.stopped {
            return;
        }
        while out.len() < max {
            let Some(ev) = s.queue.pop_front() else { break };
            if let Event::Message(m) = &ev {
                s.bytes -= m.data.len();
                s.messages -= 1;
            }
            out.push(ev);
        }
    }

    pub(super) fn is_ended(&self) -> bool {
        let s = self.s.lock();
        s.stopped || (s.ended && s.queue.is_empty())
    }

    pub(super) fn end(&self) {
        let w = {
            let mut s = self.s.lock();
            s.ended = true;
            s.waker.take()
        };
        if let Some(w) = w {
            w.wake();
        }
    }

    /// True the first time.
    pub(super) fn stop(&self) -> bool {
        let (first, w) = {
            let mut s = self.s.lock();
            let first = !s.stopped;
            s.stopped = true;
            s.queue.clear();
            (first, s.waker.take())
        };
        if let Some(w) = w {
            w.wake();
        }
        first
    }
}

pub(super) fn merge(a: Option<Missed>, b: Missed) -> Missed {
    match a {
        None => b,
        Some(a) => Missed {
            count: a.count.zip(b.count).map(|(x, y)| x + y),
            reason: if a.reason == MissedReason::Reconnect || b.reason == MissedReason::Reconnect {
                MissedReason::Reconnect
            } else {
                MissedReason::Behind
            },
        },
    }
}

