// Package native is the only package of this module that speaks cgo: it
// turns each call of the public packages into one call of the C ABI in
// include/tinystore.h (the Rust crate bindings-go, linked as a static
// library) and back. Where the header and the library are is said by one
// library_*.go file: in a checkout, the repository's include/ and target/;
// in the module as packaged (make dist), its own include/ and lib/. It
// holds no engine logic.
//
// Rules it keeps: no Go pointer is kept by C after a call returns, and C
// never calls into Go: what happens later (a subscription has something to
// read, a lease was lost) comes back as a token on the completion queue,
// which one goroutine drains (completions.go).
package native

/*
#include <stdlib.h>
#include "tinystore.h"
*/
import "C"

import (
	"context"
	"unsafe"
)

// ptr gives the bytes of s as C takes them (pointer and length); the
// memory stays Go's and holds no pointers, as cgo requires.
func ptr(s string) (*C.uint8_t, C.size_t) {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

// bptr is ptr for a byte slice.
func bptr(b []byte) (*C.uint8_t, C.size_t) {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b))), C.size_t(len(b))
}

// goString copies the text at s.
func goString(s C.TsStr) string {
	if s.len == 0 {
		return ""
	}
	return C.GoStringN((*C.char)(unsafe.Pointer(s.ptr)), C.int(s.len))
}

// cancelFor gives a cancel switch that fires when ctx is done (nil when ctx
// can never be), and the function that frees it once the call returned.
func cancelFor(ctx context.Context) (*C.TsCancel, func()) {
	if ctx.Done() == nil {
		return nil, func() {}
	}
	c := C.ts_cancel_new()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		C.ts_cancel_fire(c)
		close(fired)
	})
	return c, func() {
		if !stop() {
			<-fired
		}
		C.ts_cancel_free(c)
	}
}

// errorOf turns a call's status and error into a Go error, for a call that
// takes no cancel switch.
func errorOf(rc C.int32_t, e *C.TsError) error {
	if rc == C.TS_OK {
		return nil
	}
	if e == nil {
		return newError("internal", "a call failed without saying why: please report it")
	}
	code, msg := C.GoString(e.code), C.GoString(e.message)
	C.ts_error_free(e)
	return newError(code, msg)
}

// result is errorOf for a call given ctx: the code "cancelled" (its
// cancelFor switch fired) becomes ctx's own error.
func result(ctx context.Context, rc C.int32_t, e *C.TsError) error {
	err := errorOf(rc, e)
	if ne, ok := err.(*Error); ok && ne.Code == "cancelled" {
		if err := ctx.Err(); err != nil {
			return err
		}
		return context.Canceled
	}
	return err
}

// libraryStamp names the build of the static library this binary linked.
// `make test` sets it (-ldflags -X) from the library's size and time, so Go,
// which does not hash the library, relinks after each rebuild of it.
var libraryStamp string

// LibraryStamp is the stamp of the linked library ("" when not set).
func LibraryStamp() string { return libraryStamp }

// CLI runs the tinystore command with args (the program's name first) in
// this process and returns its exit status.
func CLI(args []string) int {
	var buf []byte
	for _, a := range args {
		buf = append(buf, a...)
		buf = append(buf, 0)
	}
	p, n := bptr(buf)
	return int(C.ts_cli(p, n))
}
