// STORE-02: calls made while the connection is re-established wait for it
// (up to the request timeout) and go out in order; past that they reject
// with UnavailableError, never ClosedError (which means only "you closed it").

import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { ClosedError, connect, type Missed, UnavailableError } from 'tinystore'

import { CHAN_MODES, CLUSTER_TIMEOUT, etcdCluster, sleep, startNats, tempDir, until } from './helpers'

// An owner in another process; resolves once it serves the store.
async function owner(dir: string): Promise<ChildProcess> {
  const script = `
    const { open } = require(${JSON.stringify(require.resolve('tinystore'))})
    open(${JSON.stringify(dir)}).then(() => { process.stdout.write('owner\\n'); setInterval(() => {}, 1000) })
  `
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', () => resolve())
    child.on('exit', (code) => reject(new Error(`the owner exited with ${code}`)))
  })
  return child
}

async function kill9(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.on('exit', resolve))
  child.kill('SIGKILL')
  await exited
}

describe('STORE-02 reconnect waits', () => {
  it('STORE-02 CHAN-04 a loop of 1,000 publishes across an owner restart all succeed, in order', async () => {
    const dir = tempDir()
    let first = await owner(dir)
    const client = await connect(`unix:${join(dir, 'tinystore.sock')}`)
    const got: unknown[] = []
    const sub = await client.channel<number>('c').under(1).subscribe((m) => { got.push(m.value) }, { onMissed: (m: Missed) => { got.push(m) } })
    await kill9(first)
    const publishing = (async () => {
      const errors: unknown[] = []
      for (let i = 0; i < 1000; i++) {
        try {
          await client.channel<number>('c').under(1).publish(i)
        } catch (e) {
          errors.push(e)
        }
      }
      return errors
    })()
    await sleep(300)
    first = await owner(dir)
    try {
      const errors = await publishing
      assert.equal(errors.length, 0, `${errors.length} of 1000 publishes failed, the first: ${errors[0]}`)
      await until(() => got.length === 1001, 10000, 'every message')
      const missed = got[0] as Missed
      assert.equal(missed.reason, 'reconnect')
      assert.equal(missed.count, undefined, 'the store restarted: the count is unknown')
      assert.deepEqual(got.slice(1), Array.from({ length: 1000 }, (_, i) => i))
      await sub.stop()
      await client.close()
    } finally {
      await kill9(first)
    }
  })

  it('STORE-02 a store unreachable past the request timeout rejects with UnavailableError, within it', async () => {
    const dir = tempDir()
    const first = await owner(dir)
    const client = await connect(`unix:${join(dir, 'tinystore.sock')}`, { requestTimeout: '600ms' })
    await client.channel<number>('c').under(1).publish(1)
    await kill9(first)
    let t = Date.now()
    await assert.rejects(client.channel<number>('c').under(1).publish(2), (e: unknown) => {
      assert.ok(e instanceof UnavailableError, `${e}`)
      assert.equal(e.code, 'unavailable')
      assert.match(e.message, /could not be reached.*since/)
      const took = Date.now() - t
      assert.ok(took >= 500 && took < 2000, `${took} ms`)
      return true
    })
    t = Date.now()
    await assert.rejects(client.lock('l').hold('k', () => 1, { wait: '100ms' }), UnavailableError)
    assert.ok(Date.now() - t < 2000)
    const branch = client.channel<number>('c').under(1)
    await client.close()
    await assert.rejects(branch.publish(3), ClosedError)
  })

  it('STORE-01 LOCK-05 a lease outlives the owner\'s death: the new owner gives K to B only after A let go', async () => {
    const dir = tempDir()
    const address = `unix:${join(dir, 'tinystore.sock')}`
    let current = await owner(dir)
    const a = await connect(address)
    let b: Awaited<ReturnType<typeof connect>> | undefined
    try {
      let go!: () => void
      const gone = new Promise<void>((resolve) => { go = resolve })
      let fenceA = 0n
      let releasedAt = 0
      let held!: () => void
      const isHeld = new Promise<void>((resolve) => { held = resolve })
      const aHold = a.lock('l', { ttl: '2s' }).hold('K', async (lease) => {
        fenceA = lease.fence
        held()
        await gone
        const lost = lease.lost
        releasedAt = Date.now()
        return lost
      })
      await isHeld
      await kill9(current)
      current = await owner(dir)
      b = await connect(address)
      let grantedAt = 0
      const bHold = b.lock('l', { wait: '10s' }).hold('K', (lease) => {
        grantedAt = Date.now()
        return lease.fence
      })
      await sleep(3000) // past A's ttl of 2 s: A renews through the new owner
      assert.equal(grantedAt, 0, 'B was granted K while A still held it')
      go()
      assert.equal(await aHold, false, 'A was told lost while it renewed')
      const fenceB = await bHold
      assert.ok(grantedAt >= releasedAt, 'B was granted before A let go')
      assert.ok(fenceB > fenceA && fenceB >> 64n > fenceA >> 64n, `${fenceB} after ${fenceA}`)
    } finally {
      await a.close()
      await b?.close()
      await kill9(current)
    }
  })
})

describe('CHAN-04 reconnect on a cluster store', { skip: !CHAN_MODES.includes('cluster') && 'TINYSTORE_TEST_MODES leaves the cluster out' }, () => {
  it('CHAN-04 after a kill -9 of the subscriber\'s NATS server, the subscription resumes from the last it got, told nothing missed', async () => {
    // A cluster store has no owner to restart: its reconnect is to another
    // NATS server. The subscriber knows only node 0 (it learns the others
    // from it), the publisher nodes 1 and 2; the stream keeps every message
    // of the branch (fewer than 1,024), so nothing is missed.
    const [etcd, nats] = await Promise.all([etcdCluster(), startNats()])
    const address = etcd.address(`node${process.pid}-chan04kill`)
    const sub = await connect(`${address}?nats=${nats.urls([0])}`, { requestTimeout: CLUSTER_TIMEOUT })
    const pub = await connect(`${address}?nats=${nats.urls([1, 2])}`, { requestTimeout: CLUSTER_TIMEOUT })
    const got: Array<number | Missed> = []
    const s = await sub.channel<number>('c').under(1).subscribe((m) => void got.push(m.value), { onMissed: (m) => void got.push(m) })
    const branch = pub.channel<number>('c').under(1)
    for (let i = 0; i < 50; i++) await branch.publish(i)
    await until(() => got.length === 50, 10_000, 'the first 50')
    nats.kill(0)
    for (let i = 50; i < 100; i++) await branch.publish(i)
    await until(() => got.length >= 100, 60_000, 'the 50 published after the kill')
    await sleep(300)
    assert.deepEqual(got, [...Array(100).keys()], 'in order, nothing twice, nothing missed')
    await s.stop()
    await pub.close()
    await sub.close()
    nats.stop()
  })
})
