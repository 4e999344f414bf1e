// A web process of the chat: the page, the JSON API and one server-sent
// event stream per open tab. Run several (PORT=8101, 8102...): each simply
// opens the same store directory, and the first to open it serves it to the
// others (STORE-01).
//
//   GET  /                          the page: the list of chats
//   GET  /chats/:id                 the page: one chat (?pace=ms: a tab on a slow network)
//   GET  /api/chats                 [{ id, title, source, messages, summary, summary_fence }]
//   POST /api/chats                 { title, source? } -> { id }
//   GET  /api/chats/:id/messages    ?after=id -> [{ id, role, text, created_at, reply_to }]
//   POST /api/chats/:id/messages    { text, clientId? } -> { id }
//   GET  /api/chats/:id/events      text/event-stream of { kind: 'message', id } and { kind: 'reload' }
//   GET  /api/health                { pid, port }
import { once } from 'node:events'
import { readFileSync } from 'node:fs'
import http from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'

import { openChat, type TabEvent } from './chat.js'

const port = Number(process.env.PORT ?? 8080)
const page = readFileSync(new URL('../../web/page.html', import.meta.url))
const app = await openChat(process.env.CHAT_STORE ?? 'data')

class HttpError extends Error {
	constructor(readonly status: number, message: string) {
		super(message)
	}
}

async function body(req: http.IncomingMessage): Promise<Record<string, unknown>> {
	let text = ''
	req.setEncoding('utf8')
	for await (const chunk of req) {
		text += chunk
		if (text.length > 1 << 20) throw new HttpError(413, 'a message is at most 1 MiB')
	}
	try {
		const value = JSON.parse(text)
		if (value && typeof value === 'object') return value
	} catch {}
	throw new HttpError(400, 'send a JSON object')
}

function json(res: http.ServerResponse, status: number, value: unknown) {
	res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' })
	res.end(JSON.stringify(value))
}

async function chatOf(id: string): Promise<number> {
	const chatId = Number(id)
	if (!Number.isSafeInteger(chatId) || !(await app.chat(chatId))) throw new HttpError(404, `no chat ${id}`)
	return chatId
}

/** One tab's event stream: each event as `data: JSON`, paced and with back-pressure. */
function events(res: http.ServerResponse, chatId: number, pace: number) {
	res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-store' })
	res.write('retry: 500\n\n')
	const closed = once(res, 'close').then(() => {})
	let gone = false
	closed.then(() => (gone = true))
	const send = async (data: TabEvent) => {
		if (pace > 0) await sleep(pace) // a slow network: the subscription falls behind
		if (gone) return
		if (!res.write(`data: ${JSON.stringify(data)}\n\n`)) await Promise.race([once(res, 'drain'), closed])
	}
	app.stream(chatId, send, closed).catch(err => {
		console.error(`stream of chat ${chatId}:`, err)
		res.end()
	})
}

async function route(req: http.IncomingMessage, res: http.ServerResponse) {
	const url = new URL(req.url ?? '/', 'http://localhost')
	const path = url.pathname.split('/').filter(Boolean)
	const method = req.method ?? 'GET'
	if (method === 'GET' && (path.length === 0 || (path[0] === 'chats' && path.length === 2))) {
		res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
		return res.end(page)
	}
	if (path[0] !== 'api') throw new HttpError(404, 'not found')
	const [, what, id, sub] = path
	if (what === 'health') return json(res, 200, { pid: process.pid, port })
	if (what !== 'chats') throw new HttpError(404, 'not found')
	if (id === undefined) {
		if (method === 'GET') return json(res, 200, await app.chats())
		if (method === 'POST') {
			const { title, source } = await body(req)
			if (typeof title !== 'string' || title === '') throw new HttpError(400, 'a chat needs a title')
			return json(res, 201, { id: await app.createChat(title, typeof source === 'string' ? source : '') })
		}
	} else if (sub === undefined && method === 'GET') {
		return json(res, 200, await app.chat(await chatOf(id)))
	} else if (sub === 'messages' && method === 'GET') {
		return json(res, 200, await app.history(await chatOf(id), Number(url.searchParams.get('after') ?? 0)))
	} else if (sub === 'messages' && method === 'POST') {
		const chatId = await chatOf(id)
		const { text, clientId } = await body(req)
		if (typeof text !== 'string' || text.trim() === '') throw new HttpError(400, 'a message needs text')
		return json(res, 201, { id: await app.post(chatId, text, typeof clientId === 'string' ? clientId : null) })
	} else if (sub === 'events' && method === 'GET') {
		return events(res, await chatOf(id), Number(url.searchParams.get('pace') ?? 0))
	}
	throw new HttpError(405, `${method} is not served here`)
}

const server = http.createServer((req, res) => {
	route(req, res).catch(err => {
		const status = err instanceof HttpError ? err.status : 500
		if (status === 500) console.error(`${req.method} ${req.url}:`, err)
		if (!res.headersSent) json(res, status, { error: err instanceof Error ? err.message : String(err) })
		else res.end()
	})
})
server.keepAliveTimeout = 60_000
server.listen(port, () => console.log(JSON.stringify({ event: 'ready', pid: process.pid, port })))

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
	process.once(signal, () => {
		server.close()
		server.closeAllConnections() // the event streams: their tabs reconnect elsewhere
		app.store.close().finally(() => process.exit(0))
	})
}
