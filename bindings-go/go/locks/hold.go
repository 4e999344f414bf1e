package locks

import (
	"context"

	"tinystore.dev/tinystore/internal/native"
)

type holderKey struct{}

// holderOf is the holder ctx belongs to: the one of the lease whose
// function got ctx, or a new one.
func holderOf(ctx context.Context) uint64 {
	if h, ok := ctx.Value(holderKey{}).(uint64); ok {
		return h
	}
	return native.UniqueHolder()
}

// hold takes key (waiting in line when wait), runs fn with a ctx cancelled
// when the lease is lost, then ends the hold (the core's rule). started
// tells whether fn ran.
func hold(ctx context.Context, l *native.Lock, key any, wait bool, fn func(context.Context, *native.Lease, native.Fence) error) (started bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	holder := holderOf(ctx)
	lctx, cancel := context.WithCancelCause(context.WithValue(ctx, holderKey{}, holder))
	defer cancel(nil)
	token := native.Register(func() { cancel(native.ErrLost) })
	defer native.Unregister(token)

	var lease *native.Lease
	var fence native.Fence
	if wait {
		lease, fence, err = l.Hold(ctx, key, holder, token)
	} else {
		lease, fence, err = l.TryHold(ctx, key, holder, token)
	}
	if err != nil || lease == nil {
		return false, err
	}
	ended := false
	defer func() {
		if !ended { // fn panicked: let the key go, and let the panic go on
			_ = lease.End(true)
		}
	}()
	fnErr := fn(lctx, lease, fence)
	ended = true
	// The core decides what the hold ends with (LOCK-04): nil when fn
	// failed, else ErrLost for a lease lost while fn ran.
	if endErr := lease.End(fnErr != nil); endErr != nil {
		return true, endErr
	}
	return true, fnErr
}

// errNoFn is the error of a Hold or TryHold given no function to run.
func errNoFn() error {
	return native.Invalid("Hold and TryHold need a function to run holding the key; got nil")
}
