// Generated from the core by core/tests/generated.rs: do not edit.
// `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` rewrites it.

package native

import "errors"

// The sentinels of the engine's error codes, one per code of tinystore::ErrorKind.
var (
	// ErrTimeout is code "timeout": a wait ran out: hold found no free key within its wait, and nothing ran.
	ErrTimeout = errors.New("tinystore: timeout")

	// ErrInvalid is code "invalid": the caller passed something out of rule: a bad name, key, duration or value.
	ErrInvalid = errors.New("tinystore: invalid")

	// ErrLimit is code "limit": a limit was reached: message size, subscriptions, pending output.
	ErrLimit = errors.New("tinystore: limit")

	// ErrClosed is code "closed": the store was closed by this program (close was called): open it again to go on.
	ErrClosed = errors.New("tinystore: closed")

	// ErrLost is code "lost": a lease ran out or was taken away before its holder let it go.
	ErrLost = errors.New("tinystore: lost")

	// ErrOwned is code "owned": another process owns the store directory.
	ErrOwned = errors.New("tinystore: owned")

	// ErrConflict is code "conflict": the request contradicts what the store already has: a semaphore opened with another limit, a key the same holder already holds.
	ErrConflict = errors.New("tinystore: conflict")

	// ErrBusy is code "busy": a SQL database stayed locked by another writer past the busy timeout.
	ErrBusy = errors.New("tinystore: busy")

	// ErrSQL is code "sql": a SQL statement failed, or a migration could not be applied.
	ErrSQL = errors.New("tinystore: sql")

	// ErrAuth is code "auth": a missing or wrong token, or a token without the right.
	ErrAuth = errors.New("tinystore: auth")

	// ErrIO is code "io": the operating system refused a file or socket operation.
	ErrIO = errors.New("tinystore: io")

	// ErrProtocol is code "protocol": the peer spoke something this side does not understand.
	ErrProtocol = errors.New("tinystore: protocol")

	// ErrInternal is code "internal": a bug in tinystore itself.
	ErrInternal = errors.New("tinystore: internal")

	// ErrUnavailable is code "unavailable": the store could not be reached: its connection stayed down past the request timeout (the message says since when), or was cut before the store answered a call already sent (a publish may then have been delivered).
	ErrUnavailable = errors.New("tinystore: unavailable")
)

// byCode gives the sentinel of each code.
var byCode = map[string]error{
	"timeout":     ErrTimeout,
	"invalid":     ErrInvalid,
	"limit":       ErrLimit,
	"closed":      ErrClosed,
	"lost":        ErrLost,
	"owned":       ErrOwned,
	"conflict":    ErrConflict,
	"busy":        ErrBusy,
	"sql":         ErrSQL,
	"auth":        ErrAuth,
	"io":          ErrIO,
	"protocol":    ErrProtocol,
	"internal":    ErrInternal,
	"unavailable": ErrUnavailable,
}
