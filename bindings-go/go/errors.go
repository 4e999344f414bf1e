package tinystore

import "tinystore.dev/tinystore/internal/native"

// Error is an error of the engine: its stable Code and a Message that says
// what was wrong and what to do. errors.Is(err, ErrTimeout) and the like
// test its code.
type Error = native.Error

// The sentinels ErrTimeout, ErrInvalid, ... (one per code) are generated
// from the core in errors_codes.go.
