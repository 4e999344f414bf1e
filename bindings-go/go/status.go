package tinystore

import (
	"context"
	"encoding/json"

	"tinystore.dev/tinystore/internal/native"
)

// The types Status, BranchStatus, KeyStatus, HolderStatus and
// ConnectionStatus are generated from the core in status_types.go.

// Status asks the store what it holds now: subscriptions and branches,
// held keys with their fences and waiters. A connected store asks its
// owner, until ctx ends.
//
// Errors: [ErrClosed] (this store was closed), [ErrIO] or [ErrTimeout]
// (the owner could not be asked), ctx.Err().
func (s *Store) Status(ctx context.Context) (*Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := s.n.Status(ctx)
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, native.Invalid("the store's status did not decode: %v", err)
	}
	return &st, nil
}
