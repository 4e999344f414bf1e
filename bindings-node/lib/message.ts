import { LONE_SURROGATE, describe } from './check'
import { InvalidError, LimitError } from './errors'

/** A message as a subscriber gets it. */
export interface Message<T> {
  /** The published value, read back from its JSON. */
  readonly value: T
  /** The branch it was published to: its keys as text (`under(7)` gives `['7']`). */
  readonly branch: string[]
  /** Its sequence number in its branch: 1, 2, 3, ... while the branch has subscribers. */
  readonly seq: number
  /** Messages missed just before this one, if any (also told to `onMissed`). */
  readonly missed?: Missed
}

/** Messages a subscription will never get. */
export interface Missed {
  /** How many; absent where it cannot be known (the store restarted). */
  readonly count?: number
  /**
   * Why: `behind` (the subscriber fell behind the branch's log of its newest
   * 1,024 messages or 4 MiB) or `reconnect` (the connection dropped).
   */
  readonly reason: 'behind' | 'reconnect'
}

/** What JSON.stringify writes for a value it changed: one scan of the text. */
const MAYBE_CHANGED = /null|\{\}|\\u|\{"0":|"type":"Buffer"/

/** The JSON text of a value to publish. */
export function encode(value: unknown): string {
  let json: string | undefined
  try {
    json = JSON.stringify(value)
  } catch (e) {
    if (e instanceof RangeError && /call stack/i.test(e.message)) {
      throw new LimitError(
        "a message nests arrays and objects at most 100 deep, so that every language's decoder reads it; this one goes deeper than JavaScript can encode: flatten it, or publish an id and keep the data in the database",
        { cause: e },
      )
    }
    const why = e instanceof Error ? e.message : String(e)
    throw new InvalidError(
      `a message is a value JSON can carry: ${why}. Turn bigints into strings or numbers and break cycles before publishing`,
      { cause: e },
    )
  }
  if (json === undefined) {
    throw new InvalidError(
      `a message is a value JSON can carry, like { kind: 'message', id: 7 }; got ${describe(value)}`,
    )
  }
  // JSON.stringify writes NaN and Infinity as null, a Map or a Set as {},
  // bytes as {"0":…} or {"type":"Buffer",…}, and a lone surrogate as an
  // escape no UTF-8 reader takes. Looked at again
  // only when the text has one of those shapes: a plain message pays a scan.
  if (MAYBE_CHANGED.test(json)) refuseChanged(value)
  return json
}


/** Throws an InvalidError for a part of `value` that JSON would carry changed. */
function refuseChanged(value: unknown): void {
  JSON.stringify(value, function (this: unknown, key: string, v: unknown) {
    // Before its toJSON: a Buffer comes to the replacer as {type, data}.
    const original = (this as Record<string, unknown>)[key]
    if (ArrayBuffer.isView(original) || original instanceof ArrayBuffer) {
      const kind = (original as object).constructor.name
      throw new InvalidError(
        `a message is a value JSON can carry as it is: a ${kind} would arrive as a plain object, not bytes; publish its bytes as text (Buffer.from(bytes).toString('base64')) or as an array (Array.from(bytes))`,
      )
    }
    if (typeof v === 'number' && !Number.isFinite(v)) {
      throw new InvalidError(
        `a message is a value JSON can carry as it is: ${v} would arrive as null; publish a finite number, a string or null`,
      )
    }
    if (v instanceof Map || v instanceof Set) {
      const kind = v instanceof Map ? 'Map' : 'Set'
      throw new InvalidError(
        `a message is a value JSON can carry as it is: a ${kind} would arrive as {}; publish ${kind === 'Map' ? 'Object.fromEntries(map)' : '[...set]'} instead`,
      )
    }
    if ((typeof v === 'string' && LONE_SURROGATE.test(v)) || LONE_SURROGATE.test(key)) {
      throw new InvalidError(
        'a message is a value JSON can carry as it is: a string with a lone surrogate (half of a UTF-16 pair) cannot be UTF-8; mend it first (String.prototype.toWellFormed)',
      )
    }
    return v
  })
}
