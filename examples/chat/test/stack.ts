// The app's processes on a fresh store directory, for a test.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { kinds, Supervisor, type Proc, type ProcEvent } from '../demo/processes.js'

export interface Stack {
	sup: Supervisor
	dir: string
	ports: number[]
	webs: Proc[]
	reply?: Proc
	summarizers: Proc[]
	close(): Promise<void>
}

/** Starts `web` web processes (the first owns the store), the reply worker, and `summaries` summary workers. */
export async function stack(o: { web: number; reply?: boolean; summaries?: number; env?: Record<string, string> }): Promise<Stack> {
	const dir = mkdtempSync(join(tmpdir(), 'chat-test-'))
	const sup = new Supervisor(join(dir, 'store'), join(dir, 'processes.log'))
	const base = 20_000 + Math.floor(Math.random() * 20_000)
	const ports = Array.from({ length: o.web }, (_, i) => base + i)
	const webs: Proc[] = []
	for (const [i, port] of ports.entries()) webs.push(await sup.start(kinds.web(i + 1, port)))
	const reply = o.reply ? await sup.start(kinds.reply()) : undefined
	const summarizers: Proc[] = []
	for (let i = 1; i <= (o.summaries ?? 0); i++) summarizers.push(await sup.start(kinds.summary(i, o.env)))
	return {
		sup,
		dir,
		ports,
		webs,
		reply,
		summarizers,
		async close() {
			await sup.stopAll()
			rmSync(dir, { recursive: true, force: true })
		},
	}
}

/** The next event `proc` prints that passes `test`. */
export function nextEvent(proc: Proc, test: (e: ProcEvent) => boolean, ms = 20_000): Promise<ProcEvent> {
	return new Promise((resolve, reject) => {
		const on = (e: ProcEvent) => {
			if (!test(e)) return
			clearTimeout(timer)
			proc.off('event', on)
			resolve(e)
		}
		const timer = setTimeout(() => {
			proc.off('event', on)
			reject(new Error(`${proc.name} said nothing like that within ${ms} ms`))
		}, ms)
		proc.on('event', on)
	})
}
