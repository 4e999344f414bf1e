//! A connected store's socket read by Node's own event loop (libuv), not by
//! an engine thread: an answer or a message then wakes the JavaScript
//! thread alone, as node-redis's socket does, instead of waking an engine
//! thread that wakes the JavaScript thread in turn (each wake-up of a
//! sleeping thread costs about as much as the round trip itself here).
//!
//! The engine's [`LoopReader`] does the reading and dispatching; this file
//! only watches its file descriptor with a `uv_poll_t` (libuv's symbols are
//! the Node executable's own). A connected store's publishes wait in its
//! sink until the burst that made them ends (lib/channel.ts queues one
//! microtask that calls `flushPublishes`), as node-redis corks its socket
//! until the next tick; a `uv_prepare_t` writes what is left before the
//! loop waits; at process exit they leave at once, waiting
//! for the socket (up to 2 s). The handles are unreferenced, so they never keep a program alive. When the JavaScript thread is busy for 100 ms with data
//! waiting, the engine reads again (within 350 ms: it looks every 250 ms); the next call from JavaScript watches
//! the socket again (and the new one after a reconnect).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use napi::Env;
use tinystore::{LoopReader, Store};

#[allow(non_camel_case_types)]
type uv_poll_t = c_void;

unsafe extern "C" {
    fn uv_poll_init(lp: *mut c_void, handle: *mut uv_poll_t, fd: c_int) -> c_int;
    fn uv_poll_start(handle: *mut uv_poll_t, events: c_int, cb: extern "C" fn(*mut uv_poll_t, c_int, c_int)) -> c_int;
    fn uv_poll_stop(handle: *mut uv_poll_t) -> c_int;
    fn uv_close(handle: *mut c_void, cb: extern "C" fn(*mut c_void));
    fn uv_unref(handle: *mut c_void);
    fn uv_idle_init(lp: *mut c_void, handle: *mut c_void) -> c_int;
    fn uv_idle_start(handle: *mut c_void, cb: extern "C" fn(*mut c_void)) -> c_int;
    fn uv_idle_stop(handle: *mut c_void) -> c_int;
    fn uv_prepare_init(lp: *mut c_void, handle: *mut c_void) -> c_int;
    fn uv_prepare_start(handle: *mut c_void, cb: extern "C" fn(*mut c_void)) -> c_int;
    fn uv_prepare_stop(handle: *mut c_void) -> c_int;
    fn atexit(cb: extern "C" fn()) -> c_int;
}

const UV_READABLE: c_int = 1;
/// Room for a `uv_poll_t` (160 bytes on 64-bit Linux), a `uv_idle_t` or a
/// `uv_prepare_t`, 8-byte aligned. Its first field is libuv's `void *data`.
const HANDLE_WORDS: usize = 64;

/// Watches a connected store's socket on the JavaScript thread.
pub struct UvReader {
    store: Store,
    st: Mutex<State>,
}

struct State {
    reader: Option<Arc<LoopReader>>,
    /// The live `uv_poll_t`, or null.
    handle: *mut uv_poll_t,
    /// Its `uv_idle_t` (same `data`), or null.
    idle: *mut c_void,
    /// Its `uv_prepare_t` (same `data`), or null: flushes the turn's
    /// publishes before the loop waits for events.
    prepare: *mut c_void,
}

// SAFETY: `handle` is touched only on the JavaScript thread that made it
// (calls from JavaScript, libuv's callbacks, the store's finalizer).
unsafe impl Send for State {}

/// What a handle's `data` points to: the reader it serves (one reference,
/// given back when libuv closes the handle).
struct Data {
    reader: Arc<LoopReader>,
    owner: std::sync::Weak<UvReader>,
}

impl UvReader {
    /// For a connected store; `None` in the owning process.
    pub fn new(store: &Store) -> Option<Arc<UvReader>> {
        if store.is_owner() {
            return None;
        }
        let null = std::ptr::null_mut();
        let uv = Arc::new(UvReader { store: store.clone(), st: Mutex::new(State { reader: None, handle: null, idle: null, prepare: null }) });
        let mut all = READERS.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|r| r.strong_count() > 0);
        all.push(Arc::downgrade(&uv));
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a plain function that catches its own panics.
        AT_EXIT.call_once(|| unsafe {
            atexit(at_exit);
        });
        Some(uv)
    }

    /// Writes what this store's connection has waiting, holding no more
    /// publishes for the turn's end (the program exits).
    fn flush_before_exit(&self) {
        let reader = self.st.lock().unwrap_or_else(|p| p.into_inner()).reader.clone();
        if let Some(r) = reader {
            r.flush_before_exit(EXIT_FLUSH_LIMIT);
        }
    }

    /// Called on the JavaScript thread by every call that may wait for an
    /// answer: watches the store's current socket unless it already does.
    pub fn ensure(self: &Arc<Self>, env: &Env) {
        let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        if st.reader.as_ref().is_some_and(|r| r.is_active()) {
            spin(&st);
            return;
        }
        close(&mut st);
        let Some(reader) = self.store.loop_reader() else { return };
        let Ok(lp) = env.get_uv_event_loop() else { return };
        let reader = Arc::new(reader);
        let handle = Box::into_raw(Box::new([0u64; HANDLE_WORDS])).cast::<c_void>();
        // SAFETY: `handle` is zeroed memory large enough for a uv_poll_t, on
        // the loop's own thread; `data` is set after init, which leaves it be.
        unsafe {
            if uv_poll_init(lp.cast(), handle, reader.fd()) != 0 {
                drop(Box::from_raw(handle.cast::<[u64; HANDLE_WORDS]>()));
                return;
            }
            let data = Box::into_raw(Box::new(Data { reader: reader.clone(), owner: Arc::downgrade(self) }));
            *handle.cast::<*mut Data>() = data;
            uv_unref(handle);
            st.handle = handle;
            let idle = Box::into_raw(Box::new([0u64; HANDLE_WORDS])).cast::<c_void>();
            if uv_idle_init(lp.cast(), idle) == 0 {
                *idle.cast::<*mut Data>() = data;
                // Never what keeps a program alive.
                uv_unref(idle);
                st.idle = idle;
            } else {
                drop(Box::from_raw(idle.cast::<[u64; HANDLE_WORDS]>()));
            }
            let prepare = Box::into_raw(Box::new([0u64; HANDLE_WORDS])).cast::<c_void>();
            if uv_prepare_init(lp.cast(), prepare) == 0 {
                *prepare.cast::<*mut Data>() = data;
                uv_unref(prepare);
                st.prepare = prepare;
            } else {
                drop(Box::from_raw(prepare.cast::<[u64; HANDLE_WORDS]>()));
            }
            if !reader.start() || uv_poll_start(handle, UV_READABLE, on_readable) != 0 {
                reader.stop();
                close(&mut st);
                return;
            }
            // Publishes may wait for the turn's end only once something
            // flushes them there.
            if !st.prepare.is_null() && !EXITING.load(Ordering::Acquire) && uv_prepare_start(st.prepare, on_prepare) == 0 {
                reader.flush_each_turn();
            }
        }
        st.reader = Some(reader);
        spin(&st);
    }

    /// Writes the publishes this thread's burst of calls left in the
    /// connection's sink (they wait for it: `LoopReader::flush_each_turn`).
    pub fn flush(&self) {
        let reader = self.st.lock().unwrap_or_else(|p| p.into_inner()).reader.clone();
        if let Some(r) = reader {
            r.flush();
        }
    }

    /// Stops watching (the store closes).
    pub fn stop(&self) {
        let mut st = self.st.lock().unwrap_or_else(|p| p.into_inner());
        close(&mut st);
    }
}

/// Keeps the loop polling while the engine spins for an answer (called
/// before the call is sent: the idle callback looks after it).
fn spin(st: &State) {
    if !st.idle.is_null() && !tinystore::spin::window().is_zero() {
        // SAFETY: this thread's live idle handle; starting it twice is a no-op.
        unsafe { uv_idle_start(st.idle, on_idle) };
    }
}

extern "C" fn on_idle(idle: *mut c_void) {
    // SAFETY: `data` was set by `ensure` and lives until the poll handle's
    // `closed`, which comes after this handle's close.
    let data = unsafe { &**idle.cast::<*mut Data>() };
    if !data.reader.spinning() {
        // SAFETY: this thread's live idle handle.
        unsafe { uv_idle_stop(idle) };
    }
}

/// Before the loop waits for events: the publishes of the turn leave, in
/// one write.
extern "C" fn on_prepare(prepare: *mut c_void) {
    // SAFETY: as in `on_idle`.
    let data = unsafe { &**prepare.cast::<*mut Data>() };
    data.reader.flush();
}

/// How long a program's exit waits for its publishes to leave (an owner
/// that reads nothing holds an exit up this long).
const EXIT_FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// Set once the program exits: publishes are no longer held for a turn's end.
static EXITING: AtomicBool = AtomicBool::new(false);

/// For a program that exits: every connected store's publishes leave, from
/// this thread, waiting up to [`EXIT_FLUSH_LIMIT`] for each socket to take
/// them, and none are held for a turn's end from then on. The package
/// calls it on `process.on('exit')` (a worker's too), and C's `exit` once
/// more, after every exit listener (publishes made in a program's own).
pub fn flush_all_before_exit() {
    EXITING.store(true, Ordering::Release);
    let all: Vec<Arc<UvReader>> = READERS.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(|r| r.upgrade()).collect();
    for r in all {
        r.flush_before_exit();
    }
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(flush_all_before_exit);
}

/// Every connected store's reader in this process, for [`flush_all_before_exit`].
static READERS: Mutex<Vec<std::sync::Weak<UvReader>>> = Mutex::new(Vec::new());

/// Stops and closes the handles, giving the socket back to the engine
/// (which writes what was held for the turn's end).
fn close(st: &mut State) {
    if let Some(r) = st.reader.take() {
        r.stop();
    }
    if !st.prepare.is_null() {
        // SAFETY: a live handle of this thread's loop; freed in `idle_closed`.
        unsafe {
            uv_prepare_stop(st.prepare);
            uv_close(st.prepare, idle_closed);
        }
        st.prepare = std::ptr::null_mut();
    }
    if !st.idle.is_null() {
        // SAFETY: a live handle of this thread's loop; freed in `idle_closed`.
        unsafe {
            uv_idle_stop(st.idle);
            uv_close(st.idle, idle_closed);
        }
        st.idle = std::ptr::null_mut();
    }
    if !st.handle.is_null() {
        // SAFETY: a live handle of this thread's loop; freed in `closed`.
        unsafe {
            uv_poll_stop(st.handle);
            uv_close(st.handle, closed);
        }
        st.handle = std::ptr::null_mut();
    }
}

extern "C" fn closed(handle: *mut c_void) {
    // SAFETY: made by `ensure` from a Box of a Data and a Box of words;
    // libuv calls this once, after the handle is done.
    unsafe {
        drop(Box::from_raw(*handle.cast::<*mut Data>()));
        drop(Box::from_raw(handle.cast::<[u64; HANDLE_WORDS]>()));
    }
}

extern "C" fn idle_closed(handle: *mut c_void) {
    // SAFETY: made by `ensure` from a Box of words (an idle or a prepare
    // handle); its `data` is the poll handle's to free.
    unsafe { drop(Box::from_raw(handle.cast::<[u64; HANDLE_WORDS]>())) };
}

extern "C" fn on_readable(handle: *mut uv_poll_t, status: c_int, _events: c_int) {
    // SAFETY: `data` was set by `ensure` and lives until `closed`.
    let data = unsafe { &**handle.cast::<*mut Data>() };
    let keep = status == 0 && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::settle::in_scope(|| data.reader.readable()))).unwrap_or(false);
    if !keep {
        // Done with this socket: the engine reads it (or its successor)
        // until the next call from JavaScript watches again.
        match data.owner.upgrade() {
            Some(owner) => {
                let mut st = owner.st.lock().unwrap_or_else(|p| p.into_inner());
                if st.handle == handle {
                    close(&mut st);
                }
            }
            // SAFETY: this thread's live handle.
            None => unsafe {
                uv_poll_stop(handle);
            },
        }
    }
}

impl Drop for UvReader {
    fn drop(&mut self) {
        let st = self.st.get_mut().unwrap_or_else(|p| p.into_inner());
        close(st);
    }
}
