// store.status(): what the store holds now, and a ClosedError (never the
// last figures it had) once the store is closed.
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { ClosedError } from 'tinystore'

import { makeStore, MODES, suiteStores } from './helpers'

for (const mode of MODES) {
  describe(`status (${mode})`, () => {
    const store = suiteStores(mode)

    it('STORE-01 status() shows the owner, its subscriptions and held keys with their fences', async () => {
      const s = await store()
      const sub = await s.channel('watched').under(7).subscribe(() => {})
      await s.channel('watched').under(7).publish({ n: 1 })
      await s.lock('jobs').hold('k', async (lease) => {
        const st = await s.status()
        assert.equal(st.pid, process.pid, 'the owner is this test process in both modes')
        assert.equal(st.epoch, s.epoch)
        assert.equal(typeof st.uptimeMs, 'number')
        assert.ok(st.subscriptions >= 1)
        const branch = st.branches.find((b) => b.channel === 'watched')
        assert.ok(branch, 'the subscribed branch is listed')
        assert.deepEqual(branch.branch, ['7'])
        assert.equal(branch.subscribers, 1)
        assert.equal(branch.published, 1)
        const key = st.locks.find((k) => k.lock === 'jobs' && k.key === 'k')
        assert.ok(key, 'the held key is listed')
        assert.equal(key.holders.length, 1)
        assert.equal(key.holders[0]!.fence, lease.fence, 'the fence, every digit, as a bigint')
        assert.equal(typeof key.holders[0]!.holder, 'bigint')
        assert.equal(key.waiters, 0)
        assert.equal(Array.isArray(st.connections), true)
        if (mode === 'connected') assert.ok(st.connections.length >= 1, 'the connected store is one of the connections')
      })
      await sub.stop()
    })

    it('STORE-01 status() after close() rejects with a ClosedError, not the figures from before', async () => {
      const s = await makeStore(mode)
      await s.channel('gone').subscribe(() => {})
      await s.status()
      await s.close()
      await assert.rejects(s.status(), (e: unknown) => {
        assert.ok(e instanceof ClosedError, `a ClosedError, got ${(e as Error)?.constructor?.name}: ${(e as Error)?.message}`)
        assert.equal(e.code, 'closed')
        assert.match(e.message, /closed/)
        assert.match(e.message, /open|connect/, 'says what to do')
        return true
      })
    })
  })
}
