package channels_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/channels"
	"tinystore.dev/tinystore/internal/testkit"
)

// closeDrainRounds: a fresh store each round, as the loss before the fix
// was a race; clusterCloseDrainRounds on a cluster store, where a round
// makes new streams (about 0.7 s a round here).
const closeDrainRounds, clusterCloseDrainRounds = 5, 2

// TestChan01CloseDrainsToOwnSubscription: closing is a drain (issue 17
// part 4). Messages the store already took reach the closing handle's own
// subscription within Close's bound (2 s), then it ends without an error;
// owned, connected and cluster, published by the closing handle or by
// another handle of the store (connected: the owner; owned: a client over
// its socket; cluster: another connection to the cluster store). Go has the
// handler form only.
func TestChan01CloseDrainsToOwnSubscription(t *testing.T) {
	const n = 10
	for _, kind := range append(slices.Clone(testkit.Kinds), "cluster") {
		for _, by := range []string{"self", "other"} {
			t.Run(kind+"/"+by, func(t *testing.T) {
				rounds := closeDrainRounds
				if kind == "cluster" {
					rounds = clusterCloseDrainRounds
				}
				for range rounds {
					var owner, client *tinystore.Store
					var err error
					if kind == "cluster" {
						// Two connections to one cluster store, under a fresh prefix (fresh streams).
						address := testkit.NewStores(t, "cluster").Address()
						if owner, err = tinystore.Connect(bg, address, tinystore.RequestTimeout(testkit.ClusterTimeout)); err != nil {
							t.Fatal(err)
						}
						if client, err = tinystore.Connect(bg, address, tinystore.RequestTimeout(testkit.ClusterTimeout)); err != nil {
							t.Fatal(err)
						}
					} else {
						dir := testkit.Dir(t)
						if owner, err = tinystore.Open(bg, dir); err != nil {
							t.Fatal(err)
						}
						if client, err = tinystore.Connect(bg, "unix:"+filepath.Join(dir, "tinystore.sock")); err != nil {
							t.Fatal(err)
						}
					}
					closing, other := owner, client
					if kind == "connected" {
						closing, other = client, owner
					}
					var mu sync.Mutex
					var got []int
					sub, err := open[int](t, closing, "c").Under(1).Subscribe(bg, func(_ context.Context, m channels.Message[int]) error {
						mu.Lock()
						got = append(got, m.Value)
						mu.Unlock()
						return nil
					}, channels.OnError(func(err error) { t.Errorf("the subscription reported %v", err) }))
					if err != nil {
						t.Fatal(err)
					}
					publisher := closing
					if by == "other" {
						publisher = other
					}
					branch := open[int](t, publisher, "c").Under(1)
					for i := range n {
						if err := branch.Publish(bg, i); err != nil { // the store took it
							t.Fatal(err)
						}
					}
					started := time.Now()
					if err := closing.Close(); err != nil {
						t.Fatal(err)
					}
					testkit.Receive(t, sub.Done(), 2*time.Second, "the subscription ends within close's bound")
					if d := time.Since(started); d > 2*time.Second {
						t.Fatalf("the drain took %v, past close's bound", d)
					}
					mu.Lock()
					want := []int{}
					for i := range n {
						want = append(want, i)
					}
					if !slices.Equal(got, want) {
						t.Fatalf("%d of %d messages the store took never reached the handler: got %v", n-len(got), n, got)
					}
					mu.Unlock()
					_ = client.Close()
					_ = owner.Close()
				}
			})
		}
	}
}
