// Package tinystore opens a tinystore store: channels (messages to whoever
// listens now, in branches, with an exact count of what a slow reader
// missed) and locks (one holder of a key at a time, with leases, maxHold,
// semaphores and 128-bit fences), run by the same Rust engine in this
// process.
//
// The engine's calls live in the packages [tinystore/channels],
// [tinystore/locks] and [tinystore/sqldb]; this package opens the store:
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
// The module path is tinystore, in the folder bindings-go/go of the
// tinystore repository. It links the engine's static library, which
// `cargo build -p tinystore-go` writes to target/debug of that repository
// (cgo and a C compiler are needed); with the build tag tinystore_release
// it links target/release instead (`cargo build --release -p
// tinystore-go`). From another module:
//
//	require tinystore v0.0.0
//	replace tinystore => /path/to/tinystore/bindings-go/go
//
// # Errors
//
// Every error the engine gives is an [*Error] with a stable Code; test it
// with errors.Is against [ErrTimeout], [ErrInvalid], [ErrLimit],
// [ErrClosed], [ErrLost], [ErrOwned], [ErrConflict], [ErrBusy], [ErrSQL],
// [ErrAuth], [ErrIO], [ErrProtocol] or [ErrInternal]. A call whose ctx ends
// while it waits returns ctx.Err().
package tinystore
