import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { ConflictError, InvalidError, LostError, TimeoutError } from 'tinystore'

import { blockLoop, gate, LOCK_MODES, makeStore, sleep, suiteStores } from './helpers'

// On a cluster store too (etcd://, docs/cluster.md), but for LOCK-07: no
// process owns a cluster store, so every lease has a ttl.
for (const mode of LOCK_MODES) {
  const oneMachine = mode === 'cluster' ? it.skip : it
  describe(`locks (${mode})`, () => {
    const store = suiteStores(mode)

    it('LOCK-01 many concurrent holders: at most one valid lease of a key at any moment', async () => {
      const s = await store()
      const lock = s.lock('exclusive', { ttl: '2s' })
      let inside = 0
      let most = 0
      let count = 0
      const fences: bigint[] = []
      await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          lock.hold('k', async (lease) => {
            inside++
            most = Math.max(most, inside)
            fences.push(lease.fence)
            await sleep(i % 3)
            count++
            inside--
          }),
        ),
      )
      assert.equal(most, 1)
      assert.equal(count, 50)
      for (let i = 1; i < fences.length; i++) assert.ok(fences[i]! > fences[i - 1]!, 'fences grow in grant order')
    })

    it('LOCK-01 LOCK-08 a semaphore key has at most `limit` permits, and the limit belongs to the semaphore', async () => {
      const s = await store()
      const sem = s.semaphore('exports', { limit: 3, ttl: '2s' })
      let inside = 0
      let most = 0
      await Promise.all(
        Array.from({ length: 20 }, () =>
          sem.hold('k', async (permit) => {
            assert.equal('fence' in permit, false, 'a permit has no fence')
            inside++
            most = Math.max(most, inside)
            // Long enough that `limit` are held at once, also with etcd's round trips.
            await sleep(mode === 'cluster' ? 50 : 2)
            inside--
          }),
        ),
      )
      assert.equal(most, 3)
      // Refused when the handle is made, or (over a connection) at its first use.
      await assert.rejects(async () => s.semaphore('exports', { limit: 4 }).hold('k', () => 0), ConflictError)
      await assert.rejects(async () => s.lock('exports').hold('k', () => 0), ConflictError)
      await assert.rejects(async () => s.semaphore('none', { limit: 0 }).hold('k', () => 0), InvalidError)
      for (const limit of [-1, 1.5, 2 ** 32 + 1]) {
        assert.throws(() => s.semaphore('bad', { limit }), InvalidError, `limit ${limit} is refused, never wrapped`)
      }
      assert.throws(() => (s as unknown as { semaphore(n: string): unknown }).semaphore('bad'), InvalidError)
    })

    it('LOCK-02 every lease\'s fence is larger than every fence given before, within one open', async () => {
      const s = await store()
      const a = s.lock('a')
      const b = s.lock('b')
      const fences: bigint[] = []
      for (let i = 0; i < 10; i++) {
        fences.push(await a.hold(i, (l) => l.fence))
        fences.push(await b.hold(i % 2, (l) => l.fence))
      }
      for (let i = 1; i < fences.length; i++) assert.ok(fences[i]! > fences[i - 1]!)
      assert.equal(typeof fences[0], 'bigint')
      assert.equal(fences[0]! >> 64n, s.epoch, 'the high 64 bits are the store epoch')
    })

    it('LOCK-03 hold waits up to wait, then fails with a timeout without running the function', async () => {
      const s = await store()
      const lock = s.lock('waiting', { wait: '150ms' })
      const holding = gate()
      const done = gate()
      const holder = lock.hold('k', async () => {
        holding.open()
        await done.promise
      })
      await holding.promise
      let ran = false
      const started = Date.now()
      await assert.rejects(
        lock.hold('k', () => {
          ran = true
        }),
        TimeoutError,
      )
      assert.ok(Date.now() - started >= 140)
      await assert.rejects(lock.hold('k', () => (ran = true), { wait: 50 }), TimeoutError)
      assert.equal(ran, false)
      const tried = await lock.tryHold('k', () => (ran = true))
      assert.deepEqual(tried, { acquired: false })
      assert.equal(ran, false)
      done.open()
      await holder
      assert.deepEqual(await lock.tryHold('k', () => 'ran'), { acquired: true, value: 'ran' })
    })

    it('LOCK-03 waiters get the key in the order they asked', async () => {
      const s = await store()
      const lock = s.lock('fifo')
      const order: number[] = []
      const first = gate()
      const holding = gate()
      const h = lock.hold('k', async () => {
        holding.open()
        await first.promise
      })
      await holding.promise
      const waiters: Promise<void>[] = []
      for (const i of [1, 2, 3, 4]) {
        waiters.push(lock.hold('k', () => void order.push(i)))
        // The next asks once this one is in line: on a cluster the line is
        // etcd's commit order, which a fixed pause does not fix on a slow host.
        const deadline = Date.now() + 5000
        const inLine = async () => (await s.status()).locks.find((k) => k.lock === 'fifo' && k.key === 'k')?.waiters ?? 0
        while ((await inLine()) < i) {
          if (Date.now() > deadline) throw new Error(`waiter ${i} was not in line within 5 s`)
          await sleep(5)
        }
      }
      first.open()
      await Promise.all([h, ...waiters])
      assert.deepEqual(order, [1, 2, 3, 4])
    })

    it('LOCK-04 the key is let go when the function throws, and its error reaches the caller unchanged', async () => {
      const s = await store()
      const lock = s.lock('release')
      const mine = new Error('mine')
      await assert.rejects(
        lock.hold('k', async () => {
          throw mine
        }),
        (e) => e === mine,
      )
      await assert.rejects(
        lock.hold('k', () => {
          throw mine
        }),
        (e) => e === mine,
      )
      assert.deepEqual(await lock.tryHold('k', () => 1), { acquired: true, value: 1 })
    })

    it('LOCK-04 a lease lost while a function that never yields ran is reported lost when it ends', async () => {
      const s = await store()
      const lock = s.lock('never-yields', { maxHold: '100ms' })
      await assert.rejects(
        lock.hold('k', () => {
          blockLoop(300)
          return 'done'
        }),
        (e: unknown) => e instanceof LostError && /maxHold/.test(e.message),
      )
      // The function's own error wins over the lost lease.
      const mine = new Error('mine')
      await assert.rejects(
        lock.hold('k', () => {
          blockLoop(300)
          throw mine
        }),
        (e) => e === mine,
      )
    })

    it('LOCK-06 no lease outlasts maxHold: the signal fires with a LostError and the key goes to the next', async () => {
      const s = await store()
      const lock = s.lock('max-hold', { maxHold: 200 })
      const other = s.lock('max-hold')
      const lost = gate<bigint>()
      const finish = gate()
      let aborted: unknown
      const started = Date.now()
      const a = lock.hold('k', async (lease) => {
        await new Promise((resolve) => lease.signal.addEventListener('abort', resolve))
        aborted = lease.signal.reason
        assert.equal(lease.lost, true)
        lost.open(lease.fence)
        await finish.promise
      })
      const fenceA = await lost.promise
      assert.ok(Date.now() - started >= 190)
      const fenceB = await other.hold('k', (l) => l.fence, { wait: '1s' })
      assert.ok(fenceB > fenceA, 'the key went to the next holder')
      finish.open()
      await assert.rejects(a, LostError)
      assert.ok(aborted instanceof LostError)
    })

    oneMachine('LOCK-07 a lease of the owning process outlives its ttl while the function blocks the event loop', async () => {
      const s = await store()
      const lock = s.lock('busy-host', { ttl: '1s' })
      const probeGo = gate()
      // Started outside the hold: another holder.
      const probe = (async () => {
        await probeGo.promise
        return lock.tryHold('k', () => 'stolen')
      })()
      const value = await lock.hold('k', async (lease) => {
        blockLoop(1500) // past the ttl, the event loop frozen
        await sleep(50)
        assert.equal(lease.signal.aborted, false)
        assert.equal(lease.lost, false)
        probeGo.open()
        assert.deepEqual(await probe, { acquired: false }, 'nobody else got the key')
        return lease.fence
      })
      assert.equal(typeof value, 'bigint')
    })

    it('LOCK-08 a hold inside a hold of the same key fails at once; tryHold of it is not acquired', async () => {
      const s = await store()
      const lock = s.lock('reentry', { wait: '5s' })
      await lock.hold('k', async () => {
        const started = Date.now()
        await assert.rejects(lock.hold('k', () => 'inner'), ConflictError)
        assert.ok(Date.now() - started < 1000, 'at once, not after the wait')
        assert.deepEqual(await lock.tryHold('k', () => 'inner'), { acquired: false })
        // Another key is fine.
        assert.equal(await lock.hold('other', () => 'inner'), 'inner')
      })
    })

    it('NAMES a ttl out of range or a bad name is refused when the handle is made', async () => {
      const s = await store()
      assert.throws(() => s.lock('summaries', { ttl: '500ms' }), (e: unknown) => e instanceof InvalidError && /30s/.test(e.message))
      assert.throws(() => s.lock('summaries', { ttl: '2h' }), InvalidError)
      assert.throws(() => s.lock('summaries', { ttl: 'soon' }), InvalidError)
      assert.throws(() => s.lock('summaries', { wait: 0 }), InvalidError)
      assert.throws(() => s.lock('summaries', { maxHold: -5 }), InvalidError)
      assert.throws(() => s.lock('Summaries'), InvalidError)
      const lock = s.lock('summaries', { ttl: 1000 })
      await assert.rejects(lock.hold('x'.repeat(1025), () => 1), InvalidError)
      await assert.rejects(lock.hold('k', () => 1, { wait: 0 }), InvalidError)
    })

    it('closing the store loses held leases (their signals fire) and fails waiters', async () => {
      const s = await makeStore(mode)
      const lock = s.lock('closing')
      const holding = gate()
      const held = lock.hold('k', async (lease) => {
        holding.open()
        await new Promise((resolve) => lease.signal.addEventListener('abort', resolve))
      })
      await holding.promise
      const waiter = assert.rejects(
        lock.hold('k', () => 'never'),
        (e: unknown) => (e as { code?: string }).code === 'closed',
      )
      const lost = assert.rejects(held, LostError)
      await sleep(20)
      await s.close()
      await lost
      await waiter
    })
  })
}
