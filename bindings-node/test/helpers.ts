// Shared by the tests: stores in temporary directories, owned by this
// process, or connected to an owner through its socket, or cluster stores
// on a real 3-member etcd cluster and a real 3-node NATS cluster (its
// channels) this process starts.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { get } from 'node:http'
import { createServer } from 'node:net'

import { after } from 'node:test'

import { connect, open, type Store } from 'tinystore'

/**
 * How a test reaches its store: `owned` (this process owns it),
 * `connected` (through `<dir>/tinystore.sock`, served by an owner handle
 * that closes with the connected one), or `cluster`
 * (`etcd://.../PREFIX?nats=nats://...` on the 3-member etcd cluster of
 * {@link etcdCluster} and the 3-node NATS cluster of {@link natsCluster},
 * the prefix named after the directory, so each store's streams are its
 * own; its SQL databases in the directory).
 */
export type Mode = 'owned' | 'connected' | 'cluster'

/** The modes every contract test runs in. */
export const MODES: readonly Mode[] = ['owned', 'connected']

/**
 * The modes of the lock and fence contracts (docs/contracts.md): also on a
 * cluster store. `TINYSTORE_TEST_MODES=owned,connected` leaves the cluster
 * out (and needs no etcd).
 */
export const LOCK_MODES: readonly Mode[] = (['owned', 'connected', 'cluster'] as const).filter(
  (m) => (process.env.TINYSTORE_TEST_MODES ?? 'owned,connected,cluster').split(',').includes(m),
)

/**
 * The modes of the channel contracts marked "all" (docs/contracts.md):
 * also on a cluster store, its channels on NATS JetStream.
 */
export const CHAN_MODES: readonly Mode[] = LOCK_MODES

/**
 * The request timeout of the tests' cluster stores: on 2 cores beside 6
 * servers a stream's first leader election was seen to take longer than
 * the default 10 s.
 */
export const CLUSTER_TIMEOUT = '30s'

/**
 * The ports {@link freePort} tries: below (else above) the kernel's
 * ephemeral range. A port the OS picks on listen(0) lies in that range,
 * where any outgoing connection (etcdctl's health checks, the members'
 * own) may take it as its local port before the server binds it, and the
 * server then exits with "address already in use".
 */
const PORT_BAND: readonly [number, number] = (() => {
  let [lo, hi] = [32768, 60999]
  try {
    ;[lo, hi] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/).map(Number) as [number, number]
  } catch {
    // not Linux: the usual range
  }
  return lo >= 3024 ? [Math.max(2024, lo - 20_000), lo] : [hi + 1, 65536]
})()
// each process starts at its own place in the band, so test processes
// running at once rarely try the same ports
let nextPort = (process.pid * 7919 + Date.now()) % 1_000_000

/** A loopback port nobody listens on now, outside the ephemeral range ({@link PORT_BAND}); successive calls give different ports. */
async function freePort(): Promise<number> {
  const [start, end] = PORT_BAND
  for (let i = 0; i < end - start; i++) {
    const port = start + (nextPort++ % (end - start))
    const ok = await new Promise<boolean>((resolve) => {
      const server = createServer()
      server.once('error', () => resolve(false))
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)))
    })
    if (ok) return port
  }
  throw new Error(`no free loopback port in ${start}..${end}`)
}

/** The last `n` lines of each of the logs `names` in `dir`, for an error that says why a server did not come up (the directory is removed with it). */
function logTails(dir: string, names: string[], n: number): string {
  return names
    .map((name) => {
      let lines: string[]
      try {
        lines = readFileSync(join(dir, name), 'utf8').trimEnd().split('\n')
      } catch (e) {
        lines = [String(e)]
      }
      return `${name}:\n${lines.slice(-n).join('\n')}`
    })
    .join('\n')
}

/**
 * Three etcd members (Debian's `etcd-server`) on free loopback ports,
 * their data in a temporary directory, with fast elections (heartbeat
 * 50 ms, election 500 ms: etcd's smallest lease ttl is then 1 s). Killed
 * by PID when this process exits.
 */
export interface EtcdCluster {
  /** `127.0.0.1:PORT,...`, the members' client endpoints. */
  endpoints: string
  /** Where the members keep their data and logs (`m0.log`, ...). */
  dir: string
  /** A store address on this cluster under `prefix`. */
  address(prefix: string): string
  /** Runs `etcdctl ARGS` against the members; throws with its stderr if it fails. */
  etcdctl(...args: string[]): string
}

let theCluster: Promise<EtcdCluster> | undefined

/**
 * The cluster of this test process, started on first use (up to 20 s
 * until every member is healthy). Throws, naming what to install or the
 * logs to read, when etcd is missing or does not start.
 */
export function etcdCluster(): Promise<EtcdCluster> {
  theCluster ??= startEtcd()
  return theCluster
}

/**
 * A cluster of a test's own (as {@link etcdCluster}), for a test that
 * changes the cluster for everyone, such as enabling etcd's auth.
 */
export async function startEtcd(): Promise<EtcdCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'tinystore-node-etcd-'))
  const ports: { client: number; peer: number }[] = []
  for (let i = 0; i < 3; i++) ports.push({ client: await freePort(), peer: await freePort() })
  const initial = ports.map((p, i) => `m${i}=http://127.0.0.1:${p.peer}`).join(',')
  const endpoints = ports.map((p) => `127.0.0.1:${p.client}`).join(',')
  const members: ChildProcess[] = []
  process.on('exit', () => {
    for (const m of members) if (m.pid !== undefined && m.exitCode === null) process.kill(m.pid, 'SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  })
  const failed: Promise<never>[] = []
  ports.forEach((p, i) => {
    const log = openSync(join(dir, `m${i}.log`), 'w')
    // prettier-ignore
    const m = spawn('etcd', [
      '--name', `m${i}`, '--data-dir', join(dir, `m${i}`),
      '--listen-client-urls', `http://127.0.0.1:${p.client}`, '--advertise-client-urls', `http://127.0.0.1:${p.client}`,
      '--listen-peer-urls', `http://127.0.0.1:${p.peer}`, '--initial-advertise-peer-urls', `http://127.0.0.1:${p.peer}`,
      '--initial-cluster', initial, '--initial-cluster-state', 'new',
      '--heartbeat-interval', '50', '--election-timeout', '500',
    ], { stdio: ['ignore', log, log] })
    m.unref() // the test process exits when its tests end; its exit handler kills the members
    members.push(m)
    failed.push(
      new Promise<never>((_, reject) =>
        m.once('error', (e) =>
          reject(new Error(`could not start etcd (${e.message}): install Debian's etcd-server and etcd-client (\`make test\` does)`)),
        ),
      ),
    )
  })
  const healthy = (async () => {
    const deadline = Date.now() + 20_000
    for (;;) {
      const h = spawnSync('etcdctl', [`--endpoints=${endpoints}`, 'endpoint', 'health'], { env: { ...process.env, ETCDCTL_API: '3' } })
      if (h.error) throw new Error(`could not run etcdctl (${h.error.message}): install Debian's etcd-client (\`make test\` does)`)
      if (h.status === 0) return
      if (Date.now() > deadline) throw new Error(`the etcd cluster did not become healthy within 20 s; ${logTails(dir, ['m0.log', 'm1.log', 'm2.log'], 3)}`)
      await sleep(100)
    }
  })()
  await Promise.race([healthy, ...failed])
  const etcdctl = (...args: string[]): string => {
    const r = spawnSync('etcdctl', [`--endpoints=${endpoints}`, ...args], { env: { ...process.env, ETCDCTL_API: '3' }, encoding: 'utf8' })
    if (r.status !== 0) throw new Error(`etcdctl ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  return { endpoints, dir, address: (prefix) => `etcd://${endpoints}/${prefix}`, etcdctl }
}

/**
 * Three nats-server nodes with JetStream (Debian's `nats-server`),
 * clustered on free loopback ports, each node's config and JetStream
 * directory in a temporary directory (the streams are memory streams).
 * As core/tests/nats/mod.rs: `max_payload: 2MB` (a message of 1 MiB and
 * its headers is over the default 1 MiB), and a memory store large enough
 * for the many streams of a test file (each reserves its max_bytes,
 * 64 MiB, on every node; nothing is used until written). Killed by PID
 * when this process exits.
 */
export interface NatsCluster {
  /** Where the nodes keep their configs and logs (`n0.log`, ...). */
  dir: string
  /** `nats://127.0.0.1:PORT,...` of the nodes `which` (all by default). */
  urls(which?: number[]): string
  /** kill -9 of node `i`. */
  kill(i: number): void
  /** Kills every node. */
  stop(): void
}

let theNats: Promise<NatsCluster> | undefined

/**
 * The NATS cluster of this test process, started on first use (up to
 * 30 s until each node says JetStream is healthy). Throws, naming what to
 * install or the logs to read, when nats-server is missing or does not start.
 */
export function natsCluster(): Promise<NatsCluster> {
  theNats ??= startNats()
  return theNats
}

/** A NATS cluster of a test's own (as {@link natsCluster}), for a test that kills a node. */
export async function startNats(): Promise<NatsCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'tinystore-node-nats-'))
  const ports: { client: number; route: number; http: number }[] = []
  for (let i = 0; i < 3; i++) ports.push({ client: await freePort(), route: await freePort(), http: await freePort() })
  const routes = ports.map((p) => `nats-route://127.0.0.1:${p.route}`).join(', ')
  const nodes: ChildProcess[] = []
  const kill = (i: number): void => {
    const n = nodes[i]
    if (n?.pid !== undefined && n.exitCode === null && n.signalCode === null) process.kill(n.pid, 'SIGKILL')
  }
  process.on('exit', () => {
    nodes.forEach((_, i) => kill(i))
    rmSync(dir, { recursive: true, force: true })
  })
  const failed: Promise<never>[] = []
  ports.forEach((p, i) => {
    const conf = join(dir, `n${i}.conf`)
    writeFileSync(
      conf,
      `server_name: n${i}\nlisten: 127.0.0.1:${p.client}\nhttp: 127.0.0.1:${p.http}\nmax_payload: 2MB\n` +
        `jetstream { store_dir: ${JSON.stringify(join(dir, `n${i}`))}, max_memory_store: 64GB, max_file_store: 16MB }\n` +
        `cluster { name: tinystore, listen: 127.0.0.1:${p.route}, routes: [${routes}] }\n`,
    )
    const log = openSync(join(dir, `n${i}.log`), 'w')
    const n = spawn('nats-server', ['-c', conf], { stdio: ['ignore', log, log] })
    n.unref() // the exit handler kills it
    nodes.push(n)
    failed.push(
      new Promise<never>((_, reject) =>
        n.once('error', (e) =>
          reject(new Error(`could not start nats-server (${e.message}): install Debian's nats-server (\`make test\` does)`)),
        ),
      ),
    )
  })
  const healthy = (async () => {
    const deadline = Date.now() + 30_000
    for (const p of ports) {
      // ok once JetStream has a meta leader
      while (!(await healthz(p.http))) {
        if (Date.now() > deadline) throw new Error(`nats-server did not become healthy within 30 s; ${logTails(dir, ['n0.log', 'n1.log', 'n2.log'], 5)}`)
        await sleep(100)
      }
    }
  })()
  await Promise.race([healthy, ...failed])
  return {
    dir,
    urls: (which = [0, 1, 2]) => which.map((i) => `nats://127.0.0.1:${ports[i]!.client}`).join(','),
    kill,
    stop: () => nodes.forEach((_, i) => kill(i)),
  }
}

/** Whether nats-server's monitoring port says ok at /healthz (no connection is kept). */
function healthz(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const req = get({ host: '127.0.0.1', port, path: '/healthz', agent: false, timeout: 2000 }, (res) => {
      res.resume()
      resolve(res.statusCode === 200)
    })
    req.on('error', () => resolve(false))
    req.on('timeout', () => req.destroy())
  })
}

const tempDirs: string[] = []
// Removed when the test file's process exits (stores in them closed or not).
process.on('exit', () => {
  for (const d of tempDirs) rmSync(d, { recursive: true, force: true })
})

/** A fresh empty directory, removed when the process exits. */
export function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'tinystore-node-'))
  tempDirs.push(d)
  return d
}

/**
 * The address of the cluster store of `dir` (`etcd://.../PREFIX?nats=...`,
 * the prefix named after the directory), starting the clusters on first use.
 */
export async function clusterAddress(dir: string): Promise<string> {
  const [cluster, nats] = await Promise.all([etcdCluster(), natsCluster()])
  return `${cluster.address(`node${process.pid}-${basename(dir)}`)}?nats=${nats.urls()}`
}

/** A store in `dir` (a fresh directory by default), reached as `mode` says. */
export async function makeStore(mode: Mode, dir: string = tempDir()): Promise<Store> {
  switch (mode) {
    case 'cluster': {
      // A cluster store's SQL databases are files on this machine: the test's directory.
      process.env.TINYSTORE_CLUSTER_SQL_DIR = dir
      return connect(await clusterAddress(dir), { requestTimeout: CLUSTER_TIMEOUT })
    }
    case 'owned':
      return open(dir)
    case 'connected': {
      const owner = await open(dir)
      const client = await connect(`unix:${join(dir, 'tinystore.sock')}`)
      const close = client.close.bind(client)
      client.close = async () => {
        await close()
        await owner.close()
      }
      return client
    }
  }
}

/**
 * For a suite: a function that makes stores as {@link makeStore} does, and
 * closes every one of them after the suite.
 */
export function suiteStores(mode: Mode): (dir?: string) => Promise<Store> {
  const stores: Store[] = []
  after(async () => {
    for (const s of stores) await s.close()
  })
  return async (dir?: string) => {
    const s = await makeStore(mode, dir)
    stores.push(s)
    return s
  }
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** Blocks the event loop for `ms` milliseconds, as a CPU-bound function would. */
export function blockLoop(ms: number): void {
  const until = Date.now() + ms
  while (Date.now() < until) {
    // busy
  }
}

/** Waits until `check` is true, failing after `ms` milliseconds. */
export async function until(check: () => boolean, ms = 5000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(5)
  }
}

/** A promise with its resolve function outside. */
export function gate<T = void>(): { promise: Promise<T>; open: (v: T) => void } {
  let open!: (v: T) => void
  const promise = new Promise<T>((resolve) => (open = resolve))
  return { promise, open }
}
