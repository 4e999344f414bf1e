//! One client's connection as the server serves it: its role, session and
//! subscriptions, and one function per request kind (docs/wire.md).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{ConnInfo, Forwarder, Outbox, Role, Server, Tokens, answer_err, answer_ok, answer_queued};
use crate::engine::Engine;
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::key::Key;
use crate::base::limits::{STORE_CHANNEL_BYTES, check_name, check_positive, check_ttl};
use crate::engine::channels::{Missed, MissedReason, Resume, Scope, check_message};
use crate::engine::tickets::Held;
use crate::engine::locks::{Holder, Kind, OnGrant, Queued, Terms};
use crate::net::wire::{self, AcquireOk, HelloOk, Request, SubscribeOk, TicketOk, need};
use crate::runtime;

pub(super) struct ServedConnection {
    pub(super) server: Arc<Server>,
    pub(super) out: Arc<Outbox>,
    pub(super) id: u64,
    pub(super) address: String,
    pub(super) session: Option<String>,
    /// The protocol version the client said at hello.
    pub(super) version: u32,
    pub(super) role: Option<Role>,
    pub(super) tokens: Option<Arc<Tokens>>,
    pub(super) subs: HashMap<u64, Arc<Forwarder>>,
    /// Subscriptions its publishes woke, forwarded before its answers leave.
    pub(super) woken: Vec<Arc<dyn runtime::RunOnWaker>>,
    /// Tickets taken on this connection and not ended: given up when it ends.
    pub(super) tickets: HashMap<u64, OpenTicket>,
    /// Where a publish's answer is written (kept: one allocation less a message).
    pub(super) answer: Vec<u8>,
    /// The branch of the last publish read fast ([`wire::fast_publish`]).
    pub(super) last_branch: wire::LastBranch,
    /// The channel of the last publish read fast, when it and that
    /// branch's keys passed the engine's checks: a burst to one branch is
    /// checked once.
    pub(super) checked_channel: Option<Box<str>>,
}

/// A transaction's ticket and the messages sent under it so far.
#[derive(Default)]
pub(super) struct OpenTicket {
    channels: Vec<Arc<str>>,
    msgs: Vec<Held>,
    bytes: usize,
}

/// A waiter passed over as silent for its `ttl` (LOCK-03).
fn silent_waiter(ttl: Duration) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "the key's turn came while this process had been silent for longer than its ttl of {} (frozen?), so it went to the next waiter: nothing ran; hold again",
            crate::base::limits::format_duration(ttl)
        ),
    )
}

impl ServedConnection {
    fn need_role(&self, role: Role, op: &str) -> Result<()> {
        match self.role {
            None => Err(Error::new(ErrorKind::Protocol, "say hello first: the first request of a connection is {\"op\":\"hello\",...}")),
            Some(r) if r >= role => Ok(()),
            Some(_) => Err(Error::new(ErrorKind::Auth, format!("this token may not {op}: use a token with the {role:?} role"))),
        }
    }

    /// Answers one request; an error is answered by the caller.
    pub(super) fn handle(&mut self, r: Request<'_>) -> Result<()> {
        let engine = self.server.engine()?;
        match r.op.as_ref() {
            "hello" => self.hello(&engine, r),
            "publish" if r.ticket.is_some() && r.messages.is_some() => Err(Error::invalid(
                "a publish under a ticket carries one message (`data`), not `messages`: send one publish a message of the transaction",
            )),
            "publish" if r.ticket.is_some() => self.publish_under_ticket(r),
            "publish" => self.publish(&engine, r),
            "ticket" => self.ticket(&engine, r),
            "ticket_end" => self.ticket_end(&engine, r),
            "subscribe" => self.subscribe(&engine, r),
            "unsubscribe" => self.unsubscribe(r),
            "acquire" => self.acquire(&engine, r),
            "adopt" => self.adopt(&engine, r),
            "renew" | "release" => self.renew_or_release(r),
            "cancel" => self.cancel(r),
            "declare" => self.declare(&engine, r),
            "status" => self.status(&engine, r),
            "shutdown" => self.shutdown(r),
            "ping" => {
                // Answered after what this connection's subscriptions can
                // read now: a closing client drains up to here.
                runtime::run_woken(&mut self.woken);
                for f in self.subs.values() {
                    f.flush();
                }
                answer_ok(&self.out, r.id, &());
                Ok(())
            }
            other => Err(Error::invalid(format!(
                "unknown op {other:?}: use hello, publish, subscribe, unsubscribe, declare, acquire, adopt, cancel, renew, release, ticket, ticket_end, ping, status or shutdown"
            ))),
        }
    }

    fn hello(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        let v = need(r.version, op, "version")?;
        // A version 2 client never takes a ticket: it is served as it was.
        if !(wire::OLDEST_CLIENT_VERSION..=wire::PROTOCOL_VERSION).contains(&v) {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!(
                    "this store speaks protocol versions {} to {}, the client {v}: use the same tinystore version on both sides",
                    wire::OLDEST_CLIENT_VERSION,
                    wire::PROTOCOL_VERSION
                ),
            ));
        }
        self.role = Some(match &self.tokens {
            None => Role::Admin, // the Unix socket is owner-only
            Some(t) => t.check(r.token.as_deref())?,
        });
        self.session = Some(need(r.session, op, "session")?);
        self.version = v;
        let client = r.client.unwrap_or_default();
        self.server.conns.lock().insert(
            self.id,
            ConnInfo { id: self.id, client, address: self.address.clone(), since_ms: 0, since: Instant::now(), out: Arc::downgrade(&self.out) },
        );
        if self.server.stopped.load(Ordering::Acquire) {
            // Stopped after telling the connections it had: this one,
            // accepted meanwhile, would serve a closed engine (STORE-01).
            self.out.send(&wire::Reply { ev: Some("closing".into()), ..Default::default() });
            self.out.close();
            return Ok(());
        }
        answer_ok(
            &self.out,
            id,
            &HelloOk { version: wire::PROTOCOL_VERSION, epoch: engine.epoch(), dir: self.server.dir.display().to_string(), pid: std::process::id() },
        );
        Ok(())
    }

    fn publish(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        self.need_role(Role::Data, "publish")?;
        let channel = need(r.channel, op, "channel")?;
        let branch = r.branch.unwrap_or_default();
        match (r.data, r.messages) {
            (Some(_), Some(_)) => Err(Error::invalid("a publish carries `data` (one message) or `messages` (a burst), not both")),
            (None, Some(burst)) => self.publish_burst(engine, id, &channel, &branch, false, &burst),
            (data, None) => self.publish_read(engine, id, &channel, &branch, false, need(data, op, "data")?),
        }
    }

    /// A publish in our client's exact shape ([`wire::fast_publish`]), the
    /// most frequent request, taken without building a [`Request`].
    pub(super) fn publish_fast(&mut self, p: wire::FastPublish<'_>) -> Result<()> {
        let engine = self.server.engine()?;
        self.need_role(Role::Data, "publish")?;
        let checked = p.same_branch && self.checked_channel.as_deref() == Some(p.channel);
        let r = match &p.data {
            wire::FastData::One(data) => self.publish_read(&engine, p.id, p.channel, &p.branch, checked, data),
            wire::FastData::Burst(burst) => self.publish_burst(&engine, p.id, p.channel, &p.branch, checked, burst),
        };
        if !checked {
            self.checked_channel = r.is_ok().then(|| p.channel.into());
        }
        r
    }

    /// `checked`: the channel's name and the branch's keys passed the
    /// engine's checks before (the same as the last publish's).
    fn publish_read(&mut self, engine: &Engine, id: u64, channel: &str, branch: &[Key], checked: bool, data: &serde_json::value::RawValue) -> Result<()> {
        let data: Box<[u8]> = data.get().as_bytes().into();
        runtime::collect_woken(&mut self.woken, || match checked {
            true => engine.check_open().and_then(|()| engine.publish_checked(channel, branch, data)),
            false => engine.publish(channel, branch, data),
        })?;
        self.answer.clear();
        wire::encode_null_answer(&mut self.answer, id);
        self.out.push(&self.answer);
        Ok(())
    }

    /// A burst (`messages`): every message is checked before any is
    /// published, then all are, in order, and answered once. `checked` as
    /// for [`publish_read`](Self::publish_read).
    fn publish_burst(&mut self, engine: &Engine, id: u64, channel: &str, branch: &[Key], checked: bool, burst: &[&serde_json::value::RawValue]) -> Result<()> {
        let count = burst.len();
        if count == 0 || count > wire::MAX_BURST_MESSAGES {
            return Err(Error::invalid(format!(
                "a publish's `messages` holds 1 to {} messages, not {count}: send a longer burst in several publishes",
                wire::MAX_BURST_MESSAGES
            )));
        }
        let bytes: usize = burst.iter().map(|d| d.get().len()).sum();
        if bytes > crate::base::limits::MAX_MESSAGE_BYTES {
            return Err(Error::limit(format!(
                "a publish's `messages` are at most 1 MiB together, not {bytes} bytes: send the burst in several publishes"
            )));
        }
        for (i, d) in burst.iter().enumerate() {
            check_message(d.get().as_bytes()).map_err(|e| e.of_burst(i, count))?;
        }
        engine.check_open()?;
        if !checked {
            check_name("channel", channel)?;
            branch.iter().try_for_each(Key::check)?;
        }
        runtime::collect_woken(&mut self.woken, || {
            for (i, d) in burst.iter().enumerate() {
                engine.publish_checked(channel, branch, d.get().as_bytes().into()).map_err(|e| {
                    Error::new(e.kind(), format!("message {i} of the {count} given (the {i} before it were published): {}", e.message()))
                })?;
            }
            Ok::<(), Error>(())
        })?;
        self.answer.clear();
        wire::encode_null_answer(&mut self.answer, id);
        self.out.push(&self.answer);
        Ok(())
    }

    /// Takes a ticket for a transaction about to commit (CHAN-03).
    fn ticket(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        self.need_role(Role::Data, "publish")?;
        let channels = need(r.channels, op, "channels")?;
        if channels.is_empty() {
            return Err(Error::invalid("a ticket names the channels its transaction published to: give at least one"));
        }
        channels.iter().try_for_each(|c| check_name("channel", c))?;
        let channels: Vec<Arc<str>> = channels.into_iter().map(Arc::from).collect();
        let ticket = engine.take_ticket(channels.clone())?;
        self.tickets.insert(ticket, OpenTicket { channels, ..OpenTicket::default() });
        answer_ok(&self.out, id, &TicketOk { ticket });
        Ok(())
    }

    /// Keeps a message of a committed transaction until its `ticket_end`.
    fn publish_under_ticket(&mut self, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        self.need_role(Role::Data, "publish")?;
        let ticket = need(r.ticket, op, "ticket")?;
        let channel = need(r.channel, op, "channel")?;
        let branch = r.branch.unwrap_or_default();
        let data = need(r.data, op, "data")?;
        check_name("channel", &channel)?;
        branch.iter().try_for_each(Key::check)?;
        let data: Box<[u8]> = data.get().as_bytes().into();
        check_message(&data)?;
        let t = self.tickets.get_mut(&ticket).ok_or_else(|| not_open(ticket))?;
        let Some(channel) = t.channels.iter().find(|c| ***c == *channel).cloned() else {
            return Err(Error::invalid(format!(
                "ticket {ticket} was not taken for channel {channel:?}: name every channel a transaction publishes to when taking its ticket"
            )));
        };
        if t.bytes + data.len() > STORE_CHANNEL_BYTES {
            return Err(Error::limit(format!(
                "a transaction's messages are at most {} MiB together; ticket {ticket} has {} bytes: publish ids and keep the data in the database",
                STORE_CHANNEL_BYTES >> 20,
                t.bytes
            )));
        }
        t.bytes += data.len();
        t.msgs.push(Held { channel, branch, data });
        answer_ok(&self.out, id, &());
        Ok(())
    }

    /// Delivers what was published under a ticket in its turn, or gives it up.
    fn ticket_end(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        let ticket = need(r.ticket, op, "ticket")?;
        let deliver = need(r.deliver, op, "deliver")?;
        let t = self.tickets.remove(&ticket).ok_or_else(|| not_open(ticket))?;
        runtime::collect_woken(&mut self.woken, || engine.end_ticket(ticket, deliver.then_some(t.msgs)))?;
        answer_ok(&self.out, id, &());
        Ok(())
    }

    /// The connection ended: its open tickets keep nobody waiting.
    pub(super) fn give_up_tickets(&mut self) {
        let Ok(engine) = self.server.engine() else { return };
        for (ticket, _) in self.tickets.drain() {
            let _ = engine.end_ticket(ticket, None);
        }
    }

    fn subscribe(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        self.need_role(Role::Read, "subscribe")?;
        let sub_id = need(r.sub, op, "sub")?;
        let channel = need(r.channel, op, "channel")?;
        let branch = r.branch.unwrap_or_default();
        if self.subs.contains_key(&sub_id) {
            return Err(Error::invalid(format!("subscription {sub_id} already exists on this connection: pick a new number")));
        }
        let scope = if r.recursive.unwrap_or(false) { Scope::Recursive } else { Scope::Branch };
        let epoch = engine.epoch();
        let resume = r.resume.filter(|x| x.epoch == epoch).map(|x| x.at());
        let sub = engine.subscribe(&channel, &branch, scope, resume)?;
        if r.resume.is_some_and(|x| x.epoch != epoch) {
            // The store restarted: what was published meanwhile is unknown.
            sub.tell_first(Missed { count: None, reason: MissedReason::Reconnect });
        }
        let at: Resume = sub.resume_point();
        answer_ok(&self.out, id, &SubscribeOk { epoch, log: at.log, next: at.next });
        self.subs.insert(sub_id, Forwarder::start(sub, sub_id, self.out.clone(), self.version >= 4));
        Ok(())
    }

    fn unsubscribe(&mut self, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        let sub_id = need(r.sub, op, "sub")?;
        if let Some(f) = self.subs.remove(&sub_id) {
            f.stop();
        }
        answer_ok(&self.out, id, &());
        Ok(())
    }

    fn acquire(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        self.need_role(Role::Data, "hold keys")?;
        let lock = need(r.lock, op, "lock")?;
        let key: Key = need(r.key, op, "key")?;
        key.check()?;
        let hold = need(r.hold, op, "hold")?;
        let ttl = check_ttl(Duration::from_millis(need(r.ttl_ms, op, "ttl_ms")?))?;
        let max_hold = r.max_hold_ms.map(|m| check_positive("maxHold", Duration::from_millis(m))).transpose()?;
        let wait = match r.wait_ms.unwrap_or(0) {
            0 => Duration::ZERO,
            ms => check_positive("wait", Duration::from_millis(ms))?,
        };
        let kind = Kind::from_wire(r.limit);
        check_name(if kind == Kind::Lock { "lock" } else { "semaphore" }, &lock)?;
        let table = engine.lock_table(&lock, kind)?;
        let session = self.session.clone().expect("hello was said");
        // A retried hold gets the lease it already has (LOCK-08).
        let existing = self.server.holds.lock().get(&(session.clone(), hold)).copied();
        if let Some(lid) = existing {
            let mut leases = self.server.leases.lock();
            if let Some(l) = leases.get_mut(&lid) {
                l.out = Arc::downgrade(&self.out);
                answer_ok(&self.out, id, &AcquireOk { lease: Some(lid), fence: l.raw.fence(), waited_ms: 0 });
                return Ok(());
            }
        }
        let holder = Holder(holder_id(&session, r.holder.unwrap_or(0)));
        let terms = Terms { ttl: Some(ttl), max_hold };
        if wait.is_zero() {
            let ok = match table.try_acquire(key, holder, terms)? {
                Some(raw) => self.server.grant(raw, &session, hold, &self.out, Duration::ZERO).map_err(|(e, _)| e)?,
                None => AcquireOk { lease: None, fence: None, waited_ms: 0 },
            };
            answer_ok(&self.out, id, &ok);
            return Ok(());
        }
        // Free now: answered at once. Else in line: the grant is
        // answered from where the key is let go, with no task between.
        let (server, out, key2, started) = (self.server.clone(), self.out.clone(), key.clone(), Instant::now());
        let on_grant: OnGrant = Box::new(move |r| {
            out.leave_line(hold);
            match r {
                Ok(raw) => {
                    // A waiter whose client went away is passed over, and
                    // one silent for its ttl (a frozen process) too (LOCK-03),
                    // told so if it is still there.
                    if out.closed.load(Ordering::Acquire) {
                        answer_err(&out, id, &silent_waiter(ttl));
                        return Some(raw);
                    }
                    // Silent, unless what it sent waits unread: then the
                    // owner was the frozen one, and its reader is behind.
                    if out.last_heard.lock().elapsed() > ttl && out.sink.unread_bytes().is_none_or(|n| n == 0) {
                        answer_err(&out, id, &silent_waiter(ttl));
                        return Some(raw);
                    }
                    match server.grant(raw, &session, hold, &out, started.elapsed()) {
                        Ok(ok) => answer_queued(&out, id, &ok),
                        Err((e, raw)) => {
                            answer_err(&out, id, &e);
                            return Some(raw);
                        }
                    }
                }
                Err(e) => answer_err(&out, id, &e),
            }
            None
        });
        match table.acquire_or_queue(&key, holder, terms, wait, on_grant)? {
            Queued::Now(raw) => {
                let session = self.session.clone().expect("hello was said");
                let ok = self.server.grant(raw, &session, hold, &self.out, Duration::ZERO).map_err(|(e, _)| e)?;
                answer_ok(&self.out, id, &ok);
            }
            Queued::InLine(waiter) => {
                self.out.wait_in_line(hold, (table.clone(), key2.clone(), waiter));
                // Served in between: its callback found nothing to remove.
                if !table.is_waiting(&key2, waiter) {
                    self.out.leave_line(hold);
                }
            }
        }
        Ok(())
    }

    /// A holder of the previous owner re-presents its lease (STORE-01): taken
    /// back with its fence unchanged, as a renewal, while the new owner's
    /// grace lasts; else `lost`.
    fn adopt(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        self.need_role(Role::Data, "hold keys")?;
        let lock = need(r.lock, op, "lock")?;
        let key: Key = need(r.key, op, "key")?;
        key.check()?;
        let hold = need(r.hold, op, "hold")?;
        let ttl = check_ttl(Duration::from_millis(need(r.ttl_ms, op, "ttl_ms")?))?;
        let max_hold = r.max_hold_ms.map(|m| check_positive("maxHold", Duration::from_millis(m.max(1)))).transpose()?;
        let kind = Kind::from_wire(r.limit);
        check_name(if kind == Kind::Lock { "lock" } else { "semaphore" }, &lock)?;
        if kind == Kind::Lock && r.fence.is_none() {
            return Err(Error::invalid("a lease of a lock is re-presented with its fence"));
        }
        let table = engine.lock_table(&lock, kind)?;
        let session = self.session.clone().expect("hello was said");
        let holder = Holder(holder_id(&session, r.holder.unwrap_or(0)));
        let fence = if kind == Kind::Lock { r.fence } else { None };
        let raw = table.adopt(&key, holder, fence, Terms { ttl: Some(ttl), max_hold })?;
        let ok = self.server.grant(raw, &session, hold, &self.out, Duration::ZERO).map_err(|(e, _)| e)?;
        answer_ok(&self.out, id, &ok);
        Ok(())
    }

    fn renew_or_release(&mut self, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        self.need_role(Role::Data, "hold keys")?;
        let lid = need(r.lease, op, "lease")?;
        let fence_named = r.fence.map(|f| format!(" (fence {f})")).unwrap_or_default();
        let not_held = || {
            Error::lost(format!(
                "lease {lid}{fence_named} is not held: it ran out (its ttl or maxHold), was released, or the store's owner restarted; another holder may have the key now: check fences where you write, and take the key again"
            ))
        };
        let mut leases = self.server.leases.lock();
        let Some(l) = leases.get_mut(&lid) else { return Err(not_held()) };
        if r.fence.is_some() && r.fence != l.raw.fence() {
            return Err(not_held());
        }
        if op == "renew" {
            l.out = Arc::downgrade(&self.out);
            let renewed = l.raw.renew();
            drop(leases);
            renewed?;
        } else {
            let l = leases.remove(&lid).expect("looked up");
            drop(leases);
            self.server.holds.lock().remove(&(l.session.clone(), l.hold));
            l.raw.release()?;
        }
        if r.quiet != Some(true) {
            answer_ok(&self.out, id, &());
        }
        Ok(())
    }

    fn cancel(&mut self, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        // The client gave up on a hold (a cancelled task): leave the
        // line, or let go of what was granted meanwhile (LOCK-04).
        let hold = need(r.hold, op, "hold")?;
        if let Some((table, key, waiter)) = self.out.leave_line(hold) {
            table.leave_queue(&key, waiter);
        }
        let session = self.session.clone().unwrap_or_default();
        let granted = self.server.holds.lock().remove(&(session, hold));
        if let Some(lid) = granted {
            let l = self.server.leases.lock().remove(&lid);
            if let Some(l) = l {
                let _ = l.raw.release();
            }
        }
        answer_ok(&self.out, id, &());
        Ok(())
    }

    fn declare(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let (id, op) = (r.id, r.op.as_ref());
        // A handle is made: a semaphore's limit is the semaphore's (LOCK-08).
        self.need_role(Role::Read, "open locks")?;
        let lock = need(r.lock, op, "lock")?;
        let kind = Kind::from_wire(r.limit);
        check_name(if kind == Kind::Lock { "lock" } else { "semaphore" }, &lock)?;
        engine.lock_table(&lock, kind)?;
        answer_ok(&self.out, id, &());
        Ok(())
    }

    fn status(&mut self, engine: &Engine, r: Request<'_>) -> Result<()> {
        let id = r.id;
        self.need_role(Role::Read, "read status")?;
        let mut v = serde_json::to_value(engine.status(&self.server.dir)?).unwrap_or_default();
        v["connections"] = self.server.connections();
        answer_ok(&self.out, id, &v);
        Ok(())
    }

    fn shutdown(&mut self, r: Request<'_>) -> Result<()> {
        let id = r.id;
        self.need_role(Role::Admin, "stop the store")?;
        let n = self.server.shutdown.lock().clone();
        match n {
            Some(n) => {
                answer_ok(&self.out, id, &());
                n.notify_one();
            }
            None => {
                return Err(Error::invalid(
                    "this store is owned by an application process, not `tinystore serve`: stop that process instead",
                ));
            }
        }
        Ok(())
    }

}

fn not_open(ticket: u64) -> Error {
    Error::invalid(format!(
        "ticket {ticket} is not open on this connection: a ticket is taken and ended on one connection (a reconnect gives it up), and ended once"
    ))
}

fn holder_id(session: &str, holder: u64) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = foldhash::quality::FixedState::with_seed(7).build_hasher();
    session.hash(&mut h);
    holder.hash(&mut h);
    h.finish() | 1
}