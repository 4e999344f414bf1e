package locks_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

// takeoverTTL is every lease's ttl in the takeover history: short, so the
// new owner's grace (the longest ttl given) is short too.
const takeoverTTL = 2 * time.Second

// leaseClient, a helper process: connects to $TINYSTORE_ADDR, says
// "ready", and at "go" on its standard input holds key 0 of "takeover"
// from two goroutines (clients $TS_CLIENT and $TS_CLIENT+1), a Hold or one
// in three a TryHold, each for up to 3 ms, until "stop"; then says "held
// <json>" for each hold whose function ran, "error <why>" for a call that
// failed, and "done". A hold is recorded only after its call returned.
func leaseClient() int {
	ctx := context.Background()
	store, err := tinystore.Connect(ctx, os.Getenv("TINYSTORE_ADDR"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	l, err := locks.OpenLock(store, "takeover", locks.TTL(takeoverTTL), locks.Wait(15*time.Second))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	first, _ := strconv.Atoi(os.Getenv("TS_CLIENT"))
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "go" {
		fmt.Println("error never told to go")
		return 1
	}
	var stop atomic.Bool
	go func() {
		for in.Scan() && in.Text() != "stop" {
		}
		stop.Store(true)
	}()
	var mu sync.Mutex
	var lines []string
	var wg sync.WaitGroup
	for c := first; c < first+2; c++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for !stop.Load() {
				h := held{Client: c}
				pause := time.Duration(rng.IntN(3000)) * time.Microsecond
				body := func(hctx context.Context, lease *locks.Lease) error {
					h.Granted, h.Fence = testkit.Mono(), lease.Fence
					time.Sleep(pause)
					if hctx.Err() != nil || lease.Lost() {
						return fmt.Errorf("told lost within its ttl: %v", context.Cause(hctx))
					}
					h.Releasing = testkit.Mono()
					return nil
				}
				started := true
				var err error
				h.Call = testkit.Mono()
				if rng.IntN(3) == 0 {
					started, err = l.TryHold(ctx, 0, body)
				} else {
					err = l.Hold(ctx, 0, body)
				}
				h.Released = testkit.Mono()
				mu.Lock()
				if err != nil {
					lines = append(lines, fmt.Sprintf("error client %d: %v", c, err))
				} else if started {
					b, _ := json.Marshal(h)
					lines = append(lines, "held "+string(b))
				}
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
			}
		})
	}
	wg.Wait()
	for _, line := range lines {
		fmt.Println(line)
	}
	fmt.Println("done")
	return 0
}

// STORE-01, LOCK-05, LOCK-01 across an owner's death, as a recorded
// history: three connected processes (six clients) keep holding one key
// with a 2 s ttl while this test, connected too, holds it across each of
// two takeovers: inside its hold it kills the owner (kill -9), starts
// another owner process, and keeps the key 1 s more while the others ask.
// Every hold is timed on CLOCK_MONOTONIC; the merged history must be
// linearizable as one lock (no two holders overlap, fences grow), with no
// hold told lost. A new owner that granted the key before the test's
// lease was re-presented (no grace) makes two holders overlap. Refused
// TryHolds are not in the history: within the grace a free key is refused
// (its last lease may still be alive, for all the new owner knows).
func TestStore01Lock05Lock01NoTwoValidLeasesAcrossTakeovers(t *testing.T) {
	ctx := context.Background()
	dir := testkit.Dir(t)
	addr := "unix:" + filepath.Join(dir, "tinystore.sock")
	owner := testkit.StartOwner(t, dir)
	store, err := tinystore.Connect(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l := openLock(t, store, "takeover", locks.TTL(takeoverTTL), locks.Wait(15*time.Second))
	children := make([]*testkit.Child, 3)
	for i := range children {
		children[i] = testkit.StartHelper(t, "leaseclient", "TINYSTORE_ADDR="+addr, fmt.Sprintf("TS_CLIENT=%d", 2*i+1))
	}
	for _, c := range children {
		c.Line(t, "ready", 30*time.Second)
	}
	for _, c := range children {
		c.Send(t, "go")
	}

	var hs []held
	type takeover struct{ killed, ready int64 }
	var takeovers []takeover
	for range 2 {
		time.Sleep(time.Second)
		h := held{Client: 0}
		h.Call = testkit.Mono()
		err := l.Hold(ctx, 0, func(hctx context.Context, lease *locks.Lease) error {
			h.Granted, h.Fence = testkit.Mono(), lease.Fence
			killed := testkit.Mono()
			owner.Signal(t, syscall.SIGKILL)
			owner = testkit.StartOwner(t, dir)
			takeovers = append(takeovers, takeover{killed, testkit.Mono()})
			// The others ask the new owner meanwhile. A lease told lost is
			// over when told: it ends in the history there.
			select {
			case <-time.After(time.Second):
			case <-hctx.Done():
				t.Errorf("this test's lease was told lost while it renewed: %v", context.Cause(hctx))
			}
			h.Releasing = testkit.Mono()
			return nil
		})
		h.Released = testkit.Mono()
		if err != nil {
			t.Errorf("the hold across the takeover: %v", err)
		}
		hs = append(hs, h)
	}
	time.Sleep(time.Second)
	for _, c := range children {
		c.Send(t, "stop")
	}
	for i, c := range children {
		for _, line := range c.Until(t, "", "done", 30*time.Second) {
			if rest, ok := strings.CutPrefix(line, "held "); ok {
				var h held
				if err := json.Unmarshal([]byte(rest), &h); err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			} else {
				t.Errorf("child %d: %s", i, line)
			}
		}
	}
	// The others held the key before, between and after the takeovers, and
	// asked for it while this test held it across one: something was checked.
	for i, to := range takeovers {
		after, asked := 0, 0
		for _, h := range hs[2:] {
			if h.Granted > to.ready {
				after++
			}
			if h.Call < hs[i].Releasing && h.Released > to.ready {
				asked++
			}
		}
		if after == 0 || asked == 0 {
			t.Fatalf("takeover %d: %d holds granted after it, %d asked across it: nothing was checked", i, after, asked)
		}
		t.Logf("takeover %d: the new owner was ready %v after the kill", i, time.Duration(to.ready-to.killed))
	}
	if len(hs) < 50 {
		t.Fatalf("only %d holds recorded", len(hs))
	}
	t.Logf("%d holds recorded", len(hs))
	var ops []porcupine.Operation
	for _, h := range hs {
		ops = append(ops, h.ops()...)
	}
	checkLinearizableOps(t, ops)
}
