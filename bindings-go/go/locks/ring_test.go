package locks_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

// ringRounds is how many turns the token goes round the ring.
const ringRounds = 1000

// lockRing, a helper process: connects to $TINYSTORE_ADDR, says "ready
// <Mono>", then for each "go" read on its standard input (a pipe) tries key
// 0 of "ring" as client $TS_CLIENT and says "held <json>" or "refused
// <json>", only after its TryHold returned; "done" at "stop".
func lockRing() int {
	ctx := context.Background()
	store, err := tinystore.Connect(ctx, os.Getenv("TINYSTORE_ADDR"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	l, err := locks.OpenLock(store, "ring")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	client, _ := strconv.Atoi(os.Getenv("TS_CLIENT"))
	fmt.Println("ready", testkit.Mono())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() && in.Text() == "go" {
		h := held{Client: client}
		h.Call = testkit.Mono()
		started, err := l.TryHold(ctx, 0, func(_ context.Context, lease *locks.Lease) error {
			h.Granted, h.Fence = testkit.Mono(), lease.Fence
			h.Releasing = testkit.Mono()
			return nil
		})
		h.Released = testkit.Mono()
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		b, _ := json.Marshal(h)
		if started {
			fmt.Println("held", string(b))
		} else {
			fmt.Println("refused", string(b))
		}
	}
	fmt.Println("done")
	return 0
}

// Three connected processes pass a token round a ring by pipes (through
// this test, never through the store): each tries the key, records its
// history, lets go, and only then says so, which sends the token on. This
// process tries the key meanwhile too. The merged history, with the
// refused TryHolds, must be linearizable: a refusal is legal only while
// some hold may still have the key, never after a hold whose release had
// returned before the refused call began (LOCK-01).
func TestLock01LinearizableHistoryOfProcessesSignallingByPipe(t *testing.T) {
	store, dir := testkit.OwnedIn(t)
	l := openLock(t, store, "ring")
	addr := "unix:" + filepath.Join(dir, "tinystore.sock")
	children := make([]*testkit.Child, 3)
	for i := range children {
		children[i] = testkit.StartHelper(t, "lockring", "TINYSTORE_ADDR="+addr, fmt.Sprintf("TS_CLIENT=%d", i+1))
	}
	for _, c := range children {
		c.Line(t, "ready ", 30*time.Second)
	}

	var mu sync.Mutex
	var ops []porcupine.Operation
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() { // the prober: client 0, in the owner
		for !stop.Load() {
			h := held{}
			h.Call = testkit.Mono()
			started, err := l.TryHold(bg, 0, func(_ context.Context, lease *locks.Lease) error {
				h.Granted, h.Fence = testkit.Mono(), lease.Fence
				h.Releasing = testkit.Mono()
				return nil
			})
			h.Released = testkit.Mono()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ops = append(ops, record(h, started)...)
			mu.Unlock()
			time.Sleep(300 * time.Microsecond)
		}
	})
	tokenHeld := 0
	for round := range ringRounds {
		c := children[round%len(children)]
		c.Send(t, "go")
		line := c.Next(t, 30*time.Second)
		kind, rest, _ := strings.Cut(line, " ")
		if kind != "held" && kind != "refused" {
			t.Fatalf("child %d: %s", round%len(children), line)
		}
		var h held
		if err := json.Unmarshal([]byte(rest), &h); err != nil {
			t.Fatal(err)
		}
		if kind == "held" {
			tokenHeld++
		}
		mu.Lock()
		ops = append(ops, record(h, kind == "held")...)
		mu.Unlock()
	}
	stop.Store(true)
	wg.Wait()
	for _, c := range children {
		c.Send(t, "stop")
		c.Until(t, "", "done", 30*time.Second)
	}
	if tokenHeld < ringRounds/2 {
		t.Fatalf("the token's holders were granted only %d of %d times", tokenHeld, ringRounds)
	}
	checkLinearizableOps(t, ops)
}

// record is a TryHold as operations: acquire and release when it ran, one
// refused operation when it did not.
func record(h held, started bool) []porcupine.Operation {
	if started {
		return h.ops()
	}
	return []porcupine.Operation{{ClientId: h.Client, Input: lockInput{key: h.Key, refused: true}, Call: h.Call, Output: locks.Fence{}, Return: h.Released}}
}

// A's Hold returned, then B (another connection) tries the key: it is free
// every time, never still held by A's released lease (LOCK-01).
func TestLock01ReleaseThenTryHoldAcrossConnections(t *testing.T) {
	_, dir := testkit.OwnedIn(t)
	addr := "unix:" + filepath.Join(dir, "tinystore.sock")
	lockOf := func() *locks.Lock {
		s, err := tinystore.Connect(bg, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return openLock(t, s, "jobs")
	}
	a, b := lockOf(), lockOf()
	nothing := func(context.Context, *locks.Lease) error { return nil }
	refused := 0
	for i := range 1000 {
		key := i % 200
		if err := a.Hold(bg, key, nothing); err != nil {
			t.Fatal(err)
		}
		// A's Hold returned: B is told by this goroutine, not by the store.
		started, err := b.TryHold(bg, key, nothing)
		if err != nil {
			t.Fatal(err)
		}
		if !started {
			refused++
		}
	}
	if refused != 0 {
		t.Fatalf("B was refused %d times a key whose holder's Hold had returned", refused)
	}
}
