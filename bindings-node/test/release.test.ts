// LOCK-01 as an outside observer sees it: once a hold's function returned,
// the key is free for another connection told by another path.
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { connect, open } from 'tinystore'

import { tempDir } from './helpers'

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
})
