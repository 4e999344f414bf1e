//! A subscription, pulled by the JavaScript layer one batch at a time.

use std::sync::Arc;

use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;
use tinystore::channels::{Event, RawSubscription};

use crate::ready::promise;
use crate::uvread::UvReader;

/// A batch of events as it crosses to JavaScript: the messages' JSON as one
/// array, parsed with one `JSON.parse` (a string and an object a message
/// crossed one by one cost more than the parse: docs/performance-node.md), and
/// word of missed messages placed between them.
#[napi(object)]
pub struct NativeBatch {
    /// The messages' JSON values, in order, as one JSON array (`[]` when
    /// the batch has only missed ones).
    pub json: String,
    /// Each message's sequence number in its branch.
    pub seqs: Vec<f64>,
    /// Each message's branch, as its index in `branches`.
    pub branch_of: Vec<u32>,
    /// The batch's distinct branches, each as its keys as text.
    pub branches: Vec<Vec<String>>,
    /// Word of missed messages, in order, each told before the message at
    /// its `before` index (`seqs.length`: after the last).
    pub missed: Vec<NativeMissed>,
}

/// Messages a subscription missed.
#[napi(object)]
pub struct NativeMissed {
    /// Told before the batch's message at this index.
    pub before: u32,
    /// Why: `behind` or `reconnect`.
    pub reason: String,
    /// How many, where known.
    pub count: Option<f64>,
}

impl NativeBatch {
    fn of(events: impl IntoIterator<Item = Event>) -> NativeBatch {
        let mut b = NativeBatch { json: String::from("["), seqs: Vec::new(), branch_of: Vec::new(), branches: Vec::new(), missed: Vec::new() };
        // The branches' keys as the engine shares them, to find one again.
        let mut seen: Vec<Arc<[tinystore::Key]>> = Vec::new();
        for e in events {
            match e {
                Event::Message(m) => {
                    if !b.seqs.is_empty() {
                        b.json.push(',');
                    }
                    // The engine checked it is UTF-8 JSON when it was published.
                    b.json.push_str(&String::from_utf8_lossy(&m.data));
                    b.seqs.push(m.seq as f64);
                    let at = match seen.iter().position(|k| Arc::ptr_eq(k, &m.branch) || **k == *m.branch) {
                        Some(at) => at,
                        None => {
                            seen.push(m.branch.clone());
                            b.branches.push(m.branch.iter().map(|k| k.as_str().to_owned()).collect());
                            seen.len() - 1
                        }
                    };
                    b.branch_of.push(at as u32);
                }
                Event::Missed(m) => b.missed.push(NativeMissed {
                    before: b.seqs.len() as u32,
                    reason: m.reason.as_str().to_owned(),
                    count: m.count.map(|c| c as f64),
                }),
            }
        }
        b.json.push(']');
        b
    }
}

/// The engine's subscription: read with `take` (what is ready now) and
/// `next` (waits for at least one event; empty once ended).
#[napi]
pub struct NativeSubscription {
    sub: Arc<RawSubscription>,
    uv: Option<Arc<UvReader>>,
    /// Its store, kept open while the subscription lives: a program that
    /// keeps no reference to the store must not have it closed under a
    /// running subscription by a garbage collection.
    _store: tinystore::Store,
}

impl NativeSubscription {
    pub fn new(sub: RawSubscription, uv: Option<Arc<UvReader>>, store: tinystore::Store) -> NativeSubscription {
        NativeSubscription { sub: Arc::new(sub), uv, _store: store }
    }
}

#[napi]
impl NativeSubscription {
    /// Up to `max` events that are ready now, without waiting; empty when
    /// none are (see `ended`).
    #[napi]
    pub fn take(&self, max: u32) -> NativeBatch {
        let mut n = 0;
        NativeBatch::of(std::iter::from_fn(|| {
            n += 1;
            if n > max { None } else { self.sub.try_next() }
        }))
    }

    /// Waits for at least one event and gives up to `max`; empty once the
    /// subscription is stopped or its store closed.
    #[napi(ts_return_type = "Promise<NativeBatch>")]
    pub fn next<'env>(&self, env: &'env Env, max: u32) -> napi::Result<PromiseRaw<'env, NativeBatch>> {
        let sub = self.sub.clone();
        if let Some(uv) = &self.uv {
            uv.ensure(env);
        }
        // Settled by the engine thread that delivers (see `ready::promise`).
        promise(env, async move { Ok(NativeBatch::of(sub.next_batch(max as usize).await)) })
    }

    /// True once stopped, or once the store closed and everything was read.
    #[napi(getter)]
    pub fn ended(&self) -> bool {
        self.sub.is_ended()
    }

    /// Stops the subscription: a pending `next` resolves empty. Idempotent.
    #[napi]
    pub fn stop(&self) {
        self.sub.stop();
    }
}
