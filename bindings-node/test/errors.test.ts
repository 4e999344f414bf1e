// Values of the wrong type or range, caught before or at the native layer:
// every one is an InvalidError (a TinyStoreError) whose message says what
// was wrong and shows what to pass instead, never napi's own conversion
// error (`StringExpected`, `InvalidArg`) or a TypeError.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { connect, InvalidError, open, TinyStoreError } from 'tinystore'

import { MODES, suiteStores, tempDir } from './helpers'

/** Calls that bypass the types, as plain JavaScript callers can. */
type Loose = any

/** Asserts `f` throws or rejects with an InvalidError whose message matches every pattern. */
async function invalid(what: string, f: () => unknown, ...patterns: RegExp[]): Promise<void> {
  await assert.rejects(
    async () => f(),
    (e: unknown) => {
      assert.ok(e instanceof InvalidError, `${what}: an InvalidError, got ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`)
      assert.ok(e instanceof TinyStoreError)
      assert.equal(e.code, 'invalid')
      assert.doesNotMatch(e.message, /^tinystore:|Failed to convert|none of these types|rust type/, `${what}: no napi wording`)
      for (const p of patterns) assert.match(e.message, p, what)
      return true
    },
  )
}

/** The calls that throw at once (not a promise) must do so synchronously, as before. */
function invalidNow(what: string, f: () => unknown, ...patterns: RegExp[]): void {
  assert.throws(f, (e: unknown) => {
    assert.ok(e instanceof InvalidError, `${what}: an InvalidError, got ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`)
    for (const p of patterns) assert.match(e.message, p, what)
    return true
  })
}

const cycle: Record<string, unknown> = {}
cycle.self = cycle

for (const mode of MODES) {
  describe(`values of the wrong type (${mode})`, () => {
    const store = suiteStores(mode)

    it('NAMES a channel, lock, semaphore or database name that is not a string is an InvalidError naming what was given', async () => {
      const s: Loose = await store()
      invalidNow('channel(42)', () => s.channel(42), /channel name is text/, /like 'chat-events'/, /got the number 42/)
      invalidNow('channel()', () => s.channel(), /channel name/, /got undefined/)
      invalidNow('lock({})', () => s.lock({}), /lock name is text/, /got an object/)
      invalidNow('semaphore(7)', () => s.semaphore(7, { limit: 2 }), /semaphore name is text/, /got the number 7/)
      await invalid('database(5)', () => s.database(5), /database name is text/, /got the number 5/)
      await invalid('database migrations 5', () => s.database('db', { migrations: 5 }), /migrations is the path of a folder/, /got the number 5/)
    })

    it('NAMES a key of the wrong type is an InvalidError with an example, for branches and holds', async () => {
      const s: Loose = await store()
      const ch = s.channel('keys')
      invalidNow('under({})', () => ch.under({}), /a key is a string or an integer, like 42 or 'chat-42'/, /got an object/)
      invalidNow('under(null)', () => ch.under(null), /got null/)
      invalidNow('under([1])', () => ch.under([1]), /got an array/)
      invalidNow('under(true)', () => ch.under(true), /got the boolean true/)
      const lock = s.lock('keys')
      await invalid('hold({})', () => lock.hold({}, () => 1), /a key is a string or an integer/, /got an object/)
      await invalid('hold(undefined)', () => lock.hold(undefined, () => 1), /got undefined/)
      await invalid('tryHold([])', () => lock.tryHold([], () => 1), /got an array/)
      const sem = s.semaphore('keys-sem', { limit: 2 })
      await invalid('semaphore hold(Symbol)', () => sem.hold(Symbol('k'), () => 1), /got a symbol/)
    })

    it('NAMES an option a call does not take (misspelled) is an InvalidError naming it and the options there are, not a default used', async () => {
      const s: Loose = await store()
      invalidNow('lock maxhold', () => s.lock('opts', { ttl: '30s', maxhold: '1m' }), /store.lock has no option "maxhold" \(did you mean maxHold\?\)/, /its options are ttl, maxHold, wait/)
      // One the object inherits is read like its own, so it is checked too.
      invalidNow('lock inherited maxhold', () => s.lock('opts', Object.create({ maxhold: '1m' })), /store.lock has no option "maxhold"/)
      invalidNow('lock 5', () => s.lock('opts', 5), /the options of store.lock are an object/, /got the number 5/)
      invalidNow('semaphore limt', () => s.semaphore('opts-sem', { limt: 2 }), /has no option "limt" \(did you mean limit\?\)/)
      invalidNow('semaphore wiat', () => s.semaphore('opts-sem', { limit: 2, wiat: '1s' }), /did you mean wait\?/)
      const lock = s.lock('opts')
      await invalid('hold timeout', () => lock.hold('k', () => 1, { timeout: '1s' }), /hold has no option "timeout"/, /its options are wait/)
      const ch = s.channel('opts')
      await invalid('subscribe onmissed', () => ch.under(1).subscribe(() => {}, { onmissed: () => {} }), /subscribe has no option "onmissed" \(did you mean onMissed\?\)/)
      invalidNow('messages recursve', () => ch.messages({ recursve: true }), /messages has no option "recursve" \(did you mean recursive\?\)/)
      await invalid('database migration', () => s.database('opts', { migration: 'm' }), /store.database has no option "migration" \(did you mean migrations\?\)/)
      await invalid('connect requestTimout', () => (connect as Loose)('unix:/nonexistent/tinystore.sock', { requestTimout: '1s' }), /connect has no option "requestTimout" \(did you mean requestTimeout\?\)/)
      await invalid('tryHold options', () => lock.tryHold('k', () => 1, { wait: '1s' }), /tryHold takes no options/)
      await invalid('open options', () => (open as Loose)(tempDir(), { requestTimout: '1s' }), /open takes only the store directory/, /belong to connect/)
      // The held key was never taken: a hold with the right option goes on.
      assert.equal(await lock.hold('k', () => 7, { wait: '1s' }), 7)
    })

    it('NAMES a key out of range is refused at under(), before any publish: fractions, NaN, unsafe integers, empty or long text, a lone surrogate', async () => {
      const s: Loose = await store()
      const ch = s.channel('keys')
      invalidNow('under(1.5)', () => ch.under(1.5), /whole number/, /got the number 1.5/)
      invalidNow('under(NaN)', () => ch.under(NaN), /whole number/)
      invalidNow('under(2**60)', () => ch.under(2 ** 60), /as a bigint or a string/)
      invalidNow("under('')", () => ch.under(''), /1 to 1,024 bytes/, /got 0 bytes/)
      invalidNow('under(long)', () => ch.under('x'.repeat(1025)), /got 1025 bytes/)
      // N-API would read it as U+FFFD: the key of another holder.
      invalidNow('under(lone surrogate)', () => ch.under('a\ud800'), /lone surrogate/)
      const lock = s.lock('keys')
      await invalid('hold(0.5)', () => lock.hold(0.5, () => 1), /whole number/)
      await invalid('hold(lone surrogate)', () => lock.hold('a\udc00', () => 1), /lone surrogate/)
      // In range, all of them still work.
      assert.ok(ch.under(2n ** 60n).under(-7).under('é'.repeat(512)))
    })

    it('NAMES a number that is not finite, or a duration of the wrong type, is an InvalidError', async () => {
      const s: Loose = await store()
      const ch = s.channel('numbers')
      for (const n of [NaN, Infinity, -Infinity]) {
        await invalid(`publish under(${n})`, () => ch.under(n).publish(1), /a key is a string or an integer/)
        await invalid(`hold(${n})`, () => s.lock('numbers').hold(n, () => 1), /a key is a string or an integer/)
        invalidNow(`ttl ${n}`, () => s.lock('n', { ttl: n }), /ttl is a duration/)
        await invalid(`wait ${n}`, () => s.lock('numbers').hold(1, () => 1, { wait: n }), /wait is a duration/)
        invalidNow(`limit ${n}`, () => s.semaphore('n-sem', { limit: n }), /limit is a whole number/)
      }
      invalidNow('ttl {}', () => s.lock('n', { ttl: {} }), /ttl is a duration: text like '30s' or a number of milliseconds/, /got an object/)
      invalidNow('maxHold true', () => s.lock('n', { maxHold: true }), /maxHold is a duration/, /got the boolean true/)
      invalidNow('wait []', () => s.semaphore('n-sem', { limit: 1, wait: [] }), /wait is a duration/, /got an array/)
      await invalid('hold wait {}', () => s.lock('numbers').hold(1, () => 1, { wait: {} }), /wait is a duration/)
      invalidNow('limit "3"', () => s.semaphore('n-sem', { limit: '3' }), /limit/, /{ limit: 3 }/)
    })

    it('CHAN-07 a message JSON cannot carry (a bigint inside, a cycle) is an InvalidError saying what to change', async () => {
      const s: Loose = await store()
      const ch = s.channel('json')
      await invalid('bigint', () => ch.publish({ id: 1n }), /JSON/, /bigint/i, /string/)
      await invalid('cycle', () => ch.under(1).publish(cycle), /JSON/, /circular|cycle/i)
      await invalid('function', () => ch.publish(() => 1), /JSON/, /got a function/)
      await invalid('toJSON throwing a non-Error', () => ch.publish({ toJSON: () => { throw 'nope' } }), /JSON/, /nope/)
      const db = await s.database('json')
      await invalid('tx bigint', () => db.tx((tx: Loose) => tx.with(ch).under(1).publish({ id: 2n })), /JSON/, /bigint/i)
      await invalid('tx key', () => db.tx((tx: Loose) => tx.with(ch).under({}).publish(1)), /a key is a string or an integer/)
    })

    it('a handler, hold function or SQL statement of the wrong type is an InvalidError, and nothing is held', async () => {
      const s: Loose = await store()
      await invalid('subscribe(42)', () => s.channel('fn').subscribe(42), /handler is a function/, /got the number 42/)
      await invalid('onMissed', () => s.channel('fn').subscribe(() => {}, { onMissed: 'x' }), /onMissed is a function/)
      const lock = s.lock('fn')
      await invalid('hold(k, 5)', () => lock.hold('k', 5), /the work given to hold is a function, like async \(lease\) =>/, /got the number 5/)
      await invalid('tryHold(k)', () => lock.tryHold('k'), /got undefined/)
      // The key was never taken: a hold with a short wait gets it at once.
      assert.equal(await lock.hold('k', () => 'free', { wait: 100 }), 'free')
      const db = await s.database('fn')
      await invalid('exec(5)', () => db.exec(5), /statement is text or a tagged template/, /got the number 5/)
      await invalid('query({})', () => db.query({}), /statement is text/, /got an object/)
      await invalid('tx(5)', () => db.tx(5), /the work given to db.tx is a function/, /got the number 5/)
    })

    it('a SQL parameter of the wrong type or a number that is not finite is an InvalidError; nothing is bound in its place', async () => {
      const s: Loose = await store()
      const db = await s.database('params')
      await db.exec('create table t (x)')
      for (const [p, got] of [
        [{}, /got an object/],
        [Symbol('s'), /got a symbol/],
        [() => 1, /got a function/],
        [[1], /got an array/],
      ] as const) {
        await invalid(`param ${String(got)}`, () => db.exec('insert into t values (?)', p), /SQL parameter is null, a boolean, a number, a bigint, text or bytes/, got)
      }
      for (const n of [NaN, Infinity, -Infinity]) {
        await invalid(`param ${n}`, () => db.exec('insert into t values (?)', n), /SQL parameter is a finite number/, new RegExp(`got ${n}`))
        await invalid(`query param ${n}`, () => db.query('select ? as v', n), /finite/)
      }
      await invalid('tx param NaN', () => db.tx((tx: Loose) => tx.exec('insert into t values (?)', NaN)), /finite/)
      assert.deepEqual(await db.query('select count(*) as n from t'), [{ n: 0 }], 'no row was written with a null instead')
    })
  })
}

describe('values of the wrong type (open and connect)', () => {
  it('NAMES open() and connect() with a value that is not a string are InvalidErrors', async () => {
    const loose = { open, connect } as Loose
    await invalid('open(5)', () => loose.open(5), /store directory is text, like 'data'/, /got the number 5/)
    await invalid('open()', () => loose.open(), /got undefined/)
    await invalid('connect({})', () => loose.connect({}), /address is text/, /unix:PATH/, /got an object/)
  })

  it('an error napi raises while converting a value is still an InvalidError (the last line of defence)', async () => {
    // The native layer called directly, past the TypeScript layer's checks.
    const { fromNative } = require('../../dist/errors') as { fromNative(e: unknown): unknown }
    const { native } = require('../../dist/native') as { native: Loose }
    const dir = tempDir()
    const s = await native.NativeStore.open(dir)
    try {
      for (const [what, f] of [
        ['string', () => s.checkChannel(42)],
        ['either', () => s.publish('c', [{}], '1')],
      ] as const) {
        let thrown: unknown
        try {
          f()
        } catch (e) {
          thrown = e
        }
        const e = fromNative(thrown)
        assert.ok(e instanceof InvalidError, `${what}: an InvalidError`)
        assert.match(e.message, /a value of the wrong type/, what)
        assert.match(e.message, what === 'string' ? /expected text; got the number 42/ : /expected one of: text, a number, a bigint/, what)
      }
    } finally {
      s.close()
    }
  })
})
