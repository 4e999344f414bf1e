package native

/*
#include "tinystore.h"
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// LockOptions are a lock's options; a nil one takes the core's default.
type LockOptions struct {
	TTL, MaxHold, Wait *time.Duration
}

// Lock is a lock or semaphore handle.
type Lock struct {
	p     *C.TsLock
	store *Store
}

// Fence is a lease's fence as two halves.
type Fence struct{ Hi, Lo uint64 }

// OpenLock opens the lock name, or the semaphore name of limit permits.
func (s *Store) OpenLock(name string, semaphore bool, limit int, o LockOptions) (*Lock, error) {
	// The core checks the durations (0 or more, then each option's range)
	// and the limit (1 to 4294967295): Go passes them as they are.
	var opts C.TsLockOptions
	if o.TTL != nil {
		opts.has_ttl, opts.ttl_ns = 1, C.int64_t(*o.TTL)
	}
	if o.MaxHold != nil {
		opts.has_max_hold, opts.max_hold_ns = 1, C.int64_t(*o.MaxHold)
	}
	if o.Wait != nil {
		opts.has_wait, opts.wait_ns = 1, C.int64_t(*o.Wait)
	}
	sem := C.uint8_t(0)
	if semaphore {
		sem = 1
	}
	lim := C.int64_t(limit)
	var p *C.TsLock
	var e *C.TsError
	np, nn := ptr(name)
	err := errorOf(C.ts_lock_open(s.p, np, nn, sem, lim, &opts, &p, &e), e)
	runtime.KeepAlive(s)
	if err != nil {
		return nil, err
	}
	l := &Lock{p: p, store: s}
	runtime.AddCleanup(l, func(p *C.TsLock) { C.ts_lock_free(p) }, p)
	return l, nil
}

// UniqueHolder gives a holder id no other call of this process got.
func UniqueHolder() uint64 { return uint64(C.ts_holder_unique()) }

// Lease is a held lease or permit, until End.
type Lease struct {
	mu sync.Mutex
	p  *C.TsLease
}

// Hold takes key for holder, waiting in line; lostToken is pushed when the
// lease is lost.
func (l *Lock) Hold(ctx context.Context, key any, holder, lostToken uint64) (*Lease, Fence, error) {
	var kv values
	if err := kv.addKey(key); err != nil {
		return nil, Fence{}, err
	}
	var p *C.TsLease
	var f C.TsFence
	var e *C.TsError
	vp, _, bp, bn := kv.ptrs()
	cancel, free := cancelFor(ctx)
	rc := C.ts_lock_hold(l.p, vp, bp, bn, C.uint64_t(holder), C.uint64_t(lostToken), cancel, &p, &f, &e)
	free()
	runtime.KeepAlive(l)
	if err := result(ctx, rc, e); err != nil {
		return nil, Fence{}, err
	}
	return &Lease{p: p}, Fence{uint64(f.hi), uint64(f.lo)}, nil
}

// TryHold takes key if it is free now; a nil lease when it is held. Over a
// connection it waits for the owner's answer, until ctx ends.
func (l *Lock) TryHold(ctx context.Context, key any, holder, lostToken uint64) (*Lease, Fence, error) {
	var kv values
	if err := kv.addKey(key); err != nil {
		return nil, Fence{}, err
	}
	var p *C.TsLease
	var f C.TsFence
	var e *C.TsError
	vp, _, bp, bn := kv.ptrs()
	cancel, free := cancelFor(ctx)
	rc := C.ts_lock_try_hold(l.p, vp, bp, bn, C.uint64_t(holder), C.uint64_t(lostToken), cancel, &p, &f, &e)
	free()
	runtime.KeepAlive(l)
	if err := result(ctx, rc, e); err != nil || p == nil {
		return nil, Fence{}, err
	}
	return &Lease{p: p}, Fence{uint64(f.hi), uint64(f.lo)}, nil
}

// IsLost tells whether the lease was lost; false once released.
func (l *Lease) IsLost() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p != nil && C.ts_lease_is_lost(l.p) != 0
}

// End ends the hold and frees the lease: the core's rule gives an error of
// code "lost" if the lease had been lost while the function ran, unless
// bodyFailed (the function's own error wins). Later calls do nothing.
func (l *Lease) End(bodyFailed bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p == nil {
		return nil
	}
	failed := C.uint8_t(0)
	if bodyFailed {
		failed = 1
	}
	var e *C.TsError
	rc := C.ts_lease_end(l.p, failed, &e)
	l.p = nil
	return errorOf(rc, e)
}
