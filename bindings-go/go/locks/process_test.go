package locks_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

func TestMain(m *testing.M) {
	testkit.Main(m, map[string]func() int{"holder": holder, "lockclient": lockClient, "lockring": lockRing, "leaseclient": leaseClient, "clusterclient": clusterClient})
}

// holder connects to the store at $TINYSTORE_ADDR, holds key 7 of
// "summaries" with a 1 s ttl until told its lease is lost, and says what
// happened on stdout.
func holder() int {
	ctx := context.Background()
	store, err := tinystore.Connect(ctx, os.Getenv("TINYSTORE_ADDR"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	l, err := locks.OpenLock(store, "summaries", locks.TTL(time.Second))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	err = l.Hold(ctx, 7, func(ctx context.Context, lease *locks.Lease) error {
		fmt.Println("held", lease.Fence)
		<-ctx.Done()
		fmt.Println("told", errors.Is(context.Cause(ctx), tinystore.ErrLost))
		return nil
	})
	fmt.Println("hold lost", errors.Is(err, tinystore.ErrLost))
	return 0
}

// LOCK-05 with a holder in another process: its lease lasts while the
// engine renews it; frozen (SIGSTOP), it stops renewing, the lease runs out
// at its ttl and the key goes to the next waiter with a larger fence; woken,
// the holder is told, and its Hold says the lease was lost.
func TestLock05ConnectedLeaseRenewsThenRunsOutWhenItsHolderFreezes(t *testing.T) {
	store, dir := testkit.OwnedIn(t)
	addr := "unix:" + filepath.Join(dir, "tinystore.sock")
	child := testkit.StartHelper(t, "holder", "TINYSTORE_ADDR="+addr)
	childFence, err := locks.ParseFence(child.Line(t, "held ", 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l := openLock(t, store, "summaries", locks.Wait(10*time.Second))

	// Renewed: the key stays held past several ttls.
	started, err := l.TryHold(bg, 7, func(context.Context, *locks.Lease) error { return nil })
	if started || err != nil {
		t.Fatalf("tryHold of the child's key: %v %v", started, err)
	}
	time.Sleep(2500 * time.Millisecond)
	started, err = l.TryHold(bg, 7, func(context.Context, *locks.Lease) error { return nil })
	if started || err != nil {
		t.Fatalf("after 2.5 ttls the child's renewed lease is gone: %v %v", started, err)
	}

	child.Signal(t, syscall.SIGSTOP)
	frozen := time.Now()
	err = l.Hold(bg, 7, func(_ context.Context, lease *locks.Lease) error {
		if waited := time.Since(frozen); waited > 5*time.Second {
			return fmt.Errorf("the key came %v after the holder froze, ttl 1s", waited)
		}
		if !childFence.Less(lease.Fence) {
			return fmt.Errorf("fence %s after the frozen holder's %s", lease.Fence, childFence)
		}
		child.Signal(t, syscall.SIGCONT)
		if told := child.Line(t, "told ", 10*time.Second); told != "true" {
			return fmt.Errorf("the woken holder was told %s, want its lease lost", told)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lost := child.Line(t, "hold lost ", 10*time.Second); lost != "true" {
		t.Fatalf("the woken holder's Hold: lost %s, want ErrLost", lost)
	}
}
