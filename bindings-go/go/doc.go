// Package tinystore opens a tinystore store: channels (messages to whoever
// listens now, in branches, with an exact count of what a slow reader
// missed) and locks (one holder of a key at a time, with leases, maxHold,
// semaphores and 128-bit fences), run by the same Rust engine in this
// process.
//
// The engine's calls live in the packages [tinystore.dev/tinystore/channels],
// [tinystore.dev/tinystore/locks] and [tinystore.dev/tinystore/sqldb]; this package opens the store:
//
//	store, err := tinystore.Open(ctx, "data")
//	if err != nil {
//		return err
//	}
//	defer store.Close()
//	events, err := channels.OpenChannel[ChatEvent](store, "chat-events")
//	summaries, err := locks.OpenLock(store, "summaries", locks.TTL(30*time.Second))
//	db, err := sqldb.Open(ctx, store, "chat", sqldb.Migrations("migrations"))
//
// # Using the module
//
// The module path is tinystore.dev/tinystore. `make dist` in the tinystore
// repository packages it, with the release static library for linux/amd64
// and its header inside, as a Go module proxy serves it (dist/goproxy); cgo
// and a C compiler are needed, nothing else:
//
//	GOPROXY=file:///path/to/tinystore/dist/goproxy GOSUMDB=off go get tinystore.dev/tinystore@v0.1.0
//
// In the repository itself the module links the library cargo builds in
// target/debug (`cargo build -p tinystore-go`), or with the build tag
// tinystore_release the one in target/release.
//
// [Connect] takes the token, the CA file and the request timeout as
// options ([Token], [CAFile], [RequestTimeout]), the environment variables
// TINYSTORE_TOKEN and TINYSTORE_CA being the defaults. The command
// tinystore.dev/tinystore/cmd/tinystore is the engine's `tinystore` command.
//
// # Errors
//
// Every error the engine gives is an [*Error] with a stable Code; test it
// with errors.Is against [ErrTimeout], [ErrInvalid], [ErrLimit],
// [ErrClosed], [ErrLost], [ErrOwned], [ErrConflict], [ErrBusy], [ErrSQL],
// [ErrAuth], [ErrIO], [ErrProtocol], [ErrInternal] or [ErrUnavailable]. A call whose ctx ends
// while it waits returns ctx.Err().
package tinystore
