package channels_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/sqldb"
)

// txWriter, the helper "txwriter": $TINYSTORE_N transactions on the store
// in $TINYSTORE_DIR, each inserting a row and publishing its rowid to
// order/all; says "done".
func txWriter() int {
	ctx := context.Background()
	store, err := tinystore.Open(ctx, os.Getenv("TINYSTORE_DIR"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	db, err := sqldb.Open(ctx, store, "order")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	events, err := channels.OpenChannel[int64](store, "order")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	n, _ := strconv.Atoi(os.Getenv("TINYSTORE_N"))
	for i := 0; i < n; i++ {
		err := db.Tx(ctx, func(tx *sqldb.Tx) error {
			r, err := tx.Exec(ctx, `insert into tx (at) values (0)`)
			if err != nil {
				return err
			}
			return events.In(tx).Under("all").Publish(ctx, r.LastInsertRowid)
		})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	fmt.Println("done")
	return 0
}

// CHAN-03 across processes: four processes × 200 transactions that publish
// to one branch arrive in commit (rowid) order, none lost.
func TestChan03FourProcessesDeliverInCommitOrder(t *testing.T) {
	dir := testkit.Dir(t)
	store, err := tinystore.Open(bg, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	db, err := sqldb.Open(bg, store, "order")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(bg, `create table tx (id integer primary key, at integer)`); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []int64
	sub, err := open[int64](t, store, "order").Under("all").Subscribe(bg, func(_ context.Context, m channels.Message[int64]) error {
		mu.Lock()
		got = append(got, m.Value)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(bg)
	var kids []*testkit.Child
	for i := 0; i < 4; i++ {
		kids = append(kids, testkit.StartHelper(t, "txwriter", "TINYSTORE_DIR="+dir, "TINYSTORE_N=200"))
	}
	for _, k := range kids {
		k.Line(t, "done", 60*time.Second)
	}
	testkit.Eventually(t, 20*time.Second, "800 messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 800
	})
	mu.Lock()
	defer mu.Unlock()
	back := 0
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			back++
		}
	}
	if back != 0 {
		t.Fatalf("%d of %d messages out of commit order", back, len(got))
	}
	for i, v := range got {
		if v != int64(i+1) {
			t.Fatalf("message %d is row %d, want %d: every committed row's message arrives once, in rowid order", i, v, i+1)
		}
	}
}
