// Command tinystore is the tinystore command of the Go module: the engine's
// own command, run in this process through the C ABI. It serves a store,
// shows what it holds, publishes and listens, and runs a command under a
// lease:
//
//	tinystore serve data
//	tinystore status data
//	tinystore channels publish data chat-events '{"kind":"message","id":7}' --under 7
//	tinystore lock data hold summaries chat-7 -- ./summarize 7
//	tinystore --version
//
// `tinystore --help` lists every command. Install it with
//
//	go install tinystore.dev/tinystore/cmd/tinystore@latest
package main

import (
	"os"

	"tinystore.dev/tinystore/internal/native"
)

func main() {
	os.Exit(native.CLI(append([]string{"tinystore"}, os.Args[1:]...)))
}
