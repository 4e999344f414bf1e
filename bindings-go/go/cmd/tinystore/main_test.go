package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The test binary runs main when this is set, as the command would.
const asCommand = "TINYSTORE_CMD_TEST"

func TestMain(m *testing.M) {
	if os.Getenv(asCommand) == "1" {
		os.Args = append([]string{"tinystore"}, strings.Fields(os.Getenv("TINYSTORE_CMD_ARGS"))...)
		main()
	}
	os.Exit(m.Run())
}

func run(t *testing.T, args string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), asCommand+"=1", "TINYSTORE_CMD_ARGS="+args)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if e, ok := err.(*exec.ExitError); ok {
		code = e.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func TestVersionSaysTheVersionTheWireProtocolAndTheBuild(t *testing.T) {
	out, _, code := run(t, "--version")
	if code != 0 || !regexp.MustCompile(`^tinystore \d+\.\d+\.\d+ \(wire protocol \d+, (debug|release) build\)\n$`).MatchString(out) {
		t.Fatalf("--version: exit %d, %q", code, out)
	}
}

func TestTheCoresExitStatusIsTheCommands(t *testing.T) {
	_, errOut, code := run(t, "status "+t.TempDir())
	if code != 1 || !strings.Contains(errOut, "start one with `tinystore serve") {
		t.Fatalf("status of a store nobody serves: exit %d, %q", code, errOut)
	}
	if _, _, code := run(t, "no-such-command"); code != 2 {
		t.Fatalf("a usage error: exit %d, want 2", code)
	}
}
