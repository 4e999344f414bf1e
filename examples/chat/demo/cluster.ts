// A cluster for `make demo-cluster`: three etcd members (Debian's
// etcd-server) and three NATS servers with JetStream (Debian's
// nats-server), on free loopback ports, their data in a temporary
// directory, stopped by PID. The app's processes are given its address
// (docs/cluster.md) instead of a store directory.
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'

// Ports below (else above) the kernel's ephemeral range: a port the OS
// picks on listen(0) lies in that range, where any outgoing connection may
// take it as its local port before a server binds it, or while a killed
// server is down before it comes back on it.
const band = ((): [number, number] => {
	let [lo, hi] = [32768, 60999]
	try {
		;[lo, hi] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number) as [number, number]
	} catch {
		// not Linux: the usual range
	}
	return lo >= 3024 ? [Math.max(2024, lo - 20_000), lo] : [hi + 1, 65536]
})()
let nextPort = (process.pid * 7919 + Date.now()) % 1_000_000

/** A loopback port nobody listens on now, outside the ephemeral range; successive calls give different ports. */
async function freePort(): Promise<number> {
	for (let i = 0; i < band[1] - band[0]; i++) {
		const port = band[0] + (nextPort++ % (band[1] - band[0]))
		const s = createServer()
		const ok = await new Promise<boolean>(resolve => {
			s.once('error', () => resolve(false))
			s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)))
		})
		if (ok) return port
	}
	throw new Error(`no free loopback port in ${band[0]}..${band[1]}`)
}

interface Server {
	name: string
	kind: 'etcd' | 'nats'
	port: number
	peerPort: number
	httpPort: number
	child?: ChildProcess
}

/** One etcd cluster and one NATS cluster, three of each, on this machine. */
export class Cluster {
	readonly dir = mkdtempSync(join(tmpdir(), 'tinystore-demo-cluster-'))
	readonly etcd: Server[] = []
	readonly nats: Server[] = []

	constructor() {
		// Also when the demo dies half way: no server outlives it.
		process.on('exit', () => {
			for (const s of [...this.etcd, ...this.nats]) if (s.child?.exitCode === null && s.child.signalCode === null) s.child.kill('SIGKILL')
		})
	}

	/** Starts all six and waits until etcd has a leader and JetStream is healthy. */
	async start(): Promise<void> {
		for (let i = 0; i < 3; i++) {
			this.etcd.push({ name: `etcd-${i + 1}`, kind: 'etcd', port: await freePort(), peerPort: await freePort(), httpPort: 0 })
			this.nats.push({ name: `nats-${i + 1}`, kind: 'nats', port: await freePort(), peerPort: await freePort(), httpPort: await freePort() })
		}
		for (const s of [...this.etcd, ...this.nats]) this.spawn(s, 'new')
		await this.until(async () => (await this.etcdLeader()) !== undefined, 'etcd to elect a leader')
		for (const s of this.nats) await this.until(() => this.healthy(s), `${s.name} to be healthy`)
	}

	/** The store's address: every member and server, under `prefix`. */
	address(prefix: string): string {
		const etcd = this.etcd.map(s => `127.0.0.1:${s.port}`).join(',')
		const nats = this.nats.map(s => `nats://127.0.0.1:${s.port}`).join(',')
		return `etcd://${etcd}/${prefix}?nats=${nats}`
	}

	private spawn(s: Server, state: 'new' | 'existing') {
		const log = openSync(join(this.dir, `${s.name}.log`), 'a')
		if (s.kind === 'etcd') {
			const initial = this.etcd.map(m => `${m.name}=http://127.0.0.1:${m.peerPort}`).join(',')
			s.child = spawn('etcd', [
				'--name', s.name, '--data-dir', join(this.dir, s.name),
				'--listen-client-urls', `http://127.0.0.1:${s.port}`, '--advertise-client-urls', `http://127.0.0.1:${s.port}`,
				'--listen-peer-urls', `http://127.0.0.1:${s.peerPort}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${s.peerPort}`,
				'--initial-cluster', initial, '--initial-cluster-state', state, '--initial-cluster-token', `demo-${process.pid}`,
			], { stdio: ['ignore', log, log] })
		} else {
			const routes = this.nats.map(m => `nats-route://127.0.0.1:${m.peerPort}`).join(', ')
			const store = join(this.dir, s.name)
			mkdirSync(store, { recursive: true })
			const conf = join(this.dir, `${s.name}.conf`)
			writeFileSync(conf, `server_name: ${s.name}\nlisten: 127.0.0.1:${s.port}\nhttp: 127.0.0.1:${s.httpPort}\nmax_payload: 2MB\n` +
				`jetstream { store_dir: ${JSON.stringify(store)}, max_memory_store: 8GB, max_file_store: 16MB }\n` +
				`cluster { name: demo, listen: 127.0.0.1:${s.peerPort}, routes: [${routes}] }\n`)
			s.child = spawn('nats-server', ['-c', conf], { stdio: ['ignore', log, log] })
		}
		s.child.once('error', err => {
			console.error(`could not start ${s.kind === 'etcd' ? 'etcd' : 'nats-server'} (${err.message}): apt-get install etcd-server etcd-client nats-server`)
			process.exit(1)
		})
	}

	private async until(ok: () => Promise<boolean>, what: string) {
		for (let i = 0; i < 300; i++) {
			if (await ok().catch(() => false)) return
			await sleep(100)
		}
		throw new Error(`waited 30 s for ${what}; logs in ${this.dir}`)
	}

	private async healthy(s: Server): Promise<boolean> {
		const r = await fetch(`http://127.0.0.1:${s.httpPort}/healthz`, { signal: AbortSignal.timeout(2000) })
		return r.ok
	}

	/** The etcd member that leads now, as etcdctl tells. */
	async etcdLeader(): Promise<Server | undefined> {
		const live = this.etcd.filter(s => s.child && s.child.exitCode === null && s.child.signalCode === null)
		const { stdout } = await promisify(execFile)('etcdctl', ['--endpoints', live.map(s => `http://127.0.0.1:${s.port}`).join(','), 'endpoint', 'status', '-w', 'json'], {
			env: { ...process.env, ETCDCTL_API: '3' },
			timeout: 5000,
		})
		const rows = JSON.parse(stdout) as { Endpoint: string; Status: { header: { member_id: number }; leader: number } }[]
		const leader = rows.find(r => r.Status.header.member_id === r.Status.leader)
		return leader && live.find(s => leader.Endpoint.endsWith(`:${s.port}`))
	}

	/** kill -9 of `s`, then starts it again on its data (for NATS: its memory streams' replicas are gone). */
	async kill9AndRestart(s: Server): Promise<number> {
		const t = Date.now()
		const exited = once(s.child!, 'exit')
		s.child!.kill('SIGKILL')
		await exited
		await sleep(1000)
		this.spawn(s, 'existing')
		if (s.kind === 'nats') await this.until(() => this.healthy(s), `${s.name} to be healthy again`)
		else await this.until(async () => (await this.etcdLeader()) !== undefined, 'etcd to have a leader again')
		return Date.now() - t
	}

	/** Stops all six by PID and removes their data. */
	async stop(): Promise<void> {
		for (const s of [...this.etcd, ...this.nats]) {
			if (!s.child || s.child.exitCode !== null || s.child.signalCode !== null) continue
			const exited = once(s.child, 'exit')
			s.child.kill('SIGTERM')
			const timer = setTimeout(() => s.child!.kill('SIGKILL'), 5000)
			await exited
			clearTimeout(timer)
		}
		rmSync(this.dir, { recursive: true, force: true })
	}
}
