// Package locks gives one holder of a key at a time (locks) or up to a
// limit (semaphores), with leases, maxHold and fences.
//
//	summaries, err := locks.OpenLock(store, "summaries", locks.TTL(30*time.Second))
//	err = summaries.Hold(ctx, chatID, func(ctx context.Context, lease *locks.Lease) error {
//		fence := fmt.Sprintf("%040s", lease.Fence)
//		_, err := db.Exec(ctx, `update chats set summary = ?, summary_fence = ?
//			where id = ? and summary_fence < ?`, summary, fence, chatID, fence)
//		return err
//	})
//
// The function runs while its lease is held; the key is let go when it
// returns or panics. The ctx it gets is cancelled when the lease is lost
// (MaxHold, an expired ttl over a connection, the store closed), and Hold
// then returns [tinystore.ErrLost] unless the function returned its own
// error. A fence larger than every earlier one comes with each lease, so a
// writer that keeps the largest fence it saw can refuse a late holder.
//
// The holder of a lease is the ctx its function got: a Hold of the same key
// with that ctx (or one derived from it) fails at once with
// [tinystore.ErrConflict] instead of waiting on itself, and a TryHold of it
// is not acquired (LOCK-08).
package locks

import (
	"context"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/native"
)

// Lock is a lock: one holder of a key at a time, each lease with a fence.
// Safe for concurrent use.
type Lock struct {
	n     *native.Lock
	store *tinystore.Store
}

// Lease is the lease a Lock's function holds.
type Lease struct {
	// Fence is the lease's fence, larger than every fence the store gave before.
	Fence Fence
	n     *native.Lease
}

// Lost tells whether the lease was lost (its function's ctx is then cancelled too).
func (l *Lease) Lost() bool { return l.n.IsLost() }

// OpenLock gives the lock name of store. A connected store declares the
// lock to its owner and waits for the answer (it takes no ctx: an owner
// that does not answer holds it up to the engine's request timeout, then
// it fails with [tinystore.ErrTimeout]).
//
// Errors: [tinystore.ErrInvalid] (a name out of rule, like "summaries"; a
// ttl outside 1 s to 1 h; a zero or negative Wait or MaxHold),
// [tinystore.ErrConflict] (the name is a semaphore), [tinystore.ErrClosed].
func OpenLock(store *tinystore.Store, name string, opts ...Option) (*Lock, error) {
	n, err := open(store, name, false, 0, opts)
	if err != nil {
		return nil, err
	}
	return &Lock{n: n, store: store}, nil
}

func open(store *tinystore.Store, name string, semaphore bool, limit int, opts []Option) (*native.Lock, error) {
	s := native.StoreOf(store)
	if s == nil {
		return nil, native.Invalid("opening a lock needs an open store; got nil")
	}
	return s.OpenLock(name, semaphore, limit, collect(opts))
}

// Hold waits for key (an integer or a string, as channel keys), in line
// behind earlier waiters, up to the lock's Wait (10 s unless set), then
// runs fn holding it, and lets it go when fn returns or panics. It returns
// fn's error unchanged; else [tinystore.ErrLost] if the lease was lost
// while fn ran.
//
// Errors before fn runs (then it never runs): [tinystore.ErrTimeout] (the
// wait ran out), ctx.Err() (ctx ended while waiting: Hold left the line),
// [tinystore.ErrConflict] (this ctx's holder already holds key),
// [tinystore.ErrInvalid] (the key), [tinystore.ErrClosed].
func (l *Lock) Hold(ctx context.Context, key any, fn func(ctx context.Context, lease *Lease) error) error {
	if fn == nil {
		return errNoFn()
	}
	_, err := hold(ctx, l.n, key, true, func(ctx context.Context, n *native.Lease, f native.Fence) error {
		return fn(ctx, &Lease{Fence: Fence{f.Hi, f.Lo}, n: n})
	})
	return err
}

// TryHold runs fn holding key if nobody holds it now, and never waits in
// line: started is false (and fn did not run) when the key is held. Over a
// connection it waits for the owner's answer; if ctx ends first, it
// returns ctx.Err() and holds nothing. Otherwise as [Lock.Hold].
func (l *Lock) TryHold(ctx context.Context, key any, fn func(ctx context.Context, lease *Lease) error) (started bool, err error) {
	if fn == nil {
		return false, errNoFn()
	}
	return hold(ctx, l.n, key, false, func(ctx context.Context, n *native.Lease, f native.Fence) error {
		return fn(ctx, &Lease{Fence: Fence{f.Hi, f.Lo}, n: n})
	})
}
