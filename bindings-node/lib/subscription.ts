import { setImmediate as yieldToLoop } from 'node:timers/promises'

import { settle } from './errors'
import type { Message, Missed } from './message'
import type { NativeBatch, NativeMissed, NativeSubscription } from './native'

/** How many events cross from the engine at once. */
const BATCH = 256

/** What a subscription calls besides its handler. */
export interface SubscribeOptions {
  /**
   * Called, before the next message, when messages were missed: `count` of
   * them (exact; absent where unknown) for `reason` `behind` (the subscriber
   * fell behind the branch's log) or `reconnect`. A returned promise is
   * awaited before the next message.
   */
  onMissed?: (missed: Missed) => unknown
  /**
   * Called with what the handler (or `onMissed`) threw or rejected with; the
   * subscription goes on. Without it, the error is emitted as a process
   * warning.
   */
  onError?: (error: unknown) => void
  /** Also receive the messages of every branch below this one. Default false. */
  recursive?: boolean
}

/**
 * A subscription: its handler runs on the JavaScript thread, one message at a
 * time, in publish order (a returned promise is awaited before the next).
 * Made by `branch.subscribe`; ends with {@link Subscription.stop} or when its
 * store closes.
 */
export class Subscription {
  #native: NativeSubscription
  #stopped = false
  #ended: Promise<void>

  /** @internal Made by `branch.subscribe`. */
  constructor(
    native: NativeSubscription,
    handler: (m: Message<any>) => unknown,
    options: SubscribeOptions,
  ) {
    this.#native = native
    this.#ended = this.#run(handler, options)
  }

  async #run(handler: (m: Message<any>) => unknown, options: SubscribeOptions): Promise<void> {
    const report = options.onError ?? warn
    const read = reader(this.#native)
    let missed: Missed | undefined
    for (;;) {
      const batch = await read()
      if (batch.length === 0) return
      for (const e of batch) {
        if (this.#stopped) return
        try {
          let r: unknown
          if (isMissed(e)) {
            missed = e
            r = options.onMissed?.(missed)
          } else {
            if (missed) e.missed = missed
            r = handler(e)
            missed = undefined
          }
          if (isThenable(r)) await r
        } catch (err) {
          try {
            report(err)
          } catch {
            // An onError that throws has nowhere else to go.
          }
        }
      }
    }
  }

  /**
   * Stops the subscription: once this is called, the handler is never called
   * again (a call already running finishes on its own). Safe from inside the
   * handler, twice, or after the store closed.
   */
  async stop(): Promise<void> {
    this.#stopped = true
    this.#native.stop()
  }

  /** True once {@link Subscription.stop} was called. */
  get stopped(): boolean {
    return this.#stopped
  }

  /**
   * Resolves when the subscription ended: stopped, or its store closed and
   * every message it still had was handled.
   */
  get ended(): Promise<void> {
    return this.#ended
  }
}

/**
 * The async iterator of `for await (const m of branch)`: messages in publish
 * order; a gap shows as `m.missed` on the message after it. Breaking out of
 * the loop stops the subscription.
 */
export class MessageIterator<T> implements AsyncIterableIterator<Message<T>> {
  #open: () => Promise<NativeSubscription>
  #native?: Promise<NativeSubscription>
  #read?: () => Promise<Event[]>
  #queue: Event[] = []
  #onMissed?: (missed: Missed) => unknown
  #closed = false

  /** @internal Made by `branch.messages()` and `branch[Symbol.asyncIterator]()`. */
  constructor(open: () => Promise<NativeSubscription>, onMissed?: (missed: Missed) => unknown) {
    this.#open = open
    this.#onMissed = onMissed
  }

  /**
   * Subscribes now rather than at the first `next()`: every message published
   * after this resolves is seen.
   */
  async ready(): Promise<this> {
    this.#native ??= this.#open()
    this.#read ??= reader(await this.#native)
    return this
  }

  /** The next message; done once the subscription is stopped or the store closed. */
  async next(): Promise<IteratorResult<Message<T>, undefined>> {
    if (this.#closed) return { done: true, value: undefined }
    await this.ready()
    let missed: Missed | undefined
    for (;;) {
      if (this.#queue.length === 0) this.#queue = await this.#read!()
      const e = this.#queue.shift()
      if (e === undefined) return { done: true, value: undefined }
      if (!isMissed(e)) {
        if (missed) e.missed = missed
        return { done: false, value: e as Message<T> }
      }
      missed = e
      const told = this.#onMissed?.(missed)
      if (isThenable(told)) await told
    }
  }

  /** Stops the subscription (what `break` in a `for await` calls). */
  async return(): Promise<IteratorResult<Message<T>, undefined>> {
    this.#closed = true
    if (this.#native) (await this.#native).stop()
    return { done: true, value: undefined }
  }

  /** This iterator. */
  [Symbol.asyncIterator](): this {
    return this
  }
}

/** A message, built here from its batch, or word of missed ones. */
type Event = { value: unknown; branch: string[]; seq: number; missed?: Missed } | Missed

function isMissed(e: Event): e is Missed {
  return (e as Missed).reason !== undefined
}

/**
 * Reads a native subscription a batch per crossing: what is ready now, else
 * waits for the next; an empty batch once it ended.
 */
function reader(native: NativeSubscription): () => Promise<Event[]> {
  let ready = 0
  return async () => {
    const batch = native.take(BATCH)
    if (batch.seqs.length === 0 && batch.missed.length === 0) return events(await settle(native.next(BATCH)))
    // Events keep coming without a wait: let the event loop breathe now and then.
    if (++ready % 8 === 0) await yieldToLoop()
    return events(batch)
  }
}

/** A batch's events in order: its messages (one JSON.parse for all) and word of missed ones between them. */
function events(b: NativeBatch): Event[] {
  const values: unknown[] = b.seqs.length === 0 ? [] : JSON.parse(b.json)
  const out: Event[] = []
  let k = 0
  for (let i = 0; i < values.length; i++) {
    while (k < b.missed.length && b.missed[k].before === i) out.push(toMissed(b.missed[k++]))
    // Each message its own array: a handler may keep or change it.
    out.push({ value: values[i], branch: b.branches[b.branchOf[i]].slice(), seq: b.seqs[i] })
  }
  while (k < b.missed.length) out.push(toMissed(b.missed[k++]))
  return out
}

function toMissed(e: NativeMissed): Missed {
  const reason = e.reason as Missed['reason']
  return e.count === undefined || e.count === null ? { reason } : { count: e.count, reason }
}

function isThenable(v: unknown): v is PromiseLike<unknown> {
  return v !== null && (typeof v === 'object' || typeof v === 'function') && typeof (v as PromiseLike<unknown>).then === 'function'
}

function warn(err: unknown): void {
  process.emitWarning(err instanceof Error ? err : String(err), { type: 'TinyStoreHandlerError' })
}
