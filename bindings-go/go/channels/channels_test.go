package channels_test

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/sqldb"
)

type event struct {
	N int `json:"n"`
	W int `json:"w,omitempty"`
}

var bg = context.Background()

func open[T any](t testing.TB, store *tinystore.Store, name string) *channels.Channel[T] {
	t.Helper()
	ch, err := channels.OpenChannel[T](store, name)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// collect subscribes b and sends each message's value to the channel it returns.
func collect[T any](t testing.TB, b *channels.Branch[T], opts ...channels.SubscribeOption) (<-chan channels.Message[T], *channels.Subscription) {
	t.Helper()
	got := make(chan channels.Message[T], 4096)
	sub, err := b.Subscribe(bg, func(_ context.Context, m channels.Message[T]) error {
		got <- m
		return nil
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(bg) })
	return got, sub
}

// seen is what a watched subscription got: a message's number, or a miss.
type seen struct {
	missed *channels.Missed
	n      int
}

// watch subscribes b, sending each message's number and each miss to the
// channel it returns; first (if any) runs in the handler before that.
func watch(t testing.TB, b *channels.Branch[event], first ...func(n int)) <-chan seen {
	t.Helper()
	got := make(chan seen, 4096)
	sub, err := b.Subscribe(bg, func(_ context.Context, m channels.Message[event]) error {
		for _, f := range first {
			f(m.Value.N)
		}
		got <- seen{n: m.Value.N}
		return nil
	}, channels.OnMissed(func(m channels.Missed) { got <- seen{missed: &m} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(bg) })
	return got
}

func TestChan01EveryMessageArrivesInPublishOrder(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "chat-events")
		got, _ := collect(t, events.Under(7))
		const n = 500
		for i := range n {
			if err := events.Under(7).Publish(bg, event{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		var last uint64
		for i := range n {
			m := testkit.Receive(t, got, 5*time.Second, fmt.Sprintf("message %d", i))
			if m.Value.N != i {
				t.Fatalf("message %d arrived as number %d", m.Value.N, i)
			}
			if m.Seq <= last {
				t.Fatalf("seq %d after %d", m.Seq, last)
			}
			last = m.Seq
			if !slices.Equal(m.Branch, []string{"7"}) {
				t.Fatalf("branch %q, want [7]", m.Branch)
			}
		}
	})
}

func TestChan01ManyGoroutinesKeepEachOwnOrderOneHandlerCallAtATime(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "chat-events")
		const writers, each = 8, 100
		var inHandler, overlaps atomic.Int32
		got := make(chan event, writers*each)
		sub, err := events.Under("room").Subscribe(bg, func(_ context.Context, m channels.Message[event]) error {
			if inHandler.Add(1) > 1 {
				overlaps.Add(1)
			}
			time.Sleep(10 * time.Microsecond)
			inHandler.Add(-1)
			got <- m.Value
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop(bg)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if err := events.Under("room").Publish(bg, event{N: i, W: w}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		next := make([]int, writers)
		for range writers * each {
			e := testkit.Receive(t, got, 5*time.Second, "a message of the writers")
			if e.N != next[e.W] {
				t.Fatalf("writer %d: message %d arrived when %d was due", e.W, e.N, next[e.W])
			}
			next[e.W]++
		}
		if n := overlaps.Load(); n != 0 {
			t.Fatalf("the handler ran %d times while another call was running", n)
		}
	})
}

func TestChan01PipelinedPublishesWhoseCtxEndsLeaveTheOthersTheirOwnOutcome(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		events := open[event](t, store, "cancelled")
		got, _ := collect(t, events.Under("room"))
		// Fewer than the branch's log of 1,024: a slow handler misses none.
		const writers, each = 64, 15
		var published sync.Map // event{N, W} -> struct{}: its publish said nil
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					ctx, cancel := context.WithCancel(bg)
					if i%3 == 0 {
						go cancel() // ends while the publish may be in flight
					}
					err := events.Under("room").Publish(ctx, event{N: i, W: w})
					cancel()
					switch {
					case err == nil:
						published.Store(event{N: i, W: w}, struct{}{})
					case i%3 == 0 && errors.Is(err, context.Canceled):
					default:
						t.Errorf("writer %d publish %d: %v", w, i, err)
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("publishes still waiting after 30 s: an outcome went to another publish")
		}
		// Each publish that said nil arrives (one whose ctx ended may too).
		due := map[event]bool{}
		published.Range(func(k, _ any) bool { due[k.(event)] = true; return true })
		for len(due) > 0 {
			m := testkit.Receive(t, got, 5*time.Second, fmt.Sprintf("the %d messages left whose publish said nil", len(due)))
			delete(due, m.Value)
		}
	})
}

func TestChan02SlowSubscriberIsToldExactlyWhatItMissedThenGoesOn(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "chat-events")
		entered := make(chan struct{})
		release := make(chan struct{})
		got := watch(t, events.Under(1), func(n int) {
			if n == 0 {
				close(entered)
				<-release // a handler that blocks
			}
		})
		if err := events.Under(1).Publish(bg, event{N: 0}); err != nil {
			t.Fatal(err)
		}
		testkit.Receive(t, entered, 5*time.Second, "the handler gets message 0")

		// 1,024 + N messages while the handler is stuck: publishing never waits.
		const logSize, extra = 1024, 37
		start := time.Now()
		for i := 1; i <= logSize+extra; i++ {
			if err := events.Under(1).Publish(bg, event{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("publishing past a stuck subscriber took %v", d)
		}
		close(release)

		if s := testkit.Receive(t, got, 5*time.Second, "message 0"); s.missed != nil || s.n != 0 {
			t.Fatalf("first call: %+v, want message 0", s)
		}
		s := testkit.Receive(t, got, 5*time.Second, "onMissed")
		if s.missed == nil {
			t.Fatalf("after the stall: message %d, want onMissed first", s.n)
		}
		missed := *s.missed
		if !missed.Known || missed.Reason != channels.Behind || missed.Count == 0 {
			t.Fatalf("missed %+v, want a known count, reason behind", missed)
		}
		// In this process the subscriber reads nothing ahead: it missed
		// exactly N (CHAN-02). Over a connection, messages already on their way
		// to it still arrive, and the count says exactly how many did not.
		if stores.Kind == "owned" && missed.Count != extra {
			t.Fatalf("missed %d, want exactly %d", missed.Count, extra)
		}
		if missed.Count > extra {
			t.Fatalf("missed %d, more than the %d the log could not keep", missed.Count, extra)
		}
		// Exact: the next message is the one right after those missed, then
		// every later one in order.
		for i := int(missed.Count) + 1; i <= logSize+extra; i++ {
			s := testkit.Receive(t, got, 5*time.Second, fmt.Sprintf("message %d", i))
			if s.missed != nil || s.n != i {
				t.Fatalf("got %+v, want message %d", s, i)
			}
		}
		// The subscription lives on.
		if err := events.Under(1).Publish(bg, event{N: 9999}); err != nil {
			t.Fatal(err)
		}
		if s := testkit.Receive(t, got, 5*time.Second, "a message after the miss"); s.n != 9999 {
			t.Fatalf("got %+v, want message 9999", s)
		}
	})
}

func TestChan03TransactionDeliversAtCommitAndRollbackDrops(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		db, err := sqldb.Open(bg, store, "chat")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(bg, `create table messages (id integer primary key, text text not null)`); err != nil {
			t.Fatal(err)
		}
		events := open[event](t, store, "chat-events")
		type delivered struct {
			n     int
			found bool // the row it announces could already be read
		}
		got := make(chan delivered, 16)
		sub, err := events.Under(3).Subscribe(bg, func(ctx context.Context, m channels.Message[event]) error {
			rows, err := db.Query(ctx, `select text from messages where id = ?`, m.Value.N)
			if err != nil {
				return err
			}
			got <- delivered{n: m.Value.N, found: rows.Len() == 1}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop(bg)

		committing := make(chan struct{})
		err = db.Tx(bg, func(tx *sqldb.Tx) error {
			for _, text := range []string{"one", "two", "three"} {
				r, err := tx.Exec(bg, `insert into messages (text) values (?)`, text)
				if err != nil {
					return err
				}
				if err := events.In(tx).Under(3).Publish(bg, event{N: int(r.LastInsertRowid)}); err != nil {
					return err
				}
			}
			close(committing)
			select {
			case d := <-got:
				return fmt.Errorf("message %d arrived before the commit", d.n)
			case <-time.After(100 * time.Millisecond):
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		<-committing
		for i := 1; i <= 3; i++ {
			d := testkit.Receive(t, got, 5*time.Second, fmt.Sprintf("committed message %d", i))
			if d.n != i || !d.found {
				t.Fatalf("got %+v, want message %d whose row is readable", d, i)
			}
		}

		// A rollback (the function's error) drops what it published.
		boom := errors.New("boom")
		err = db.Tx(bg, func(tx *sqldb.Tx) error {
			r, err := tx.Exec(bg, `insert into messages (text) values ('never')`)
			if err != nil {
				return err
			}
			if err := events.In(tx).Under(3).Publish(bg, event{N: int(r.LastInsertRowid)}); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Tx gave %v, want the function's own error", err)
		}
		if err := events.Under(3).Publish(bg, event{N: 100}); err != nil {
			t.Fatal(err)
		}
		if d := testkit.Receive(t, got, 5*time.Second, "the probe"); d.n != 100 {
			t.Fatalf("after a rollback got message %d, want only the probe (100)", d.n)
		}
		rows, err := db.Query(bg, `select count(*) from messages`)
		if err != nil {
			t.Fatal(err)
		}
		if n := rows.Values[0][0]; n != int64(3) {
			t.Fatalf("%v rows, want 3: the rollback kept its insert", n)
		}
	})
}

func TestChan05StopMeansStopWhilePublishing(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "chat-events")
		var stopped atomic.Bool
		var late, calls atomic.Int64
		sub, err := events.Under(16).Subscribe(bg, func(context.Context, channels.Message[event]) error {
			if stopped.Load() {
				late.Add(1)
			}
			calls.Add(1)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := events.Under(16).Publish(bg, event{N: i}); err != nil {
					t.Error(err)
					return
				}
			}
		})
		testkit.Eventually(t, 5*time.Second, "the handler runs", func() bool { return calls.Load() > 100 })
		stopper := make(chan error)
		go func() { stopper <- sub.Stop(bg) }()
		if err := testkit.Receive(t, stopper, 5*time.Second, "Stop returns"); err != nil {
			t.Fatal(err)
		}
		stopped.Store(true)
		time.Sleep(200 * time.Millisecond) // keep publishing after the stop
		close(done)
		wg.Wait()
		if n := late.Load(); n != 0 {
			t.Fatalf("%d handler calls started after Stop returned", n)
		}
		select {
		case <-sub.Done():
		default:
			t.Fatal("Done is not closed after Stop returned")
		}
	})
}

func TestChan05StopFromInsideTheHandlerTwiceAndAfterClose(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		events := open[event](t, store, "chat-events")
		var calls atomic.Int32
		var sub *channels.Subscription
		ready := make(chan struct{})
		stopErr := make(chan error, 1)
		sub, err := events.Subscribe(bg, func(context.Context, channels.Message[event]) error {
			<-ready
			calls.Add(1)
			stopErr <- sub.Stop(context.Background()) // must not wait on itself
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		close(ready)
		for i := range 5 {
			if err := events.Publish(bg, event{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		if err := testkit.Receive(t, stopErr, 5*time.Second, "Stop inside the handler returns"); err != nil {
			t.Fatal(err)
		}
		testkit.Receive(t, sub.Done(), 5*time.Second, "the subscription ends")
		if n := calls.Load(); n != 1 {
			t.Fatalf("the handler ran %d times, want once: no call after Stop", n)
		}
		if err := sub.Stop(bg); err != nil {
			t.Fatalf("second Stop: %v", err)
		}

		// Closing the store ends its subscriptions; Stop after that is fine.
		other, _ := collect(t, events.Under(5))
		_ = other
		subs := []*channels.Subscription{}
		for range 3 {
			s, err := events.Under(5).Subscribe(bg, func(context.Context, channels.Message[event]) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, s)
		}
		store.Close()
		for _, s := range subs {
			testkit.Receive(t, s.Done(), 5*time.Second, "a subscription ends when its store closes")
			if err := s.Stop(bg); err != nil {
				t.Fatalf("Stop after close: %v", err)
			}
		}
		if err := events.Publish(bg, event{}); !errors.Is(err, tinystore.ErrClosed) {
			t.Fatalf("publish after close: %v, want ErrClosed", err)
		}
	})
}

func TestChan05SubscriptionEndsWithItsContext(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "chat-events")
		ctx, cancel := context.WithCancel(bg)
		handlerCtx := make(chan context.Context, 1)
		sub, err := events.Subscribe(ctx, func(ctx context.Context, m channels.Message[event]) error {
			handlerCtx <- ctx
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := events.Publish(bg, event{}); err != nil {
			t.Fatal(err)
		}
		hctx := testkit.Receive(t, handlerCtx, 5*time.Second, "a message")
		cancel()
		testkit.Receive(t, sub.Done(), 5*time.Second, "the subscription ends with its ctx")
		if hctx.Err() == nil {
			t.Fatal("the handler's ctx is not cancelled after the subscription ended")
		}
	})
}

func TestChan06BranchesAreApartAndAnIntegerKeyIsItsDigits(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "chat-events")
		seven, _ := collect(t, events.Under(7))
		all, _ := collect(t, events.Under("chats"), channels.Recursive())
		publish := func(b *channels.Branch[event], n int) {
			if err := b.Publish(bg, event{N: n}); err != nil {
				t.Fatal(err)
			}
		}
		publish(events.Under(8), 1)
		publish(events.Under(7).Under("x"), 2)
		publish(events.Under("7"), 3)
		publish(events.Under(int64(7)), 4)
		publish(events.Under(uint8(7)), 5)
		publish(events.Under("07"), 6)
		publish(events.Under("chats").Under(1), 7)
		publish(events.Under("chats").Under("2").Under("a"), 8)
		publish(events.Under(7), 9)
		for _, want := range []int{3, 4, 5, 9} {
			if m := testkit.Receive(t, seven, 5*time.Second, fmt.Sprint("message ", want)); m.Value.N != want {
				t.Fatalf("branch 7 got message %d, want %d", m.Value.N, want)
			}
		}
		select {
		case m := <-seven:
			t.Fatalf("branch 7 got message %d of branch %q", m.Value.N, m.Branch)
		case <-time.After(50 * time.Millisecond):
		}
		for _, want := range []struct {
			n      int
			branch []string
		}{{7, []string{"chats", "1"}}, {8, []string{"chats", "2", "a"}}} {
			m := testkit.Receive(t, all, 5*time.Second, "a message below chats")
			if m.Value.N != want.n || !slices.Equal(m.Branch, want.branch) {
				t.Fatalf("recursive got %d of %q, want %d of %q", m.Value.N, m.Branch, want.n, want.branch)
			}
		}
	})
}

func TestChan06MessagesOfSeveralBranchesReadInOneBatchKeepTheirBranchSeqAndValue(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "batched")
		root := events.Under("r")
		first := make(chan struct{})
		got := make(chan channels.Message[event], 128)
		sub, err := root.Subscribe(bg, func(_ context.Context, m channels.Message[event]) error {
			got <- m
			if m.Value.N == 0 {
				<-first // the rest queue up meanwhile, to be read as a batch
			}
			return nil
		}, channels.Recursive())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Stop(bg) })
		branches := []*channels.Branch[event]{root, root.Under(1), root.Under("x").Under(2)}
		want := [][]string{{"r"}, {"r", "1"}, {"r", "x", "2"}}
		if err := root.Publish(bg, event{N: 0}); err != nil {
			t.Fatal(err)
		}
		testkit.Receive(t, got, 5*time.Second, "message 0")
		var wg sync.WaitGroup
		for n := 1; n <= 60; n++ {
			wg.Go(func() {
				if err := branches[n%3].Publish(bg, event{N: n}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		close(first)
		var all []channels.Message[event]
		byBranch := make([][]channels.Message[event], 3)
		for range 60 {
			m := testkit.Receive(t, got, 5*time.Second, "the 60 messages")
			k := m.Value.N % 3
			if !slices.Equal(m.Branch, want[k]) {
				t.Fatalf("message %d came with branch %q, want %q", m.Value.N, m.Branch, want[k])
			}
			all = append(all, m)
			byBranch[k] = append(byBranch[k], m)
		}
		for k, ms := range byBranch {
			for i := 1; i < len(ms); i++ {
				if ms[i].Seq != ms[i-1].Seq+1 {
					t.Fatalf("branch %q: seq %d after %d", want[k], ms[i].Seq, ms[i-1].Seq)
				}
			}
		}
		// Each message's branch is its own: an append to one writes over no other.
		for _, m := range all {
			_ = append(m.Branch, "changed")
		}
		for _, m := range all {
			if !slices.Equal(m.Branch, want[m.Value.N%3]) {
				t.Fatalf("an append to another message's branch changed message %d's: %q", m.Value.N, m.Branch)
			}
		}
	})
}

func TestChan07MessageOver1MiBIsRefusedAndNothingPublished(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		big := open[string](t, stores.Open(), "big")
		got, _ := collect(t, big.Under(1))
		// A JSON string is its text and two quotes.
		if err := big.Under(1).Publish(bg, strings.Repeat("a", 1<<20-1)); !errors.Is(err, tinystore.ErrLimit) {
			t.Fatalf("1 MiB + 1 byte: %v, want ErrLimit", err)
		}
		if err := big.Under(1).Publish(bg, strings.Repeat("b", 1<<20-2)); err != nil {
			t.Fatalf("exactly 1 MiB: %v", err)
		}
		if err := big.Under(1).Publish(bg, "small"); err != nil {
			t.Fatal(err)
		}
		if m := testkit.Receive(t, got, 5*time.Second, "the 1 MiB message"); len(m.Value) != 1<<20-2 {
			t.Fatalf("got %d bytes first, want the 1 MiB message", len(m.Value))
		}
		if m := testkit.Receive(t, got, 5*time.Second, "the small message"); m.Value != "small" {
			t.Fatalf("got %q, want small", m.Value[:min(len(m.Value), 20)])
		}
	})
}

func TestChan01Chan07PublishManyArrivesInOrderOrNotAtAll(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[string](t, stores.Open(), "chat-events")
		got, _ := collect(t, events.Under(7))
		burst := make([]string, 300)
		for i := range burst {
			burst[i] = fmt.Sprint(i)
		}
		if err := events.Under(7).PublishMany(bg, burst); err != nil {
			t.Fatal(err)
		}
		for i := range burst {
			if m := testkit.Receive(t, got, 5*time.Second, fmt.Sprintf("message %d", i)); m.Value != burst[i] {
				t.Fatalf("message %d arrived as %q", i, m.Value)
			}
		}
		// One value over 1 MiB: refused before any leaves, naming it.
		refused := []string{"a", "b", strings.Repeat("x", 1<<20), "d"}
		err := events.Under(7).PublishMany(bg, refused)
		if !errors.Is(err, tinystore.ErrLimit) || !strings.Contains(err.Error(), "message 2 of the 4 given") {
			t.Fatalf("a burst with one value over 1 MiB: %v, want ErrLimit naming message 2", err)
		}
		if err := events.Under(7).PublishMany(bg, nil); err != nil {
			t.Fatalf("an empty burst: %v", err)
		}
		if err := events.Under(7).Publish(bg, "after"); err != nil {
			t.Fatal(err)
		}
		if m := testkit.Receive(t, got, 5*time.Second, "the message after the refused burst"); m.Value != "after" {
			t.Fatalf("got %q, want the message after: the refused burst published some of its values", m.Value)
		}
		// A closed store says so, even for an empty burst.
		closed := stores.Open()
		late := open[string](t, closed, "chat-events")
		closed.Close()
		if err := late.PublishMany(bg, nil); !errors.Is(err, tinystore.ErrClosed) {
			t.Fatalf("an empty burst on a closed store: %v, want ErrClosed", err)
		}
	})
}

func TestNamesChannelNameAndKeysAreChecked(t *testing.T) {
	testkit.EachWithCluster(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		for _, bad := range []string{"", "Chat", "-a", "a b", strings.Repeat("a", 65)} {
			_, err := channels.OpenChannel[event](store, bad)
			if !errors.Is(err, tinystore.ErrInvalid) || !strings.Contains(err.Error(), "chat-events") {
				t.Fatalf("name %q: %v, want ErrInvalid showing an example", bad, err)
			}
		}
		events := open[event](t, store, "chat-events")
		if err := events.Under(1.5).Publish(bg, event{}); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("a float key: %v, want ErrInvalid", err)
		}
		if _, err := events.Under("").Subscribe(bg, func(context.Context, channels.Message[event]) error { return nil }); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("an empty key: %v, want ErrInvalid", err)
		}
		if err := events.Under(strings.Repeat("k", 1025)).Publish(bg, event{}); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("a key of 1,025 bytes: %v, want ErrInvalid", err)
		}
	})
}

func TestHandlerErrorsAndPanicsGoToOnErrorAndTheSubscriptionGoesOn(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		store := stores.Open()
		events := open[event](t, store, "chat-events")
		errs := make(chan error, 8)
		got := make(chan int, 8)
		sub, err := events.Subscribe(bg, func(_ context.Context, m channels.Message[event]) error {
			if m.Value.N == 1 {
				return fmt.Errorf("handler failed on %d", m.Value.N)
			}
			if m.Value.N == 3 {
				panic("handler panicked on 3")
			}
			got <- m.Value.N
			return nil
		}, channels.OnError(func(err error) { errs <- err }))
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Stop(bg)
		// A message that does not decode into event: published on the same
		// channel name with another type.
		raw := open[string](t, store, "chat-events")
		if err := events.Publish(bg, event{N: 1}); err != nil {
			t.Fatal(err)
		}
		if err := raw.Publish(bg, "not an event"); err != nil {
			t.Fatal(err)
		}
		if err := events.Publish(bg, event{N: 3}); err != nil {
			t.Fatal(err)
		}
		if err := events.Publish(bg, event{N: 2}); err != nil {
			t.Fatal(err)
		}
		if err := testkit.Receive(t, errs, 5*time.Second, "the handler's error"); !strings.Contains(err.Error(), "handler failed on 1") {
			t.Fatalf("OnError got %v", err)
		}
		if err := testkit.Receive(t, errs, 5*time.Second, "the decoding error"); !errors.Is(err, tinystore.ErrInvalid) {
			t.Fatalf("OnError got %v, want ErrInvalid", err)
		}
		if err := testkit.Receive(t, errs, 5*time.Second, "the handler's panic"); !strings.Contains(err.Error(), "panicked on 3") {
			t.Fatalf("OnError got %v, want the panic", err)
		}
		if n := testkit.Receive(t, got, 5*time.Second, "message 2"); n != 2 {
			t.Fatalf("got %d, want 2", n)
		}
	})
}

// 10,000 subscriptions must not mean 10,000 threads: a subscription waits
// in Go, woken through the one completion queue, never in a thread of its own.
func TestManySubscriptionsNeedNoThreadEach(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		events := open[event](t, stores.Open(), "chat-events")
		const n = 2000
		threads := pprof.Lookup("threadcreate").Count()
		var got sync.WaitGroup
		got.Add(n)
		subs := make([]*channels.Subscription, n)
		for i := range n {
			var once sync.Once
			sub, err := events.Under(i%50).Subscribe(bg, func(context.Context, channels.Message[event]) error {
				once.Do(got.Done)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			subs[i] = sub
		}
		for b := range 50 {
			if err := events.Under(b).Publish(bg, event{N: b}); err != nil {
				t.Fatal(err)
			}
		}
		waited := make(chan struct{})
		go func() { got.Wait(); close(waited) }()
		testkit.Receive(t, waited, 10*time.Second, "every subscription gets its message")
		if grew := pprof.Lookup("threadcreate").Count() - threads; grew > 64 {
			t.Fatalf("%d subscriptions made %d threads", n, grew)
		}
		for _, s := range subs {
			if err := s.Stop(bg); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// CHAN-03: a transaction's commit publishes to its database's store, so a
// channel of another store is refused at Publish (ErrInvalid), and nothing
// of the transaction is committed.
func TestChan03ATransactionRefusesAChannelOfAnotherStore(t *testing.T) {
	store, err := tinystore.Open(bg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	other, err := tinystore.Open(bg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	db, err := sqldb.Open(bg, store, "chat")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(bg, `create table messages (id integer primary key)`); err != nil {
		t.Fatal(err)
	}
	elsewhere := open[event](t, other, "chat-events")
	err = db.Tx(bg, func(tx *sqldb.Tx) error {
		if _, err := tx.Exec(bg, `insert into messages (id) values (1)`); err != nil {
			return err
		}
		return elsewhere.In(tx).Under(3).Publish(bg, event{N: 1})
	})
	if !errors.Is(err, tinystore.ErrInvalid) || !strings.Contains(err.Error(), "another store handle") {
		t.Fatalf("got %v, want ErrInvalid saying the channel is of another store", err)
	}
	rows, err := db.Query(bg, `select id from messages`)
	if err != nil {
		t.Fatal(err)
	}
	if rows.Len() != 0 {
		t.Fatalf("%d rows committed, want none", rows.Len())
	}
	here := open[event](t, store, "chat-events")
	if err := db.Tx(bg, func(tx *sqldb.Tx) error { return here.In(tx).Publish(bg, event{N: 2}) }); err != nil {
		t.Fatal(err)
	}
}
