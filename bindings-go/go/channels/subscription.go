package channels

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"tinystore.dev/tinystore/internal/native"
)

// SubscribeOption is an option of Subscribe.
type SubscribeOption func(*subscribeOptions)

type subscribeOptions struct {
	onMissed  func(Missed)
	onError   func(error)
	recursive bool
}

// OnMissed calls f when the subscription missed messages, just before its
// next message, in the subscription's goroutine (never at the same time as
// the handler). Without it, missed messages go unsaid.
func OnMissed(f func(Missed)) SubscribeOption {
	return func(o *subscribeOptions) { o.onMissed = f }
}

// OnError calls f with each error of the handler, and with a message whose
// JSON does not decode into the channel's type; the subscription goes on.
// Without it, such errors go to the standard logger.
func OnError(f func(error)) SubscribeOption {
	return func(o *subscribeOptions) { o.onError = f }
}

// Recursive subscribes to the branch and to every branch below it;
// [Message.Branch] tells which one a message came from.
func Recursive() SubscribeOption {
	return func(o *subscribeOptions) { o.recursive = true }
}

// batch is how many events the subscription's goroutine takes at once.
const batch = 64

// Subscription is a running subscription. Safe for concurrent use.
type Subscription struct {
	n       *native.Sub
	token   uint64
	channel string
	ready   chan struct{} // a signal: look again
	halt    chan struct{} // closed by the first stop
	halted  atomic.Bool
	once    sync.Once
	done    chan struct{} // closed when the goroutine ended
	loop    atomic.Uint64 // the goroutine's id
	cancel  context.CancelFunc
	unwatch func() bool
}

func subscribe[T any](ctx context.Context, b *Branch[T], handler func(context.Context, Message[T]) error, o subscribeOptions) (*Subscription, error) {
	s := &Subscription{
		channel: b.channel,
		ready:   make(chan struct{}, 1),
		halt:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	s.token = native.Register(func() {
		select {
		case s.ready <- struct{}{}:
		default:
		}
	})
	n, err := b.n.Subscribe(ctx, b.channel, b.keys, o.recursive, s.token)
	if err != nil {
		native.Unregister(s.token)
		return nil, err
	}
	s.n = n
	hctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	s.unwatch = context.AfterFunc(ctx, s.stop)
	if o.onError == nil {
		o.onError = func(err error) { log.Printf("tinystore: a subscriber of channel %q: %v", s.channel, err) }
	}
	go run(s, hctx, handler, o, b.store)
	return s, nil
}

func run[T any](s *Subscription, ctx context.Context, handler func(context.Context, Message[T]) error, o subscribeOptions, keep any) {
	s.loop.Store(goid())
	defer func() {
		s.unwatch()
		s.n.Free()
		native.Unregister(s.token)
		s.cancel()
		close(s.done)
		runtime.KeepAlive(keep)
	}()
	for !s.halted.Load() {
		events, ended, err := s.n.Next(batch)
		if err != nil {
			o.onError(err)
			return
		}
		for _, ev := range events {
			if s.halted.Load() {
				return
			}
			deliver(ctx, ev, handler, o)
		}
		if ended {
			return
		}
		// A short batch left the subscription armed: its token comes when
		// more is ready. A full one may have more behind it: read on.
		if len(events) < batch {
			select {
			case <-s.ready:
			case <-s.halt:
				return
			}
		}
	}
}

func deliver[T any](ctx context.Context, ev native.Event, handler func(context.Context, Message[T]) error, o subscribeOptions) {
	// A handler that panics is reported like one that returns an error, and
	// the subscription goes on, as in every other language.
	defer func() {
		if p := recover(); p != nil {
			o.onError(fmt.Errorf("a subscription handler panicked: %v", p))
		}
	}()
	if ev.Missed {
		if o.onMissed != nil {
			o.onMissed(Missed{Count: ev.Count, Known: ev.Known, Reason: MissedReason(ev.Reason)})
		}
		return
	}
	var v T
	if err := json.Unmarshal(ev.Data, &v); err != nil {
		o.onError(native.Invalid("message %d of branch %q does not decode into %T: %v", ev.Seq, ev.Branch, v, err))
		return
	}
	if err := handler(ctx, Message[T]{Value: v, Branch: ev.Branch, Seq: ev.Seq}); err != nil {
		o.onError(err)
	}
}

// stop stops the subscription without waiting for its goroutine.
func (s *Subscription) stop() {
	s.once.Do(func() {
		s.halted.Store(true)
		close(s.halt)
		s.cancel()
		s.n.Stop()
	})
}

// Stop stops the subscription. After Stop returns, the handler is never
// called again (CHAN-05): Stop waits for a handler call in progress to
// return (its ctx is cancelled), unless Stop is called from inside the
// handler, where it returns at once and no call follows. Stop may be
// called twice, and after the store closed. It returns nil, or ctx.Err()
// if ctx ends while it waits for the handler.
func (s *Subscription) Stop(ctx context.Context) error {
	s.stop()
	if goid() == s.loop.Load() {
		return nil
	}
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done is closed when the subscription ended: stopped, its ctx done, or
// its store closed; no handler call runs after.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// goid is the current goroutine's id, read from its stack header
// ("goroutine 42 [running]:"): how Stop tells a call from inside the
// handler, which must not wait for itself.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseUint(string(b), 10, 64)
	return id
}
