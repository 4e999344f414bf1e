/**
 * The types of values JavaScript callers pass, checked before they cross to
 * the native layer, so a wrong one is an {@link InvalidError} saying what was
 * expected and what came, rather than napi's conversion error. Ranges (key
 * lengths, finite numbers, durations' text) are checked by the engine, a text
 * key's length at once (`native.checkKey`).
 *
 * @internal
 * @module
 */
import { InvalidError, sync } from './errors'
import { native } from './native'
import type { Duration, Key } from './types'

/** What `v` is, for a message: `the number 42`, `an object`, `undefined`. */
export function describe(v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  switch (typeof v) {
    case 'undefined':
      return 'undefined'
    case 'string':
      return `the string ${JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)}`
    case 'number':
      return `the number ${v}`
    case 'bigint':
      return `the bigint ${v}n`
    case 'boolean':
      return `the boolean ${v}`
    case 'symbol':
      return 'a symbol'
    case 'function':
      return 'a function'
    default: {
      const name = (v as object).constructor?.name
      return name && name !== 'Object' ? `a ${name}` : 'an object'
    }
  }
}

/** `v` as text, else an InvalidError: `${what} is text, like ${example}; got ...`. */
export function text(what: string, v: unknown, example: string): string {
  if (typeof v !== 'string') throw new InvalidError(`${what} is text, like ${example}; got ${describe(v)}`)
  return v
}

/** A name of a channel, lock, semaphore or database. */
export function name(kind: string, v: unknown, example: string): string {
  return text(`a ${kind} name`, v, `'${example}'`)
}

/** Half of a UTF-16 pair, alone: UTF-8 has no bytes for it. */
export const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** A key of a branch or a hold: text or an integer (the engine checks the rest). */
export function key(v: unknown): Key {
  if (typeof v === 'bigint') return v
  if (typeof v === 'number') {
    if (Number.isSafeInteger(v)) return v
    throw new InvalidError(
      `a key is a string or an integer, like 42 or 'chat-42': a number must be a whole number within ±(2^53 - 1); got ${describe(v)} (pass larger integers as a bigint or a string)`,
    )
  }
  if (typeof v === 'string') {
    // N-API would turn a lone surrogate into U+FFFD: another key.
    if (LONE_SURROGATE.test(v)) {
      throw new InvalidError(
        `a key is text that UTF-8 can carry: this one has a lone surrogate (half of a UTF-16 pair), and would name another key; mend it first (String.prototype.toWellFormed); got ${describe(v)}`,
      )
    }
    // The length rule is the engine's.
    sync(() => native.checkKey(v))
    return v
  }
  throw new InvalidError(`a key is a string or an integer, like 42 or 'chat-42'; got ${describe(v)}`)
}

/** An optional duration option `what` (`ttl`, `maxHold`, `wait`). */
export function duration(what: string, v: unknown): Duration | undefined {
  if (v === undefined || typeof v === 'string' || typeof v === 'number') return v
  throw new InvalidError(`${what} is a duration: text like '30s' or a number of milliseconds, like 30000; got ${describe(v)}`)
}

/** A function the caller gives (`what` says which, `example` shows one), else an InvalidError. */
export function fn<F>(what: string, v: F, example?: string): F {
  if (typeof v !== 'function') {
    throw new InvalidError(`${what} is a function${example ? `, like ${example}` : ''}; got ${describe(v)}`)
  }
  return v
}

/** An optional callback option, like `onMissed`. */
export function optionalFn<F>(what: string, v: F | undefined): F | undefined {
  return v === undefined ? v : fn(what, v)
}

/**
 * The options object `v` given to `where` (`{}` for undefined or null); an
 * InvalidError for anything but an object, or for a property that is not one
 * of `known`: a misspelled option (`maxhold`) would otherwise be dropped
 * without a word, and its default used.
 */
export function options<T extends object>(where: string, v: T | null | undefined, known: readonly string[], example: string): T {
  if (v === undefined || v === null) return {} as T
  if (typeof v !== 'object' || Array.isArray(v)) {
    throw new InvalidError(`the options of ${where} are an object, like ${example}; got ${describe(v)}`)
  }
  // for..in: an option the object inherits is read like its own.
  for (const k in v) {
    if (!known.includes(k)) {
      const near = known.find((n) => editDistance(n.toLowerCase(), k.toLowerCase()) <= 2)
      throw new InvalidError(
        `${where} has no option ${JSON.stringify(k)}${near ? ` (did you mean ${near}?)` : ''}: its options are ${known.join(', ')}`,
      )
    }
  }
  return v
}

/** Levenshtein distance, for a misspelled option's suggestion. */
function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const next = [i]
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1))
    }
    row = next
  }
  return row[b.length]
}
