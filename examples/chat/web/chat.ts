// The chat, as the seeds write it: chat-events under each chat's id, a
// message saved and announced in one transaction, and a stream per open tab
// that forwards each event and says `reload` when it missed some.
import { fileURLToPath } from 'node:url'

import { open, type Database, type Store } from 'tinystore'

export interface ChatEvent {
	kind: 'message'
	id: number
}

/** What a tab is sent: a chat event, or `reload` (load the chat again from the database). */
export type TabEvent = ChatEvent | { kind: 'reload' }

export interface Chat {
	id: number
	title: string
	source: string
	messages: number
	summary: string | null
	summary_fence: string
}

export interface ChatMessage {
	id: number
	role: 'user' | 'assistant'
	text: string
	created_at: number
	reply_to: number | null
}

const chatRows = `select c.id, c.title, c.source, c.summary, c.summary_fence,
	(select count(*) from messages m where m.chat_id = c.id) as messages
	from chats c`

const migrations = fileURLToPath(new URL('../../migrations', import.meta.url))

/** Opens the store directory (owning it, or connecting to the process that does) and the chat database. */
export async function openChat(dir: string) {
	const store: Store = await open(dir)
	const db: Database = await store.database('chat', { migrations })
	const events = store.channel<ChatEvent>('chat-events')

	/** Saves a user's message and tells the chat's tabs (and the reply worker), at commit. */
	async function post(chatId: number, text: string, clientId: string | null): Promise<number> {
		return db.tx(async tx => {
			const saved = await tx.exec`insert into messages (chat_id, role, text, created_at, client_id)
				values (${chatId}, 'user', ${text}, ${Date.now()}, ${clientId})
				on conflict (client_id) do nothing`
			if (saved.changes === 0) {
				// The same message posted again (a retry): it was saved and announced already.
				const [first] = await tx.query<{ id: number }>`select id from messages where client_id = ${clientId}`
				return first!.id
			}
			await tx.with(events).under(chatId).publish({ kind: 'message', id: saved.lastInsertRowid })
			return saved.lastInsertRowid
		})
	}

	/** The chat's messages after `after` (all of them from 0), oldest first. */
	function history(chatId: number, after = 0): Promise<ChatMessage[]> {
		return db.query<ChatMessage>`select id, role, text, created_at, reply_to from messages
			where chat_id = ${chatId} and id > ${after} order by id`
	}

	/**
	 * Forwards the chat's events to one tab until `closed`. `send` may return a
	 * promise (a tab on a slow network): the next event waits for it, and a tab
	 * that falls behind the branch's log is told `reload` (CHAN-02).
	 */
	async function stream(chatId: number, send: (data: TabEvent) => unknown, closed: Promise<void>) {
		const sub = await events.under(chatId).subscribe(m => send(m.value), {
			onMissed: () => send({ kind: 'reload' }),
		})
		// Subscribed: from now on nothing is missed unsaid, so the tab loads the chat now.
		send({ kind: 'reload' })
		await closed // the browser went away
		await sub.stop()
	}

	async function createChat(title: string, source: string): Promise<number> {
		const done = await db.exec`insert into chats (title, source, created_at) values (${title}, ${source}, ${Date.now()})`
		return done.lastInsertRowid
	}

	function chats(): Promise<Chat[]> {
		return db.query<Chat>(`${chatRows} order by c.id`)
	}

	async function chat(chatId: number): Promise<Chat | undefined> {
		const [found] = await db.query<Chat>(`${chatRows} where c.id = ?`, chatId)
		return found
	}

	return { store, db, events, post, history, stream, createChat, chats, chat }
}

export type ChatApp = Awaited<ReturnType<typeof openChat>>
