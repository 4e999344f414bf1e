package locks

import (
	"time"

	"tinystore.dev/tinystore/internal/native"
)

// Option is an option of [OpenLock] and [OpenSemaphore]. The store checks
// them when the handle is made.
type Option func(*native.LockOptions)

// TTL is how long a lease over a connection lasts from its last renewal;
// the engine renews it every third of it while the function runs
// (LOCK-05). 1 s to 1 h; 30 s unless set. A lease of the store's own
// process ends only with its function (LOCK-07) or at MaxHold.
func TTL(d time.Duration) Option {
	return func(o *native.LockOptions) { o.TTL = &d }
}

// MaxHold bounds every lease, in this process or over a connection: past
// it the lease is lost, its function's ctx is cancelled and Hold returns
// [tinystore.ErrLost] (LOCK-06). Positive; none unless set.
func MaxHold(d time.Duration) Option {
	return func(o *native.LockOptions) { o.MaxHold = &d }
}

// Wait is how long Hold waits for a held key, in line behind earlier
// waiters, before [tinystore.ErrTimeout] (LOCK-03). Positive; 10 s unless set.
func Wait(d time.Duration) Option {
	return func(o *native.LockOptions) { o.Wait = &d }
}

func collect(opts []Option) native.LockOptions {
	var o native.LockOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}
