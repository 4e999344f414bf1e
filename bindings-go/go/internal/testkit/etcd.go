package testkit

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster is three etcd members (Debian's etcd-server) on free loopback
// ports, their data and logs (m0.log, ...) in a temporary directory, with
// fast elections (heartbeat 50 ms, election 500 ms: a leader's death is
// noticed within a second, and etcd's smallest lease ttl is 1 s).
type Cluster struct {
	dir     string
	clients []int // each member's client port
	peers   []int
	procs   []*exec.Cmd // nil: killed
	mu      sync.Mutex
}

var (
	clusterOnce sync.Once
	theCluster  *Cluster
	clusterErr  error
)

// sharedCluster starts the package's cluster on first use; Main stops it.
func sharedCluster(t testing.TB) *Cluster {
	t.Helper()
	clusterOnce.Do(func() { theCluster, clusterErr = startEtcd() })
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
	return theCluster
}

// StartCluster starts a cluster of the test's own, for a test that kills
// members; it is stopped (every member killed by PID) when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := startEtcd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop)
	return c
}

func startEtcd() (*Cluster, error) {
	dir, err := os.MkdirTemp("", "ts-go-etcd-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir}
	for range 3 {
		c.clients = append(c.clients, freePort())
		c.peers = append(c.peers, freePort())
	}
	c.procs = make([]*exec.Cmd, 3)
	for i := range 3 {
		if err := c.spawn(i); err != nil {
			c.stop()
			return nil, err
		}
	}
	end := time.Now().Add(20 * time.Second)
	for !c.healthy() {
		if time.Now().After(end) {
			logs := logTails(dir, []string{"m0.log", "m1.log", "m2.log"}, 3)
			c.stop()
			return nil, fmt.Errorf("etcd did not become healthy within 20s; %s", logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c, nil
}

func (c *Cluster) spawn(i int) error {
	var initial []string
	for j, p := range c.peers {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", j, p))
	}
	log, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("m%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	client, peer := fmt.Sprintf("http://127.0.0.1:%d", c.clients[i]), fmt.Sprintf("http://127.0.0.1:%d", c.peers[i])
	cmd := exec.Command("etcd", "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(c.dir, fmt.Sprintf("m%d", i)),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
		"--heartbeat-interval", "50", "--election-timeout", "500")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd (Debian's etcd-server; `make test` installs it): %w", err)
	}
	c.mu.Lock()
	c.procs[i] = cmd
	c.mu.Unlock()
	return nil
}

// endpoints lists the client endpoints of the members that run.
func (c *Cluster) endpoints(up bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var eps []string
	for i, p := range c.clients {
		if !up || c.procs[i] != nil {
			eps = append(eps, fmt.Sprintf("127.0.0.1:%d", p))
		}
	}
	return eps
}

func (c *Cluster) etcdctl(args ...string) ([]byte, error) {
	cmd := exec.Command("etcdctl", append([]string{"--endpoints=" + strings.Join(c.endpoints(true), ",")}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	return cmd.Output()
}

// Etcdctl runs etcdctl with args against the members that are up, and
// fails the test, with etcdctl's output, if it fails.
func (c *Cluster) Etcdctl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("etcdctl", append([]string{"--endpoints=" + strings.Join(c.endpoints(true), ",")}, args...)...)
	cmd.Env = append(os.Environ(), "ETCDCTL_API=3")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("etcdctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *Cluster) healthy() bool {
	_, err := c.etcdctl("endpoint", "health", "--command-timeout=2s")
	return err == nil
}

// Address is a store address on this cluster, under the key prefix prefix.
func (c *Cluster) Address(prefix string) string {
	return "etcd://" + strings.Join(c.endpoints(false), ",") + "/" + prefix
}

// Leader gives the index of the member that leads now.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	out, err := c.etcdctl("endpoint", "status", "-w", "json")
	if err != nil {
		t.Fatalf("etcdctl endpoint status: %v", err)
	}
	var status []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			}
			Leader uint64
		}
	}
	if err := json.Unmarshal(out, &status); err != nil {
		t.Fatalf("etcdctl endpoint status: %v in %s", err, out)
	}
	for _, s := range status {
		if s.Status.Leader == s.Status.Header.MemberID {
			for i, p := range c.clients {
				if strings.HasSuffix(s.Endpoint, fmt.Sprintf(":%d", p)) {
					return i
				}
			}
		}
	}
	t.Fatalf("no member leads: %s", out)
	return -1
}

// Kill is kill -9 of member i; its data stays.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p != nil {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

// stop kills every member by PID and removes the data.
func (c *Cluster) stop() {
	for i := range c.procs {
		c.Kill(i)
	}
	_ = os.RemoveAll(c.dir)
}

// StopCluster stops the package's etcd cluster, if a test started one.
func StopCluster() {
	if theCluster != nil {
		theCluster.stop()
	}
}
