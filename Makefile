# The two commands of the README: `make demo` runs the chat app of the
# seeds on a store in ./data; `make test` runs every test of every language.
# Each installs what it needs (cargo crates, a Python venv, npm and Go modules).

SHELL := /bin/bash
export CARGO_TERM_COLOR := never
export GOTOOLCHAIN := local

.PHONY: test test-rust test-python test-node test-go test-chat demo

test: test-rust test-python test-node test-go test-chat

test-rust:
	cargo test

test-python:
	$(MAKE) -C bindings-python test

test-node:
	$(MAKE) -C bindings-node test

test-go:
	$(MAKE) -C bindings-go test

# The chat app's own tests, the browser test included (examples/chat).
test-chat:
	$(MAKE) -C examples/chat test

# The chat app on chatterbot-corpus, with its report (examples/chat/README.md).
demo:
	$(MAKE) -C examples/chat demo
