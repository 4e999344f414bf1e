/**
 * tinystore for Node.js: channels (pub/sub with branches, bounded logs, exact
 * missed counts, publish in SQL transactions) and locks (leases, `maxHold`,
 * semaphores, 128-bit fences), in this process.
 *
 * ```ts
 * import { open } from 'tinystore'
 *
 * const store = await open('data')
 * const events = store.channel<ChatEvent>('chat-events')
 * const sub = await events.under(chatId).subscribe(m => send(m.value), {
 *   onMissed: () => send({ kind: 'reload' }),
 * })
 * const summaries = store.lock('summaries', { ttl: '30s' })
 * await summaries.hold(chatId, async lease => save(chatId, lease.fence))
 * ```
 *
 * @packageDocumentation
 */

export { Branch, Channel } from './channel'
export { Database, Tx, TxBranch } from './database'
export type { Done, Row, SqlParam, SqlValue, Statement } from './database'
export {
  AuthError,
  BusyError,
  ClosedError,
  ConflictError,
  InternalError,
  InvalidError,
  IoError,
  LimitError,
  LostError,
  OwnedError,
  ProtocolError,
  SqlError,
  TimeoutError,
  TinyStoreError,
  UnavailableError,
} from './errors'
export type { ErrorCode } from './errors'
export { Lease, Lock, Permit, Semaphore } from './lock'
export type { HoldOptions, LockOptions, SemaphoreOptions, TryHoldResult } from './lock'
export type { Message, Missed } from './message'
export { connect, open, Store } from './store'
export type { BranchStatus, ConnectionStatus, HolderStatus, KeyStatus, StoreStatus } from './status'
export type { ConnectOptions, DatabaseOptions } from './store'
export { MessageIterator, Subscription } from './subscription'
export type { SubscribeOptions } from './subscription'
export type { Duration, Key } from './types'
