//go:build linux && amd64

package native

// The module as `make dist` packages it: its own copy of the header and
// the release build of the static library for linux/amd64, so `go build`
// needs a C compiler and nothing else (this file replaces library_debug.go
// and library_release.go of the checkout).

// #cgo CFLAGS: -I${SRCDIR}/../../include
// #cgo LDFLAGS: ${SRCDIR}/../../lib/linux_amd64/libtinystore_go.a -lm -ldl -lpthread
import "C"
