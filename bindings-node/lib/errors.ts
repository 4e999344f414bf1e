/**
 * The errors of tinystore: one class, {@link TinyStoreError}, with a stable
 * {@link TinyStoreError.code | code}, and a subclass per code. This is the one
 * place where the engine's codes become JavaScript classes.
 *
 * @module
 */

import type { ErrorCode } from './codes'

export type { ErrorCode }

/**
 * An error of tinystore. `code` says what kind of failure it is; `message`
 * says what was wrong and what to do. Catch a subclass (`LostError`,
 * `TimeoutError`, ...) or compare `code`.
 */
export class TinyStoreError extends Error {
  /** The stable code of this kind of failure. */
  readonly code: ErrorCode

  /**
   * @param code - The kind of failure.
   * @param message - What was wrong and what to do.
   * @param options - `cause`, as for `Error`.
   */
  constructor(code: ErrorCode, message: string, options?: ErrorOptions) {
    super(message, options)
    this.code = code
    this.name = new.target.name
  }
}

/** `hold` found no free key within its `wait`; the function did not run. Code `timeout`. */
export class TimeoutError extends TinyStoreError {
  declare readonly code: 'timeout'
  /** @param message - What ran out. */
  constructor(message: string, options?: ErrorOptions) {
    super('timeout', message, options)
  }
}

/** Something out of rule: a bad name, key, duration or value. Code `invalid`. */
export class InvalidError extends TinyStoreError {
  declare readonly code: 'invalid'
  /** @param message - What was out of rule, with a valid example. */
  constructor(message: string, options?: ErrorOptions) {
    super('invalid', message, options)
  }
}

/** A limit was reached: message size, subscriptions, pending output. Code `limit`. */
export class LimitError extends TinyStoreError {
  declare readonly code: 'limit'
  /** @param message - Which limit. */
  constructor(message: string, options?: ErrorOptions) {
    super('limit', message, options)
  }
}

/** This program closed the store (`close()` was called). Code `closed`. */
export class ClosedError extends TinyStoreError {
  declare readonly code: 'closed'
  /** @param message - What was closed. */
  constructor(message: string, options?: ErrorOptions) {
    super('closed', message, options)
  }
}

/**
 * A lease ran out (`maxHold`, its ttl over a connection) or the store closed
 * before its holder let it go: another holder may have the key. Code `lost`.
 */
export class LostError extends TinyStoreError {
  declare readonly code: 'lost'
  /** @param message - Which lease, and why it was lost. */
  constructor(message: string, options?: ErrorOptions) {
    super('lost', message, options)
  }
}

/** Another process owns the store directory. Code `owned`. */
export class OwnedError extends TinyStoreError {
  declare readonly code: 'owned'
  /** @param message - Who owns it. */
  constructor(message: string, options?: ErrorOptions) {
    super('owned', message, options)
  }
}

/**
 * The request contradicts what the store has: a semaphore opened with
 * another limit, a `hold` of a key its holder already holds. Code `conflict`.
 */
export class ConflictError extends TinyStoreError {
  declare readonly code: 'conflict'
  /** @param message - What it contradicts. */
  constructor(message: string, options?: ErrorOptions) {
    super('conflict', message, options)
  }
}

/** A SQL database stayed locked by another writer past the busy timeout. Code `busy`. */
export class BusyError extends TinyStoreError {
  declare readonly code: 'busy'
  /** @param message - Which database. */
  constructor(message: string, options?: ErrorOptions) {
    super('busy', message, options)
  }
}

/** A SQL statement failed, or a migration could not be applied. Code `sql`. */
export class SqlError extends TinyStoreError {
  declare readonly code: 'sql'
  /** @param message - SQLite's message. */
  constructor(message: string, options?: ErrorOptions) {
    super('sql', message, options)
  }
}

/** A missing or wrong token. Code `auth`. */
export class AuthError extends TinyStoreError {
  declare readonly code: 'auth'
  /** @param message - What was refused. */
  constructor(message: string, options?: ErrorOptions) {
    super('auth', message, options)
  }
}

/** The operating system refused a file or socket operation. Code `io`. */
export class IoError extends TinyStoreError {
  declare readonly code: 'io'
  /** @param message - The operation and the system's reason. */
  constructor(message: string, options?: ErrorOptions) {
    super('io', message, options)
  }
}

/** The peer spoke something this side does not understand. Code `protocol`. */
export class ProtocolError extends TinyStoreError {
  declare readonly code: 'protocol'
  /** @param message - What was not understood. */
  constructor(message: string, options?: ErrorOptions) {
    super('protocol', message, options)
  }
}

/** A bug in tinystore itself. Code `internal`. */
export class InternalError extends TinyStoreError {
  declare readonly code: 'internal'
  /** @param message - What failed. */
  constructor(message: string, options?: ErrorOptions) {
    super('internal', message, options)
  }
}

/**
 * The store could not be reached: the connection stayed down past the request
 * timeout (10 s by default; the message says since when), or it was cut
 * before the store answered a call already sent (a publish may then have been
 * delivered). Calls made while the client reconnects wait for it first.
 * Code `unavailable`.
 */
export class UnavailableError extends TinyStoreError {
  declare readonly code: 'unavailable'
  /** @param message - What could not be reached, since when. */
  constructor(message: string, options?: ErrorOptions) {
    super('unavailable', message, options)
  }
}

// One class per code of the generated list: a code added to the core and not
// here fails to compile.
const classes: Record<ErrorCode, new (message: string) => TinyStoreError> = {
  timeout: TimeoutError,
  invalid: InvalidError,
  limit: LimitError,
  closed: ClosedError,
  lost: LostError,
  owned: OwnedError,
  conflict: ConflictError,
  busy: BusyError,
  sql: SqlError,
  auth: AuthError,
  io: IoError,
  protocol: ProtocolError,
  internal: InternalError,
  unavailable: UnavailableError,
}

// The native layer sends each engine error as `tinystore:<code>:<message>`.
const NATIVE = /^tinystore:([a-z]+):/

// napi's own statuses for a JavaScript value it could not convert.
const CONVERSION = new Set([
  'InvalidArg',
  'ObjectExpected',
  'StringExpected',
  'NameExpected',
  'FunctionExpected',
  'NumberExpected',
  'BooleanExpected',
  'ArrayExpected',
  'BigintExpected',
  'DateExpected',
  'ArrayBufferExpected',
])

// napi's wording: "Failed to convert JavaScript value `Number 42 ` into rust type `String`".
const FAILED = /^Failed to convert JavaScript value `(\w+)\s*(.*?)\s*` into rust type `(.+?)`/
// ... and "Value is none of these types `String`, `f64`, `BigInt`, ".
const NONE_OF = /^Value is none of these types (.*)$/

const RUST_TYPES: Record<string, string> = {
  String: 'text',
  f64: 'a number',
  f32: 'a number',
  u32: 'a whole number',
  i32: 'a whole number',
  i64: 'a whole number',
  bool: 'a boolean',
  BigInt: 'a bigint',
  null: 'null',
  undefined: 'undefined',
}

/** napi's conversion message in JavaScript's words. */
function conversion(message: string): string {
  const what = (t: string) => RUST_TYPES[t] ?? (t.startsWith('TypedArray') || t === 'Buffer' ? 'bytes (a Uint8Array)' : t)
  const failed = FAILED.exec(message)
  if (failed) {
    const [, kind, value, rust] = failed
    const got = kind === 'Undefined' || kind === 'Null' ? kind.toLowerCase() : `the ${kind!.toLowerCase()} ${value}`.trim()
    return `expected ${what(rust!)}; got ${got}`
  }
  const none = NONE_OF.exec(message)
  if (none) {
    const types = [...none[1]!.matchAll(/`([^`]+)`/g)].map((m) => what(m[1]!))
    return `expected one of: ${types.join(', ')}`
  }
  return message
}

/** The {@link TinyStoreError} for an error thrown by the native layer; any other value unchanged. */
export function fromNative(e: unknown): unknown {
  if (!(e instanceof Error)) return e
  const m = NATIVE.exec(e.message)
  const cls = m ? classes[m[1] as ErrorCode] : undefined
  if (cls && m) return new cls(e.message.slice(m[0].length))
  // The TypeScript layer checks types first; this catches what it missed.
  const status = (e as { code?: unknown }).code
  if (typeof status === 'string' && CONVERSION.has(status)) {
    return new InvalidError(
      `a value of the wrong type: ${conversion(e.message)}; pass what the declarations of tinystore say`,
      { cause: e },
    )
  }
  return e
}

/** Runs a native call, turning its error into a {@link TinyStoreError}. */
export function sync<T>(f: () => T): T {
  try {
    return f()
  } catch (e) {
    throw fromNative(e)
  }
}

/**
 * Awaits a native promise, turning its error into a {@link TinyStoreError}.
 * Plain promises, not async functions: each async frame is one more promise
 * and microtask a call, and a burst of publishes pays them by the thousand
 * (docs/performance-node.md).
 */
export function settle<T>(p: Promise<T>): Promise<T> {
  return p.then(undefined, rethrowNative)
}

function rethrowNative(e: unknown): never {
  throw fromNative(e)
}

/**
 * Runs a native call that answers now or with a promise (an engine call that
 * is usually ready at once), turning its error into a {@link TinyStoreError}:
 * a promise either way, rejected rather than thrown.
 */
export function now<T>(f: () => T | Promise<T>): Promise<T> {
  let r: T | Promise<T>
  try {
    r = f()
  } catch (e) {
    return Promise.reject(fromNative(e))
  }
  return r instanceof Promise ? settle(r) : Promise.resolve(r)
}
