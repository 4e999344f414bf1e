package testkit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"tinystore.dev/tinystore"
)

// helperEnv names the helper a test binary runs as, instead of its tests.
const helperEnv = "TINYSTORE_GO_HELPER"

// Main runs the helper this process was started as (by StartHelper), or
// else the tests: call it from a package's TestMain.
func Main(m *testing.M, helpers map[string]func() int) {
	RunHelper(helpers)
	code := m.Run()
	StopCluster()
	StopNats()
	os.Exit(code)
}

// RunHelper runs the helper this process was started as, if any, and
// exits with its code: one of helpers, or "owner" (Owner). A TestMain that
// has more to do than m.Run calls it first.
func RunHelper(helpers map[string]func() int) {
	name := os.Getenv(helperEnv)
	if h, ok := helpers[name]; ok {
		os.Exit(h())
	}
	if name == "owner" {
		os.Exit(owner())
	}
}

// owner, the helper "owner": owns the store in $TINYSTORE_DIR, says
// "ready", and keeps it until killed.
func owner() int {
	store, err := tinystore.Open(context.Background(), os.Getenv("TINYSTORE_DIR"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer store.Close()
	fmt.Println("ready")
	select {}
}

// StartOwner starts the helper "owner" on dir and waits until it owns the
// store there.
func StartOwner(t testing.TB, dir string) *Child {
	t.Helper()
	c := StartHelper(t, "owner", "TINYSTORE_DIR="+dir)
	c.Line(t, "ready", 30*time.Second)
	return c
}

// Child is another process of the test binary, running a helper.
type Child struct {
	cmd   *exec.Cmd
	lines chan string
	stdin io.WriteCloser
}

// StartHelper runs this test binary again as the helper name, with env
// added; it is killed when the test ends.
func StartHelper(t testing.TB, name string, env ...string) *Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), helperEnv+"="+name), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{cmd: cmd, lines: make(chan string, 64), stdin: in}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// Line waits up to d for the child's next line that starts with prefix
// and gives the rest of it.
func (c *Child) Line(t testing.TB, prefix string, d time.Duration) string {
	t.Helper()
	deadline := time.After(d)
	for {
		if rest, found := strings.CutPrefix(c.next(t, deadline, prefix, d), prefix); found {
			return strings.TrimSpace(rest)
		}
	}
}

// Next gives the child's next line, waiting up to d.
func (c *Child) Next(t testing.TB, d time.Duration) string {
	t.Helper()
	return c.next(t, time.After(d), "a line", d)
}

// Send writes line to the child's standard input (a pipe).
func (c *Child) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// Until gives the rest of each of the child's lines that start with
// prefix, up to its line end, waiting up to d in all.
func (c *Child) Until(t testing.TB, prefix, end string, d time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(d)
	for {
		l := c.next(t, deadline, end, d)
		if l == end {
			return got
		}
		if rest, found := strings.CutPrefix(l, prefix); found {
			got = append(got, rest)
		}
	}
}

// next gives the child's next line; it fails t if the child ends, or if
// deadline (d from the start) comes first, before saying what.
func (c *Child) next(t testing.TB, deadline <-chan time.Time, what string, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("the child ended before saying %q", what)
		}
		return l
	case <-deadline:
		t.Fatalf("the child did not say %q within %v", what, d)
	}
	panic("unreachable")
}

// Signal sends sig to the child (SIGSTOP freezes it, SIGCONT wakes it,
// SIGKILL kills it; a helper may wait for another, such as SIGUSR1). After
// SIGSTOP it returns once every thread of the child is stopped, and after
// SIGKILL once the child is gone: a signal is delivered after kill(2)
// returns, and a thread already running could still answer a request.
func (c *Child) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	switch sig {
	case syscall.SIGKILL:
		_ = c.cmd.Wait()
	case syscall.SIGSTOP:
		Eventually(t, 5*time.Second, "every thread of the child stopped", func() bool { return stopped(c.cmd.Process.Pid) })
	}
}

// stopped tells whether every thread of process pid is stopped: state T
// (or t) in /proc/<pid>/task/<tid>/stat.
func stopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// "tid (comm) S ...": the state follows the last ')', as comm may hold one.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}
