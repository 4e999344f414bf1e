//go:build tinystore_release

package native

// In a checkout, with the build tag tinystore_release (`make bench`): the
// repository's header and the release build of the static library
// (`cargo build --release -p tinystore-go`).

// #cgo CFLAGS: -I${SRCDIR}/../../../../include
// #cgo LDFLAGS: ${SRCDIR}/../../../../target/release/libtinystore_go.a -lm -ldl -lpthread
import "C"
