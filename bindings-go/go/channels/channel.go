// Package channels publishes messages to whoever listens now, and
// subscribes to them.
//
// A channel is a name that messages of one type T are published on, as
// JSON. Under a channel are branches, named by keys (Under(chatID), nestable):
// a subscriber of a branch gets its messages only. Each branch keeps a
// bounded log of its newest messages (1,024 or 4 MiB): a publisher never
// waits for a subscriber, and a subscriber that falls behind is told exactly
// how many messages it missed before its next one (OnMissed). Messages
// published inside a SQL transaction ([Channel.In]) are delivered at its
// commit, and dropped by a rollback.
//
//	events, err := channels.OpenChannel[ChatEvent](store, "chat-events")
//	sub, err := events.Under(chatID).Subscribe(ctx, func(ctx context.Context, m channels.Message[ChatEvent]) error {
//		send(m.Value)
//		return nil
//	}, channels.OnMissed(func(channels.Missed) { send(reload) }))
//	err = events.Under(chatID).Publish(ctx, ChatEvent{Kind: "message", ID: 42})
//	err = sub.Stop(ctx)
package channels

import (
	"context"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/native"
	"tinystore.dev/tinystore/sqldb"
)

// Channel is a channel of messages of type T, carried as JSON (T must
// marshal with encoding/json). Safe for concurrent use.
type Channel[T any] struct {
	root Branch[T]
}

// OpenChannel gives the channel name of store. Nothing is made in the
// store until a subscriber listens.
//
// Errors: [tinystore.ErrInvalid] when the name is out of rule (1 to 64 of
// a-z, 0-9, '_' and '-', starting with a letter or digit, like
// "chat-events"), [tinystore.ErrClosed] when the store is closed.
func OpenChannel[T any](store *tinystore.Store, name string) (*Channel[T], error) {
	n := native.StoreOf(store)
	if n == nil {
		return nil, native.Invalid("OpenChannel needs an open store; got nil")
	}
	if err := n.CheckChannel(name); err != nil {
		return nil, err
	}
	return &Channel[T]{root: Branch[T]{store: store, n: n, channel: name}}, nil
}

// Name is the channel's name.
func (c *Channel[T]) Name() string { return c.root.channel }

// Under is the branch key of the channel: an integer of any Go integer type
// or a string of 1 to 1,024 bytes. An integer names the branch of its
// decimal text, so Under(7) and Under("7") are one branch, in every
// language alike. A key of another type makes Publish and Subscribe fail
// with [tinystore.ErrInvalid].
func (c *Channel[T]) Under(key any) *Branch[T] { return c.root.Under(key) }

// Publish publishes v to the channel's root branch; see [Branch.Publish].
func (c *Channel[T]) Publish(ctx context.Context, v T) error { return c.root.Publish(ctx, v) }

// PublishMany publishes vs to the channel's root branch, in order: see
// [Branch.PublishMany].
func (c *Channel[T]) PublishMany(ctx context.Context, vs []T) error { return c.root.PublishMany(ctx, vs) }

// Subscribe subscribes to the channel's root branch; see [Branch.Subscribe].
func (c *Channel[T]) Subscribe(ctx context.Context, handler func(ctx context.Context, m Message[T]) error, opts ...SubscribeOption) (*Subscription, error) {
	return c.root.Subscribe(ctx, handler, opts...)
}

// In is the channel inside the SQL transaction tx: what is published
// through it is delivered when tx commits, in the order published, and
// dropped when it rolls back.
//
//	err = db.Tx(ctx, func(tx *sqldb.Tx) error {
//		reply, err := tx.Exec(ctx, `insert into messages ...`, ...)
//		if err != nil {
//			return err
//		}
//		return events.In(tx).Under(chatID).Publish(ctx, ChatEvent{Kind: "message", ID: reply.LastInsertRowid})
//	})
func (c *Channel[T]) In(tx *sqldb.Tx) *TxBranch[T] {
	return &TxBranch[T]{tx: tx, n: c.root.n, channel: c.root.channel}
}
