// Package testkit makes the stores the tests of this module run against.
// Every contract test runs once per kind in Kinds: owned, and connected (a
// second handle reaching the owner through its socket); the lock, fence
// and channel contracts run on a cluster store too (EachWithCluster), on a
// real 3-member etcd cluster and a real 3-node NATS cluster with JetStream
// the first such test starts (Debian's etcd and nats-server).
package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"tinystore.dev/tinystore"
)

// Kinds are the ways the contract tests reach a store: "owned" opens the
// directory in this process; "connected" opens the owner here too, then
// reaches it through its socket (unix:<dir>/tinystore.sock).
var Kinds = []string{"owned", "connected"}

// Stores opens the stores of one test, of one kind, in one directory (a
// cluster store: under one key prefix, its SQL databases in the directory).
type Stores struct {
	Kind   string
	Dir    string
	t      testing.TB
	opened []*tinystore.Store
	prefix string
}

// Open gives a store of the kind, in the test's directory.
func (s *Stores) Open() *tinystore.Store {
	s.t.Helper()
	ctx := context.Background()
	if s.Kind == "cluster" {
		os.Setenv("TINYSTORE_CLUSTER_SQL_DIR", s.Dir)
		store, err := tinystore.Connect(ctx, s.Address(), tinystore.RequestTimeout(ClusterTimeout))
		if err != nil {
			s.t.Fatalf("connect to the cluster store: %v", err)
		}
		s.opened = append(s.opened, store)
		return store
	}
	owner, err := tinystore.Open(ctx, s.Dir)
	if err != nil {
		s.t.Fatalf("open store %s: %v", s.Dir, err)
	}
	s.opened = append(s.opened, owner)
	if s.Kind == "owned" {
		return owner
	}
	store, err := tinystore.Connect(ctx, "unix:"+filepath.Join(s.Dir, "tinystore.sock"))
	if err != nil {
		s.t.Fatalf("connect to %s: %v", s.Dir, err)
	}
	s.opened = append(s.opened, store)
	return store
}

// Address is, for a cluster kind, the address of its store:
// etcd://.../PREFIX?nats=nats://... on the package's etcd and NATS
// clusters (started on first use), under the test's own prefix, so its
// streams are its own.
func (s *Stores) Address() string {
	s.t.Helper()
	c, n := sharedCluster(s.t), sharedNats(s.t)
	if s.prefix == "" {
		s.prefix = fmt.Sprintf("go%d-%d", os.Getpid(), prefixes.Add(1))
	}
	return c.Address(s.prefix) + "?nats=" + n.URLs()
}

// ClusterTimeout is the request timeout of the tests' cluster stores: on 2
// cores beside 6 servers a stream's first leader election was seen to take
// longer than the default 10 s.
const ClusterTimeout = 30 * time.Second

// Close closes every store Open gave, owners last: the store restarts at
// the next Open.
func (s *Stores) Close() {
	for i := len(s.opened) - 1; i >= 0; i-- {
		s.opened[i].Close()
	}
	s.opened = nil
}

// NewStores gives the stores of one test (or benchmark) of kind, in a
// fresh directory; they close when it ends.
func NewStores(t testing.TB, kind string) *Stores {
	s := &Stores{Kind: kind, Dir: Dir(t), t: t}
	t.Cleanup(s.Close)
	return s
}

// Each runs f as a subtest once per kind of store, each in a fresh directory.
func Each(t *testing.T, f func(t *testing.T, stores *Stores)) {
	for _, kind := range Kinds {
		t.Run(kind, func(t *testing.T) { f(t, NewStores(t, kind)) })
	}
}

// EachWithCluster is Each, and once more on a cluster store
// (etcd://...?nats=...: its locks on etcd, its channels on NATS JetStream).
func EachWithCluster(t *testing.T, f func(t *testing.T, stores *Stores)) {
	Each(t, f)
	t.Run("cluster", func(t *testing.T) { f(t, NewStores(t, "cluster")) })
}

var prefixes atomic.Int64

// Owned opens a store this process owns, in a fresh directory.
func Owned(t testing.TB) *tinystore.Store {
	t.Helper()
	store, _ := OwnedIn(t)
	return store
}

// OwnedIn is Owned, and the store's directory.
func OwnedIn(t testing.TB) (*tinystore.Store, string) {
	t.Helper()
	s := NewStores(t, "owned")
	return s.Open(), s.Dir
}

// Dir is a fresh directory, removed when the test ends. Short, so that
// <dir>/tinystore.sock fits a Unix socket's path (108 bytes).
func Dir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ts-go-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	return d
}

// Eventually polls cond every 5 ms for up to d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Receive waits up to d for a value on ch.
func Receive[T any](t testing.TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("not within %v: %s", d, what)
		panic("unreachable")
	}
}

// Root is the repository's root folder.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// FenceVector is one entry of tests/vectors/fences.json.
type FenceVector struct {
	Epoch, Count, Digits, Padded, Hi, Lo string
}

// FenceVectors reads the shared fence vectors every language checks.
func FenceVectors(t testing.TB) []FenceVector {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(Root(), "tests", "vectors", "fences.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Vectors []FenceVector }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) == 0 {
		t.Fatal("tests/vectors/fences.json has no vectors")
	}
	return doc.Vectors
}
