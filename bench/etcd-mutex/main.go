// etcd's own concurrency.Mutex (Go clientv3) doing what bench/src/bin/cluster.rs
// does with tinystore: hold+release of one key per second, sequential and
// with 4 contending sessions, for the same cluster (endpoints in argv[1]).
//
// Run: go run . 127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

func must(err error) {
	if err != nil {
		panic(err)
	}
}

func client(eps []string) *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second})
	must(err)
	return c
}

// loop holds and releases "/bench-go/k" until stop, counting into n.
func loop(eps []string, stop *atomic.Bool, n *atomic.Int64) {
	c := client(eps)
	defer c.Close()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	must(err)
	defer s.Close()
	m := concurrency.NewMutex(s, "/bench-go/k")
	ctx := context.Background()
	for !stop.Load() {
		must(m.Lock(ctx))
		must(m.Unlock(ctx))
		n.Add(1)
	}
}

func run(eps []string, workers int, d time.Duration) float64 {
	var stop atomic.Bool
	var n atomic.Int64
	var wg sync.WaitGroup
	t := time.Now()
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); loop(eps, &stop, &n) }()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return float64(n.Load()) / time.Since(t).Seconds()
}

func main() {
	eps := strings.Split(os.Args[1], ",")
	fmt.Printf("etcd concurrency.Mutex, sequential hold+release: %.0f/s\n", run(eps, 1, 5*time.Second))
	fmt.Printf("etcd concurrency.Mutex, 4 sessions contending for one key: %.0f/s\n", run(eps, 4, 5*time.Second))
}
