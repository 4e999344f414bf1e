package locks

import (
	"database/sql/driver"
	"math/bits"
	"strconv"
	"strings"

	"tinystore.dev/tinystore/internal/native"
)

// Fence is a lease's fence: a 128-bit number, the store's epoch in the high
// 64 bits (Hi) and a count in the low 64 (Lo). Every lease a store gives has
// a fence larger than every fence it gave before, across restarts too
// (LOCK-02). Compare fences with [Fence.Less]; store them as
// [Fence.Padded], the 40-digit text that SQL compares in the same order.
//
// String gives the decimal digits, so fmt.Sprintf("%040s", lease.Fence)
// pads it as Padded does.
type Fence struct {
	Hi, Lo uint64
}

// Less tells whether f is smaller than g.
func (f Fence) Less(g Fence) bool {
	return f.Hi < g.Hi || (f.Hi == g.Hi && f.Lo < g.Lo)
}

// Compare gives -1, 0 or +1 as f is smaller than, equal to or larger than g.
func (f Fence) Compare(g Fence) int {
	switch {
	case f.Less(g):
		return -1
	case g.Less(f):
		return 1
	}
	return 0
}

// IsZero tells whether f is zero: no lease has it (a semaphore's permit
// has no fence).
func (f Fence) IsZero() bool { return f == Fence{} }

// tenTo19 is the largest power of ten below 2^64.
const tenTo19 = 10_000_000_000_000_000_000

// String gives the fence's decimal digits, as every language and the wire
// write them: "18446744073709551618" for Fence{1, 2}.
func (f Fence) String() string {
	if f.Hi == 0 {
		return strconv.FormatUint(f.Lo, 10)
	}
	// Divide by 10^19 until the high half is gone; each remainder is 19 digits.
	var chunks []uint64
	hi, lo := f.Hi, f.Lo
	for hi != 0 {
		var r uint64
		hi, r = bits.Div64(0, hi, tenTo19)
		lo, r = bits.Div64(r, lo, tenTo19)
		chunks = append(chunks, r)
	}
	var b strings.Builder
	b.WriteString(strconv.FormatUint(lo, 10))
	for i := len(chunks) - 1; i >= 0; i-- {
		d := strconv.FormatUint(chunks[i], 10)
		b.WriteString(strings.Repeat("0", 19-len(d)))
		b.WriteString(d)
	}
	return b.String()
}

// Padded gives the digits zero-padded to 40 characters: as text, padded
// fences sort like the numbers, so SQL can compare them
// (`where summary_fence < ?`).
func (f Fence) Padded() string {
	s := f.String()
	return strings.Repeat("0", 40-len(s)) + s
}

// Value binds the fence as a SQL parameter: its Padded text.
func (f Fence) Value() (driver.Value, error) { return f.Padded(), nil }

// ParseFence reads a fence from its decimal digits, padded or not.
// Errors: [tinystore.ErrInvalid] for anything else, or past 128 bits.
func ParseFence(s string) (Fence, error) {
	if s == "" {
		return Fence{}, native.Invalid("a fence is written as decimal digits, like \"18446744073709551617\"; got \"\"")
	}
	var f Fence
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return Fence{}, native.Invalid("a fence is written as decimal digits, like \"18446744073709551617\"; got %q", s)
		}
		// f = f*10 + digit, refusing overflow past 128 bits.
		hiHi, hiLo := bits.Mul64(f.Hi, 10)
		loHi, loLo := bits.Mul64(f.Lo, 10)
		lo, carry := bits.Add64(loLo, uint64(c-'0'), 0)
		hi, over := bits.Add64(hiLo, loHi, carry)
		if hiHi != 0 || over != 0 {
			return Fence{}, native.Invalid("a fence fits in 128 bits (at most 39 digits); got %q", s)
		}
		f = Fence{hi, lo}
	}
	return f, nil
}
