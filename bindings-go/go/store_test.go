package tinystore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tinystore"
	"tinystore/channels"
	"tinystore/internal/testkit"
	"tinystore/locks"
)

func TestErrorsCarryTheCoreCodeAndMessageAndMatchOneSentinel(t *testing.T) {
	store := testkit.Owned(t, "")
	_, err := locks.OpenLock(store, "summaries", locks.TTL(10*time.Millisecond))
	var e *tinystore.Error
	if !errors.As(err, &e) || e.Code != "invalid" || !strings.Contains(e.Message, "30s") {
		t.Fatalf("got %#v, want a *tinystore.Error of code invalid whose message shows a valid ttl", err)
	}
	if err.Error() != e.Message+" (invalid)" {
		t.Fatalf("Error() is %q", err.Error())
	}
	matched := 0
	for _, s := range []error{tinystore.ErrTimeout, tinystore.ErrInvalid, tinystore.ErrLimit, tinystore.ErrClosed,
		tinystore.ErrLost, tinystore.ErrOwned, tinystore.ErrConflict, tinystore.ErrBusy, tinystore.ErrSQL,
		tinystore.ErrAuth, tinystore.ErrIO, tinystore.ErrProtocol, tinystore.ErrInternal} {
		if errors.Is(err, s) {
			matched++
		}
	}
	if matched != 1 || !errors.Is(err, tinystore.ErrInvalid) {
		t.Fatalf("the error matches %d sentinels, want only ErrInvalid", matched)
	}
}

func TestStoreCloseIsIdempotentAndEndsEveryCall(t *testing.T) {
	store := testkit.Owned(t, "")
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := channels.OpenChannel[int](store, "chat-events"); !errors.Is(err, tinystore.ErrClosed) {
		t.Fatalf("a channel of a closed store: %v, want ErrClosed", err)
	}
	if _, err := locks.OpenLock(store, "summaries"); !errors.Is(err, tinystore.ErrClosed) {
		t.Fatalf("a lock of a closed store: %v, want ErrClosed", err)
	}
}

func TestStoreOpenReportsWhatWentWrong(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := tinystore.Open(context.Background(), file); !errors.Is(err, tinystore.ErrIO) {
		t.Fatalf("a store in a file: %v, want ErrIO", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tinystore.Open(ctx, t.TempDir()); !errors.Is(err, context.Canceled) {
		t.Fatalf("open with a cancelled ctx: %v, want context.Canceled", err)
	}
}
