// Generated from the core by core/tests/generated.rs: do not edit.
// `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` rewrites it.

package tinystore

import "tinystore.dev/tinystore/internal/native"

// The errors of the engine, one per code, for errors.Is.
var (
	// ErrTimeout: a wait ran out: hold found no free key within its wait, and nothing ran.
	ErrTimeout = native.ErrTimeout

	// ErrInvalid: the caller passed something out of rule: a bad name, key, duration or value.
	ErrInvalid = native.ErrInvalid

	// ErrLimit: a limit was reached: message size, subscriptions, pending output.
	ErrLimit = native.ErrLimit

	// ErrClosed: the store was closed by this program (close was called): open it again to go on.
	ErrClosed = native.ErrClosed

	// ErrLost: a lease ran out or was taken away before its holder let it go.
	ErrLost = native.ErrLost

	// ErrOwned: another process owns the store directory.
	ErrOwned = native.ErrOwned

	// ErrConflict: the request contradicts what the store already has: a semaphore opened with another limit, a key the same holder already holds.
	ErrConflict = native.ErrConflict

	// ErrBusy: a SQL database stayed locked by another writer past the busy timeout.
	ErrBusy = native.ErrBusy

	// ErrSQL: a SQL statement failed, or a migration could not be applied.
	ErrSQL = native.ErrSQL

	// ErrAuth: a missing or wrong token, or a token without the right.
	ErrAuth = native.ErrAuth

	// ErrIO: the operating system refused a file or socket operation.
	ErrIO = native.ErrIO

	// ErrProtocol: the peer spoke something this side does not understand.
	ErrProtocol = native.ErrProtocol

	// ErrInternal: a bug in tinystore itself.
	ErrInternal = native.ErrInternal

	// ErrUnavailable: the store could not be reached: its connection stayed down past the request timeout (the message says since when), or was cut before the store answered a call already sent (a publish may then have been delivered).
	ErrUnavailable = native.ErrUnavailable
)
