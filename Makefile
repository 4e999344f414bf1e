# The two commands of the README: `make demo` runs the chat app of the
# seeds on a store in ./data; `make test` runs every test of every language,
# and each language's own checkers as a user's CI would (clippy, mypy --strict,
# tsc --strict, go vet and staticcheck). Each installs what it needs (cargo
# crates, a Python venv, npm and Go modules, the checkers at pinned versions).

SHELL := /bin/bash
export CARGO_TERM_COLOR := never
export GOTOOLCHAIN := local

.PHONY: test test-rust clippy test-python test-node test-go test-chat test-packaging demo dist

test: test-rust clippy test-python test-node test-go test-chat test-packaging

test-rust:
	cargo test

# Every crate and target, the pyo3 and napi crates included (no libpython
# needed to check them); any warning fails.
clippy:
	cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
	cargo clippy --workspace --all-targets -- -D warnings

test-python:
	$(MAKE) -C bindings-python test

test-node:
	$(MAKE) -C bindings-node test

test-go:
	$(MAKE) -C bindings-go test

# The chat app's own tests, the browser test included (examples/chat).
test-chat:
	$(MAKE) -C examples/chat test

# The packages a user installs (packaging/README.md): builds `make dist`,
# then installs each in a fresh project outside the repository, with no
# cargo or rustc on its PATH, and runs the seeds' samples there.
test-packaging:
	packaging/test.sh

# The wheel, the npm tarballs, the Go module (as a module proxy serves it)
# and the Rust crate, in release, into dist/.
dist:
	packaging/dist.sh

# The chat app on chatterbot-corpus, with its report (examples/chat/README.md).
demo:
	$(MAKE) -C examples/chat demo
