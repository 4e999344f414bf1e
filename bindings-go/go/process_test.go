package tinystore_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

func TestMain(m *testing.M) { testkit.Main(m, nil) }

// STORE-01, LOCK-04: every call that may wait for the owner ends with its
// ctx, also while the owner process is frozen (SIGSTOP) and cannot answer:
// each returns context.DeadlineExceeded about when its 200 ms deadline
// passes, not at the engine's request timeout. Calls that never wait for
// an answer (Stop, Close) return at once. Woken, the owner serves again,
// and the Hold given up while it was frozen holds nothing (its key is free).
func TestStore01Lock04CallsEndWithTheirContextWhileTheOwnerIsFrozen(t *testing.T) {
	const deadline = 200 * time.Millisecond
	// Generous for a loaded 2-core machine under -race; the engine's own
	// request timeout (10 s) is far beyond it.
	const slack = 1500 * time.Millisecond
	bg := context.Background()
	dir := testkit.Dir(t)
	owner := testkit.StartOwner(t, dir)
	addr := "unix:" + filepath.Join(dir, "tinystore.sock")
	store, err := tinystore.Connect(bg, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	other, err := tinystore.Connect(bg, addr)
	if err != nil {
		t.Fatal(err)
	}
	events, err := channels.OpenChannel[int](store, "chat-events")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := events.Under(1).Subscribe(bg, func(context.Context, channels.Message[int]) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	summaries, err := locks.OpenLock(store, "summaries", locks.TTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// The connection works before the freeze.
	if err := events.Under(2).Publish(bg, 0); err != nil {
		t.Fatal(err)
	}

	owner.Signal(t, syscall.SIGSTOP)
	ran := func(context.Context, *locks.Lease) error {
		t.Error("a hold's function ran while the owner was frozen")
		return nil
	}
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Publish", func(ctx context.Context) error { return events.Under(2).Publish(ctx, 1) }},
		{"Subscribe", func(ctx context.Context) error {
			s, err := events.Under(3).Subscribe(ctx, func(context.Context, channels.Message[int]) error { return nil })
			if err == nil {
				_ = s.Stop(bg)
			}
			return err
		}},
		{"Hold", func(ctx context.Context) error { return summaries.Hold(ctx, 7, ran) }},
		{"TryHold", func(ctx context.Context) error { _, err := summaries.TryHold(ctx, 8, ran); return err }},
		{"Status", func(ctx context.Context) error { _, err := store.Status(ctx); return err }},
		{"Connect", func(ctx context.Context) error {
			s, err := tinystore.Connect(ctx, addr)
			if err == nil {
				s.Close()
			}
			return err
		}},
		{"Open", func(ctx context.Context) error {
			s, err := tinystore.Open(ctx, dir)
			if err == nil {
				s.Close()
			}
			return err
		}},
	}
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(bg, deadline)
		start := time.Now()
		err := c.call(ctx)
		took := time.Since(start)
		cancel()
		t.Logf("%s: %v after %v", c.name, err, took)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s against a frozen owner: %v after %v, want context.DeadlineExceeded", c.name, err, took)
			continue
		}
		if took < deadline-10*time.Millisecond || took > deadline+slack {
			t.Errorf("%s against a frozen owner returned after %v, want about its deadline of %v", c.name, took, deadline)
		}
	}
	for name, call := range map[string]func(){
		"Subscription.Stop": func() {
			if err := sub.Stop(bg); err != nil {
				t.Errorf("stop: %v", err)
			}
		},
		"Store.Close": func() { other.Close() },
	} {
		start := time.Now()
		call()
		if took := time.Since(start); took > slack {
			t.Errorf("%s took %v while the owner was frozen; it waits for no answer", name, took)
		}
	}

	owner.Signal(t, syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	if err := events.Under(2).Publish(ctx, 2); err != nil {
		t.Fatalf("publish after the owner woke: %v", err)
	}
	// The Hold given up at its deadline must not have left key 7 held: the
	// owner may grant it once awake, to a caller who is gone, who lets it go.
	held := false
	err = summaries.Hold(ctx, 7, func(context.Context, *locks.Lease) error { held = true; return nil })
	if err != nil || !held {
		t.Fatalf("hold of key 7 after the owner woke: %v (held %v); the cancelled hold kept it", err, held)
	}
	if _, err := store.Status(ctx); err != nil {
		t.Fatalf("status after the owner woke: %v", err)
	}
}
