package tinystore

import "tinystore.dev/tinystore/internal/native"

// Error is an error of the engine: its stable Code and a Message that says
// what was wrong and what to do. errors.Is(err, ErrTimeout) and the like
// test its code.
type Error = native.Error

// The errors of the engine, one per code, for errors.Is.
var (
	// ErrTimeout: a wait ran out, as hold's wait for a key (nothing ran).
	ErrTimeout = native.ErrTimeout
	// ErrInvalid: a name, key, duration or value out of rule.
	ErrInvalid = native.ErrInvalid
	// ErrLimit: a limit was reached (a message over 1 MiB, 10,000 subscriptions).
	ErrLimit = native.ErrLimit
	// ErrClosed: the store (or the connection to it) is closed.
	ErrClosed = native.ErrClosed
	// ErrLost: a lease ran out or was taken away before its holder let it go.
	ErrLost = native.ErrLost
	// ErrOwned: another process owns the store directory.
	ErrOwned = native.ErrOwned
	// ErrConflict: the call contradicts what the store has (a semaphore
	// opened with another limit, a hold of a key its holder already holds).
	ErrConflict = native.ErrConflict
	// ErrBusy: a SQL database stayed locked by another writer past the busy timeout.
	ErrBusy = native.ErrBusy
	// ErrSQL: a SQL statement or a migration failed.
	ErrSQL = native.ErrSQL
	// ErrAuth: a missing or wrong token.
	ErrAuth = native.ErrAuth
	// ErrIO: the operating system refused a file or socket operation.
	ErrIO = native.ErrIO
	// ErrProtocol: the other side spoke something this side does not understand.
	ErrProtocol = native.ErrProtocol
	// ErrInternal: a bug in tinystore itself.
	ErrInternal = native.ErrInternal
)
