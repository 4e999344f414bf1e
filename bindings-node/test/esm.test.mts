// The ES module entry point: named exports, typed, sharing classes with CommonJS.
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { it } from 'node:test'

import { open, TinyStoreError, InvalidError, type Store } from 'tinystore'

it('import gives every export of require', async () => {
  const cjs = createRequire(import.meta.url)('tinystore') as Record<string, unknown>
  const esm = (await import('tinystore')) as Record<string, unknown>
  for (const name of Object.keys(cjs)) assert.equal(esm[name], cjs[name], `export ${name}`)
})

it('import works: named exports, and the same classes as require', async () => {
  const store: Store = await open(mkdtempSync(join(tmpdir(), 'tinystore-esm-')))
  const cjs = createRequire(import.meta.url)('tinystore') as typeof import('tinystore')
  assert.equal(cjs.TinyStoreError, TinyStoreError)
  assert.throws(() => store.channel('Bad'), (e: unknown) => e instanceof cjs.InvalidError && e instanceof InvalidError)
  const events = store.channel<{ id: number }>('esm')
  const got: number[] = []
  const sub = await events.subscribe((m) => void got.push(m.value.id))
  await events.publish({ id: 1 })
  while (got.length === 0) await new Promise((r) => setTimeout(r, 5))
  assert.deepEqual(got, [1])
  await sub.stop()
  await store.close()
})
