import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, it } from 'node:test'

import { ConflictError, InvalidError, SqlError, type Message } from 'tinystore'

import { CHAN_MODES, sleep, suiteStores, tempDir, until } from './helpers'

interface Note {
  id: number
}

// Cluster too: its SQL databases are files on this machine, as owned.
for (const mode of CHAN_MODES) {
  describe(`sql (${mode})`, () => {
    const makeStore = suiteStores(mode)
    const database = async () => {
      const dir = tempDir()
      writeFileSync(join(dir, '0001_notes.sql'), 'create table notes (id integer primary key, text text, data blob, score real);')
      const store = await makeStore()
      return { store, db: await store.database('notes', { migrations: dir }), dir }
    }

    it('CHAN-03: a thousand transactions at once queue for the writer; none fails with busy', async () => {
      // More than the blocking threads (512): they wait for the writer
      // without a thread each, so the transaction holding it always has a
      // thread for its next statement.
      const { store, db } = await database()
      const events = store.channel<number>('notes-events')
      const ids = await Promise.all(
        Array.from({ length: 1000 }, () =>
          db.tx(async (tx) => {
            const done = await tx.exec('insert into notes (text) values (?)', 't')
            await tx.with(events).under(1).publish(Number(done.lastInsertRowid))
            return Number(done.lastInsertRowid)
          }),
        ),
      )
      assert.deepEqual([...ids].sort((a, b) => a - b), Array.from({ length: 1000 }, (_, i) => i + 1))
      await Promise.all(Array.from({ length: 600 }, () => db.exec('insert into notes (text) values (?)', 'e')))
      assert.deepEqual(await db.query('select count(*) as n from notes'), [{ n: 1600 }])
    })

    it('a tagged template binds its values as parameters, never as text', async () => {
      const { db } = await database()
      const evil = "x'); drop table notes; --"
      const done = await db.exec`insert into notes (text) values (${evil})`
      assert.deepEqual(done, { changes: 1, lastInsertRowid: 1 })
      assert.deepEqual(await db.query`select text from notes where id = ${1}`, [{ text: evil }])
      assert.deepEqual(await db.query('select count(*) as n from notes where text = ?', evil), [{ n: 1 }])
    })

    it('values cross both ways: null, integers, reals, text, bytes, booleans, and bigints past 2^53', async () => {
      const { db } = await database()
      const big = 2n ** 60n + 1n
      const d = await db.exec('insert into notes (id, text, data, score) values (?, ?, ?, ?)', big, null, Buffer.from([1, 2, 3]), 1.5)
      assert.equal(d.lastInsertRowid as unknown, big, 'a rowid past 2^53 is a bigint')
      const next = await db.exec('insert into notes (text, score) values (?, ?)', undefined, true)
      assert.equal(next.lastInsertRowid as unknown, big + 1n)
      const rows = await db.query('select id, text, data, score from notes order by id')
      assert.deepEqual(rows[0], { id: big, text: null, data: Buffer.from([1, 2, 3]), score: 1.5 })
      assert.deepEqual(rows[1], { id: big + 1n, text: null, data: null, score: 1 })
      const small = await db.exec('insert into notes (id) values (?)', 5)
      assert.equal(small.lastInsertRowid, 5)
      assert.equal(typeof small.lastInsertRowid, 'number')
    })

    it('a failed statement is a SqlError; migrations apply once', async () => {
      const { store, db, dir } = await database()
      await assert.rejects(db.exec('insert into nowhere values (1)'), SqlError)
      const again = await store.database('notes', { migrations: dir })
      await again.exec`insert into notes (text) values (${'twice opened'})`
      assert.equal((await db.query('select * from notes')).length, 1)
    })

    it('CHAN-03 a message published in a transaction arrives after the commit, when its row can be read', async () => {
      const { store, db } = await database()
      const events = store.channel<Note>('notes')
      const seen: Array<[number, number]> = []
      const sub = await events.under('all').subscribe(async (m) => {
        const rows = await db.query<{ n: number }>`select count(*) as n from notes where id = ${m.value.id}`
        seen.push([m.value.id, rows[0]!.n])
      })
      let deliveredBeforeCommit = 0
      await db.tx(async (tx) => {
        for (let i = 0; i < 3; i++) {
          const note = await tx.exec`insert into notes (text) values (${`note ${i}`})`
          await tx.with(events).under('all').publish({ id: note.lastInsertRowid })
        }
        await sleep(30)
        deliveredBeforeCommit = seen.length
      })
      assert.equal(deliveredBeforeCommit, 0, 'nothing is delivered before the commit')
      await until(() => seen.length === 3)
      assert.deepEqual(seen, [[1, 1], [2, 1], [3, 1]], 'in publish order, each row readable')
      await sub.stop()
    })

    it('CHAN-03 a rollback, or an error thrown in the function, drops what was published', async () => {
      const { store, db } = await database()
      const events = store.channel<Note>('notes')
      const got: Message<Note>[] = []
      const sub = await events.subscribe((m) => void got.push(m))
      const mine = new Error('changed my mind')
      await assert.rejects(
        db.tx(async (tx) => {
          await tx.exec`insert into notes (text) values ('dropped')`
          await tx.with(events).publish({ id: -1 })
          throw mine
        }),
        (e) => e === mine,
      )
      await assert.rejects(
        db.tx(async (tx) => {
          await tx.with(events).publish({ id: -2 })
          await tx.exec('insert into nowhere values (1)')
        }),
        SqlError,
      )
      // The same payload three times in one transaction arrives three times.
      const value = await db.tx(async (tx) => {
        for (let i = 0; i < 3; i++) await tx.with(events).publish({ id: 9 })
        return 'committed'
      })
      assert.equal(value, 'committed')
      await until(() => got.length === 3)
      await sleep(20)
      assert.deepEqual(got.map((m) => m.value.id), [9, 9, 9])
      assert.deepEqual(await db.query('select * from notes'), [])
      await sub.stop()
    })

    it('a tx is usable only inside its function', async () => {
      const { db } = await database()
      let kept: { exec: (s: string) => Promise<unknown> } | undefined
      await db.tx((tx) => {
        kept = tx
      })
      await assert.rejects(kept!.exec('select 1'), /ended/)
    })

    it('db.exec or db.tx of the same database inside db.tx is a ConflictError at once, not a wait on its own writer', async () => {
      const { store, db } = await database()
      const same = await store.database('notes')
      const started = Date.now()
      await db.tx(async (tx) => {
        await tx.exec('insert into notes (text) values (?)', 'in tx')
        await assert.rejects(db.exec('insert into notes (text) values (?)', 'beside'), ConflictError)
        await assert.rejects(same.exec('insert into notes (text) values (?)', 'beside'), ConflictError)
        await assert.rejects(db.tx(() => 1), ConflictError)
      })
      assert.ok(Date.now() - started < 2000, `took ${Date.now() - started} ms`)
      // After it, writes go as before.
      await db.exec('insert into notes (text) values (?)', 'after')
      assert.deepEqual((await db.query<{ n: number }>('select count(*) as n from notes'))[0]!.n, 2)
    })

    it('CHAN-03 a transaction refuses a channel of another store, and nothing of it is written', async () => {
      // Its commit publishes to its database's store: the other store's
      // subscribers would never hear of it.
      const { db } = await database()
      const other = await makeStore()
      await assert.rejects(
        db.tx(async (tx) => {
          await tx.exec('insert into notes (text) values (?)', 'x')
          await tx.with(other.channel<number>('notes-events')).under(1).publish(1)
        }),
        (e: Error) => e instanceof InvalidError && /another store handle/.test(e.message),
      )
      assert.deepEqual(await db.query('select * from notes'), [])
    })
  })
}
