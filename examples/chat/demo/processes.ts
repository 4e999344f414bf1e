// The app's processes, started and kept running: each prints JSON lines
// (`{"event": "ready", ...}`), and one that dies is started again, as a
// service manager would.
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { EventEmitter, once } from 'node:events'
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

/** The app's folder, examples/chat. */
export const appDir = fileURLToPath(new URL('../..', import.meta.url))
const tinystoreCli = fileURLToPath(new URL('../../../../target/debug/tinystore', import.meta.url))

/** What a process printed: one JSON object per line, with its `event`. */
export interface ProcEvent {
	event: string
	pid: number
	[field: string]: unknown
}

export interface Spec {
	name: string
	command: string
	args: string[]
	env?: Record<string, string>
}

/** How to start each kind of process of the app on the store `dir`. */
export const kinds = {
	web: (n: number, port: number): Spec => ({
		name: `web-${n}`,
		command: process.execPath,
		args: ['dist/web/server.js'],
		env: { PORT: String(port) },
	}),
	reply: (): Spec => ({ name: 'reply', command: '.venv/bin/python', args: ['reply/worker.py'] }),
	summary: (n: number, env: Record<string, string> = {}): Spec => ({
		name: `summary-${n}`,
		command: 'bin/summary',
		args: [],
		env,
	}),
}

/** One process of the app, started again by its supervisor when it dies. */
export class Proc extends EventEmitter {
	child!: ChildProcess
	pid = 0
	starts = 0
	frozen = false
	#stopping = false

	constructor(readonly spec: Spec, private readonly sup: Supervisor) {
		super()
	}

	get name() {
		return this.spec.name
	}

	/** Starts it, resolving once it printed `ready`. */
	async start(): Promise<void> {
		this.starts++
		const child = spawn(this.spec.command, this.spec.args, {
			cwd: appDir,
			env: { ...process.env, CHAT_STORE: this.sup.dir, ...this.spec.env },
			stdio: ['ignore', 'pipe', 'pipe'],
		})
		this.child = child
		this.pid = child.pid ?? 0
		child.stderr!.pipe(this.sup.log, { end: false })
		const ready = new Promise<void>((resolve, reject) => {
			createInterface({ input: child.stdout! }).on('line', line => {
				let ev: ProcEvent
				try {
					ev = JSON.parse(line)
				} catch {
					this.sup.log.write(`${this.name}: ${line}\n`)
					return
				}
				if (ev.event === 'ready') resolve()
				this.emit('event', ev)
				this.sup.emit('event', this, ev)
			})
			child.once('exit', (code, signal) => reject(new Error(`${this.name} exited (${signal ?? code}) before it was ready`)))
		})
		child.once('exit', (code, signal) => {
			this.sup.emit('exit', this, signal ?? code)
			if (!this.#stopping && !this.sup.stopping) {
				// Started again, as a service manager would.
				sleep(300).then(() => this.start().then(() => this.sup.emit('restarted', this), err => this.sup.emit('failed', this, err)))
			}
		})
		await ready
	}

	/** Sends `signal` (SIGKILL, SIGSTOP, SIGCONT...). */
	signal(signal: NodeJS.Signals) {
		this.frozen = signal === 'SIGSTOP' ? true : signal === 'SIGCONT' ? false : this.frozen
		this.child.kill(signal)
	}

	/** Stops it for good: SIGTERM, then SIGKILL after `grace` ms. */
	async stop(grace = 5000): Promise<void> {
		this.#stopping = true
		if (this.child.exitCode !== null || this.child.signalCode !== null) return
		const exited = once(this.child, 'exit')
		if (this.frozen) this.signal('SIGCONT')
		this.child.kill('SIGTERM')
		const timer = setTimeout(() => this.child.kill('SIGKILL'), grace)
		await exited
		clearTimeout(timer)
	}
}

/** Starts the app's processes on the store `dir`, and starts again those that die. */
export class Supervisor extends EventEmitter {
	readonly procs: Proc[] = []
	readonly log: WriteStream
	stopping = false

	constructor(readonly dir: string, logFile: string) {
		super()
		if (!dir.includes('://')) mkdirSync(dir, { recursive: true }) // else a cluster store's address
		this.log = createWriteStream(logFile, { flags: 'a' })
		// Also when the demo dies half way: none of its processes outlives it.
		process.on('exit', () => {
			for (const p of this.procs) if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL')
		})
	}

	async start(spec: Spec): Promise<Proc> {
		const proc = new Proc(spec, this)
		this.procs.push(proc)
		await proc.start()
		return proc
	}

	/** The process that owns the store now, as `tinystore status` tells. */
	async owner(): Promise<Proc | undefined> {
		const { stdout } = await promisify(execFile)(tinystoreCli, ['status', '--json', this.dir], { timeout: 5000 })
		const pid = JSON.parse(stdout).pid as number
		return this.procs.find(p => p.pid === pid)
	}

	/** Stops every process; the store closes with the last one. */
	async stopAll(): Promise<void> {
		this.stopping = true
		await Promise.all(this.procs.map(p => p.stop()))
		await new Promise(resolve => this.log.end(resolve))
	}
}
