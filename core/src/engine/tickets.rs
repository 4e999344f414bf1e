//! Commit order across processes (CHAN-03).
//!
//! A transaction that published takes a ticket for its channels while it
//! still holds SQLite's write lock, so tickets follow commit order; after
//! the commit it hands its messages in under the ticket. Each channel keeps
//! a line of the tickets taken for it: a ticket's messages go out once every
//! earlier ticket of the line went out or was given up (a rollback, a failed
//! commit, its connection's end, or [`TX_ORDER_BOUND`] after it was taken).
//! A plain publish to a channel whose line is not empty joins the line, so a
//! process's own publishes keep their order (CHAN-01). With no ticket open
//! anywhere a publish costs one atomic load more.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;

use super::channels::Channels;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::key::Key;
use crate::base::limits::{TX_ORDER_BOUND, format_duration};
use crate::runtime::{self as timers, Due};

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A message held until its turn.
pub(crate) struct Held {
    pub(crate) channel: Arc<str>,
    pub(crate) branch: Vec<Key>,
    pub(crate) data: Box<[u8]>,
}

pub(crate) struct Tickets {
    channels: Arc<Channels>,
    /// Entries in every line: 0 lets a plain publish go straight through.
    queued: AtomicUsize,
    s: Mutex<State>,
    me: Weak<Tickets>,
}

#[derive(Default)]
struct State {
    next: u64,
    open: HashMap<u64, Open>,
    lines: HashMap<Arc<str>, VecDeque<Entry>>,
}

struct Open {
    channels: Vec<Arc<str>>,
    taken: Instant,
    /// Given up at the bound: its messages are refused when they come.
    expired: bool,
    /// Kept alive here (the timers hold it weakly) and cancelled at the end.
    due: Option<(Arc<Expire>, timers::TimerKey)>,
}

struct Entry {
    /// 0 for a plain publish.
    ticket: u64,
    /// `None` while the ticket's messages have not come.
    msgs: Option<Vec<Held>>,
}

struct Expire {
    tickets: Weak<Tickets>,
    ticket: u64,
}

impl Due for Expire {
    fn due(self: Arc<Self>, _now: Instant) {
        if let Some(t) = self.tickets.upgrade() {
            t.expire(self.ticket);
        }
    }
}

impl Tickets {
    pub(crate) fn new(channels: Arc<Channels>) -> Arc<Tickets> {
        Arc::new_cyclic(|me| Tickets { channels, queued: AtomicUsize::new(0), s: Mutex::new(State::default()), me: me.clone() })
    }

    /// Publishes now, or behind the tickets open for the channel.
    pub(crate) fn publish(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<()> {
        if self.queued.load(Ordering::Acquire) == 0 {
            return self.channels.publish(channel, branch, data).map(drop);
        }
        let mut s = self.s.lock();
        match s.lines.get_mut(channel).filter(|l| !l.is_empty()) {
            None => self.channels.publish(channel, branch, data).map(drop),
            Some(line) => {
                super::channels::check_message(&data)?;
                let held = Held { channel: Arc::from(channel), branch: branch.to_vec(), data };
                line.push_back(Entry { ticket: 0, msgs: Some(vec![held]) });
                self.queued.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
        }
    }

    /// A ticket for a transaction's messages to `channels`, taken before its
    /// commit while it holds the database's write lock.
    pub(crate) fn take(&self, mut channels: Vec<Arc<str>>) -> u64 {
        channels.sort();
        channels.dedup();
        let mut s = self.s.lock();
        s.next += 1;
        let ticket = s.next;
        for c in &channels {
            s.lines.entry(c.clone()).or_default().push_back(Entry { ticket, msgs: None });
        }
        self.queued.fetch_add(channels.len(), Ordering::AcqRel);
        let taken = Instant::now();
        let due = Arc::new(Expire { tickets: self.me.clone(), ticket });
        let weak: Weak<dyn Due> = Arc::downgrade(&(due.clone() as Arc<dyn Due>));
        let key = timers::schedule(taken + TX_ORDER_BOUND, weak);
        s.open.insert(ticket, Open { channels, taken, expired: false, due: Some((due, key)) });
        ticket
    }

    /// Ends a ticket: `Some` delivers its messages in their turn (in the
    /// order given), `None` gives it up. Errors: `timeout` when it was given
    /// up at the bound (its messages are dropped), `invalid` for a ticket
    /// not open or a message to a channel it was not taken for (then
    /// nothing of it is delivered).
    pub(crate) fn end(&self, ticket: u64, msgs: Option<Vec<Held>>) -> Result<()> {
        let mut s = self.s.lock();
        let Some(open) = s.open.remove(&ticket) else {
            return Err(Error::invalid(format!(
                "ticket {ticket} is not open: take one with the ticket op on this connection, and end it once"
            )));
        };
        if let Some((_, key)) = open.due {
            timers::cancel(key);
        }
        if open.expired {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "its messages came {} after its ticket, past the {} a transaction may keep later ones of its channel waiting (CHAN-03): they were dropped, so that nobody's order changed",
                    format_duration(open.taken.elapsed()),
                    format_duration(TX_ORDER_BOUND)
                ),
            ));
        }
        let mut by_channel: Vec<(Arc<str>, Vec<Held>)> = open.channels.iter().map(|c| (c.clone(), Vec::new())).collect();
        let mut refused = None;
        for m in msgs.into_iter().flatten() {
            match by_channel.iter_mut().find(|(c, _)| *c == m.channel) {
                Some((_, v)) => v.push(m),
                None => {
                    refused.get_or_insert_with(|| {
                        Error::invalid(format!("ticket {ticket} was not taken for channel {:?}: name every channel a transaction publishes to when taking its ticket", m.channel))
                    });
                }
            }
        }
        for (c, v) in by_channel {
            let v = if refused.is_some() { Vec::new() } else { v };
            self.fill(&mut s, &c, ticket, v);
        }
        refused.map_or(Ok(()), Err)
    }

    fn expire(&self, ticket: u64) {
        let mut s = self.s.lock();
        let Some(open) = s.open.get_mut(&ticket).filter(|o| !o.expired) else { return };
        open.expired = true;
        open.due = None;
        let channels = open.channels.clone();
        for c in channels {
            self.fill(&mut s, &c, ticket, Vec::new());
        }
    }

    /// Gives `ticket`'s entry in `channel`'s line its messages, then lets the
    /// front of the line go out.
    fn fill(&self, s: &mut State, channel: &Arc<str>, ticket: u64, msgs: Vec<Held>) {
        let Some(line) = s.lines.get_mut(channel) else { return };
        if let Some(e) = line.iter_mut().find(|e| e.ticket == ticket) {
            e.msgs = Some(msgs);
        }
        while line.front().is_some_and(|e| e.msgs.is_some()) {
            let e = line.pop_front().expect("looked at");
            self.queued.fetch_sub(1, Ordering::AcqRel);
            for m in e.msgs.expect("looked at") {
                // Checked when taken; what is left to fail is a closed store.
                let _ = self.channels.publish(&m.channel, &m.branch, m.data);
            }
        }
        if line.is_empty() {
            s.lines.remove(channel);
        }
    }
}
