// The app's processes together: web processes sharing one store, the reply
// worker, the summary workers, and the faults the demo shows.
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'

import { api, newChat, say, Tab } from '../demo/tab.js'
import type { Chat, ChatMessage } from '../web/chat.js'
import { nextEvent, stack, type Stack } from './stack.js'

const messagesOf = (port: number, chatId: number) => api<ChatMessage[]>(port, `/api/chats/${chatId}/messages`)
const sameAs = (db: ChatMessage[]) => (view: Map<number, ChatMessage>) => view.size === db.length && db.every(m => view.has(m.id))

describe('two web processes and the reply worker', () => {
	let s: Stack
	before(async () => {
		s = await stack({ web: 2, reply: true })
	})
	after(() => s.close())

	test('CHAN-03 STORE-01 a message posted on one web process reaches the tabs of both, then its reply', async () => {
		const chatId = await newChat([s.ports[0]!], 'test', 'english/greetings')
		const tabs = [new Tab('a', chatId, s.ports[0]!), new Tab('b', chatId, s.ports[1]!)]
		await Promise.all(tabs.map(t => t.ready()))
		const t = Date.now()
		const id = await say([s.ports[0]!], chatId, 'Hello', 'c1')
		await Promise.all(tabs.map(tab => tab.until(v => [...v.values()].some(m => m.reply_to === id && m.text === 'Hi'), 1000)))
		assert.ok(Date.now() - t < 1000)
		for (const tab of tabs) {
			assert.deepEqual([...tab.view.values()].map(m => [m.role, m.text]), [['user', 'Hello'], ['assistant', 'Hi']])
			tab.close()
		}
	})

	test('a message posted twice with one clientId is saved once', async () => {
		const chatId = await newChat([s.ports[0]!], 'test', 'english/greetings')
		const a = await say([s.ports[0]!], chatId, 'Hi', 'same')
		const b = await say([s.ports[1]!], chatId, 'Hi', 'same')
		assert.equal(a, b)
		assert.equal((await messagesOf(s.ports[0]!, chatId)).filter(m => m.role === 'user').length, 1)
	})

	test('the reply worker killed answers every message saved meanwhile, once, after its restart', async () => {
		const chatId = await newChat([s.ports[0]!], 'test', 'english/greetings')
		const restarted = new Promise(ok => s.sup.once('restarted', ok))
		s.reply!.signal('SIGKILL')
		const ids: number[] = []
		for (const [i, text] of ['Hello', 'Hi', 'Greetings!'].entries()) ids.push(await say(s.ports, chatId, text, `k${i}`))
		await restarted
		const tab = new Tab('a', chatId, s.ports[1]!)
		await tab.until(v => ids.every(id => [...v.values()].some(m => m.reply_to === id)), 10_000)
		const replies = [...tab.view.values()].filter(m => m.role === 'assistant')
		assert.deepEqual(replies.map(m => m.reply_to), ids)
		tab.close()
	})
})

describe('the owner of the store killed during a replay', () => {
	let s: Stack
	before(async () => {
		s = await stack({ web: 2, reply: true })
	})
	after(() => s.close())

	test('STORE-01 CHAN-04 C6 C8 no saved message is lost, the owner is replaced and the tabs reload', async () => {
		const owner = await s.sup.owner()
		assert.equal(owner, s.webs[0], 'the first process to open the directory owns it')
		const chatId = await newChat([s.ports[1]!], 'test', 'english/conversations')
		const onOwner = new Tab('on the owner', chatId, s.ports[0]!)
		const onOther = new Tab('on the other', chatId, s.ports[1]!)
		await Promise.all([onOwner.ready(), onOther.ready()])
		const saved: number[] = []
		const restarted = new Promise(ok => s.sup.once('restarted', ok))
		for (let i = 0; i < 40; i++) {
			if (i === 10) owner!.signal('SIGKILL')
			saved.push(await say(s.ports, chatId, `line ${i} ✓`, `o${i}`))
		}
		await restarted
		const newOwner = await s.sup.owner()
		assert.ok(newOwner && newOwner !== owner && newOwner.pid !== 0, 'another process owns the store')
		// Every reply comes, and both tabs end up showing exactly the database.
		for (let i = 0; i < 100; i++) {
			const db = await messagesOf(s.ports[1]!, chatId)
			if (db.filter(m => m.role === 'assistant').length === saved.length) break
			await sleep(100)
		}
		const db = await messagesOf(s.ports[1]!, chatId)
		assert.deepEqual(db.filter(m => m.role === 'user').map(m => m.id), saved)
		assert.deepEqual(db.filter(m => m.role === 'assistant').map(m => m.reply_to), saved)
		await Promise.all([onOwner.until(sameAs(db), 10_000), onOther.until(sameAs(db), 10_000)])
		assert.ok(onOwner.connects >= 2, 'the tab of the killed process reconnected')
		assert.ok(onOther.reloads >= 2, 'the tab of the other process was told to reload (reconnect)')
		onOwner.close()
		onOther.close()
	})
})

describe('two summary workers', () => {
	let s: Stack
	before(async () => {
		s = await stack({ web: 1, summaries: 2, env: { SUMMARY_TTL: '1s', MODEL_LATENCY: '1500ms' } })
	})
	after(() => s.close())

	test('FENCE-02 L9 LOCK-05 a summary worker frozen past its ttl has its late write refused', async () => {
		const chatId = await newChat([s.ports[0]!], 'test', 'english/greetings')
		const summarizing = Promise.any(s.summarizers.map(p => nextEvent(p, e => e.event === 'summarizing' && e.chat === chatId).then(e => ({ p, e }))))
		for (let i = 0; i <= 100; i++) await say(s.ports, chatId, `line ${i} of a long chat about fences`, `f${i}`)
		const { p: frozen, e: first } = await summarizing
		frozen.signal('SIGSTOP')
		const other = s.summarizers.find(p => p !== frozen)!
		const written = await nextEvent(other, e => e.event === 'written' && e.chat === chatId)
		const stale = nextEvent(frozen, e => e.event === 'stale' && e.chat === chatId)
		frozen.signal('SIGCONT')
		const refused = await stale
		assert.equal(refused.fence, first.fence)
		assert.ok(BigInt(written.fence as string) > BigInt(first.fence as string), 'the later lease has the larger fence')
		const chat = await api<Chat>(s.ports[0]!, `/api/chats/${chatId}`)
		assert.equal(chat.summary_fence, (written.fence as string).padStart(40, '0'))
		assert.ok(chat.summary?.includes('a long chat about fences'))
	})
})
