#!/usr/bin/env bash
# The packaging test (`make test-packaging`, part of `make test`): builds
# `make dist`, then installs each package as a user would, in a temporary
# directory outside the repository, with a PATH that holds no cargo or rustc
# (but for the Rust crate, which cargo builds), and runs there the seeds'
# samples the repository's own tests run, copied from those tests:
#   Python: a fresh venv, the wheel; tests/test_seeds.py owned and
#     connected, then `tinystore status` (the wheel's command) on the store;
#   Node: a fresh npm project, the two tarballs (and TypeScript from npm);
#     test/seeds.test.ts as CommonJS and as an ES module, the ESM test, and
#     `npx tinystore --version`; node must exit by itself;
#   Go: a fresh module, GOPROXY=file://dist/goproxy and no checksum
#     database; `go get` of the module, seeds_test.go, cmd/tinystore;
#   Rust: a fresh crate depending on the packaged crate; tests/seeds.rs.
# Each checks that what it ran is the release build from dist/.
# SKIP_DIST=1 reuses dist/ as it is; PACKAGES="python node" runs those only.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIST=$ROOT/dist
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -1)
TRIPLE=x86_64-unknown-linux-gnu

if [ "${SKIP_DIST:-}" != 1 ]; then
    "$ROOT/packaging/dist.sh"
fi

# The tools a user has, found now, before PATH loses ~/.cargo/bin.
PYTHON=$(python3 -c 'import sys; print(sys.executable)')
CARGO=$(command -v cargo)
NODE_BIN=$(dirname "$(command -v node)")
GO_BIN=$(dirname "$(command -v go)")

WORK=$(mktemp -d /tmp/tinystore-packaging.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
case "$WORK" in "$ROOT"/*) echo "the work directory is inside the repository" >&2; exit 1;; esac

export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup} CARGO_HOME=${CARGO_HOME:-$HOME/.cargo}
export PATH="$GO_BIN:$NODE_BIN:/usr/local/bin:/usr/bin:/bin"
export HOME=$ROOT/target/packaging-home  # pip's, npm's and Go's caches, kept between runs
mkdir -p "$HOME"
unset VIRTUAL_ENV NAPI_RS_NATIVE_LIBRARY_PATH PYTHONPATH NODE_PATH GOFLAGS CARGO_TARGET_DIR TINYSTORE_TOKEN TINYSTORE_CA
for tool in cargo rustc; do
    if command -v "$tool" >/dev/null; then echo "$tool is on the PATH of the packaging test: $(command -v $tool)" >&2; exit 1; fi
done

fail() { echo "packaging test: $*" >&2; exit 1; }
step() { printf '\n== packaging: %s\n' "$*"; }
# Checks that `$2` (what a package loaded) is inside `$1`.
inside() { case "$2" in "$1"/*) ;; *) fail "$3 loaded $2, not from $1";; esac; }
PACKAGES=${PACKAGES:-python node go rust}
wants() { [[ " $PACKAGES " == *" $1 "* ]]; }

if wants python; then
step "Python: a fresh venv installs the wheel"
PY=$WORK/python
mkdir -p "$PY/tests"
"$PYTHON" -m venv "$PY/venv"
WHEEL=$(ls "$DIST"/tinystore-"$VERSION"-cp39-abi3-manylinux_*_x86_64.whl)
"$PY/venv/bin/pip" install --quiet --disable-pip-version-check "$WHEEL" 'pytest>=8' 'pytest-asyncio>=0.24,<2' 'pytest-timeout>=2'
cp "$ROOT/bindings-python/tests/conftest.py" "$ROOT/bindings-python/tests/test_seeds.py" "$PY/tests/"
cp -r "$ROOT/bindings-python/tests/migrations" "$PY/tests/"
printf '[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\ntimeout = 60\n' > "$PY/pytest.ini"
cd "$PY"
native=$("$PY/venv/bin/python" -c 'import tinystore._native as n; print(n.__file__)')
inside "$PY/venv" "$native" "import tinystore"
"$PY/venv/bin/tinystore" --version | grep -q "^tinystore $VERSION (wire protocol [0-9]*, release build)$" || fail "the wheel's tinystore --version: $("$PY/venv/bin/tinystore" --version)"
"$PY/venv/bin/python" -m pytest -q -p no:cacheprovider --basetemp="$PY/stores" tests/test_seeds.py
store=$(dirname "$(find "$PY/stores" -name chat.db | sort | head -1)")
[ -d "$store" ] || fail "the Python samples made no store"
"$PY/venv/bin/tinystore" serve "$store" 2>"$PY/serve.log" &
serving=$!
for _ in $(seq 100); do [ -S "$store/tinystore.sock" ] && break; sleep 0.1; done
"$PY/venv/bin/tinystore" status "$store" | tee "$PY/status.txt"
grep -q "^store $store  owner pid $serving " "$PY/status.txt" || fail "tinystore status does not show the store's owner"
"$PY/venv/bin/tinystore" stop "$store"
wait "$serving" || fail "tinystore serve exited with $?: $(cat "$PY/serve.log")"
fi

if wants node; then
step "Node: a fresh npm project installs the two tarballs"
JS=$WORK/node
mkdir -p "$JS/test"
cd "$JS"
npm init -y >/dev/null
npm install --no-audit --no-fund --loglevel=error "$DIST/tinystore-$VERSION.tgz" "$DIST/tinystore-linux-x64-gnu-$VERSION.tgz"
npm install --no-audit --no-fund --loglevel=error --save-dev 'typescript@^5.4' '@types/node@^20'
[ -z "$(find node_modules/tinystore -name '*.node')" ] || fail "the tinystore package carries an addon; it belongs in the platform package"
addon=$(node -e "console.log(require.resolve('tinystore-linux-x64-gnu'))")
inside "$JS/node_modules" "$addon" "require('tinystore')"
cp "$ROOT/bindings-node/test/helpers.ts" "$ROOT/bindings-node/test/seeds.test.ts" "$ROOT/bindings-node/test/esm.test.mts" test/
# The same samples as an ES module (which names the helpers' file in full).
sed "s#from './helpers'#from './helpers.js'#" test/seeds.test.ts > test/seeds-esm.test.mts
cat > tsconfig.json <<'EOF'
{
  "compilerOptions": {
    "target": "ES2022", "lib": ["ES2022"], "module": "node16", "moduleResolution": "node16",
    "types": ["node"], "strict": true, "rootDir": "test", "outDir": "build"
  },
  "include": ["test/*.ts", "test/*.mts"]
}
EOF
npx tsc -p .
# node exits by itself once its tests are done: timeout fails a hang.
timeout 120 node --test --test-concurrency=1 build/seeds.test.js build/seeds-esm.test.mjs build/esm.test.mjs
loaded=$(node -e "require('tinystore'); console.log(Object.keys(require.cache).find((f) => f.endsWith('.node')))")
inside "$JS/node_modules/tinystore-linux-x64-gnu" "$loaded" "the Node samples"
version=$(timeout 30 npx tinystore --version)
[[ "$version" =~ ^tinystore\ $VERSION\ \(wire\ protocol\ [0-9]+,\ release\ build\)$ ]] || fail "npx tinystore --version: $version"
fi

if wants go; then
step "Go: a fresh module gets $VERSION from dist/goproxy"
GOW=$WORK/go
mkdir -p "$GOW/seeds/testkit"
# Only dist/goproxy: the module needs nothing else from any proxy.
export GOPROXY=file://$DIST/goproxy GOFLAGS=-mod=mod GONOSUMDB=tinystore.dev GOTOOLCHAIN=local CGO_ENABLED=1
export GOMODCACHE=$WORK/gomodcache
cd "$GOW/seeds"
go mod init example.com/seeds >/dev/null 2>&1
go get "tinystore.dev/tinystore@v$VERSION"
moddir=$(go list -m -f '{{.Dir}}' tinystore.dev/tinystore)
inside "$GOMODCACHE" "$moddir" "go get tinystore.dev/tinystore"
[ -f "$moddir/lib/linux_amd64/libtinystore_go.a" ] || fail "the module carries no static library"
# The samples, with the module's test helpers (internal/testkit there).
for f in "$ROOT"/bindings-go/go/internal/testkit/*.go; do
    sed 's#"tinystore.dev/tinystore/internal/testkit"#"example.com/seeds/testkit"#' "$f" > "testkit/$(basename "$f")"
done
sed 's#"tinystore.dev/tinystore/internal/testkit"#"example.com/seeds/testkit"#' "$ROOT/bindings-go/go/seeds_test.go" > seeds_test.go
printf '// Package tinystore holds the seeds'"'"' Go samples, run as tests.\npackage tinystore\n' > doc.go
go test -count=1 .
go build -o "$GOW/tinystore" tinystore.dev/tinystore/cmd/tinystore
version=$("$GOW/tinystore" --version)
[[ "$version" =~ ^tinystore\ $VERSION\ \(wire\ protocol\ [0-9]+,\ release\ build\)$ ]] || fail "the Go module's tinystore --version: $version"
unset GOPROXY GOFLAGS GONOSUMDB GOMODCACHE
fi

if wants rust; then
step "Rust: a fresh crate depends on the packaged crate"
RS=$WORK/rust
mkdir -p "$RS/src" "$RS/tests"
cd "$RS"
cat > Cargo.toml <<EOF
[package]
name = "seeds"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
tinystore = { path = "$DIST/crate/tinystore-$VERSION" }
serde = { version = "1", features = ["derive"] }

[dev-dependencies]
tempfile = "3"
EOF
echo '//! The seeds'"'"' Rust samples run as tests/seeds.rs.' > src/lib.rs
cp "$ROOT/core/tests/seeds.rs" "$ROOT/core/tests/common.rs" tests/
cat >> tests/seeds.rs <<'EOF'

#[test]
fn packaging_runs_the_release_build_of_the_packaged_crate() {
    assert!(tinystore::cli::version_line().ends_with(", release build)"), "{}", tinystore::cli::version_line());
}
EOF
# The same versions of the dependencies as the workspace; its target dir
# as a cache of their builds (the crate itself is built from dist/).
cp "$ROOT/Cargo.lock" .
manifest=$("$CARGO" metadata --format-version 1 --offline 2>/dev/null | "$PYTHON" -c 'import json, sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "tinystore"))')
inside "$DIST/crate" "$manifest" "the fresh crate"
CARGO_TARGET_DIR=$ROOT/target "$CARGO" test --release --target "$TRIPLE" --test seeds
fi

step "$PACKAGES: installed, and ran their seeds' samples"
