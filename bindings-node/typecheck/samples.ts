// The seeds' TypeScript samples as a user's project checks them: each sample
// as written, inside a function that gives it the names it uses. Only the
// app's own helpers (`model`, `history`, `send`) are stubbed. check.sh copies
// this file into a fresh project (nothing but tinystore and typescript
// installed) as an ES module and as a CommonJS one, and runs tsc --strict on
// both. Not run: test/seeds.test.ts runs the samples.
import { open } from 'tinystore'
import type { Database, Lock, Store } from 'tinystore'

// The app's own helpers, stubbed.
const model = { summarize: async (history: string[]): Promise<string> => history.join(' / ') }
async function history(chatId: number): Promise<string[]> {
	return [`chat ${chatId}`]
}
function send(data: unknown): void {
	console.log(data)
}

// Live updates, "Open a channel and a lock", as written:
interface ChatEvent {
	kind: 'message'
	id: number
}

async function liveUpdates(store: Store, db: Database, chatId: number, answer: string, messageId: number) {
const events = store.channel<ChatEvent>('chat-events')
const summaries = store.lock('summaries', { ttl: '30s' })

// "Tell every open tab", as written:
await db.tx(async tx => {
	const reply = await tx.exec`insert into messages (chat_id, role, text, created_at, reply_to)
		values (${chatId}, 'assistant', ${answer}, ${Date.now()}, ${messageId})`
	await tx.with(events).under(chatId).publish({ kind: 'message', id: reply.lastInsertRowid })
})

async function stream(chatId: number, send: (data: unknown) => void, closed: Promise<void>) {
	const sub = await events.under(chatId).subscribe(m => send(m.value), {
		onMissed: () => send({ kind: 'reload' }),
	})
	await closed // the browser went away
	await sub.stop()
}

// "One summary per chat at a time", as written:
async function summarize() {
const started = await summaries.tryHold(chatId, async lease => {
	const summary = await model.summarize(await history(chatId))
	const fence = lease.fence.toString().padStart(40, '0')
	await db.exec`update chats set summary = ${summary}, summary_fence = ${fence}
		where id = ${chatId} and summary_fence < ${fence}`
})
if (!started.acquired) return // another worker is writing this chat's summary
}

await stream(chatId, send, Promise.resolve())
await summarize()
}

// Fences, "Checking a fence in SQL", as written:
async function fences(summaries: Lock, db: Database, chatId: number) {
await summaries.hold(chatId, async lease => {
	const summary = await model.summarize(await history(chatId))
	const fence = lease.fence.toString().padStart(40, '0')
	const done = await db.exec`update chats set summary = ${summary}, summary_fence = ${fence}
		where id = ${chatId} and summary_fence < ${fence}`
	if (done.changes === 0) return // a later holder already wrote
})
}

// What the samples' values are: a fence is a bigint, a transaction gives
// its function's result.
async function results(summaries: Lock, db: Database) {
	const fence: bigint = await summaries.hold(7, async lease => lease.fence)
	const count: number = await db.tx(async tx => (await tx.query`select id from chats`).length)
	const changes: number = (await db.exec`delete from chats`).changes
	return [fence, count, changes]
}

export async function main(): Promise<void> {
	const store = await open('data')
	const db = await store.database('chat')
	await liveUpdates(store, db, 7, 'Paris.', 1)
	await fences(store.lock('summaries'), db, 7)
	await results(store.lock('summaries'), db)
	await store.close()
}
