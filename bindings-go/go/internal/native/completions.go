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
// A plain map under a mutex, not a sync.Map: a pipelined publish registers
// and forgets a token each, and a sync.Map boxes each key and grows a trie
// node for it; run looks up a whole batch under one lock
// (docs/performance-go.md).
var completions struct {
	once  sync.Once
	next  atomic.Uint64
	mu    sync.Mutex
	funcs map[uint64]completer
}

// completer is what a token runs each time the library pushes it;
// published as for registerAt.
type completer interface{ complete(published bool) }

// onPush is a function run at each push of its token.
type onPush func()

func (f onPush) complete(bool) { f() }

// Register gives a fresh token that runs f each time the library pushes it,
// until Unregister.
func Register(f func()) uint64 {
	t := newToken()
	registerAt(t, onPush(f))
	return t
}

// newToken gives a fresh token, for a call that may push it before its
// function is registered (registerAt): that push is ignored.
func newToken() uint64 { return completions.next.Add(1) }

// registerAt runs f each time the library pushes t, until Unregister;
// published is true when the push was of a publish that succeeded
// (t|TS_TOKEN_PUBLISHED, for a publish started with TS_TOKEN_REGISTERED),
// which also unregisters t: a publish ends once.
func registerAt(t uint64, f completer) {
	completions.once.Do(func() { go drain() })
	completions.mu.Lock()
	if completions.funcs == nil {
		completions.funcs = make(map[uint64]completer)
	}
	completions.funcs[t] = f
	completions.mu.Unlock()
}

// Unregister forgets token t; a late push of it is ignored.
func Unregister(t uint64) {
	completions.mu.Lock()
	delete(completions.funcs, t)
	completions.mu.Unlock()
}

// run runs the functions of the tokens in buf, looked up under one lock
// a batch of 256 and run outside it.
func run(buf []C.uint64_t) {
	for len(buf) > 256 {
		run(buf[:256])
		buf = buf[256:]
	}
	var found [256]struct {
		f         completer
		published bool
	}
	n := 0
	completions.mu.Lock()
	for _, t := range buf {
		published := uint64(t)&C.TS_TOKEN_PUBLISHED != 0
		token := uint64(t) &^ C.TS_TOKEN_PUBLISHED
		if f, ok := completions.funcs[token]; ok {
			if published {
				delete(completions.funcs, token)
			}
			found[n].f, found[n].published = f, published
			n++
		}
	}
	completions.mu.Unlock()
	for _, r := range found[:n] {
		r.f.complete(r.published)
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
