// A browser tab without the browser, for the demo and the tests: it listens
// to one chat's event stream on one web process and keeps the chat as the
// page does (a `message` event loads what is new; `reload` loads it all),
// reconnecting like EventSource when its web process goes away.
import { EventEmitter } from 'node:events'
import { setTimeout as sleep } from 'node:timers/promises'

import type { ChatMessage, TabEvent } from '../web/chat.js'

/** GET or POST JSON on a web process. */
export async function api<T>(port: number, path: string, body?: unknown): Promise<T> {
	const res = await fetch(`http://127.0.0.1:${port}${path}`, {
		method: body === undefined ? 'GET' : 'POST',
		headers: body === undefined ? {} : { 'content-type': 'application/json' },
		body: body === undefined ? undefined : JSON.stringify(body),
	})
	if (!res.ok) throw new Error(`${res.status} from ${path}: ${await res.text()}`)
	return (await res.json()) as T
}

/** Calls `call` on each of `ports` in turn until one answers: a web process may be away for a moment. */
export async function onAny<T>(ports: number[], call: (port: number) => Promise<T>): Promise<T> {
	for (let tries = 0; ; tries++) {
		try {
			return await call(ports[tries % ports.length]!)
		} catch (err) {
			if (tries >= 100) throw err
			await sleep(100)
		}
	}
}

/** Posts a user's message as the page does: again (same clientId) until saved. */
export function say(ports: number[], chatId: number, text: string, clientId: string): Promise<number> {
	return onAny(ports, async port => (await api<{ id: number }>(port, `/api/chats/${chatId}/messages`, { text, clientId })).id)
}

/** Starts a chat; `source` names the corpus file it replays, if any. */
export function newChat(ports: number[], title: string, source = ''): Promise<number> {
	return onAny(ports, async port => (await api<{ id: number }>(port, '/api/chats', { title, source })).id)
}

export class Tab extends EventEmitter {
	/** The chat as this tab shows it, by message id. */
	readonly view = new Map<number, ChatMessage>()
	/** Events delivered to this tab, and how many of them were `reload`. */
	delivered = 0
	reloads = 0
	/** How many times its stream connected. */
	connects = 0
	#last = 0
	#running: Promise<void> | null = null
	#again: boolean | null = null
	#abort = new AbortController()
	#ready: Promise<void>

	constructor(readonly name: string, readonly chatId: number, readonly port: number) {
		super()
		this.#ready = new Promise(resolve => this.once('reloaded', resolve))
		this.#listen()
	}

	/** Resolves once the stream is up and the chat loaded. */
	ready(): Promise<void> {
		return this.#ready
	}

	close() {
		this.#abort.abort()
	}

	/** Resolves when `test(view)` holds, or rejects after `ms`. */
	until(test: (view: Map<number, ChatMessage>) => boolean, ms: number): Promise<void> {
		if (test(this.view)) return Promise.resolve()
		return new Promise((resolve, reject) => {
			const check = () => {
				if (!test(this.view)) return
				clearTimeout(timer)
				this.off('change', check)
				resolve()
			}
			const timer = setTimeout(() => {
				this.off('change', check)
				reject(new Error(`${this.name}: not within ${ms} ms`))
			}, ms)
			this.on('change', check)
		})
	}

	async #listen() {
		const signal = this.#abort.signal
		while (!signal.aborted) {
			try {
				const res = await fetch(`http://127.0.0.1:${this.port}/api/chats/${this.chatId}/events`, { signal })
				if (!res.ok || !res.body) throw new Error(`${res.status}`)
				this.connects++
				let buffer = ''
				for await (const chunk of res.body.pipeThrough(new TextDecoderStream())) {
					buffer += chunk
					let end: number
					while ((end = buffer.indexOf('\n\n')) >= 0) {
						const data = buffer.slice(0, end).split('\n').find(l => l.startsWith('data: '))
						buffer = buffer.slice(end + 2)
						if (data) this.#on(JSON.parse(data.slice(6)) as TabEvent)
					}
				}
			} catch {}
			if (!signal.aborted) await sleep(500) // EventSource's retry, as the server asks
		}
	}

	#on(event: TabEvent) {
		this.delivered++
		if (event.kind === 'reload') this.reloads++
		this.#refresh(event.kind === 'reload')
	}

	// One load at a time; events that come meanwhile fold into one more.
	#refresh(all: boolean) {
		if (this.#abort.signal.aborted) return // closed
		if (this.#running) {
			this.#again = this.#again === null ? all : this.#again || all
			return
		}
		this.#running = this.#load(all)
			.catch(async () => {
				await sleep(200) // its web process is away: again
				this.#again ??= all
			})
			.finally(() => {
				this.#running = null
				const next = this.#again
				this.#again = null
				if (next !== null) this.#refresh(next)
			})
	}

	async #load(all: boolean) {
		const after = all ? 0 : this.#last
		const messages = await api<ChatMessage[]>(this.port, `/api/chats/${this.chatId}/messages?after=${after}`)
		if (all) {
			this.view.clear()
			this.#last = 0
		}
		for (const m of messages) {
			this.view.set(m.id, m)
			this.#last = Math.max(this.#last, m.id)
		}
		if (all) this.emit('reloaded')
		this.emit('change')
	}
}
