//! A branch's log: a ring of its newest messages, read by cursors.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Weak;
use std::task::Waker;

use parking_lot::Mutex;

use crate::base::key::Key;
use crate::base::limits::{BRANCH_LOG_BYTES, BRANCH_LOG_MESSAGES};

/// One published message as the engine keeps it: shared by every log and
/// subscription that holds it, never copied.
#[derive(Debug)]
pub struct Msg {
    /// The branch it was published to (empty: the channel's root).
    pub branch: Arc<[Key]>,
    /// Its sequence in that branch: 1 for the first message, then one more each.
    pub seq: u64,
    /// The message as JSON bytes.
    pub data: Box<[u8]>,
}

struct Pushed {
    wakers: Vec<Waker>,
    evicted: (usize, usize),
    kept_at: Option<u64>,
}

/// What a cursor read.
pub(crate) enum Read {
    Msg(Arc<Msg>),
    /// The log dropped this many messages the cursor had not read.
    Missed(u64),
    Empty,
    Closed,
}

pub(crate) struct Log {
    state: Mutex<LogState>,
    budget: Arc<Budget>,
}

struct LogState {
    ring: VecDeque<Arc<Msg>>,
    /// Position of `ring[0]`; equals `next` when the ring is empty.
    first: u64,
    /// Position the next appended message gets.
    next: u64,
    bytes: usize,
    readers: usize,
    wakers: Vec<Waker>,
    closed: bool,
}

impl Log {
    pub(crate) fn new(budget: Arc<Budget>) -> Arc<Log> {
        Arc::new(Log {
            state: Mutex::new(LogState {
                ring: VecDeque::new(),
                first: 1,
                next: 1,
                bytes: 0,
                readers: 0,
                wakers: Vec::new(),
                closed: false,
            }),
            budget,
        })
    }

    /// Publishes `data` to `own` (the branch's log) and appends the same
    /// message to `trees` (recursive logs of the branch and its parents), all
    /// under `own`'s lock so every log sees one branch's messages in order.
    /// Wakes the readers and returns the message's sequence. Never waits for a
    /// reader: the oldest messages leave instead (CHAN-02).
    pub(crate) fn publish(own: &Arc<Log>, trees: &[Arc<Log>], branch: Arc<[Key]>, data: Box<[u8]>) -> u64 {
        let size = data.len();
        let mut done: smallvec::SmallVec<[(&Arc<Log>, Pushed); 2]> = smallvec::SmallVec::new();
        let seq = {
            let mut s = own.state.lock();
            let seq = s.next;
            let msg = Arc::new(Msg { branch, seq, data });
            for t in trees {
                let mut ts = t.state.lock();
                let p = Self::push(&mut ts, msg.clone());
                done.push((t, p));
            }
            let p = Self::push(&mut s, msg);
            done.push((own, p));
            seq
        };
        for (log, p) in done {
            p.wakers.into_iter().for_each(Waker::wake);
            log.budget.released(p.evicted.0, p.evicted.1);
            if let Some(pos) = p.kept_at {
                log.budget.added(log, pos, size);
            }
        }
        seq
    }

    fn push(s: &mut LogState, msg: Arc<Msg>) -> Pushed {
        let pos = s.next;
        s.next += 1;
        if s.readers == 0 || s.closed {
            s.first = s.next;
            return Pushed { wakers: Vec::new(), evicted: (0, 0), kept_at: None };
        }
        s.bytes += msg.data.len();
        s.ring.push_back(msg);
        let (mut bytes, mut count) = (0, 0);
        while s.ring.len() > BRANCH_LOG_MESSAGES || (s.bytes > BRANCH_LOG_BYTES && s.ring.len() > 1) {
            let old = s.ring.pop_front().expect("ring is not empty");
            s.bytes -= old.data.len();
            s.first += 1;
            bytes += old.data.len();
            count += 1;
        }
        Pushed { wakers: std::mem::take(&mut s.wakers), evicted: (bytes, count), kept_at: Some(pos) }
    }

    /// Reads what is at `cursor` and moves it on.
    pub(crate) fn read(&self, cursor: &mut u64) -> Read {
        let s = self.state.lock();
        Self::read_locked(&s, cursor)
    }

    fn read_locked(s: &LogState, cursor: &mut u64) -> Read {
        if *cursor < s.first {
            let missed = s.first - *cursor;
            *cursor = s.first;
            return Read::Missed(missed);
        }
        if *cursor < s.next {
            let msg = s.ring[(*cursor - s.first) as usize].clone();
            *cursor += 1;
            return Read::Msg(msg);
        }
        if s.closed { Read::Closed } else { Read::Empty }
    }

    /// Like `read`, but registers `waker` when there is nothing to read.
    pub(crate) fn read_or_wait(&self, cursor: &mut u64, waker: &Waker) -> Read {
        let mut s = self.state.lock();
        let r = Self::read_locked(&s, cursor);
        if matches!(r, Read::Empty) && !s.wakers.iter().any(|w| w.will_wake(waker)) {
            s.wakers.push(waker.clone());
        }
        r
    }

    /// Up to `max` reads at once, each given to `each` with the cursor after
    /// it, under one lock (a publisher waits for a burst's reader once, not
    /// per message; `each` only keeps them). Stops at `Empty` or `Closed`,
    /// and says which; `None` when `max` was reached. `waker` is registered
    /// when it read nothing.
    pub(crate) fn read_many(&self, cursor: &mut u64, waker: Option<&Waker>, max: usize, mut each: impl FnMut(Read, u64)) -> Option<Read> {
        let mut s = self.state.lock();
        for n in 0..max {
            match Self::read_locked(&s, cursor) {
                r @ (Read::Empty | Read::Closed) => {
                    if n == 0
                        && matches!(r, Read::Empty)
                        && let Some(w) = waker
                        && !s.wakers.iter().any(|x| x.will_wake(w))
                    {
                        s.wakers.push(w.clone());
                    }
                    return Some(r);
                }
                r => each(r, *cursor),
            }
        }
        None
    }

    /// Adds a reader and returns the cursor that reads from the next message
    /// on, or from `from` when given (resuming), clamped to what is published.
    pub(crate) fn attach(&self, from: Option<u64>) -> u64 {
        let mut s = self.state.lock();
        s.readers += 1;
        match from {
            Some(f) => f.min(s.next),
            None => s.next,
        }
    }

    /// Removes a reader; the last one takes the log's messages with it.
    pub(crate) fn detach(&self) -> usize {
        let freed = {
            let mut s = self.state.lock();
            s.readers -= 1;
            if s.readers > 0 {
                return s.readers;
            }
            s.first = s.next;
            let freed = (s.bytes, s.ring.len());
            s.bytes = 0;
            s.ring.clear();
            freed
        };
        self.budget.released(freed.0, freed.1);
        0
    }

    pub(crate) fn readers(&self) -> usize {
        self.state.lock().readers
    }

    /// The position the next message will get (one past the newest).
    pub(crate) fn next_position(&self) -> u64 {
        self.state.lock().next
    }

    /// Messages kept in the ring, and their bytes.
    pub(crate) fn kept(&self) -> (usize, usize) {
        let s = self.state.lock();
        (s.ring.len(), s.bytes)
    }

    /// Wakes every reader, whose reads end once the ring is drained.
    pub(crate) fn close(&self) {
        let wakers = {
            let mut s = self.state.lock();
            s.closed = true;
            std::mem::take(&mut s.wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Drops the oldest message if it is still at position `pos`.
    fn evict_if_first(&self, pos: u64) -> usize {
        let mut s = self.state.lock();
        if s.first == pos && !s.ring.is_empty() {
            let old = s.ring.pop_front().expect("ring is not empty");
            s.first += 1;
            s.bytes -= old.data.len();
            drop(s);
            self.budget.released(old.data.len(), 1);
            return old.data.len();
        }
        0
    }

    fn holds(&self, pos: u64) -> bool {
        let s = self.state.lock();
        pos >= s.first && pos < s.next
    }
}

/// The store-wide budget of channel memory (64 MiB): past it, the oldest
/// message of any log leaves first.
pub(crate) struct Budget {
    limit: isize,
    /// Signed: a log may release a message before its addition is counted.
    bytes: AtomicIsize,
    order: Mutex<VecDeque<(Weak<Log>, u64)>>,
    /// Messages kept in logs now.
    count: AtomicIsize,
}

impl Budget {
    pub(crate) fn new(limit: usize) -> Arc<Budget> {
        Arc::new(Budget { limit: limit as isize, bytes: AtomicIsize::new(0), order: Mutex::new(VecDeque::new()), count: AtomicIsize::new(0) })
    }

    /// Bytes of messages kept in logs now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed).max(0) as usize
    }

    fn released(&self, bytes: usize, count: usize) {
        if count > 0 {
            self.bytes.fetch_sub(bytes as isize, Ordering::Relaxed);
            self.count.fetch_sub(count as isize, Ordering::Relaxed);
        }
    }

    fn added(&self, log: &Arc<Log>, pos: u64, size: usize) {
        let total = self.bytes.fetch_add(size as isize, Ordering::Relaxed) + size as isize;
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut order = self.order.lock();
        order.push_back((Arc::downgrade(log), pos));
        if total > self.limit {
            while self.bytes.load(Ordering::Relaxed) > self.limit {
                let Some((w, p)) = order.pop_front() else { break };
                if let Some(l) = w.upgrade() {
                    l.evict_if_first(p);
                }
            }
        }
        // Entries whose message already left its log pile up behind live
        // ones; drop them once they outnumber what is still kept.
        if order.len() as isize > 2 * self.count.load(Ordering::Relaxed) + 4096 {
            order.retain(|(w, p)| w.upgrade().is_some_and(|l| l.holds(*p)));
        }
    }
}
