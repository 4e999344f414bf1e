import { AsyncLocalStorage } from 'node:async_hooks'

import { LostError, now } from './errors'
import { native, type NativeLease } from './native'

/**
 * A semaphore's permit, given to the function of `hold` while it runs. It
 * has no fence: several valid holders at once would refuse each other.
 */
export class Permit {
  /** @internal */
  protected readonly native: NativeLease
  #lost?: AbortController

  /** @internal Made by `hold`. */
  constructor(native: NativeLease) {
    this.native = native
  }

  /**
   * Fires when the lease is lost (its `maxHold` ran out, its ttl over a
   * connection, or the store closed); its `reason` is a {@link LostError}.
   * Pass it to whatever the function awaits, so the work stops.
   */
  get signal(): AbortSignal {
    if (!this.#lost) {
      const lost = (this.#lost = new AbortController())
      const abort = (message: string | null) => {
        if (message !== null && message !== undefined) lost.abort(new LostError(message))
      }
      const now = this.native.lostMessage
      if (now !== null && now !== undefined) abort(now)
      else this.native.ended().then(abort, () => {})
    }
    return this.#lost.signal
  }

  /** True once the lease was lost; the `hold` then ends with a {@link LostError}. */
  get lost(): boolean {
    return this.native.lost
  }
}

/**
 * A lock's lease, given to the function of `hold` while it runs: its fence,
 * and a signal fired if it is lost.
 */
export class Lease extends Permit {
  /**
   * The lease's fence: a 128-bit number larger than every fence the store gave
   * before, across restarts too. Write it with what the lease protects and
   * refuse writes with a smaller one; `fence.toString().padStart(40, '0')`
   * compares as text in the same order (in SQL, say).
   */
  get fence(): bigint {
    return this.native.fence!
  }
}

/**
 * Who holds: one id per `hold` call, carried into the asynchronous work its
 * function starts, so a nested `hold` of the same key fails at once with a
 * `ConflictError` instead of waiting on itself.
 */
const holders = new AsyncLocalStorage<bigint>()

/** The holder id of the current `hold`, or a fresh one. */
export function currentHolder(): bigint {
  return holders.getStore() ?? native.newHolder()
}

/**
 * Runs `fn` under the lease, then ends the hold: the engine's rule (the
 * function's own error reaches the caller unchanged; a lease lost while it
 * ran makes the `hold` end with a {@link LostError}, even if the function
 * never yielded).
 */
export async function runUnder<L extends Permit, R>(
  held: NativeLease,
  holder: bigint,
  make: (native: NativeLease) => L,
  fn: (lease: L) => R | PromiseLike<R>,
): Promise<R> {
  let value: R
  try {
    value = await holders.run(holder, () => fn(make(held)))
  } catch (err) {
    // The function's own error wins (the core gives no lost error then).
    await now(() => held.end(true))
    throw err
  }
  // Returns once the store let the key go (LOCK-01).
  await now(() => held.end(false))
  return value
}
