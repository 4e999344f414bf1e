package locks_test

import (
	"context"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

// STORE-01, LOCK-05: A holds K over a connection; the owner is killed
// (kill -9) and another process owns the store; B asks for K at once. A
// keeps its lease (same fence, never lost while it renews: its ctx is not
// cancelled), and B gets K only after A let go, with a larger fence.
func TestStore01Lock05ALeaseOutlivesTheOwnersDeathAndTheNewOwnerWaitsForIt(t *testing.T) {
	ctx := context.Background()
	dir := testkit.Dir(t)
	address := "unix:" + filepath.Join(dir, "tinystore.sock")
	first := testkit.StartOwner(t, dir)
	a, err := tinystore.Connect(ctx, address)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	aLock, err := locks.OpenLock(a, "l", locks.TTL(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var releasedAt, grantedAt time.Time
	held := make(chan locks.Fence, 1)
	gone := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- aLock.Hold(ctx, "K", func(hctx context.Context, lease *locks.Lease) error {
			held <- lease.Fence
			<-gone
			if hctx.Err() != nil || lease.Lost() {
				t.Errorf("A was told lost while it renewed")
			}
			mu.Lock()
			releasedAt = time.Now()
			mu.Unlock()
			return nil
		})
	}()
	fenceA := testkit.Receive(t, held, 5*time.Second, "A holds K")
	first.Signal(t, syscall.SIGKILL)
	testkit.StartOwner(t, dir)
	b, err := tinystore.Connect(ctx, address)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bLock, err := locks.OpenLock(b, "l", locks.Wait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	bFence := make(chan locks.Fence, 1)
	bDone := make(chan error, 1)
	go func() {
		bDone <- bLock.Hold(ctx, "K", func(_ context.Context, lease *locks.Lease) error {
			mu.Lock()
			grantedAt = time.Now()
			mu.Unlock()
			bFence <- lease.Fence
			return nil
		})
	}()
	time.Sleep(3 * time.Second) // past A's ttl of 2 s: A renews through the new owner
	select {
	case <-bFence:
		t.Fatal("B was granted K while A still held it")
	default:
	}
	close(gone)
	if err := testkit.Receive(t, aDone, 10*time.Second, "A's hold to end"); err != nil {
		t.Fatalf("A's hold: %v", err)
	}
	fenceB := testkit.Receive(t, bFence, 10*time.Second, "B to get K")
	if err := testkit.Receive(t, bDone, 10*time.Second, "B's hold to end"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if grantedAt.Before(releasedAt) {
		t.Fatal("B was granted K before A let go")
	}
	if !fenceA.Less(fenceB) || fenceB.Hi <= fenceA.Hi {
		t.Fatalf("B's fence %v is not after A's %v in a later epoch", fenceB, fenceA)
	}
}
