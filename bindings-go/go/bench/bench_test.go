package bench_test

// Benchmarks of the two workloads of issue 7, each run by tinystore (owned,
// connected to an owner in this process, connected to an owner in another
// process) and by go-redis against Debian's redis-server, which the
// benchmark starts itself on a Unix socket and stops. After the run, a
// table gives each tinystore row's time per operation over redis's.
// `make bench` runs them on the release build of the library; plain
// `go test` runs none of them (benchmarks run only with -bench).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
)

func TestMain(m *testing.M) {
	testkit.RunHelper(nil)
	code := m.Run()
	printRatios()
	os.Exit(code)
}

// The rows of each workload: tinystore's ways to reach a store, then redis.
const (
	owned        = "owned"
	connected    = "connected"
	otherProcess = "connected-other-process"
	redisRow     = "redis"
)

var rows = []string{owned, connected, otherProcess, redisRow}

// measured holds each workload's time per operation by row, in ns, from
// the last (largest) run of each sub-benchmark.
var (
	measuredMu sync.Mutex
	measured   = map[string]map[string]float64{}
	workloads  []string
)

// measure runs op(-1) unmeasured, then op(0..b.N-1) timed, and records
// the time per operation as workload's row.
func measure(b *testing.B, workload, row string, op func(i int)) {
	op(-1)
	b.ResetTimer()
	for i := range b.N {
		op(i)
	}
	b.StopTimer()
	measuredMu.Lock()
	defer measuredMu.Unlock()
	if measured[workload] == nil {
		measured[workload] = map[string]float64{}
		workloads = append(workloads, workload)
	}
	measured[workload][row] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// printRatios prints, for each workload measured, each tinystore row's
// time per operation over redis's (below 1: tinystore is faster).
func printRatios() {
	if len(workloads) == 0 {
		return
	}
	fmt.Println()
	fmt.Println("tinystore.dev/tinystore/redis, time per operation (below 1: tinystore is faster)")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "workload\ttinystore\ttinystore ns/op\tredis ns/op\tratio")
	for _, workload := range workloads {
		m := measured[workload]
		r, ok := m[redisRow]
		for _, row := range rows[:3] {
			t, has := m[row]
			if !has {
				continue
			}
			ratio := "-"
			if ok {
				ratio = fmt.Sprintf("%.2f", t/r)
			}
			fmt.Fprintf(w, "%s\t%s\t%.0f\t%.0f\t%s\n", workload, row, t, r, ratio)
		}
	}
	w.Flush()
}

// store gives a store reached as row says, closed when b ends.
func store(b *testing.B, row string) *tinystore.Store {
	b.Helper()
	if row != otherProcess {
		return testkit.NewStores(b, row).Open()
	}
	dir := testkit.Dir(b)
	testkit.StartOwner(b, dir)
	s, err := tinystore.Connect(context.Background(), "unix:"+filepath.Join(dir, "tinystore.sock"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// startRedis runs Debian's redis-server on a Unix socket in a fresh
// directory, without persistence, until b ends, and gives a client of it.
func startRedis(b *testing.B) *redis.Client {
	b.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		b.Fatal("redis-server is not installed (Debian: apt-get install redis-server); make bench installs it")
	}
	dir := testkit.Dir(b)
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(path, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, DisableIdentity: true})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	testkit.Eventually(b, 10*time.Second, "redis-server answers on "+sock, func() bool {
		return rdb.Ping(ctx).Err() == nil
	})
	return rdb
}

// BenchmarkPublishDeliver: one message published and delivered to a
// subscriber's handler, one after another (latency, not throughput). On
// redis: PUBLISH, and the message read from a SUBSCRIBE connection.
func BenchmarkPublishDeliver(b *testing.B) {
	const workload = "publish->deliver"
	ctx := context.Background()
	for _, row := range rows[:3] {
		b.Run(row, func(b *testing.B) {
			ch, err := channels.OpenChannel[int](store(b, row), "bench")
			if err != nil {
				b.Fatal(err)
			}
			got := make(chan struct{}, 1)
			sub, err := ch.Under(1).Subscribe(ctx, func(context.Context, channels.Message[int]) error {
				got <- struct{}{}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Stop(ctx)
			publish := func(i int) {
				if err := ch.Under(1).Publish(ctx, i); err != nil {
					b.Fatal(err)
				}
				<-got
			}
			measure(b, workload, row, publish)
		})
	}
	b.Run(redisRow, func(b *testing.B) {
		rdb := startRedis(b)
		ps := rdb.Subscribe(ctx, "bench")
		defer ps.Close()
		if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
			b.Fatal(err)
		}
		got := ps.Channel()
		publish := func(i int) {
			if err := rdb.Publish(ctx, "bench", strconv.Itoa(i)).Err(); err != nil {
				b.Fatal(err)
			}
			<-got
		}
		measure(b, workload, redisRow, publish)
	})
}

// releaseScript is the usual Redis lock release: delete the key only if it
// still holds this holder's token.
var releaseScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// BenchmarkHoldRelease: a Hold of a free key, its (empty) function, and the
// release. On redis: SET key token NX PX 10000, then the compare-and-delete
// script (EVALSHA).
func BenchmarkHoldRelease(b *testing.B) {
	const workload = "hold+release"
	ctx := context.Background()
	for _, row := range rows[:3] {
		b.Run(row, func(b *testing.B) {
			l, err := locks.OpenLock(store(b, row), "bench")
			if err != nil {
				b.Fatal(err)
			}
			measure(b, workload, row, func(int) {
				if err := l.Hold(ctx, 1, func(context.Context, *locks.Lease) error { return nil }); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
	b.Run(redisRow, func(b *testing.B) {
		rdb := startRedis(b)
		hold := func(i int) {
			token := "holder-" + strconv.Itoa(i)
			set, err := rdb.Do(ctx, "SET", "bench:1", token, "NX", "PX", 10000).Text()
			if err != nil || set != "OK" {
				b.Fatalf("SET NX PX: %q %v", set, err)
			}
			if n, err := releaseScript.Run(ctx, rdb, []string{"bench:1"}, token).Int(); err != nil || n != 1 {
				b.Fatalf("release: %d %v", n, err)
			}
		}
		measure(b, workload, redisRow, hold)
	})
}
