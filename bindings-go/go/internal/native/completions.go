package native

/*
#include "tinystore.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// The completion queue's Go side: tokens name functions to run when the
// library pushes them. One goroutine waits in ts_completions_wait for the whole
// process, however many subscriptions and leases there are; the functions
// it runs must not block (they signal a channel or cancel a context).
var completions struct {
	once  sync.Once
	next  atomic.Uint64
	funcs sync.Map // uint64 -> func(published bool)
}

// Register gives a fresh token that runs f each time the library pushes it,
// until Unregister.
func Register(f func()) uint64 {
	t := newToken()
	registerAt(t, func(bool) { f() })
	return t
}

// newToken gives a fresh token, for a call that may push it before its
// function is registered (registerAt): that push is ignored.
func newToken() uint64 { return completions.next.Add(1) }

// registerAt runs f each time the library pushes t, until Unregister;
// published is true when the push was of a publish that succeeded
// (t|TS_TOKEN_PUBLISHED, for a publish started with TS_TOKEN_REGISTERED).
func registerAt(t uint64, f func(published bool)) {
	completions.once.Do(func() { go drain() })
	completions.funcs.Store(t, f)
}

// Unregister forgets token t; a late push of it is ignored.
func Unregister(t uint64) { completions.funcs.Delete(t) }

// run runs the functions of the tokens in buf.
func run(buf []C.uint64_t) {
	for _, t := range buf {
		published := uint64(t)&C.TS_TOKEN_PUBLISHED != 0
		if f, ok := completions.funcs.Load(uint64(t) &^ C.TS_TOKEN_PUBLISHED); ok {
			f.(func(bool))(published)
		}
	}
}

// takeNow runs what a call made on this goroutine pushed without waking
// the drain goroutine (ts_publish_start): its own subscriptions' messages.
func takeNow() {
	var buf [64]C.uint64_t
	for {
		n := int(C.ts_completions_try(&buf[0], C.size_t(len(buf))))
		run(buf[:n])
		if n < len(buf) {
			return
		}
	}
}

func drain() {
	buf := make([]C.uint64_t, 256)
	for {
		n := int(C.ts_completions_wait(&buf[0], C.size_t(len(buf)), -1))
		run(buf[:n])
		// The goroutines just woken (a subscription's reader) sit in this
		// P's run queue; were this goroutine to block in C now, they would
		// wait for another thread to be woken and take them (or for sysmon
		// to take the P back). Yielding runs them on this thread at once
		// (publish->deliver: owned about halved, over a connection about a
		// quarter less; docs/performance-go.md). Tokens pushed meanwhile
		// wait in the queue.
		runtime.Gosched()
	}
}
