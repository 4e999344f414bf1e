// Benchmark of the Node binding: publish->deliver messages per second, and
// hold+release operations per second (sequential; 4 tasks contending for
// one key; 4 processes contending, connected), owned (this process owns the
// store) and connected (another process owns it; this one connects).
// Run: make -C bindings-node bench (measures whatever build/ holds: a debug
// build after `make test`, a release one after `npx napi build --platform
// --release --output-dir build --js native.js --dts native.d.ts`).
import { spawn } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'

import { connect, open } from './index.mjs'

const entry = fileURLToPath(new URL('./index.mjs', import.meta.url))
const fmt = (x) => Math.round(x).toLocaleString('en-US')

async function publishDeliver(store, n) {
  const events = store.channel('bench')
  let got = 0
  let done
  const all = new Promise((resolve) => (done = resolve))
  const sub = await events.under(1).subscribe(() => {
    if (++got === n) done()
  })
  const started = process.hrtime.bigint()
  for (let i = 0; i < n; i++) {
    await events.under(1).publish({ kind: 'message', id: i })
    // Let the subscriber keep up (a branch's log holds 1,024 messages).
    if (i % 256 === 255) await new Promise(setImmediate)
  }
  await all
  const secs = Number(process.hrtime.bigint() - started) / 1e9
  await sub.stop()
  return n / secs
}

async function holdRelease(store, n, tasks) {
  const lock = store.lock('bench')
  const per = Math.floor(n / tasks)
  const started = process.hrtime.bigint()
  await Promise.all(
    Array.from({ length: tasks }, async () => {
      for (let i = 0; i < per; i++) await lock.hold(7, () => {})
    }),
  )
  return (per * tasks) / (Number(process.hrtime.bigint() - started) / 1e9)
}

/** Runs `script` (an ES module body with `connect` imported) in `count` node processes at once. */
async function processes(count, script) {
  const body = `import { connect } from ${JSON.stringify(entry)}\n${script}`
  const started = process.hrtime.bigint()
  await Promise.all(
    Array.from({ length: count }, () => {
      const child = spawn(process.execPath, ['--input-type=module', '-e', body], { stdio: 'inherit' })
      return new Promise((resolve, reject) => child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`exit ${code}`)))))
    }),
  )
  return Number(process.hrtime.bigint() - started) / 1e9
}

const rows = []
const row = (what, value, unit) => {
  rows.push([what, value, unit])
  console.log(`${what}: ${fmt(value)} ${unit}`)
}

// Owned.
const dir = mkdtempSync(join(tmpdir(), 'tinystore-bench-'))
const owner = await open(dir)
await publishDeliver(owner, 5_000) // warm up
row('owned publish->deliver', await publishDeliver(owner, 100_000), 'msgs/s')
await holdRelease(owner, 2_000, 1)
row('owned hold+release, sequential', await holdRelease(owner, 50_000, 1), 'ops/s')
row('owned hold+release, 4 tasks contending', await holdRelease(owner, 20_000, 4), 'ops/s')

// Connected: this process is a client of the owner above, through its socket.
const address = `unix:${join(dir, 'tinystore.sock')}`
const client = await connect(address)
await publishDeliver(client, 2_000)
row('connected publish->deliver', await publishDeliver(client, 50_000), 'msgs/s')
await holdRelease(client, 500, 1)
row('connected hold+release, sequential', await holdRelease(client, 10_000, 1), 'ops/s')
const per = 2_500
const secs = await processes(
  4,
  `const s = await connect(${JSON.stringify(address)})
   const l = s.lock('bench')
   for (let i = 0; i < ${per}; i++) await l.hold(7, () => {})
   await s.close()`,
)
row('connected hold+release, 4 processes contending', (4 * per) / secs, 'ops/s')
await client.close()
await owner.close()
