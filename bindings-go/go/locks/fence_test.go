package locks_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
	"tinystore.dev/tinystore/sqldb"
)

func TestFence01VectorsPrintTheSameDigitsAsEveryLanguage(t *testing.T) {
	for _, v := range testkit.FenceVectors(t) {
		var f locks.Fence
		if _, err := fmt.Sscan(v.Hi, &f.Hi); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(v.Lo, &f.Lo); err != nil {
			t.Fatal(err)
		}
		if v.Epoch != v.Hi || v.Count != v.Lo {
			t.Fatalf("vector %+v: epoch and count are the halves", v)
		}
		if f.String() != v.Digits || f.Padded() != v.Padded || fmt.Sprintf("%040s", f) != v.Padded {
			t.Fatalf("fence %+v prints %s / %s, want %s / %s", f, f, f.Padded(), v.Digits, v.Padded)
		}
		for _, text := range []string{v.Digits, v.Padded} {
			g, err := locks.ParseFence(text)
			if err != nil || g != f {
				t.Fatalf("ParseFence(%q) = %+v, %v; want %+v", text, g, err, f)
			}
		}
	}
}

func TestFence01PaddedTextSortsLikeTheNumber(t *testing.T) {
	fences := []locks.Fence{{0, 0}, {0, 1}, {0, 9}, {0, 10}, {0, math.MaxUint64}, {1, 0}, {1, 1}, {1764000000000, 1},
		{math.MaxUint64, math.MaxUint64}, {12345, 678}}
	byText := slices.Clone(fences)
	slices.SortFunc(fences, locks.Fence.Compare)
	sort.Slice(byText, func(i, j int) bool { return byText[i].Padded() < byText[j].Padded() })
	if !slices.Equal(fences, byText) {
		t.Fatalf("by number %v, by padded text %v", fences, byText)
	}
	if got := (locks.Fence{math.MaxUint64, math.MaxUint64}).String(); got != "340282366920938463463374607431768211455" {
		t.Fatalf("2^128-1 prints %s", got)
	}
	for _, bad := range []string{"", "-1", "1e3", "340282366920938463463374607431768211456"} {
		if _, err := locks.ParseFence(bad); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("ParseFence(%q): %v, want ErrInvalid", bad, err)
		}
	}
}

// The seeds' fence scenario: worker A holds chat 7 and pauses past its
// lease (maxHold stands in for a ttl over a connection); worker B takes the
// key and writes with its larger fence; A wakes, and its write changes no row.
func TestFence02LateWriterIsRefusedByTheFenceCheck(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		db, err := sqldb.Open(bg, store, "chat")
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`create table chats (id integer primary key, summary text, summary_fence text not null default '')`,
			`insert into chats (id) values (7)`,
		} {
			if _, err := db.Exec(bg, q); err != nil {
				t.Fatal(err)
			}
		}
		write := func(ctx context.Context, summary string, lease *locks.Lease) (int64, error) {
			fence := fmt.Sprintf("%040s", lease.Fence)
			done, err := db.Exec(ctx, `update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?`,
				summary, fence, 7, fence)
			return done.Changes, err
		}
		summaries := openLock(t, store, "summaries", locks.MaxHold(time.Second))
		aPaused, bWrote := make(chan struct{}), make(chan struct{})
		aResult := make(chan error, 1)
		var fenceA, fenceB locks.Fence
		go func() {
			aResult <- summaries.Hold(bg, 7, func(ctx context.Context, lease *locks.Lease) error {
				fenceA = lease.Fence
				close(aPaused)
				<-bWrote // A is frozen past its lease, and B wrote meanwhile
				changed, err := write(context.Background(), "stale summary by A", lease)
				if err != nil {
					return err
				}
				if changed != 0 {
					return fmt.Errorf("A's late write changed %d rows", changed)
				}
				return nil
			})
		}()
		<-aPaused
		err = summaries.Hold(bg, 7, func(ctx context.Context, lease *locks.Lease) error {
			fenceB = lease.Fence
			changed, err := write(ctx, "summary by B", lease)
			if err == nil && changed != 1 {
				err = fmt.Errorf("B's write changed %d rows", changed)
			}
			return err
		})
		close(bWrote)
		if err != nil {
			t.Fatal(err)
		}
		if err := <-aResult; !errors.Is(err, tinystore.ErrLost) {
			t.Fatalf("A's Hold: %v, want ErrLost (its write was refused, its lease ran out)", err)
		}
		if !fenceA.Less(fenceB) {
			t.Fatalf("B's fence %s is not above A's %s", fenceB, fenceA)
		}
		rows, err := db.Query(bg, `select summary, summary_fence from chats where id = 7`)
		if err != nil {
			t.Fatal(err)
		}
		if got := rows.Values[0]; got[0] != "summary by B" || got[1] != fenceB.Padded() {
			t.Fatalf("the row holds %v, want B's summary and fence", got)
		}
	})
}
