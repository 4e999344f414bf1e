package channels

// Message is a message a subscription got.
type Message[T any] struct {
	// Value is the published value, decoded from its JSON.
	Value T
	// Branch is the keys of the branch it was published to, as text
	// (integers as their decimal digits): for a Recursive subscription,
	// which branch below the subscribed one.
	Branch []string
	// Seq is its sequence number in its branch: 1 for the first message
	// published while the branch had a subscriber, then one more each time.
	Seq uint64
}

// MissedReason is why a subscription missed messages.
type MissedReason string

const (
	// Behind: the subscriber fell behind the branch's log, and its oldest
	// messages left before it read them.
	Behind MissedReason = "behind"
	// Reconnect: the connection to the store dropped, or the store restarted.
	Reconnect MissedReason = "reconnect"
)

// Missed tells a subscription it will never get some messages: they were
// published just before its next one.
type Missed struct {
	// Count is how many, when Known.
	Count uint64
	// Known is false where the count cannot be known (the store restarted).
	Known bool
	// Reason is why.
	Reason MissedReason
}
