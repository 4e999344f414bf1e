package locks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

var bg = context.Background()

func openLock(t testing.TB, store *tinystore.Store, name string, opts ...locks.Option) *locks.Lock {
	t.Helper()
	l, err := locks.OpenLock(store, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLock01OneHolderAtATimeAmongManyGoroutines(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		l := openLock(t, stores.Open(), "jobs")
		var inside, most, total atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for range 20 {
					err := l.Hold(bg, "k", func(context.Context, *locks.Lease) error {
						n := inside.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						time.Sleep(50 * time.Microsecond)
						inside.Add(-1)
						total.Add(1)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if most.Load() != 1 || total.Load() != 16*20 {
			t.Fatalf("at most %d holders at once over %d holds, want 1 over 320", most.Load(), total.Load())
		}
	})
}

func TestLock01SemaphoreGivesAtMostItsLimit(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		sem, err := locks.OpenSemaphore(stores.Open(), "exports", 3)
		if err != nil {
			t.Fatal(err)
		}
		var inside, most atomic.Int32
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				for range 10 {
					err := sem.Hold(bg, 1, func(context.Context, *locks.Permit) error {
						n := inside.Add(1)
						for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
						}
						// Stay until the limit was reached once (or 200 ms):
						// on etcd a grant takes longer than a short hold, and
						// holders that never overlap would not show it.
						for end := time.Now().Add(200 * time.Millisecond); most.Load() < 3 && time.Now().Before(end); {
							time.Sleep(100 * time.Microsecond)
						}
						time.Sleep(time.Millisecond)
						inside.Add(-1)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if most.Load() != 3 {
			t.Fatalf("at most %d permits at once, want exactly the limit 3", most.Load())
		}
	})
}

func TestLock02FencesGrowWithinAnOpenAndAcrossARestart(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		var last locks.Fence
		for open := range 3 {
			store := stores.Open()
			l := openLock(t, store, "summaries")
			for i := range 5 {
				err := l.Hold(bg, i%2, func(_ context.Context, lease *locks.Lease) error {
					if !last.Less(lease.Fence) {
						return fmt.Errorf("open %d: fence %s after %s", open, lease.Fence, last)
					}
					if lease.Fence.Hi != store.Epoch() {
						return fmt.Errorf("fence %s has epoch %d, the store's is %d", lease.Fence, lease.Fence.Hi, store.Epoch())
					}
					last = lease.Fence
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			stores.Close() // the owner too: a restart
		}
	})
}

func TestLock03HoldWaitsThenTimesOutAndTryHoldNeverWaits(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		a := openLock(t, store, "summaries")
		b := openLock(t, store, "summaries", locks.Wait(300*time.Millisecond))
		err := a.Hold(bg, 7, func(ctx context.Context, _ *locks.Lease) error {
			ran := false
			start := time.Now()
			err := b.Hold(bg, 7, func(context.Context, *locks.Lease) error { ran = true; return nil })
			waited := time.Since(start)
			if !errors.Is(err, tinystore.ErrTimeout) || ran {
				return fmt.Errorf("hold of a held key: %v (ran %v), want ErrTimeout without running", err, ran)
			}
			if waited < 250*time.Millisecond || waited > 3*time.Second {
				return fmt.Errorf("waited %v, want about the 300ms wait", waited)
			}
			start = time.Now()
			started, err := b.TryHold(bg, 7, func(context.Context, *locks.Lease) error { ran = true; return nil })
			if started || err != nil || ran || time.Since(start) > time.Second {
				return fmt.Errorf("tryHold of a held key: %v %v ran %v after %v", started, err, ran, time.Since(start))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestLock03WaitersGetTheKeyInTheOrderTheyAsked(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		l := openLock(t, store, "queue")
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		release := make(chan struct{})
		holding := make(chan struct{})
		wg.Go(func() {
			_ = l.Hold(bg, "k", func(context.Context, *locks.Lease) error { close(holding); <-release; return nil })
		})
		<-holding
		for i := range 5 {
			wg.Go(func() {
				err := l.Hold(bg, "k", func(context.Context, *locks.Lease) error {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
			testkit.Eventually(t, 5*time.Second, fmt.Sprint("waiter ", i, " is in line"), func() bool {
				return waiters(t, store, "queue", "k") == i+1
			})
		}
		close(release)
		wg.Wait()
		if fmt.Sprint(order) != "[0 1 2 3 4]" {
			t.Fatalf("waiters got the key in order %v", order)
		}
	})
}

func TestLock04KeyGoesOnErrorPanicAndCancelledWait(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		l := openLock(t, stores.Open(), "summaries", locks.TTL(time.Second))
		free := func(what string) {
			t.Helper()
			started, err := l.TryHold(bg, 1, func(context.Context, *locks.Lease) error { return nil })
			if !started || err != nil {
				t.Fatalf("after %s the key is not free: %v %v", what, started, err)
			}
		}
		mine := errors.New("the function's own error")
		if err := l.Hold(bg, 1, func(context.Context, *locks.Lease) error { return mine }); err != mine {
			t.Fatalf("Hold gave %v, want the function's error unchanged", err)
		}
		free("an error")

		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v, want the function's panic", r)
				}
			}()
			_ = l.Hold(bg, 1, func(context.Context, *locks.Lease) error { panic("boom") })
		}()
		free("a panic")

		// A waiter whose ctx ends leaves the line: it never holds the key.
		holding, release := make(chan struct{}), make(chan struct{})
		done := make(chan error)
		go func() {
			done <- l.Hold(bg, 1, func(context.Context, *locks.Lease) error { close(holding); <-release; return nil })
		}()
		<-holding
		ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
		defer cancel()
		ran := false
		err := l.Hold(ctx, 1, func(context.Context, *locks.Lease) error { ran = true; return nil })
		if !errors.Is(err, context.DeadlineExceeded) || ran {
			t.Fatalf("a cancelled wait: %v (ran %v), want ctx's error without running", err, ran)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The cancelled waiter left the line at once (over a connection the
		// client tells the store), so the key is free well within the ttl.
		testkit.Eventually(t, 500*time.Millisecond, "the key is free after a cancelled waiter", func() bool {
			started, err := l.TryHold(bg, 1, func(context.Context, *locks.Lease) error { return nil })
			return started && err == nil
		})
	})
}

func TestLock06MaxHoldCancelsTheHoldersContextAndHoldSaysLost(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		l := openLock(t, stores.Open(), "summaries", locks.MaxHold(300*time.Millisecond))
		start := time.Now()
		var cause error
		err := l.Hold(bg, 1, func(ctx context.Context, lease *locks.Lease) error {
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				if !lease.Lost() {
					return errors.New("ctx cancelled but the lease is not lost")
				}
				return nil
			case <-time.After(5 * time.Second):
				return errors.New("ctx not cancelled at maxHold")
			}
		})
		if !errors.Is(err, tinystore.ErrLost) || !errors.Is(cause, tinystore.ErrLost) {
			t.Fatalf("Hold gave %v, cause %v; want ErrLost for both", err, cause)
		}
		if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
			t.Fatalf("lost after %v, want about the 300ms maxHold", d)
		}
		if !strings.Contains(err.Error(), "maxHold") {
			t.Fatalf("the error does not say why: %v", err)
		}
	})
}

func TestLock06LostEvenIfTheFunctionNeverLooks(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		l := openLock(t, stores.Open(), "summaries", locks.MaxHold(200*time.Millisecond))
		err := l.Hold(bg, 1, func(context.Context, *locks.Lease) error {
			time.Sleep(500 * time.Millisecond) // never looks at ctx
			return nil
		})
		if !errors.Is(err, tinystore.ErrLost) {
			t.Fatalf("Hold gave %v, want ErrLost", err)
		}
	})
}

func TestLock07InProcessLeaseOutlivesItsTTL(t *testing.T) {
	// In-process only: a lease of the owning process.
	l := openLock(t, testkit.Owned(t), "summaries", locks.TTL(time.Second))
	err := l.Hold(bg, 1, func(ctx context.Context, lease *locks.Lease) error {
		time.Sleep(1500 * time.Millisecond)
		if ctx.Err() != nil || lease.Lost() {
			return errors.New("the lease of the owning process ran out at its ttl")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLock08HoldInsideAHoldOfTheSameKeyFailsAtOnce(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		l := openLock(t, store, "summaries")
		err := l.Hold(bg, 7, func(ctx context.Context, _ *locks.Lease) error {
			start := time.Now()
			err := l.Hold(ctx, 7, func(context.Context, *locks.Lease) error { return errors.New("ran inside itself") })
			if !errors.Is(err, tinystore.ErrConflict) || time.Since(start) > time.Second {
				return fmt.Errorf("nested hold: %v after %v, want ErrConflict at once", err, time.Since(start))
			}
			started, err := l.TryHold(ctx, 7, func(context.Context, *locks.Lease) error { return nil })
			if started || err != nil {
				return fmt.Errorf("nested tryHold: %v %v, want not acquired", started, err)
			}
			// Another key is fine for the same holder.
			return l.Hold(ctx, 8, func(context.Context, *locks.Lease) error { return nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		// LOCK-08: the limit is the semaphore's, refused when the handle is made
		// (over a connection too: the handle asks the owner).
		three, err := locks.OpenSemaphore(store, "exports", 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := three.Hold(bg, 1, func(context.Context, *locks.Permit) error { return nil }); err != nil {
			t.Fatal(err)
		}
		conflict := func(what string, open func() (func() error, error)) {
			t.Helper()
			_, err := open()
			if !errors.Is(err, tinystore.ErrConflict) {
				t.Fatalf("%s: %v, want ErrConflict when the handle is made", what, err)
			}
		}
		conflict("a semaphore opened with another limit", func() (func() error, error) {
			four, err := locks.OpenSemaphore(store, "exports", 4)
			if err != nil {
				return nil, err
			}
			return func() error { return four.Hold(bg, 1, func(context.Context, *locks.Permit) error { return nil }) }, nil
		})
		conflict("a semaphore's name opened as a lock", func() (func() error, error) {
			l, err := locks.OpenLock(store, "exports")
			if err != nil {
				return nil, err
			}
			return func() error { return l.Hold(bg, 1, func(context.Context, *locks.Lease) error { return nil }) }, nil
		})
	})
}

func TestNamesLockOptionsAreCheckedWhenTheHandleIsMade(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		for what, opts := range map[string][]locks.Option{
			"ttl 500ms":   {locks.TTL(500 * time.Millisecond)},
			"ttl 2h":      {locks.TTL(2 * time.Hour)},
			"ttl -1s":     {locks.TTL(-time.Second)},
			"wait 0":      {locks.Wait(0)},
			"maxHold 0":   {locks.MaxHold(0)},
			"maxHold -1s": {locks.MaxHold(-time.Second)},
		} {
			if _, err := locks.OpenLock(store, "summaries", opts...); !errors.Is(err, tinystore.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", what, err)
			}
		}
		if _, err := locks.OpenLock(store, "Summaries"); !errors.Is(err, tinystore.ErrInvalid) {
			t.Errorf("a name out of rule: %v, want ErrInvalid", err)
		}
		if _, err := locks.OpenSemaphore(store, "exports", 0); !errors.Is(err, tinystore.ErrInvalid) {
			t.Errorf("a limit of 0: %v, want ErrInvalid", err)
		}
		l := openLock(t, store, "summaries")
		if err := l.Hold(bg, 2.5, func(context.Context, *locks.Lease) error { return nil }); !errors.Is(err, tinystore.ErrInvalid) {
			t.Errorf("a float key: %v, want ErrInvalid", err)
		}
		if _, err := l.TryHold(bg, "", func(context.Context, *locks.Lease) error { return nil }); !errors.Is(err, tinystore.ErrInvalid) {
			t.Errorf("an empty key: %v, want ErrInvalid", err)
		}
	})
}

func TestLockClosingTheStoreEndsLeasesAndWaiters(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		l := openLock(t, store, "summaries")
		holding := make(chan struct{})
		waiter := make(chan error)
		err := l.Hold(bg, 1, func(ctx context.Context, _ *locks.Lease) error {
			go func() {
				<-holding
				waiter <- l.Hold(bg, 1, func(context.Context, *locks.Lease) error { return nil })
			}()
			close(holding)
			time.Sleep(50 * time.Millisecond)
			store.Close()
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				return errors.New("the holder's ctx is not cancelled when the store closes")
			}
			return nil
		})
		if !errors.Is(err, tinystore.ErrLost) {
			t.Fatalf("Hold across a close: %v, want ErrLost", err)
		}
		if err := testkit.Receive(t, waiter, 5*time.Second, "the waiter ends"); !errors.Is(err, tinystore.ErrClosed) {
			t.Fatalf("a waiter across a close: %v, want ErrClosed", err)
		}
	})
}

// waiters is how many holds wait for key of lock, as the store says.
func waiters(t testing.TB, store *tinystore.Store, lock, key string) int {
	t.Helper()
	st, err := store.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range st.Locks {
		if k.Lock == lock && k.Key == key {
			return k.Waiters
		}
	}
	return 0
}

// LOCK-03, LOCK-06: a negative duration, a semaphore limit past 32 bits or
// under 1, and a Hold given no function are ErrInvalid saying what was
// wrong, never a wrapped value, a "got 0" or a nil-pointer panic.
func TestLock03Lock06BadOptionsAndNilFunctionsAreInvalid(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		for _, opt := range []locks.Option{locks.TTL(-5 * time.Second), locks.Wait(-5 * time.Second), locks.MaxHold(-time.Second)} {
			_, err := locks.OpenLock(store, "l", opt)
			if !errors.Is(err, tinystore.ErrInvalid) || !strings.Contains(err.Error(), "-5s") && !strings.Contains(err.Error(), "-1s") {
				t.Fatalf("a negative duration: %v", err)
			}
		}
		for _, limit := range []int{0, -1, 1 << 32} {
			if _, err := locks.OpenSemaphore(store, "s", limit); !errors.Is(err, tinystore.ErrInvalid) || !strings.Contains(err.Error(), "4294967295") {
				t.Fatalf("limit %d: %v", limit, err)
			}
		}
		l := openLock(t, store, "l")
		if err := l.Hold(bg, 1, nil); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("Hold with no function: %v", err)
		}
		if _, err := l.TryHold(bg, 1, nil); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("TryHold with no function: %v", err)
		}
		sem, err := locks.OpenSemaphore(store, "s", 2)
		if err != nil {
			t.Fatal(err)
		}
		if err := sem.Hold(bg, 1, nil); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("a semaphore's Hold with no function: %v", err)
		}
		// The lock still works.
		if err := l.Hold(bg, 1, func(context.Context, *locks.Lease) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
}
