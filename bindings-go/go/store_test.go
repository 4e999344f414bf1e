package tinystore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

func TestErrorsCarryTheCoreCodeAndMessageAndMatchOneSentinel(t *testing.T) {
	store := testkit.Owned(t)
	_, err := locks.OpenLock(store, "summaries", locks.TTL(10*time.Millisecond))
	var e *tinystore.Error
	if !errors.As(err, &e) || e.Code != "invalid" || !strings.Contains(e.Message, "30s") {
		t.Fatalf("got %#v, want a *tinystore.Error of code invalid whose message shows a valid ttl", err)
	}
	if err.Error() != e.Message+" (invalid)" {
		t.Fatalf("Error() is %q", err.Error())
	}
	matched := 0
	for _, s := range []error{tinystore.ErrTimeout, tinystore.ErrInvalid, tinystore.ErrLimit, tinystore.ErrClosed,
		tinystore.ErrLost, tinystore.ErrOwned, tinystore.ErrConflict, tinystore.ErrBusy, tinystore.ErrSQL,
		tinystore.ErrAuth, tinystore.ErrIO, tinystore.ErrProtocol, tinystore.ErrInternal, tinystore.ErrUnavailable} {
		if errors.Is(err, s) {
			matched++
		}
	}
	if matched != 1 || !errors.Is(err, tinystore.ErrInvalid) {
		t.Fatalf("the error matches %d sentinels, want only ErrInvalid", matched)
	}
}

func TestStoreCloseIsIdempotentAndEndsEveryCall(t *testing.T) {
	store := testkit.Owned(t)
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := channels.OpenChannel[int](store, "chat-events"); !errors.Is(err, tinystore.ErrClosed) {
		t.Fatalf("a channel of a closed store: %v, want ErrClosed", err)
	}
	if _, err := locks.OpenLock(store, "summaries"); !errors.Is(err, tinystore.ErrClosed) {
		t.Fatalf("a lock of a closed store: %v, want ErrClosed", err)
	}
}

// STORE-01: a closed store, owned or connected, answers Status with
// ErrClosed, not with what it held before.
func TestStore01StatusOfAClosedStoreIsErrClosed(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		ctx := context.Background()
		store := stores.Open()
		l, err := locks.OpenLock(store, "summaries")
		if err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		held := make(chan struct{})
		go func() {
			_ = l.Hold(ctx, 7, func(context.Context, *locks.Lease) error {
				close(held)
				<-release
				return nil
			})
		}()
		defer close(release)
		testkit.Receive(t, held, 5*time.Second, "key 7 held")
		if st, err := store.Status(ctx); err != nil || len(st.Locks) != 1 {
			t.Fatalf("status while open: %+v %v, want key 7 held", st, err)
		}
		store.Close()
		st, err := store.Status(ctx)
		if !errors.Is(err, tinystore.ErrClosed) {
			t.Fatalf("status after Close: %+v %v, want ErrClosed", st, err)
		}
		if st != nil {
			t.Fatalf("status after Close gave %+v with its error", st)
		}
	})
}

func TestStoreOpenReportsWhatWentWrong(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tinystore.Open(context.Background(), file); !errors.Is(err, tinystore.ErrIO) {
		t.Fatalf("a store in a file: %v, want ErrIO", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tinystore.Open(ctx, testkit.Dir(t)); !errors.Is(err, context.Canceled) {
		t.Fatalf("open with a cancelled ctx: %v, want context.Canceled", err)
	}
}

func TestStore01ServeAddsAnAddressAndOpenConnectsToTheOwner(t *testing.T) {
	ctx := context.Background()
	dir := testkit.Dir(t)
	owner, err := tinystore.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	extra := "unix:" + filepath.Join(dir, "extra.sock")
	if err := owner.Serve(ctx, extra); err != nil {
		t.Fatal(err)
	}
	// A second Open of the directory connects to its owner; so does Connect.
	second, err := tinystore.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	client, err := tinystore.Connect(ctx, extra)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.Serve(ctx, "unix:"+filepath.Join(dir, "other.sock")); !errors.Is(err, tinystore.ErrInvalid) {
		t.Fatalf("serve on a connected store: %v, want ErrInvalid", err)
	}
	for _, s := range []*tinystore.Store{second, client} {
		if s.Epoch() != owner.Epoch() {
			t.Fatalf("a connected store has epoch %d, its owner %d", s.Epoch(), owner.Epoch())
		}
	}
	got := make(chan int, 2)
	events, err := channels.OpenChannel[int](owner, "chat-events")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := events.Subscribe(ctx, func(_ context.Context, m channels.Message[int]) error { got <- m.Value; return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(ctx)
	for i, s := range []*tinystore.Store{second, client} {
		ch, err := channels.OpenChannel[int](s, "chat-events")
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Publish(ctx, i+1); err != nil {
			t.Fatal(err)
		}
		if v := testkit.Receive(t, got, 5*time.Second, "a message through the owner"); v != i+1 {
			t.Fatalf("got %d, want %d", v, i+1)
		}
	}
}

func TestStoreStatusShowsSubscriptionsAndHeldKeys(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		ctx := context.Background()
		store := stores.Open()
		events, err := channels.OpenChannel[int](store, "chat-events")
		if err != nil {
			t.Fatal(err)
		}
		sub, err := events.Under(7).Subscribe(ctx, func(context.Context, channels.Message[int]) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop(ctx)
		l, err := locks.OpenLock(store, "summaries")
		if err != nil {
			t.Fatal(err)
		}
		err = l.Hold(ctx, 7, func(ctx context.Context, lease *locks.Lease) error {
			st, err := store.Status(ctx)
			if err != nil {
				return err
			}
			if st.Subscriptions != 1 || st.Epoch != lease.Fence.Hi || len(st.Locks) != 1 {
				t.Errorf("status %+v", st)
				return nil
			}
			// The branch shows its subscription's lag (CHAN-02): one entry, nothing unread.
			var lag []uint64
			for _, b := range st.Branches {
				if b.Channel == "chat-events" && len(b.Branch) == 1 && b.Branch[0] == "7" {
					lag = b.Lag
				}
			}
			if len(lag) != 1 || lag[0] != 0 {
				t.Errorf("branch 7 of chat-events has lag %v, want [0]; branches %+v", lag, st.Branches)
			}
			k := st.Locks[0]
			if k.Lock != "summaries" || k.Key != "7" || len(k.Holders) != 1 || k.Holders[0].Fence != lease.Fence.String() {
				t.Errorf("key status %+v, want key 7 held with fence %s", k, lease.Fence)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
