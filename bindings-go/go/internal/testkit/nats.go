package testkit

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Nats is three nats-server nodes with JetStream (Debian's nats-server),
// clustered on free loopback ports, each node's config, log (n0.log, ...)
// and JetStream directory in a temporary directory (the streams are memory
// streams). As core/tests/nats/mod.rs: max_payload 2MB (a message of 1 MiB
// and its headers is over the default 1 MiB), and a memory store large
// enough for the many streams of a test binary (each reserves its
// max_bytes, 64 MiB, on every node; nothing is used until written).
type Nats struct {
	dir     string
	clients []int
	routes  []int
	https   []int
	procs   []*exec.Cmd // nil: killed
	mu      sync.Mutex
}

var (
	natsOnce sync.Once
	theNats  *Nats
	natsErr  error
)

// sharedNats starts the package's NATS cluster on first use; Main stops it.
func sharedNats(t testing.TB) *Nats {
	t.Helper()
	natsOnce.Do(func() { theNats, natsErr = startNats() })
	if natsErr != nil {
		t.Fatal(natsErr)
	}
	return theNats
}

// StartNats starts a NATS cluster of the test's own, for a test that kills
// a node; every node is killed by PID when the test ends.
func StartNats(t testing.TB) *Nats {
	t.Helper()
	n, err := startNats()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

func startNats() (*Nats, error) {
	if _, err := exec.LookPath("nats-server"); err != nil {
		return nil, fmt.Errorf("nats-server is missing: install Debian's nats-server (`apt-get install nats-server`; `make test` does)")
	}
	dir, err := os.MkdirTemp("", "ts-go-nats-")
	if err != nil {
		return nil, err
	}
	n := &Nats{dir: dir, procs: make([]*exec.Cmd, 3)}
	for range 3 {
		n.clients = append(n.clients, freePort())
		n.routes = append(n.routes, freePort())
		n.https = append(n.https, freePort())
	}
	for i := range 3 {
		if err := n.spawn(i); err != nil {
			n.stop()
			return nil, err
		}
	}
	end := time.Now().Add(30 * time.Second)
	for i := range 3 {
		for !n.healthy(i) {
			if time.Now().After(end) {
				logs := logTails(dir, []string{"n0.log", "n1.log", "n2.log"}, 5)
				n.stop()
				return nil, fmt.Errorf("nats-server did not become healthy within 30s; %s", logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return n, nil
}

func (n *Nats) spawn(i int) error {
	var routes []string
	for _, r := range n.routes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", r))
	}
	conf := filepath.Join(n.dir, fmt.Sprintf("n%d.conf", i))
	text := fmt.Sprintf("server_name: n%d\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\nmax_payload: 2MB\n"+
		"jetstream { store_dir: %q, max_memory_store: 64GB, max_file_store: 16MB }\n"+
		"cluster { name: tinystore, listen: 127.0.0.1:%d, routes: [%s] }\n",
		i, n.clients[i], n.https[i], filepath.Join(n.dir, fmt.Sprintf("n%d", i)), n.routes[i], strings.Join(routes, ", "))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(n.dir, fmt.Sprintf("n%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command("nats-server", "-c", conf)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server (Debian's nats-server; `make test` installs it): %w", err)
	}
	n.mu.Lock()
	n.procs[i] = cmd
	n.mu.Unlock()
	return nil
}

// healthy: node i's /healthz is ok (JetStream has a meta leader).
func (n *Nats) healthy(i int) bool {
	c := http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	r, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.https[i]))
	if err != nil {
		return false
	}
	defer r.Body.Close()
	return r.StatusCode == http.StatusOK
}

// URLs is nats://127.0.0.1:PORT,... of the nodes which (every node if none).
func (n *Nats) URLs(which ...int) string {
	if len(which) == 0 {
		which = []int{0, 1, 2}
	}
	var urls []string
	for _, i := range which {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", n.clients[i]))
	}
	return strings.Join(urls, ",")
}

// ClusterAddress is a cluster store's address under prefix: its locks on
// the package's etcd cluster, its channels on the nodes which of n.
func ClusterAddress(t testing.TB, prefix string, n *Nats, which ...int) string {
	t.Helper()
	return sharedCluster(t).Address(prefix) + "?nats=" + n.URLs(which...)
}

// Kill is kill -9 of node i.
func (n *Nats) Kill(i int) {
	n.mu.Lock()
	p := n.procs[i]
	n.procs[i] = nil
	n.mu.Unlock()
	if p != nil {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

func (n *Nats) stop() {
	for i := range n.procs {
		n.Kill(i)
	}
	_ = os.RemoveAll(n.dir)
}

// StopNats stops the package's NATS cluster, if a test started one.
func StopNats() {
	if theNats != nil {
		theNats.stop()
	}
}
