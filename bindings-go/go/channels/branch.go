package channels

import (
	"context"
	"encoding/json"
	"slices"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/native"
	"tinystore.dev/tinystore/sqldb"
)

// Branch is a branch of a channel: the messages published under its keys.
// Safe for concurrent use; cheap to make.
type Branch[T any] struct {
	store   *tinystore.Store
	n       *native.Store
	channel string
	keys    []any
	err     error
}

func under(keys []any, key any) ([]any, error) {
	return append(slices.Clip(keys), key), native.CheckKey(key)
}

// Under is the branch key below this one; keys as for [Channel.Under].
func (b *Branch[T]) Under(key any) *Branch[T] {
	keys, err := under(b.keys, key)
	if b.err != nil {
		err = b.err
	}
	return &Branch[T]{store: b.store, n: b.n, channel: b.channel, keys: keys, err: err}
}

func encode[T any](v T) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, native.Invalid("a value could not be converted to JSON: %v", err)
	}
	return data, nil
}

// Publish publishes v (as JSON) to the branch. It returns once the store
// has the message and never waits for a subscriber (CHAN-02). Messages
// published one after another reach each subscriber in that order.
// Connected, a publish made while the connection is being re-established
// waits for it (up to the request timeout, 10 s, and 8 MiB of waiting
// publishes), then leaves in order (STORE-02).
//
// Errors: [tinystore.ErrLimit] when v's JSON is over 1 MiB or nests arrays
// and objects over 100 deep (nothing is published), [tinystore.ErrInvalid]
// for a key out of rule or a value JSON cannot carry, [tinystore.ErrClosed]
// once the store was closed,
// [tinystore.ErrUnavailable] when the store stayed out of reach past the
// request timeout (nothing published) or the connection was cut before the
// owner answered (the message may have been delivered),
// [tinystore.ErrTimeout] when the owner did not answer within the request
// timeout (frozen or overloaded: the message may still be delivered),
// ctx.Err().
func (b *Branch[T]) Publish(ctx context.Context, v T) error {
	if b.err != nil {
		return b.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := encode(v)
	if err != nil {
		return err
	}
	return b.n.Publish(ctx, b.channel, b.keys, data)
}

// PublishMany publishes vs (each as JSON) to the branch, in their order,
// and returns once the store has every one: a burst (a backlog answered,
// events replayed) in one call, where Publish would take a round trip, or
// a goroutine, each. Connected, they leave together, in requests of up
// to 1,024 values and 1 MiB, each answered once. Subscribers get them in
// order, as published one after another.
//
// Every value is encoded and checked before any leaves: an error naming
// the value by its index from 0 ([tinystore.ErrLimit] over 1 MiB or nested
// over 100 deep, [tinystore.ErrInvalid] a value JSON cannot carry), and
// then nothing is published. After they left, it returns once every value
// has its outcome (nothing of the burst is published after it), with the
// first failure, as for [Branch.Publish] ([tinystore.ErrUnavailable],
// [tinystore.ErrTimeout], [tinystore.ErrClosed]), naming its value and,
// when more failed, how many and the last of them. An empty vs publishes
// nothing. Errors also: [tinystore.ErrInvalid] for a key out of rule,
// [tinystore.ErrClosed] once the store was closed, and ctx.Err() when ctx
// ends: before the call nothing is published, during it the values that
// left may still be published.
func (b *Branch[T]) PublishMany(ctx context.Context, vs []T) error {
	if b.err != nil {
		return b.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// One buffer for the burst: each value's JSON after the one before.
	var data []byte
	lens := make([]int, len(vs))
	for i, v := range vs {
		d, err := json.Marshal(v)
		if err != nil {
			return native.Invalid("message %d of the %d given: a value could not be converted to JSON: %v", i, len(vs), err)
		}
		data = append(data, d...)
		lens[i] = len(d)
	}
	return b.n.PublishMany(ctx, b.channel, b.keys, data, lens)
}

// Subscribe calls handler with each message published to the branch after
// Subscribe returns, in publish order, one at a time: the next call starts
// when the previous one returned (CHAN-01). It runs in a goroutine of its
// own, with a ctx that is cancelled when the subscription stops.
//
// A handler's error goes to OnError (by default, the log) and the
// subscription goes on. A subscriber too slow for the branch's log (1,024
// messages or 4 MiB) is told how many it missed, exactly, through OnMissed
// before its next message (CHAN-02).
//
// The subscription lasts until [Subscription.Stop], until ctx is done, or
// until the store closes; [Subscription.Done] tells when it ended.
//
// Errors: [tinystore.ErrLimit] (the store has 10,000 subscriptions),
// [tinystore.ErrInvalid], [tinystore.ErrClosed], ctx.Err().
func (b *Branch[T]) Subscribe(ctx context.Context, handler func(ctx context.Context, m Message[T]) error, opts ...SubscribeOption) (*Subscription, error) {
	if b.err != nil {
		return nil, b.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, native.Invalid("Subscribe needs a handler; got nil")
	}
	o := subscribeOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	return subscribe(ctx, b, handler, o)
}

// TxBranch is a branch of a channel inside a SQL transaction: see [Channel.In].
type TxBranch[T any] struct {
	tx      *sqldb.Tx
	n       *native.Store // the channel's store: it must be the transaction's
	channel string
	keys    []any
	err     error
}

// Under is the branch key below this one; keys as for [Channel.Under].
func (b *TxBranch[T]) Under(key any) *TxBranch[T] {
	keys, err := under(b.keys, key)
	if b.err != nil {
		err = b.err
	}
	return &TxBranch[T]{tx: b.tx, n: b.n, channel: b.channel, keys: keys, err: err}
}

// Publish holds v for the branch until the transaction commits; a rollback
// (or an error returned by the transaction's function) drops it (CHAN-03).
//
// Errors, checked now: [tinystore.ErrLimit] (over 1 MiB, or nested over 100 deep),
// [tinystore.ErrInvalid] (a key out of rule, the transaction already ended,
// a channel of another store than the transaction's database: its commit
// publishes to that store).
func (b *TxBranch[T]) Publish(ctx context.Context, v T) error {
	if b.err != nil {
		return b.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tx := native.TxOf(b.tx)
	if tx == nil {
		return native.Invalid("In needs the transaction its function was given; got nil")
	}
	data, err := encode(v)
	if err != nil {
		return err
	}
	return tx.Publish(b.n, b.channel, b.keys, data)
}
