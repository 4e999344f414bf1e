// Package testkit makes the stores the tests of this module run against.
// Every contract test runs once per kind in Kinds: owned now; a connected
// store (a second handle reaching the owner through its socket) is one more
// entry once the engine can connect.
package testkit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"tinystore"
)

// Kind is a way to get a store for a test.
type Kind struct {
	Name string
	// Open gives a store in dir (a fresh one when dir is ""), closed when
	// the test ends.
	Open func(t testing.TB, dir string) *tinystore.Store
}

// Kinds are the ways the contract tests reach a store.
func Kinds() []Kind {
	return []Kind{
		{Name: "owned", Open: Owned},
	}
}

// Owned opens a store this process owns, in dir or a fresh directory.
func Owned(t testing.TB, dir string) *tinystore.Store {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	s, err := tinystore.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("open store %s: %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Each runs f as a subtest once per kind of store.
func Each(t *testing.T, f func(t *testing.T, open func(t testing.TB, dir string) *tinystore.Store)) {
	for _, k := range Kinds() {
		t.Run(k.Name, func(t *testing.T) { f(t, k.Open) })
	}
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
