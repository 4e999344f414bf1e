//! A connected store's socket read by the asyncio loop's own thread
//! (`loop.add_reader`), not by an engine thread: an answer then wakes the
//! loop alone, the way redis-py's asyncio client reads its socket, instead
//! of waking an engine thread that wakes the loop in turn through the
//! Completer's socket (each wake-up of a sleeping thread costs about as much
//! as the round trip itself on these machines).
//!
//! The engine's [`LoopReader`] does the reading and dispatching; the Python
//! layer (`tinystore/_aio.py`, `LoopWatch`) watches its file descriptor.
//! When the loop leaves data unread for 100 ms (its program is busy), the
//! engine reads again (within 350 ms: it looks every 250 ms) and `readable()` returns false; the next call watches
//! again (the new socket after a reconnect).

use pyo3::prelude::*;
use tinystore::LoopReader;

use crate::pending::{Completer, reading_for};

/// The current connection's socket, for the running loop to read.
#[pyclass(frozen, module = "tinystore._native")]
pub struct NativeLoopReader {
    reader: LoopReader,
}

impl NativeLoopReader {
    pub fn new(reader: LoopReader) -> NativeLoopReader {
        NativeLoopReader { reader }
    }
}

#[pymethods]
impl NativeLoopReader {
    /// The socket's file descriptor, open while this object lives.
    fn fileno(&self) -> i32 {
        self.reader.fd()
    }

    /// Takes the socket from the engine; false when it cannot now.
    fn start(&self, py: Python<'_>) -> bool {
        py.detach(|| self.reader.start())
    }

    /// Reads what the socket has and dispatches it on this thread (GIL
    /// released); calls answered are completed here too, their outcomes
    /// queued on their Completer. `completer` (this loop's) is drained by
    /// the caller right after, so its outcomes skip the wake-up byte.
    /// False once done with this socket: stop watching it.
    #[pyo3(signature = (completer=None))]
    fn readable(&self, py: Python<'_>, completer: Option<&Bound<'_, Completer>>) -> bool {
        let c = completer.map(|c| c.get());
        py.detach(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reading_for(c, || self.reader.readable()))).unwrap_or(false)
        })
    }

    /// Gives the socket back to the engine (idempotent).
    fn stop(&self, py: Python<'_>) {
        py.detach(|| self.reader.stop());
    }

    /// True while the engine spins for an answer: the loop should poll
    /// rather than sleep (`tinystore::spin`).
    #[getter]
    fn spinning(&self) -> bool {
        self.reader.spinning()
    }

    /// True while the loop reads this socket (the store's current one).
    #[getter]
    fn active(&self) -> bool {
        self.reader.is_active()
    }
}
