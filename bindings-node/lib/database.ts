import { type Branch, storeOf } from './channel'
import * as check from './check'
import { AsyncLocalStorage } from 'node:async_hooks'

import { ConflictError, InvalidError, now, settle } from './errors'
import { encode } from './message'
import type { NativeDatabase, NativeDone, NativeRows, NativeStore, NativeTx } from './native'
import type { Key } from './types'

/**
 * A value SQLite gives back: null, a number (an integer past 2^53 is a
 * bigint), text, or bytes.
 */
export type SqlValue = null | number | bigint | string | Uint8Array

/**
 * A value to bind as a parameter: a {@link SqlValue}, a boolean (bound as 1
 * or 0), or undefined (bound as null). Integer numbers bind as integers,
 * others as reals.
 */
export type SqlParam = SqlValue | boolean | undefined

/** A row: its values by column name. */
export type Row = Record<string, SqlValue>

/** What a write did. */
export interface Done {
  /** Rows changed, inserted or deleted by the statement. */
  readonly changes: number
  /**
   * The rowid of the last row inserted through this database's writer. A
   * number; at run time a bigint where it exceeds 2^53 (`Number.MAX_SAFE_INTEGER`),
   * so no digit is lost.
   */
  readonly lastInsertRowid: number
}

/** A statement: text with a `?` per parameter, or a tagged template. */
export type Statement = string | TemplateStringsArray

/** True for what SQLite can bind (`NaN` and infinities: refused by the engine). */
function bindable(p: unknown): boolean {
  const t = typeof p
  return p === null || t === 'undefined' || t === 'boolean' || t === 'number' || t === 'bigint' || t === 'string' || p instanceof Uint8Array
}

/** The text and parameters of a call `(sql, ...params)` or of a tagged template. */
function statement(sql: Statement, params: SqlParam[]): [string, SqlParam[]] {
  for (const p of params) {
    if (!bindable(p)) {
      throw new InvalidError(
        `a SQL parameter is null, a boolean, a number, a bigint, text or bytes (a Uint8Array); got ${check.describe(p)}` +
          (typeof p === 'object' ? ': bind JSON.stringify(value) to store an object as text' : ''),
      )
    }
  }
  if (typeof sql === 'string') return [sql, params]
  // A template's ${} values become bound parameters, never text.
  if (Array.isArray(sql) && Array.isArray((sql as TemplateStringsArray).raw)) return [sql.join('?'), params]
  throw new InvalidError(
    `a SQL statement is text or a tagged template, like db.query('select * from notes where id = ?', id); got ${check.describe(sql)}`,
  )
}

function done(d: NativeDone): Done {
  return { changes: d.changes, lastInsertRowid: d.lastInsertRowid as number }
}

function rows<R>(r: NativeRows): R[] {
  const { columns } = r
  return r.rows.map((values) => {
    const row: Record<string, SqlValue> = {}
    for (let i = 0; i < columns.length; i++) row[columns[i]!] = values[i] as SqlValue
    return row as R
  })
}

/** A transaction of the database file `file` that has not ended. */
interface Open {
  readonly file: string
  open: boolean
}

// The transactions the running code is inside (what their functions await
// or start inherits it; `open` turns false when one ends).
const inside = new AsyncLocalStorage<readonly Open[]>()

/**
 * Refuses a write through the database `file` from inside one of its
 * transactions: it would wait for the writer that transaction holds until
 * its function ends, the busy timeout long.
 */
function checkNotInside(file: string, name: string, what: string): void {
  if (inside.getStore()?.some((t) => t.open && t.file === file)) {
    throw new ConflictError(
      `${what} inside db.tx of the same database ('${name}') would wait for that transaction, which holds the database's writer until its function returns: use the tx it was given (tx.exec, tx.query), or write after the transaction`,
    )
  }
}

/** What runs statements: a database or a transaction. */
abstract class Statements {
  /** @internal */
  protected abstract readonly target: NativeDatabase | NativeTx

  /**
   * Runs one statement that writes. Call it with text and parameters,
   * `exec('update chats set title = ? where id = ?', title, id)`, or as a
   * tagged template whose `${}` values are bound as parameters, never spliced
   * into the text: `` exec`update chats set title = ${title} where id = ${id}` ``.
   *
   * @returns `changes` and `lastInsertRowid`.
   * @throws {@link SqlError} when the statement fails; {@link BusyError};
   * {@link ClosedError}.
   */
  async exec(sql: Statement, ...params: SqlParam[]): Promise<Done> {
    const [text, bound] = statement(sql, params)
    return done(await now(() => this.target.exec(text, bound)))
  }

  /**
   * Runs a query, called as {@link Statements.exec} is (text and parameters,
   * or a tagged template).
   *
   * @typeParam R - The type of a row; default {@link Row}.
   * @returns The rows, each an object of its values by column name.
   */
  async query<R = Row>(sql: Statement, ...params: SqlParam[]): Promise<R[]> {
    const [text, bound] = statement(sql, params)
    return rows<R>(await now(() => this.target.query(text, bound)))
  }
}

/**
 * A SQL database of the store: the SQLite file `<dir>/<name>.db` (WAL).
 * Made by `await store.database(name, { migrations })`. Every call runs off
 * the event loop.
 */
export class Database extends Statements {
  /** @internal */
  protected readonly target: NativeDatabase
  readonly #file: string
  readonly #name: string

  /** @internal Made by `store.database`: `file` names its SQLite file. */
  constructor(native: NativeDatabase, file: string, name: string) {
    super()
    this.target = native
    this.#file = file
    this.#name = name
  }

  /**
   * As {@link Statements.exec}.
   *
   * @throws {@link ConflictError} at once when called inside a `db.tx` of
   * the same database (use its `tx`); as {@link Statements.exec} otherwise.
   */
  override async exec(sql: Statement, ...params: SqlParam[]): Promise<Done> {
    checkNotInside(this.#file, this.#name, 'db.exec')
    return super.exec(sql, ...params)
  }

  /**
   * Runs `fn` in one transaction: committed when it returns (or its promise
   * resolves), rolled back when it throws. Messages published through
   * `tx.with(channel)` are delivered after the commit, in the order
   * published, and dropped by a rollback.
   *
   * @param fn - The work, with the transaction; may be async.
   * @returns What `fn` returned.
   * @throws `fn`'s own error, unchanged, after the rollback;
   * {@link BusyError} when another writer kept the database past the busy
   * timeout; {@link SqlError} when the commit failed; {@link ConflictError}
   * at once when called inside a `db.tx` of the same database.
   */
  async tx<R>(fn: (tx: Tx) => R | PromiseLike<R>): Promise<R> {
    check.fn('the work given to db.tx', fn, 'async (tx) => { ... }')
    checkNotInside(this.#file, this.#name, 'db.tx')
    const native = await settle(this.target.begin())
    const open: Open = { file: this.#file, open: true }
    let value: R
    try {
      value = await inside.run([...(inside.getStore() ?? []), open], () => fn(new Tx(native)))
    } catch (err) {
      open.open = false
      await native.rollback().catch(() => {})
      throw err
    }
    open.open = false
    await settle(native.commit())
    return value
  }
}

/**
 * A transaction in progress, given to the function of `db.tx`: `exec` and
 * `query` see its own writes; `with(channel)` publishes at its commit.
 */
export class Tx extends Statements {
  /** @internal */
  protected readonly target: NativeTx

  /** @internal Made by `db.tx`. */
  constructor(native: NativeTx) {
    super()
    this.target = native
  }

  /**
   * The channel (or branch), publishing into this transaction:
   * `await tx.with(events).under(chatId).publish(event)`.
   */
  with<T>(channel: Branch<T>): TxBranch<T> {
    return new TxBranch<T>(this.target, storeOf(channel), channel.name, channel.path)
  }
}

/** A branch of a channel seen from inside a transaction. */
export class TxBranch<T> {
  #tx: NativeTx
  #store: NativeStore
  #name: string
  #path: readonly Key[]

  /** @internal Made by `tx.with(channel)`. */
  constructor(tx: NativeTx, store: NativeStore, name: string, path: readonly Key[]) {
    this.#tx = tx
    this.#store = store
    this.#name = name
    this.#path = path
  }

  /** The branch `key` below this one; an {@link InvalidError} for a key not a string, number or bigint. */
  under(key: Key): TxBranch<T> {
    return new TxBranch<T>(this.#tx, this.#store, this.#name, [...this.#path, check.key(key)])
  }

  /**
   * Publishes `value` when the transaction commits; nothing if it rolls back.
   *
   * @throws {@link LimitError} (over 1 MiB, or nested over 100 deep) or {@link InvalidError} now; an
   * {@link InvalidError} too for a channel of another store than the
   * transaction's database (its commit publishes to that store).
   */
  async publish(value: T): Promise<void> {
    const json = encode(value)
    await now(() => this.#tx.publish(this.#store, this.#name, this.#path as Key[], json))
  }
}
