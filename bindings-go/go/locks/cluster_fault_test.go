package locks_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

// The clients of the fault history: clusterProcs helper processes with
// clusterPerProc goroutines each, all holding key 0 of one lock with a
// ttl of clusterTTL (etcd's election, about 1 s here, fits well within it).
const (
	clusterProcs   = 3
	clusterPerProc = 2
	clusterTTL     = 4 * time.Second
)

// faultHeld is a held (timed on testkit.Mono) with what the holder saw.
type faultHeld struct {
	held
	Long bool // the hold that spanned the leader's death
	Lost bool // its lease was lost while it held (its context was cancelled)
}

// clusterClient, a helper process: connects to the cluster store at
// $TINYSTORE_ADDR, says "ready <Mono>", and once told (SIGUSR1) holds key
// 0 of "jobs" from clusterPerProc goroutines, as clients $TS_CLIENT..,
// each hold up to 3 ms, until its standard input says "stop". The line
// "long" makes client $TS_CLIENT's next hold say "long" once it holds and
// keep the key until the line "release". Then it says "held <json>" for
// each hold, "error <why>" for each failed hold, and "done".
func clusterClient() int {
	start := make(chan os.Signal, 1)
	signal.Notify(start, syscall.SIGUSR1)
	store, err := tinystore.Connect(context.Background(), os.Getenv("TINYSTORE_ADDR"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	l, err := locks.OpenLock(store, "jobs", locks.TTL(clusterTTL), locks.Wait(30*time.Second))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	first, err := strconv.Atoi(os.Getenv("TS_CLIENT"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	long, release, stop := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			switch in.Text() {
			case "long":
				long <- struct{}{}
			case "release":
				close(release)
			case "stop":
				close(stop)
				return
			}
		}
	}()
	fmt.Println("ready", testkit.Mono())
	<-start

	var mu sync.Mutex
	var out []faultHeld
	var failed []string
	var wg sync.WaitGroup
	for c := first; c < first+clusterPerProc; c++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				h := faultHeld{held: held{Client: c}}
				if c == first {
					select {
					case <-long:
						h.Long = true
					default:
					}
				}
				pause := time.Duration(rng.IntN(3000)) * time.Microsecond
				h.Call = testkit.Mono()
				err := l.Hold(bg, 0, func(ctx context.Context, lease *locks.Lease) error {
					h.Granted, h.Fence = testkit.Mono(), lease.Fence
					if h.Long {
						fmt.Println("long", lease.Fence)
						<-release
					} else {
						time.Sleep(pause)
					}
					h.Lost = ctx.Err() != nil || lease.Lost()
					h.Releasing = testkit.Mono()
					return nil
				})
				h.Released = testkit.Mono()
				mu.Lock()
				if err != nil {
					failed = append(failed, fmt.Sprintf("client %d: %v", c, err))
				} else {
					out = append(out, h)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, h := range out {
		b, _ := json.Marshal(h)
		fmt.Println("held", string(b))
	}
	for _, f := range failed {
		fmt.Println("error", f)
	}
	fmt.Println("done")
	return 0
}

// LOCK-01 and LOCK-05 on a cluster store, across a kill -9 of etcd's
// leader: three processes (two goroutines each) hold and wait for one key;
// while one of them holds it and the five other clients wait, the leader
// is killed. The merged history of every hold (invoke and return times on
// CLOCK_MONOTONIC, fences) must be linearizable as one lock (Porcupine,
// the model of LOCK-01's other histories): never two valid leases at
// once, fences growing in grant order. The holder across the election
// keeps its lease (its renewals resume within its 4 s ttl), no hold fails,
// and holds go on after the election.
func TestLock01Lock05ClusterHistoryOfThreeProcessesAcrossAKill9OfTheLeader(t *testing.T) {
	c := testkit.StartCluster(t)
	addr := c.Address(fmt.Sprintf("fault%d", os.Getpid()))
	before := testkit.Mono()
	children := make([]*testkit.Child, clusterProcs)
	for i := range children {
		children[i] = testkit.StartHelper(t, "clusterclient", "TINYSTORE_ADDR="+addr, fmt.Sprintf("TS_CLIENT=%d", i*clusterPerProc))
	}
	for i, ch := range children {
		m, err := strconv.ParseInt(ch.Line(t, "ready ", 30*time.Second), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if after := testkit.Mono(); m < before || m > after {
			t.Fatalf("child %d read the clock at %d, outside this process's %d..%d: not one clock", i, m, before, after)
		}
	}
	for _, ch := range children {
		ch.Signal(t, syscall.SIGUSR1)
	}
	time.Sleep(time.Second) // contended holds before the fault
	children[0].Send(t, "long")
	children[0].Line(t, "long ", 30*time.Second)
	time.Sleep(100 * time.Millisecond) // the other clients are waiting now
	leader := c.Leader(t)
	killed := testkit.Mono()
	c.Kill(leader)
	time.Sleep(2 * time.Second) // the election, and renewals resumed on the new leader
	children[0].Send(t, "release")
	time.Sleep(1500 * time.Millisecond) // contended holds after the fault
	for _, ch := range children {
		ch.Send(t, "stop")
	}

	var hs []faultHeld
	for i, ch := range children {
		for _, line := range ch.Until(t, "", "done", 60*time.Second) {
			if rest, ok := strings.CutPrefix(line, "held "); ok {
				var h faultHeld
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

	var long *faultHeld
	clients := map[int]int{}
	after := 0
	plain := make([]held, 0, len(hs))
	for i := range hs {
		h := &hs[i]
		clients[h.Client]++
		plain = append(plain, h.held)
		if h.Long {
			long = h
		}
		if h.Granted > killed && !h.Long {
			after++
		}
		if h.Lost {
			t.Errorf("client %d lost its lease (fence %s) across the election", h.Client, h.Fence)
		}
	}
	if long == nil {
		t.Fatal("the long hold was not recorded")
	}
	if !(long.Granted < killed && killed < long.Releasing) {
		t.Fatalf("the long hold (%d..%d) did not span the kill at %d", long.Granted, long.Releasing, killed)
	}
	// While it held the key, the five other clients waited for it.
	waiting := map[int]bool{}
	for _, h := range hs {
		if h.Client != long.Client && h.Call < killed && h.Granted > long.Releasing {
			waiting[h.Client] = true
		}
	}
	if len(waiting) != clusterProcs*clusterPerProc-1 {
		t.Fatalf("clients %v waited through the kill, want all %d others", waiting, clusterProcs*clusterPerProc-1)
	}
	if len(clients) != clusterProcs*clusterPerProc || after < clusterProcs*clusterPerProc {
		t.Fatalf("%d holds by clients %v, %d of them after the kill: want every client, and holds after the election", len(hs), clients, after)
	}
	t.Logf("%d holds by %d clients in %d processes, %d after the kill of member %d", len(hs), len(clients), clusterProcs, after, leader)
	checkLinearizable(t, plain)
}
