package tinystore

import (
	"context"

	"tinystore/internal/native"
)

// Store is an open store: owned by this process ([Open]) or reached in
// another process ([Connect]); both work the same. Safe for concurrent use.
type Store struct {
	n *native.Store
}

func init() {
	native.StoreOf = func(s any) *native.Store {
		if st, ok := s.(*Store); ok && st != nil {
			return st.n
		}
		return nil
	}
}

// Open opens the store directory dir (creating it if needed). If no live
// process owns it, this one does: channels and locks live in its memory,
// the epoch of its fences in dir/kv.db, SQL databases in dir/<name>.db,
// and it serves the store to other processes on dir/tinystore.sock. If
// another process owns it, Open connects to that one instead (STORE-01).
//
// Errors: [ErrIO] (the directory cannot be made, locked or reached),
// [ErrSQL] (dir/kv.db is unreadable), [ErrOwned] (the owner cannot be
// reached); ctx.Err() when ctx is done before.
func Open(ctx context.Context, dir string) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n, err := native.OpenStore(dir)
	if err != nil {
		return nil, err
	}
	return &Store{n: n}, nil
}

// Connect reaches a store owned by another process at address:
// "unix:PATH" (an owner serves "unix:<dir>/tinystore.sock") or
// "tcp:HOST:PORT" (with the token in the environment variable
// TINYSTORE_TOKEN). The store then works as an owned one; the engine
// reconnects by itself when the connection drops, and renews leases.
//
// Errors: [ErrInvalid] (the address), [ErrIO] (nobody listens), [ErrAuth].
func Connect(ctx context.Context, address string) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n, err := native.ConnectStore(address)
	if err != nil {
		return nil, err
	}
	return &Store{n: n}, nil
}

// Serve serves the store on one more address for other processes to
// [Connect] to: "tcp:HOST:PORT" (needs dir/tokens; see `tinystore token
// new`) or "unix:PATH". Only an owner serves.
//
// Errors: [ErrInvalid] (the address, or a connected store), [ErrIO], [ErrAuth].
func (s *Store) Serve(ctx context.Context, address string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.n.Serve(ctx, address)
}

// Close closes the store: subscriptions end, held keys are let go (their
// holders' contexts are cancelled and their Hold returns [ErrLost]),
// waiters get [ErrClosed], and the directory is free for another owner.
// Every later call on the store or anything opened from it fails with
// [ErrClosed]. Idempotent; it always returns nil.
func (s *Store) Close() error {
	s.n.Close()
	return nil
}

// Epoch is this open's epoch: the high 64 bits of every fence it gives,
// larger than the epoch of every earlier open of the directory.
func (s *Store) Epoch() uint64 { return s.n.Epoch() }
