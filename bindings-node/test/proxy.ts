// A Unix-socket proxy in front of a store's socket, to cut or freeze the
// connection of a connected store (CHAN-04, LOCK-05).
import { createConnection, createServer, type Server, type Socket } from 'node:net'
import { join } from 'node:path'

export class Proxy {
  readonly address: string
  #server: Server
  #pairs = new Set<[Socket, Socket]>()
  #down = false
  /** How many `declare` requests (a lock or semaphore made known to the owner) went through. */
  declares = 0

  private constructor(server: Server, path: string) {
    this.#server = server
    this.address = `unix:${path}`
  }

  /** A proxy listening in `dir` that forwards to the socket at `target`. */
  static async start(dir: string, target: string): Promise<Proxy> {
    const path = join(dir, 'proxy.sock')
    let proxy!: Proxy
    const server = createServer((client) => {
      if (proxy.#down) {
        client.destroy()
        return
      }
      const upstream = createConnection(target)
      const pair: [Socket, Socket] = [client, upstream]
      proxy.#pairs.add(pair)
      const end = () => {
        client.destroy()
        upstream.destroy()
        proxy.#pairs.delete(pair)
      }
      client.on('error', end).on('close', end)
      upstream.on('error', end).on('close', end)
      client.on('data', (chunk: Buffer) => {
        proxy.declares += chunk.toString('latin1').split('"op":"declare"').length - 1
      })
      client.pipe(upstream)
      upstream.pipe(client)
    })
    proxy = new Proxy(server, path)
    await new Promise<void>((resolve) => server.listen(path, resolve))
    return proxy
  }

  /** Drops every connection and refuses new ones until {@link Proxy.up}. */
  down(): void {
    this.#down = true
    for (const [a, b] of this.#pairs) {
      a.destroy()
      b.destroy()
    }
    this.#pairs.clear()
  }

  /** Takes connections again. */
  up(): void {
    this.#down = false
  }

  /** Stops forwarding in both directions (a stalled network), keeping the connections. */
  freeze(): void {
    for (const [a, b] of this.#pairs) {
      a.pause()
      b.pause()
    }
  }

  /** Forwards again after {@link Proxy.freeze}. */
  thaw(): void {
    for (const [a, b] of this.#pairs) {
      a.resume()
      b.resume()
    }
  }

  async close(): Promise<void> {
    this.down()
    await new Promise((resolve) => this.#server.close(resolve))
  }
}
