package tinystore_test

import (
	"context"
	"testing"

	"tinystore/channels"
	"tinystore/internal/testkit"
	"tinystore/locks"
)

// BenchmarkPublishDeliver: one message published and delivered to a
// subscriber's handler, one after another (latency, not throughput).
func BenchmarkPublishDeliver(b *testing.B) {
	for _, kind := range testkit.Kinds {
		b.Run(kind, func(b *testing.B) {
			store := testkit.NewStores(b, kind).Open()
			ch, err := channels.OpenChannel[int](store, "bench")
			if err != nil {
				b.Fatal(err)
			}
			got := make(chan struct{}, 1)
			sub, err := ch.Under(1).Subscribe(context.Background(), func(context.Context, channels.Message[int]) error {
				got <- struct{}{}
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Stop(context.Background())
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if err := ch.Under(1).Publish(ctx, i); err != nil {
					b.Fatal(err)
				}
				<-got
			}
		})
	}
}

// BenchmarkHoldRelease: a Hold of a free key, its function, and the release.
func BenchmarkHoldRelease(b *testing.B) {
	for _, kind := range testkit.Kinds {
		b.Run(kind, func(b *testing.B) {
			store := testkit.NewStores(b, kind).Open()
			l, err := locks.OpenLock(store, "bench")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				if err := l.Hold(ctx, 1, func(context.Context, *locks.Lease) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
