//! The shape of [`Store::status_json`](crate::Store::status_json) as data:
//! each object, its fields in JSON (snake_case) and what they hold. Every
//! binding's status types are generated from it (core/tests/generated.rs),
//! and a test compares it with what a store really reports, so neither the
//! bindings nor this list can drift from [`StoreStatus`](crate::StoreStatus).

/// What a field holds, as far as a binding's types need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldType {
    /// Text (a path, a name, a key).
    Text,
    /// A count or size that fits a platform int (`usize` and smaller).
    Count,
    /// A `u64` that stays far below 2^53 (milliseconds, ids that count up).
    U64,
    /// A `u64` that may use all 64 bits (an epoch, a holder id): a JSON
    /// number a JavaScript number cannot keep.
    WideU64,
    /// A fence: 128 bits as decimal digits, in a JSON string.
    Fence,
    /// The field may be null.
    Optional(&'static FieldType),
    /// A JSON array of these.
    List(&'static FieldType),
    /// An object of this shape (a [`StatusObject::name`]).
    Object(&'static str),
}

/// One field of a status object.
#[derive(Debug, Clone, Copy)]
pub struct StatusField {
    /// Its JSON name.
    pub name: &'static str,
    /// What it holds.
    pub ty: FieldType,
    /// What it means, in one line.
    pub doc: &'static str,
}

/// One object of the status.
#[derive(Debug, Clone, Copy)]
pub struct StatusObject {
    /// Its Rust name (bindings may rename it, as Go's `Status`).
    pub name: &'static str,
    /// What it is, in one line.
    pub doc: &'static str,
    /// Its fields, in JSON order.
    pub fields: &'static [StatusField],
}

const fn field(name: &'static str, ty: FieldType, doc: &'static str) -> StatusField {
    StatusField { name, ty, doc }
}

use FieldType::{Count, Fence, List, Object, Optional, Text, U64, WideU64};

/// The objects of the status, the whole first.
pub const SHAPE: &[StatusObject] = &[
    StatusObject {
        name: "StoreStatus",
        doc: "What a store holds now, as its owner sees it.",
        fields: &[
            field("dir", Text, "The store directory (the owner's path)."),
            field("pid", Count, "The owner's process id."),
            field("epoch", WideU64, "The owner's epoch: the high 64 bits of every fence it gives."),
            field("uptime_ms", U64, "Milliseconds since the owner opened the store."),
            field("subscriptions", Count, "Subscriptions now, of every process (at most 10,000)."),
            field("channel_bytes", Count, "Bytes all channels keep (at most 64 MiB)."),
            field("branches", List(&Object("BranchStatus")), "Every branch the store knows."),
            field("locks", List(&Object("KeyStatus")), "Every key held or waited for."),
            field("connections", List(&Object("ConnectionStatus")), "The processes connected to the owner."),
        ],
    },
    StatusObject {
        name: "BranchStatus",
        doc: "One branch of a channel.",
        fields: &[
            field("channel", Text, "The channel's name."),
            field("branch", List(&Text), "The branch's keys as text; empty for the channel's root."),
            field("subscribers", Count, "Subscriptions of this branch alone."),
            field("recursive_subscribers", Count, "Recursive subscriptions rooted here."),
            field("kept_messages", Count, "Messages its log keeps now (at most 1,024)."),
            field("kept_bytes", Count, "Bytes its log keeps now (at most 4 MiB)."),
            field("published", U64, "Messages published to it while the store knew it."),
            field(
                "lag",
                List(&U64),
                "How many messages each of its subscriptions has yet to read (past 1,024 a subscription misses).",
            ),
        ],
    },
    StatusObject {
        name: "KeyStatus",
        doc: "One key of a lock or semaphore, held or waited for.",
        fields: &[
            field("lock", Text, "The lock's or semaphore's name."),
            field("key", Text, "The key, as text."),
            field("holders", List(&Object("HolderStatus")), "Its leases now (a semaphore's key can have up to its limit)."),
            field("waiters", Count, "Holds waiting in line."),
        ],
    },
    StatusObject {
        name: "HolderStatus",
        doc: "One lease of a key.",
        fields: &[
            field("lease", U64, "The lease's id."),
            field("fence", Optional(&Fence), "Its fence; null for a semaphore's permit."),
            field("holder", WideU64, "Who holds it: the holder id."),
            field("held_ms", U64, "Milliseconds since it was given."),
            field("left_ms", Optional(&U64), "Milliseconds until it runs out, where it can (ttl or maxHold); else null."),
        ],
    },
    StatusObject {
        name: "ConnectionStatus",
        doc: "One process connected to the owner.",
        fields: &[
            field("id", U64, "The connection's id."),
            field("client", Text, "The name the client gave."),
            field("address", Text, "Where it connected from."),
            field("since_ms", U64, "Milliseconds since it connected."),
        ],
    },
];

/// The object named `name` in [`SHAPE`].
pub fn object(name: &str) -> Option<&'static StatusObject> {
    SHAPE.iter().find(|o| o.name == name)
}
