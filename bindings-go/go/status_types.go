// Generated from the core by core/tests/generated.rs: do not edit.
// `UPDATE_GENERATED=1 cargo test -p tinystore --test generated` rewrites it.

package tinystore

// Status is what a store holds now, as its owner sees it.
type Status struct {
	// Dir is the store directory (the owner's path).
	Dir string `json:"dir"`

	// Pid is the owner's process id.
	Pid int `json:"pid"`

	// Epoch is the owner's epoch: the high 64 bits of every fence it gives.
	Epoch uint64 `json:"epoch"`

	// UptimeMs is milliseconds since the owner opened the store.
	UptimeMs uint64 `json:"uptime_ms"`

	// Subscriptions is subscriptions now, of every process (at most 10,000).
	Subscriptions int `json:"subscriptions"`

	// ChannelBytes is bytes all channels keep (at most 64 MiB).
	ChannelBytes int `json:"channel_bytes"`

	// Branches is every branch the store knows.
	Branches []BranchStatus `json:"branches"`

	// Locks is every key held or waited for.
	Locks []KeyStatus `json:"locks"`

	// Connections is the processes connected to the owner.
	Connections []ConnectionStatus `json:"connections"`
}

// BranchStatus is one branch of a channel.
type BranchStatus struct {
	// Channel is the channel's name.
	Channel string `json:"channel"`

	// Branch is the branch's keys as text; empty for the channel's root.
	Branch []string `json:"branch"`

	// Subscribers is subscriptions of this branch alone.
	Subscribers int `json:"subscribers"`

	// RecursiveSubscribers is recursive subscriptions rooted here.
	RecursiveSubscribers int `json:"recursive_subscribers"`

	// KeptMessages is messages its log keeps now (at most 1,024).
	KeptMessages int `json:"kept_messages"`

	// KeptBytes is bytes its log keeps now (at most 4 MiB).
	KeptBytes int `json:"kept_bytes"`

	// Published is messages published to it while the store knew it.
	Published uint64 `json:"published"`

	// Lag is how many messages each of its subscriptions has yet to read (past 1,024 a subscription misses).
	Lag []uint64 `json:"lag"`
}

// KeyStatus is one key of a lock or semaphore, held or waited for.
type KeyStatus struct {
	// Lock is the lock's or semaphore's name.
	Lock string `json:"lock"`

	// Key is the key, as text.
	Key string `json:"key"`

	// Holders is its leases now (a semaphore's key can have up to its limit).
	Holders []HolderStatus `json:"holders"`

	// Waiters is holds waiting in line.
	Waiters int `json:"waiters"`
}

// HolderStatus is one lease of a key.
type HolderStatus struct {
	// Lease is the lease's id.
	Lease uint64 `json:"lease"`

	// Fence is its fence; "" for a semaphore's permit.
	Fence string `json:"fence"`

	// Holder is who holds it: the holder id.
	Holder uint64 `json:"holder"`

	// HeldMs is milliseconds since it was given.
	HeldMs uint64 `json:"held_ms"`

	// LeftMs is milliseconds until it runs out, where it can (ttl or maxHold); else nil.
	LeftMs *uint64 `json:"left_ms"`
}

// ConnectionStatus is one process connected to the owner.
type ConnectionStatus struct {
	// ID is the connection's id.
	ID uint64 `json:"id"`

	// Client is the name the client gave.
	Client string `json:"client"`

	// Address is where it connected from.
	Address string `json:"address"`

	// SinceMs is milliseconds since it connected.
	SinceMs uint64 `json:"since_ms"`
}
