//! Channels: publish, and subscriptions read by pulling, woken through the
//! completion queue.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::task::{Context, Poll, Waker};

use tinystore::channels::{Event, RawSubscription, Scope};

use crate::args::{TsStr, TsValue, Values, bytes, text};
use crate::cancel::{TsCancel, block_on};
use crate::error::{TS_PENDING, TsError, call, quiet};
use crate::completions;
use crate::store::TsStore;

/// Checks a channel handle can be made: the name is in rule and the store
/// open (`store.channel(name).open()`). Errors: `invalid`, `closed`.
///
/// # Safety
/// `s` is live; `(name, name_len)` readable; `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_channel_check(s: *const TsStore, name: *const u8, name_len: usize, err: *mut *mut TsError) -> i32 {
    call(err, || {
        let s = unsafe { &*s };
        s.store.channel::<()>(unsafe { text(name, name_len) }?).open()?;
        Ok(())
    })
}

/// Publishes `data` (the JSON of a value) to the branch `keys` of
/// `channel`. Errors: `invalid` (name, key), `limit` (over 1 MiB, or nested over 100 deep), `closed`,
/// `cancelled`. The caller calls [`ts_completions_try`](crate::completions::ts_completions_try)
/// right after: what this call read for the caller's subscriptions is
/// signalled there, not to [`ts_completions_wait`](crate::completions::ts_completions_wait).
///
/// # Safety
/// `s` and `cancel` (or null) are live; `(channel, channel_len)`, `(keys, nkeys)`,
/// `(buf, buf_len)` and `(data, data_len)` readable; `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_publish(
    s: *const TsStore,
    channel: *const u8,
    channel_len: usize,
    keys: *const TsValue,
    nkeys: usize,
    buf: *const u8,
    buf_len: usize,
    data: *const u8,
    data_len: usize,
    cancel: *const TsCancel,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let s = unsafe { &*s };
        let channel = unsafe { text(channel, channel_len) }?;
        let keys = unsafe { Values::new(keys, nkeys, buf, buf_len) }.keys()?;
        let data: Box<[u8]> = unsafe { bytes(data, data_len) }.into();
        // The caller takes the tokens this pushes (ts_completions_try) on return.
        crate::completions::deferring(|| block_on(cancel, s.store.publish_raw(channel, &keys, data)))
    })
}

/// Publishes `count` messages (JSON values) to the branch `keys` of
/// `channel`, in order, and returns once the store has every one: message
/// `i` is the `lens[i]` bytes of `data` after the messages before it. They
/// leave together (one write when connected). Errors: `invalid` (name,
/// key, a message not JSON) and `limit` (a message over 1 MiB, or nested
/// over 100 deep), both naming the message and checked before any leaves
/// (nothing is published); then the first failure, naming its message:
/// `closed`, `unavailable`, `timeout` (those after it may still be
/// delivered); `cancelled`. The caller calls
/// [`ts_completions_try`](crate::completions::ts_completions_try) right after,
/// as after [`ts_publish`].
///
/// # Safety
/// `s` and `cancel` (or null) are live; `(channel, channel_len)`, `(keys, nkeys)`,
/// `(buf, buf_len)`, `(data, data_len)` and `(lens, count)` readable; the
/// lengths add up to at most `data_len`; `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_publish_many(
    s: *const TsStore,
    channel: *const u8,
    channel_len: usize,
    keys: *const TsValue,
    nkeys: usize,
    buf: *const u8,
    buf_len: usize,
    data: *const u8,
    data_len: usize,
    lens: *const usize,
    count: usize,
    cancel: *const TsCancel,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let s = unsafe { &*s };
        let channel = unsafe { text(channel, channel_len) }?;
        let keys = unsafe { Values::new(keys, nkeys, buf, buf_len) }.keys()?;
        let mut data = unsafe { bytes(data, data_len) };
        let lens: &[usize] = if count == 0 { &[] } else { unsafe { std::slice::from_raw_parts(lens, count) } };
        let mut messages = Vec::with_capacity(count);
        for &n in lens {
            let (one, rest) = data.split_at_checked(n).ok_or_else(|| tinystore::Error::new(tinystore::ErrorKind::Invalid, "the messages' lengths add up to more than their data"))?;
            messages.push(Box::<[u8]>::from(one));
            data = rest;
        }
        // The caller takes the tokens this pushes (ts_completions_try) on return.
        crate::completions::deferring(|| block_on(cancel, s.store.publish_raw_many(channel, &keys, messages)))
    })
}

/// Outcomes of publishes that answered later ([`TS_PENDING`]), by token,
/// until [`ts_publish_outcome`] takes them.
static OUTCOMES: LazyLock<Mutex<HashMap<u64, tinystore::Result<()>>>> = LazyLock::new(Default::default);

/// Set in the `token` given to [`ts_publish_start`] by a caller that runs
/// the token's function from before the call: a publish that succeeds is
/// then pushed as the token with [`TS_TOKEN_PUBLISHED`] set, and has no
/// outcome to take (no [`ts_publish_outcome`] call). Token numbers stay
/// below this bit.
pub const TS_TOKEN_REGISTERED: u64 = 0x4000_0000_0000_0000;
/// Set in a token pushed on the completion queue for a publish started
/// with [`TS_TOKEN_REGISTERED`]: it succeeded.
pub const TS_TOKEN_PUBLISHED: u64 = 0x8000_0000_0000_0000;

/// Publishes `data` (the JSON of a value) to the branch `keys` of
/// `channel`, without waiting for the owner's answer: [`TS_OK`](crate::error::TS_OK) or
/// [`TS_ERR`](crate::error::TS_ERR) when the publish ended within the call (always in the owning
/// process), else [`TS_PENDING`], and `token` is pushed on the completion
/// queue once the outcome can be taken with [`ts_publish_outcome`] (with
/// [`TS_TOKEN_REGISTERED`] set in `token`: a success is pushed as
/// `token | TS_TOKEN_PUBLISHED` instead, with nothing to take; a failure as
/// the token, its outcome to take). So a
/// program's many goroutines publishing at once wait in Go, not each in a
/// thread of its own woken per answer (a lone publish is faster with
/// [`ts_publish`], whose thread reads its own answer). Errors: `invalid` (name, key),
/// `limit` (over 1 MiB, or nested over 100 deep), `closed`, `unavailable`, `timeout`. After
/// [`TS_OK`](crate::error::TS_OK) or [`TS_ERR`](crate::error::TS_ERR) the caller calls
/// [`ts_completions_try`](crate::completions::ts_completions_try) right
/// away: what this call read for the caller's subscriptions is signalled
/// there, not to [`ts_completions_wait`](crate::completions::ts_completions_wait);
/// after [`TS_PENDING`] it is signalled to `ts_completions_wait`.
///
/// # Safety
/// `s` is live; `(channel, channel_len)`, `(keys, nkeys)`, `(buf, buf_len)`
/// and `(data, data_len)` readable; `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_publish_start(
    s: *const TsStore,
    channel: *const u8,
    channel_len: usize,
    keys: *const TsValue,
    nkeys: usize,
    buf: *const u8,
    buf_len: usize,
    data: *const u8,
    data_len: usize,
    token: u64,
    err: *mut *mut TsError,
) -> i32 {
    let mut pending = false;
    let rc = call(err, || {
        let s = unsafe { &*s };
        let channel = unsafe { text(channel, channel_len) }?;
        let keys = unsafe { Values::new(keys, nkeys, buf, buf_len) }.keys()?;
        let data = unsafe { bytes(data, data_len) };
        let registered = token & TS_TOKEN_REGISTERED != 0;
        let token = token & !TS_TOKEN_REGISTERED;
        // Run on the thread that reads the answer; must not block.
        let done = move |r: tinystore::Result<()>| {
            if registered && r.is_ok() {
                // The caller's function is there already: no outcome to keep.
                completions::push(token | TS_TOKEN_PUBLISHED);
                return;
            }
            OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).insert(token, r);
            completions::push(token);
        };
        // The caller takes the tokens this pushes (ts_completions_try) on
        // return, unless the publish is pending: it then takes none (one
        // call less a publish), and the drain thread is signalled.
        match crate::completions::deferring(|| s.store.publish_raw_then(channel, &keys, data, done)) {
            Some(r) => Ok(r?),
            None => {
                crate::completions::signal_deferred();
                pending = true;
                Ok(())
            }
        }
    });
    if pending { TS_PENDING } else { rc }
}

/// Takes the outcome of the publish of [`ts_publish_start`] that gave
/// [`TS_PENDING`] with `token`: [`TS_OK`](crate::error::TS_OK), [`TS_ERR`](crate::error::TS_ERR) (`*err` set), or
/// [`TS_PENDING`] while it has not come (or was taken already).
///
/// # Safety
/// `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_publish_outcome(token: u64, err: *mut *mut TsError) -> i32 {
    let outcome = OUTCOMES.lock().unwrap_or_else(|e| e.into_inner()).remove(&token);
    match outcome {
        None => TS_PENDING,
        Some(r) => call(err, || Ok(r?)),
    }
}

/// A subscription, read with [`ts_sub_next`].
pub struct TsSub {
    raw: RawSubscription,
    waker: Waker,
    batch: Mutex<Batch>,
}

/// The events of the last [`ts_sub_next`] and what their views point into.
#[derive(Default)]
struct Batch {
    events: Vec<Event>,
    keys: Vec<TsStr>,
    out: Vec<TsEvent>,
}

// The raw pointers in `keys` and `out` point into `events`, owned alongside.
unsafe impl Send for Batch {}

/// A message.
pub const TS_EVENT_MESSAGE: u8 = 0;
/// Word of missed messages, just before the next one.
pub const TS_EVENT_MISSED: u8 = 1;

/// One event of a subscription, valid until the next [`ts_sub_next`] or
/// [`ts_sub_free`] of its subscription.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TsEvent {
    /// `TS_EVENT_MESSAGE` or `TS_EVENT_MISSED`.
    pub kind: u8,
    /// A message: its sequence number in its branch.
    pub seq: u64,
    /// A message: its JSON.
    pub data: TsStr,
    /// A message: the keys of its branch (`branch_len` of them).
    pub branch: *const TsStr,
    pub branch_len: usize,
    /// Missed: 1 when `count` is known, 0 where it cannot be.
    pub count_known: u8,
    /// Missed: how many messages.
    pub count: u64,
    /// Missed: why, `behind` or `reconnect` (static text).
    pub reason: TsStr,
}

/// Subscribes to the branch `keys` of `channel` (and every branch below it
/// when `recursive` is 1). Returns once the store has the subscription: it
/// gets every message published after. When it has something to read, or
/// ends, `token` is pushed on the completion queue. Errors: `invalid`,
/// `limit` (10,000 subscriptions), `closed`, `cancelled`.
///
/// # Safety
/// `s` and `cancel` (or null) are live; `(channel, channel_len)`, `(keys, nkeys)` and
/// `(buf, buf_len)` readable; `out` and `err` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_subscribe(
    s: *const TsStore,
    channel: *const u8,
    channel_len: usize,
    keys: *const TsValue,
    nkeys: usize,
    buf: *const u8,
    buf_len: usize,
    recursive: u8,
    token: u64,
    cancel: *const TsCancel,
    out: *mut *mut TsSub,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let s = unsafe { &*s };
        let channel = unsafe { text(channel, channel_len) }?;
        let keys = unsafe { Values::new(keys, nkeys, buf, buf_len) }.keys()?;
        let scope = if recursive != 0 { Scope::Recursive } else { Scope::Branch };
        let raw = block_on(cancel, s.store.subscribe_raw(channel, &keys, scope, None))?;
        let sub = TsSub { raw, waker: completions::waker(token), batch: Mutex::new(Batch::default()) };
        unsafe { *out = Box::into_raw(Box::new(sub)) };
        Ok(())
    })
}

/// Takes up to `max` events that are ready now, without waiting. When fewer
/// than `max` come back and it has not ended, the subscription is armed: its
/// token is pushed on the completion queue once more is ready (or it
/// ended), so the caller waits for the token without calling again. `*ended`
/// is 1 once the subscription is stopped or its store closed and nothing is
/// left to read (it may come with the last events). The events stay valid
/// until the next call on this subscription.
///
/// # Safety
/// `sub` is live; `events`, `n`, `ended` and `err` writable. The events are
/// read only until the next call of this function or [`ts_sub_free`] on `sub`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_sub_next(
    sub: *const TsSub,
    max: usize,
    events: *mut *const TsEvent,
    n: *mut usize,
    ended: *mut u8,
    err: *mut *mut TsError,
) -> i32 {
    call(err, || {
        let sub = unsafe { &*sub };
        let mut b = sub.batch.lock().unwrap_or_else(|e| e.into_inner());
        b.events.clear();
        b.keys.clear();
        b.out.clear();
        let mut is_ended = false;
        // Polling to the end registers the waker at the last (Pending) poll,
        // so a short batch leaves the subscription armed: the caller saves a
        // call per wake-up that would only find nothing and arm it.
        let mut cx = Context::from_waker(&sub.waker);
        while b.events.len() < max.max(1) {
            match sub.raw.poll_next(&mut cx) {
                Poll::Ready(Some(e)) => b.events.push(e),
                Poll::Ready(None) => {
                    is_ended = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        let Batch { events: evs, keys, out } = &mut *b;
        for e in evs.iter() {
            if let Event::Message(m) = e {
                keys.extend(m.branch.iter().map(|k| TsStr::of(k.as_str().as_bytes())));
            }
        }
        let mut next_key = 0;
        for e in evs.iter() {
            out.push(match e {
                Event::Message(m) => {
                    let at = next_key;
                    next_key += m.branch.len();
                    TsEvent {
                        kind: TS_EVENT_MESSAGE,
                        seq: m.seq,
                        data: TsStr::of(&m.data),
                        branch: crate::args::ptr_of(&keys[at..at + m.branch.len()]),
                        branch_len: m.branch.len(),
                        count_known: 0,
                        count: 0,
                        reason: TsStr::of(b""),
                    }
                }
                Event::Missed(missed) => TsEvent {
                    kind: TS_EVENT_MISSED,
                    seq: 0,
                    data: TsStr::of(b""),
                    branch: std::ptr::null(),
                    branch_len: 0,
                    count_known: missed.count.is_some() as u8,
                    count: missed.count.unwrap_or(0),
                    reason: TsStr::of(missed.reason.as_str().as_bytes()),
                },
            });
        }
        unsafe {
            *events = crate::args::ptr_of(out);
            *n = out.len();
            *ended = is_ended as u8;
        }
        Ok(())
    })
}

/// Stops the subscription: nothing more is read, and its token is pushed
/// once more so its reader sees it ended. Any thread; idempotent.
///
/// # Safety
/// `sub` is null or live.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_sub_stop(sub: *const TsSub) {
    quiet((), || {
        if let Some(sub) = unsafe { sub.as_ref() } {
            sub.raw.stop();
            sub.waker.wake_by_ref();
        }
    })
}

/// Stops (if needed) and frees the subscription.
///
/// # Safety
/// `sub` is null or live; its events are not read after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ts_sub_free(sub: *mut TsSub) {
    quiet((), || {
        if !sub.is_null() {
            drop(unsafe { Box::from_raw(sub) });
        }
    })
}
