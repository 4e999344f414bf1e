// LOCK-01 as an outside observer sees it: once a hold's function returned,
// the key is free for another connection told by another path.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { connect, open } from 'tinystore'

import { tempDir } from './helpers'
import { Proxy } from './proxy'

describe('LOCK-01 release', () => {
  it('LOCK-01 release then tryHold across connections: never refused', async () => {
    const dir = tempDir()
    const owner = await open(dir)
    const address = `unix:${join(dir, 'tinystore.sock')}`
    const aStore = await connect(address)
    const bStore = await connect(address)
    try {
      const a = aStore.lock('jobs')
      const b = bStore.lock('jobs')
      let refused = 0
      for (let i = 0; i < 1000; i++) {
        const key = i % 200
        await a.hold(key, () => {})
        // A's hold returned: B is told by this code, not by the store.
        const r = await b.tryHold(key, () => true)
        if (!r.acquired) refused++
      }
      assert.equal(refused, 0, `B was refused ${refused} times a key whose holder's function had returned`)
    } finally {
      await bStore.close()
      await aStore.close()
      await owner.close()
    }
  })

  it('LOCK-01 a release awaits its answer without blocking the event loop', async () => {
    // The proxy runs on this event loop: a blocked loop could not even
    // forward the release.
    const dir = tempDir()
    const owner = await open(dir)
    const proxy = await Proxy.start(dir, join(dir, 'tinystore.sock'))
    const client = await connect(proxy.address)
    let ticks = 0
    const ticker = setInterval(() => ticks++, 5)
    try {
      let started = 0
      let before = 0
      await client.lock('jobs').hold('k', () => {
        proxy.freeze() // the release and its answer wait in the proxy
        setTimeout(() => proxy.thaw(), 300)
        started = Date.now()
        before = ticks
      })
      const waited = Date.now() - started
      const ran = ticks - before
      assert.ok(waited >= 250, `the hold returned after ${waited} ms, before its release was answered`)
      assert.ok(ran >= 10, `the loop ran ${ran} ticks of 5 ms during a 300 ms release: it was blocked`)
      const r = await owner.lock('jobs').tryHold('k', () => true)
      assert.ok(r.acquired, 'the key was still held after the hold returned')
    } finally {
      clearInterval(ticker)
      await client.close()
      await proxy.close()
      await owner.close()
    }
  })
})
