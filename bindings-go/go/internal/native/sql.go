package native

/*
#include "tinystore.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// DB is a database handle.
type DB struct {
	p     *C.TsDb
	store *Store
}

// Done is what a write did.
type Done struct {
	Changes         uint64
	LastInsertRowid int64
}

// OpenDB opens the database name, applying migrations when not "".
func (s *Store) OpenDB(name, migrations string, busy *time.Duration) (*DB, error) {
	var p *C.TsDb
	var e *C.TsError
	np, nn := ptr(name)
	mp, mn := ptr(migrations)
	hasBusy, busyNs := C.uint8_t(0), C.int64_t(0)
	if busy != nil {
		hasBusy, busyNs = 1, C.int64_t(*busy)
	}
	err := errorOf(C.ts_db_open(s.p, np, nn, mp, mn, hasBusy, busyNs, &p, &e), e)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	db := &DB{p: p, store: s}
	runtime.AddCleanup(db, func(p *C.TsDb) { C.ts_db_free(p) }, p)
	return db, nil
}

// Rows are a query's columns and values.
type Rows struct {
	Columns []string
	Values  [][]any
}

func takeRows(r *C.TsRows) *Rows {
	defer C.ts_rows_free(r)
	var v C.TsRowsView
	C.ts_rows_view(r, &v)
	ncols, nrows := int(v.ncols), int(v.nrows)
	vals := unsafe.Slice(v.values, ncols*(nrows+1))
	buf := unsafe.Slice((*byte)(unsafe.Pointer(v.buf)), int(v.buf_len))
	out := &Rows{Columns: make([]string, ncols), Values: make([][]any, nrows)}
	for i := range ncols {
		out.Columns[i] = goValue(vals[i], buf).(string)
	}
	for r := range nrows {
		row := make([]any, ncols)
		for c := range ncols {
			row[c] = goValue(vals[ncols*(r+1)+c], buf)
		}
		out.Values[r] = row
	}
	return out
}

// Exec runs one statement that writes.
func (d *DB) Exec(sql string, args []any) (Done, error) {
	pv, err := paramValues(args)
	if err != nil {
		return Done{}, err
	}
	var out C.TsDone
	var e *C.TsError
	sp, sn := ptr(sql)
	vp, vn, bp, bn := pv.ptrs()
	err = errorOf(C.ts_db_exec(d.p, sp, sn, vp, vn, bp, bn, &out, &e), e)
	runtime.KeepAlive(d)
	return Done{uint64(out.changes), int64(out.last_insert_rowid)}, err
}

// Query runs a query.
func (d *DB) Query(sql string, args []any) (*Rows, error) {
	pv, err := paramValues(args)
	if err != nil {
		return nil, err
	}
	var r *C.TsRows
	var e *C.TsError
	sp, sn := ptr(sql)
	vp, vn, bp, bn := pv.ptrs()
	err = errorOf(C.ts_db_query(d.p, sp, sn, vp, vn, bp, bn, &r, &e), e)
	runtime.KeepAlive(d)
	if err != nil {
		return nil, err
	}
	return takeRows(r), nil
}

// Tx is a transaction in progress until Commit or Rollback; after, its
// calls fail with an error of code "invalid".
type Tx struct {
	mu sync.Mutex
	p  *C.TsTx
	db *DB
}

func (t *Tx) lock() error {
	t.mu.Lock()
	if t.p == nil {
		t.mu.Unlock()
		return Invalid("the transaction already ended: use tx only inside its function")
	}
	return nil
}

// Begin begins a transaction.
func (d *DB) Begin() (*Tx, error) {
	var p *C.TsTx
	var e *C.TsError
	err := errorOf(C.ts_db_begin(d.p, &p, &e), e)
	runtime.KeepAlive(d)
	if err != nil {
		return nil, err
	}
	return &Tx{p: p, db: d}, nil
}

// Exec runs one statement that writes, inside the transaction.
func (t *Tx) Exec(sql string, args []any) (Done, error) {
	pv, err := paramValues(args)
	if err != nil {
		return Done{}, err
	}
	if err := t.lock(); err != nil {
		return Done{}, err
	}
	defer t.mu.Unlock()
	var out C.TsDone
	var e *C.TsError
	sp, sn := ptr(sql)
	vp, vn, bp, bn := pv.ptrs()
	err = errorOf(C.ts_tx_exec(t.p, sp, sn, vp, vn, bp, bn, &out, &e), e)
	return Done{uint64(out.changes), int64(out.last_insert_rowid)}, err
}

// Query runs a query inside the transaction.
func (t *Tx) Query(sql string, args []any) (*Rows, error) {
	pv, err := paramValues(args)
	if err != nil {
		return nil, err
	}
	if err := t.lock(); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	var r *C.TsRows
	var e *C.TsError
	sp, sn := ptr(sql)
	vp, vn, bp, bn := pv.ptrs()
	if err := errorOf(C.ts_tx_query(t.p, sp, sn, vp, vn, bp, bn, &r, &e), e); err != nil {
		return nil, err
	}
	return takeRows(r), nil
}

// Publish holds data (JSON) for the branch keys of channel of store s until
// the commit; ErrInvalid when s is not the transaction's store.
func (t *Tx) Publish(s *Store, channel string, keys []any, data []byte) error {
	kv, err := keyValues(keys)
	if err != nil {
		return err
	}
	if err := t.lock(); err != nil {
		return err
	}
	defer t.mu.Unlock()
	var e *C.TsError
	cp, cn := ptr(channel)
	vp, vn, bp, bn := kv.ptrs()
	dp, dn := bptr(data)
	rc := C.ts_tx_publish(t.p, s.p, cp, cn, vp, vn, bp, bn, dp, dn, &e)
	runtime.KeepAlive(s)
	return errorOf(rc, e)
}

// Commit commits and ends the transaction.
func (t *Tx) Commit() error { return t.end(true) }

// Rollback rolls back and ends the transaction.
func (t *Tx) Rollback() error { return t.end(false) }

func (t *Tx) end(commit bool) error {
	if err := t.lock(); err != nil {
		return err
	}
	defer t.mu.Unlock()
	var e *C.TsError
	var rc C.int32_t
	if commit {
		rc = C.ts_tx_commit(t.p, &e)
	} else {
		rc = C.ts_tx_rollback(t.p, &e)
	}
	t.p = nil
	runtime.KeepAlive(t.db)
	return errorOf(rc, e)
}
