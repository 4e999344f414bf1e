import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import * as tinystore from 'tinystore'

import { tempDir } from './helpers'

const root = join(__dirname, '..', '..')

/** Runs `script` in a fresh node process; resolves with its exit code, or 'hung'. */
function runChild(script: string, ms = 10_000): Promise<number | 'hung'> {
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'inherit', 'inherit'] })
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL')
      resolve('hung')
    }, ms)
    child.on('exit', (code) => {
      clearTimeout(timer)
      resolve(code ?? -1)
    })
  })
}

describe('the package', () => {
  it('the checked-in native.d.ts is the one the build generates', () => {
    const built = readFileSync(join(root, 'build', 'native.d.ts'), 'utf8')
    const checkedIn = readFileSync(join(root, 'native.d.ts'), 'utf8')
    assert.equal(checkedIn, built, 'native.d.ts is stale: run `make -C bindings-node update-dts` and commit it')
  })

  it('every error code has its TinyStoreError subclass', async () => {
    const dir = tempDir()
    const store = await tinystore.open(dir)
    const cases: Array<[() => unknown, string, new (...a: any[]) => tinystore.TinyStoreError]> = [
      [() => store.channel('Bad Name'), 'invalid', tinystore.InvalidError],
      [() => store.channel('big').publish('x'.repeat(2 << 20)), 'limit', tinystore.LimitError],
      [() => store.database('x').then((db) => db.exec('nonsense')), 'sql', tinystore.SqlError],
      [() => store.lock('t', { wait: 1 }).hold('k', () => store.lock('t', { wait: 1 }).hold('k', () => 0)), 'conflict', tinystore.ConflictError],
    ]
    for (const [f, code, cls] of cases) {
      await assert.rejects(
        async () => f(),
        (e: unknown) => {
          assert.ok(e instanceof tinystore.TinyStoreError, `${code}: a TinyStoreError`)
          assert.ok(e instanceof cls, `${code}: a ${cls.name}`)
          assert.equal(e.code, code)
          assert.equal(e.name, cls.name)
          assert.doesNotMatch(e.message, /^tinystore:/)
          return true
        },
      )
    }
    const before = store.channel('before')
    await store.close()
    const closed = (e: unknown) => e instanceof tinystore.ClosedError && e.code === 'closed'
    assert.throws(() => store.channel('after'), closed)
    await assert.rejects(before.publish(1), closed)
    await assert.rejects(tinystore.connect('unix:/nowhere.sock'), tinystore.TinyStoreError)
  })

  it('CHAN-05 a program whose subscription is stopped and whose store is closed exits by itself', async () => {
    const dir = tempDir()
    const script = `
      const { open } = require(${JSON.stringify(require.resolve('tinystore'))})
      ;(async () => {
        const store = await open(${JSON.stringify(dir)})
        const events = store.channel('chat-events')
        let got
        const arrived = new Promise((resolve) => (got = resolve))
        const sub = await events.under(7).subscribe((m) => got(m.value))
        await events.under(7).publish({ kind: 'message', id: 1 })
        await arrived
        const lock = store.lock('summaries', { ttl: '1s', maxHold: '10s' })
        await lock.hold(7, async (lease) => lease.fence)
        await lock.tryHold(7, () => 1)
        const db = await store.database('chat')
        await db.tx((tx) => tx.exec('create table t (x)'))
        await sub.stop()
        await store.close()
      })().catch((e) => { console.error(e); process.exit(2) })
    `
    assert.equal(await runChild(script), 0)
  })

  it('CHAN-05 a program whose store closes under a live subscription and an iterator exits by itself (never stopped)', async () => {
    const dir = tempDir()
    const script = `
      const { open } = require(${JSON.stringify(require.resolve('tinystore'))})
      ;(async () => {
        const store = await open(${JSON.stringify(dir)})
        const events = store.channel('chat-events')
        await events.under(7).subscribe(() => {})
        const it = await events.under(8).messages().ready()
        const reading = it.next()
        setTimeout(() => store.close(), 50)
        await reading
      })().catch((e) => { console.error(e); process.exit(2) })
    `
    assert.equal(await runChild(script), 0)
  })

  it('CHAN-05 a connected program whose store closes under a live subscription and an iterator exits by itself (never stopped)', async () => {
    const dir = tempDir()
    const owner = await tinystore.open(dir)
    try {
      const script = `
        const { connect } = require(${JSON.stringify(require.resolve('tinystore'))})
        ;(async () => {
          const store = await connect(${JSON.stringify(`unix:${join(dir, 'tinystore.sock')}`)})
          const events = store.channel('chat-events')
          let got
          const arrived = new Promise((resolve) => (got = resolve))
          await events.under(7).subscribe((m) => got(m.value))
          const it = await events.under(8).messages().ready()
          const reading = it.next()
          await events.under(7).publish({ kind: 'message', id: 1 })
          await arrived
          await store.close()
          await reading
        })().catch((e) => { console.error(e); process.exit(2) })
      `
      assert.equal(await runChild(script), 0)
    } finally {
      await owner.close()
    }
  })

  it('STORE-01 a connected program waiting for a held key stays alive until the key is granted (its socket is read on the event loop)', async () => {
    const dir = tempDir()
    const owner = await tinystore.open(dir)
    try {
      // The owner holds the key for 800 ms; the child's wait is all it has to do.
      const held = owner.lock('jobs').hold(7, () => new Promise((r) => setTimeout(r, 800)))
      const script = `
        const { connect } = require(${JSON.stringify(require.resolve('tinystore'))})
        let granted = false
        process.on('exit', (code) => { if (code === 0 && !granted) process.exitCode = 4 })
        ;(async () => {
          const store = await connect(${JSON.stringify(`unix:${join(dir, 'tinystore.sock')}`)})
          await store.lock('jobs').hold(7, () => { granted = true }, { wait: '5s' })
          await store.close()
        })().catch((e) => { console.error(e); process.exit(2) })
      `
      assert.equal(await runChild(script), 0, 'exit code 4: the program ended before its hold was granted')
      await held
    } finally {
      await owner.close()
    }
  })

  it('CHAN-05 a live subscription keeps the program running until it is stopped or its store closed, as documented', async () => {
    const dir = tempDir()
    const script = `
      const { open } = require(${JSON.stringify(require.resolve('tinystore'))})
      ;(async () => {
        const store = await open(${JSON.stringify(dir)})
        await store.channel('chat-events').under(7).subscribe(() => {})
        // Neither sub.stop() nor store.close(): the subscription waits for messages.
      })().catch((e) => { console.error(e); process.exit(2) })
    `
    assert.equal(await runChild(script, 1500), 'hung')
  })

  it('the declarations document what keeps a process alive and the addresses connect takes', () => {
    const doc = (file: string, before: RegExp): string => {
      const text = readFileSync(join(root, 'dist', file), 'utf8')
      const at = text.search(before)
      assert.ok(at > 0, `${file}: ${before} is declared`)
      const start = text.lastIndexOf('/**', at)
      return text.slice(start, at).replace(/\n\s*\*\s?/g, ' ').replace(/\s+/g, ' ')
    }
    const connectDoc = doc('store.d.ts', /export declare function connect\(/)
    for (const words of ['unix:PATH', 'tcp:HOST:PORT', 'tls:HOST:PORT', 'TINYSTORE_TOKEN', 'TINYSTORE_CA']) {
      assert.ok(connectDoc.includes(words), `connect's TSDoc mentions ${words}`)
    }
    const nativeConnect = readFileSync(join(root, 'native.d.ts'), 'utf8').match(/\/\*\*[^/]*\*\/\s*static connect\(/)?.[0] ?? ''
    assert.match(nativeConnect, /tls:HOST:PORT/, 'the native declaration of connect too')
    const subscribeDoc = doc('channel.d.ts', /subscribe\(handler/)
    assert.match(subscribeDoc, /keeps the Node(\.js)? process (alive|running)/)
    assert.match(subscribeDoc, /sub\.stop\(\)/)
    assert.match(subscribeDoc, /store\.close\(\)/)
    const readme = readFileSync(join(root, 'README.md'), 'utf8').replace(/\s+/g, ' ')
    assert.match(readme, /keeps the (Node(\.js)? )?process (alive|running)/)
    assert.match(readme, /tls:HOST:PORT/)
  })

  it('connect to a tls: address without TINYSTORE_CA is an InvalidError that says to set it', async () => {
    const saved = process.env.TINYSTORE_CA
    delete process.env.TINYSTORE_CA
    try {
      await assert.rejects(tinystore.connect('tls:127.0.0.1:9'), (e: unknown) => {
        assert.ok(e instanceof tinystore.InvalidError, `an InvalidError, got ${(e as Error)?.message}`)
        assert.match(e.message, /TINYSTORE_CA/)
        return true
      })
    } finally {
      if (saved !== undefined) process.env.TINYSTORE_CA = saved
    }
  })
})
