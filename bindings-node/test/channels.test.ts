import assert from 'node:assert/strict'
import { describe, it } from 'node:test'

import { InvalidError, LimitError, type Message, type Missed } from 'tinystore'

import { blockLoop, CHAN_MODES, gate, makeStore, sleep, suiteStores, until } from './helpers'

interface Ev {
  n: number
  task?: number
}

for (const mode of CHAN_MODES) {
  describe(`channels (${mode})`, () => {
    const store = suiteStores(mode)

    it('CHAN-01 every message after subscribe arrives in publish order, also with many publishes in flight', async () => {
      const s = await store()
      const ch = s.channel<Ev>('orders')
      const got: Ev[] = []
      const sub = await ch.under('a').subscribe((m) => {
        got.push(m.value)
      })
      // Four tasks, each publishing 250 messages without awaiting each one.
      const tasks = [0, 1, 2, 3].map(async (task) => {
        const pending: Promise<void>[] = []
        for (let n = 0; n < 250; n++) {
          pending.push(ch.under('a').publish({ task, n }))
          if (n % 50 === 0) await sleep(0)
        }
        await Promise.all(pending)
      })
      await Promise.all(tasks)
      await until(() => got.length === 1000, 5000, '1000 messages')
      for (const task of [0, 1, 2, 3]) {
        const mine = got.filter((e) => e.task === task).map((e) => e.n)
        assert.deepEqual(mine, [...Array(250).keys()], `task ${task} keeps its own order`)
      }
      await sub.stop()
    })

    it('CHAN-01 the handler gets one message at a time: an async handler is awaited before the next', async () => {
      const s = await store()
      const ch = s.channel<Ev>('one-at-a-time')
      let inside = 0
      let most = 0
      const seqs: number[] = []
      const sub = await ch.subscribe(async (m) => {
        inside++
        most = Math.max(most, inside)
        await sleep(1)
        seqs.push(m.seq)
        inside--
      })
      for (let n = 0; n < 20; n++) await ch.publish({ n })
      await until(() => seqs.length === 20)
      assert.equal(most, 1)
      assert.deepEqual(seqs, [...Array(20).keys()].map((i) => i + 1))
      await sub.stop()
    })

    it('CHAN-02 a blocked subscriber is told exactly how many it missed, then gets the next message and lives on', async () => {
      const s = await store()
      const ch = s.channel<Ev>('lag')
      const N = 37
      const first = gate()
      const release = gate()
      const log: Array<Message<Ev> | Missed> = []
      const sub = await ch.under(7).subscribe(
        async (m) => {
          log.push(m)
          if (m.value.n === 0) {
            first.open()
            await release.promise
          }
        },
        { onMissed: (missed) => void log.push(missed) },
      )
      await ch.under(7).publish({ n: 0 })
      await first.promise
      // The handler is stuck; publishing never waits for it.
      const started = Date.now()
      let behind = 0
      for (let n = 1; n <= 1024 + N; n++) {
        if (n === 1024) behind = Date.now() // from here the subscriber's queue is full
        await ch.under(7).publish({ n })
      }
      if (mode === 'cluster') {
        // A publish waits for the stream's replicas (docs/cluster.md, "Publish
        // latency"): no bound of one machine, but no slower once it is behind.
        const keepingUp = (behind - started) / 1023
        const fallingBehind = (Date.now() - behind) / (N + 1)
        assert.ok(fallingBehind < 2 * keepingUp + 2, `${fallingBehind} ms a publish behind, ${keepingUp} before`)
      } else {
        assert.ok(Date.now() - started < 2000, 'publishing did not wait for the stuck subscriber')
      }
      release.open()
      const last = 1024 + N
      await until(() => (log.at(-1) as Message<Ev> | undefined)?.value?.n === last, 5000, 'the last message')
      const misses = log.filter((e): e is Missed => 'reason' in e)
      assert.equal(misses.length, 1, 'exactly one onMissed')
      const at = log.indexOf(misses[0]!)
      const next = log[at + 1] as Message<Ev>
      // Exact: every message is either delivered or counted, none twice.
      const delivered = log.filter((e): e is Message<Ev> => 'value' in e).map((m) => m.value.n)
      assert.equal(misses[0]!.reason, 'behind')
      assert.equal(delivered.length + misses[0]!.count!, last + 1)
      assert.deepEqual(delivered.slice(at), [...Array(last + 1 - next.value.n).keys()].map((i) => i + next.value.n), 'then every message from the oldest still in the log')
      assert.deepEqual(next.missed, misses[0])
      // Owned only: on a cluster store one run in two was told 36, not 37
      // (one more message kept than the queue's 1,024; still counted exactly).
      if (mode === 'owned') {
        assert.deepEqual(log[1], { count: N, reason: 'behind' })
        assert.equal(next.value.n, N + 1)
      }
      await ch.under(7).publish({ n: -1 })
      await until(() => (log.at(-1) as Message<Ev>).value.n === -1, 5000, 'a message after the lag')
      await sub.stop()
    })

    it('CHAN-05 no handler call starts after stop() returned, with publishing going on', async () => {
      const s = await store()
      const ch = s.channel<Ev>('stop-means-stop')
      let stopped = false
      let lateCalls = 0
      let calls = 0
      const sub = await ch.subscribe(() => {
        calls++
        if (stopped) lateCalls++
      })
      let publishing = true
      const publisher = (async () => {
        let n = 0
        while (publishing) {
          await ch.publish({ n: n++ })
          if (n % 20 === 0) await sleep(0)
        }
      })()
      await until(() => calls > 100, 5000, 'some deliveries')
      await sub.stop()
      stopped = true
      await sleep(100)
      publishing = false
      await publisher
      await sleep(20)
      assert.equal(lateCalls, 0)
    })

    it('CHAN-05 stop() from inside the handler, twice, and after the store closed, without error', async () => {
      const s = await store()
      const ch = s.channel<Ev>('stop-inside')
      const seen: number[] = []
      const sub = await ch.subscribe(async (m) => {
        seen.push(m.value.n)
        await sub.stop()
        await sub.stop()
      })
      await ch.publish({ n: 1 })
      await ch.publish({ n: 2 })
      await sub.ended
      await sleep(20)
      assert.deepEqual(seen, [1])
      const other = await ch.subscribe(() => {})
      await s.close()
      await other.ended
      await other.stop()
      await other.stop()
    })

    it('CHAN-05 closing the store stops its subscriptions and iterators', async () => {
      const s = await makeStore(mode)
      const ch = s.channel<Ev>('closing')
      const sub = await ch.subscribe(() => {})
      const it = await ch.messages().ready()
      await s.close()
      await sub.ended
      assert.deepEqual(await it.next(), { done: true, value: undefined })
    })

    it('CHAN-06 a branch never receives another branch\'s messages; 7, 7n and "7" are one branch', async () => {
      const s = await store()
      const ch = s.channel<Ev>('branches')
      const seven: Message<Ev>[] = []
      const eight: Message<Ev>[] = []
      const a = await ch.under(7).subscribe((m) => void seven.push(m))
      const b = await ch.under('8').subscribe((m) => void eight.push(m))
      await ch.under('7').publish({ n: 1 })
      await ch.under(7n).publish({ n: 2 })
      await ch.under(8).publish({ n: 3 })
      await ch.under('07').publish({ n: 4 })
      await ch.under(7).under('x').publish({ n: 5 })
      await until(() => seven.length === 2 && eight.length === 1)
      await sleep(20)
      assert.deepEqual(seven.map((m) => m.value.n), [1, 2])
      assert.deepEqual(seven[0]!.branch, ['7'])
      assert.deepEqual(eight.map((m) => m.value.n), [3])
      await a.stop()
      await b.stop()
    })

    it('CHAN-06 a recursive subscription gets the branch and every branch below it', async () => {
      const s = await store()
      const ch = s.channel<Ev>('tree')
      const got: Message<Ev>[] = []
      const sub = await ch.under('chat').subscribe((m) => void got.push(m), { recursive: true })
      await ch.under('chat').publish({ n: 1 })
      await ch.under('chat').under(7).publish({ n: 2 })
      await ch.under('other').publish({ n: 3 })
      await until(() => got.length === 2)
      await sleep(20)
      assert.deepEqual(got.map((m) => [m.value.n, m.branch]), [[1, ['chat']], [2, ['chat', '7']]])
      await sub.stop()
    })

    it('CHAN-06 messages of several branches read in one batch each keep their branch, seq and value, in each branch\'s publish order', async () => {
      const s = await store()
      const ch = s.channel<Ev>('batched')
      const got: Message<Ev>[] = []
      const first = gate()
      const sub = await ch.under('r').subscribe(
        async (m) => {
          got.push(m)
          if (got.length === 1) await first.promise // the rest queue up meanwhile
        },
        { recursive: true },
      )
      const branches = [ch.under('r'), ch.under('r').under(1), ch.under('r').under('x').under(2)]
      await branches[0]!.publish({ n: 0 })
      await until(() => got.length === 1)
      const pending: Promise<void>[] = []
      for (let n = 1; n <= 60; n++) pending.push(branches[n % 3]!.publish({ n }))
      await Promise.all(pending)
      first.open()
      await until(() => got.length === 61, 5000, '61 messages')
      const want = [['r'], ['r', '1'], ['r', 'x', '2']]
      for (const k of [0, 1, 2]) {
        // Publish order within each branch (CHAN-01), the branch it went to,
        // and that branch's sequence, one more each.
        const mine = got.filter((m) => m.value.n % 3 === k)
        assert.deepEqual(mine.map((m) => m.value.n), [...Array(61).keys()].filter((n) => n % 3 === k))
        mine.forEach((m, i) => {
          assert.deepEqual(m.branch, want[k], `message ${m.value.n}'s branch`)
          if (i > 0) assert.equal(m.seq, mine[i - 1]!.seq + 1, `message ${m.value.n}'s seq`)
        })
      }
      // Each message has its own branch array: changing one changes no other.
      const roots = got.filter((m) => m.value.n % 3 === 0)
      roots[1]!.branch.push('changed')
      assert.deepEqual(roots[2]!.branch, ['r'])
      await sub.stop()
    })

    it('CHAN-07 a message over 1 MiB, or nested deeper than JSON.stringify goes, is refused on that call only; exactly 1 MiB is accepted', async () => {
      const s = await store()
      const ch = s.channel<string>('sizes')
      const got: number[] = []
      const sub = await ch.subscribe((m) => void got.push(m.value.length))
      const MiB = 1 << 20
      await assert.rejects(ch.publish('x'.repeat(MiB - 1)), (e: unknown) => {
        assert.ok(e instanceof LimitError)
        assert.equal(e.code, 'limit')
        assert.match(e.message, /1 MiB/)
        return true
      })
      // Deeper than JavaScript's encoder can go: the nesting limit, not a stack overflow.
      let deep: unknown = 1
      for (let i = 0; i < 200_000; i++) deep = [deep]
      await assert.rejects(s.channel<unknown>('sizes').publish(deep), (e: unknown) => e instanceof LimitError && /100 deep/.test(e.message))
      await ch.publish('x'.repeat(MiB - 2)) // its JSON, quotes included, is exactly 1 MiB
      await ch.publish('small')
      await until(() => got.length === 2)
      assert.deepEqual(got, [MiB - 2, 5])
      await sub.stop()
    })

    it('NAMES a channel name out of rule is refused when the handle is made, with an example', async () => {
      const s = await store()
      assert.throws(() => s.channel('Chat Events'), (e: unknown) => e instanceof InvalidError && /chat-events/.test(e.message))
      const ch = s.channel('ok')
      // Keys out of range are refused at under(), before any publish.
      assert.throws(() => ch.under(''), InvalidError)
      assert.throws(() => ch.under(1.5), InvalidError)
      await assert.rejects(ch.publish(undefined), InvalidError)
    })

    it('a value JSON would change (NaN, Infinity, a Map, a Set, a lone surrogate, bytes) is an InvalidError, not published changed', async () => {
      const s = await store()
      const ch = s.channel<unknown>('lossy')
      const got: unknown[] = []
      const sub = await ch.under(1).subscribe((m) => { got.push(m.value) })
      const bytes = [Buffer.from([0, 255]), new Uint8Array([1]), { b: new Float64Array([0.5]) }, new ArrayBuffer(2)]
      for (const bad of [NaN, { x: Infinity }, [1, -Infinity], new Map([[1, 2]]), { s: new Set([1]) }, 'a\ud800b', { ['k']: '\udc00' }, ...bytes]) {
        await assert.rejects(ch.under(1).publish(bad), (e: unknown) => e instanceof InvalidError && /JSON/.test(e.message), String(bad))
      }
      // What JSON carries as it is still goes, nulls and {} included.
      for (const good of [null, { a: null }, {}, [], 'a\ud83d\ude00b', 1.5, { d: new Date(0) }]) await ch.under(1).publish(good)
      await until(() => got.length === 7)
      assert.deepEqual(got, [null, { a: null }, {}, [], 'a\ud83d\ude00b', 1.5, { d: '1970-01-01T00:00:00.000Z' }])
      await sub.stop()
    })

    it('for await reads the messages of a branch in order, and break stops the subscription', async () => {
      const s = await store()
      const ch = s.channel<Ev>('iterate')
      const branch = ch.under(3)
      const it = await branch.messages().ready()
      for (let n = 0; n < 5; n++) await branch.publish({ n })
      const seen: number[] = []
      for await (const m of it) {
        seen.push(m.value.n)
        if (seen.length === 5) break
      }
      assert.deepEqual(seen, [0, 1, 2, 3, 4])
      assert.deepEqual(await it.next(), { done: true, value: undefined })
      // The plain form subscribes at the first next().
      const later = (async () => {
        for await (const m of branch) return m.value.n
        return -1
      })()
      await sleep(50)
      await branch.publish({ n: 9 })
      assert.equal(await later, 9)
    })

    it('a handler that throws goes to onError and the subscription goes on', async () => {
      const s = await store()
      const ch = s.channel<Ev>('throwing')
      const errors: unknown[] = []
      const seen: number[] = []
      const sub = await ch.subscribe(
        async (m) => {
          seen.push(m.value.n)
          if (m.value.n === 1) throw new Error('sync-ish failure')
          if (m.value.n === 2) await Promise.reject(new Error('async failure'))
        },
        { onError: (e) => void errors.push(e) },
      )
      for (let n = 1; n <= 3; n++) await ch.publish({ n })
      await until(() => seen.length === 3)
      await sleep(10)
      assert.deepEqual(errors.map((e) => (e as Error).message), ['sync-ish failure', 'async failure'])
      await sub.stop()
    })

    it('a handler that blocks the event loop delays only itself: messages stay in order', async () => {
      const s = await store()
      const ch = s.channel<Ev>('blocking')
      const seen: number[] = []
      const sub = await ch.subscribe((m) => {
        if (m.value.n === 0) blockLoop(200)
        seen.push(m.value.n)
      })
      for (let n = 0; n < 10; n++) await ch.publish({ n })
      await until(() => seen.length === 10)
      assert.deepEqual(seen, [...Array(10).keys()])
      await sub.stop()
    })
  })
}
