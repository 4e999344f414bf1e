//! Channels: messages to whoever listens now.
//!
//! A channel is a name; under it, branches named by a path of keys
//! (`under(chat_id)`, nestable). Each branch keeps a bounded log of its
//! newest messages (1,024 or 4 MiB) while it has subscribers, and nothing when
//! it has none. A subscription is a cursor into one log: a reader behind the
//! log's oldest message is told exactly how many it missed (CHAN-02). A
//! recursive subscription reads a second log per branch that gathers the
//! branch's messages and those of every branch below it.

pub(crate) mod log;
mod subscription;

type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

pub use self::log::Msg;
use self::log::{Budget, Log};
pub use self::subscription::{Event, Missed, MissedReason};
pub(crate) use self::subscription::LocalSubscription;
use crate::base::error::{Error, Result};
use crate::base::key::Key;
use crate::base::limits::{MAX_MESSAGE_BYTES, MAX_MESSAGE_DEPTH, MAX_SUBSCRIPTIONS, STORE_CHANNEL_BYTES};

/// How long a branch with no subscriber keeps its sequence numbers, so a
/// subscriber that comes back (a reconnect) learns what it missed.
const IDLE_BRANCH_GRACE: Duration = Duration::from_secs(120);

/// Where a subscription reads: one branch, or a branch and all below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only the branch's own messages.
    Branch,
    /// The branch's messages and those of every branch below it.
    Recursive,
}

struct Node {
    /// Identifies this node among all nodes the store ever had for the
    /// branch, so a resume after the node was forgotten is not mistaken.
    id: u64,
    path: Arc<[Key]>,
    own: Arc<Log>,
    tree: Mutex<Option<Arc<Log>>>,
    idle_since: Mutex<Option<Instant>>,
    /// The subscriptions of this branch, for `status` to show their lag.
    readers: Mutex<Vec<std::sync::Weak<subscription::Shared>>>,
}

#[derive(Default)]
struct ChannelState {
    branches: HashMap<Arc<[Key]>, Arc<Node>>,
    recursive: usize,
}

/// The channels of one store.
pub(crate) struct Channels {
    channels: RwLock<HashMap<Arc<str>, ChannelState>>,
    budget: Arc<Budget>,
    subscriptions: AtomicUsize,
    next_node: std::sync::atomic::AtomicU64,
}

/// A position to resume a subscription from (over a reconnect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Resume {
    /// The log the subscription read.
    pub log: u64,
    /// The next position it would have read.
    pub next: u64,
}

/// What `status` shows of one branch.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BranchStatus {
    /// The channel's name.
    pub channel: String,
    /// The branch's path of keys.
    pub branch: Vec<Key>,
    /// Subscriptions of this branch alone.
    pub subscribers: usize,
    /// Recursive subscriptions rooted here.
    pub recursive_subscribers: usize,
    /// Messages its log keeps now (at most 1,024).
    pub kept_messages: usize,
    /// Bytes its log keeps now (at most 4 MiB).
    pub kept_bytes: usize,
    /// Messages published to it while the store knew it.
    pub published: u64,
    /// How many messages each of its subscriptions has yet to read (the
    /// most a subscription can be behind before it misses is 1,024).
    #[serde(default)]
    pub lag: Vec<u64>,
}

impl Channels {
    pub(crate) fn new() -> Channels {
        Channels::with_budget(STORE_CHANNEL_BYTES)
    }

    pub(crate) fn with_budget(bytes: usize) -> Channels {
        Channels {
            channels: RwLock::new(HashMap::default()),
            budget: Budget::new(bytes),
            subscriptions: AtomicUsize::new(0),
            next_node: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// Bytes of messages all logs keep now (within 64 MiB).
    pub(crate) fn kept_bytes(&self) -> usize {
        self.budget.bytes()
    }

    pub(crate) fn subscription_count(&self) -> usize {
        self.subscriptions.load(Ordering::Relaxed)
    }

    /// Publishes `data` (JSON bytes) to `branch` of `channel`. Never waits for
    /// a subscriber. Errors with `limit` past 1 MiB; nothing is published then.
    pub(crate) fn publish(&self, channel: &str, branch: &[Key], data: Box<[u8]>) -> Result<u64> {
        check_message(&data)?;
        let (node, parents, recursive) = {
            let chans = self.channels.read();
            let Some(ch) = chans.get(channel) else { return Ok(0) };
            if ch.recursive == 0 {
                // No recursive subscription in the channel: the branch's own
                // log alone, published under the map's read lock (no count
                // taken on the node, the most common publish's cost).
                let Some(node) = ch.branches.get(branch) else { return Ok(0) };
                return Ok(Log::publish(&node.own, &[], node.path.clone(), data));
            }
            let node = ch.branches.get(branch).cloned();
            let parents: Vec<Arc<Log>> = if ch.recursive > 0 {
                (0..branch.len()).filter_map(|n| ch.branches.get(&branch[..n])?.tree.lock().clone()).collect()
            } else {
                Vec::new()
            };
            (node, parents, ch.recursive > 0)
        };
        let node = match node {
            Some(n) => n,
            // Nobody listens to this branch itself; a parent's recursive
            // subscription needs its sequence numbers all the same.
            None if !parents.is_empty() => self.node(channel, branch),
            None => return Ok(0),
        };
        let mut trees = parents;
        // Without a recursive subscription in the channel no tree is read
        // (one being made now is attached after this message).
        if recursive && let Some(t) = node.tree.lock().clone() {
            trees.push(t);
        }
        Ok(Log::publish(&node.own, &trees, node.path.clone(), data))
    }

    fn node(&self, channel: &str, branch: &[Key]) -> Arc<Node> {
        if let Some(n) = self.channels.read().get(channel).and_then(|c| c.branches.get(branch)) {
            return n.clone();
        }
        let mut chans = self.channels.write();
        let ch = chans.entry(Arc::from(channel)).or_default();
        ch.branches
            .entry(Arc::from(branch))
            .or_insert_with(|| {
                Arc::new(Node {
                    id: self.next_node.fetch_add(1, Ordering::Relaxed),
                    path: Arc::from(branch),
                    own: Log::new(self.budget.clone()),
                    tree: Mutex::new(None),
                    idle_since: Mutex::new(None),
                    readers: Mutex::new(Vec::new()),
                })
            })
            .clone()
    }

    /// Subscribes to `branch` of `channel`. The subscription sees every
    /// message published after this returns (CHAN-01). With `resume`, it goes
    /// on from that position where the log still holds it.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        channel: &str,
        branch: &[Key],
        scope: Scope,
        resume: Option<Resume>,
    ) -> Result<(LocalSubscription, Option<Missed>)> {
        let n = self.subscriptions.fetch_add(1, Ordering::AcqRel);
        if n >= MAX_SUBSCRIPTIONS {
            self.subscriptions.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::limit(format!(
                "this store has {MAX_SUBSCRIPTIONS} subscriptions, its limit: stop subscriptions you no longer read, or subscribe recursively to a parent branch"
            )));
        }
        let node = self.node(channel, branch);
        *node.idle_since.lock() = None;
        let log = match scope {
            Scope::Branch => node.own.clone(),
            Scope::Recursive => {
                let mut tree = node.tree.lock();
                match &*tree {
                    Some(t) => t.clone(),
                    None => {
                        let t = Log::new(self.budget.clone());
                        *tree = Some(t.clone());
                        drop(tree);
                        self.channels.write().get_mut(channel).expect("node's channel exists").recursive += 1;
                        t
                    }
                }
            }
        };
        let log_id = match scope {
            Scope::Branch => node.id << 1,
            Scope::Recursive => (node.id << 1) | 1,
        };
        let cursor = log.attach(resume.filter(|r| r.log == log_id).map(|r| r.next));
        // A resume from a log this store no longer has: the branch was
        // forgotten while nobody listened (or the store restarted), so how
        // much was published meanwhile is unknown.
        let told = match resume {
            Some(r) if r.log != log_id => Some(Missed { count: None, reason: MissedReason::Reconnect }),
            _ => None,
        };
        let sub = LocalSubscription::new(self.clone(), channel.into(), node.clone(), log, log_id, scope, cursor, resume.is_some());
        {
            let mut readers = node.readers.lock();
            readers.retain(|w| w.strong_count() > 0);
            readers.push(sub.probe());
        }
        Ok((sub, told))
    }

    /// Called by a subscription when it ends.
    fn unsubscribed(&self, channel: &str, node: &Arc<Node>, log: &Arc<Log>, scope: Scope) {
        self.subscriptions.fetch_sub(1, Ordering::AcqRel);
        let left = log.detach();
        if left == 0 {
            if scope == Scope::Recursive {
                let mut tree = node.tree.lock();
                if tree.as_ref().is_some_and(|t| Arc::ptr_eq(t, log)) {
                    *tree = None;
                    drop(tree);
                    if let Some(ch) = self.channels.write().get_mut(channel) {
                        ch.recursive -= 1;
                    }
                }
            }
            if node.own.readers() == 0 && node.tree.lock().is_none() {
                *node.idle_since.lock() = Some(Instant::now());
            }
        }
    }

    /// Forgets branches nobody listened to for a while.
    pub(crate) fn sweep(&self, now: Instant) {
        let mut chans = self.channels.write();
        for ch in chans.values_mut() {
            ch.branches.retain(|_, n| {
                let idle = *n.idle_since.lock();
                !matches!(idle, Some(t) if now.duration_since(t) >= IDLE_BRANCH_GRACE)
            });
        }
        chans.retain(|_, ch| !ch.branches.is_empty());
    }

    /// Ends every subscription: their reads end once drained.
    pub(crate) fn close(&self) {
        for ch in self.channels.read().values() {
            for n in ch.branches.values() {
                n.own.close();
                if let Some(t) = &*n.tree.lock() {
                    t.close();
                }
            }
        }
    }

    pub(crate) fn status(&self) -> Vec<BranchStatus> {
        let chans = self.channels.read();
        let mut out = Vec::new();
        for (name, ch) in chans.iter() {
            for n in ch.branches.values() {
                let (kept_messages, kept_bytes) = n.own.kept();
                out.push(BranchStatus {
                    channel: name.to_string(),
                    branch: n.path.to_vec(),
                    subscribers: n.own.readers(),
                    recursive_subscribers: n.tree.lock().as_ref().map_or(0, |t| t.readers()),
                    kept_messages,
                    kept_bytes,
                    published: n.own.next_position() - 1,
                    lag: n.readers.lock().iter().filter_map(|w| w.upgrade()).map(|s| s.lag()).collect(),
                });
            }
        }
        out.sort_by(|a, b| (&a.channel, &a.branch).cmp(&(&b.channel, &b.branch)));
        out
    }
}

/// Checks a message's size, 1 MiB at most, and its nesting, 100 deep at most.
pub(crate) fn check_message(data: &[u8]) -> Result<()> {
    if data.len() > MAX_MESSAGE_BYTES {
        return Err(Error::limit(format!(
            "a message is at most 1 MiB (1048576 bytes) of JSON; this one is {} bytes: publish an id and keep the data in the database",
            data.len()
        )));
    }
    if let Some(at) = nested_too_deep(data) {
        return Err(Error::limit(format!(
            "a message nests arrays and objects at most {MAX_MESSAGE_DEPTH} deep, so that every language's decoder reads it; this one goes deeper at byte {at}: flatten it, or publish an id and keep the data in the database"
        )));
    }
    Ok(())
}

/// Checks that raw bytes from a caller are one JSON value (UTF-8, with
/// whitespace around it at most): what every subscriber decodes.
pub(crate) fn check_json(data: &[u8]) -> Result<()> {
    match serde_json::from_slice::<serde::de::IgnoredAny>(data) {
        Ok(_) => Ok(()),
        Err(e) => Err(Error::invalid(format!("a message is one JSON value (UTF-8 text): {e}; encode it with a JSON encoder"))),
    }
}

/// The byte where `data` (JSON) opens an array or object past
/// [`MAX_MESSAGE_DEPTH`] levels, if it does.
fn nested_too_deep(data: &[u8]) -> Option<usize> {
    // Each level takes an opening and a closing byte, and a message with no
    // more openings than the limit cannot pass it: most never get scanned.
    if data.len() <= 2 * MAX_MESSAGE_DEPTH || data.iter().filter(|&&b| b == b'[' || b == b'{').count() <= MAX_MESSAGE_DEPTH {
        return None;
    }
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (at, &b) in data.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_MESSAGE_DEPTH {
                    return Some(at);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An escaped quote does not end a string, so the brackets after it
    /// inside the string are not nesting; the ones outside are.
    #[test]
    fn chan_07_nesting_counts_brackets_outside_strings_only() {
        let message = |inner: usize| format!(r#"["\"{}", {}{}]"#, "]".repeat(200), "[".repeat(inner), "]".repeat(inner)).into_bytes();
        assert_eq!(check_message(&message(99)).map_err(|e| e.to_string()), Ok(()));
        let e = check_message(&message(100)).unwrap_err();
        assert_eq!(e.code(), "limit");
        assert!(e.message().contains("at byte 306"), "{e}");
        let objects = format!("{}{}", r#"{"k":"#.repeat(101), "}".repeat(101)).into_bytes();
        assert_eq!(nested_too_deep(&objects), Some(5 * 100));
    }
}
