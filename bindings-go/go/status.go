package tinystore

import (
	"context"
	"encoding/json"

	"tinystore.dev/tinystore/internal/native"
)

// Status is what a store holds now, as its owner sees it.
type Status struct {
	// Dir is the store directory.
	Dir string `json:"dir"`
	// Pid is the owner's process id.
	Pid int `json:"pid"`
	// Epoch is the owner's epoch, the high 64 bits of its fences.
	Epoch uint64 `json:"epoch"`
	// UptimeMs is how long ago, in milliseconds, the owner opened the store.
	UptimeMs uint64 `json:"uptime_ms"`
	// Subscriptions is how many subscriptions the store has (at most 10,000).
	Subscriptions int `json:"subscriptions"`
	// ChannelBytes is how many bytes of messages all channels keep (at most 64 MiB).
	ChannelBytes int `json:"channel_bytes"`
	// Branches are the branches the store knows.
	Branches []BranchStatus `json:"branches"`
	// Locks are the keys held or waited for.
	Locks []KeyStatus `json:"locks"`
}

// BranchStatus is a branch of a channel in [Status].
type BranchStatus struct {
	Channel              string   `json:"channel"`
	Branch               []string `json:"branch"`
	Subscribers          int      `json:"subscribers"`
	RecursiveSubscribers int      `json:"recursive_subscribers"`
	KeptMessages         int      `json:"kept_messages"`
	KeptBytes            int      `json:"kept_bytes"`
	Published            uint64   `json:"published"`
}

// KeyStatus is a key of a lock or semaphore in [Status]: its holders
// and how many holds wait for it.
type KeyStatus struct {
	Lock    string         `json:"lock"`
	Key     string         `json:"key"`
	Holders []HolderStatus `json:"holders"`
	Waiters int            `json:"waiters"`
}

// HolderStatus is a lease in [KeyStatus]. Fence is its decimal digits
// ("" for a semaphore's permit); LeftMs is nil when the lease cannot run out.
type HolderStatus struct {
	Lease  uint64  `json:"lease"`
	Fence  string  `json:"fence"`
	Holder uint64  `json:"holder"`
	HeldMs uint64  `json:"held_ms"`
	LeftMs *uint64 `json:"left_ms"`
}

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
