#!/usr/bin/env bash
# make dist: the four packages a user installs with their own tool, built in
# release into dist/ (packaging/README.md says what each holds):
#   dist/tinystore-V-cp39-abi3-manylinux_*.whl      pip install
#   dist/tinystore-V.tgz, tinystore-linux-x64-gnu-V.tgz   npm install
#   dist/goproxy/tinystore.dev/tinystore/@v/vV.*     GOPROXY=file://... go get
#   dist/tinystore-V.crate (and dist/crate/tinystore-V/)  cargo add --path
# Every Rust build targets x86_64-unknown-linux-gnu, so the wheel, the addon
# and the Go library share one release build of the dependencies.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIST=$ROOT/dist
TRIPLE=x86_64-unknown-linux-gnu
RELEASE=$ROOT/target/$TRIPLE/release
STAGE=$ROOT/target/dist-stage
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -1)
GO_MODULE=tinystore.dev/tinystore
export CARGO_TERM_COLOR=never GOTOOLCHAIN=local

step() { printf '\n== %s\n' "$*"; }

rm -rf "$DIST" "$STAGE"
mkdir -p "$DIST" "$STAGE"

step "Python wheel (maturin, release, abi3 for CPython 3.9+)"
make -C "$ROOT/bindings-python" --no-print-directory .venv/.installed
(cd "$ROOT/bindings-python" && VIRTUAL_ENV=$ROOT/bindings-python/.venv .venv/bin/maturin build --quiet --release --strip \
    --target "$TRIPLE" --compatibility manylinux_2_34 -o "$DIST")

step "npm packages (napi-rs layout: tinystore, tinystore-linux-x64-gnu)"
make -C "$ROOT/bindings-node" --no-print-directory node_modules/.package-lock.json
# The JavaScript and declarations (release or debug makes no difference to them).
(cd "$ROOT/bindings-node" && rm -rf dist && npx tsc -p tsconfig.json)
(cd "$ROOT/bindings-node" && npx napi build --platform --release --strip --output-dir "$STAGE/addon" --js native.js --dts native.d.ts)
cmp "$STAGE/addon/native.d.ts" "$ROOT/bindings-node/native.d.ts" \
    || { echo "bindings-node/native.d.ts is stale: run make -C bindings-node update-dts" >&2; exit 1; }
node "$ROOT/packaging/npm-packages.js" "$ROOT/bindings-node" "$STAGE/addon" "$STAGE/npm"
for p in tinystore tinystore-linux-x64-gnu; do
    (cd "$STAGE/npm/$p" && npm pack --silent --pack-destination "$DIST" >/dev/null)
done

step "Go module $GO_MODULE v$VERSION (the release static library inside, for linux/amd64)"
cargo build --release --target "$TRIPLE" -p tinystore-go
python3 "$ROOT/packaging/go-module.py" "$ROOT" "$RELEASE/libtinystore_go.a" "$GO_MODULE" "v$VERSION" "$STAGE/go" "$DIST/goproxy"

step "Rust crate (cargo package, its copy built on its own)"
# --allow-dirty: a checkout with uncommitted work packages what is on disk.
cargo package -p tinystore --allow-dirty --quiet
cp "$ROOT/target/package/tinystore-$VERSION.crate" "$DIST/"
mkdir -p "$DIST/crate"
tar -xzf "$DIST/tinystore-$VERSION.crate" -C "$DIST/crate"

step "dist/"
(cd "$DIST" && find . -maxdepth 6 -type f \( -name '*.whl' -o -name '*.tgz' -o -name '*.crate' -o -name '*.zip' \) -printf '%10s  %p\n' | sort -k2)
