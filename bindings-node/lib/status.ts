// Generated from the core by core/tests/generated.rs: do not edit.
// `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` rewrites it.
/**
 * What `store.status()` gives: the engine's status JSON (snake_case) as
 * objects with camelCase names (`tinystore::status::SHAPE`).
 *
 * @module
 */
/* eslint-disable @typescript-eslint/no-explicit-any */

/** What a store holds now, as its owner sees it. */
export interface StoreStatus {
  /** The store directory (the owner's path). */
  readonly dir: string
  /** The owner's process id. */
  readonly pid: number
  /** The owner's epoch: the high 64 bits of every fence it gives. */
  readonly epoch: bigint
  /** Milliseconds since the owner opened the store. */
  readonly uptimeMs: number
  /** Subscriptions now, of every process (at most 10,000). */
  readonly subscriptions: number
  /** Bytes all channels keep (at most 64 MiB). */
  readonly channelBytes: number
  /** Every branch the store knows. */
  readonly branches: readonly BranchStatus[]
  /** Every key held or waited for. */
  readonly locks: readonly KeyStatus[]
  /** The processes connected to the owner. */
  readonly connections: readonly ConnectionStatus[]
}

/** One branch of a channel. */
export interface BranchStatus {
  /** The channel's name. */
  readonly channel: string
  /** The branch's keys as text; empty for the channel's root. */
  readonly branch: readonly string[]
  /** Subscriptions of this branch alone. */
  readonly subscribers: number
  /** Recursive subscriptions rooted here. */
  readonly recursiveSubscribers: number
  /** Messages its log keeps now (at most 1,024). */
  readonly keptMessages: number
  /** Bytes its log keeps now (at most 4 MiB). */
  readonly keptBytes: number
  /** Messages published to it while the store knew it. */
  readonly published: number
  /** How many messages each of its subscriptions has yet to read (past 1,024 a subscription misses). */
  readonly lag: readonly number[]
}

/** One key of a lock or semaphore, held or waited for. */
export interface KeyStatus {
  /** The lock's or semaphore's name. */
  readonly lock: string
  /** The key, as text. */
  readonly key: string
  /** Its leases now (a semaphore's key can have up to its limit). */
  readonly holders: readonly HolderStatus[]
  /** Holds waiting in line. */
  readonly waiters: number
}

/** One lease of a key. */
export interface HolderStatus {
  /** The lease's id. */
  readonly lease: number
  /** Its fence; null for a semaphore's permit. */
  readonly fence: bigint | null
  /** Who holds it: the holder id. */
  readonly holder: bigint
  /** Milliseconds since it was given. */
  readonly heldMs: number
  /** Milliseconds until it runs out, where it can (ttl or maxHold); else null. */
  readonly leftMs: number | null
}

/** One process connected to the owner. */
export interface ConnectionStatus {
  /** The connection's id. */
  readonly id: number
  /** The name the client gave. */
  readonly client: string
  /** Where it connected from. */
  readonly address: string
  /** Milliseconds since it connected. */
  readonly sinceMs: number
}

function toStoreStatus(v: any): StoreStatus {
  return {
    dir: v.dir,
    pid: v.pid,
    epoch: BigInt(v.epoch),
    uptimeMs: v.uptime_ms,
    subscriptions: v.subscriptions,
    channelBytes: v.channel_bytes,
    branches: (v.branches ?? []).map(toBranchStatus),
    locks: (v.locks ?? []).map(toKeyStatus),
    connections: (v.connections ?? []).map(toConnectionStatus),
  }
}

function toBranchStatus(v: any): BranchStatus {
  return {
    channel: v.channel,
    branch: v.branch ?? [],
    subscribers: v.subscribers,
    recursiveSubscribers: v.recursive_subscribers,
    keptMessages: v.kept_messages,
    keptBytes: v.kept_bytes,
    published: v.published,
    lag: v.lag ?? [],
  }
}

function toKeyStatus(v: any): KeyStatus {
  return {
    lock: v.lock,
    key: v.key,
    holders: (v.holders ?? []).map(toHolderStatus),
    waiters: v.waiters,
  }
}

function toHolderStatus(v: any): HolderStatus {
  return {
    lease: v.lease,
    fence: v.fence === null || v.fence === undefined ? null : BigInt(v.fence),
    holder: BigInt(v.holder),
    heldMs: v.held_ms,
    leftMs: v.left_ms === null || v.left_ms === undefined ? null : v.left_ms,
  }
}

function toConnectionStatus(v: any): ConnectionStatus {
  return {
    id: v.id,
    client: v.client,
    address: v.address,
    sinceMs: v.since_ms,
  }
}

/** @internal The engine's status JSON text as a {@link StoreStatus}. */
export function toStatus(json: string): StoreStatus {
  return toStoreStatus(JSON.parse(json))
}
