import { Channel } from './channel'
import * as check from './check'
import { Database } from './database'
import { InvalidError, now, sync } from './errors'
import { makeLock, makeSemaphore, type Lock, type LockOptions, type Semaphore, type SemaphoreOptions } from './lock'
import { native, type NativeStore } from './native'
import { toStatus, type StoreStatus } from './status'
import type { Duration } from './types'

/** The options {@link connect} takes. */
const CONNECT_OPTIONS = [
  'token',
  'caFile',
  'requestTimeout',
  'etcdUser',
  'etcdPassword',
  'etcdCert',
  'etcdKey',
  'natsUser',
  'natsPassword',
  'natsToken',
  'natsCredentials',
  'natsCert',
  'natsKey',
] as const

/** Options of `store.database`. */
export interface DatabaseOptions {
  /**
   * A folder of numbered `.sql` files (`0004_summary_fence.sql`), applied in
   * order, each once, each in its own transaction. Relative to the current
   * directory.
   */
  migrations?: string
}

/**
 * Opens (creating it if needed) the store directory `dir`. If no live process
 * owns it, this one does: it keeps channels and locks in its memory and
 * serves the store to other processes on `dir/tinystore.sock`. If another
 * process owns it, this connects to that one instead (the same API), and
 * takes the store over if the owner goes away. A cluster store's address
 * (`etcd://...`, docs/cluster.md) given as `dir` is connected to, with
 * {@link connect}'s defaults from the environment.
 *
 * @param dir - The store directory, like `'data'`.
 * @throws {@link IoError} when the directory cannot be made, locked or
 * reached; {@link SqlError} when its `kv.db` is unreadable;
 * {@link InvalidError} when `dir` is not a string, or when anything is
 * given after it (options belong to {@link connect}).
 */
export async function open(dir: string): Promise<Store> {
  check.text('a store directory', dir, "'data'")
  if (arguments.length > 1) {
    throw new InvalidError(
      `open takes only the store directory; got ${check.describe(arguments[1])} after it (options such as requestTimeout or token belong to connect(address, options))`,
    )
  }
  return new Store(await now(() => native.NativeStore.open(dir)))
}

/**
 * Options of {@link connect}. Each one left out keeps its default, read from
 * the environment where there is one, so a deployment can set it without code.
 */
export interface ConnectOptions {
  /**
   * The token for `tcp:` and `tls:` addresses: a line of the owner's
   * `DIR/tokens` (`tinystore token new DIR` makes one). Default: the
   * environment variable `TINYSTORE_TOKEN`. Two stores connected with two
   * tokens can live in one process.
   */
  token?: string
  /**
   * For `tls:` and `etcds://` addresses: the PEM file of the CA
   * certificate(s) to trust, or the store's own self-signed certificate; no
   * public roots are trusted. Default: the environment variable `TINYSTORE_CA`.
   */
  caFile?: string
  /**
   * For `etcd://` and `etcds://` addresses: the etcd user (etcd's own
   * authentication, a user made with `etcdctl user add`), given with
   * {@link ConnectOptions.etcdPassword}; one without the other is an
   * {@link InvalidError}. Default: the environment variables
   * `TINYSTORE_ETCD_USER` and `TINYSTORE_ETCD_PASSWORD` (neither set: no
   * authentication).
   */
  etcdUser?: string
  /** The etcd user's password; see {@link ConnectOptions.etcdUser}. */
  etcdPassword?: string
  /**
   * For `etcds://` members that ask for client certificates
   * (`--client-cert-auth`): the path of this process's certificate, a PEM
   * file signed by the members' CA, given with {@link ConnectOptions.etcdKey};
   * one without the other is an {@link InvalidError}. Default: the
   * environment variables `TINYSTORE_ETCD_CERT` and `TINYSTORE_ETCD_KEY`.
   */
  etcdCert?: string
  /** The path of the client certificate's private key, a PEM file; see {@link ConnectOptions.etcdCert}. */
  etcdKey?: string
  /**
   * For cluster addresses with `?nats=`: the NATS user (the servers'
   * `authorization { users = [...] }`), given with
   * {@link ConnectOptions.natsPassword}; one without the other is an
   * {@link InvalidError}. Default: `TINYSTORE_NATS_USER` and
   * `TINYSTORE_NATS_PASSWORD`.
   */
  natsUser?: string
  /** The NATS user's password; see {@link ConnectOptions.natsUser}. */
  natsPassword?: string
  /** The NATS servers' token (`authorization { token: ... }`). Default: `TINYSTORE_NATS_TOKEN`. */
  natsToken?: string
  /** A NATS credentials file (JWT and nkey seed). Default: `TINYSTORE_NATS_CREDS`. */
  natsCredentials?: string
  /**
   * For `tls://` NATS servers that verify clients: the path of this
   * process's certificate, a PEM file, given with {@link ConnectOptions.natsKey}
   * (the CA is {@link ConnectOptions.caFile}'s). Default: `TINYSTORE_NATS_CERT`
   * and `TINYSTORE_NATS_KEY`.
   */
  natsCert?: string
  /** The path of the NATS client certificate's private key; see {@link ConnectOptions.natsCert}. */
  natsKey?: string
  /**
   * How long a request may go unanswered (beyond a hold's `wait`) before it
   * throws a {@link TimeoutError}: `'5s'` or milliseconds. Default: 10 seconds.
   */
  requestTimeout?: Duration
}

/**
 * Connects to the store another process serves at `address`. The same API
 * as an owned store; the connection comes back by itself after a drop.
 *
 * - `'unix:PATH'`: the owner's Unix socket, `'unix:data/tinystore.sock'`
 *   (owner-only, no token).
 * - `'tcp:HOST:PORT'`: TCP, with a token (`options.token`, else the
 *   environment variable `TINYSTORE_TOKEN`).
 * - `'tls:HOST:PORT'`: TCP with TLS, with the token and the PEM file of the
 *   CA (or the store's own certificate) in `options.caFile`, else
 *   `TINYSTORE_CA`; only that CA is trusted, and HOST must be a name or
 *   address the certificate lists. See "TLS" in `docs/wire.md`.
 * - `'etcd://HOST:PORT,HOST:PORT,.../PREFIX'` (or `etcds://` for TLS, its
 *   CA in `options.caFile`, else `TINYSTORE_CA`): a cluster store, its
 *   locks, semaphores and fences in an etcd cluster, every key under
 *   `/PREFIX`; channels fail on it without `?nats=`, saying so. etcd's user and password
 *   in `options.etcdUser` and `options.etcdPassword` and a client
 *   certificate in `options.etcdCert` and `options.etcdKey`, else from
 *   `TINYSTORE_ETCD_USER`, `TINYSTORE_ETCD_PASSWORD`, `TINYSTORE_ETCD_CERT`
 *   and `TINYSTORE_ETCD_KEY`. Its channels are on the NATS servers of
 *   `?nats=nats://HOST:PORT,...`, with `options.natsUser` and
 *   `options.natsPassword`, `options.natsToken`, `options.natsCredentials`,
 *   or `options.natsCert` and `options.natsKey` for `tls://`, else
 *   `TINYSTORE_NATS_*`. See `docs/cluster.md`.
 *
 * ```ts
 * const store = await connect('tls:db.example.com:7443', { token, caFile: 'ca.pem', requestTimeout: '5s' })
 * const cluster = await connect('etcds://10.0.0.1:2379,10.0.0.2:2379/myapp', { caFile: 'ca.pem', etcdUser: 'app', etcdPassword })
 * ```
 *
 * @param address - `unix:PATH`, `tcp:HOST:PORT`, `tls:HOST:PORT` or `etcd://HOSTS/PREFIX`.
 * @param options - Token, CA file, request timeout, etcd user and password,
 * etcd client certificate and key ({@link ConnectOptions}).
 * @throws {@link IoError} when nothing answers at the address or the CA file
 * is unreadable; {@link AuthError} for a missing or wrong token, a wrong
 * etcd user or password (or none where etcd has auth enabled), a
 * certificate the CA did not sign, or a client certificate etcd refused;
 * {@link InvalidError} for an address or option out of form, an option
 * `connect` does not take (a misspelled name, told with the options it takes), `tls:` or
 * `etcds://` without a CA file, an etcd user without a password or a
 * certificate without a key (or the other way round), an unreadable etcd
 * TLS file; {@link UnavailableError} when no etcd member answered within
 * the request timeout; {@link ProtocolError} for `tcp:` on a TLS port or
 * `tls:` on a plain one.
 */
export async function connect(address: string, options?: ConnectOptions | null): Promise<Store> {
  check.text('an address', address, "'unix:PATH', 'tcp:HOST:PORT', 'tls:HOST:PORT' or 'etcd://HOST:PORT/PREFIX'")
  const o = check.options('connect', options, CONNECT_OPTIONS, "{ token: '...' }")
  const nativeOptions = {
    token: o.token === undefined ? undefined : check.text('the token', o.token, "'3f9c...'"),
    caFile: o.caFile === undefined ? undefined : check.text('caFile', o.caFile, "'ca.pem'"),
    requestTimeout: check.duration('requestTimeout', o.requestTimeout),
    etcdUser: o.etcdUser === undefined ? undefined : check.text('etcdUser', o.etcdUser, "'app'"),
    etcdPassword: o.etcdPassword === undefined ? undefined : check.text('etcdPassword', o.etcdPassword, "'secret'"),
    etcdCert: o.etcdCert === undefined ? undefined : check.text('etcdCert', o.etcdCert, "'client.pem'"),
    etcdKey: o.etcdKey === undefined ? undefined : check.text('etcdKey', o.etcdKey, "'client-key.pem'"),
    natsUser: o.natsUser === undefined ? undefined : check.text('natsUser', o.natsUser, "'app'"),
    natsPassword: o.natsPassword === undefined ? undefined : check.text('natsPassword', o.natsPassword, "'secret'"),
    natsToken: o.natsToken === undefined ? undefined : check.text('natsToken', o.natsToken, "'s3cret'"),
    natsCredentials: o.natsCredentials === undefined ? undefined : check.text('natsCredentials', o.natsCredentials, "'app.creds'"),
    natsCert: o.natsCert === undefined ? undefined : check.text('natsCert', o.natsCert, "'client.pem'"),
    natsKey: o.natsKey === undefined ? undefined : check.text('natsKey', o.natsKey, "'client-key.pem'"),
  }
  return new Store(await now(() => native.NativeStore.connect(address, nativeOptions)))
}

/**
 * A store: channels, locks, semaphores and SQL databases in one directory.
 * Made by {@link open} or {@link connect}.
 */
export class Store {
  #native: NativeStore

  /** @internal Made by `open` and `connect`. */
  constructor(native: NativeStore) {
    this.#native = native
  }

  /**
   * A channel of messages of type `T`, carried as JSON.
   *
   * @param name - `[a-z0-9][a-z0-9_-]{0,63}`, like `'chat-events'`.
   * @throws {@link InvalidError} for a name out of rule; {@link ClosedError}.
   */
  channel<T = unknown>(name: string): Channel<T> {
    check.name('channel', name, 'chat-events')
    sync(() => this.#native.checkChannel(name))
    return new Channel<T>(this.#native, name)
  }

  /**
   * A lock: one holder of a key at a time, each lease with a fence.
   *
   * @param name - `[a-z0-9][a-z0-9_-]{0,63}`, like `'summaries'`.
   * @param options - `ttl` (default `'30s'`), `maxHold` (default none), `wait` (default `'10s'`).
   * @throws {@link InvalidError} for a name or duration out of rule, or an
   * option it does not take (a misspelled `maxhold`);
   * {@link ConflictError} when the name is a semaphore; {@link ClosedError}.
   */
  lock(name: string, options: LockOptions | null = {}): Lock {
    return makeLock(this.#native, name, options)
  }

  /**
   * A semaphore: up to `limit` holders of a key at a time, without fences.
   *
   * @param name - `[a-z0-9][a-z0-9_-]{0,63}`.
   * @param options - `limit`, and `ttl`, `maxHold`, `wait` as for {@link Store.lock}.
   * @throws {@link ConflictError} when the name is a lock or a semaphore of
   * another limit; {@link InvalidError}; {@link ClosedError}.
   */
  semaphore(name: string, options: SemaphoreOptions): Semaphore {
    return makeSemaphore(this.#native, name, options)
  }

  /**
   * Opens the SQL database `<dir>/<name>.db`, applying its migrations.
   *
   * @param name - `[a-z0-9][a-z0-9_-]{0,63}`, like `'chat'`.
   * @param options - `migrations`: a folder of numbered `.sql` files.
   * @throws {@link SqlError} when a migration fails (nothing of it stays
   * applied), an applied one was edited, or a new one is numbered below one
   * already applied (it would run out of order); {@link InvalidError};
   * {@link IoError}.
   */
  async database(name: string, options: DatabaseOptions | null = {}): Promise<Database> {
    check.name('database', name, 'chat')
    const migrations = check.options('store.database', options, ['migrations'], "{ migrations: 'migrations' }").migrations
    if (migrations !== undefined && typeof migrations !== 'string') {
      throw new InvalidError(`migrations is the path of a folder of numbered .sql files, like 'migrations'; got ${check.describe(migrations)}`)
    }
    return new Database(await now(() => this.#native.database(name, migrations)), `${this.dir}/${name}.db`, name)
  }

  /**
   * What the store holds now: the owner's process and epoch, every branch
   * with its subscribers and how far behind each is, every held key with
   * its leases (fences, time left) and waiters, the connected processes.
   * Over a connection it asks the owner (a round trip). As
   * `tinystore status --json`, with camelCase names.
   *
   * @throws {@link ClosedError} once the store is closed (never the figures
   * from before); over a connection, what reaching the owner throws.
   */
  async status(): Promise<StoreStatus> {
    return toStatus(await now(() => this.#native.statusJson()))
  }

  /**
   * Closes the store: subscriptions end, held keys are let go (their holders'
   * signals fire), waiters get a {@link ClosedError}. Over a connection,
   * publishes already sent get their answers first (up to 2 s; past that
   * they reject with {@link ClosedError}). Idempotent.
   */
  async close(): Promise<void> {
    // Publishes already sent get their answers first (connected, up to 2 s),
    // so they resolve as delivered rather than as ClosedError.
    await this.#native.closeSettled()
  }

  /** True once closed. */
  get closed(): boolean {
    return this.#native.closed
  }

  /** The store directory. */
  get dir(): string {
    return this.#native.dir
  }

  /** This open's epoch: the high 64 bits of every fence it gives. */
  get epoch(): bigint {
    return this.#native.epoch
  }
}
