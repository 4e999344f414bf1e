package tinystore_test

// The Go samples of the seeds (the handbook's "Live updates" and "Fences"
// pages), each block as written, with stand-ins for the app's own helpers
// (model, history, send) and the glue that gives each block its variables.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
	"tinystore.dev/tinystore/locks"
	"tinystore.dev/tinystore/sqldb"
)

// Seed "Live updates", "Open a channel and a lock" (the type).
type ChatEvent struct {
	Kind string `json:"kind"`
	ID   int64  `json:"id"`
}

// The app's handles, as the samples name them.
var (
	events    *channels.Channel[ChatEvent]
	summaries *locks.Lock
	db        *sqldb.DB
	model     summarizer
)

// Stand-ins for the app's own helpers.
type summarizer struct {
	text string
	err  error
}

func (m summarizer) Summarize(ctx context.Context, history string) (string, error) {
	return m.text + " of " + history, m.err
}

// probeUntil publishes probes to chat 7 until ch gives something: the
// samples' stream gives no word of when its subscription is in place.
func probeUntil[T any](t *testing.T, what string, ch <-chan T) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, what, func() bool {
		if err := events.Under(int64(7)).Publish(context.Background(), ChatEvent{Kind: "probe"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			return true
		case <-time.After(10 * time.Millisecond):
			return false
		}
	})
}

// next is the next value a tab got that is not a probe.
func next(t *testing.T, tab chan any, what string) any {
	t.Helper()
	for {
		v := testkit.Receive(t, tab, 5*time.Second, what)
		if e, ok := v.(ChatEvent); !ok || e.Kind != "probe" {
			return v
		}
	}
}

func history(ctx context.Context, chatID int64) string { return fmt.Sprintf("chat %d", chatID) }

// Seed "Live updates", "Open a channel and a lock" (the calls).
func openApp(store *tinystore.Store) (*channels.Channel[ChatEvent], *locks.Lock, error) {
	events, err := channels.OpenChannel[ChatEvent](store, "chat-events")
	if err != nil {
		return nil, nil, err
	}
	summaries, err := locks.OpenLock(store, "summaries", locks.TTL(30*time.Second))
	return events, summaries, err
}

// Seed "Live updates", "Tell every open tab".
func saveReply(ctx context.Context, chatID int64, answer string, messageID int64) (err error) {
	err = db.Tx(ctx, func(tx *sqldb.Tx) error {
		reply, err := tx.Exec(ctx, `insert into messages (chat_id, role, text, created_at, reply_to) values (?, 'assistant', ?, ?, ?)`,
			chatID, answer, time.Now().UnixMilli(), messageID)
		if err != nil {
			return err
		}
		return events.In(tx).Under(chatID).Publish(ctx, ChatEvent{Kind: "message", ID: reply.LastInsertRowid})
	})
	return err
}

// Seed "Live updates", the server-sent events endpoint.
func stream(ctx context.Context, chatID int64, send func(any)) error {
	sub, err := events.Under(chatID).Subscribe(ctx, func(ctx context.Context, m channels.Message[ChatEvent]) error {
		send(m.Value)
		return nil
	}, channels.OnMissed(func(channels.Missed) { send(map[string]string{"kind": "reload"}) }))
	if err != nil {
		return err
	}
	<-ctx.Done() // the browser went away
	return sub.Stop(context.Background())
}

// Seed "Live updates", "One summary per chat at a time".
func summarizeOnce(ctx context.Context, chatID int64) error {
	started, err := summaries.TryHold(ctx, chatID, func(ctx context.Context, lease *locks.Lease) error {
		summary, err := model.Summarize(ctx, history(ctx, chatID))
		if err != nil {
			return err
		}
		fence := fmt.Sprintf("%040s", lease.Fence)
		_, err = db.Exec(ctx, `update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?`,
			summary, fence, chatID, fence)
		return err
	})
	if err == nil && !started {
		return nil // another worker is writing this chat's summary
	}
	return err
}

// Seed "Fences", "Checking a fence in SQL".
func summarize(ctx context.Context, chatID int64) (err error) {
	err = summaries.Hold(ctx, chatID, func(ctx context.Context, lease *locks.Lease) error {
		summary, err := model.Summarize(ctx, history(ctx, chatID))
		if err != nil {
			return err
		}
		fence := fmt.Sprintf("%040s", lease.Fence)
		_, err = db.Exec(ctx, `update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?`,
			summary, fence, chatID, fence)
		return err
	})
	return err
}

// seedApp opens a store with the chat's tables (the seeds' migration as
// written) and the app's handles.
func seedApp(t *testing.T, stores *testkit.Stores) {
	ctx := context.Background()
	store := stores.Open()
	migrations := t.TempDir()
	for name, text := range map[string]string{
		"0001_chat.sql": `create table chats (id integer primary key);
create table messages (id integer primary key, chat_id integer not null references chats (id),
	role text not null, text text not null, created_at integer not null, reply_to integer);`,
		"0004_summaries.sql": "alter table chats add column summary text;\nalter table chats add column summary_fence text not null default '';\n",
	} {
		if err := os.WriteFile(filepath.Join(migrations, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if db, err = sqldb.Open(ctx, store, "chat", sqldb.Migrations(migrations)); err != nil {
		t.Fatal(err)
	}
	if events, summaries, err = openApp(store); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `insert into chats (id) values (7)`); err != nil {
		t.Fatal(err)
	}
	model = summarizer{text: "summary"}
}

func TestSeedsLiveUpdatesTellEveryOpenTabChan01Chan03(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		seedApp(t, stores)
		ctx, browserGone := context.WithCancel(context.Background())
		laptop, phone := make(chan any, 8), make(chan any, 8)
		var streams sync.WaitGroup
		for _, tab := range []chan any{laptop, phone} {
			streams.Go(func() {
				if err := stream(ctx, 7, func(v any) { tab <- v }); err != nil {
					t.Error(err)
				}
			})
		}
		probeUntil(t, "the laptop listens", laptop)
		probeUntil(t, "the phone listens", phone)
		if err := saveReply(context.Background(), 7, "hello", 0); err != nil {
			t.Fatal(err)
		}
		for _, tab := range []chan any{laptop, phone} {
			got := next(t, tab, "the reply event")
			if got != (ChatEvent{Kind: "message", ID: 1}) {
				t.Fatalf("a tab got %#v, want the reply's event", got)
			}
		}
		browserGone()
		streams.Wait()
	})
}

func TestSeedsLiveUpdatesATabThatFallsBehindReloadsChan02(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		seedApp(t, stores)
		ctx, browserGone := context.WithCancel(context.Background())
		defer browserGone()
		stuck, unstick := make(chan struct{}), make(chan struct{})
		got := make(chan any, 2048)
		var once sync.Once
		go func() {
			_ = stream(ctx, 7, func(v any) {
				once.Do(func() { close(stuck); <-unstick }) // a phone on a slow network
				got <- v
			})
		}()
		probeUntil(t, "the phone listens", stuck) // the first probe it gets makes it stuck
		for i := range 1100 {
			if err := events.Under(int64(7)).Publish(context.Background(), ChatEvent{Kind: "message", ID: int64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		close(unstick)
		reload := next(t, got, "reload")
		if m, ok := reload.(map[string]string); !ok || m["kind"] != "reload" {
			t.Fatalf("after the burst the phone got %#v, want a reload", reload)
		}
		// The oldest reply the branch still kept (over a connection, a few
		// already on their way to the phone may come first).
		e := next(t, got, "the next reply").(ChatEvent)
		if e.ID > 1100-1024 || (stores.Kind == "owned" && e.ID != 1100-1024) {
			t.Fatalf("after the reload the phone got reply %d, want %d, the oldest still kept", e.ID, 1100-1024)
		}
	})
}

func TestSeedsOneSummaryPerChatAtATimeFence02(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		seedApp(t, stores)
		ctx := context.Background()
		read := func() (string, string) {
			rows, err := db.Query(ctx, `select summary, summary_fence from chats where id = 7`)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := rows.Values[0][0].(string)
			return s, rows.Values[0][1].(string)
		}
		if err := summarizeOnce(ctx, 7); err != nil {
			t.Fatal(err)
		}
		summary, first := read()
		if summary != "summary of chat 7" || len(first) != 40 {
			t.Fatalf("after tryHold: %q with fence %q", summary, first)
		}
		// While another worker holds the chat, tryHold returns at once.
		err := summaries.Hold(ctx, int64(7), func(context.Context, *locks.Lease) error {
			model = summarizer{text: "never"}
			start := time.Now()
			if err := summarizeOnce(ctx, 7); err != nil || time.Since(start) > time.Second {
				return fmt.Errorf("tryHold of a held chat: %v after %v", err, time.Since(start))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if s, f := read(); s != "summary of chat 7" || f != first {
			t.Fatalf("a tryHold that did not start wrote %q %q", s, f)
		}
		model = summarizer{text: "newer summary"}
		if err := summarize(ctx, 7); err != nil {
			t.Fatal(err)
		}
		summary, second := read()
		if summary != "newer summary of chat 7" || !(first < second) {
			t.Fatalf("after hold: %q with fence %q (before %q)", summary, second, first)
		}
		// A model that fails: Hold returns its error unchanged, nothing is written.
		down := errors.New("the model is down")
		model = summarizer{err: down}
		if err := summarize(ctx, 7); err != down {
			t.Fatalf("a failing model: %v, want its own error", err)
		}
		if s, f := read(); s != "newer summary of chat 7" || f != second {
			t.Fatalf("a failed summary wrote %q %q", s, f)
		}
	})
}
