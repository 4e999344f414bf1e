//! The typed Rust API of channels: `store.channel::<T>(name).open()?`.

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::subscription::RawSubscription;
use crate::engine::channels::{Event, Missed, Scope};
use crate::base::error::{Error, Result};
use crate::base::key::Key;
use crate::base::limits::check_name;
use crate::runtime;
use crate::api::store::Store;

// Here, next to the builder it makes, so the store module does not
// import this one (no import circle: core/tests/layers.rs).
impl Store {
    /// A channel of messages of type `T`, carried as JSON.
    pub fn channel<T>(&self, name: &str) -> ChannelBuilder<T> {
        ChannelBuilder::new(self.clone(), name)
    }
}

/// Builds a [`Channel`]: `store.channel::<ChatEvent>("chat-events").open()?`.
#[must_use = "call .open() to get the channel"]
pub struct ChannelBuilder<T> {
    store: Store,
    name: String,
    _t: PhantomData<fn() -> T>,
}

impl<T> ChannelBuilder<T> {
    pub(crate) fn new(store: Store, name: &str) -> ChannelBuilder<T> {
        ChannelBuilder { store, name: name.to_owned(), _t: PhantomData }
    }

    /// Checks the name (`[a-z0-9][a-z0-9_-]{0,63}`) and gives the channel.
    /// Errors: `invalid` for a name out of rule, `closed` for a closed store.
    pub fn open(self) -> Result<Channel<T>> {
        check_name("channel", &self.name)?;
        self.store.check_open()?;
        Ok(Channel { root: Branch { store: self.store, channel: Arc::from(self.name), path: smallvec::SmallVec::new(), _t: PhantomData } })
    }
}

/// A channel: a name that messages of type `T` are published on, as JSON.
/// Every process connected to the store shares it. Cheap to clone.
pub struct Channel<T> {
    root: Branch<T>,
}

impl<T> Clone for Channel<T> {
    fn clone(&self) -> Self {
        Channel { root: self.root.clone() }
    }
}

impl<T> Channel<T> {
    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.root.channel
    }
    /// The branch `key` of this channel: `events.under(chat_id)`. Keys are
    /// integers or 1 to 1,024 bytes of text; `7` and `"7"` are one branch.
    pub fn under(&self, key: impl Into<Key>) -> Branch<T> {
        self.root.under(key)
    }
    /// The channel's root branch (publishing here reaches recursive
    /// subscribers of the root only).
    pub fn root(&self) -> &Branch<T> {
        &self.root
    }
}

/// A branch of a channel: the messages of one chat, say. Nest with `under`.
pub struct Branch<T> {
    store: Store,
    channel: Arc<str>,
    /// Inline up to two keys: `under(k)` a publish, as a chat's code
    /// writes it, then allocates nothing (docs/performance.md).
    path: smallvec::SmallVec<[Key; 2]>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Branch<T> {
    fn clone(&self) -> Self {
        Branch { store: self.store.clone(), channel: self.channel.clone(), path: self.path.clone(), _t: PhantomData }
    }
}

/// A message as a subscriber gets it.
#[derive(Debug, Clone)]
pub struct Message<T> {
    /// The value that was published.
    pub value: T,
    /// The branch it was published to, from the channel's root (shared by
    /// the subscription's messages of that branch).
    pub branch: Arc<[Key]>,
    /// Its sequence in that branch: each message one more than the one before.
    pub seq: u64,
}

/// What an iterator of messages yields.
#[derive(Debug, Clone)]
pub enum Delivery<T> {
    /// The next message.
    Message(Message<T>),
    /// Messages missed just before the next one.
    Missed(Missed),
}

impl<T> Branch<T> {
    /// The branch `key` below this one.
    pub fn under(&self, key: impl Into<Key>) -> Branch<T> {
        let mut b = self.clone();
        b.path.push(key.into());
        b
    }

    /// The path of keys from the channel's root.
    pub fn path(&self) -> &[Key] {
        &self.path
    }

    /// The channel's name.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The store the branch publishes to.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    fn check_path(&self) -> Result<()> {
        self.path.iter().try_for_each(Key::check)
    }
}

impl<T: Serialize> Branch<T> {
    /// Publishes `value` to this branch and returns once the store has it
    /// (CHAN-02: never waits for a subscriber). Errors: `limit` for a message
    /// over 1 MiB of JSON or nested over 100 deep (nothing is published),
    /// `invalid` for a key out of rule, `closed` for a closed store.
    pub fn publish(&self, value: &T) -> Result<()> {
        self.store.publish_serialized(&self.channel, &self.path, json_bytes(value)?).wait()
    }

    /// Publishes `values` to this branch, in their order, and returns once
    /// the store has every one: a burst (a backlog answered, events
    /// replayed) in one call, leaving together where `publish` waits for
    /// each (over a connection, in requests of up to 1,024 messages and
    /// 1 MiB, each answered once: docs/wire.md). Subscribers get them in
    /// order, as published one after another. Every value is checked
    /// before any leaves: `limit` (over 1 MiB of JSON or nested over 100
    /// deep) or `invalid`, naming the value by its index from 0, and then
    /// nothing is published. After they left, it returns once every value
    /// has its outcome (nothing of the burst is published after it), with
    /// the first failure (`unavailable`, `timeout`, `closed`, as for
    /// `publish`), naming its value and, when more failed, how many and the
    /// last of them. Empty `values` publish nothing. Must not be called from inside an
    /// async task (use [`Branch::publish_many_async`] there).
    pub fn publish_many(&self, values: &[T]) -> Result<()> {
        runtime::block_on(self.publish_many_async(values))
    }

    /// [`Branch::publish_many`] for async code: the values are checked and
    /// sent within this call, and the future resolves once the store has
    /// every one (or with the error).
    pub fn publish_many_async(&self, values: &[T]) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
        let count = values.len();
        let data = values
            .iter()
            .enumerate()
            .map(|(i, v)| json_bytes(v).map_err(|e| e.of_burst(i, count)))
            .collect::<Result<Vec<_>>>();
        let sent = data.map(|data| self.store.publish_many(&self.channel, &self.path, data, false));
        async move { sent?.await }
    }
}

impl<T: DeserializeOwned + Send + 'static> Branch<T> {
    /// Subscribes with `handler`, called for each message published after
    /// this returns, in order, one at a time (CHAN-01). See [`Subscriber`].
    pub fn subscribe(&self, handler: impl FnMut(Message<T>) + Send + 'static) -> Result<Subscription> {
        self.subscriber().subscribe(handler)
    }

    /// Sets what to do when messages were missed; then call `subscribe`.
    pub fn on_missed(&self, f: impl FnMut(Missed) + Send + 'static) -> Subscriber<T> {
        self.subscriber().on_missed(f)
    }

    /// Sets what to do when a handler panics or a message does not decode as
    /// `T`; then call `subscribe`. Without it, such errors are printed to stderr.
    pub fn on_error(&self, f: impl FnMut(Error) + Send + 'static) -> Subscriber<T> {
        self.subscriber().on_error(f)
    }

    /// Subscribes to this branch and every branch below it.
    pub fn recursive(&self) -> Subscriber<T> {
        self.subscriber().recursive()
    }

    fn subscriber(&self) -> Subscriber<T> {
        Subscriber { branch: self.clone(), scope: Scope::Branch, on_missed: None, on_error: None }
    }

    /// Subscribes and gives a blocking iterator of what arrives; the
    /// subscription ends when the iterator is dropped.
    pub fn messages(&self) -> Result<Messages<T>> {
        self.check_path()?;
        let raw = runtime::block_on(self.store.subscribe_raw(&self.channel, &self.path, Scope::Branch, None))?;
        Ok(Messages { raw, branch: BranchCopy::default(), _t: PhantomData })
    }
}

/// `value` as JSON, in a box of its exact size. Written into a buffer this
/// thread keeps, then copied: a publish pays one allocation, not a growing
/// vector's and a shrink's.
pub(crate) fn json_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Box<[u8]>> {
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUFFER.with(|b| match b.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            serde_json::to_writer(&mut *buf, value)?;
            let out = Box::from(&buf[..]);
            if buf.capacity() > 64 << 10 {
                *buf = Vec::new();
            }
            Ok(out)
        }
        // A `Serialize` that publishes while it runs.
        Err(_) => Ok(serde_json::to_vec(value)?.into_boxed_slice()),
    })
}

type MissedFn = Box<dyn FnMut(Missed) + Send>;
type ErrorFn = Box<dyn FnMut(Error) + Send>;

/// A subscription being set up: `branch.on_missed(..).on_error(..).subscribe(..)`.
#[must_use = "call .subscribe(handler)"]
pub struct Subscriber<T> {
    branch: Branch<T>,
    scope: Scope,
    on_missed: Option<MissedFn>,
    on_error: Option<ErrorFn>,
}

impl<T: DeserializeOwned + Send + 'static> Subscriber<T> {
    /// Called with the count and reason before the next message, when
    /// messages were missed (CHAN-02, CHAN-04).
    pub fn on_missed(mut self, f: impl FnMut(Missed) + Send + 'static) -> Self {
        self.on_missed = Some(Box::new(f));
        self
    }

    /// Called when the handler panics or a message does not decode as `T`;
    /// the subscription goes on.
    pub fn on_error(mut self, f: impl FnMut(Error) + Send + 'static) -> Self {
        self.on_error = Some(Box::new(f));
        self
    }

    /// Also receive the messages of every branch below this one.
    pub fn recursive(mut self) -> Self {
        self.scope = Scope::Recursive;
        self
    }

    /// Subscribes; returns once the store has the subscription, so every
    /// message published after this returns reaches `handler`, in order, one
    /// at a time, on a delivery task of the engine (CHAN-01). Errors: `limit`
    /// past 10,000 subscriptions of the store, `invalid`, `closed`.
    pub fn subscribe(self, handler: impl FnMut(Message<T>) + Send + 'static) -> Result<Subscription> {
        self.branch.check_path()?;
        let raw = runtime::block_on(self.branch.store.subscribe_raw(&self.branch.channel, &self.branch.path, self.scope, None))?;
        let ctl = Arc::new(Control {
            raw,
            stopped: AtomicBool::new(false),
            handlers: Mutex::new(Handlers {
                handler: Box::new(handler),
                on_missed: self.on_missed,
                on_error: self.on_error,
                branch: BranchCopy::default(),
                _t: PhantomData,
            }),
        });
        let task_ctl = ctl.clone();
        runtime::spawn(async move { deliver(task_ctl).await });
        Ok(Subscription { ctl: Some(ctl as Arc<dyn Stoppable>) })
    }
}

struct Handlers<T> {
    handler: Box<dyn FnMut(Message<T>) + Send>,
    on_missed: Option<MissedFn>,
    on_error: Option<ErrorFn>,
    branch: BranchCopy,
    _t: PhantomData<fn() -> T>,
}

/// A subscription's own copy of the branch its messages keep coming from.
/// The engine's `Arc` of a branch is shared with the publishing thread;
/// counting references to it from both cores for every message was the
/// largest cost of an in-process subscriber (docs/performance.md).
#[derive(Default)]
struct BranchCopy {
    /// The engine's branch last seen, kept so its address is not reused.
    seen: Option<Arc<[Key]>>,
    /// Made when a second message in a row came from `seen`.
    copy: Option<Arc<[Key]>>,
}

impl BranchCopy {
    /// `shared`, or this subscription's copy of it.
    fn of(&mut self, shared: &Arc<[Key]>) -> Arc<[Key]> {
        match &self.seen {
            Some(seen) if Arc::ptr_eq(seen, shared) => self.copy.get_or_insert_with(|| Arc::from(&shared[..])).clone(),
            _ => {
                self.seen = Some(shared.clone());
                self.copy = None;
                shared.clone()
            }
        }
    }
}

struct Control<T> {
    raw: RawSubscription,
    stopped: AtomicBool,
    /// Held while a handler runs: `stop` takes it to wait for that handler.
    handlers: Mutex<Handlers<T>>,
}

thread_local! {
    /// The subscription whose handler this thread is running, if any.
    static DELIVERING: Cell<usize> = const { Cell::new(0) };
}

async fn deliver<T: DeserializeOwned + Send + 'static>(ctl: Arc<Control<T>>) {
    while let Some(first) = ctl.raw.next().await {
        let c = ctl.clone();
        // Handlers may block: run them off the engine's worker threads,
        // draining what is ready so a busy branch pays one hand-off per batch.
        let ran = tokio::task::spawn_blocking(move || {
            let id = Arc::as_ptr(&c) as *const () as usize;
            DELIVERING.with(|d| d.set(id));
            let mut next = Some(first);
            // What was ready at the last look, read at once (one lock of the
            // branch's log for a burst, not one per message), newest first:
            // the next is popped off the end, and the vector is kept.
            let mut ready: Vec<Event> = Vec::new();
            let mut gathering = false;
            let mut gather = Gather::default();
            while let Some(ev) = next {
                let mut h = c.handlers.lock();
                if c.stopped.load(Ordering::Acquire) {
                    break;
                }
                h.run(ev);
                drop(h);
                next = ready.pop().or_else(|| {
                    let gathered = gathering && gather.try_wait();
                    c.raw.read_ready(&mut ready, READY_BATCH);
                    if gathered {
                        gather.found(ready.len());
                    }
                    gathering = (1..FEW_READY).contains(&ready.len());
                    ready.reverse();
                    ready.pop()
                });
                next = next.or_else(|| {
                    // Stay on this thread a moment: a busy branch then costs
                    // no hand-off per message. Only a couple of threads may
                    // wait so, or many subscriptions would thrash the cores.
                    let _hot = Few::enter(&HOT_WAITERS, 2)?;
                    runtime::handle().block_on(async {
                        tokio::time::timeout(Duration::from_millis(2), c.raw.next()).await.ok().flatten()
                    })
                });
            }
            DELIVERING.with(|d| d.set(0));
        })
        .await;
        if ran.is_err() || ctl.stopped.load(Ordering::Acquire) {
            break;
        }
    }
}

impl<T: DeserializeOwned> Handlers<T> {
    fn run(&mut self, ev: Event) {
        match ev {
            Event::Missed(m) => {
                if let Some(f) = &mut self.on_missed
                    && let Err(e) = guard(|| f(m))
                {
                    self.error(e);
                }
            }
            Event::Message(msg) => match serde_json::from_slice::<T>(&msg.data) {
                Ok(value) => {
                    let m = Message { value, branch: self.branch.of(&msg.branch), seq: msg.seq };
                    if let Err(e) = guard(|| (self.handler)(m)) {
                        self.error(e);
                    }
                }
                Err(e) => self.error(Error::invalid(format!(
                    "message {} of branch {:?} does not decode as the channel's type: {e}",
                    msg.seq, msg.branch
                ))),
            },
        }
    }

    fn error(&mut self, e: Error) {
        match &mut self.on_error {
            Some(f) => {
                let _ = catch_unwind(AssertUnwindSafe(|| f(e)));
            }
            None => eprintln!("tinystore: subscription handler error: {e}"),
        }
    }
}

/// At most this many events are taken from a subscription at once for its handler.
const READY_BATCH: usize = 256;

/// A delivery thread whose last read brought a few messages (fewer than
/// this) keeps up with its publisher message by message...
const FEW_READY: usize = 8;

/// ...so it waits this long, yielding its core, before it reads again: it
/// then takes the branch's lock once for several messages, not in turn with
/// the publisher for each, which made a publish with one fast subscriber
/// three times slower (docs/performance.md, 7 December).
const GATHER: Duration = Duration::from_micros(2);

/// Whether a delivery thread waits for [`GATHER`] before its next read: not
/// while its last waits gathered few (a branch with a message every few
/// microseconds, where a wait is a core's time spent for nothing), then
/// again after 1, 2, 4 ... up to 256 reads.
#[derive(Default)]
struct Gather {
    skip: u32,
    backoff: u32,
}

impl Gather {
    /// Waits for [`GATHER`] (yielding the core) unless backing off, or
    /// another thread gathers; true when it waited.
    fn try_wait(&mut self) -> bool {
        if self.skip > 0 {
            self.skip -= 1;
            return false;
        }
        let Some(_one) = Few::enter(&GATHERERS, 1) else { return false };
        let until = Instant::now() + GATHER;
        while Instant::now() < until {
            std::thread::yield_now();
        }
        true
    }

    /// The read after a wait brought `n` messages.
    fn found(&mut self, n: usize) {
        if n >= FEW_READY / 2 {
            self.backoff = 0;
        } else {
            self.backoff = (self.backoff * 2).clamp(1, 256);
            self.skip = self.backoff;
        }
    }
}

/// Delivery threads waiting a moment for their subscription's next message.
static HOT_WAITERS: AtomicUsize = AtomicUsize::new(0);

/// Delivery threads gathering messages (see [`GATHER`]).
static GATHERERS: AtomicUsize = AtomicUsize::new(0);

/// One of the few threads let wait on a core at once: many would thrash
/// the cores, and keep the threads with work off them.
struct Few(&'static AtomicUsize);

impl Few {
    fn enter(count: &'static AtomicUsize, max: usize) -> Option<Few> {
        if count.fetch_add(1, Ordering::AcqRel) < max {
            Some(Few(count))
        } else {
            count.fetch_sub(1, Ordering::AcqRel);
            None
        }
    }
}

impl Drop for Few {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Runs a handler, turning a panic into an error so the subscription goes on.
fn guard(f: impl FnOnce()) -> Result<()> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".into());
        Error::internal(format!("a subscription handler panicked: {what}"))
    })
}

trait Stoppable: Send + Sync {
    fn stop(&self);
}

impl<T: Send + 'static> Stoppable for Control<T> {
    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.raw.stop();
        // Outside every handler, wait for a call running now, so none runs
        // after we return. Inside a handler (this subscription's or
        // another's) do not: its own call would wait for itself, and two
        // handlers that stop each other would wait for each other forever.
        // No call starts after `stopped` is set either way (CHAN-05).
        if DELIVERING.with(|d| d.get()) == 0 {
            drop(self.handlers.lock());
        }
    }
}

/// A running subscription. [`stop`](Self::stop) ends it; so does dropping it
/// (use [`detach`](Self::detach) to keep it for the life of the store).
#[must_use = "dropping a Subscription stops it"]
pub struct Subscription {
    ctl: Option<Arc<dyn Stoppable>>,
}

impl Subscription {
    /// Stops the subscription: after this returns, its handler is never
    /// called again (CHAN-05), and, called outside every handler, no call
    /// of it is still running. Safe from inside the handler, twice, or after
    /// the store closed. From inside another subscription's handler it does
    /// not wait for a call of this one already running (two handlers that
    /// stop each other would wait forever).
    pub fn stop(&self) {
        if let Some(c) = &self.ctl {
            c.stop();
        }
    }

    /// Lets the subscription run until the store closes.
    pub fn detach(mut self) {
        self.ctl = None;
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A blocking iterator over a subscription: `for d in events.under(7).messages()?`.
/// Ends when the store closes.
pub struct Messages<T> {
    raw: RawSubscription,
    branch: BranchCopy,
    _t: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Messages<T> {
    /// The next delivery, waiting at most `timeout`; `Ok(None)` on timeout or end.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Delivery<T>>> {
        let ev = runtime::block_on(async { tokio::time::timeout(timeout, self.raw.next()).await.ok().flatten() });
        ev.map(|ev| decode(ev, &mut self.branch)).transpose()
    }
}

fn decode<T: DeserializeOwned>(ev: Event, branch: &mut BranchCopy) -> Result<Delivery<T>> {
    Ok(match ev {
        Event::Missed(m) => Delivery::Missed(m),
        Event::Message(msg) => Delivery::Message(Message {
            value: serde_json::from_slice(&msg.data)?,
            branch: branch.of(&msg.branch),
            seq: msg.seq,
        }),
    })
}

impl<T: DeserializeOwned> Iterator for Messages<T> {
    type Item = Result<Delivery<T>>;
    fn next(&mut self) -> Option<Self::Item> {
        runtime::block_on(self.raw.next()).map(|ev| decode(ev, &mut self.branch))
    }
}
