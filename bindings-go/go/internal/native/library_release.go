//go:build tinystore_release

package native

// With the build tag tinystore_release (`make bench`), the release build of
// the static library (`cargo build --release -p tinystore-go`).

// #cgo LDFLAGS: ${SRCDIR}/../../../../target/release/libtinystore_go.a -lm -ldl -lpthread
import "C"
