//! A subscription, pulled by the JavaScript layer one batch at a time.

use std::sync::Arc;

use napi::Env;
use napi::bindgen_prelude::PromiseRaw;
use napi_derive::napi;
use tinystore::channels::{Event, RawSubscription};

use crate::ready::promise;
use crate::uvread::UvReader;

/// A message, or word of missed ones, as it crosses to JavaScript.
///
/// A message has `json`, `branch` and `seq`; a miss has `reason`
/// (`behind` or `reconnect`) and `count` (absent where unknown).
#[napi(object)]
pub struct NativeEvent {
    /// The message's JSON text.
    pub json: Option<String>,
    /// The message's branch: its keys as text.
    pub branch: Option<Vec<String>>,
    /// The message's sequence number in its branch.
    pub seq: Option<f64>,
    /// Why messages were missed: `behind` or `reconnect`.
    pub reason: Option<String>,
    /// How many messages were missed, where known.
    pub count: Option<f64>,
}

impl From<Event> for NativeEvent {
    fn from(e: Event) -> NativeEvent {
        match e {
            Event::Message(m) => NativeEvent {
                json: Some(String::from_utf8_lossy(&m.data).into_owned()),
                branch: Some(m.branch.iter().map(|k| k.as_str().to_owned()).collect()),
                seq: Some(m.seq as f64),
                reason: None,
                count: None,
            },
            Event::Missed(m) => NativeEvent {
                json: None,
                branch: None,
                seq: None,
                reason: Some(m.reason.as_str().to_owned()),
                count: m.count.map(|c| c as f64),
            },
        }
    }
}

/// The engine's subscription: read with `take` (what is ready now) and
/// `next` (waits for at least one event; empty once ended).
#[napi]
pub struct NativeSubscription {
    sub: Arc<RawSubscription>,
    uv: Option<Arc<UvReader>>,
}

impl NativeSubscription {
    pub fn new(sub: RawSubscription, uv: Option<Arc<UvReader>>) -> NativeSubscription {
        NativeSubscription { sub: Arc::new(sub), uv }
    }
}

#[napi]
impl NativeSubscription {
    /// Up to `max` events that are ready now, without waiting; empty when
    /// none are (see `ended`).
    #[napi]
    pub fn take(&self, max: u32) -> Vec<NativeEvent> {
        let mut out = Vec::new();
        while out.len() < max as usize {
            match self.sub.try_next() {
                Some(e) => out.push(e.into()),
                None => break,
            }
        }
        out
    }

    /// Waits for at least one event and gives up to `max`; empty once the
    /// subscription is stopped or its store closed.
    #[napi(ts_return_type = "Promise<Array<NativeEvent>>")]
    pub fn next<'env>(&self, env: &'env Env, max: u32) -> napi::Result<PromiseRaw<'env, Vec<NativeEvent>>> {
        let sub = self.sub.clone();
        if let Some(uv) = &self.uv {
            uv.ensure(env);
        }
        // Settled by the engine thread that delivers (see `ready::promise`).
        promise(env, async move { Ok(sub.next_batch(max as usize).await.into_iter().map(NativeEvent::from).collect()) })
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
