import * as check from './check'
import { now } from './errors'
import { encode, type Message, type Missed } from './message'
import type { NativeStore } from './native'
import { MessageIterator, Subscription, type SubscribeOptions } from './subscription'
import type { Key } from './types'

/** @internal The native store a branch publishes to (`tx.with` checks it is the transaction's). */
export function storeOf<T>(branch: Branch<T>): NativeStore {
  return (branch as unknown as { store: NativeStore }).store
}

/** Connected stores whose publishes wait for the end of this burst of calls. */
let burst: NativeStore[] = []

/**
 * A connected store's publishes wait in its connection's sink until the
 * code that made them lets a microtask run (an `await`, the end of the
 * callback): then one write carries the burst, as node-redis corks its
 * socket until the next tick (docs/performance-node.md).
 */
function flushAfterBurst(store: NativeStore): void {
  if (burst.length === 0) queueMicrotask(flushBurst)
  else if (burst.includes(store)) return
  burst.push(store)
}

function flushBurst(): void {
  const stores = burst
  burst = []
  for (const store of stores) store.flushPublishes()
}

/**
 * A branch of a channel: the messages of one chat, say. Made by
 * `channel.under(key)`, and nestable: `events.under(7).under('typing')`.
 *
 * @typeParam T - The type of the messages, carried as JSON.
 */
export class Branch<T> implements AsyncIterable<Message<T>> {
  /** @internal */
  protected readonly store: NativeStore
  /** The channel's name. */
  readonly name: string
  /** The branch's keys from the channel's root; empty for the root. */
  readonly path: readonly Key[]

  /** @internal Made by `store.channel(name)` and `under(key)`. */
  constructor(store: NativeStore, name: string, path: readonly Key[]) {
    this.store = store
    this.name = name
    this.path = path
  }

  /**
   * The branch `key` below this one.
   *
   * @param key - Text of 1 to 1,024 bytes, or an integer; `7` and `'7'` are one branch.
   * @throws {@link InvalidError} when `key` is not text of 1 to 1,024 bytes,
   * a safe integer (within ±(2^53 - 1)) or a bigint.
   */
  under(key: Key): Branch<T> {
    return new Branch<T>(this.store, this.name, [...this.path, check.key(key)])
  }

  /**
   * Publishes `value` to this branch. Resolves once the store has it; never
   * waits for a subscriber, however slow. Connected, it leaves once the code
   * that called it lets a microtask run (an `await`, the callback's end),
   * with the rest of that burst (32 a write at most), as node-redis corks
   * its socket until the next tick; within 350 ms when the code stays busy.
   * A publish made while the connection is
   * being re-established waits for it (up to the request timeout, 10 s, and
   * 8 MiB of waiting publishes), then leaves in order.
   *
   * @throws {@link LimitError} when its JSON is over 1 MiB or nests arrays
   * and objects over 100 deep (nothing is published); {@link InvalidError}
   * for a key out of rule or a value JSON cannot carry, or would carry
   * changed (NaN, Infinity, a Map, a Set, a lone surrogate, a Buffer or typed array); {@link ClosedError} once the store was closed;
   * {@link UnavailableError} when the store stayed out of reach past the
   * request timeout (nothing published), or the connection was cut before
   * the owner answered (the message may have been delivered).
   */
  publish(value: T): Promise<void> {
    return now(() => {
      const sent = this.store.publish(this.name, this.path as Key[], encode(value))
      if (sent !== undefined) flushAfterBurst(this.store)
      return sent
    }) as Promise<void>
  }

  /**
   * Subscribes to this branch. Resolves once the store has the subscription:
   * every message published after that reaches `handler`, in publish order,
   * one at a time on the JavaScript thread (a returned promise is awaited
   * before the next message). A subscriber that falls behind the branch's log
   * (its newest 1,024 messages or 4 MiB) is told exactly how many it missed
   * through `onMissed`, before its next message.
   *
   * An active subscription keeps the Node process alive, as a listening
   * server does: it waits for messages until `await sub.stop()` or
   * `await store.close()` (which ends every subscription of the store), and
   * a program that does neither does not exit by itself. It also keeps its
   * store open: a program may drop every reference to the store and keep
   * only the subscription (or not even that) without a garbage collection
   * closing the store under it.
   *
   * @param handler - Called with each message. What it throws goes to `onError`.
   * @param options - `onMissed`, `onError`, and `recursive` for the branches below too.
   * @throws {@link LimitError} past 10,000 subscriptions in the store;
   * {@link InvalidError} when `handler` (or `onMissed`, `onError`) is not a
   * function, or a key of the branch is out of rule; {@link ClosedError}.
   */
  async subscribe(handler: (m: Message<T>) => unknown, options: SubscribeOptions | null = {}): Promise<Subscription> {
    check.fn('a subscription\'s handler', handler, '(m) => console.log(m.value)')
    options = check.options('subscribe', options, ['onMissed', 'onError', 'recursive'], '{ onMissed: (m) => {...} }')
    check.optionalFn('onMissed', options?.onMissed)
    check.optionalFn('onError', options?.onError)
    const native = await now(() => this.store.subscribe(this.name, this.path as Key[], options?.recursive ?? false))
    return new Subscription(native, handler as (m: Message<unknown>) => unknown, options)
  }

  /**
   * The messages of this branch as an async iterator, subscribed at the first
   * `next()` (or at `await it.ready()`). Breaking out of `for await` stops it.
   * Once subscribed, it keeps the Node process alive (see
   * {@link Branch.subscribe}) until the loop ends, `it.return()`, or
   * `store.close()`.
   *
   * @param options - `onMissed`, and `recursive` for the branches below too.
   */
  messages(options: Pick<SubscribeOptions, 'onMissed' | 'recursive'> | null = {}): MessageIterator<T> {
    options = check.options('messages', options, ['onMissed', 'recursive'], '{ recursive: true }')
    check.optionalFn('onMissed', options?.onMissed)
    return new MessageIterator<T>(
      () => now(() => this.store.subscribe(this.name, this.path as Key[], options?.recursive ?? false)),
      options.onMissed,
    )
  }

  /** `for await (const m of events.under(id))`: see {@link Branch.messages}. */
  [Symbol.asyncIterator](): MessageIterator<T> {
    return this.messages()
  }
}

/**
 * A channel: a name that messages of one type are published on; every
 * process of the store shares it. Made by `store.channel<T>(name)`. The
 * channel is also its own root branch.
 *
 * @typeParam T - The type of the messages, carried as JSON.
 */
export class Channel<T> extends Branch<T> {
  /** @internal Made by `store.channel(name)`. */
  constructor(store: NativeStore, name: string) {
    super(store, name, [])
  }
}

export type { Message, Missed, SubscribeOptions }
