//! Calls that may not complete at once, and how their results reach the
//! Python event loop without blocking it and without engine threads ever
//! taking the GIL.
//!
//! A call first polls its core future once on the caller's thread (GIL
//! released): in an owned store, publishing, taking a free key or reading a
//! ready batch completes there and then, with no thread hop. Otherwise the
//! call returns a [`Pending`]; the Python layer starts it on the
//! [`Completer`] of its event loop, which runs it as a core
//! [`LoopTask`] (or on the core's blocking pool, for SQLite), queues the
//! outcome, and writes one byte to a socket the loop watches. The loop's
//! reader callback then calls [`Completer::settle`], which converts every
//! queued outcome on the loop's thread and settles the asyncio futures.
//!
//! A `LoopTask` woken while the loop's thread reads a connected store's
//! socket itself (`loopread`) is completed right there, on the loop's
//! thread; woken by an engine thread, a runtime task completes it.
//!
//! A connected publish needs none of that: the core hands its answer to a
//! function where it is read (`Store::publish_raw_then`), which queues the
//! outcome on the completer ([`Completer::call`]).

use std::collections::HashMap;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::{IntoPyObjectExt, intern};
use tinystore::runtime::{self, LoopTask};

use crate::error;

/// Turns a result into a Python object; runs on the loop's thread, attached.
pub type Convert = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;
/// What a call ends with.
pub type Outcome = Result<Convert, tinystore::Error>;

type BoxFuture = Pin<Box<dyn Future<Output = Outcome> + Send>>;

enum Work {
    Future(BoxFuture),
    Blocking(Box<dyn FnOnce() -> Outcome + Send>),
}

/// `None`, for calls that give nothing (pyo3 makes `()` an empty tuple).
pub fn none() -> Convert {
    Box::new(|py| Ok(py.None()))
}

/// A value to hand to Python as it is.
pub fn value<T>(v: T) -> Convert
where
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    Box::new(move |py| v.into_py_any(py))
}

/// A call that has not completed yet: start it with `Completer.start`.
/// Dropped unstarted, the call is abandoned (a waiter leaves the queue).
#[pyclass(frozen, module = "tinystore._native")]
pub struct Pending {
    work: Mutex<Option<Work>>,
}

fn finish(py: Python<'_>, o: Outcome) -> PyResult<Py<PyAny>> {
    match o {
        Ok(c) => c(py),
        Err(e) => Err(error::to_py(py, e)),
    }
}

/// Polls `fut` once, GIL released: its value if it is ready, else a `Pending`.
pub fn run_future<F>(py: Python<'_>, fut: F) -> PyResult<Py<PyAny>>
where
    F: Future<Output = Outcome> + Send + 'static,
{
    match poll_once(py, Box::pin(fut)) {
        Ok(o) => finish(py, o),
        Err(fut) => pending(py, Work::Future(fut)),
    }
}

fn poll_once(py: Python<'_>, mut fut: BoxFuture) -> Result<Outcome, BoxFuture> {
    py.detach(|| {
        let _rt = runtime::handle().enter();
        let mut cx = Context::from_waker(Waker::noop());
        // Calls this one completes (a subscription's batch after an owned
        // publish, a waiter's grant after a release) finish on this thread,
        // and their loop finds its bell byte without sleeping: no engine
        // thread woken, and none to wake the loop in turn.
        runtime::on_loop(|| match fut.as_mut().poll(&mut cx) {
            Poll::Ready(o) => Ok(o),
            Poll::Pending => Err(fut),
        })
    })
}

/// A call that blocks (SQLite, opening a store): always a `Pending`, run on
/// the core runtime's blocking pool.
pub fn run_blocking<F>(py: Python<'_>, f: F) -> PyResult<Py<PyAny>>
where
    F: FnOnce() -> Outcome + Send + 'static,
{
    pending(py, Work::Blocking(Box::new(f)))
}

fn pending(py: Python<'_>, work: Work) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, Pending { work: Mutex::new(Some(work)) })?.into_any())
}

struct Shared {
    done: Mutex<Vec<(u64, Outcome)>>,
    signalled: AtomicBool,
    bell: UnixStream,
    next: AtomicU64,
    /// The calls running as a [`LoopTask`], to cancel; `None` while one is
    /// being started.
    running: Mutex<HashMap<u64, Option<Arc<LoopTask>>>>,
}

impl Shared {
    fn push(&self, id: u64, o: Outcome) {
        self.running.lock().remove(&id);
        self.done.lock().push((id, o));
        if DRAINS_NEXT.get() == std::ptr::from_ref(self) {
            // Completed while this completer's loop reads its connection:
            // that callback drains it next, no byte needed to wake it.
            return;
        }
        if !self.signalled.swap(true, Ordering::SeqCst) {
            // Non-blocking; a full socket already has a byte for the loop.
            let _ = (&self.bell).write(&[1]);
        }
    }
}

thread_local! {
    /// The completer the running loop's reader callback drains right after
    /// its read ([`reading_for`]).
    static DRAINS_NEXT: std::cell::Cell<*const Shared> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Runs `read` (a loop reading its connection), noting that `completer`
/// is drained right after, so calls it completes need no bell byte.
pub fn reading_for<R>(completer: Option<&Completer>, read: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DRAINS_NEXT.set(std::ptr::null());
        }
    }
    DRAINS_NEXT.set(completer.map_or(std::ptr::null(), |c| Arc::as_ptr(&c.shared)));
    let _reset = Reset;
    read()
}

/// Runs pending calls for one event loop and gives their outcomes back to it.
///
/// The loop watches `fileno()` for reading (`loop.add_reader`) and calls
/// `settle(futures)` when it is readable.
#[pyclass(frozen, module = "tinystore._native")]
pub struct Completer {
    shared: Arc<Shared>,
    wake: UnixStream,
}

#[pymethods]
impl Completer {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let (wake, bell) = UnixStream::pair().map_err(|e| error::to_py(py, io_error(e)))?;
        wake.set_nonblocking(true).and_then(|_| bell.set_nonblocking(true)).map_err(|e| error::to_py(py, io_error(e)))?;
        Ok(Completer {
            shared: Arc::new(Shared {
                done: Mutex::new(Vec::new()),
                signalled: AtomicBool::new(false),
                bell,
                next: AtomicU64::new(1),
                running: Mutex::new(HashMap::new()),
            }),
            wake,
        })
    }

    /// The file descriptor the loop watches for reading.
    fn fileno(&self) -> i32 {
        self.wake.as_raw_fd()
    }

    /// Starts `pending`; `settle` settles its future under the id returned.
    fn start(&self, py: Python<'_>, pending: &Bound<'_, Pending>) -> PyResult<u64> {
        let Some(work) = pending.get().work.lock().take() else {
            return Err(PyRuntimeError::new_err("this call was already started"));
        };
        Ok(self.start_work(py, work))
    }

    /// Abandons the call `id` (its asyncio future was cancelled): a waiter
    /// leaves the queue; a lease granted meanwhile is let go when dropped.
    fn cancel(&self, py: Python<'_>, id: u64) {
        let task = self.shared.running.lock().remove(&id).flatten();
        if let Some(t) = task {
            // Drops the future here: a waiter leaves the queue now.
            py.detach(move || t.cancel());
        }
    }

    /// Settles the futures of the outcomes ready now: `futures` maps each
    /// started call's id to its asyncio future, and loses the ids settled
    /// here. A future already done (cancelled) is skipped and its value
    /// dropped, which lets a lease granted meanwhile go. In native code: a
    /// Python loop over `(id, ok, value)` tuples cost about a microsecond a
    /// call.
    fn settle(&self, py: Python<'_>, futures: &Bound<'_, PyDict>) -> PyResult<()> {
        // Bytes first, then the flag, then the queue: a push after the flag
        // is cleared writes a new byte, and one before it is in the queue.
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
        self.shared.signalled.store(false, Ordering::SeqCst);
        let done = std::mem::take(&mut *self.shared.done.lock());
        let mut first_error = None;
        for (id, o) in done {
            let key = id.into_pyobject(py)?;
            let Some(fut) = futures.get_item(&key)? else { continue };
            futures.del_item(&key)?;
            // Each future settles even if one of them fails to.
            let settled = fut.call_method0(intern!(py, "done")).and_then(|d| d.is_truthy()).and_then(|done| {
                if done {
                    return Ok(());
                }
                match finish(py, o) {
                    Ok(v) => fut.call_method1(intern!(py, "set_result"), (v,)),
                    Err(e) => fut.call_method1(intern!(py, "set_exception"), (e.into_value(py),)),
                }
                .map(drop)
            });
            if let Err(e) = settled {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Completer {
    /// A new call's id, and what queues its outcome (from any thread) for
    /// `settle` to settle its future under that id.
    pub fn call(&self) -> (u64, impl FnOnce(Outcome) + Send + 'static) {
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed);
        let shared = self.shared.clone();
        (id, move |o| shared.push(id, o))
    }

    fn start_work(&self, py: Python<'_>, work: Work) -> u64 {
        let id = self.shared.next.fetch_add(1, Ordering::Relaxed);
        let shared = self.shared.clone();
        py.detach(move || match work {
            Work::Future(fut) => {
                shared.running.lock().insert(id, None);
                let s = shared.clone();
                // Polled now, on this thread (GIL released); later on the
                // thread that wakes it: the loop's own while it reads its
                // connection, else a runtime thread.
                let task = LoopTask::start(async move { s.push(id, Unwound(fut).await) });
                let mut running = shared.running.lock();
                match running.get_mut(&id) {
                    Some(slot) => *slot = Some(task),
                    None => {
                        // Finished already (then this does nothing), or
                        // cancelled while it started.
                        drop(running);
                        task.cancel();
                    }
                }
            }
            Work::Blocking(f) => {
                runtime::handle().spawn_blocking(move || shared.push(id, f()));
            }
        });
        id
    }
}

/// A call's future with a panic turned into an error, so that its asyncio
/// future is settled and the thread polling it (maybe the loop's, inside a
/// read of its connection) goes on.
struct Unwound(BoxFuture);

impl Future for Unwound {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let fut = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(p) => p,
            Err(_) => Poll::Ready(Err(tinystore::Error::new(tinystore::ErrorKind::Internal, "the engine panicked while answering this call"))),
        }
    }
}

fn io_error(e: std::io::Error) -> tinystore::Error {
    tinystore::Error::new(tinystore::ErrorKind::Io, format!("could not make the event loop's wake-up socket: {e}"))
}
