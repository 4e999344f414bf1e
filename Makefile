# The two commands of the README: `make demo` runs the chat app of the
# seeds on a store in ./data; `make test` runs every test of every language,
# and each language's own checkers as a user's CI would (clippy, mypy --strict,
# tsc --strict, go vet and staticcheck). Each installs what it needs (cargo
# crates, a Python venv, npm and Go modules, the checkers at pinned versions).

SHELL := /bin/bash
export CARGO_TERM_COLOR := never
export GOTOOLCHAIN := local
# One build from scratch: incremental caches would only take disk (3 GB).
export CARGO_INCREMENTAL ?= 0

.PHONY: test test-rust clippy test-python test-node test-go test-chat test-packaging demo demo-cluster dist etcd-deps

test: etcd-deps test-rust clippy test-python test-node test-go test-chat test-packaging

# The etcd client crate compiles etcd's .proto files with protoc at build
# time; the cluster tests start Debian's etcd and nats-server (channels on
# JetStream) (docs/cluster.md); the Python tests make the TLS members'
# certificates with openssl.
etcd-deps:
	command -v protoc >/dev/null && command -v etcd >/dev/null && command -v etcdctl >/dev/null && command -v nats-server >/dev/null && command -v openssl >/dev/null || \
	  (apt-get update && apt-get install -y protobuf-compiler etcd-server etcd-client nats-server openssl)

test-rust: etcd-deps
	cargo test

# Every crate and target, the pyo3 and napi crates included (no libpython
# needed to check them); any warning fails.
clippy: etcd-deps
	cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
	cargo clippy --workspace --all-targets -- -D warnings

test-python: etcd-deps
	$(MAKE) -C bindings-python test

test-node: etcd-deps
	$(MAKE) -C bindings-node test

test-go: etcd-deps
	$(MAKE) -C bindings-go test

# The chat app's own tests, the browser test included (examples/chat).
test-chat: etcd-deps
	$(MAKE) -C examples/chat test

# The packages a user installs (packaging/README.md): builds `make dist`,
# then installs each in a fresh project outside the repository, with no
# cargo or rustc on its PATH, and runs the seeds' samples there.
test-packaging: etcd-deps
	packaging/test.sh

# The wheel, the npm tarballs, the Go module (as a module proxy serves it)
# and the Rust crate, in release, into dist/.
dist: etcd-deps
	packaging/dist.sh

# The chat app on chatterbot-corpus, with its report (examples/chat/README.md).
demo: etcd-deps
	$(MAKE) -C examples/chat demo

# The same chat app on a cluster store (etcd and NATS JetStream, three of
# each, started on loopback ports and stopped by the demo; docs/cluster.md).
demo-cluster: etcd-deps
	$(MAKE) -C examples/chat demo-cluster
