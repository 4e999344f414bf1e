//! The wire: length-prefixed JSON frames between a client and the owner.
//!
//! A frame is a 4-byte big-endian length, then one JSON object. The client
//! speaks first with `hello`; every request carries an `id` that its answer
//! echoes; the server pushes subscription events and lease losses unasked.
//! Fences travel as decimal strings. See `docs/wire.md`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::engine::channels::{Missed, Resume};
use crate::base::error::{Error, ErrorKind, Result};
use crate::base::fence::Fence;
use crate::base::key::Key;
use crate::base::limits::MAX_MESSAGE_BYTES;

/// The protocol version this build speaks.
/// Version 4 adds a burst: `publish` with `messages` (many messages to
/// one branch, answered once). Version 3 added transactions' tickets
/// (`ticket`, `publish` with `ticket`, `ticket_end`) and `adopt` (a lease
/// re-presented to a new owner). An owner still serves version 2 and 3
/// clients, which send none of what came after them.
pub const PROTOCOL_VERSION: u32 = 4;

/// The most messages one `publish` with `messages` carries: a branch's
/// log (a burst longer than that goes in several requests).
pub const MAX_BURST_MESSAGES: usize = crate::base::limits::BRANCH_LOG_MESSAGES;

/// The oldest client version an owner of this build serves.
pub const OLDEST_CLIENT_VERSION: u32 = 2;

/// The largest frame either side accepts: a largest message plus room for
/// its envelope. A larger one closes the connection that sent it.
pub const MAX_FRAME_BYTES: usize = MAX_MESSAGE_BYTES + 64 * 1024;

/// A request from a client: `id`, `op`, and the fields the op needs.
///
/// One flat shape serves every op, so a message's JSON (`data`) passes
/// through without being parsed again. Unknown fields are refused.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request<'a> {
    /// Echoed by the answer.
    pub id: u64,
    /// `hello`, `publish`, `subscribe`, `unsubscribe`, `acquire`, `renew`,
    /// `release`, `ping`, `status` or `shutdown`.
    pub op: std::borrow::Cow<'a, str>,
    /// hello: the protocol version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// hello: the client's name, shown by `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// hello: identifies the client across reconnects (retry-safe holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// hello: the token (TCP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// publish, subscribe: the channel's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// publish, subscribe: the branch's path of keys (strings or integers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<Vec<Key>>,
    /// publish: the message, any JSON (`null` too: present, not missing).
    #[serde(default, borrow, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub data: Option<&'a RawValue>,
    /// publish (version 4), instead of `data`: a burst of messages to one
    /// branch, published in their order and answered once.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<&'a RawValue>>,
    /// subscribe, unsubscribe: the subscription's number, chosen by the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<u64>,
    /// subscribe: also every branch below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// subscribe: go on from here after a reconnect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<WireResume>,
    /// acquire: the lock's or semaphore's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// acquire: a semaphore's limit; absent or 0 for a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// acquire: the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Key>,
    /// acquire: who holds, within the session (LOCK-08 re-entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<u64>,
    /// acquire: unique per session, so a retried hold gets the same lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<u64>,
    /// acquire: the lease's ttl in milliseconds (1,000 to 3,600,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// acquire: maxHold in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hold_ms: Option<u64>,
    /// acquire: how long to wait in milliseconds; 0 tries once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// renew, release: the lease's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// renew, release: the lease's fence, checked against the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<Fence>,
    /// ticket: the channels a transaction published to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channels: Option<Vec<String>>,
    /// publish, ticket_end: the ticket a transaction took before its commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ticket: Option<u64>,
    /// ticket_end: `true` delivers what was published under the ticket,
    /// `false` gives it up (the commit failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver: Option<bool>,
    /// release: `true` when the client wants no answer; the store then
    /// sends none, not even an error. Served for older clients: ours wait
    /// for the answer (LOCK-01).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quiet: Option<bool>,
}

impl<'a> Request<'a> {
    /// A request of `op` with id `id` and no fields yet.
    pub fn new(id: u64, op: &'static str) -> Request<'a> {
        Request { id, op: op.into(), ..Default::default() }
    }
}

/// Takes a required field, or says which one is missing.
pub fn need<T>(v: Option<T>, op: &str, field: &str) -> Result<T> {
    v.ok_or_else(|| Error::invalid(format!("op {op:?} needs the field {field:?}; see docs/wire.md")))
}

/// Where a subscription goes on after a reconnect.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct WireResume {
    /// The epoch of the store that gave `at`.
    pub epoch: u64,
    /// The log and position.
    pub log: u64,
    /// The next position to read.
    pub next: u64,
}

impl WireResume {
    /// The engine's resume point.
    pub fn at(&self) -> Resume {
        Resume { log: self.log, next: self.next }
    }
}

/// A frame from the server: the answer to request `id` (with `ok` or
/// `err`), or an event `ev` pushed unasked.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Reply<'a> {
    /// The request this answers; absent on events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The answer's value.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub ok: Option<&'a RawValue>,
    /// The answer's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<WireError>,
    /// `msg`, `missed`, `end`, `lost` or `closing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ev: Option<std::borrow::Cow<'a, str>>,
    /// msg, missed, end: the subscription's number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<u64>,
    /// msg: the message's branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<Vec<Key>>,
    /// msg: its sequence in the branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// msg, missed: where a resume would go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<u64>,
    /// msgs (version 4): each message's length in bytes, in the order of `data`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lens: Option<Vec<usize>>,
    /// msg: the message; msgs: an array of the messages.
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    pub data: Option<&'a RawValue>,
    /// missed: how many and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    /// An answer to a hold granted after waiting in line: the client had
    /// to wait for another holder, so it stops spinning ([`crate::net::spin`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queued: bool,
    /// lost: the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// lost: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// An error on the wire: a code and a message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WireError {
    /// The error's code (`timeout`, `invalid`, ...).
    pub code: String,
    /// What was wrong and what to do.
    pub message: String,
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> WireError {
        WireError { code: e.code().to_owned(), message: e.message().to_owned() }
    }
}

impl From<WireError> for Error {
    fn from(w: WireError) -> Error {
        Error::new(ErrorKind::from_code(&w.code).unwrap_or(ErrorKind::Protocol), w.message)
    }
}

/// The answer to `hello`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HelloOk {
    /// The protocol version.
    pub version: u32,
    /// The store's epoch.
    pub epoch: u64,
    /// The store directory, absolute.
    pub dir: String,
    /// The owner's process id.
    pub pid: u32,
}

/// The answer to `acquire`: `lease` is absent when a try found the key held.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AcquireOk {
    /// The lease's id; absent when a try found the key held.
    pub lease: Option<u64>,
    /// The lease's fence (none for a permit).
    #[serde(default)]
    pub fence: Option<Fence>,
    /// How long the request waited in line before the grant.
    #[serde(default)]
    pub waited_ms: u64,
}

/// The answer to `ticket`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TicketOk {
    /// The ticket, for the `publish` and `ticket_end` that follow the commit.
    pub ticket: u64,
}

/// The answer to `subscribe`: where the subscription reads, for a resume.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscribeOk {
    /// The store's epoch.
    pub epoch: u64,
    /// The log the subscription reads.
    pub log: u64,
    /// The next position it reads.
    pub next: u64,
}

/// The start of a `msg` event as the owner writes it (`encode_msg`), fields
/// in this order; [`fast_reply`] reads frames of that shape without a full
/// parse.
const MSG_PREFIX: &[u8] = b"{\"ev\":\"msg\",\"sub\":";
/// The start of a `msgs` event as [`encode_msgs`] writes it.
const MSGS_PREFIX: &[u8] = b"{\"ev\":\"msgs\",\"sub\":";
const ANSWER_PREFIX: &[u8] = b"{\"id\":";
const NULL_ANSWER_SUFFIX: &[u8] = b",\"ok\":null}";

/// Appends a frame's length (filled in by the caller) and the fields a
/// `msg` and a `msgs` event share, up to `next`; gives where the frame starts.
fn event_head(buf: &mut Vec<u8>, prefix: &[u8], sub: u64, branch: &[u8], seq: u64, next: u64) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(prefix);
    push_u64(buf, sub);
    buf.extend_from_slice(b",\"branch\":");
    buf.extend_from_slice(branch);
    buf.extend_from_slice(b",\"seq\":");
    push_u64(buf, seq);
    buf.extend_from_slice(b",\"next\":");
    push_u64(buf, next);
    start
}

/// Appends a `msg` event's frame: the message's JSON copied as is, never
/// reparsed; `branch` is its branch's keys as a JSON array
/// ([`branch_json`]), written once for a run of messages of one branch.
/// The shape [`fast_reply`] reads: change both together.
pub(crate) fn encode_msg(buf: &mut Vec<u8>, sub: u64, branch: &[u8], seq: u64, next: u64, data: &[u8]) {
    let start = event_head(buf, MSG_PREFIX, sub, branch, seq, next);
    buf.extend_from_slice(b",\"data\":");
    buf.extend_from_slice(data);
    buf.push(b'}');
    let len = (buf.len() - start - 4) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// Appends a `msgs` event's frame (version 4): messages `seq`, `seq + 1`,
/// … of one branch, `next` after the last; each message's JSON copied as
/// is into `data`, its length in `lens` (a reader splits `data` without
/// scanning it). The shape [`fast_reply`] reads: change both together.
pub(crate) fn encode_msgs<'d>(buf: &mut Vec<u8>, sub: u64, branch: &[u8], seq: u64, next: u64, data: impl Iterator<Item = &'d [u8]> + Clone) {
    let start = event_head(buf, MSGS_PREFIX, sub, branch, seq, next);
    buf.extend_from_slice(b",\"lens\":[");
    for (i, d) in data.clone().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        push_u64(buf, d.len() as u64);
    }
    buf.extend_from_slice(b"],\"data\":[");
    for (i, d) in data.enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(d);
    }
    buf.extend_from_slice(b"]}");
    let len = (buf.len() - start - 4) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// A branch's keys as the JSON array a `msg` event carries.
pub(crate) fn branch_json(branch: &[Key]) -> Vec<u8> {
    serde_json::to_vec(branch).expect("keys serialize")
}

/// Appends the frame of an answer `{"id":N,"ok":null}` (a publish's).
pub(crate) fn encode_null_answer(buf: &mut Vec<u8>, id: u64) {
    let start = buf.len();
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(ANSWER_PREFIX);
    push_u64(buf, id);
    buf.extend_from_slice(NULL_ANSWER_SUFFIX);
    let len = (buf.len() - start - 4) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// A `publish` request's frame, as `frame(&Request { id, op: "publish",
/// channel, branch, data, .. })` writes it (fields in that order: the shape
/// [`fast_publish`] reads), without building the request: `data` is one
/// JSON value already checked, copied as is.
#[cfg(test)]
pub(crate) fn publish_frame(id: u64, channel: &str, branch: &[Key], data: &RawValue) -> Vec<u8> {
    let mut buf = Vec::new();
    publish_frame_into(&mut buf, id, channel, branch, data, &mut PublishTarget::default());
    buf
}

/// [`publish_frame`] written into `buf` (cleared first), whose capacity a
/// caller keeps for the next; `target` keeps the JSON of the last channel
/// and branch written, reused while they stay the same (a burst's
/// publishes mostly share them: a third of a publish's encoding was their
/// escaping, docs/performance.md).
pub(crate) fn publish_frame_into(buf: &mut Vec<u8>, id: u64, channel: &str, branch: &[Key], data: &RawValue, target: &mut PublishTarget) {
    let data = data.get().as_bytes();
    let middle = target.json(channel, branch);
    buf.clear();
    buf.reserve(40 + middle.len() + data.len());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(ANSWER_PREFIX);
    push_u64(buf, id);
    buf.extend_from_slice(middle);
    buf.extend_from_slice(b",\"data\":");
    buf.extend_from_slice(data);
    buf.push(b'}');
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
}

/// A burst's `publish` frame (`"messages":[…]` in place of `data`), in the
/// shape [`fast_publish`] reads, written into `buf` (cleared first):
/// `data` are JSON values already checked, copied as they are.
pub(crate) fn publish_burst_frame_into(buf: &mut Vec<u8>, id: u64, channel: &str, branch: &[Key], data: &[&RawValue], target: &mut PublishTarget) {
    let middle = target.json(channel, branch);
    buf.clear();
    buf.reserve(48 + middle.len() + data.iter().map(|d| d.get().len() + 1).sum::<usize>());
    buf.extend_from_slice(&[0; 4]);
    buf.extend_from_slice(ANSWER_PREFIX);
    push_u64(buf, id);
    buf.extend_from_slice(middle);
    buf.extend_from_slice(b",\"messages\":[");
    for (i, d) in data.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(d.get().as_bytes());
    }
    buf.extend_from_slice(b"]}");
    let len = (buf.len() - 4) as u32;
    buf[..4].copy_from_slice(&len.to_be_bytes());
}

/// The channel and branch of a publish frame as written last:
/// `,"op":"publish","channel":…,"branch":[…]`.
#[derive(Debug, Default)]
pub(crate) struct PublishTarget {
    channel: String,
    branch: Vec<Key>,
    json: Vec<u8>,
}

impl PublishTarget {
    /// The JSON between a publish's id and its `data` or `messages`.
    fn json(&mut self, channel: &str, branch: &[Key]) -> &[u8] {
        if self.json.is_empty() || self.channel != channel || self.branch != branch {
            self.json.clear();
            self.json.extend_from_slice(b",\"op\":\"publish\",\"channel\":");
            serde_json::to_writer(&mut self.json, channel).expect("a name serializes");
            self.json.extend_from_slice(b",\"branch\":");
            serde_json::to_writer(&mut self.json, branch).expect("keys serialize");
            channel.clone_into(&mut self.channel);
            self.branch.clear();
            self.branch.extend_from_slice(branch);
        }
        &self.json
    }
}

/// A frame of the two shapes that come by the thousand in a burst, read
/// without a full parse.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FastReply<'a> {
    /// `{"id":N,"ok":null}`.
    NullAnswer(u64),
    /// A `msg` event as [`encode_msg`] writes it: `branch` is the JSON
    /// array's bytes, `data` the message's.
    Msg { sub: u64, branch: &'a [u8], seq: u64, next: u64, data: &'a [u8] },
    /// A `msgs` event as [`encode_msgs`] writes it: messages `seq`,
    /// `seq + 1`, … in `data`, `next` after the last.
    Msgs { sub: u64, branch: &'a [u8], seq: u64, next: u64, data: Vec<&'a [u8]> },
}

/// Reads `frame` when it has one of [`FastReply`]'s exact shapes; `None`
/// for anything else, which is then parsed in full. `data` is not checked
/// as JSON: the owner checked it when it was published.
pub(crate) fn fast_reply(frame: &[u8]) -> Option<FastReply<'_>> {
    if let Some(rest) = frame.strip_prefix(ANSWER_PREFIX) {
        let (id, rest) = number(rest)?;
        return (rest == NULL_ANSWER_SUFFIX).then_some(FastReply::NullAnswer(id));
    }
    let (many, rest) = match frame.strip_prefix(MSG_PREFIX) {
        Some(rest) => (false, rest),
        None => (true, frame.strip_prefix(MSGS_PREFIX)?),
    };
    let (sub, rest) = number(rest)?;
    let rest = rest.strip_prefix(b",\"branch\":")?;
    let (branch, rest) = json_array(rest)?;
    let rest = rest.strip_prefix(b",\"seq\":")?;
    let (seq, rest) = number(rest)?;
    let rest = rest.strip_prefix(b",\"next\":")?;
    let (next, rest) = number(rest)?;
    if !many {
        let rest = rest.strip_prefix(b",\"data\":")?;
        let data = rest.strip_suffix(b"}")?;
        return (!data.is_empty()).then_some(FastReply::Msg { sub, branch, seq, next, data });
    }
    // `"lens":[3,10],"data":[…]}`: each message cut at its length, the
    // separators checked.
    let mut rest = rest.strip_prefix(b",\"lens\":[")?;
    let mut lens = Vec::new();
    loop {
        let (n, after) = number(rest)?;
        lens.push(usize::try_from(n).ok()?);
        match after.split_first()? {
            (b',', more) => rest = more,
            (b']', more) => {
                rest = more;
                break;
            }
            _ => return None,
        }
    }
    let mut rest = rest.strip_prefix(b",\"data\":[")?;
    let mut data = Vec::with_capacity(lens.len());
    for (i, n) in lens.iter().enumerate() {
        if *n == 0 || rest.len() <= *n {
            return None;
        }
        let (d, after) = rest.split_at(*n);
        let sep = if i + 1 == lens.len() { b']' } else { b',' };
        (after[0] == sep).then_some(())?;
        data.push(d);
        rest = &after[1..];
    }
    (rest == b"}").then_some(FastReply::Msgs { sub, branch, seq, next, data })
}

/// A `publish` request in the exact shape this project's client writes
/// (`{"id":N,"op":"publish","channel":"name","branch":[...],"data":V}`),
/// read without the full parse of [`Request`]; `None` for anything else
/// (then parsed in full, with its errors). Sound: a channel name without
/// escapes reads the same either way, the branch is parsed as keys, and
/// `data` must be exactly one JSON value up to the frame's closing brace,
/// so a frame with more fields never matches. `last`: the branch of the
/// connection's previous publish, as its JSON and its keys, reused when
/// this one's JSON is the same (a burst's publishes mostly share one).
pub fn fast_publish<'a>(frame: &'a [u8], last: &mut LastBranch) -> Option<FastPublish<'a>> {
    // UTF-8 is checked only where it may be missing: the data, and the
    // keys as they are read (the rest is matched as ASCII).
    let rest = frame.strip_prefix(ANSWER_PREFIX)?;
    let (id, rest) = number(rest)?;
    let rest = rest.strip_prefix(b",\"op\":\"publish\",\"channel\":\"")?;
    let n = rest.iter().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || **c == b'_' || **c == b'-').count();
    let channel = std::str::from_utf8(&rest[..n]).ok().filter(|_| n > 0)?;
    let rest = rest[n..].strip_prefix(b"\",\"branch\":")?;
    let (branch, rest) = json_array(rest)?;
    let same = last.as_ref().is_some_and(|(json, _)| **json == *branch);
    if !same {
        let keys: Vec<Key> = match plain_keys(branch) {
            Some(keys) => keys,
            None => serde_json::from_slice(branch).ok()?,
        };
        *last = Some((branch.into(), keys.into()));
    }
    let data = match rest.strip_prefix(b",\"data\":") {
        Some(one) => FastData::One(serde_json::from_str(std::str::from_utf8(one.strip_suffix(b"}")?).ok()?).ok()?),
        None => {
            let many = rest.strip_prefix(b",\"messages\":")?.strip_suffix(b"}")?;
            FastData::Burst(serde_json::from_str(std::str::from_utf8(many).ok()?).ok()?)
        }
    };
    let branch = last.as_ref().map(|(_, keys)| keys.clone()).expect("set above");
    Some(FastPublish { id, channel, branch, same_branch: same, data })
}

/// The branch of a connection's last publish read fast: its JSON array's
/// bytes and its keys.
pub type LastBranch = Option<(Box<[u8]>, Arc<[Key]>)>;

/// A `publish` read by [`fast_publish`]: what the owner needs of it,
/// borrowed from the frame (a [`Request`] is some 500 bytes, moved three
/// times a message, and its channel an allocation).
#[derive(Debug)]
pub struct FastPublish<'a> {
    /// Echoed by the answer.
    pub id: u64,
    /// The channel's name, within the naming rule's characters.
    pub channel: &'a str,
    /// The branch's keys.
    pub branch: Arc<[Key]>,
    /// The branch is the one of the connection's previous publish read
    /// fast (its JSON the same).
    pub same_branch: bool,
    /// The message, or a burst's messages.
    pub data: FastData<'a>,
}

/// What a publish read fast carries.
#[derive(Debug)]
pub enum FastData<'a> {
    /// `data`: one message, one JSON value.
    One(&'a RawValue),
    /// `messages`: a burst's messages, each one JSON value.
    Burst(Vec<&'a RawValue>),
}

/// A decimal u64 at the start of `b` (no sign, no leading zero), and what follows.
fn number(b: &[u8]) -> Option<(u64, &[u8])> {
    let n = b.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || n > 20 || (n > 1 && b[0] == b'0') {
        return None;
    }
    let mut v: u64 = 0;
    for &c in &b[..n] {
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some((v, &b[n..]))
}

/// The keys of a branch array as our client writes it (no spaces; strings
/// without escapes; integers, as text, from 0 up) read without serde; `None`
/// for any other shape, left to serde, which reads it the same or errs.
fn plain_keys(array: &[u8]) -> Option<Vec<Key>> {
    let mut rest = array.strip_prefix(b"[")?.strip_suffix(b"]")?;
    let mut keys = Vec::with_capacity(rest.iter().filter(|&&c| c == b',').count() + 1);
    while !rest.is_empty() {
        let (key, after) = match rest[0] {
            b'"' => {
                let n = rest[1..].iter().position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
                (rest[1 + n] == b'"').then_some(())?;
                (std::str::from_utf8(&rest[1..1 + n]).ok()?, &rest[n + 2..])
            }
            b'0'..=b'9' => {
                let (_, after) = number(rest)?;
                (std::str::from_utf8(&rest[..rest.len() - after.len()]).ok()?, after)
            }
            _ => return None,
        };
        keys.push(Key::from(key));
        rest = match after.split_first() {
            None => after,
            Some((b',', more)) if !more.is_empty() => more,
            _ => return None,
        };
    }
    Some(keys)
}

/// Appends `v` in decimal (no `fmt` machinery: this runs per message).
fn push_u64(buf: &mut Vec<u8>, v: u64) {
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// The JSON array of integers and strings at the start of `b` (its bytes,
/// brackets included), and what follows; not checked beyond its end.
fn json_array(b: &[u8]) -> Option<(&[u8], &[u8])> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let mut i = 1;
    let mut in_str = false;
    loop {
        let c = *b.get(i)?;
        match (in_str, c) {
            (true, b'\\') => i += 1,
            (_, b'"') => in_str = !in_str,
            (false, b']') => return Some((&b[..=i], &b[i + 1..])),
            _ => {}
        }
        i += 1;
    }
}

/// Appends one frame (length, then the JSON of `v`) to `out`.
pub fn encode<T: Serialize>(v: &T, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    serde_json::to_writer(&mut *out, v).expect("wire values serialize");
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

/// One frame's JSON, as bytes.
pub fn frame<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    encode(v, &mut out);
    out
}

/// The length of the frame at the start of `avail` once all of it is
/// there; an error for a frame over [`MAX_FRAME_BYTES`], known from its
/// length alone.
pub(crate) fn whole_frame(avail: &[u8]) -> Option<Result<usize>> {
    let len = u32::from_be_bytes(avail.get(..4)?.try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME_BYTES {
        return Some(Err(Error::new(ErrorKind::Protocol, format!("a frame of {len} bytes is over the limit of {MAX_FRAME_BYTES}"))));
    }
    (avail.len() >= 4 + len).then_some(Ok(len))
}

/// Reads frames from a byte stream.
pub struct FrameReader<R> {
    inner: R,
    buf: Vec<u8>,
    start: usize,
}

impl<R: tokio::io::AsyncRead + Unpin> FrameReader<R> {
    /// Reads frames from `inner`.
    pub fn new(inner: R) -> FrameReader<R> {
        FrameReader { inner, buf: Vec::with_capacity(64 * 1024), start: 0 }
    }

    /// The stream underneath.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// True when a whole frame is already read and waits in the buffer.
    pub fn has_frame(&self) -> bool {
        whole_frame(&self.buf[self.start..]).is_some()
    }

    /// The next frame's JSON if it is already read whole; no read.
    pub fn buffered(&mut self) -> Option<Result<&[u8]>> {
        let len = match whole_frame(&self.buf[self.start..])? {
            Ok(len) => len,
            Err(e) => return Some(Err(e)),
        };
        let s = self.start + 4;
        self.start += 4 + len;
        Some(Ok(&self.buf[s..s + len]))
    }

    /// The next frame's JSON; `Ok(None)` at a clean end of the stream.
    /// Errors with `protocol` for a frame over [`MAX_FRAME_BYTES`] or a
    /// stream cut inside a frame.
    pub async fn next(&mut self) -> Result<Option<&[u8]>> {
        use tokio::io::AsyncReadExt;
        loop {
            if let Some(len) = whole_frame(&self.buf[self.start..]) {
                let len = len?;
                let s = self.start + 4;
                self.start += 4 + len;
                return Ok(Some(&self.buf[s..s + len]));
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            if self.buf.capacity() - self.buf.len() < 16 * 1024 {
                self.buf.reserve(64 * 1024);
            }
            let n = self.inner.read_buf(&mut self.buf).await.map_err(|e| Error::io("reading from the connection", e))?;
            if n == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(Error::new(ErrorKind::Protocol, "the connection ended inside a frame"));
            }
        }
    }
}

/// Parses an address: `unix:PATH`, `tcp:HOST:PORT` or `tls:HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A Unix socket at this path.
    Unix(std::path::PathBuf),
    /// A TCP host and port, plain: for loopback or a trusted network.
    Tcp(String),
    /// A TCP host and port speaking TLS: the owner needs a certificate and
    /// key, a client the CA that signed that certificate (see docs/wire.md).
    Tls(String),
}

impl Address {
    /// Parses `unix:PATH`, `tcp:HOST:PORT` or `tls:HOST:PORT`; errors with
    /// `invalid` and examples.
    pub fn parse(s: &str) -> Result<Address> {
        let host_port = |hp: &str| hp.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
        if let Some(p) = s.strip_prefix("unix:") {
            if !p.is_empty() {
                return Ok(Address::Unix(p.into()));
            }
        } else if let Some(hp) = s.strip_prefix("tcp:")
            && host_port(hp)
        {
            return Ok(Address::Tcp(hp.to_owned()));
        } else if let Some(hp) = s.strip_prefix("tls:")
            && host_port(hp)
        {
            return Ok(Address::Tls(hp.to_owned()));
        }
        Err(Error::invalid(format!(
            "address {s:?} is not understood: write unix:PATH (like unix:data/tinystore.sock), tcp:HOST:PORT (like tcp:127.0.0.1:7070) or tls:HOST:PORT (like tls:db.example.com:7443)"
        )))
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Unix(p) => write!(f, "unix:{}", p.display()),
            Address::Tcp(hp) => write!(f, "tcp:{hp}"),
            Address::Tls(hp) => write!(f, "tls:{hp}"),
        }
    }
}

/// A field that is there, even as `null`: `Some`; serde's `Option` would
/// read `null` as absent, and a message of `null` is a message.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue as Deserialize>::deserialize(d).map(Some)
}

/// Decodes `bytes` as a stream of frames the way both ends do: each frame
/// as a request (with its keys checked, as the server does before acting)
/// and as an answer or event (as the client does). Never panics; gives how
/// many frames parsed as requests. The entry point of the fuzz target in
/// `core/fuzz` (WIRE-01), and of the decoder test beside it.
#[doc(hidden)]
pub fn fuzz_decode(bytes: &[u8]) -> usize {
    let mut reader = FrameReader::new(bytes);
    let mut requests = 0;
    futures::executor::block_on(async {
        while let Ok(Some(frame)) = reader.next().await {
            let _ = fast_publish(frame, &mut None);
            if let Ok(r) = serde_json::from_slice::<Request>(frame) {
                requests += 1;
                if let Some(k) = &r.key {
                    let _ = k.check();
                }
                for k in r.branch.iter().flatten() {
                    let _ = k.check();
                }
                if let Some(c) = &r.channel {
                    let _ = crate::base::limits::check_name("channel", c);
                }
            }
            let _ = serde_json::from_slice::<Reply>(frame);
            let _ = fast_reply(frame);
        }
    });
    requests
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(frame.len(), 4 + len);
        &frame[4..]
    }

    #[test]
    fn a_msg_event_read_fast_equals_its_full_parse() {
        let branches: Vec<Vec<Key>> = vec![
            vec![],
            vec![Key::from(7)],
            vec![Key::from("a]b"), Key::from("q\"]\\"), Key::from(-3)],
        ];
        for branch in branches {
            for data in [&b"null"[..], b"{\"id\":41,\"s\":\"}]\"}", b"[1,2]", b"\"x\""] {
                let mut buf = Vec::new();
                encode_msg(&mut buf, 3, &branch_json(&branch), 41, 42, data);
                let frame = body(&buf);
                let full: Reply = serde_json::from_slice(frame).unwrap();
                let Some(FastReply::Msg { sub, branch: b, seq, next, data: d }) = fast_reply(frame) else { panic!("not read fast: {}", String::from_utf8_lossy(frame)) };
                assert_eq!(full.ev.as_deref(), Some("msg"));
                assert_eq!((Some(sub), Some(seq), Some(next)), (full.sub, full.seq, full.next));
                assert_eq!(serde_json::from_slice::<Vec<Key>>(b).unwrap(), full.branch.unwrap());
                // The client reads an absent (or null) `data` as null.
                assert_eq!(d, full.data.map_or("null", |v| v.get()).as_bytes());
            }
        }
    }

    #[test]
    fn a_publish_answer_read_fast_equals_its_full_parse() {
        for id in [0, 1, 99, u64::MAX] {
            let mut buf = Vec::new();
            encode_null_answer(&mut buf, id);
            let frame = body(&buf);
            let full: Reply = serde_json::from_slice(frame).unwrap();
            assert_eq!(full.id, Some(id));
            assert!(full.ok.is_none_or(|v| v.get() == "null") && full.err.is_none());
            assert_eq!(fast_reply(frame), Some(FastReply::NullAnswer(id)));
        }
    }

    #[test]
    fn wire_01_other_shapes_are_left_to_the_full_parse() {
        for frame in [
            &b"{\"id\":1,\"ok\":{\"lease\":null}}"[..],
            b"{\"id\":1,\"err\":{\"code\":\"lost\",\"message\":\"m\"}}",
            b"{\"id\":01,\"ok\":null}",
            b"{\"id\":1,\"ok\":null,\"queued\":true}",
            b"{\"ev\":\"msg\",\"sub\":1,\"branch\":[\"a\"],\"seq\":1,\"next\":2}",
            b"{\"ev\":\"msg\",\"sub\":1,\"branch\":[\"a\"],\"seq\":1,\"next\":2,\"data\":}",
            b"{\"ev\":\"msg\",\"sub\":1,\"branch\":[\"a],\"seq\":1",
            b"{\"ev\":\"missed\",\"sub\":3,\"missed\":{\"count\":35,\"reason\":\"behind\"},\"next\":77}",
            b"{\"id\":99999999999999999999,\"ok\":null}",
        ] {
            assert_eq!(fast_reply(frame), None, "{}", String::from_utf8_lossy(frame));
        }
    }

    #[test]
    fn chan_06_a_publish_frame_names_its_own_channel_and_branch_as_serde_writes_the_request() {
        let datas: [&[u8]; 4] = [b"null", b"{\"id\":41,\"s\":\"}]\"}", b"\"x\\\"}\"", b"-1.5e3"];
        let branches = [vec![], vec![Key::from(7)], vec![Key::from("a]b"), Key::from("q\"]\\"), Key::from(-3), Key::from("é\n")]];
        // One buffer and one target for all, as a client thread keeps them:
        // each frame alone, whichever of its channel and branch changed
        // (channel outer, then branch outer).
        let mut kept = b"left over from a longer frame before".to_vec();
        let mut target = PublishTarget::default();
        let channels = ["chat", "chat-events_2", "Quote\"d\\ name é"];
        let pairs = channels.iter().flat_map(|c| branches.iter().map(move |b| (c, b)));
        let swapped = branches.iter().flat_map(|b| channels.iter().map(move |c| (c, b)));
        for (channel, branch) in pairs.chain(swapped) {
            for data in datas {
                let raw: &RawValue = serde_json::from_slice(data).unwrap();
                for id in [0, 7, u64::MAX] {
                    let mut r = Request::new(id, "publish");
                    r.channel = Some((*channel).into());
                    r.branch = Some(branch.clone());
                    r.data = Some(raw);
                    assert_eq!(publish_frame(id, channel, branch, raw), frame(&r), "{channel:?} {branch:?} {id}");
                    publish_frame_into(&mut kept, id, channel, branch, raw, &mut target);
                    assert_eq!(kept, frame(&r), "{channel:?} {branch:?} {id}, into a used buffer");
                    let burst: Vec<&RawValue> = datas.iter().map(|d| serde_json::from_slice(d).unwrap()).collect();
                    let mut r = Request::new(id, "publish");
                    r.channel = Some((*channel).into());
                    r.branch = Some(branch.clone());
                    r.messages = Some(burst.clone());
                    publish_burst_frame_into(&mut kept, id, channel, branch, &burst, &mut target);
                    assert_eq!(kept, frame(&r), "{channel:?} {branch:?} {id}, a burst");
                }
            }
        }
    }

    #[test]
    fn a_publish_read_fast_equals_its_full_parse() {
        let datas: [&[u8]; 5] = [b"null", b"{\"id\":41,\"s\":\"}]\"}", b"[1,{}]", b"\"x\\\"}\"", b"-1.5e3"];
        for branch in [vec![], vec![Key::from(7)], vec![Key::from("a]b"), Key::from("q\"]\\"), Key::from(-3)]] {
            for data in datas {
                let raw: &RawValue = serde_json::from_slice(data).unwrap();
                let mut r = Request::new(12, "publish");
                r.channel = Some("chat-events_2".into());
                r.branch = Some(branch.clone());
                r.data = Some(raw);
                let frame = serde_json::to_vec(&r).unwrap();
                let fast = fast_publish(&frame, &mut None).unwrap_or_else(|| panic!("not read fast: {}", String::from_utf8_lossy(&frame)));
                let full: Request = serde_json::from_slice(&frame).unwrap();
                assert_eq!(full.op, "publish");
                assert_eq!((fast.id, Some(fast.channel), Some(&*fast.branch)), (full.id, full.channel.as_deref(), full.branch.as_deref()));
                let FastData::One(one) = fast.data else { panic!("one message read as a burst") };
                assert_eq!(Some(one.get()), full.data.map(RawValue::get));
                assert_eq!(
                    (full.ticket, full.sub, full.lock.as_deref(), full.quiet),
                    (None, None, None, None),
                    "a frame read fast has no field beside id, op, channel, branch and data"
                );
            }
            let burst: Vec<&RawValue> = datas.iter().map(|d| serde_json::from_slice(d).unwrap()).collect();
            let mut r = Request::new(13, "publish");
            r.channel = Some("chat-events_2".into());
            r.branch = Some(branch.clone());
            r.messages = Some(burst.clone());
            let frame = serde_json::to_vec(&r).unwrap();
            let fast = fast_publish(&frame, &mut None).unwrap_or_else(|| panic!("not read fast: {}", String::from_utf8_lossy(&frame)));
            let FastData::Burst(many) = fast.data else { panic!("a burst read as one message") };
            let full: Request = serde_json::from_slice(&frame).unwrap();
            let text = |v: &[&RawValue]| v.iter().map(|d| d.get().to_owned()).collect::<Vec<_>>();
            assert_eq!(text(&many), text(&full.messages.unwrap()));
            assert_eq!(full.data.map(RawValue::get), None);
        }
    }

    #[test]
    fn wire_01_a_msgs_event_read_fast_equals_its_full_parse_and_a_bad_one_is_not_read_fast() {
        let datas: [&[u8]; 4] = [b"null", b"{\"id\":41,\"s\":\"]},\"}", b"[1,{}]", b"-1.5e3"];
        let mut buf = Vec::new();
        encode_msgs(&mut buf, 3, b"[\"7\"]", 41, 45, datas.iter().copied());
        let frame = &buf[4..];
        assert_eq!(u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize, frame.len());
        let Some(FastReply::Msgs { sub, branch, seq, next, data }) = fast_reply(frame) else { panic!("not read fast: {}", String::from_utf8_lossy(frame)) };
        assert_eq!((sub, branch, seq, next), (3, &b"[\"7\"]"[..], 41, 45));
        assert_eq!(data, datas.to_vec());
        let full: Reply = serde_json::from_slice(frame).unwrap();
        assert_eq!((full.ev.as_deref(), full.sub, full.seq, full.next), (Some("msgs"), Some(3), Some(41), Some(45)));
        let parsed: Vec<&RawValue> = serde_json::from_str(full.data.unwrap().get()).unwrap();
        assert_eq!(parsed.iter().map(|d| d.get().as_bytes()).collect::<Vec<_>>(), datas.to_vec());
        assert_eq!(full.lens.unwrap(), datas.iter().map(|d| d.len()).collect::<Vec<_>>());
        let text = String::from_utf8(frame.to_vec()).unwrap();
        for bad in [
            text.replace("\"lens\":[4,", "\"lens\":[5,"),
            text.replace("\"lens\":[4,", "\"lens\":[3,"),
            text.replace("\"lens\":[4,", "\"lens\":[0,"),
            text.replace(",6]", ",7]"),
            text.replace(",6]", ",6,1]"),
            text.replace("]}", "]"),
            text.replace("]}", "] }"),
        ] {
            assert_ne!(bad, text);
            assert!(!matches!(fast_reply(bad.as_bytes()), Some(FastReply::Msgs { .. })), "read fast: {bad}");
        }
    }

    #[test]
    fn wire_01_a_publish_read_fast_reuses_the_last_branch_only_when_its_json_is_the_same() {
        let frame = |branch: &str| format!("{{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"branch\":{branch},\"data\":1}}").into_bytes();
        let mut last = None;
        let (a, b, c) = (frame("[7,\"x\"]"), frame("[7,\"x\"]"), frame("[7,\"y\"]"));
        let first = fast_publish(&a, &mut last).unwrap();
        assert!(!first.same_branch);
        let second = fast_publish(&b, &mut last).unwrap();
        assert!(second.same_branch);
        assert!(Arc::ptr_eq(&first.branch, &second.branch), "the keys are reused, not read again");
        let third = fast_publish(&c, &mut last).unwrap();
        assert!(!third.same_branch);
        assert_eq!(&*third.branch, &[Key::from(7), Key::from("y")][..]);
        assert!(fast_publish(b"{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"branch\":[7,\"y\"],\"data\":\"\xff\"}", &mut last).is_none(), "not UTF-8");
    }

    #[test]
    fn wire_01_branch_keys_read_fast_equal_serde_or_are_left_to_it() {
        for array in [
            &b"[]"[..], b"[7]", b"[0]", b"[07]", b"[-3]", b"[-0]", b"[1.5]", b"[1e3]", b"[\"a\",\"b\"]", b"[\"\xc3\xa9\"]", b"[\"\"]",
            b"[ \"a\"]", b"[\"a\",]", b"[,]", b"[\"a\\\"b\"]", b"[18446744073709551615]", b"[18446744073709551616]", b"[\"a\"7]",
            b"[\"\xff\"]", b"[\"tab\there\"]", b"[true]", b"[null]", b"[3,\"x\",42]",
        ] {
            let by_serde = serde_json::from_slice::<Vec<Key>>(array).ok();
            if let Some(keys) = plain_keys(array) {
                assert_eq!(Some(keys), by_serde, "{}", String::from_utf8_lossy(array));
            }
        }
        assert_eq!(plain_keys(b"[3,\"x\",42]"), Some(vec![Key::from(3), Key::from("x"), Key::from(42)]));
        assert_eq!(plain_keys(b"[]"), Some(vec![]));
        for odd in [&b"[07]"[..], b"[-3]", b"[1.5]", b"[\"a\",]", b"[,]", b"[ \"a\"]", b"[\"\xff\"]", b"[\"a\\\"b\"]"] {
            assert_eq!(plain_keys(odd), None, "{}", String::from_utf8_lossy(odd));
        }
    }

    #[test]
    fn wire_01_publishes_of_other_shapes_are_left_to_the_full_parse() {
        for frame in [
            &b"{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"branch\":[],\"data\":1,\"ticket\":3}"[..],
            b"{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"branch\":[],\"data\":{\"a\":1},\"x\":{}}",
            b"{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"branch\":[],\"data\":}",
            b"{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"branch\":[],\"data\":{\"a\":1}",
            b"{\"id\":1,\"op\":\"publish\",\"channel\":\"\",\"branch\":[],\"data\":1}",
            b"{\"id\":1,\"op\":\"publish\",\"channel\":\"Bad Name\",\"branch\":[],\"data\":1}",
            b"{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"branch\":[true],\"data\":1}",
            b"{\"id\":1,\"op\":\"publish\",\"channel\":\"c\",\"data\":1}",
            b"{\"id\":1,\"op\":\"subscribe\",\"channel\":\"c\",\"branch\":[],\"data\":1}",
        ] {
            assert!(fast_publish(frame, &mut None).is_none(), "{}", String::from_utf8_lossy(frame));
        }
    }
}
