// Command summary is the chat's summary worker. When a chat passes 100
// messages, it holds the chat's key in the lock "summaries" and writes the
// chat's summary with the fence check of the seeds: a worker that froze
// past its ttl, while another took the key and wrote, has its late write
// refused (FENCE-02).
//
//	CHAT_STORE=data SUMMARY_TTL=30s MODEL_LATENCY=0s summary
//
// Run as many as you like: each simply opens the store directory. It prints
// one JSON line per thing that happened (ready, summarizing, written,
// stale) for the demo's report, and stops on SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/locks"
	"tinystore.dev/tinystore/sqldb"
)

// ChatEvent is what chat-events carries: a message of a chat was saved.
type ChatEvent struct {
	Kind string `json:"kind"`
	ID   int64  `json:"id"`
}

// A chat is due a summary when it passed this many messages and has none.
const summarizeAfter = 100

var (
	db        *sqldb.DB
	summaries *locks.Lock
	model     = extractive{lines: 3, runes: 400}
)

// emit prints one JSON line about what happened.
func emit(event string, fields map[string]any) {
	if fields == nil {
		fields = map[string]any{}
	}
	fields["event"], fields["pid"] = event, os.Getpid()
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func duration(name string, otherwise time.Duration) time.Duration {
	d, err := time.ParseDuration(os.Getenv(name))
	if err != nil {
		return otherwise
	}
	return d
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		emit("error", map[string]any{"error": err.Error()})
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dir := os.Getenv("CHAT_STORE")
	if dir == "" {
		dir = "data"
	}
	self, err := os.Executable() // <app>/bin/summary: the migrations are in <app>/migrations
	if err != nil {
		return err
	}
	store, err := tinystore.Open(ctx, dir)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := setup(ctx, store, filepath.Join(filepath.Dir(self), "..", "migrations"), duration("SUMMARY_TTL", 30*time.Second)); err != nil {
		return err
	}
	model.latency = duration("MODEL_LATENCY", 0)
	events, err := channels.OpenChannel[ChatEvent](store, "chat-events")
	if err != nil {
		return err
	}

	// Every chat's events say a chat grew: look again (at most twice a second).
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	sub, err := events.Subscribe(ctx, func(context.Context, channels.Message[ChatEvent]) error { poke(); return nil },
		channels.OnMissed(func(channels.Missed) { poke() }), channels.Recursive())
	if err != nil {
		return err
	}
	defer sub.Stop(context.Background())
	emit("ready", nil)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		for _, chatID := range due(ctx, 0) {
			err := summarize(ctx, chatID)
			// A lost lease was reported as a stale write; closing is not an error.
			if err != nil && ctx.Err() == nil && !errors.Is(err, tinystore.ErrLost) && !errors.Is(err, context.Canceled) {
				emit("error", map[string]any{"chat": chatID, "error": err.Error()})
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-tick.C:
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// setup opens the chat database and the lock "summaries" of store.
func setup(ctx context.Context, store *tinystore.Store, migrations string, ttl time.Duration) (err error) {
	db, err = sqldb.Open(ctx, store, "chat", sqldb.Migrations(migrations))
	if err != nil {
		return err
	}
	summaries, err = locks.OpenLock(store, "summaries", locks.TTL(ttl))
	return err
}

// due gives the chats that passed 100 messages and have no summary yet (only
// chatID when it is not 0).
func due(ctx context.Context, chatID int64) []int64 {
	rows, err := db.Query(ctx, `select c.id from chats c where c.summary is null and (? = 0 or c.id = ?)
		and (select count(*) from messages m where m.chat_id = c.id) > ?`, chatID, chatID, summarizeAfter)
	if err != nil {
		return nil
	}
	var ids []int64
	for _, row := range rows.Values {
		ids = append(ids, row[0].(int64))
	}
	return ids
}

// history gives the texts of the chat's messages, oldest first.
func history(ctx context.Context, chatID int64) []string {
	rows, err := db.Query(ctx, `select text from messages where chat_id = ? order by id`, chatID)
	if err != nil {
		return nil
	}
	lines := make([]string, 0, rows.Len())
	for _, row := range rows.Values {
		lines = append(lines, row[0].(string))
	}
	return lines
}

// summarize writes the chat's summary under the chat's key, as the seeds do.
func summarize(ctx context.Context, chatID int64) error {
	started, err := summaries.TryHold(ctx, chatID, func(ctx context.Context, lease *locks.Lease) error {
		if len(due(ctx, chatID)) == 0 {
			return nil // another worker wrote it since we looked
		}
		emit("summarizing", map[string]any{"chat": chatID, "fence": lease.Fence.String()})
		summary, err := model.Summarize(ctx, history(ctx, chatID))
		if err != nil {
			return err
		}
		fence := fmt.Sprintf("%040s", lease.Fence)
		done, err := db.Exec(ctx, `update chats set summary = ?, summary_fence = ? where id = ? and summary_fence < ?`,
			summary, fence, chatID, fence)
		report(chatID, lease.Fence, done, err)
		return err
	})
	if err == nil && !started {
		return nil // another worker is writing this chat's summary
	}
	return err
}

// report tells what became of a write: written, or refused as stale, by the
// fence check (no row changed) or before it reached the database (the
// lease was lost, so its ctx was cancelled).
func report(chatID int64, fence locks.Fence, done sqldb.Result, err error) {
	fields := map[string]any{"chat": chatID, "fence": fence.String()}
	switch {
	case err == nil && done.Changes == 1:
		emit("written", fields)
	case err == nil:
		fields["by"] = "fence"
		emit("stale", fields)
	case errors.Is(err, context.Canceled):
		fields["by"] = "lease"
		emit("stale", fields)
	}
}
