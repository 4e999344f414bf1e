package bench_test

// Benchmarks of the two workloads of issue 7 (publish->deliver one at a
// time, hold+release) and the two of issue 21 (publish->deliver with 64
// publishes in flight, given as bursts to PublishMany or made by 64
// goroutines, and the same fanned out to 100 subscribers), each
// run by tinystore (owned, connected to an owner in this process,
// connected to an owner in another process) and by go-redis against
// Debian's redis-server, which the benchmark starts itself on a Unix
// socket and stops. After the run, a table gives each tinystore row's time
// per operation over redis's. `make bench` runs them on the release build
// of the library; plain `go test` runs none of them (benchmarks run only
// with -bench).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
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
	failedAs(b, workload, row)
	op(-1)
	b.ResetTimer()
	for i := range b.N {
		op(i)
	}
	b.StopTimer()
	record(workload, row, float64(b.Elapsed().Nanoseconds())/float64(b.N))
}

// failedAs makes workload's row "failed" in the table if b fails, rather
// than the time of an earlier, smaller run of it.
func failedAs(b *testing.B, workload, row string) {
	b.Cleanup(func() {
		if b.Failed() {
			record(workload, row, math.NaN())
		}
	})
}

// record keeps ns, a time per operation, as workload's row; NaN: it failed.
func record(workload, row string, ns float64) {
	measuredMu.Lock()
	defer measuredMu.Unlock()
	if measured[workload] == nil {
		measured[workload] = map[string]float64{}
		workloads = append(workloads, workload)
	}
	measured[workload][row] = ns
}

// printRatios prints, for each workload measured, each tinystore row's
// time per operation over redis's (below 1: tinystore is faster), and
// "failed" for a row that failed.
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
			if ok && !math.IsNaN(t) && !math.IsNaN(r) {
				ratio = fmt.Sprintf("%.2f", t/r)
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", workload, row, nanos(t, true), nanos(r, ok), ratio)
		}
	}
	w.Flush()
}

// nanos is a time of the table: "failed" for NaN, "-" when not measured.
func nanos(ns float64, measured bool) string {
	switch {
	case !measured:
		return "-"
	case math.IsNaN(ns):
		return "failed"
	}
	return fmt.Sprintf("%.0f", ns)
}

// store gives a store reached as row says, closed when b ends.
func store(b *testing.B, row string) *tinystore.Store {
	b.Helper()
	if row != otherProcess {
		return testkit.NewStores(b, row).Open()
	}
	dir := testkit.Dir(b)
	testkit.StartOwner(b, dir)
	return connect(b, socket(dir))
}

// socket is the address an owner of dir serves.
func socket(dir string) string { return "unix:" + filepath.Join(dir, "tinystore.sock") }

// connect gives a store connected to address, closed when b ends. Each
// call makes a connection of its own (a client of its own in the core).
func connect(b *testing.B, address string) *tinystore.Store {
	b.Helper()
	s, err := tinystore.Connect(context.Background(), address)
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

// The pipelined workloads of issue 21.
const (
	// inFlight is how many publishes a pipelined publisher keeps in flight.
	inFlight = 64
	// ahead is how many messages a pipelined publisher may have published
	// that a subscriber has not got yet: half a branch's log (1,024), so
	// that a subscriber is never behind the log (it would get a missed
	// count instead of messages).
	ahead = 512
	// fanOut is how many subscribers the fan-out workload has, each on a
	// connection of its own.
	fanOut = 100
	// warmUp is how many messages a pipelined row publishes, unmeasured,
	// before its timed run.
	warmUp = 512
	// stall is how long a pipelined run waits for its subscribers before it
	// fails rather than hangs.
	stall = 30 * time.Second
)

// pace keeps a pipelined publisher at most ahead messages in front of the
// slowest of its subscribers, and tells when every subscriber got a number
// of messages. Publishers claim messages under mu; a claim that must wait
// for the subscribers waits holding mu, so one goroutine at most waits, and
// a subscriber wakes it only when it reaches the count it waits for.
type pace struct {
	subs []subscriberCount

	mu      sync.Mutex
	claimed int64 // messages claimed by the publishers
	floor   int64 // the fewest messages a subscriber had, when last looked
	err     error // the publishers' first failure: no claim after it
	timer   *time.Timer

	need atomic.Int64 // the count the waiter waits for; none waits: math.MaxInt64
	wake chan struct{}

	errMu  sync.Mutex
	subErr error // a subscriber's first error
}

// subscriberCount is one subscriber's count, padded against false sharing.
type subscriberCount struct {
	got     atomic.Int64 // messages got, and missed ones (so that a run with misses ends, then fails)
	missed  atomic.Int64
	unknown atomic.Bool // missed some, how many unknown
	_       [44]byte
}

func newPace(subscribers int) *pace {
	p := &pace{subs: make([]subscriberCount, subscribers), wake: make(chan struct{}, 1), timer: time.NewTimer(stall)}
	p.timer.Stop()
	p.need.Store(math.MaxInt64)
	return p
}

// got counts n messages subscriber k got (or missed), and wakes the
// waiter if k just reached its count.
func (p *pace) got(k int, n int64) {
	c := p.subs[k].got.Add(n)
	if need := p.need.Load(); c >= need && c-n < need {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// missed counts what subscriber k was told it missed.
func (p *pace) missed(k int, m channels.Missed) {
	if !m.Known {
		p.subs[k].unknown.Store(true)
		return
	}
	p.subs[k].missed.Add(int64(m.Count))
	p.got(k, int64(m.Count))
}

// subFailed keeps a subscriber's first error.
func (p *pace) subFailed(err error) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if p.subErr == nil {
		p.subErr = err
	}
}

func (p *pace) lowest() int64 {
	low := int64(math.MaxInt64)
	for k := range p.subs {
		low = min(low, p.subs[k].got.Load())
	}
	return low
}

// until waits, mu held, until every subscriber got n messages; once it
// has to wait, it waits for want (n or more) so that the publishers go on
// with room for more than one.
func (p *pace) until(n, want int64) error {
	if p.floor >= n {
		return nil
	}
	if p.floor = p.lowest(); p.floor >= n {
		return nil
	}
	// Set need before looking again: a subscriber that reaches it after
	// that look sees it and wakes this goroutine.
	p.need.Store(want)
	defer p.need.Store(math.MaxInt64)
	defer p.timer.Stop()
	for {
		if p.floor = p.lowest(); p.floor >= want {
			return nil
		}
		p.timer.Reset(stall)
		select {
		case <-p.wake:
		case <-p.timer.C:
			return fmt.Errorf("subscribers stalled: in %v the slowest did not reach %d messages, it has %d%s", stall, want, p.floor, p.trouble())
		}
	}
}

// claim gives the first of up to n more messages of a run that ends at
// end, and how many, once publishing them keeps the publishers at most
// ahead messages in front of every subscriber; none when the run is all
// claimed, or failed.
func (p *pace) claim(n, end int64) (first, count int64, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return 0, 0, p.err
	}
	if count = min(n, end-p.claimed); count <= 0 {
		return 0, 0, nil
	}
	first = p.claimed
	need := first + count - ahead
	// need+inFlight is at most first: messages already claimed.
	if err := p.until(need, need+inFlight); err != nil {
		p.err = err
		return 0, 0, err
	}
	p.claimed += count
	return first, count, nil
}

// fail stops the claims with the publishers' first failure.
func (p *pace) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

func (p *pace) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// trouble tells what the subscribers missed, and their first error: ""
// when nothing.
func (p *pace) trouble() string {
	var t string
	var missing, missed int64
	for k := range p.subs {
		if m := p.subs[k].missed.Load(); m > 0 {
			missing++
			missed += m
		}
		if p.subs[k].unknown.Load() {
			t += fmt.Sprintf("; subscriber %d missed messages, how many unknown", k)
		}
	}
	if missing > 0 {
		t = fmt.Sprintf("; %d subscribers missed %d messages in all", missing, missed) + t
	}
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if p.subErr != nil {
		t += fmt.Sprintf("; a subscriber's error: %v", p.subErr)
	}
	return t
}

// check fails b if a subscriber missed a message, failed, or has other
// than end messages.
func (p *pace) check(b *testing.B, end int64) {
	b.Helper()
	if t := p.trouble(); t != "" {
		b.Fatal(t[2:])
	}
	for k := range p.subs {
		if got := p.subs[k].got.Load(); got != end {
			b.Fatalf("subscriber %d got %d messages of %d", k, got, end)
		}
	}
}

// measurePipelined runs publish for warmUp messages unmeasured, then for
// b.N timed, each run until every subscriber of p got them all, and
// records the time per delivery (b.N × subscribers) as workload's row.
// publish(end) publishes until the messages up to end are claimed.
func measurePipelined(b *testing.B, workload, row string, p *pace, publish func(end int64) error) {
	b.Helper()
	failedAs(b, workload, row)
	var end int64
	run := func(n int64) {
		end += n
		if err := publish(end); err != nil {
			b.Fatal(err)
		}
		p.mu.Lock()
		err := p.until(end, end)
		p.mu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
	run(warmUp)
	p.check(b, end)
	b.ResetTimer()
	run(int64(b.N))
	b.StopTimer()
	p.check(b, end)
	ns := float64(b.Elapsed().Nanoseconds()) / (float64(b.N) * float64(len(p.subs)))
	if len(p.subs) > 1 {
		b.ReportMetric(ns, "ns/delivery")
	}
	record(workload, row, ns)
}

// publishInFlight is a publish for measurePipelined to the branch 1 of the
// channel "bench" of store: bursts of inFlight messages, each given to one
// PublishMany, which returns once the store has them all (the next burst
// leaves then, as rdb.Pipelined's next pipeline does): 64 in flight.
func publishInFlight(b *testing.B, ctx context.Context, store *tinystore.Store, p *pace) func(end int64) error {
	ch, err := channels.OpenChannel[int64](store, "bench")
	if err != nil {
		b.Fatal(err)
	}
	branch := ch.Under(1)
	burst := make([]int64, 0, inFlight)
	return func(end int64) error {
		for {
			first, n, err := p.claim(inFlight, end)
			if err != nil || n == 0 {
				return err
			}
			burst = burst[:0]
			for i := first; i < first+n; i++ {
				burst = append(burst, i)
			}
			if err := branch.PublishMany(ctx, burst); err != nil {
				return err
			}
		}
	}
}

// publishFromGoroutines is publishInFlight's workload made of single
// publishes: inFlight goroutines publish, each one message at a time with
// Publish, so 64 publishes are in flight.
func publishFromGoroutines(b *testing.B, ctx context.Context, store *tinystore.Store, p *pace) func(end int64) error {
	ch, err := channels.OpenChannel[int64](store, "bench")
	if err != nil {
		b.Fatal(err)
	}
	branch := ch.Under(1)
	return func(end int64) error {
		var wg sync.WaitGroup
		for range inFlight {
			wg.Go(func() {
				for {
					first, n, err := p.claim(1, end)
					if err != nil || n == 0 {
						return
					}
					if err := branch.Publish(ctx, first); err != nil {
						p.fail(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return p.failure()
	}
}

// subscribe subscribes subscriber k of p to the branch 1 of the channel
// "bench" of store, until b ends; its handler gets each message decoded
// from JSON, and counts it.
func subscribe(b *testing.B, ctx context.Context, store *tinystore.Store, k int, p *pace) {
	b.Helper()
	ch, err := channels.OpenChannel[int64](store, "bench")
	if err != nil {
		b.Fatal(err)
	}
	sub, err := ch.Under(1).Subscribe(ctx, func(context.Context, channels.Message[int64]) error {
		p.got(k, 1)
		return nil
	}, channels.OnMissed(func(m channels.Missed) { p.missed(k, m) }), channels.OnError(p.subFailed))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Stop(ctx) })
}

// publishPipelined is a publish for measurePipelined on redis: pipelines
// of inFlight PUBLISH to "bench" (rdb.Pipelined: the next one is sent once
// the last one's answers are in), each message the JSON of its number, as
// tinystore's Publish sends it. Each PUBLISH must have reached every
// subscriber.
func publishPipelined(ctx context.Context, rdb *redis.Client, p *pace) func(end int64) error {
	subscribers := int64(len(p.subs))
	return func(end int64) error {
		for {
			first, n, err := p.claim(inFlight, end)
			if err != nil || n == 0 {
				return err
			}
			cmds, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
				for i := first; i < first+n; i++ {
					data, err := json.Marshal(i)
					if err != nil {
						return err
					}
					pipe.Publish(ctx, "bench", data)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, c := range cmds {
				if got := c.(*redis.IntCmd).Val(); got != subscribers {
					return fmt.Errorf("a PUBLISH reached %d subscribers of %d", got, subscribers)
				}
			}
		}
	}
}

// redisSubscribers subscribes every subscriber of p to "bench" of rdb, each
// a PubSub of its own (go-redis gives each its own connection), read by a
// goroutine of its own that decodes each message's JSON and counts it,
// until b ends.
func redisSubscribers(b *testing.B, ctx context.Context, rdb *redis.Client, p *pace) {
	b.Helper()
	var wg sync.WaitGroup
	var closing atomic.Bool
	b.Cleanup(wg.Wait) // after the Close of every PubSub below
	for k := range p.subs {
		ps := rdb.Subscribe(ctx, "bench")
		b.Cleanup(func() {
			closing.Store(true)
			ps.Close()
		})
		if _, err := ps.Receive(ctx); err != nil { // the subscription's confirmation
			b.Fatal(err)
		}
		wg.Go(func() {
			for {
				m, err := ps.ReceiveMessage(ctx)
				if err != nil {
					if !closing.Load() {
						p.subFailed(err)
					}
					return
				}
				var v int64
				if err := json.Unmarshal([]byte(m.Payload), &v); err != nil {
					p.subFailed(err)
					continue
				}
				p.got(k, 1)
			}
		})
	}
}

// BenchmarkPublishDeliver64InFlight: publish->deliver pipelined, bursts
// of 64 given to PublishMany (see publishInFlight); one subscriber, on the
// same store, counts the messages its handler gets, each decoded from
// JSON. The publisher stays at most 512 messages ahead of it, and the run
// fails if it missed any. On redis: pipelines of 64 PUBLISH
// (rdb.Pipelined), and one PubSub client decoding each message's JSON.
// Time per delivered message.
func BenchmarkPublishDeliver64InFlight(b *testing.B) {
	benchmarkInFlight(b, "publish->deliver, 64 in flight", publishInFlight)
}

// BenchmarkPublishDeliver64Goroutines: BenchmarkPublishDeliver64InFlight's
// workload, its 64 in flight made of 64 goroutines each calling Publish
// (see publishFromGoroutines); redis as there.
func BenchmarkPublishDeliver64Goroutines(b *testing.B) {
	benchmarkInFlight(b, "publish->deliver, 64 goroutines", publishFromGoroutines)
}

func benchmarkInFlight(b *testing.B, workload string, publisher func(*testing.B, context.Context, *tinystore.Store, *pace) func(int64) error) {
	ctx := context.Background()
	for _, row := range rows[:3] {
		b.Run(row, func(b *testing.B) {
			s := store(b, row)
			p := newPace(1)
			subscribe(b, ctx, s, 0, p)
			measurePipelined(b, workload, row, p, publisher(b, ctx, s, p))
		})
	}
	b.Run(redisRow, func(b *testing.B) {
		rdb := startRedis(b)
		p := newPace(1)
		redisSubscribers(b, ctx, rdb, p)
		measurePipelined(b, workload, redisRow, p, publishPipelined(ctx, rdb, p))
	})
}

// BenchmarkFanOut100: the pipelined publisher of
// BenchmarkPublishDeliver64InFlight (bursts of 64 to PublishMany), and 100 subscribers of its branch,
// each a tinystore.Connect of its own (a connection of its own) to the
// owner's socket: owned, the publisher is the owner, in this process;
// connected-other-process, the publisher is one more connection, to an
// owner in another process (testkit.StartOwner). The publisher stays at
// most 512 messages ahead of the slowest subscriber, and the run fails if
// any missed one. On redis: pipelines of 64 PUBLISH, and 100 PubSub
// clients, each on its connection. Time per delivery (messages × 100).
func BenchmarkFanOut100(b *testing.B) {
	const workload = "fan-out to 100, 64 in flight, per delivery"
	ctx := context.Background()
	for _, row := range []string{owned, otherProcess} {
		b.Run(row, func(b *testing.B) {
			var publisher *tinystore.Store
			dir := testkit.Dir(b)
			if row == owned {
				var err error
				if publisher, err = tinystore.Open(ctx, dir); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { publisher.Close() })
			} else {
				testkit.StartOwner(b, dir)
				publisher = connect(b, socket(dir))
			}
			p := newPace(fanOut)
			for k := range fanOut {
				subscribe(b, ctx, connect(b, socket(dir)), k, p)
			}
			measurePipelined(b, workload, row, p, publishInFlight(b, ctx, publisher, p))
		})
	}
	b.Run(redisRow, func(b *testing.B) {
		rdb := startRedis(b)
		p := newPace(fanOut)
		redisSubscribers(b, ctx, rdb, p)
		measurePipelined(b, workload, redisRow, p, publishPipelined(ctx, rdb, p))
	})
}
