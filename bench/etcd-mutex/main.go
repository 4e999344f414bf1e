// etcd's own concurrency.Mutex (Go clientv3) doing what bench/src/bin/cluster.rs
// does with tinystore: hold+release of one key per second, sequential and
// with 4 processes contending for it (this program again, `worker
// ENDPOINTS`, one client and session each), for the same cluster
// (endpoints in argv[1]).
//
// Run: go run . 127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379 [SECONDS]
package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// sequential holds and releases from one session for d: holds per second.
func sequential(eps []string, d time.Duration) float64 {
	var stop atomic.Bool
	var n atomic.Int64
	t := time.Now()
	time.AfterFunc(d, func() { stop.Store(true) })
	loop(eps, &stop, &n)
	return float64(n.Load()) / time.Since(t).Seconds()
}

// worker, a contending process: says "ready" once its session is made, at
// the line "go" holds and releases until the line "stop", then prints how
// many holds it made.
func worker(eps []string) {
	c := client(eps)
	defer c.Close()
	s, err := concurrency.NewSession(c, concurrency.WithTTL(30))
	must(err)
	defer s.Close()
	m := concurrency.NewMutex(s, "/bench-go/k")
	ctx := context.Background()
	must(m.Lock(ctx))
	must(m.Unlock(ctx))
	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	if !in.Scan() || in.Text() != "go" {
		panic("a worker was not told to go")
	}
	var stop atomic.Bool
	go func() { in.Scan(); stop.Store(true) }()
	n := 0
	for !stop.Load() {
		must(m.Lock(ctx))
		must(m.Unlock(ctx))
		n++
	}
	fmt.Println(n)
}

// contended runs procs worker processes for d, started together once each
// has its session: holds per second, all summed.
func contended(endpoints string, procs int, d time.Duration) float64 {
	me, err := os.Executable()
	must(err)
	type kid struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Scanner
	}
	var kids []kid
	for range procs {
		cmd := exec.Command(me, "worker", endpoints)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		must(err)
		out, err := cmd.StdoutPipe()
		must(err)
		must(cmd.Start())
		k := kid{cmd, in, bufio.NewScanner(out)}
		if !k.out.Scan() || k.out.Text() != "ready" {
			panic("a worker did not start")
		}
		kids = append(kids, k)
	}
	for _, k := range kids {
		fmt.Fprintln(k.in, "go")
	}
	t := time.Now()
	time.Sleep(d)
	for _, k := range kids {
		fmt.Fprintln(k.in, "stop")
	}
	elapsed := time.Since(t).Seconds()
	total := 0
	for _, k := range kids {
		if !k.out.Scan() {
			panic("a worker gave no count")
		}
		n, err := strconv.Atoi(k.out.Text())
		must(err)
		total += n
		must(k.cmd.Wait())
	}
	return float64(total) / elapsed
}

func main() {
	if len(os.Args) > 2 && os.Args[1] == "worker" {
		worker(strings.Split(os.Args[2], ","))
		return
	}
	eps := strings.Split(os.Args[1], ",")
	d := 5 * time.Second // each row; argv[2] in seconds, for a short check
	if len(os.Args) > 2 {
		secs, err := strconv.Atoi(os.Args[2])
		must(err)
		d = time.Duration(secs) * time.Second
	}
	fmt.Printf("etcd concurrency.Mutex, sequential hold+release: %.0f/s\n", sequential(eps, d))
	fmt.Printf("etcd concurrency.Mutex, 4 processes contending for one key: %.0f/s\n", contended(os.Args[1], 4, d))
}
