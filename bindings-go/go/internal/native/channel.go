package native

/*
#include "tinystore.h"
*/
import "C"

import (
	"context"
	"runtime"
	"sync"
	"unsafe"
)

// CheckChannel checks a channel handle can be made: name in rule, store open.
func (s *Store) CheckChannel(name string) error {
	var e *C.TsError
	p, n := ptr(name)
	err := errorOf(C.ts_channel_check(s.p, p, n, &e), e)
	runtime.KeepAlive(s)
	return err
}

// PublishMany publishes messages (each one JSON value; message i is the
// lens[i] bytes of data after the ones before it) to the branch keys of
// channel, in order, in one call to the library, and returns once the
// store has every one: they leave together, and this goroutine waits in
// the library, whose thread reads their answers.
func (s *Store) PublishMany(ctx context.Context, channel string, keys []any, data []byte, messageLens []int) error {
	kv, err := keyValues(keys)
	if err != nil {
		return err
	}
	lens := make([]C.size_t, len(messageLens))
	for i, n := range messageLens {
		lens[i] = C.size_t(n)
	}
	cp, cn := ptr(channel)
	vp, vn, bp, bn := kv.ptrs()
	dp, dn := bptr(data)
	var e *C.TsError
	cancel, free := cancelFor(ctx)
	rc := C.ts_publish_many(s.p, cp, cn, vp, vn, bp, bn, dp, dn, unsafe.SliceData(lens), C.size_t(len(lens)), cancel, &e)
	free()
	takeNow()
	runtime.KeepAlive(s)
	runtime.KeepAlive(data)
	runtime.KeepAlive(lens)
	return result(ctx, rc, e)
}

// Publish publishes data (JSON) to the branch keys of channel, and returns
// once the store has it. A lone publish waits in the library, whose thread
// reads its own answer (the fastest for one at a time); while others are
// under way, the call returns at once (ts_publish_start) and this goroutine
// waits for the answer in Go, so many goroutines publishing at once cost
// no thread each, and their frames leave together.
func (s *Store) Publish(ctx context.Context, channel string, keys []any, data []byte) error {
	kv, err := keyValues(keys)
	if err != nil {
		return err
	}
	defer s.publishing.Add(-1)
	cp, cn := ptr(channel)
	vp, vn, bp, bn := kv.ptrs()
	dp, dn := bptr(data)
	if s.publishing.Add(1) == 1 {
		var e *C.TsError
		cancel, free := cancelFor(ctx)
		rc := C.ts_publish(s.p, cp, cn, vp, vn, bp, bn, dp, dn, cancel, &e)
		free()
		takeNow()
		runtime.KeepAlive(s)
		return result(ctx, rc, e)
	}
	// A publish of a connected store goes pending: its token is registered
	// before the call, so a success comes as the token with
	// TS_TOKEN_PUBLISHED set, with no outcome to take (one cgo call a
	// publish instead of three). An owned store's ends within the call, so
	// its token is registered only once it went pending, and then its
	// outcome is taken (the push may have come before the registration).
	// Which one this store is, the last publish tells. A publish whose ctx
	// ended meanwhile has its outcome taken all the same, and dropped.
	registered := s.pendingLast.Load()
	p := pendingPublishes.Get().(*pendingPublish)
	p.token, p.ctx, p.published = newToken(), ctx, false
	passed := p.token
	if registered {
		registerAt(p.token, p)
		passed |= C.TS_TOKEN_REGISTERED
	}
	rc := C.ts_publish_start(s.p, cp, cn, vp, vn, bp, bn, dp, dn, C.uint64_t(passed), &p.e)
	runtime.KeepAlive(s)
	if rc != C.TS_PENDING {
		if registered {
			Unregister(p.token)
			s.pendingLast.Store(false)
		}
		// Ended within the call: what it read for this process's
		// subscriptions waits for takeNow (when pending, the library
		// signalled it to the drain goroutine).
		takeNow()
		return result(ctx, rc, p.e) // p not reused: a push may still reach it
	}
	if !registered {
		s.pendingLast.Store(true)
		registerAt(p.token, p)
		p.complete(false)
	}
	select {
	case err := <-p.done:
		if p.published {
			p.ctx = nil
			pendingPublishes.Put(p)
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pendingPublish is a publish waiting in Go for its answer, registered
// under its token. One whose success came in its token
// (TS_TOKEN_PUBLISHED) is reused: run unregistered it before completing
// it, so nothing reaches it again; others are left to the collector. With
// its error slot inside, a pipelined publish makes 5 allocations, not 10
// (docs/performance-go.md).
type pendingPublish struct {
	token     uint64
	ctx       context.Context
	done      chan error
	published bool
	// ts_publish_start's error, in the heap object already made.
	e *C.TsError
}

var pendingPublishes = sync.Pool{New: func() any { return &pendingPublish{done: make(chan error, 1)} }}

func (p *pendingPublish) complete(published bool) {
	if published {
		p.published = true
		p.done <- nil
		return
	}
	var e *C.TsError
	rc := C.ts_publish_outcome(C.uint64_t(p.token), &e)
	if rc == C.TS_PENDING {
		return
	}
	Unregister(p.token)
	p.done <- result(p.ctx, rc, e)
}

// Event is what a subscription reads: a message, or word of missed ones.
type Event struct {
	Missed bool
	// A message's.
	Seq    uint64
	Data   []byte
	Branch []string
	// Missed's.
	Known  bool
	Count  uint64
	Reason string
}

// Sub is a subscription, read by one goroutine with Next; Stop may come
// from any goroutine.
type Sub struct {
	mu    sync.Mutex
	p     *C.TsSub
	store *Store
}

// Subscribe subscribes to the branch keys of channel; token is pushed on
// the completion queue when the subscription has something to read.
func (s *Store) Subscribe(ctx context.Context, channel string, keys []any, recursive bool, token uint64) (*Sub, error) {
	kv, err := keyValues(keys)
	if err != nil {
		return nil, err
	}
	var e *C.TsError
	var p *C.TsSub
	cp, cn := ptr(channel)
	vp, vn, bp, bn := kv.ptrs()
	rec := C.uint8_t(0)
	if recursive {
		rec = 1
	}
	cancel, free := cancelFor(ctx)
	rc := C.ts_subscribe(s.p, cp, cn, vp, vn, bp, bn, rec, C.uint64_t(token), cancel, &p, &e)
	free()
	runtime.KeepAlive(s)
	if err := result(ctx, rc, e); err != nil {
		return nil, err
	}
	return &Sub{p: p, store: s}, nil
}

// Next takes up to max events ready now. When fewer than max come back and
// not ended, the subscription's token is pushed once more is ready: wait
// for it before calling again. ended is true once nothing more will come
// (it may come with the last events).
func (s *Sub) Next(max int) (events []Event, ended bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil, true, nil
	}
	var e *C.TsError
	var evs *C.TsEvent
	var n C.size_t
	var end C.uint8_t
	if err := errorOf(C.ts_sub_next(s.p, C.size_t(max), &evs, &n, &end, &e), e); err != nil {
		return nil, false, err
	}
	// A batch's data and branch keys each go in one allocation, not one
	// per message (docs/performance-go.md): each message's part is a
	// full slice expression, so an append to one reallocates instead of
	// writing over the next; a key the previous message also had (its
	// bytes at the same address: one branch) is the same Go string.
	all := unsafe.Slice(evs, int(n))
	dataLen, keyCount := 0, 0
	for i := range all {
		dataLen += int(all[i].data.len)
		keyCount += int(all[i].branch_len)
	}
	data := make([]byte, 0, dataLen)
	keys := make([]string, 0, keyCount)
	var last []C.TsStr
	events = make([]Event, 0, len(all))
	for i := range all {
		ev := &all[i]
		if ev.kind == C.TS_EVENT_MISSED {
			events = append(events, Event{Missed: true, Known: ev.count_known != 0, Count: uint64(ev.count), Reason: goString(ev.reason)})
			continue
		}
		var branch []string
		if ev.branch_len > 0 {
			at := len(keys)
			ks := unsafe.Slice(ev.branch, int(ev.branch_len))
			for j, k := range ks {
				if j < len(last) && last[j] == k {
					keys = append(keys, keys[at-len(last)+j])
				} else {
					keys = append(keys, goString(k))
				}
			}
			branch = keys[at:len(keys):len(keys)]
			last = ks
		}
		var d []byte
		if ev.data.len > 0 {
			at := len(data)
			data = append(data, unsafe.Slice((*byte)(unsafe.Pointer(ev.data.ptr)), int(ev.data.len))...)
			d = data[at:len(data):len(data)]
		}
		events = append(events, Event{Seq: uint64(ev.seq), Data: d, Branch: branch})
	}
	return events, end != 0, nil
}

// Stop stops the subscription; idempotent, any goroutine.
func (s *Sub) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		C.ts_sub_stop(s.p)
	}
}

// Free stops and frees the subscription; Next then reports it ended.
func (s *Sub) Free() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		C.ts_sub_free(s.p)
		s.p = nil
	}
}
