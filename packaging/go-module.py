"""Makes the Go module of `make dist` and lays it out as a Go module proxy
serves it (https://go.dev/ref/mod#goproxy-protocol):

    <proxy>/<module>/@v/list, <version>.info, <version>.mod, <version>.zip

The zip holds the module as a user builds it: the Go sources of
bindings-go/go (no tests, no test helpers, not the bench module), the
header include/tinystore.h and the release static library in
lib/linux_amd64/, with internal/native/library_dist.go (bindings-go/dist)
in place of the checkout's library_debug.go and library_release.go. So
`go get` and `go build` need a C compiler and nothing from the checkout.

Usage: python3 go-module.py <root> <libtinystore_go.a> <module> <version> <stage> <proxy>
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

root, lib, module, version, stage, proxy = sys.argv[1:]
src = Path(root) / "bindings-go" / "go"
mod = Path(stage) / f"{module}@{version}"
shutil.rmtree(mod, ignore_errors=True)

CHECKOUT_ONLY = {"internal/native/library_debug.go", "internal/native/library_release.go"}
for path in sorted(src.rglob("*")):
    rel = path.relative_to(src).as_posix()
    if path.is_dir() or rel.startswith(("bench/", "internal/testkit/")) or rel in CHECKOUT_ONLY:
        continue
    if not path.name.endswith(".go") or path.name.endswith("_test.go"):
        if rel not in ("go.mod",):
            continue
    (mod / rel).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, mod / rel)

shutil.copy2(Path(root) / "bindings-go" / "dist" / "library_dist.go", mod / "internal/native/library_dist.go")
(mod / "include").mkdir()
shutil.copy2(Path(root) / "include" / "tinystore.h", mod / "include/tinystore.h")
(mod / "lib/linux_amd64").mkdir(parents=True)
# Debug sections are dropped (half the size); the symbols stay for linking.
subprocess.run(["strip", "--strip-debug", "-o", str(mod / "lib/linux_amd64/libtinystore_go.a"), lib], check=True)
shutil.copy2(Path(root) / "bindings-go" / "README.md", mod / "README.md")

# The tests' requirements (porcupine) are not the module's as shipped.
env = dict(os.environ, GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
subprocess.run(["go", "mod", "edit", "-droprequire", "github.com/anishathalye/porcupine"], cwd=mod, check=True, env=env)
gomod = (mod / "go.mod").read_text()
if "require" in gomod:
    sys.exit(f"go-module.py: the shipped module still requires something: {gomod}")

at = Path(proxy) / module / "@v"
at.mkdir(parents=True, exist_ok=True)
(at / f"{version}.mod").write_text(gomod)
stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
(at / f"{version}.info").write_text(json.dumps({"Version": version, "Time": stamp}) + "\n")
(at / "list").write_text(version + "\n")
with zipfile.ZipFile(at / f"{version}.zip", "w", zipfile.ZIP_DEFLATED) as z:
    for path in sorted(mod.rglob("*")):
        if path.is_file():
            info = zipfile.ZipInfo(f"{module}@{version}/{path.relative_to(mod).as_posix()}", (1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, path.read_bytes())
print(f"{at / (version + '.zip')}: {sum(1 for p in mod.rglob('*') if p.is_file())} files")
