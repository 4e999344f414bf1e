package locks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

// The locks of one store as a sequential object: acquiring a key gives a
// fence, and needs the key free and the fence above every fence the store
// gave before, of any key (LOCK-01, LOCK-02); releasing needs the key held
// with that fence. No partition by key: the fences of all keys come from
// one counter, so the whole history is checked at once.
const maxKeys = 4

type lockInput struct {
	key     int
	release bool
	refused bool        // a TryHold that found the key held
	fence   locks.Fence // of the release
}

type lockState struct {
	holder [maxKeys]locks.Fence // the zero fence: free
	last   locks.Fence
}

var lockModel = porcupine.Model{
	Init: func() any { return lockState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(lockState), input.(lockInput)
		if in.refused {
			return !s.holder[in.key].IsZero(), s
		}
		if in.release {
			ok := !in.fence.IsZero() && s.holder[in.key] == in.fence
			s.holder[in.key] = locks.Fence{}
			return ok, s
		}
		f := output.(locks.Fence)
		ok := s.holder[in.key].IsZero() && s.last.Less(f)
		s.holder[in.key], s.last = f, f
		return ok, s
	},
	DescribeOperation: func(input, output any) string {
		in := input.(lockInput)
		if in.refused {
			return fmt.Sprintf("tryHold(%d) refused", in.key)
		}
		if in.release {
			return fmt.Sprintf("release(%d, %s)", in.key, in.fence)
		}
		return fmt.Sprintf("acquire(%d) -> %s", in.key, output)
	},
}

// held is one Hold or TryHold whose function ran, timed on testkit.Mono:
// asked at Call, granted by Granted, its function returned at Releasing,
// and the call returned at Released.
type held struct {
	Client, Key                        int
	Fence                              locks.Fence
	Call, Granted, Releasing, Released int64
}

// ops is the hold as two operations of the history: acquire and release.
// Released comes after the owner let the key go: a hold returns only then
// (LOCK-01), also over a connection.
func (h held) ops() []porcupine.Operation {
	return []porcupine.Operation{
		{ClientId: h.Client, Input: lockInput{key: h.Key}, Call: h.Call, Output: h.Fence, Return: h.Granted},
		{ClientId: h.Client, Input: lockInput{key: h.Key, release: true, fence: h.Fence}, Call: h.Releasing, Return: h.Released},
	}
}

func history(hs []held) []porcupine.Operation {
	var ops []porcupine.Operation
	for _, h := range hs {
		ops = append(ops, h.ops()...)
	}
	return ops
}

// holdMany is client holding one of keys keys, rounds times (one in four a
// TryHold, the rest a Hold), each for up to 200 µs; it gives the holds
// whose function ran.
func holdMany(l *locks.Lock, client, keys, rounds int) ([]held, error) {
	rng := rand.New(rand.NewPCG(uint64(client), 7))
	var out []held
	for range rounds {
		h := held{Client: client, Key: rng.IntN(keys)}
		pause := time.Duration(rng.IntN(200)) * time.Microsecond
		body := func(_ context.Context, lease *locks.Lease) error {
			h.Granted, h.Fence = testkit.Mono(), lease.Fence
			time.Sleep(pause)
			h.Releasing = testkit.Mono()
			return nil
		}
		started, try := true, rng.IntN(4) == 0
		var err error
		h.Call = testkit.Mono()
		if try {
			started, err = l.TryHold(bg, h.Key, body)
		} else {
			err = l.Hold(bg, h.Key, body)
		}
		h.Released = testkit.Mono()
		if err != nil {
			return out, fmt.Errorf("client %d, key %d: %w", client, h.Key, err)
		}
		if started {
			out = append(out, h)
		}
	}
	return out, nil
}

// holdConcurrently runs holdMany for clients first..first+n-1 at once.
func holdConcurrently(l *locks.Lock, first, n, keys, rounds int) ([]held, error) {
	var mu sync.Mutex
	var all []held
	var failed error
	var wg sync.WaitGroup
	for c := first; c < first+n; c++ {
		wg.Go(func() {
			hs, err := holdMany(l, c, keys, rounds)
			mu.Lock()
			defer mu.Unlock()
			all = append(all, hs...)
			if err != nil && failed == nil {
				failed = err
			}
		})
	}
	wg.Wait()
	return all, failed
}

// checkLinearizable fails t unless the history of hs is linearizable; on
// failure it writes Porcupine's picture of the history beside the test's
// files and names it.
func checkLinearizable(t *testing.T, hs []held) {
	t.Helper()
	checkLinearizableOps(t, history(hs))
}

// checkLinearizableOps is checkLinearizable for a history of operations.
func checkLinearizableOps(t *testing.T, ops []porcupine.Operation) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(lockModel, ops, 20*time.Second)
	if res == porcupine.Ok {
		return
	}
	picture := filepath.Join(os.TempDir(), fmt.Sprintf("ts-go-%s-%d.html", strings.ReplaceAll(t.Name(), "/", "-"), os.Getpid()))
	if err := porcupine.VisualizePath(lockModel, info, picture); err != nil {
		picture = "(not written: " + err.Error() + ")"
	}
	t.Fatalf("the recorded history of %d operations is not linearizable: %v; see %s", len(ops), res, picture)
}

func TestLock01LinearizableHistoryOfManyGoroutines(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		l := openLock(t, stores.Open(), "jobs")
		hs, err := holdConcurrently(l, 0, 12, 3, 25)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) < 200 {
			t.Fatalf("only %d holds recorded", len(hs))
		}
		checkLinearizable(t, hs)
	})
}

// Clients of the multi-process history: perProcess goroutines in the owner
// (the test) and in each of processes helper processes, each holding one
// of keys keys rounds times.
const (
	processes  = 3
	perProcess = 2
	keys       = 3
	rounds     = 100
)

// lockClient, a helper process: connects to the store at $TINYSTORE_ADDR,
// says "ready <Mono>", and once told (SIGUSR1) holds keys of "jobs" as
// clients $TS_CLIENT.. from perProcess goroutines over its one connection;
// then says "held <json>" for each hold, "error <why>" if one failed, and
// "done".
func lockClient() int {
	start := make(chan os.Signal, 1)
	signal.Notify(start, syscall.SIGUSR1)
	ctx := context.Background()
	store, err := tinystore.Connect(ctx, os.Getenv("TINYSTORE_ADDR"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	l, err := locks.OpenLock(store, "jobs")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	first, err := strconv.Atoi(os.Getenv("TS_CLIENT"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready", testkit.Mono())
	select {
	case <-start:
	case <-time.After(time.Minute):
		fmt.Println("error never told to start")
		return 1
	}
	hs, err := holdConcurrently(l, first, perProcess, keys, rounds)
	for _, h := range hs {
		b, _ := json.Marshal(h)
		fmt.Println("held", string(b))
	}
	if err != nil {
		fmt.Println("error", err)
	}
	fmt.Println("done")
	return 0
}

// A history recorded by several processes at once: the owner (this test,
// its store open in-process) and helper processes connected through its
// socket, all holding the same three keys. Every operation is timed on
// CLOCK_MONOTONIC (testkit.Mono), one clock for every process of the
// machine, checked here against each child's first reading; the merged
// history must be linearizable as one store: at most one holder per key at
// every point, fences increasing in grant order across keys and processes.
// Then the same history, tampered as a broken lock would have it (a grant
// while the key is held; two fences in the wrong order), must be refused.
func TestLock01Lock02LinearizableHistoryOfManyProcesses(t *testing.T) {
	store, dir := testkit.OwnedIn(t)
	l := openLock(t, store, "jobs")
	addr := "unix:" + filepath.Join(dir, "tinystore.sock")

	before := testkit.Mono()
	children := make([]*testkit.Child, processes)
	for i := range children {
		children[i] = testkit.StartHelper(t, "lockclient", "TINYSTORE_ADDR="+addr, fmt.Sprintf("TS_CLIENT=%d", (i+1)*perProcess))
	}
	for i, c := range children {
		m, err := strconv.ParseInt(c.Line(t, "ready ", 30*time.Second), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if after := testkit.Mono(); m < before || m > after {
			t.Fatalf("child %d read the clock at %d, outside this process's %d..%d: not one clock", i, m, before, after)
		}
	}
	for _, c := range children {
		c.Signal(t, syscall.SIGUSR1)
	}
	hs, err := holdConcurrently(l, 0, perProcess, keys, rounds)
	if err != nil {
		t.Fatal(err)
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
	if t.Failed() {
		t.FailNow()
	}

	clients := map[int]int{}
	for _, h := range hs {
		clients[h.Client]++
	}
	if len(clients) != (processes+1)*perProcess || len(hs) < (processes+1)*perProcess*rounds/2 {
		t.Fatalf("%d holds by %d clients (%v), want most of %d by each of %d", len(hs), len(clients), clients, rounds, (processes+1)*perProcess)
	}
	// The processes did contend: some asked for a key another process held.
	process := func(h held) int { return h.Client / perProcess }
	contended := 0
	for _, a := range hs {
		for _, b := range hs {
			if a.Key == b.Key && process(a) != process(b) && a.Granted < b.Call && b.Call < a.Releasing {
				contended++
			}
		}
	}
	if contended == 0 {
		t.Fatal("no process ever asked for a key another process held: nothing was checked across processes")
	}
	checkLinearizable(t, hs)

	// Two holds of one key, one after the other, by two processes.
	slices.SortFunc(hs, func(a, b held) int { return a.Fence.Compare(b.Fence) })
	first, next := -1, -1
	for i := range hs {
		for j := i + 1; j < len(hs) && first < 0; j++ {
			if hs[j].Key == hs[i].Key {
				if process(hs[j]) != process(hs[i]) {
					first, next = i, j
				}
				break
			}
		}
	}
	if first < 0 {
		t.Fatal("no key went from one process to another")
	}
	refused := func(what string, tamper func(a, b *held)) {
		bad := slices.Clone(hs)
		tamper(&bad[first], &bad[next])
		if res := porcupine.CheckOperationsTimeout(lockModel, history(bad), 20*time.Second); res != porcupine.Illegal {
			t.Errorf("the history with %s: %v, want refused", what, res)
		}
	}
	refused("a grant while the key is held", func(a, b *held) {
		a.Releasing, a.Released = b.Granted+1, b.Granted+2
	})
	refused("two fences in the wrong order", func(a, b *held) {
		a.Fence, b.Fence = b.Fence, a.Fence
	})
}

// The check can fail: two overlapping holders, or a fence that does not
// grow (on one key or across keys), are refused.
func TestLock01LinearizabilityCheckRefusesTwoHoldersAndShrinkingFences(t *testing.T) {
	op := func(call, ret int64, in lockInput, out any) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
	}
	f1, f2 := locks.Fence{Hi: 1, Lo: 1}, locks.Fence{Hi: 1, Lo: 2}
	overlap := []porcupine.Operation{
		op(0, 1, lockInput{}, f1), op(5, 6, lockInput{release: true, fence: f1}, nil),
		op(2, 3, lockInput{}, f2), op(7, 8, lockInput{release: true, fence: f2}, nil),
	}
	if porcupine.CheckOperations(lockModel, overlap) {
		t.Fatal("two holders at once passed the check")
	}
	shrinking := []porcupine.Operation{
		op(0, 1, lockInput{}, f2), op(2, 3, lockInput{release: true, fence: f2}, nil),
		op(4, 5, lockInput{}, f1), op(6, 7, lockInput{release: true, fence: f1}, nil),
	}
	if porcupine.CheckOperations(lockModel, shrinking) {
		t.Fatal("a fence smaller than the one before passed the check")
	}
	acrossKeys := []porcupine.Operation{
		op(0, 1, lockInput{key: 0}, f2), op(2, 3, lockInput{key: 1}, f1),
		op(4, 5, lockInput{key: 0, release: true, fence: f2}, nil), op(4, 5, lockInput{key: 1, release: true, fence: f1}, nil),
	}
	if porcupine.CheckOperations(lockModel, acrossKeys) {
		t.Fatal("a fence smaller than one given before for another key passed the check")
	}
	fine := []porcupine.Operation{
		op(0, 1, lockInput{key: 0}, f1), op(2, 3, lockInput{key: 1}, f2),
		op(4, 5, lockInput{key: 0, release: true, fence: f1}, nil), op(4, 5, lockInput{key: 1, release: true, fence: f2}, nil),
		op(6, 7, lockInput{key: 0}, locks.Fence{Hi: 2, Lo: 1}), op(8, 9, lockInput{key: 0, release: true, fence: locks.Fence{Hi: 2, Lo: 1}}, nil),
	}
	if !porcupine.CheckOperations(lockModel, fine) {
		t.Fatal("a history of holders one after another, fences growing, failed the check")
	}
}
