// Closing is a drain (issue 17 part 4): messages the store already took
// reach the closing handle's own subscriptions, within close's bound (2 s),
// then the subscriptions end without an error. Owned and connected,
// callback and iterator forms, published by the closing handle or by another
// handle of the store (connected: the owner; owned: a client over the socket;
// cluster: another connection to the same cluster store).
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { connect, open, type Store } from 'tinystore'

import { CHAN_MODES, CLUSTER_TIMEOUT, clusterAddress, tempDir, type Mode } from './helpers'

const N = 10
const ROUNDS = 5 // a fresh store each round: the loss before the fix was a race
const CLUSTER_ROUNDS = 2 // a cluster round makes new streams: about 0.7 s a round here

/** Runs `f(closing, other)` on fresh stores, ROUNDS times (CLUSTER_ROUNDS on a cluster store). */
async function rounds(mode: Mode, f: (closing: Store, other: Store) => Promise<void>): Promise<void> {
  for (let r = 0; r < (mode === 'cluster' ? CLUSTER_ROUNDS : ROUNDS); r++) {
    if (mode === 'cluster') {
      // Two connections to one cluster store, under a fresh prefix (fresh streams).
      const address = await clusterAddress(tempDir())
      const closing = await connect(address, { requestTimeout: CLUSTER_TIMEOUT })
      const other = await connect(address, { requestTimeout: CLUSTER_TIMEOUT })
      try {
        await f(closing, other)
      } finally {
        await other.close()
        await closing.close()
      }
      continue
    }
    const dir = tempDir()
    const owner = await open(dir)
    const client = await connect(`unix:${join(dir, 'tinystore.sock')}`)
    try {
      if (mode === 'connected') await f(client, owner)
      else await f(owner, client)
    } finally {
      await client.close()
      await owner.close()
    }
  }
}

/** Rejects after `ms` milliseconds with `what`. */
function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let t: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    t = setTimeout(() => reject(new Error(`${what} took over ${ms} ms`)), ms)
  })
  return Promise.race([p, late]).finally(() => clearTimeout(t))
}

for (const mode of CHAN_MODES) {
  describe(`close drains (${mode})`, () => {
    for (const by of ['self', 'other'] as const) {
      it(`CHAN-01 close delivers what the store took to the handle's own callback (published by ${by})`, async () => {
        await rounds(mode, async (store, other) => {
          const got: number[] = []
          const sub = await store.channel<number>('c').under(1).subscribe((m) => {
            got.push(m.value)
          })
          const branch = (by === 'self' ? store : other).channel<number>('c').under(1)
          for (let i = 0; i < N; i++) await branch.publish(i) // the store took it
          await store.close()
          await within(2000, sub.ended, 'the subscription ending') // without an error
          assert.deepEqual(got, [...Array(N).keys()], `${N - got.length} of ${N} messages the store took never reached the callback`)
        })
      })

      it(`CHAN-01 close delivers what the store took to the handle's own iterator (published by ${by})`, async () => {
        await rounds(mode, async (store, other) => {
          const it = await store.channel<number>('c').under(1).messages().ready()
          const branch = (by === 'self' ? store : other).channel<number>('c').under(1)
          for (let i = 0; i < N; i++) await branch.publish(i)
          await store.close()
          const read = async (): Promise<number[]> => {
            const got: number[] = []
            for await (const m of it) if ('value' in m) got.push(m.value) // ends, without an error
            return got
          }
          const got = await within(2000, read(), 'reading to the end')
          assert.deepEqual(got, [...Array(N).keys()], `${N - got.length} of ${N} messages the store took never reached the iterator`)
        })
      })
    }
  })
}
