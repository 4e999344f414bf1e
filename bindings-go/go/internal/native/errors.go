package native

import "fmt"

// The one place where the core's error codes become Go errors: the
// sentinels and byCode are generated from the core (errors_codes.go). The
// public package tinystore re-exports the sentinels; every error of this
// module that comes from the engine is an *Error whose Unwrap gives one of
// them, so errors.Is(err, tinystore.ErrTimeout) works.

// Error is an error of the engine: its stable Code ("timeout", "invalid",
// "limit", "closed", "lost", "owned", "conflict", "busy", "sql", "auth",
// "io", "protocol", "internal") and a Message that says what was wrong and
// what to do.
type Error struct {
	Code    string
	Message string
}

// Error gives the message and the code: "... (timeout)".
func (e *Error) Error() string { return fmt.Sprintf("%s (%s)", e.Message, e.Code) }

// Unwrap gives the sentinel of the error's code, for errors.Is.
func (e *Error) Unwrap() error {
	if s, ok := byCode[e.Code]; ok {
		return s
	}
	return ErrInternal
}

func newError(code, message string) error { return &Error{Code: code, Message: message} }

// Invalid is an error of code "invalid": a Go value the engine cannot take
// (a key of another type, a parameter SQL cannot bind).
func Invalid(format string, args ...any) error {
	return newError("invalid", fmt.Sprintf(format, args...))
}
