// connect's options: token, CA file and request timeout given per store,
// with the environment as the default (SEC-01); and the package's
// `tinystore` command, which runs the core's in this process.
import assert from 'node:assert/strict'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdirSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { after, describe, it } from 'node:test'

import * as tinystore from 'tinystore'

import { startEtcd, tempDir } from './helpers'

const command = join(__dirname, '..', '..', 'bin', 'tinystore.js')

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer()
    s.listen(0, '127.0.0.1', () => {
      const a = s.address()
      s.close(() => (a && typeof a === 'object' ? resolve(a.port) : reject(new Error('no port'))))
    })
  })
}

const owners: ChildProcess[] = []
after(() => {
  for (const o of owners) o.kill('SIGTERM')
})

/** `tinystore serve` (this package's command) owning a store whose only token is `data <token>`, on TCP. */
async function servedWithToken(token: string): Promise<string> {
  const dir = join(tempDir(), 'store')
  mkdirSync(dir)
  writeFileSync(join(dir, 'tokens'), `data ${token}\n`)
  const address = `tcp:127.0.0.1:${await freePort()}`
  const owner = spawn(process.execPath, [command, 'serve', dir, '--listen', address], { stdio: ['ignore', 'ignore', 'pipe'] })
  owners.push(owner)
  await new Promise<void>((resolve, reject) => {
    let said = ''
    owner.stderr!.on('data', (b: Buffer) => {
      said += b.toString()
      if (said.includes('serving')) resolve()
    })
    owner.on('exit', (code) => reject(new Error(`tinystore serve exited with ${code}: ${said}`)))
  })
  return address
}

describe('connect options', () => {
  it('SEC-01: two stores with two tokens connected from one process', async () => {
    const saved = process.env.TINYSTORE_TOKEN
    delete process.env.TINYSTORE_TOKEN
    try {
      const [a, b] = [await servedWithToken('token-of-a'), await servedWithToken('token-of-b')]
      const storeA = await tinystore.connect(a, { token: 'token-of-a' })
      const storeB = await tinystore.connect(b, { token: 'token-of-b', requestTimeout: '5s' })
      await storeA.channel('numbers').publish(1)
      await storeB.channel('numbers').publish(1)
      assert.notEqual((await storeA.status()).dir, (await storeB.status()).dir)
      const auth = (e: unknown) => e instanceof tinystore.AuthError && /token/.test(e.message)
      await assert.rejects(tinystore.connect(a, { token: 'token-of-b' }), auth)
      await assert.rejects(tinystore.connect(b), auth)
      // The environment is the default; an option wins over it.
      process.env.TINYSTORE_TOKEN = 'token-of-b'
      const fromEnv = await tinystore.connect(b)
      const given = await tinystore.connect(a, { token: 'token-of-a' })
      await fromEnv.channel('numbers').publish(2)
      await given.channel('numbers').publish(2)
      for (const s of [storeA, storeB, fromEnv, given]) await s.close()
    } finally {
      if (saved === undefined) delete process.env.TINYSTORE_TOKEN
      else process.env.TINYSTORE_TOKEN = saved
    }
  })

  it('options out of form are an InvalidError that says what to pass', async () => {
    const a = await servedWithToken('t')
    const invalid = (what: RegExp) => (e: unknown) => e instanceof tinystore.InvalidError && what.test(e.message)
    await assert.rejects(tinystore.connect(a, { token: 't', requestTimeout: 'soon' }), invalid(/duration/))
    await assert.rejects(tinystore.connect(a, { token: 7 as unknown as string }), invalid(/token is text/))
    await assert.rejects(tinystore.connect(a, 'tok' as unknown as tinystore.ConnectOptions), invalid(/options of connect/))
    await assert.rejects(tinystore.connect('tls:127.0.0.1:1', { token: 't', caFile: join(tempDir(), 'no.pem') }), tinystore.IoError)
  })
})

describe('connect options for etcd', () => {
  it('with auth enabled on a cluster, the etcd user and password hold a lock; a wrong password is an AuthError', async () => {
    // A cluster of this test's own: auth would lock the shared one's tests out.
    const c = await startEtcd()
    for (const args of [['user', 'add', 'root:rootpw'], ['role', 'add', 'root'], ['user', 'grant-role', 'root', 'root'], ['auth', 'enable']]) {
      c.etcdctl(...args)
    }
    const saved = [process.env.TINYSTORE_ETCD_USER, process.env.TINYSTORE_ETCD_PASSWORD]
    delete process.env.TINYSTORE_ETCD_USER
    delete process.env.TINYSTORE_ETCD_PASSWORD
    try {
      const address = c.address('auth')
      const store = await tinystore.connect(address, { etcdUser: 'root', etcdPassword: 'rootpw' })
      const fence = await store.lock('l', { ttl: '2s' }).hold('k', (lease) => lease.fence)
      assert.equal(fence >> 64n, store.epoch)
      const auth = (e: unknown) => e instanceof tinystore.AuthError && /authentication failed/.test(e.message)
      await assert.rejects(tinystore.connect(address, { etcdUser: 'root', etcdPassword: 'wrong' }), auth)
      await assert.rejects(tinystore.connect(address), tinystore.AuthError)
      // The environment is the default; the options win over it.
      process.env.TINYSTORE_ETCD_USER = 'root'
      process.env.TINYSTORE_ETCD_PASSWORD = 'rootpw'
      const fromEnv = await tinystore.connect(address)
      assert.ok((await fromEnv.lock('l', { ttl: '2s' }).hold('k', (lease) => lease.fence)) > fence)
      await assert.rejects(tinystore.connect(address, { etcdUser: 'root', etcdPassword: 'wrong' }), auth)
      for (const s of [store, fromEnv]) await s.close()
    } finally {
      const names = ['TINYSTORE_ETCD_USER', 'TINYSTORE_ETCD_PASSWORD'] as const
      names.forEach((n, i) => {
        if (saved[i] === undefined) delete process.env[n]
        else process.env[n] = saved[i]
      })
    }
  })

  it('half a pair (a user without a password, a certificate without a key) is an InvalidError naming the missing one', async () => {
    const invalid = (what: RegExp) => (e: unknown) => e instanceof tinystore.InvalidError && what.test(e.message)
    // The core checks it before asking any member: nothing listens on port 1.
    await assert.rejects(tinystore.connect('etcd://127.0.0.1:1/half', { etcdUser: 'root' }), invalid(/without the etcd password/))
    await assert.rejects(tinystore.connect('etcds://127.0.0.1:1/half', { caFile: 'ca.pem', etcdKey: 'key.pem' }), invalid(/without the etcd client certificate/))
    await assert.rejects(tinystore.connect('etcd://127.0.0.1:1/half', { etcdPassword: 7 as unknown as string }), invalid(/etcdPassword is text/))
    await assert.rejects(tinystore.connect('etcd://127.0.0.1:1/half?nats=nats://127.0.0.1:1', { natsUser: 'app' }), invalid(/without the NATS password/))
    await assert.rejects(tinystore.connect('etcd://127.0.0.1:1/half?nats=tls://127.0.0.1:1', { caFile: 'ca.pem', natsKey: 'key.pem' }), invalid(/without the NATS client certificate/))
    await assert.rejects(tinystore.connect('etcd://127.0.0.1:1/half', { natsToken: 7 as unknown as string }), invalid(/natsToken is text/))
  })
})

describe('the tinystore command', () => {
  it('says its version, the wire protocol and the build', () => {
    const r = spawnSync(process.execPath, [command, '--version'], { encoding: 'utf8' })
    assert.equal(r.status, 0, r.stderr)
    assert.match(r.stdout, /^tinystore \d+\.\d+\.\d+ \(wire protocol \d+, (debug|release) build\)\n$/)
  })

  it('returns the core command\'s exit status', () => {
    const missing = spawnSync(process.execPath, [command, 'status', tempDir()], { encoding: 'utf8' })
    assert.equal(missing.status, 1)
    assert.match(missing.stderr, /start one with `tinystore serve/)
    const usage = spawnSync(process.execPath, [command, 'no-such-command'], { encoding: 'utf8' })
    assert.equal(usage.status, 2)
  })
})
