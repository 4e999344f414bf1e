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

/// A reader's wakers; inline, so a publish that wakes one allocates nothing.
type Wakers = smallvec::SmallVec<[Waker; 2]>;

struct Pushed {
    wakers: Wakers,
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
    wakers: Wakers,
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
                wakers: Wakers::new(),
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
            match p.kept_at {
                Some(pos) => log.budget.added(log, pos, size, p.evicted),
                None => log.budget.released(p.evicted.0, p.evicted.1),
            }
        }
        seq
    }

    fn push(s: &mut LogState, msg: Arc<Msg>) -> Pushed {
        let pos = s.next;
        s.next += 1;
        if s.readers == 0 || s.closed {
            s.first = s.next;
            return Pushed { wakers: Wakers::new(), evicted: (0, 0), kept_at: None };
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

    /// Drops the oldest message if it is older than `to` (the end of a run
    /// of the budget's), and says where the run's live part now starts:
    /// `to` once none of it is left.
    fn evict_before(&self, to: u64) -> u64 {
        let mut s = self.state.lock();
        if s.first < to && !s.ring.is_empty() {
            let old = s.ring.pop_front().expect("ring is not empty");
            s.first += 1;
            s.bytes -= old.data.len();
            let first = s.first;
            drop(s);
            self.budget.released(old.data.len(), 1);
            return first.min(to);
        }
        to
    }

    /// The positions kept now: from the oldest to one past the newest.
    fn kept_positions(&self) -> (u64, u64) {
        let s = self.state.lock();
        if s.ring.is_empty() { (s.next, s.next) } else { (s.first, s.next) }
    }
}

/// Messages of one log at consecutive positions `from..to`, added to the
/// budget one after another: a busy branch is one entry, not one per message.
struct Run {
    log: Weak<Log>,
    from: u64,
    to: u64,
}

/// The store-wide budget of channel memory (64 MiB): past it, the oldest
/// message of any log leaves first.
pub(crate) struct Budget {
    limit: isize,
    /// Signed: a log may release a message before its addition is counted.
    bytes: AtomicIsize,
    /// Oldest first; a run's messages may have left their log already.
    order: Mutex<VecDeque<Run>>,
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

    /// Counts a message of `size` bytes kept at `pos` of `log`, and the
    /// `evicted` (bytes, count) its log let go to keep it (one update of
    /// the counters for both: a full branch's publish nets to no count).
    fn added(&self, log: &Arc<Log>, pos: u64, size: usize, evicted: (usize, usize)) {
        let grown = size as isize - evicted.0 as isize;
        let total = self.bytes.fetch_add(grown, Ordering::Relaxed) + grown;
        if evicted.1 != 1 {
            self.count.fetch_add(1 - evicted.1 as isize, Ordering::Relaxed);
        }
        let mut order = self.order.lock();
        match order.back_mut() {
            Some(run) if run.to == pos && std::ptr::eq(run.log.as_ptr(), Arc::as_ptr(log)) => run.to += 1,
            _ => order.push_back(Run { log: Arc::downgrade(log), from: pos, to: pos + 1 }),
        }
        if total > self.limit {
            while self.bytes.load(Ordering::Relaxed) > self.limit {
                let Some(run) = order.front_mut() else { break };
                run.from = match run.log.upgrade() {
                    Some(l) => l.evict_before(run.to),
                    None => run.to,
                };
                if run.from >= run.to {
                    order.pop_front();
                }
            }
        }
        // Runs whose messages already left their log pile up behind live
        // ones; drop them once they outnumber what is still kept.
        if order.len() as isize > 2 * self.count.load(Ordering::Relaxed) + 4096 {
            order.retain_mut(|run| {
                let Some((first, next)) = run.log.upgrade().map(|l| l.kept_positions()) else { return false };
                run.from = run.from.max(first);
                run.from < run.to.min(next)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(log: &Arc<Log>, bytes: usize) {
        Log::publish(log, &[], Arc::from(Vec::<Key>::new()), vec![b'1'; bytes].into_boxed_slice());
    }

    #[test]
    fn chan_07_budget_leaves_the_oldest_first_across_branches() {
        let budget = Budget::new(1000);
        let (a, b) = (Log::new(budget.clone()), Log::new(budget.clone()));
        a.attach(None);
        b.attach(None);
        (0..5).for_each(|_| publish(&a, 100));
        (0..5).for_each(|_| publish(&b, 100));
        publish(&a, 100);
        assert_eq!(a.kept(), (5, 500), "a's oldest left for its newest");
        assert_eq!(b.kept(), (5, 500));
        (0..3).for_each(|_| publish(&b, 100));
        assert_eq!(a.kept(), (2, 200), "a's older messages left before any of b's");
        assert_eq!(b.kept(), (8, 800));
        assert_eq!(budget.bytes(), 1000);
    }

    #[test]
    fn chan_07_budget_counts_a_busy_branch_as_one_run_not_one_entry_per_message() {
        let budget = Budget::new(crate::base::limits::STORE_CHANNEL_BYTES);
        let log = Log::new(budget.clone());
        log.attach(None);
        (0..10_000).for_each(|_| publish(&log, 10));
        assert_eq!(log.kept(), (BRANCH_LOG_MESSAGES, BRANCH_LOG_MESSAGES * 10));
        assert_eq!(budget.order.lock().len(), 1);
        assert_eq!(budget.bytes(), BRANCH_LOG_MESSAGES * 10);
    }
}
