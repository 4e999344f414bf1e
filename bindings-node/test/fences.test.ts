import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { LostError, open } from 'tinystore'

import { gate, LOCK_MODES, makeStore, suiteStores, tempDir } from './helpers'

// The engine's own functions, for the vectors: not part of the public API.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const native = require('../native.js') as typeof import('../native')

interface Vector {
  epoch: string
  count: string
  digits: string
  padded: string
  hi: string
  lo: string
}

const vectorsFile = join(__dirname, '..', '..', '..', 'tests', 'vectors', 'fences.json')

describe('fences', () => {
  it('FENCE-01 the fence vectors cross as bigints with every digit kept', () => {
    const { vectors } = JSON.parse(readFileSync(vectorsFile, 'utf8')) as { vectors: Vector[] }
    assert.ok(vectors.length >= 4)
    for (const v of vectors) {
      const fence = native.fenceOf(BigInt(v.epoch), BigInt(v.count))
      assert.equal(typeof fence, 'bigint')
      assert.equal(fence, BigInt(v.digits))
      assert.equal(fence.toString(), v.digits)
      assert.equal(fence.toString().padStart(40, '0'), v.padded, 'the seeds\' padding gives the engine\'s text')
      assert.equal(native.fencePadded(fence), v.padded)
      assert.equal((fence >> 64n).toString(), v.hi)
      assert.equal((fence & ((1n << 64n) - 1n)).toString(), v.lo)
    }
  })

  it('FENCE-01 padded fences sort as text like the numbers', () => {
    const { vectors } = JSON.parse(readFileSync(vectorsFile, 'utf8')) as { vectors: Vector[] }
    const byNumber = [...vectors].sort((a, b) => (BigInt(a.digits) < BigInt(b.digits) ? -1 : BigInt(a.digits) > BigInt(b.digits) ? 1 : 0))
    const byText = [...vectors].sort((a, b) => (a.padded < b.padded ? -1 : a.padded > b.padded ? 1 : 0))
    assert.deepEqual(byText.map((v) => v.digits), byNumber.map((v) => v.digits))
  })
})

for (const mode of LOCK_MODES) {
  describe(`fences (${mode})`, () => {
    const store = suiteStores(mode)

    it('FENCE-02 the seeds\' fence check refuses a worker whose lease ran out while it was paused', async () => {
      const dir = tempDir()
      writeFileSync(join(dir, '0001_chats.sql'), 'create table chats (id integer primary key, title text);')
      writeFileSync(
        join(dir, '0004_summaries.sql'),
        "alter table chats add column summary text;\nalter table chats add column summary_fence text not null default '';\n",
      )
      const s = await store()
      const db = await s.database('chat', { migrations: dir })
      const chatId = 7
      await db.exec`insert into chats (id, title) values (${chatId}, 'a chat')`
      // Worker A's lease ends at maxHold while it is paused; B takes the key.
      const workerA = s.lock('summaries', { ttl: '1s', maxHold: '200ms' })
      const workerB = s.lock('summaries', { ttl: '1s' })
      const aLost = gate()
      const bWrote = gate()
      const a = workerA.tryHold(chatId, async (lease) => {
        const summary = 'stale summary by A'
        await new Promise((resolve) => lease.signal.addEventListener('abort', resolve)) // A pauses past its lease
        aLost.open()
        await bWrote.promise
        const fence = lease.fence.toString().padStart(40, '0')
        const done = await db.exec`update chats set summary = ${summary}, summary_fence = ${fence}
          where id = ${chatId} and summary_fence < ${fence}`
        return done.changes
      })
      await aLost.promise
      // B takes the key as soon as the store let A's lease go.
      const b = await workerB.hold(chatId, async (lease) => {
        const fence = lease.fence.toString().padStart(40, '0')
        const done = await db.exec`update chats set summary = ${'summary by B'}, summary_fence = ${fence}
          where id = ${chatId} and summary_fence < ${fence}`
        return done.changes
      }, { wait: '1s' })
      assert.equal(b, 1)
      bWrote.open()
      await assert.rejects(a, LostError, 'A is told its lease was lost')
      const rows = await db.query<{ summary: string }>`select summary from chats where id = ${chatId}`
      assert.deepEqual(rows, [{ summary: 'summary by B' }], 'A\'s late write changed no row')
    })

    it('LOCK-02 fences keep growing after a restart of the store', async () => {
      const dir = tempDir()
      const first = await makeStore(mode, dir)
      const before = await first.lock('l').hold(1, (l) => l.fence)
      await first.close()
      const second = await store(dir)
      const later = await second.lock('l').hold(1, (l) => l.fence)
      assert.ok(later > before, `${later} > ${before}`)
      // One machine: each open is a new epoch; a cluster's epoch is made once, at its first connect.
      if (mode === 'cluster') assert.equal(second.epoch, before >> 64n)
      else assert.ok(second.epoch > before >> 64n)
    })
  })
}

describe('fences across processes', () => {
  it('LOCK-02 fences keep growing after the owner process is killed (kill -9)', async () => {
    const dir = tempDir()
    const script = `
      const { open } = require(${JSON.stringify(require.resolve('tinystore'))})
      open(${JSON.stringify(dir)}).then((store) =>
        store.lock('l').hold(1, (lease) => {
          process.stdout.write(lease.fence.toString() + '\\n')
          return new Promise(() => {})
        }))
    `
    const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
    const fence = await new Promise<bigint>((resolve, reject) => {
      let out = ''
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString()
        if (out.includes('\n')) resolve(BigInt(out.trim()))
      })
      child.on('exit', (code) => reject(new Error(`the child exited with ${code} before printing a fence`)))
    })
    const exited = new Promise((resolve) => child.on('exit', resolve))
    child.kill('SIGKILL')
    await exited
    const store = await open(dir)
    try {
      const later = await store.lock('l').hold(1, (l) => l.fence)
      assert.ok(later > fence, `${later} > ${fence}`)
    } finally {
      await store.close()
    }
  })
})
