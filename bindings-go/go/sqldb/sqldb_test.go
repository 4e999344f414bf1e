package sqldb_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
	"tinystore.dev/tinystore/sqldb"
)

var bg = context.Background()

func openDB(t testing.TB, store *tinystore.Store, opts ...sqldb.Option) *sqldb.DB {
	t.Helper()
	db, err := sqldb.Open(bg, store, "chat", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestSqlParametersBindAndRowsComeBackTyped(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		db := openDB(t, stores.Open())
		if _, err := db.Exec(bg, `create table t (i integer, r real, s text, b blob, n, flag integer, f text)`); err != nil {
			t.Fatal(err)
		}
		fence := locks.Fence{Hi: 1, Lo: 2}
		done, err := db.Exec(bg, `insert into t values (?, ?, ?, ?, ?, ?, ?)`, int32(-5), 2.5, "text ✓", []byte{0, 1, 2}, nil, true, fence)
		if err != nil {
			t.Fatal(err)
		}
		if done.Changes != 1 || done.LastInsertRowid != 1 {
			t.Fatalf("insert did %+v, want 1 change and rowid 1", done)
		}
		rows, err := db.Query(bg, `select i, r, s, b, n, flag, f from t where i = ?`, -5)
		if err != nil {
			t.Fatal(err)
		}
		if rows.Len() != 1 || len(rows.Columns) != 7 || rows.Columns[2] != "s" {
			t.Fatalf("rows %+v", rows)
		}
		row := rows.Maps()[0]
		want := map[string]any{"i": int64(-5), "r": 2.5, "s": "text ✓", "n": nil, "flag": int64(1), "f": fence.Padded()}
		for k, v := range want {
			if row[k] != v {
				t.Fatalf("column %s is %#v, want %#v", k, row[k], v)
			}
		}
		if b, ok := row["b"].([]byte); !ok || string(b) != "\x00\x01\x02" {
			t.Fatalf("blob came back as %#v", row["b"])
		}
		if _, err := db.Exec(bg, `insert into t (i) values (?)`, uint64(math.MaxUint64)); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("a uint64 past int64: %v, want ErrInvalid", err)
		}
		if _, err := db.Exec(bg, `insert into t (i) values (?)`, struct{}{}); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("a struct parameter: %v, want ErrInvalid", err)
		}
		if _, err := db.Exec(bg, `insert into nowhere values (1)`); !errors.Is(err, tinystore.ErrSQL) {
			t.Fatalf("a bad statement: %v, want ErrSQL", err)
		}
	})
}

// The engine refuses a real that is NaN or infinite, for every binding
// (SQLite would store NaN as null, silently): ErrInvalid naming the
// parameter, and nothing is written.
func TestSqlNaNOrInfiniteParameterIsRefusedNamingIt(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		db := openDB(t, stores.Open())
		if _, err := db.Exec(bg, `create table nums (a integer, r real)`); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			f   float64
			got string
		}{{math.NaN(), "got NaN"}, {math.Inf(1), "got Infinity"}, {math.Inf(-1), "got -Infinity"}} {
			_, err := db.Exec(bg, `insert into nums values (?, ?)`, 1, c.f)
			var e *tinystore.Error
			if !errors.As(err, &e) || e.Code != "invalid" || !strings.Contains(e.Message, "a SQL parameter is a finite number") ||
				!strings.Contains(e.Message, c.got) || !strings.Contains(e.Message, "parameter 2") {
				t.Fatalf("exec with %v: %v, want ErrInvalid saying %q of parameter 2", c.f, err, c.got)
			}
			if _, err := db.Query(bg, `select ? as v`, c.f); !errors.Is(err, tinystore.ErrInvalid) {
				t.Fatalf("query with %v: %v, want ErrInvalid", c.f, err)
			}
			err = db.Tx(bg, func(tx *sqldb.Tx) error {
				_, err := tx.Exec(bg, `insert into nums values (?, ?)`, 2, c.f)
				return err
			})
			if !errors.Is(err, tinystore.ErrInvalid) {
				t.Fatalf("tx exec with %v: %v, want ErrInvalid", c.f, err)
			}
		}
		rows, err := db.Query(bg, `select count(*) as n from nums`)
		if err != nil || rows.Maps()[0]["n"] != int64(0) {
			t.Fatalf("rows written: %v %v, want none", rows, err)
		}
	})
}

func TestSqlTxCommitsOnNilAndRollsBackOnErrorOrPanic(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		db := openDB(t, stores.Open())
		if _, err := db.Exec(bg, `create table t (v text)`); err != nil {
			t.Fatal(err)
		}
		count := func() int64 {
			rows, err := db.Query(bg, `select count(*) from t`)
			if err != nil {
				t.Fatal(err)
			}
			return rows.Values[0][0].(int64)
		}
		var kept *sqldb.Tx
		err := db.Tx(bg, func(tx *sqldb.Tx) error {
			kept = tx
			if _, err := tx.Exec(bg, `insert into t values ('a')`); err != nil {
				return err
			}
			rows, err := tx.Query(bg, `select count(*) from t`)
			if err != nil || rows.Values[0][0] != int64(1) {
				t.Errorf("the transaction does not see its own write: %v %v", rows, err)
			}
			return nil
		})
		if err != nil || count() != 1 {
			t.Fatalf("commit: %v, %d rows", err, count())
		}
		if _, err := kept.Exec(bg, `insert into t values ('late')`); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("a tx used after its function: %v, want ErrInvalid", err)
		}
		mine := errors.New("mine")
		err = db.Tx(bg, func(tx *sqldb.Tx) error {
			_, _ = tx.Exec(bg, `insert into t values ('b')`)
			return mine
		})
		if err != mine || count() != 1 {
			t.Fatalf("rollback on error: %v, %d rows", err, count())
		}
		func() {
			defer func() { _ = recover() }()
			_ = db.Tx(bg, func(tx *sqldb.Tx) error {
				_, _ = tx.Exec(bg, `insert into t values ('c')`)
				panic("boom")
			})
		}()
		if count() != 1 {
			t.Fatalf("a panic kept its write: %d rows", count())
		}
		// The writer is free again after each.
		if _, err := db.Exec(bg, `insert into t values ('d')`); err != nil {
			t.Fatal(err)
		}
	})
}

func TestSqlMigrationsApplyOnceInOrderAndAnEditIsRefused(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		dir := t.TempDir()
		write := func(name, text string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("0001_chats.sql", `create table chats (id integer primary key);`)
		write("0004_summaries.sql", "alter table chats add column summary text;\nalter table chats add column summary_fence text not null default '';\n")
		db := openDB(t, store, sqldb.Migrations(dir))
		openDB(t, store, sqldb.Migrations(dir)) // again: nothing to apply
		if _, err := db.Exec(bg, `insert into chats (id, summary) values (1, 'x')`); err != nil {
			t.Fatal(err)
		}
		write("0001_chats.sql", `create table chats (id integer primary key, other text);`)
		if _, err := sqldb.Open(bg, store, "chat", sqldb.Migrations(dir)); !errors.Is(err, tinystore.ErrSQL) {
			t.Fatalf("an edited applied migration: %v, want ErrSQL", err)
		}
		if _, err := sqldb.Open(bg, store, "Chat"); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("a name out of rule: %v, want ErrInvalid", err)
		}
		store.Close()
		if _, err := db.Exec(bg, `select 1`); !errors.Is(err, tinystore.ErrClosed) {
			t.Fatalf("exec after the store closed: %v, want ErrClosed", err)
		}
	})
}
