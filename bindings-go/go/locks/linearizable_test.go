package locks_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"tinystore/internal/testkit"
	"tinystore/locks"
)

// The lock as a sequential object, per key: acquire gives a fence and
// needs the key free and the fence above every one before; release needs
// the key held by that fence.
type lockInput struct {
	key     int
	release bool
	fence   locks.Fence // of the release
}

type lockState struct {
	held bool
	last locks.Fence
}

var lockModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[int][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(lockInput).key
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, ops := range byKey {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return lockState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(lockState), input.(lockInput)
		if in.release {
			return s.held && s.last == in.fence, lockState{held: false, last: s.last}
		}
		f := output.(locks.Fence)
		return !s.held && s.last.Less(f), lockState{held: true, last: f}
	},
}

type recorder struct {
	mu    sync.Mutex
	start time.Time
	ops   []porcupine.Operation
}

func (r *recorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *recorder) add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

func TestLock01LinearizableHistoryOfManyGoroutines(t *testing.T) {
	testkit.Each(t, func(t *testing.T, stores *testkit.Stores) {
		l := openLock(t, stores.Open(), "jobs")
		rec := &recorder{start: time.Now()}
		var wg sync.WaitGroup
		for client := range 12 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(client), 7))
				for range 25 {
					key := rng.IntN(3)
					call := rec.now()
					var granted int64
					var fence locks.Fence
					var releaseCall int64
					body := func(_ context.Context, lease *locks.Lease) error {
						granted, fence = rec.now(), lease.Fence
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
						releaseCall = rec.now()
						return nil
					}
					var started bool
					var err error
					if rng.IntN(4) == 0 {
						started, err = l.TryHold(bg, key, body)
					} else {
						err = l.Hold(bg, key, body)
						started = err == nil
					}
					if err != nil {
						t.Error(err)
						return
					}
					if !started {
						continue
					}
					released := rec.now()
					rec.add(porcupine.Operation{ClientId: client, Input: lockInput{key: key}, Call: call, Output: fence, Return: granted})
					rec.add(porcupine.Operation{ClientId: client, Input: lockInput{key: key, release: true, fence: fence}, Call: releaseCall, Return: released})
				}
			})
		}
		wg.Wait()
		if len(rec.ops) < 400 {
			t.Fatalf("only %d operations recorded", len(rec.ops))
		}
		if res := porcupine.CheckOperationsTimeout(lockModel, rec.ops, 20*time.Second); res != porcupine.Ok {
			t.Fatalf("the recorded history of %d operations is not linearizable: %v", len(rec.ops), res)
		}
	})
}

// The check can fail: two overlapping holders, or a fence that does not
// grow, are refused.
func TestLock01LinearizabilityCheckRefusesTwoHoldersAndShrinkingFences(t *testing.T) {
	op := func(call, ret int64, in lockInput, out any) porcupine.Operation {
		return porcupine.Operation{Input: in, Call: call, Output: out, Return: ret}
	}
	f1, f2 := locks.Fence{Hi: 1, Lo: 1}, locks.Fence{Hi: 1, Lo: 2}
	overlap := []porcupine.Operation{
		op(0, 1, lockInput{}, f1), op(5, 6, lockInput{release: true, fence: f1}, nil),
		op(2, 3, lockInput{}, f2), op(7, 8, lockInput{release: true, fence: f2}, nil),
	}
	if porcupine.CheckOperations(lockModel, overlap) {
		t.Fatal("two holders at once passed the check")
	}
	shrinking := []porcupine.Operation{
		op(0, 1, lockInput{}, f2), op(2, 3, lockInput{release: true, fence: f2}, nil),
		op(4, 5, lockInput{}, f1), op(6, 7, lockInput{release: true, fence: f1}, nil),
	}
	if porcupine.CheckOperations(lockModel, shrinking) {
		t.Fatal("a fence smaller than the one before passed the check")
	}
	fine := []porcupine.Operation{
		op(0, 1, lockInput{}, f1), op(2, 3, lockInput{release: true, fence: f1}, nil),
		op(4, 5, lockInput{}, f2), op(6, 7, lockInput{release: true, fence: f2}, nil),
	}
	if !porcupine.CheckOperations(lockModel, fine) {
		t.Fatal("a history of one holder after another failed the check")
	}
}
