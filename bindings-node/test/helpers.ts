// Shared by the tests: stores in temporary directories, owned by this
// process, or connected to an owner through its socket.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { after } from 'node:test'

import { connect, open, type Store } from 'tinystore'

/**
 * How a test reaches its store: `owned` (this process owns it) or
 * `connected` (through `<dir>/tinystore.sock`, served by an owner handle
 * that closes with the connected one).
 */
export type Mode = 'owned' | 'connected'

/** Every mode the contract tests run in. */
export const MODES: readonly Mode[] = ['owned', 'connected']

/** A fresh empty directory. */
export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'tinystore-node-'))
}

/** A store in `dir` (a fresh directory by default), reached as `mode` says. */
export async function makeStore(mode: Mode, dir: string = tempDir()): Promise<Store> {
  switch (mode) {
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
