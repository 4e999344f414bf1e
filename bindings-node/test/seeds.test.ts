// The TypeScript samples of the seeds (live updates, fences), as written,
// with trivial stand-ins for the app's own helpers `model`, `history`, `send`.
import assert from 'node:assert/strict'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'

import type { Database, Store } from 'tinystore'

import { gate, makeStore, MODES, sleep, tempDir, until } from './helpers'

interface ChatEvent {
	kind: 'message'
	id: number
}

for (const mode of MODES) {
  describe(`the seeds' TypeScript samples (${mode})`, () => {
    let store: Store
    let db: Database
    const chatId = 7
    const messageId = 1
    const answer = 'Paris.'

    // The app's own helpers.
    const model = { summarize: async (text: string) => `a summary of: ${text}` }
    const history = async (chatId: number) =>
      (await db.query<{ text: string }>`select text from messages where chat_id = ${chatId} order by id`).map((r) => r.text).join(' / ')

    before(async () => {
      const migrations = tempDir()
      writeFileSync(
        join(migrations, '0001_chat.sql'),
        `create table chats (id integer primary key, title text);
         create table messages (id integer primary key, chat_id integer not null references chats(id), role text not null,
           text text not null, created_at integer not null, reply_to integer references messages(id));`,
      )
      writeFileSync(
        join(migrations, '0004_summaries.sql'),
        "alter table chats add column summary text;\nalter table chats add column summary_fence text not null default '';\n",
      )
      store = await makeStore(mode)
      db = await store.database('chat', { migrations })
      await db.exec`insert into chats (id, title) values (${chatId}, 'Capitals')`
      await db.exec`insert into messages (id, chat_id, role, text, created_at) values (${messageId}, ${chatId}, 'user', 'Capital of France?', ${Date.now()})`
    })
    after(async () => {
      await store.close()
    })

    it('live updates: open a channel and a lock; tell every open tab; stream to a tab', async () => {
      const events = store.channel<ChatEvent>('chat-events')
      const summaries = store.lock('summaries', { ttl: '30s' })
      assert.equal(summaries.name, 'summaries')

      async function stream(chatId: number, send: (data: unknown) => void, closed: Promise<void>) {
      	const sub = await events.under(chatId).subscribe(m => send(m.value), {
      		onMissed: () => send({ kind: 'reload' }),
      	})
      	await closed // the browser went away
      	await sub.stop()
      }

      const sent: unknown[] = []
      const browserGone = gate()
      const streaming = stream(chatId, (data) => void sent.push(data), browserGone.promise)
      await sleep(20) // the tab subscribed

      await db.tx(async tx => {
      	const reply = await tx.exec`insert into messages (chat_id, role, text, created_at, reply_to)
      		values (${chatId}, 'assistant', ${answer}, ${Date.now()}, ${messageId})`
      	await tx.with(events).under(chatId).publish({ kind: 'message', id: reply.lastInsertRowid })
      })

      await until(() => sent.length === 1)
      assert.deepEqual(sent, [{ kind: 'message', id: 2 }])
      const saved = await db.query`select role, text, reply_to from messages where id = ${2}`
      assert.deepEqual(saved, [{ role: 'assistant', text: answer, reply_to: messageId }])
      browserGone.open()
      await streaming
    })

    it('live updates: a tab that falls behind is sent a reload', async () => {
      const events = store.channel<ChatEvent>('chat-events')
      const sent: unknown[] = []
      const send = (data: unknown) => void sent.push(data)
      const stuck = gate()
      const firstSeen = gate()
      const sub = await events.under(chatId).subscribe(async m => { send(m.value); if (m.value.id === 1) { firstSeen.open(); await stuck.promise } }, {
        onMissed: () => send({ kind: 'reload' }),
      })
      await events.under(chatId).publish({ kind: 'message', id: 1 })
      await firstSeen.promise // the phone is stuck on a slow network
      for (let id = 2; id <= 1100; id++) await events.under(chatId).publish({ kind: 'message', id })
      stuck.open()
      await until(() => (sent.at(-1) as ChatEvent).id === 1100)
      const reload = sent.findIndex((e) => (e as { kind: string }).kind === 'reload')
      assert.ok(reload > 0, 'the phone was told to reload')
      const after = sent.slice(reload + 1).map((e) => (e as ChatEvent).id)
      assert.deepEqual(after, [...Array(after.length).keys()].map((i) => 1100 - after.length + 1 + i), 'then it goes on listening')
      if (mode === 'owned') assert.deepEqual(sent.slice(0, 3), [{ kind: 'message', id: 1 }, { kind: 'reload' }, { kind: 'message', id: 1100 - 1023 }])
      await sub.stop()
    })

    it('live updates: one summary per chat at a time, with the fence in the where clause', async () => {
      const summaries = store.lock('summaries', { ttl: '30s' })
      const ran: string[] = []

      async function summarize(chatId: number) {
        const started = await summaries.tryHold(chatId, async lease => {
        	const summary = await model.summarize(await history(chatId))
        	const fence = lease.fence.toString().padStart(40, '0')
        	await db.exec`update chats set summary = ${summary}, summary_fence = ${fence}
        		where id = ${chatId} and summary_fence < ${fence}`
        	await sleep(50)
        })
        if (!started.acquired) return // another worker is writing this chat's summary
        ran.push('wrote')
      }

      await Promise.all([summarize(chatId), summarize(chatId)])
      assert.deepEqual(ran, ['wrote'], 'one of two concurrent workers wrote')
      const [chat] = await db.query<{ summary: string; summary_fence: string }>`select summary, summary_fence from chats where id = ${chatId}`
      assert.match(chat!.summary, /^a summary of: Capital of France\?/)
      assert.equal(chat!.summary_fence.length, 40)
    })

    it('fences: checking a fence in SQL', async () => {
      const summaries = store.lock('summaries', { ttl: '30s' })
      const results: Array<'wrote' | 'late'> = []
      const [{ summary_fence: before }] = (await db.query<{ summary_fence: string }>`select summary_fence from chats where id = ${chatId}`) as [{ summary_fence: string }]

      await summaries.hold(chatId, async lease => {
      	const summary = await model.summarize(await history(chatId))
      	const fence = lease.fence.toString().padStart(40, '0')
      	const done = await db.exec`update chats set summary = ${summary}, summary_fence = ${fence}
      		where id = ${chatId} and summary_fence < ${fence}`
      	if (done.changes === 0) return // a later holder already wrote
      	results.push('wrote')
      })

      // A stale fence (below the stored one) changes no row.
      const stale = before
      const done = await db.exec`update chats set summary = ${'late'}, summary_fence = ${stale}
        where id = ${chatId} and summary_fence < ${stale}`
      if (done.changes === 0) results.push('late')
      assert.deepEqual(results, ['wrote', 'late'])
    })
  })
}
