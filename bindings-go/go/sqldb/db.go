// Package sqldb opens the SQL databases of a store (SQLite files in the
// store directory), runs statements with bound parameters, and runs
// transactions that channels can publish in (delivered at commit).
//
//	db, err := sqldb.Open(ctx, store, "chat", sqldb.Migrations("migrations"))
//	done, err := db.Exec(ctx, `update chats set summary = ? where id = ?`, summary, chatID)
//	rows, err := db.Query(ctx, `select id, summary from chats where id = ?`, chatID)
//	err = db.Tx(ctx, func(tx *sqldb.Tx) error { ... })
//
// Parameters are bound, never spliced into the text: nil, any Go integer
// (unsigned ones up to 2^63-1), float32 and float64, bool (0 or 1), string,
// []byte, and any driver.Valuer (a locks.Fence binds as its 40-digit text).
//
// The calls block while SQLite works; ctx is checked before each.
package sqldb

import (
	"context"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/native"
)

// DB is a SQL database of a store: the file <dir>/<name>.db (WAL, foreign
// keys on). Writes go through one connection, so a process's writers wait
// for each other up to the busy timeout; reads never block the writer.
// Safe for concurrent use.
type DB struct {
	n *native.DB
}

// Option is an option of Open.
type Option func(*options)

type options struct {
	migrations string
	busy       *time.Duration
}

// Migrations applies the numbered .sql files of dir (0004_summary_fence.sql)
// in order, each once, each in its own transaction, when the database opens.
// Opening fails with [tinystore.ErrSQL] when one fails (nothing of it stays
// applied), an applied one was edited, or a new one is numbered below one
// already applied (it would run out of order).
func Migrations(dir string) Option {
	return func(o *options) { o.migrations = dir }
}

// BusyTimeout is how long a writer waits for another before
// [tinystore.ErrBusy]; 5 seconds unless set.
func BusyTimeout(d time.Duration) Option {
	return func(o *options) { o.busy = &d }
}

// Open opens the database name of store, creating it if needed, and
// applies its migrations.
//
// Errors: [tinystore.ErrInvalid] (name out of rule, like "chat"),
// [tinystore.ErrSQL] (a migration failed: nothing of it stays applied; an
// applied file changed; or a new one is numbered below one applied),
// [tinystore.ErrIO], [tinystore.ErrBusy],
// [tinystore.ErrClosed], ctx.Err().
func Open(ctx context.Context, store *tinystore.Store, name string, opts ...Option) (*DB, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := native.StoreOf(store)
	if s == nil {
		return nil, native.Invalid("sqldb.Open needs an open store; got nil")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	n, err := s.OpenDB(name, o.migrations, o.busy)
	if err != nil {
		return nil, err
	}
	return &DB{n: n}, nil
}

// Result is what a write did.
type Result struct {
	// Changes is how many rows the statement changed.
	Changes int64
	// LastInsertRowid is the rowid of the last row inserted on the
	// database's writing connection.
	LastInsertRowid int64
}

func result(d native.Done, err error) (Result, error) {
	return Result{Changes: int64(d.Changes), LastInsertRowid: d.LastInsertRowid}, err
}

// Exec runs one statement with args bound to its ? placeholders.
//
// Errors: [tinystore.ErrSQL], [tinystore.ErrBusy], [tinystore.ErrInvalid]
// (a parameter of a type SQL cannot bind), [tinystore.ErrClosed], ctx.Err().
func (db *DB) Exec(ctx context.Context, sql string, args ...any) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return result(db.n.Exec(sql, args))
}

// Query runs a query with args bound to its ? placeholders and gives its
// rows. Errors as [DB.Exec].
func (db *DB) Query(ctx context.Context, sql string, args ...any) (*Rows, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r, err := db.n.Query(sql, args)
	if err != nil {
		return nil, err
	}
	return &Rows{Columns: r.Columns, Values: r.Values}, nil
}

// Tx runs fn in one transaction: committed when fn returns nil, rolled back
// when it returns an error (returned unchanged) or panics (the panic goes
// on). Messages published in it through a channel's In(tx) are delivered
// after the commit, in the order published, and dropped by a rollback.
// The transaction holds the database's writer until it ends.
//
// Errors: fn's own, [tinystore.ErrBusy], [tinystore.ErrSQL] (the commit
// failed: nothing is delivered), [tinystore.ErrClosed],
// [tinystore.ErrUnavailable] (connected, the owner stayed out of reach past
// the request timeout: rolled back), ctx.Err().
func (db *DB) Tx(ctx context.Context, fn func(tx *Tx) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := db.n.Begin()
	if err != nil {
		return err
	}
	tx := &Tx{n: n}
	committed := false
	defer func() {
		if !committed {
			_ = n.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committed = true
	return n.Commit()
}
