package channels_test

import (
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m, map[string]func() int{"txwriter": txWriter}) }

// CHAN-04: the owner of the store dies and another takes its place; the
// connected subscriber subscribes again by itself, is told it missed an
// unknown number of messages (reason reconnect: the store restarted), then
// gets what is published after.
func TestChan04SubscriberIsToldReconnectAfterTheOwnerRestarts(t *testing.T) {
	dir := testkit.Dir(t)
	first := testkit.StartOwner(t, dir)
	store, err := tinystore.Connect(bg, "unix:"+filepath.Join(dir, "tinystore.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	events := open[event](t, store, "chat-events")
	got := watch(t, events.Under(4))
	if err := events.Under(4).Publish(bg, event{N: 1}); err != nil {
		t.Fatal(err)
	}
	if s := testkit.Receive(t, got, 5*time.Second, "message 1"); s.n != 1 {
		t.Fatalf("got %+v, want message 1", s)
	}

	first.Signal(t, syscall.SIGKILL)
	testkit.StartOwner(t, dir)

	// Probes until one arrives: publishing fails or goes unheard while the
	// client reconnects.
	var before []seen
	deadline := time.Now().Add(15 * time.Second)
	for probe := 100; ; probe++ {
		if time.Now().After(deadline) {
			t.Fatalf("no probe arrived after the restart; got %+v", before)
		}
		_ = events.Under(4).Publish(bg, event{N: probe})
		select {
		case s := <-got:
			if s.missed != nil {
				before = append(before, s)
				continue
			}
			if len(before) != 1 || *before[0].missed != (channels.Missed{Known: false, Reason: channels.Reconnect}) {
				t.Fatalf("before the first message after the restart: %+v, want one onMissed(reconnect, count unknown)", before)
			}
			if s.n < 100 {
				t.Fatalf("got message %d after the restart, want a probe", s.n)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}
