// The contracts that only a connected store has: CHAN-04 (reconnect) and
// LOCK-05 (expiry of a lease over a connection), through a proxy that can
// cut or stall the connection.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import v8 from 'node:v8'
import vm from 'node:vm'
import { after, describe, it } from 'node:test'

import { connect, LostError, open, type Message, type Missed, type Store, type Subscription } from 'tinystore'

import { blockLoop, gate, sleep, tempDir, until } from './helpers'
import { Proxy } from './proxy'

interface Ev {
  n: number
}

describe('connected through a proxy', () => {
  const opened: Array<{ close(): Promise<void> }> = []
  after(async () => {
    for (const o of opened.reverse()) await o.close()
  })
  async function setup(): Promise<{ owner: Store; client: Store; proxy: Proxy }> {
    const dir = tempDir()
    const owner = await open(dir)
    const proxy = await Proxy.start(dir, join(dir, 'tinystore.sock'))
    const client = await connect(proxy.address)
    opened.push(owner, proxy, client)
    return { owner, client, proxy }
  }

  it('CHAN-04 after a dropped connection the subscription resumes: nothing lost, nothing twice, in order', async () => {
    const { owner, client, proxy } = await setup()
    const got: Message<Ev>[] = []
    const missed: Missed[] = []
    const sub = await client.channel<Ev>('c').under(1).subscribe((m) => void got.push(m), {
      onMissed: (m) => void missed.push(m),
    })
    const pub = owner.channel<Ev>('c').under(1)
    for (let n = 0; n < 5; n++) await pub.publish({ n })
    await until(() => got.length === 5)
    proxy.down()
    for (let n = 5; n < 10; n++) await pub.publish({ n }) // during the outage
    await sleep(100)
    proxy.up()
    // A probe published after the outage arrives.
    const probe = setInterval(() => void pub.publish({ n: -1 }), 100)
    try {
      await until(() => got.some((m) => m.value.n === -1), 10_000, 'the probe after reconnecting')
    } finally {
      clearInterval(probe)
    }
    const seqs = got.map((m) => m.seq)
    for (let i = 1; i < seqs.length; i++) assert.ok(seqs[i]! > seqs[i - 1]!, 'sequence strictly increasing, no duplicates')
    const values = got.map((m) => m.value.n).filter((n) => n >= 0)
    if (missed.length === 0) {
      assert.deepEqual(values, [...Array(10).keys()], 'the log still held them: all five arrive, nothing said')
    } else {
      assert.equal(missed[0]!.reason, 'reconnect', 'never silent: told of a reconnect')
    }
    await sub.stop()
  })

  it('CHAN-04 messages published while the connection was down are told as a reconnect, with the exact count', async () => {
    const { owner, client, proxy } = await setup()
    const log: Array<Message<Ev> | Missed> = []
    const sub = await client.channel<Ev>('c').under(2).subscribe((m) => void log.push(m), {
      onMissed: (m) => void log.push(m),
    })
    const pub = owner.channel<Ev>('c').under(2)
    await pub.publish({ n: 0 })
    await until(() => log.length === 1)
    proxy.down()
    const during = 60
    for (let n = 1; n <= during; n++) await pub.publish({ n })
    await sleep(100)
    proxy.up()
    // Nobody kept the branch's messages meanwhile: the resubscription says so.
    await until(() => log.length >= 2, 10_000, 'word of the outage')
    const missed = log[1] as Missed
    assert.equal(missed.reason, 'reconnect')
    const deliveredDuring = log.filter((e) => 'value' in e && e.value.n > 0).length
    assert.equal(missed.count! + deliveredDuring, during, 'the count is exact')
    await pub.publish({ n: -1 })
    await until(() => log.some((e) => 'value' in e && e.value.n === -1), 5000, 'a message after the outage')
    await sub.stop()
  })

  it('LOCK-05 a lease over a connection outlives its ttl while renewed, even with the event loop blocked', async () => {
    const { owner } = await setup()
    // Straight to the owner's socket: the proxy runs on this (blocked) event loop.
    const direct = await connect(`unix:${join(owner.dir, 'tinystore.sock')}`)
    opened.push(direct)
    const lock = direct.lock('l', { ttl: '1s' })
    const fence = await lock.hold('k', async (lease) => {
      blockLoop(1500) // renewals come from the engine's threads
      await sleep(1000)
      assert.equal(lease.signal.aborted, false)
      const other = await owner.lock('l').tryHold('k', () => 'stolen')
      assert.deepEqual(other, { acquired: false }, 'nobody else got the key')
      return lease.fence
    })
    assert.equal(typeof fence, 'bigint')
  })

  it('LOCK-05 a lease whose renewals stop runs out: its holder is told by the signal, the key goes to the next', async () => {
    const { owner, client, proxy } = await setup()
    const lock = client.lock('l', { ttl: '1s' })
    const lost = gate<bigint>()
    const finish = gate()
    const started = Date.now()
    const held = lock.hold('k', async (lease) => {
      proxy.freeze()
      await new Promise((resolve) => lease.signal.addEventListener('abort', resolve))
      assert.ok(lease.signal.reason instanceof LostError)
      lost.open(lease.fence)
      await finish.promise
    })
    const fenceA = await lost.promise
    const elapsed = Date.now() - started
    assert.ok(elapsed >= 900 && elapsed < 3000, `told within about the ttl (${elapsed} ms)`)
    const fenceB = await owner.lock('l').hold('k', (l) => l.fence, { wait: '3s' })
    assert.ok(fenceB > fenceA, 'the next holder has a larger fence')
    proxy.thaw()
    finish.open()
    await assert.rejects(held, LostError)
  })

  it('LOCK-08 a connected semaphore is declared to the owner once, at its first hold, whatever holds follow', async () => {
    const { client, proxy } = await setup()
    const sem = client.semaphore('exports', { limit: 2 })
    assert.equal(await sem.hold(1, () => 'ran'), 'ran')
    await sem.hold(2, () => undefined)
    await sem.tryHold(3, () => undefined)
    assert.equal(proxy.declares, 1, 'one declare: one round trip for the handle')
  })
})

describe('connected, read on the event loop', () => {
  it('STORE-01 publishes made just before close() resolve as delivered', async () => {
    const dir = tempDir()
    const owner = await open(dir)
    try {
      const got: number[] = []
      const sub = await owner.channel<Ev>('bye').under(1).subscribe((m) => void got.push(m.value.n))
      const client = await connect(`unix:${join(dir, 'tinystore.sock')}`)
      const branch = client.channel<Ev>('bye').under(1)
      await branch.publish({ n: -1 }) // the loop now reads the socket
      const pubs = Array.from({ length: 100 }, (_, n) => branch.publish({ n }))
      await client.close() // before the loop has read a single answer
      const settled = await Promise.allSettled(pubs)
      assert.deepEqual(
        settled.filter((s) => s.status === 'rejected').map((s) => String((s as PromiseRejectedResult).reason)),
        [],
        'every publish sent before close() resolves',
      )
      await until(() => got.length === 101)
      assert.deepEqual(got, [-1, ...Array.from({ length: 100 }, (_, n) => n)])
      await sub.stop()
    } finally {
      await owner.close()
    }
  })

  /** Runs `script` in a node process with `dir`'s owner socket; resolves with its exit code. */
  function child(script: string): Promise<number | null> {
    const c = spawn(process.execPath, ['-e', `const { connect } = require(${JSON.stringify(require.resolve('tinystore'))}); ${script}`], {
      stdio: ['ignore', 'inherit', 'inherit'],
    })
    return new Promise((resolve) => c.on('exit', resolve))
  }

  it('CHAN-01 publishes not awaited before process.exit() still reach a subscriber, in order', async () => {
    const dir = tempDir()
    const owner = await open(dir)
    try {
      const got: number[] = []
      const sub = await owner.channel<Ev>('exit').under(1).subscribe((m) => void got.push(m.value.n))
      const code = await child(`
        ;(async () => {
          const branch = (await connect(${JSON.stringify(`unix:${join(dir, 'tinystore.sock')}`)})).channel('exit').under(1)
          await branch.publish({ n: -1 }) // the loop now reads the socket
          // 1 MiB in all: more than the socket's buffer takes at once.
          const pad = 'x'.repeat(1000)
          for (let n = 0; n < 1000; n++) branch.publish({ n, pad })
          process.exit(0)
        })().catch((e) => { console.error(e); process.exit(2) })`)
      assert.equal(code, 0)
      await until(() => got.length === 1001, 5000, '1001 messages').catch(() => {})
      assert.deepEqual(got, [-1, ...Array.from({ length: 1000 }, (_, n) => n)])
      await sub.stop()
    } finally {
      await owner.close()
    }
  })

  it('CHAN-01 publishes made in a program\'s own exit listeners still reach a subscriber, in order', async () => {
    const dir = tempDir()
    const owner = await open(dir)
    try {
      const got: number[] = []
      const sub = await owner.channel<Ev>('exits').under(1).subscribe((m) => void got.push(m.value.n))
      const code = await child(`
        ;(async () => {
          const branch = (await connect(${JSON.stringify(`unix:${join(dir, 'tinystore.sock')}`)})).channel('exits').under(1)
          await branch.publish({ n: -1 })
          process.on('exit', () => {
            for (let n = 0; n < 100; n++) branch.publish({ n })
          })
          process.exit(0)
        })().catch((e) => { console.error(e); process.exit(2) })`)
      assert.equal(code, 0)
      await until(() => got.length === 101, 5000, '101 messages').catch(() => {})
      assert.deepEqual(got, [-1, ...Array.from({ length: 100 }, (_, n) => n)])
      await sub.stop()
    } finally {
      await owner.close()
    }
  })

  /**
   * A child publishes `count` messages without awaiting them, stays busy for
   * 3 s (its loop never gets back to its socket), then dies with nothing
   * flushed at exit: every message must have left before.
   */
  async function burstThenBusyThenKilled(channel: string, count: number): Promise<void> {
    const dir = tempDir()
    const owner = await open(dir)
    try {
      const got: number[] = []
      const sub = await owner.channel<Ev>(channel).under(1).subscribe((m) => void got.push(m.value.n))
      const code = await child(`
        ;(async () => {
          const branch = (await connect(${JSON.stringify(`unix:${join(dir, 'tinystore.sock')}`)})).channel(${JSON.stringify(channel)}).under(1)
          await branch.publish({ n: -1 })
          for (let n = 0; n < ${count}; n++) branch.publish({ n })
          const end = Date.now() + 3000
          while (Date.now() < end) {}
          process.kill(process.pid, 'SIGKILL')
        })().catch((e) => { console.error(e); process.exit(2) })`)
      assert.equal(code, null, 'killed')
      await until(() => got.length === count + 1, 5000, `${count + 1} messages`).catch(() => {})
      assert.deepEqual(got, [-1, ...Array.from({ length: count }, (_, n) => n)], 'every message left before the child was killed')
      await sub.stop()
    } finally {
      await owner.close()
    }
  }

  it('CHAN-01 publishes not awaited leave while their program stays busy and is then killed', async () => {
    await burstThenBusyThenKilled('busy', 200)
  })

  it('CHAN-01 a burst smaller than a batch, not awaited, leaves while its program stays busy and is then killed', async () => {
    // Fewer than the 32 that leave together on their own, and no await
    // after them: the engine's check of a loop that has not read writes
    // them while the loop is busy.
    await burstThenBusyThenKilled('busy-few', 10)
  })

  it('STORE-01 after its calls stop, a connected program sleeps: the loop spins only for a short window after each call', async () => {
    const dir = tempDir()
    const owner = await open(dir)
    const client = await connect(`unix:${join(dir, 'tinystore.sock')}`)
    try {
      const lock = client.lock('spin')
      const branch = client.channel<Ev>('spin').under(1)
      for (let n = 0; n < 2000; n++) {
        await lock.hold(7, () => {})
        await branch.publish({ n })
      }
      await sleep(50)
      const before = process.cpuUsage()
      await sleep(500) // a timer keeps the loop alive; nothing else to do
      const used = process.cpuUsage(before)
      const ms = (used.user + used.system) / 1000
      // Owner and client both live in this process; spinning for good would use about 500 ms.
      assert.ok(ms < 60, `an idle owner and client used ${ms} ms of CPU in 500 ms`)
    } finally {
      await client.close()
      await owner.close()
    }
  })
})


describe('a subscription keeps its store open', () => {
  // The program keeps no reference to the store, only to its subscription
  // (which holds none in JavaScript) and to what its handler counts: a
  // garbage collection must not close the store under it.
  v8.setFlagsFromString('--expose-gc')
  const gc = vm.runInNewContext('gc') as () => void

  async function subscribeAndForget(dir: string): Promise<{ got: number[]; sub: Subscription }> {
    const got: number[] = []
    const store = await open(dir)
    const sub = await store.channel<Ev>('kept').under(1).subscribe((m) => void got.push(m.value.n))
    return { got, sub }
  }

  async function publishAcrossCollections(dir: string, seen: { got: number[]; sub: Subscription }): Promise<void> {
    const publisher = await connect(`unix:${join(dir, 'tinystore.sock')}`, { requestTimeout: '2s' })
    try {
      const branch = publisher.channel<Ev>('kept').under(1)
      await branch.publish({ n: 1 })
      await until(() => seen.got.length === 1, 5000, 'the first message')
      for (let i = 0; i < 3; i++) {
        gc()
        await sleep(20)
      }
      await branch.publish({ n: 2 })
      await until(() => seen.got.length === 2, 5000, 'the message published after a garbage collection').catch(() => {})
      assert.deepEqual(seen.got, [1, 2])
    } finally {
      await seen.sub.stop()
      await publisher.close()
    }
  }

  it('CHAN-01 an owning store whose program dropped it still serves and delivers while it has a subscription', async () => {
    const dir = tempDir()
    await publishAcrossCollections(dir, await subscribeAndForget(dir))
  })

  it('CHAN-01 a store opened while another process owns it still delivers after its program dropped it', async () => {
    const dir = tempDir()
    const owner = spawn(process.execPath, ['-e', `require(${JSON.stringify(require.resolve('tinystore'))}).open(${JSON.stringify(dir)}).then((s) => { globalThis.kept = s; console.log('ready') }); setInterval(() => {}, 1e6)`], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    try {
      await new Promise((resolve) => owner.stdout.once('data', resolve))
      await publishAcrossCollections(dir, await subscribeAndForget(dir))
    } finally {
      owner.kill()
    }
  })
})
