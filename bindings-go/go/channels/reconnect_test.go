package channels_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

// STORE-02, CHAN-04: the owner is killed and started again while a loop of
// 1,000 publishes runs: every publish succeeds (they wait for the
// connection), and a subscriber hears reconnect and then all 1,000 in order.
func TestStore02PublishesDuringAnOwnerRestartAllSucceedInOrder(t *testing.T) {
	dir := testkit.Dir(t)
	first := testkit.StartOwner(t, dir)
	store, err := tinystore.Connect(bg, "unix:"+filepath.Join(dir, "tinystore.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	events := open[event](t, store, "chat-events")
	got := watch(t, events.Under(4))
	first.Signal(t, syscall.SIGKILL)
	failed := make(chan []error, 1)
	go func() {
		var errs []error
		for i := 0; i < 1000; i++ {
			if err := events.Under(4).Publish(bg, event{N: i}); err != nil {
				errs = append(errs, err)
			}
		}
		failed <- errs
	}()
	time.Sleep(300 * time.Millisecond)
	testkit.StartOwner(t, dir)
	if errs := testkit.Receive(t, failed, 30*time.Second, "the publishes"); len(errs) > 0 {
		t.Fatalf("%d of 1000 publishes failed, the first: %v", len(errs), errs[0])
	}
	if s := testkit.Receive(t, got, 10*time.Second, "word of the restart"); s.missed == nil || *s.missed != (channels.Missed{Known: false, Reason: channels.Reconnect}) {
		t.Fatalf("first after the restart: %+v, want onMissed(reconnect, count unknown)", s)
	}
	for want := 0; want < 1000; want++ {
		if s := testkit.Receive(t, got, 10*time.Second, "a message"); s.missed != nil || s.n != want {
			t.Fatalf("got %+v, want message %d in order", s, want)
		}
	}
}

// STORE-02: a store that stays out of reach fails calls with
// ErrUnavailable, saying since when, within the request timeout; ErrClosed
// only once this program closed the store.
func TestStore02AnUnreachableStoreFailsWithUnavailableWithinTheTimeout(t *testing.T) {
	dir := testkit.Dir(t)
	first := testkit.StartOwner(t, dir)
	store, err := tinystore.Connect(bg, "unix:"+filepath.Join(dir, "tinystore.sock"), tinystore.RequestTimeout(600*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	events := open[event](t, store, "c")
	lock, err := locks.OpenLock(store, "l", locks.Wait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Under(1).Publish(bg, event{N: 1}); err != nil {
		t.Fatal(err)
	}
	first.Signal(t, syscall.SIGKILL)
	start := time.Now()
	err = events.Under(1).Publish(bg, event{N: 2})
	took := time.Since(start)
	if !errors.Is(err, tinystore.ErrUnavailable) || !strings.Contains(err.Error(), "could not be reached") || !strings.Contains(err.Error(), "since") {
		t.Fatalf("publish with no store: %v, want ErrUnavailable saying since when", err)
	}
	if took < 500*time.Millisecond || took > 2*time.Second {
		t.Fatalf("failed after %v, want about the request timeout", took)
	}
	start = time.Now()
	err = lock.Hold(bg, "k", func(context.Context, *locks.Lease) error { return nil })
	if !errors.Is(err, tinystore.ErrUnavailable) || time.Since(start) > 2*time.Second {
		t.Fatalf("hold with no store: %v after %v, want ErrUnavailable within the timeout", err, time.Since(start))
	}
	store.Close()
	if err := events.Under(1).Publish(bg, event{N: 3}); !errors.Is(err, tinystore.ErrClosed) {
		t.Fatalf("publish after close: %v, want ErrClosed", err)
	}
}

// CHAN-04 on a cluster store: it has no owner to restart; its reconnect is
// to another NATS server. The subscriber knows only node 0 (it learns the
// others from it), the publisher nodes 1 and 2. After a kill -9 of node 0
// the subscription resumes from the last message it got: the stream keeps
// every message of the branch (fewer than 1,024), so it is told nothing
// missed and gets every message once, in order.
func TestChan04ClusterKill9OfTheSubscribersNatsServerResumesWithNothingMissed(t *testing.T) {
	n := testkit.StartNats(t)
	prefix := fmt.Sprintf("go%d-chan04kill", os.Getpid())
	connect := func(which ...int) *tinystore.Store {
		s, err := tinystore.Connect(bg, testkit.ClusterAddress(t, prefix, n, which...), tinystore.RequestTimeout(testkit.ClusterTimeout))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	subStore, pubStore := connect(0), connect(1, 2)
	got := make(chan seen, 256)
	sub, err := open[event](t, subStore, "c").Under(1).Subscribe(bg, func(_ context.Context, m channels.Message[event]) error {
		got <- seen{n: m.Value.N}
		return nil
	}, channels.OnMissed(func(m channels.Missed) { got <- seen{missed: &m} }))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(bg)
	branch := open[event](t, pubStore, "c").Under(1)
	next := 0
	receive := func(upTo int, within time.Duration) {
		for ; next < upTo; next++ {
			if s := testkit.Receive(t, got, within, fmt.Sprintf("message %d", next)); s.missed != nil || s.n != next {
				t.Fatalf("got %+v, want message %d: in order, nothing twice, nothing missed", s, next)
			}
		}
	}
	for i := range 100 {
		if i == 50 {
			receive(50, 10*time.Second)
			n.Kill(0)
		}
		if err := branch.Publish(bg, event{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	receive(100, 60*time.Second)
	select {
	case s := <-got:
		t.Fatalf("after the last message: %+v", s)
	case <-time.After(300 * time.Millisecond):
	}
}

// CHAN-01: 64 goroutines publishing at once over one connection (past 4
// in flight the library holds frames back to send them together): every
// publish is answered, none waits for the request timeout, and a
// subscriber on another connection has each goroutine's messages in its
// order.
func TestChan01SixtyFourGoroutinesPublishingOverOneConnectionAreAllAnsweredAndDelivered(t *testing.T) {
	dir := testkit.Dir(t)
	testkit.StartOwner(t, dir)
	address := "unix:" + filepath.Join(dir, "tinystore.sock")
	publisher, err := tinystore.Connect(bg, address, tinystore.RequestTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	reader, err := tinystore.Connect(bg, address, tinystore.RequestTimeout(3*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	const writers, each = 64, 200
	got := make(chan event, writers*each)
	var missed atomic.Uint64
	sub, err := open[event](t, reader, "burst").Under("b").Subscribe(bg, func(_ context.Context, m channels.Message[event]) error {
		got <- m.Value
		return nil
	}, channels.OnMissed(func(m channels.Missed) { missed.Add(m.Count) }))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop(bg)
	events := open[event](t, publisher, "burst")
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if err := events.Under("b").Publish(bg, event{N: i, W: w}); err != nil {
					t.Errorf("writer %d, publish %d: %v", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	next := make([]int, writers)
	for n := 0; n+int(missed.Load()) < writers*each; n++ {
		e := testkit.Receive(t, got, 10*time.Second, fmt.Sprintf("message %d of %d (%d missed)", n, writers*each, missed.Load()))
		if e.N < next[e.W] {
			t.Fatalf("writer %d: message %d arrived after %d", e.W, e.N, next[e.W])
		}
		next[e.W] = e.N + 1
	}
}

// CHAN-04, STORE-02: 64 goroutines publishing at once over one connection
// when its owner is killed: each publish in flight then ends with an error
// (the connection's answers never come) or was taken, and none waits past
// the request timeout, whether its outcome comes as a success or as an
// error to take.
func TestChan04PublishesInFlightWhenTheOwnerIsKilledEachEndWithinTheRequestTimeout(t *testing.T) {
	dir := testkit.Dir(t)
	owner := testkit.StartOwner(t, dir)
	publisher, err := tinystore.Connect(bg, "unix:"+filepath.Join(dir, "tinystore.sock"), tinystore.RequestTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer publisher.Close()
	events := open[event](t, publisher, "burst")
	var published atomic.Int64
	var wg sync.WaitGroup
	failed := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			for i := 0; ; i++ {
				if err := events.Under("b").Publish(bg, event{N: i, W: w}); err != nil {
					failed <- err
					return
				}
				published.Add(1)
			}
		})
	}
	for published.Load() < 5000 {
		time.Sleep(5 * time.Millisecond)
	}
	owner.Signal(t, syscall.SIGKILL)
	killed := time.Now()
	ended := make(chan struct{})
	go func() { wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("publishes in flight when the owner was killed had not ended %v later (request timeout 2 s)", time.Since(killed))
	}
	close(failed)
	for err := range failed {
		if !errors.Is(err, tinystore.ErrUnavailable) && !errors.Is(err, tinystore.ErrTimeout) {
			t.Fatalf("a publish cut off by the owner's death: %v, want unavailable or timeout", err)
		}
	}
}

// A publish waiting on an owner that does not answer (frozen) ends with its
// ctx, at once; once the owner goes on, the store serves the next publish.
func TestStore02APublishToAFrozenOwnerEndsWithItsContextAndTheStoreGoesOn(t *testing.T) {
	dir := testkit.Dir(t)
	owner := testkit.StartOwner(t, dir)
	store, err := tinystore.Connect(bg, "unix:"+filepath.Join(dir, "tinystore.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	events := open[event](t, store, "chat-events")
	got := watch(t, events.Under(1))
	owner.Signal(t, syscall.SIGSTOP)
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = events.Under(1).Publish(ctx, event{N: 1})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish to a frozen owner with a 300 ms ctx: %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the publish ended %v after its ctx's 300 ms", d)
	}
	owner.Signal(t, syscall.SIGCONT)
	if err := events.Under(1).Publish(bg, event{N: 2}); err != nil {
		t.Fatalf("publish after the owner went on: %v", err)
	}
	// The first may still be delivered (it left before the ctx ended): the
	// second comes, after it if at all.
	for {
		s := testkit.Receive(t, got, 10*time.Second, "the publish after the owner went on")
		if s.missed == nil && s.n == 2 {
			return
		}
		if s.missed != nil || s.n != 1 {
			t.Fatalf("got %+v, want message 1 (maybe) then 2", s)
		}
	}
}
