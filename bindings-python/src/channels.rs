//! Branches of channels: publishing, and subscriptions read in batches.

use std::sync::Arc;

use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use tinystore::channels::{Event, RawSubscription, Scope};
use tinystore::{Key, Store, runtime};

use crate::pending::{Completer, Convert, none, run_future, value};
use crate::{convert, error};

struct Branch {
    store: Store,
    channel: Arc<str>,
    keys: Vec<Key>,
}

/// A branch of a channel: the channel's name and a path of keys, checked.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeBranch {
    inner: Arc<Branch>,
}

impl NativeBranch {
    pub fn new(store: Store, channel: Arc<str>, keys: Vec<Key>) -> NativeBranch {
        NativeBranch { inner: Arc::new(Branch { store, channel, keys }) }
    }
    pub fn store(&self) -> &Store {
        &self.inner.store
    }
    pub fn channel(&self) -> &str {
        &self.inner.channel
    }
    pub fn keys(&self) -> &[Key] {
        &self.inner.keys
    }
}

#[pymethods]
impl NativeBranch {
    /// The branch `key` below this one.
    fn under(&self, key: &Bound<'_, PyAny>) -> PyResult<NativeBranch> {
        let mut keys = self.inner.keys.clone();
        keys.push(convert::key(key)?);
        Ok(NativeBranch::new(self.inner.store.clone(), self.inner.channel.clone(), keys))
    }

    /// The path of keys, as text.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.keys.iter().map(Key::as_str))
    }

    #[getter]
    fn channel_name(&self) -> &str {
        &self.inner.channel
    }

    /// Publishes JSON bytes: `None` at once; else, with the running loop's
    /// `completer`, the id its future is settled under by `settle`, and
    /// without, a `Pending`. The future is polled at once, so the message
    /// leaves during this call and publishes keep the caller's order over a
    /// connection too (CHAN-01).
    #[pyo3(signature = (data, completer=None))]
    fn publish(&self, py: Python<'_>, data: &[u8], completer: Option<&Bound<'_, Completer>>) -> PyResult<Py<PyAny>> {
        let Some(completer) = completer else {
            let b = self.inner.clone();
            let data: Box<[u8]> = data.into();
            return run_future(py, async move { b.store.publish_raw(&b.channel, &b.keys, data).await.map(|()| none()) });
        };
        // The answer is queued on the completer where it is read: no
        // future, no task, no channel per publish (64 in flight feel each).
        let (id, done) = completer.get().call();
        let b = &self.inner;
        let ended = py.detach(|| {
            let _rt = runtime::handle().enter();
            runtime::on_loop(|| b.store.publish_raw_then(&b.channel, &b.keys, data, move |r| done(r.map(|()| none()))))
        });
        match ended {
            None => id.into_py_any(py),
            Some(r) => r.map(|()| py.None()).map_err(|e| error::to_py(py, e)),
        }
    }

    /// Subscribes (this branch, or with `recursive` every branch below it
    /// too): a `NativeSubscription` once the store has it, or a `Pending`.
    #[pyo3(signature = (recursive=false))]
    fn subscribe(&self, py: Python<'_>, recursive: bool) -> PyResult<Py<PyAny>> {
        let b = self.inner.clone();
        let scope = if recursive { Scope::Recursive } else { Scope::Branch };
        run_future(py, async move {
            let sub = b.store.subscribe_raw(&b.channel, &b.keys, scope, None).await?;
            Ok(value(NativeSubscription { sub: Arc::new(sub) }))
        })
    }
}

/// A subscription of the engine, read a batch at a time.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeSubscription {
    sub: Arc<RawSubscription>,
}

/// What `next_batch` gives for each event, in its tuple's first place.
const MISSED: u8 = 0;
const MESSAGE: u8 = 1;
/// A message whose data is not JSON: the tuple holds the error instead.
const UNDECODABLE: u8 = 2;

#[pymethods]
impl NativeSubscription {
    /// Up to `max` events once at least one is ready: a list of
    /// `(1, seq, value, branch)` for a message (its JSON decoded as
    /// `json.loads` does), `(2, seq, error, branch)` for a message whose
    /// data is not JSON, and `(0, count, reason, None)` for missed ones;
    /// empty once stopped or the store closed. A `Pending` while nothing is
    /// ready.
    fn next_batch(&self, py: Python<'_>, max: usize) -> PyResult<Py<PyAny>> {
        let sub = self.sub.clone();
        run_future(py, async move { Ok(events(sub.next_batch(max.max(1)).await)) })
    }

    /// Stops the subscription (idempotent): a pending `next_batch` ends empty.
    fn stop(&self, py: Python<'_>) {
        let sub = self.sub.clone();
        py.detach(move || sub.stop());
    }

    #[getter]
    fn ended(&self) -> bool {
        self.sub.is_ended()
    }
}

impl Drop for NativeSubscription {
    fn drop(&mut self) {
        self.sub.stop();
    }
}

fn events(batch: Vec<Event>) -> Convert {
    Box::new(move |py| {
        let out = PyList::empty(py);
        // One tuple per branch of the batch, not per message.
        let mut last: Option<(Arc<[Key]>, Bound<'_, PyTuple>)> = None;
        for e in batch {
            let item = match e {
                Event::Message(m) => {
                    let branch = match &last {
                        Some((k, t)) if Arc::ptr_eq(k, &m.branch) => t.clone(),
                        _ => {
                            let t = PyTuple::new(py, m.branch.iter().map(Key::as_str))?;
                            last = Some((m.branch.clone(), t.clone()));
                            t
                        }
                    };
                    let (kind, value) = match convert::json_value(py, &m.data) {
                        Ok(v) => (MESSAGE, v),
                        Err(e) => (UNDECODABLE, e.into_value(py).into_bound(py).into_any()),
                    };
                    (kind, m.seq.into_pyobject(py)?.into_any(), value, branch.into_any())
                }
                Event::Missed(x) => (
                    MISSED,
                    x.count.into_pyobject(py)?.into_any(),
                    x.reason.as_str().into_pyobject(py)?.into_any(),
                    py.None().into_bound(py),
                ),
            };
            out.append(item)?;
        }
        Ok(out.into_any().unbind())
    })
}
