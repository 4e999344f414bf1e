package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/locks"
)

// chatWith opens a store in a fresh directory and gives a chat of n messages.
func chatWith(t *testing.T, n int) (context.Context, int64) {
	t.Helper()
	ctx := context.Background()
	store, err := tinystore.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if err := setup(ctx, store, "../migrations", 2*time.Second); err != nil {
		t.Fatal(err)
	}
	chat, err := db.Exec(ctx, `insert into chats (title, created_at) values ('t', 0)`)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		role := []string{"user", "assistant"}[i%2]
		if _, err := db.Exec(ctx, `insert into messages (chat_id, role, text, created_at) values (?, ?, ?, 0)`,
			chat.LastInsertRowid, role, "line about stores and chats number "+string(rune('a'+i%26))); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, chat.LastInsertRowid
}

func summaryOf(t *testing.T, ctx context.Context, chatID int64) (summary any, fence string) {
	t.Helper()
	rows, err := db.Query(ctx, `select summary, summary_fence from chats where id = ?`, chatID)
	if err != nil {
		t.Fatal(err)
	}
	return rows.Values[0][0], rows.Values[0][1].(string)
}

func TestSummarizeWaitsForTheChatToPass100Messages(t *testing.T) {
	ctx, chatID := chatWith(t, 100)
	if got := due(ctx, 0); len(got) != 0 {
		t.Fatalf("a chat of 100 messages is due: %v", got)
	}
	if _, err := db.Exec(ctx, `insert into messages (chat_id, role, text, created_at) values (?, 'user', 'one more', 0)`, chatID); err != nil {
		t.Fatal(err)
	}
	if got := due(ctx, 0); len(got) != 1 || got[0] != chatID {
		t.Fatalf("a chat of 101 messages is not due: %v", got)
	}
}

func TestFence02SummaryIsWrittenOnceWithItsLeaseFence(t *testing.T) {
	ctx, chatID := chatWith(t, 101)
	if err := summarize(ctx, chatID); err != nil {
		t.Fatal(err)
	}
	summary, fence := summaryOf(t, ctx, chatID)
	if s, _ := summary.(string); !strings.Contains(s, "line about stores") {
		t.Fatalf("summary %q", summary)
	}
	written, err := locks.ParseFence(strings.TrimLeft(fence, "0"))
	if err != nil || len(fence) != 40 {
		t.Fatalf("summary_fence %q is not a 40-digit fence: %v", fence, err)
	}
	// The next lease's fence is larger: the chat is not due any more, so nothing is written again.
	if err := summarize(ctx, chatID); err != nil {
		t.Fatal(err)
	}
	if _, again := summaryOf(t, ctx, chatID); again != fence {
		t.Fatalf("written twice: %s then %s", fence, again)
	}
	// A late writer holding the fence already written is refused by the seeds' where clause.
	err = summaries.Hold(ctx, chatID, func(ctx context.Context, lease *locks.Lease) error {
		if !written.Less(lease.Fence) {
			t.Fatalf("fence %s after %s", lease.Fence, written)
		}
		older := written.Padded()
		done, err := db.Exec(ctx, `update chats set summary = 'late', summary_fence = ? where id = ? and summary_fence < ?`, older, chatID, older)
		if err == nil && done.Changes != 0 {
			t.Fatalf("a write with the same fence changed %d rows", done.Changes)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestLock01SummarizeSkipsAChatAnotherWorkerHolds(t *testing.T) {
	ctx, chatID := chatWith(t, 101)
	held := make(chan struct{})
	release := make(chan struct{})
	go summaries.Hold(ctx, chatID, func(ctx context.Context, lease *locks.Lease) error {
		close(held)
		<-release
		return nil
	})
	<-held
	if err := summarize(ctx, chatID); err != nil {
		t.Fatal(err)
	}
	if summary, _ := summaryOf(t, ctx, chatID); summary != nil {
		t.Fatalf("written while another worker held the chat: %v", summary)
	}
	close(release)
}

func TestModelKeepsTheMostTellingLinesInOrder(t *testing.T) {
	m := extractive{lines: 2, runes: 400}
	history := []string{
		"hello",
		"a store keeps channels and locks",
		"the weather is nice today outside",
		"channels and locks live in the store",
		"ok",
	}
	got, err := m.Summarize(context.Background(), history)
	if err != nil {
		t.Fatal(err)
	}
	want := "a store keeps channels and locks … channels and locks live in the store"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	again, _ := m.Summarize(context.Background(), history)
	if again != got {
		t.Fatal("two summaries of one chat differ")
	}
}

func TestModelCountsWordsOfScriptsWithoutSpaces(t *testing.T) {
	if got := words("你好, World! こんにちは"); strings.Join(got, " ") != "你 好 world こ ん に ち は" {
		t.Fatalf("words: %q", got)
	}
	long := extractive{lines: 3, runes: 10}
	got, _ := long.Summarize(context.Background(), []string{"你好你好你好你好你好你好"})
	if len([]rune(got)) != 10 || !strings.HasSuffix(got, "…") {
		t.Fatalf("not cut to 10 runes: %q", got)
	}
}
