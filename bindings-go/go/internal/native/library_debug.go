//go:build !tinystore_release

package native

// In a checkout: the repository's header and the debug build of the static
// library (`cargo build -p tinystore-go`). The module `make dist` packages
// has library_dist.go instead (bindings-go/dist).

// #cgo CFLAGS: -I${SRCDIR}/../../../../include
// #cgo LDFLAGS: ${SRCDIR}/../../../../target/debug/libtinystore_go.a -lm -ldl -lpthread
import "C"
