package locks

import (
	"context"

	"tinystore.dev/tinystore"
	"tinystore.dev/tinystore/internal/native"
)

// Semaphore gives up to its limit of holders of a key at once. Its permits
// have no fence: several valid holders at once would refuse each other.
// Safe for concurrent use.
type Semaphore struct {
	n     *native.Lock
	store *tinystore.Store
}

// Permit is the permit a Semaphore's function holds.
type Permit struct {
	n *native.Lease
}

// Lost tells whether the permit was lost (its function's ctx is then cancelled too).
func (p *Permit) Lost() bool { return p.n.IsLost() }

// OpenSemaphore gives the semaphore name of store, with limit permits per
// key. The limit belongs to the semaphore: opening the name again with
// another limit fails with [tinystore.ErrConflict] (LOCK-08).
//
// Errors: as [OpenLock], and [tinystore.ErrInvalid] for a limit below 1 or
// above 4294967295.
func OpenSemaphore(store *tinystore.Store, name string, limit int, opts ...Option) (*Semaphore, error) {
	n, err := open(store, name, true, limit, opts)
	if err != nil {
		return nil, err
	}
	return &Semaphore{n: n, store: store}, nil
}

// Hold waits for a permit of key, then runs fn holding it; as [Lock.Hold].
func (s *Semaphore) Hold(ctx context.Context, key any, fn func(ctx context.Context, permit *Permit) error) error {
	if fn == nil {
		return errNoFn()
	}
	_, err := hold(ctx, s.n, key, true, func(ctx context.Context, n *native.Lease, _ native.Fence) error {
		return fn(ctx, &Permit{n: n})
	})
	return err
}

// TryHold runs fn holding a permit of key if one is free now; as [Lock.TryHold].
func (s *Semaphore) TryHold(ctx context.Context, key any, fn func(ctx context.Context, permit *Permit) error) (started bool, err error) {
	if fn == nil {
		return false, errNoFn()
	}
	return hold(ctx, s.n, key, false, func(ctx context.Context, n *native.Lease, _ native.Fence) error {
		return fn(ctx, &Permit{n: n})
	})
}
