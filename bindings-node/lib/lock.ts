import * as check from './check'
import { InvalidError, now, sync } from './errors'
import { currentHolder, Lease, Permit, runUnder } from './lease'
import type { NativeLease, NativeLock, NativeStore } from './native'
import type { Duration, Key } from './types'

/** Options of a lock handle, checked when the handle is made. */
export interface LockOptions {
  /**
   * A lease over a connection lasts this long from its last renewal; the
   * engine renews it every third of it while the function runs. 1 s to 1 h;
   * default `'30s'`. A lease of the process that owns the store ends only
   * with its function (or at `maxHold`).
   */
  ttl?: Duration
  /** No lease outlasts this, renewed or not. Positive; default none. */
  maxHold?: Duration
  /** How long `hold` waits for the key. Positive; default `'10s'`. */
  wait?: Duration
}

/** Options of a semaphore handle. */
export interface SemaphoreOptions extends LockOptions {
  /**
   * How many holders of a key at once: 1 or more. It belongs to the
   * semaphore: opening the same name with another limit is a `ConflictError`.
   */
  limit: number
}

/** Options of one `hold`. */
export interface HoldOptions {
  /** How long to wait for the key; default the handle's `wait` (`'10s'`). */
  wait?: Duration
}

/** What `tryHold` gives: whether the function ran, and what it returned. */
export type TryHoldResult<R> = { acquired: true; value: R } | { acquired: false; value?: undefined }

/** The shared part of locks and semaphores. */
abstract class Holdable<L extends Permit> {
  /** @internal */
  protected readonly native: NativeLock

  /** @internal */
  constructor(native: NativeLock) {
    this.native = native
  }

  /** @internal */
  protected abstract make(native: NativeLease): L

  /** The handle's name. */
  get name(): string {
    return this.native.name
  }

  /**
   * Waits for `key` (up to `wait`, 10 seconds unless set), runs `fn` with the
   * lease, and lets the key go when `fn` returns or throws. Waiters get the
   * key in the order they asked.
   *
   * @param key - Text of 1 to 1,024 bytes, or an integer.
   * @param fn - The work; may be async. Its own error reaches the caller unchanged.
   * @param options - `wait` for this call.
   * @returns What `fn` returned.
   * @throws {@link TimeoutError} when the key stayed held for the whole wait
   * (`fn` did not run); {@link LostError} when the lease was lost while `fn`
   * ran; {@link ConflictError} when this `hold` already holds `key` (a hold
   * inside a hold of the same key); {@link InvalidError}; {@link ClosedError};
   * {@link UnavailableError} when, connected, the store stayed out of reach
   * for the whole wait (at least the request timeout, 10 s).
   */
  async hold<R>(key: Key, fn: (lease: L) => R | PromiseLike<R>, options: HoldOptions | null = {}): Promise<R> {
    check.key(key)
    check.fn('the work given to hold', fn, 'async (lease) => { ... }')
    const wait = check.duration('wait', check.options('hold', options, ['wait'], "{ wait: '5s' }").wait)
    const holder = currentHolder()
    const held = await now(() => this.native.acquire(key, holder, wait))
    return runUnder(held, holder, (n) => this.make(n), fn)
  }

  /**
   * Runs `fn` with the lease only if `key` is free now; never waits.
   *
   * @returns `{ acquired: true, value }` with what `fn` returned, or
   * `{ acquired: false }` at once when the key is held (by this `hold` too).
   * @throws As {@link Holdable.hold}, without {@link TimeoutError}.
   */
  async tryHold<R>(key: Key, fn: (lease: L) => R | PromiseLike<R>): Promise<TryHoldResult<R>> {
    if (arguments.length > 2) {
      throw new InvalidError(`tryHold takes no options: it never waits; got ${check.describe(arguments[2])} after the function (hold(key, fn, { wait }) waits)`)
    }
    check.key(key)
    check.fn('the work given to tryHold', fn, 'async (lease) => { ... }')
    const holder = currentHolder()
    const held = await now(() => this.native.tryAcquire(key, holder))
    if (!held) return { acquired: false }
    return { acquired: true, value: await runUnder(held, holder, (n) => this.make(n), fn) }
  }
}

/**
 * A lock: one holder of a key at a time, each lease with a fence. Made by
 * `store.lock(name, { ttl, maxHold, wait })`.
 */
export class Lock extends Holdable<Lease> {
  /** @internal */
  protected make(native: NativeLease): Lease {
    return new Lease(native)
  }
}

/**
 * A semaphore: up to `limit` holders of a key at a time; permits carry no
 * fence. Made by `store.semaphore(name, { limit, ttl, maxHold, wait })`.
 */
export class Semaphore extends Holdable<Permit> {
  /** @internal */
  protected make(native: NativeLease): Permit {
    return new Permit(native)
  }
}

/** The options of a lock handle (a semaphore's add `limit`). */
const LOCK_OPTIONS = ['ttl', 'maxHold', 'wait']

/** The durations of `o`, their types checked (the engine checks their values). */
function durations(o: LockOptions): [Duration | undefined, Duration | undefined, Duration | undefined] {
  return [check.duration('ttl', o.ttl), check.duration('maxHold', o.maxHold), check.duration('wait', o.wait)]
}

/** @internal A lock handle, checked by the engine now. */
export function makeLock(store: NativeStore, name: string, o: LockOptions | null | undefined): Lock {
  check.name('lock', name, 'summaries')
  const [ttl, maxHold, wait] = durations(check.options('store.lock', o, LOCK_OPTIONS, "{ ttl: '30s', maxHold: '5m' }"))
  return new Lock(sync(() => store.lock(name, ttl, maxHold, wait)))
}

/** @internal A semaphore handle, checked by the engine now. */
export function makeSemaphore(store: NativeStore, name: string, o: SemaphoreOptions): Semaphore {
  check.name('semaphore', name, 'exports')
  if (typeof o === 'object' && o !== null) check.options('store.semaphore', o, ['limit', ...LOCK_OPTIONS], '{ limit: 3 }')
  if (o === undefined || o === null || typeof o.limit !== 'number') {
    const got = o === undefined || o === null ? 'no options' : `limit: ${check.describe(o.limit)}`
    throw new InvalidError(`a semaphore needs its limit, a whole number of permits: store.semaphore('${name}', { limit: 3 }); got ${got}`)
  }
  const [ttl, maxHold, wait] = durations(o)
  return new Semaphore(sync(() => store.semaphore(name, o.limit, ttl, maxHold, wait)))
}

export { Lease, Permit }
