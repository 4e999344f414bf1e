//go:build !tinystore_release

package native

// The debug build of the static library (`cargo build -p tinystore-go`).

// #cgo LDFLAGS: ${SRCDIR}/../../../../target/debug/libtinystore_go.a -lm -ldl -lpthread
import "C"
