import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { open, type Message } from 'tinystore'

import { tempDir, until } from './helpers'

// CHAN-03 across processes: transactions of several processes that publish
// to one branch arrive in commit (rowid) order.
describe('commit order across processes', () => {
  it('CHAN-03 four processes × 200 transactions arrive in commit (rowid) order, none lost', async () => {
    const dir = join(tempDir(), 's')
    const store = await open(dir)
    try {
      const db = await store.database('order')
      await db.exec('create table tx (id integer primary key, at integer)')
      const got: number[] = []
      const sub = await store.channel<number>('order').under('all').subscribe((m: Message<number>) => {
        got.push(m.value)
      })
      const script = `
        const { open } = require(${JSON.stringify(require.resolve('tinystore'))})
        ;(async () => {
          const store = await open(${JSON.stringify(dir)})
          const db = await store.database('order')
          const events = store.channel('order')
          for (let i = 0; i < 200; i++) {
            await db.tx(async (tx) => {
              const done = await tx.exec('insert into tx (at) values (0)')
              await tx.with(events).under('all').publish(Number(done.lastInsertRowid))
            })
          }
          await store.close()
        })().catch((e) => { console.error(e); process.exit(1) })
      `
      const codes = Array.from({ length: 4 }, () => {
        const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'ignore', 'inherit'] })
        return new Promise<number | null>((resolve) => child.on('exit', resolve))
      })
      assert.deepEqual(await Promise.all(codes), [0, 0, 0, 0])
      await until(() => got.length >= 800, 20000, '800 messages')
      await sub.stop()
      const back = got.filter((v, i) => i > 0 && v < got[i - 1]).length
      assert.equal(back, 0, `${back} of ${got.length} messages out of commit order`)
      assert.deepEqual(got, Array.from({ length: 800 }, (_, i) => i + 1))
    } finally {
      await store.close()
    }
  })
})
