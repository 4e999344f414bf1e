// Shared by the tests: stores in temporary directories, owned by this
// process, or connected to an owner through its socket, or cluster stores
// on a real 3-member etcd cluster this process starts.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, openSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, join } from 'node:path'
import { createServer } from 'node:net'

import { after } from 'node:test'

import { connect, open, type Store } from 'tinystore'

/**
 * How a test reaches its store: `owned` (this process owns it),
 * `connected` (through `<dir>/tinystore.sock`, served by an owner handle
 * that closes with the connected one), or `cluster` (`etcd://.../PREFIX`
 * on the 3-member etcd cluster of {@link etcdCluster}, the prefix named
 * after the directory, its SQL databases in the directory).
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

/** A loopback port nobody listens on now (the OS's pick). */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolve(port))
    })
  })
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
      if (Date.now() > deadline) throw new Error(`the etcd cluster did not become healthy within 20 s; logs in ${dir}`)
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

/** A fresh empty directory. */
export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'tinystore-node-'))
}

/** A store in `dir` (a fresh directory by default), reached as `mode` says. */
export async function makeStore(mode: Mode, dir: string = tempDir()): Promise<Store> {
  switch (mode) {
    case 'cluster': {
      const cluster = await etcdCluster()
      // A cluster store's SQL databases are files on this machine: the test's directory.
      process.env.TINYSTORE_CLUSTER_SQL_DIR = dir
      return connect(cluster.address(`node${process.pid}-${basename(dir)}`))
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
