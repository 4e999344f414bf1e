package testkit

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

var (
	portMu   sync.Mutex
	portBand [2]int // [start, end) of the ports freePort tries
	portNext int
)

// freePort gives a loopback port nobody listens on now, below (else above)
// the kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range). A
// port the OS picks on a listen to port 0 lies in that range, where any
// outgoing connection (etcdctl's health checks, the members' own) may take
// it as its local port before the server binds it, and the server then
// exits with "address already in use". Successive calls give different ports.
func freePort() int {
	portMu.Lock()
	defer portMu.Unlock()
	if portBand[1] == 0 {
		lo, hi := 32768, 60999
		if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
			fmt.Sscan(string(b), &lo, &hi)
		}
		if lo >= 3024 {
			portBand = [2]int{max(2024, lo-20000), lo}
		} else {
			portBand = [2]int{hi + 1, 65536}
		}
		// each process starts at its own place in the band, so test
		// processes running at once rarely try the same ports
		portNext = int((uint64(os.Getpid())*2654435761 + uint64(time.Now().UnixNano())) % 1_000_000)
	}
	span := portBand[1] - portBand[0]
	if span < 1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	for range span {
		port := portBand[0] + portNext%span
		portNext++
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			l.Close()
			return port
		}
	}
	panic(fmt.Sprintf("no free loopback port in %d..%d", portBand[0], portBand[1]))
}

// logTails gives the last n lines of each log in dir, for an error that
// says why a server did not come up (the directory is removed with it).
func logTails(dir string, names []string, n int) string {
	var out []string
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(dir, name))
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if err != nil {
			lines = []string{err.Error()}
		}
		out = append(out, name+":\n"+strings.Join(lines[max(0, len(lines)-n):], "\n"))
	}
	return strings.Join(out, "\n")
}
