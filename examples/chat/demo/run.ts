// `make demo`: the chat app of the seeds on real conversations.
//
// Starts four web processes, the reply worker and two summary workers on a
// fresh store in ./data (each process simply opens the directory; the first
// owns it), replays the dialogues of chatterbot-corpus through the HTTP API
// with two open tabs per chat, breaks things on the way, checks that
// nothing saved was lost and that every tab shows the whole chat, prints
// what happened and stops everything.
//
//   node dist/demo/run.js [--store data] [--web 4] [--users 12] [--limit 120] [--ttl 3s] [--cluster]
//
// With --cluster (`make demo-cluster`) the same processes, unchanged, are
// given a cluster store's address instead of a directory: a 3-member etcd
// cluster and a 3-node NATS JetStream cluster started here (demo/cluster.ts);
// their SQL database is a file on this machine (data-cluster/). Nobody owns
// a cluster store, so the faults are the servers': a kill -9 of a NATS
// server at a quarter of the replay and of etcd's leader at three quarters
// (each started again), the reply worker at half, the frozen summary worker
// as above.
//
// The faults: at a quarter of the replay the process that owns the store is
// killed (SIGKILL), at half the reply worker, at three quarters whichever
// process owns the store then; the first summary worker seen
// summarizing (unless it owns the store) is frozen (SIGSTOP) past its
// lease's ttl, until the other worker took the key and wrote.
import { execFile } from 'node:child_process'
import { rmSync } from 'node:fs'
import { resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs, promisify } from 'node:util'

import type { Chat, ChatMessage } from '../web/chat.js'
import { Cluster } from './cluster.js'
import { appDir, kinds, Supervisor, type Proc, type ProcEvent } from './processes.js'
import { api, newChat, say, Tab } from './tab.js'

const { values: opts } = parseArgs({
	options: {
		store: { type: 'string', default: 'data' },
		web: { type: 'string', default: '4' },
		users: { type: 'string', default: '12' },
		limit: { type: 'string', default: '120' },
		ttl: { type: 'string', default: '3s' },
		port: { type: 'string', default: '8101' },
		cluster: { type: 'boolean', default: false },
	},
})
const cluster = opts.cluster ? new Cluster() : undefined
const webCount = Number(opts.web)
const ports = Array.from({ length: webCount }, (_, i) => Number(opts.port) + i)
const ttlMs = Number.parseFloat(opts.ttl) * (opts.ttl.endsWith('ms') ? 1 : 1000)
const t0 = Date.now()
const secs = (t = Date.now()) => ((t - t0) / 1000).toFixed(1).padStart(5) + ' s'
const n = (x: number) => x.toLocaleString('en')
const log: string[] = [] // what happened, for the report

interface Source {
	source: string
	language: string
	topic: string
	lines: string[]
}

async function corpus(): Promise<Source[]> {
	const { stdout } = await promisify(execFile)('.venv/bin/python', ['reply/corpus.py', '--limit', opts.limit], {
		cwd: appDir,
		maxBuffer: 1 << 28,
	})
	return JSON.parse(stdout)
}

// ---- start -----------------------------------------------------------------

let dir = resolve(appDir, opts.store)
if (cluster) {
	// The SQL database of a cluster store is a file on this machine.
	const sqlDir = resolve(appDir, 'data-cluster')
	rmSync(sqlDir, { recursive: true, force: true })
	process.env.TINYSTORE_CLUSTER_SQL_DIR = sqlDir
	await cluster.start()
	dir = cluster.address(`chat-demo-${Date.now()}`)
	console.log(`tinystore chat demo on a cluster store: ${dir}\n  (etcd ${cluster.etcd.length} members, NATS ${cluster.nats.length} servers, data in ${cluster.dir}; the SQL database in data-cluster/), logs in demo.log`)
} else {
	rmSync(dir, { recursive: true, force: true })
	console.log(`tinystore chat demo: a fresh store in ${opts.store}/, logs in demo.log`)
}
rmSync(resolve(appDir, 'demo.log'), { force: true })
const sup = new Supervisor(dir, resolve(appDir, 'demo.log'))
const sources = (await corpus()).sort((a, b) => b.lines.length - a.lines.length || a.source.localeCompare(b.source))
const totalLines = sources.reduce((s, c) => s + c.lines.length, 0)

for (const [i, port] of ports.entries()) await sup.start(kinds.web(i + 1, port))
const reply = await sup.start(kinds.reply())
const summaryEnv = { SUMMARY_TTL: opts.ttl, MODEL_LATENCY: '1s' }
const summarizers = [await sup.start(kinds.summary(1, summaryEnv)), await sup.start(kinds.summary(2, summaryEnv))]
const firstOwner = cluster ? undefined : await sup.owner()
console.log(
	`started: ${sup.procs.map(p => `${p.name} (pid ${p.pid})`).join(', ')}; ` +
		(cluster ? 'each connected to the cluster store' : `${firstOwner?.name ?? 'nobody'} owns the store, the others connected to it`),
)
console.log(`replaying chatterbot-corpus: ${sources.length} chats, ${n(totalLines)} lines, ${opts.users} users at once, two tabs each`)

// What the processes said.
const summaryEvents: (ProcEvent & { proc: string })[] = []
let workerMisses = 0
sup.on('event', (proc: Proc, ev: ProcEvent) => {
	if (['summarizing', 'written', 'stale'].includes(ev.event)) summaryEvents.push({ ...ev, proc: proc.name })
	if (ev.event === 'missed') workerMisses++
})
sup.on('restarted', (proc: Proc) => log.push(`${secs()}  ${proc.name} started again (pid ${proc.pid})`))
sup.on('failed', (proc: Proc, err: Error) => log.push(`${secs()}  ${proc.name} failed to start again: ${err.message}`))

// ---- faults ----------------------------------------------------------------

async function kill(victim: Proc | undefined, why: string) {
	if (!victim) return
	const owner = cluster ? undefined : await sup.owner().catch(() => undefined)
	const restarted = new Promise<void>(ok => sup.on('restarted', p => p === victim && ok()))
	const open = new Map(tabs.map(t => [t, t.reloads])) // the tabs open now, and their reloads so far
	const t = Date.now()
	log.push(`${secs()}  killed ${victim.name} (pid ${victim.pid}, SIGKILL)${owner === victim ? ', the owner of the store' : ''}: ${why}`)
	victim.signal('SIGKILL')
	await restarted
	const after = cluster ? undefined : await sup.owner().catch(() => undefined)
	log.push(`         ${victim.name} back after ${((Date.now() - t) / 1000).toFixed(1)} s${cluster ? '' : `; ${after?.name ?? '?'} owns the store`}`)
	await sleep(3000)
	const reloaded = [...open].filter(([t, before]) => t.reloads > before).length
	if (reloaded > 0) log.push(`         ${reloaded} of the ${open.size} open tabs reloaded in the 3 s after`)
}

// On a cluster store: a kill -9 of one of its servers, started again.
async function killServer(which: 'nats' | 'etcd', why: string) {
	const victim = which === 'nats' ? cluster!.nats[0]! : await cluster!.etcdLeader().catch(() => undefined)
	if (!victim) {
		log.push(`${secs()}  found no etcd leader to kill: ${why}`)
		return
	}
	const open = new Map(tabs.map(t => [t, t.reloads]))
	log.push(`${secs()}  killed ${victim.name} (pid ${victim.child?.pid}, SIGKILL)${which === 'etcd' ? ", etcd's leader" : ', a NATS server'}: ${why}`)
	const took = await cluster!.kill9AndRestart(victim)
	log.push(`         ${victim.name} back after ${(took / 1000).toFixed(1)} s${which === 'etcd' ? `; ${(await cluster!.etcdLeader().catch(() => undefined))?.name ?? '?'} leads` : ''}`)
	await sleep(3000)
	const reloaded = [...open].filter(([t, before]) => t.reloads > before).length
	if (reloaded > 0) log.push(`         ${reloaded} of the ${open.size} open tabs reloaded in the 3 s after`)
}

let froze = false
sup.on('event', async (proc: Proc, ev: ProcEvent) => {
	if (froze || ev.event !== 'summarizing' || !summarizers.includes(proc)) return
	froze = true
	if ((cluster ? undefined : await sup.owner().catch(() => proc)) === proc || summaryEvents.some(e => e.pid === ev.pid && e.chat === ev.chat && e.event !== 'summarizing')) {
		froze = false // it owns the store (freezing it freezes everyone), or it was done already: the next one
		return
	}
	const other = summarizers.find(p => p !== proc)!
	const wrote = new Promise<ProcEvent>(ok =>
		other.on('event', e => e.event === 'written' && e.chat === ev.chat && ok(e)),
	)
	const woke = new Promise<ProcEvent>(ok => proc.on('event', e => e.event === 'stale' && e.chat === ev.chat && ok(e)))
	proc.signal('SIGSTOP')
	log.push(`${secs()}  froze ${proc.name} (pid ${proc.pid}, SIGSTOP) while it summarized chat ${ev.chat} with fence ${ev.fence}`)
	const written = await Promise.race([wrote, sleep(ttlMs * 6).then(() => undefined)])
	log.push(
		written
			? `${secs()}  its lease ran out (ttl ${opts.ttl}); ${other.name} took the key with fence ${written.fence} and wrote the summary`
			: `${secs()}  nobody else wrote chat ${ev.chat} within ${(ttlMs * 6) / 1000} s`,
	)
	proc.signal('SIGCONT')
	const stale = await Promise.race([woke, sleep(10_000).then(() => undefined)])
	log.push(
		`${secs()}  woke ${proc.name}: ` +
			(stale?.by === 'fence'
				? `its write with fence ${ev.fence} was refused by the fence check (no row changed)`
				: stale?.by === 'lease'
					? `its write was refused before it reached the database: its lease was lost`
					: 'it wrote nothing we heard of'),
	)
})

// ---- replay ----------------------------------------------------------------

const tabs: Tab[] = []
const saved = new Map<number, number>() // user message id -> chat id, as the POSTs answered
const latencies: number[] = []
let posted = 0
let unanswered = 0
const faults: Promise<void>[] = []
const progress = new Set([0.25, 0.5, 0.75])

async function user(s: Source, k: number) {
	const chatId = await newChat(ports, `${s.language}: ${s.topic}`, s.source)
	const laptop = new Tab(`chat ${chatId} laptop`, chatId, ports[k % webCount]!)
	const phone = new Tab(`chat ${chatId} phone`, chatId, ports[(k + 1) % webCount]!)
	tabs.push(laptop, phone)
	await Promise.all([laptop.ready(), phone.ready()])
	for (const [i, text] of s.lines.entries()) {
		const t = Date.now()
		const id = await say([laptop.port, ...ports], chatId, text, `${chatId}-${i}`)
		saved.set(id, chatId)
		try {
			await laptop.until(view => [...view.values()].some(m => m.reply_to === id), 20_000)
			latencies.push(Date.now() - t)
		} catch {
			unanswered++
		}
		posted++
		for (const p of progress) {
			if (posted < p * totalLines) continue
			progress.delete(p)
			console.log(`${secs()}  ${Math.round(p * 100)}% of the lines posted`)
			if (p === 0.25) faults.push(cluster ? killServer('nats', 'a quarter of the replay') : kill(await sup.owner().catch(() => undefined), 'a quarter of the replay'))
			if (p === 0.5) faults.push(kill(reply, 'half of the replay'))
			if (p === 0.75) faults.push(cluster ? killServer('etcd', 'three quarters of the replay') : kill(await sup.owner().catch(() => undefined), 'three quarters of the replay'))
		}
	}
}

const queue = [...sources.entries()]
await Promise.all(
	Array.from({ length: Number(opts.users) }, async () => {
		for (let next = queue.shift(); next; next = queue.shift()) await user(next[1], next[0])
	}),
)
const replayed = Date.now()
console.log(`${secs()}  every line posted`)
await Promise.all(faults)

// ---- check -----------------------------------------------------------------

// Summaries: every chat past 100 messages gets one (wait for the workers).
let chats: Chat[] = []
for (let i = 0; i < 100; i++) {
	chats = await api<Chat[]>(ports[0]!, '/api/chats')
	if (chats.every(c => c.messages <= 100 || c.summary !== null)) break
	await sleep(300)
}
// Every tab ends up showing exactly what the database has.
const truth = new Map<number, ChatMessage[]>()
for (const c of chats) truth.set(c.id, await api<ChatMessage[]>(ports[0]!, `/api/chats/${c.id}/messages`))
const same = (t: Tab) => {
	const db = truth.get(t.chatId)!
	return t.view.size === db.length && db.every(m => t.view.has(m.id))
}
await Promise.all(tabs.map(t => t.until(() => same(t), 10_000).catch(() => {})))
const allMessages = [...truth.values()].flat()
const userMessages = allMessages.filter(m => m.role === 'user')
const replies = allMessages.filter(m => m.role === 'assistant')
const ids = new Set(allMessages.map(m => m.id))
const lost = [...saved.keys()].filter(id => !ids.has(id))
const answers = new Map<number, number>()
for (const r of replies) answers.set(r.reply_to!, (answers.get(r.reply_to!) ?? 0) + 1)
const answeredOnce = answers.size === userMessages.length && userMessages.every(u => answers.get(u.id) === 1)
const inSync = tabs.filter(same).length

// ---- report ----------------------------------------------------------------

const languages = new Set(sources.map(s => s.language))
latencies.sort((a, b) => a - b)
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? 0
const deliveries = tabs.map(t => t.delivered).sort((a, b) => a - b)
const median = (xs: number[]) => xs[Math.floor(xs.length / 2)] ?? 0
const written = summaryEvents.filter(e => e.event === 'written')
const stale = summaryEvents.filter(e => e.event === 'stale')

console.log(`
== Report ==================================================================

Corpus     chatterbot-corpus: ${sources.length} chats in ${languages.size} languages, ${n(totalLines)} lines
Replay     ${((replayed - t0) / 1000).toFixed(1)} s; ${n(posted)} lines posted by ${opts.users} users at once; reply seen in the tab after ${pct(0.5)} ms (median), ${pct(0.99)} ms (p99)
Chats      ${chats.length}; messages ${n(allMessages.length)} (${n(userMessages.length)} from users, ${n(replies.length)} replies)
Saved      ${n(saved.size)} messages saved by a POST; lost: ${lost.length}; every user message answered exactly once: ${answeredOnce ? 'yes' : 'NO'}${unanswered ? ` (${unanswered} replies came after 20 s)` : ''}
Tabs       ${tabs.length} (a laptop and a phone per chat, on different web processes); events delivered per tab: min ${deliveries[0]}, median ${median(deliveries)}, max ${deliveries.at(-1)}, ${n(deliveries.reduce((a, b) => a + b, 0))} in all
           reloads: ${n(tabs.reduce((s, t) => s + t.reloads, 0))} (one as each stream starts, more where events were missed); reconnects: ${n(tabs.reduce((s, t) => s + t.connects - 1, 0))}
           showing exactly the database at the end: ${inSync} of ${tabs.length}
Workers    reply worker told of missed events ${workerMisses} times (it then looked in the database)

What happened
${log.map(l => '  ' + l).join('\n')}

Summaries  ${written.length} written (chats past 100 messages: ${chats.filter(c => c.messages > 100).length}); stale writes refused: ${stale.length}
${chats
	.filter(c => c.summary !== null)
	.map(c => `  chat ${String(c.id).padStart(3)} ${c.title.padEnd(34)} ${String(c.messages).padStart(4)} msgs  fence ${c.summary_fence}`)
	.join('\n')}
${stale.map(e => `  refused: ${e.proc} (pid ${e.pid}) on chat ${e.chat} with fence ${e.fence}, ${e.by === 'fence' ? 'by the fence check: no row changed' : 'before the write: its lease was lost'}`).join('\n')}

Per tab    (chat, tab, web port: events delivered / reloads)
${chunk(tabs.map(t => `${t.name.replace('chat ', '#')}@${t.port}: ${t.delivered}/${t.reloads}`), 4)}
`)

function chunk(items: string[], perLine: number): string {
	const lines: string[] = []
	for (let i = 0; i < items.length; i += perLine) lines.push('  ' + items.slice(i, i + perLine).map(s => s.padEnd(30)).join(''))
	return lines.join('\n')
}

// ---- stop ------------------------------------------------------------------

for (const t of tabs) t.close()
await sup.stopAll()
await cluster?.stop()
const codes = sup.procs.map(p => `${p.name} ${p.child.exitCode ?? p.child.signalCode}`)
console.log(`Stopped    ${codes.join(', ')}`)
const ok = lost.length === 0 && answeredOnce && inSync === tabs.length && chats.every(c => c.messages <= 100 || c.summary !== null)
console.log(ok ? 'OK: nothing saved was lost, every tab shows the whole chat' : 'FAILED: see above')
process.exit(ok ? 0 : 1)
