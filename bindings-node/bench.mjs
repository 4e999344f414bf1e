// Benchmark of the Node binding, owned mode (this process owns the store):
// publish->deliver messages per second, and hold+release operations per
// second (sequential, and 4 tasks contending for one key).
// Run: make -C bindings-node bench   (a debug build unless built --release)
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { open } from './index.mjs'

const store = await open(mkdtempSync(join(tmpdir(), 'tinystore-bench-')))

async function publishDeliver(n) {
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
    // Let the subscriber keep up (a log holds 1,024 messages).
    if (i % 512 === 511) await new Promise(setImmediate)
  }
  await all
  const secs = Number(process.hrtime.bigint() - started) / 1e9
  await sub.stop()
  return n / secs
}

async function holdRelease(n, tasks) {
  const lock = store.lock('bench')
  const per = Math.floor(n / tasks)
  const started = process.hrtime.bigint()
  await Promise.all(
    Array.from({ length: tasks }, async () => {
      for (let i = 0; i < per; i++) await lock.hold(7, () => {})
    }),
  )
  const secs = Number(process.hrtime.bigint() - started) / 1e9
  return (per * tasks) / secs
}

const fmt = (x) => Math.round(x).toLocaleString('en-US')
await publishDeliver(5_000) // warm up
console.log(`owned publish->deliver: ${fmt(await publishDeliver(100_000))} msgs/s`)
await holdRelease(2_000, 1)
console.log(`owned hold+release, sequential: ${fmt(await holdRelease(50_000, 1))} ops/s`)
console.log(`owned hold+release, 4 tasks contending: ${fmt(await holdRelease(50_000, 4))} ops/s`)
await store.close()
