// Benchmark of the Node binding against a Redis client, in one run (issues
// 6 and 21). Rows, each measured tinystore owned (this process owns the
// store), tinystore connected (another process owns it; this one connects
// through its Unix socket) and with node-redis (`redis` v5, a
// devDependency) against Debian's redis-server, which this script starts on
// a Unix socket with persistence off and stops at the end:
// - publish->deliver (msgs/s): one publish at a time, each awaited, to a
//   subscriber of this process that decodes each message's JSON;
// - publish->deliver, 64 in flight: the same with windows of 64 publishes
//   started before any is awaited (node-redis: 64 concurrent PUBLISH, which
//   it pipelines by itself, and a SUBSCRIBE connection);
// - fan-out (deliveries/s): one publisher, 64 in flight, and 100
//   subscribers on one branch, each on its own connection (tinystore: its
//   own connect(); node-redis: pub.duplicate()); messages × 100 / the time
//   until every subscriber has every message; a tinystore subscriber that
//   missed any fails the run;
// - hold+release of one key (ops/s), sequential and 4 processes contending.
// The publishing rows keep at most 512 messages published and not yet
// delivered (a branch's log holds 1,024), so no subscriber misses any.
//
// Run: `make -C bindings-node bench`, which builds the release addon into
// build-release/ (build/ keeps the debug build `make test` uses) and points
// the loader at it with NAPI_RS_NATIVE_LIBRARY_PATH. `node bench.mjs` alone
// measures whatever that variable or build/ holds; the first lines printed
// name the library actually loaded. BENCH_ROUNDS (default 3) sets how many
// rounds run; every round measures every row, the rows taking turns, and
// the table shows each row's best round. BENCH_ONLY=TEXT runs only the rows
// whose name starts with TEXT (`BENCH_ONLY=fan-out`, or
// `BENCH_ONLY='publish->deliver,'` for the pipelined row alone).
// Results: docs/performance-node.md.
import { spawn } from 'node:child_process'
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

import { createClient } from 'redis'

import { connect, open } from './index.mjs'

const self = fileURLToPath(import.meta.url)
const fmt = (x) => Math.round(x).toLocaleString('en-US')
const tick = () => new Promise(setImmediate)
const now = () => process.hrtime.bigint()
const since = (t) => Number(process.hrtime.bigint() - t) / 1e9

// The compare-and-delete release of the usual Redis lock recipe.
const RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
const LOCK_PX = 10_000

// --- The workloads, each returning a rate per second. ---

/**
 * Flow control, the same for tinystore and Redis: every 256 publishes, lets
 * the subscriber run until it is at most 512 messages behind (a tinystore
 * branch's log holds 1,024; beyond that the subscriber would miss some).
 */
async function keepUp(published, delivered) {
  do await tick()
  while (published - delivered() > 512)
}

/** How many publishes the pipelined rows keep in flight. */
const IN_FLIGHT = 64

/**
 * Calls `publish(i)` for i from 0 to n - 1 in windows of IN_FLIGHT: the
 * window's promises all started before any is awaited, then all awaited
 * before the next window starts; the flow control of `keepUp` every 256.
 */
async function pipelined(publish, n, delivered) {
  for (let i = 0; i < n; ) {
    const window = []
    for (const end = Math.min(i + IN_FLIGHT, n); i < end; i++) window.push(publish(i))
    await Promise.all(window)
    if (i % 256 === 0) await keepUp(i, delivered)
  }
}

/**
 * Subscribes to `branch` counting deliveries (each message's JSON decoded by
 * the binding) and missed messages; `all` resolves once `n` are accounted for.
 */
async function subscribeCounting(branch, n) {
  let done
  const c = { got: 0, missed: 0, all: new Promise((resolve) => (done = resolve)) }
  c.sub = await branch.subscribe(
    () => {
      if (++c.got + c.missed === n) done()
    },
    {
      onMissed: (m) => {
        if (typeof m.count !== 'number') throw new Error(`missed an unknown count (${m.reason})`)
        c.missed += m.count
        if (c.got + c.missed === n) done()
      },
    },
  )
  return c
}

/** Publishes `n` messages on one branch, one after the other (each awaited), until the subscriber has them all. */
async function publishDeliver(store, n) {
  const events = store.channel('bench')
  const c = await subscribeCounting(events.under(1), n)
  const started = now()
  for (let i = 0; i < n; i++) {
    await events.under(1).publish({ kind: 'message', id: i })
    if (i % 256 === 255) await keepUp(i + 1, () => c.got + c.missed)
  }
  await c.all
  const secs = since(started)
  await c.sub.stop()
  if (c.missed) throw new Error(`the subscriber missed ${c.missed} of ${n} messages`)
  return n / secs
}

/** The same with IN_FLIGHT publishes in flight (see `pipelined`), a subscriber of this process counting. */
async function publishPipelined(store, n) {
  const branch = store.channel('bench').under(2)
  const c = await subscribeCounting(branch, n)
  const started = now()
  await pipelined((i) => branch.publish({ kind: 'message', id: i }), n, () => c.got + c.missed)
  await c.all
  const secs = since(started)
  await c.sub.stop()
  if (c.missed) throw new Error(`the subscriber missed ${c.missed} of ${n} messages`)
  return n / secs
}

/**
 * Fan-out: each of `subscribers` (stores, each its own connection)
 * subscribes to one branch; `publisher` publishes `n` messages to it,
 * IN_FLIGHT in flight, the flow control following the slowest subscriber.
 * The clock stops when every subscriber has every message. Throws if any
 * missed one. Deliveries per second: n × subscribers / time.
 */
async function fanOut(publisher, subscribers, n) {
  const counters = await Promise.all(subscribers.map((s) => subscribeCounting(s.channel('fan').under(1), n)))
  const slowest = () => {
    let least = Infinity
    for (const c of counters) least = Math.min(least, c.got + c.missed)
    return least
  }
  const branch = publisher.channel('fan').under(1)
  const started = now()
  await pipelined((i) => branch.publish({ kind: 'message', id: i }), n, slowest)
  await Promise.all(counters.map((c) => c.all))
  const secs = since(started)
  await Promise.all(counters.map((c) => c.sub.stop()))
  const missed = counters.filter((c) => c.missed)
  if (missed.length) {
    const total = missed.reduce((sum, c) => sum + c.missed, 0)
    throw new Error(`${missed.length} of ${counters.length} subscribers missed messages (${total} in all, of ${n} each)`)
  }
  return (n * subscribers.length) / secs
}

/**
 * `count` stores, each from its own `connect(address)`: each connect() dials
 * its own connection to the owner (the core's Client::connect: its own
 * socket and session), its socket read on this process's JavaScript thread
 * (src/uvread.rs). Closed once `f` is done.
 */
async function withConnections(address, count, f) {
  const stores = await Promise.all(Array.from({ length: count }, () => connect(address)))
  try {
    return await f(stores)
  } finally {
    await Promise.all(stores.map((s) => s.close()))
  }
}

/** The same with Redis: PUBLISH of the JSON text, decoded by the SUBSCRIBE connection's listener. */
async function redisPublishDeliver(pub, sub, n) {
  let got = 0
  let done
  const all = new Promise((resolve) => (done = resolve))
  await sub.subscribe('bench', (text) => {
    JSON.parse(text)
    if (++got === n) done()
  })
  const started = now()
  for (let i = 0; i < n; i++) {
    await pub.publish('bench', JSON.stringify({ kind: 'message', id: i }))
    if (i % 256 === 255) await keepUp(i + 1, () => got)
  }
  await all
  const secs = since(started)
  await sub.unsubscribe('bench')
  return n / secs
}

/**
 * Redis with IN_FLIGHT PUBLISH commands in flight: node-redis writes the
 * commands issued together in one go and reads their replies in order (its
 * automatic pipelining), as one client of an application would.
 */
async function redisPublishPipelined(pub, sub, n) {
  let got = 0
  let done
  const all = new Promise((resolve) => (done = resolve))
  await sub.subscribe('bench', (text) => {
    JSON.parse(text)
    if (++got === n) done()
  })
  const started = now()
  await pipelined((i) => pub.publish('bench', JSON.stringify({ kind: 'message', id: i })), n, () => got)
  await all
  const secs = since(started)
  await sub.unsubscribe('bench')
  return n / secs
}

/**
 * Redis fan-out: `subs` (clients made with `pub.duplicate()`, each its own
 * connection) subscribe to one channel; `pub` publishes `n` messages,
 * IN_FLIGHT in flight. Each PUBLISH must reach every subscriber.
 */
async function redisFanOut(pub, subs, n) {
  const got = subs.map(() => 0)
  let complete = 0
  let done
  const all = new Promise((resolve) => (done = resolve))
  await Promise.all(
    subs.map((s, k) =>
      s.subscribe('fan', (text) => {
        JSON.parse(text)
        if (++got[k] === n && ++complete === subs.length) done()
      }),
    ),
  )
  const slowest = () => Math.min(...got)
  const publish = async (i) => {
    const receivers = await pub.publish('fan', JSON.stringify({ kind: 'message', id: i }))
    if (receivers !== subs.length) throw new Error(`a PUBLISH reached ${receivers} of ${subs.length} subscribers`)
  }
  const started = now()
  await pipelined(publish, n, slowest)
  await all
  const secs = since(started)
  await Promise.all(subs.map((s) => s.unsubscribe('fan')))
  return (n * subs.length) / secs
}

/** `count` clients made with `pub.duplicate()`, each its own connection; quit once `f` is done. */
async function withRedisClients(pub, count, f) {
  const clients = Array.from({ length: count }, () => pub.duplicate())
  await Promise.all(clients.map((c) => c.connect()))
  try {
    return await f(clients)
  } finally {
    await Promise.all(clients.map((c) => c.quit()))
  }
}

/** `n` holds of one free key, one after the other, with an empty function. */
async function holdRelease(store, n) {
  const lock = store.lock('bench')
  const started = now()
  for (let i = 0; i < n; i++) await lock.hold(7, () => {})
  return n / since(started)
}

/** Redis: SET NX PX with a unique token, retried while another client holds the key; released by the script. */
async function redisHolds(client, sha, n, tag) {
  for (let i = 0; i < n; i++) {
    const token = `${tag}:${i}`
    while ((await client.set('lock:bench', token, { condition: 'NX', expiration: { type: 'PX', value: LOCK_PX } })) !== 'OK');
    if ((await client.evalSha(sha, { keys: ['lock:bench'], arguments: [token] })) !== 1) throw new Error('lost the Redis lock')
  }
}

async function redisHoldRelease(client, sha, n) {
  const started = now()
  await redisHolds(client, sha, n, 'seq')
  return n / since(started)
}

// --- Child processes: an owner, and the contenders. ---

/** Starts `node bench.mjs --child role args` and reads its stdout lines. */
function child(role, args) {
  const proc = spawn(process.execPath, [self, '--child', role, JSON.stringify(args)], { stdio: ['pipe', 'pipe', 'inherit'] })
  const lines = createInterface({ input: proc.stdout })
  const waiting = [] // readers of lines not yet come
  const early = [] // lines come before anyone asked
  lines.on('line', (line) => (waiting.length ? waiting.shift().resolve(line) : early.push(line)))
  const exited = new Promise((resolve, reject) =>
    proc.on('exit', (code) => {
      for (const w of waiting.splice(0)) w.reject(new Error(`${role} exited (${code}) early`))
      code === 0 ? resolve() : reject(new Error(`${role} exited with ${code}`))
    }),
  )
  exited.catch(() => {})
  const line = () =>
    early.length ? Promise.resolve(early.shift()) : new Promise((resolve, reject) => waiting.push({ resolve, reject }))
  return { proc, line, send: (text) => proc.stdin.write(`${text}\n`), exited }
}

/**
 * `count` contender processes of `role`: each gets ready (connected, one
 * unmeasured hold), then all start together and the clock runs until the
 * last is done. `here`, if given, runs in this process meanwhile (one more
 * contender). Returns ops/s over all contenders.
 */
async function contend(role, args, count, here) {
  const kids = Array.from({ length: count }, () => child(role, args))
  for (const k of kids) if ((await k.line()) !== 'ready') throw new Error(`${role} not ready`)
  const dones = kids.map((k) => k.line())
  const started = now()
  for (const k of kids) k.send('go')
  await Promise.all([...dones, here?.()])
  const secs = since(started)
  for (const k of kids) k.proc.stdin.end()
  await Promise.all(kids.map((k) => k.exited))
  return ((count + (here ? 1 : 0)) * args.per) / secs
}

async function runChild(role, args) {
  const input = createInterface({ input: process.stdin })
  const next = () => new Promise((resolve) => input.once('line', resolve))
  const ended = new Promise((resolve) => input.once('close', resolve))
  if (role === 'owner') {
    const store = await open(args.dir)
    console.log('ready')
    await ended
    await store.close()
  } else if (role === 'tinystore') {
    const store = await connect(args.address)
    const lock = store.lock('bench')
    await lock.hold(7, () => {})
    console.log('ready')
    await next()
    for (let i = 0; i < args.per; i++) await lock.hold(7, () => {})
    console.log('done')
    await ended
    await store.close()
  } else if (role === 'redis') {
    const client = createClient({ socket: { path: args.socket } })
    await client.connect()
    const sha = await client.scriptLoad(RELEASE)
    await redisHolds(client, sha, 1, `warm${process.pid}`)
    console.log('ready')
    await next()
    await redisHolds(client, sha, args.per, `p${process.pid}`)
    console.log('done')
    await ended
    await client.quit()
  } else {
    throw new Error(`unknown role ${role}`)
  }
}

// --- redis-server, started and stopped here. ---

async function startRedis(dir) {
  const socket = join(dir, 'redis.sock')
  const server = spawn(
    'redis-server',
    ['--port', '0', '--unixsocket', socket, '--unixsocketperm', '700', '--save', '', '--appendonly', 'no', '--dir', dir],
    { stdio: 'ignore' },
  )
  process.on('exit', () => server.kill())
  for (let i = 0; ; i++) {
    const probe = createClient({ socket: { path: socket, reconnectStrategy: false } })
    probe.on('error', () => {})
    try {
      await probe.connect()
      await probe.quit()
      break
    } catch (e) {
      if (i === 100 || server.exitCode !== null) throw new Error(`redis-server did not start: ${e}`)
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  const stop = async () => {
    const gone = new Promise((resolve) => server.once('exit', resolve))
    server.kill('SIGTERM')
    await gone
  }
  return { socket, stop }
}

// --- The run. ---

/** The tinystore .node file mapped into this process (release or debug). */
function loadedAddon() {
  return readFileSync('/proc/self/maps', 'utf8')
    .split('\n')
    .map((l) => l.slice(l.indexOf('/')))
    .find((p) => /tinystore.*\.node$/.test(p))
}

async function main() {
  const rounds = Number(process.env.BENCH_ROUNDS ?? 3)
  const only = process.env.BENCH_ONLY ?? ''
  const load = () => loadavg().map((x) => x.toFixed(2)).join(' ')
  const redisVersion = execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).trim()
  const clientVersion = JSON.parse(readFileSync(new URL('./node_modules/redis/package.json', import.meta.url), 'utf8')).version
  console.log(`date ${new Date().toISOString()}, node ${process.version}, ${rounds} rounds${only ? `, only the rows starting ${JSON.stringify(only)}` : ''}, load average ${load()}`)
  const addon = loadedAddon()
  console.log(`addon ${addon}${addon?.includes('/build-release/') ? ' (release)' : ' (NOT the release build of make bench)'}`)
  console.log(`${redisVersion}; node-redis ${clientVersion}`)

  const tmp = mkdtempSync(join(tmpdir(), 'tinystore-bench-'))
  process.on('exit', () => rmSync(tmp, { recursive: true, force: true }))
  const ownedDir = join(tmp, 'owned')
  const otherDir = join(tmp, 'other')
  const redis = await startRedis(tmp)
  const owned = await open(ownedDir)
  const ownedAddress = `unix:${join(ownedDir, 'tinystore.sock')}`
  // Connected: the store is owned by another node process that does nothing else.
  const owner = child('owner', { dir: otherDir })
  if ((await owner.line()) !== 'ready') throw new Error('owner not ready')
  const otherAddress = `unix:${join(otherDir, 'tinystore.sock')}`
  const connected = await connect(otherAddress)
  const pub = createClient({ socket: { path: redis.socket } })
  await pub.connect()
  const sub = pub.duplicate()
  await sub.connect()
  const sha = await pub.scriptLoad(RELEASE)

  const PER = 2_000 // holds per contending process
  const FAN = 100 // subscribing connections of the fan-out row
  const workloads = [
    {
      name: 'publish->deliver',
      unit: 'msgs/s',
      owned: () => publishDeliver(owned, 50_000),
      connected: () => publishDeliver(connected, 20_000),
      redis: () => redisPublishDeliver(pub, sub, 20_000),
      warm: async () => {
        await publishDeliver(owned, 2_000)
        await publishDeliver(connected, 2_000)
        await redisPublishDeliver(pub, sub, 2_000)
      },
    },
    {
      name: `publish->deliver, ${IN_FLIGHT} in flight`,
      unit: 'msgs/s',
      owned: () => publishPipelined(owned, 100_000),
      connected: () => publishPipelined(connected, 50_000),
      redis: () => redisPublishPipelined(pub, sub, 150_000),
      warm: async () => {
        await publishPipelined(owned, 5_000)
        await publishPipelined(connected, 5_000)
        await redisPublishPipelined(pub, sub, 5_000)
      },
    },
    {
      // Owned: this process owns the store and publishes in-process; the
      // FAN subscribers are FAN stores of this process, each from its own
      // connect() to this process's own socket (see withConnections), so
      // the owner's server writes every message to FAN sockets that this
      // same process reads. Connected: the publisher (the store `connected`)
      // and FAN subscribers, each its own connect(), all connected to the
      // owner process. Redis: `pub` publishing, FAN clients of
      // pub.duplicate() subscribed. The subscribing connections are made
      // before the clock starts and closed after, in every run.
      name: `fan-out: 1 publisher (${IN_FLIGHT} in flight), ${FAN} subscribing connections`,
      unit: 'deliveries/s',
      owned: () => withConnections(ownedAddress, FAN, (subs) => fanOut(owned, subs, 3_000)),
      connected: () => withConnections(otherAddress, FAN, (subs) => fanOut(connected, subs, 2_000)),
      redis: () => withRedisClients(pub, FAN, (subs) => redisFanOut(pub, subs, 3_000)),
      warm: async () => {
        await withConnections(ownedAddress, FAN, (subs) => fanOut(owned, subs, 500))
        await withConnections(otherAddress, FAN, (subs) => fanOut(connected, subs, 500))
        await withRedisClients(pub, FAN, (subs) => redisFanOut(pub, subs, 500))
      },
    },
    {
      name: 'hold+release, sequential',
      unit: 'ops/s',
      owned: () => holdRelease(owned, 50_000),
      connected: () => holdRelease(connected, 10_000),
      redis: () => redisHoldRelease(pub, sha, 10_000),
      warm: async () => {
        await holdRelease(owned, 2_000)
        await holdRelease(connected, 500)
        await redisHoldRelease(pub, sha, 500)
      },
    },
    {
      // Owned: this process (the owner, holding in-process) and 3 processes connected to it.
      // Connected: 4 processes connected to the owner process. Redis: 4 processes, 4 clients.
      name: 'hold+release, 4 processes contending',
      unit: 'ops/s',
      owned: () => contend('tinystore', { address: ownedAddress, per: PER }, 3, () => holdRelease(owned, PER)),
      connected: () => contend('tinystore', { address: otherAddress, per: PER }, 4),
      redis: () => contend('redis', { socket: redis.socket, per: PER }, 4),
    },
  ].filter((w) => w.name.startsWith(only))
  if (workloads.length === 0) throw new Error(`BENCH_ONLY=${only} names no row`)
  const modes = ['owned', 'connected', 'redis']

  // Warm-up, unmeasured.
  for (const workload of workloads) await workload.warm?.()

  const results = workloads.map(() => ({ owned: [], connected: [], redis: [] }))
  for (let r = 1; r <= rounds; r++) {
    for (const [w, workload] of workloads.entries()) {
      for (const mode of modes) {
        const rate = await workload[mode]()
        results[w][mode].push(rate)
        console.log(`round ${r}: ${workload.name}, ${mode}: ${fmt(rate)} ${workload.unit}`)
      }
    }
  }
  const endLoad = load()

  await sub.quit()
  await pub.quit()
  await connected.close()
  owner.proc.stdin.end()
  await owner.exited
  await owned.close()
  await redis.stop()

  const best = (xs) => Math.max(...xs)
  console.log(`\nBest of ${rounds} rounds; ratio = tinystore / Redis (higher is better). Load average at the end ${endLoad}.\n`)
  console.log('| workload | tinystore owned | tinystore connected | Redis (node-redis) | owned / Redis | connected / Redis |')
  console.log('|---|---:|---:|---:|---:|---:|')
  for (const [w, workload] of workloads.entries()) {
    const [o, c, r] = modes.map((m) => best(results[w][m]))
    console.log(`| ${workload.name} (${workload.unit}) | ${fmt(o)} | ${fmt(c)} | ${fmt(r)} | ${(o / r).toFixed(2)} | ${(c / r).toFixed(2)} |`)
  }
}

if (process.argv[2] === '--child') await runChild(process.argv[3], JSON.parse(process.argv[4]))
else await main()
