#!/usr/bin/env bash
# The package's declarations as a user's project sees them: packs the
# package (npm pack), installs the tarball and typescript (the version the
# package builds with) into a fresh project in a temporary folder, nothing
# else, and runs tsc --strict on samples.ts as an ES module (.mts, the
# "import" condition: index.d.mts) and as CommonJS (.cts, "require":
# dist/index.d.ts), with the libraries' declarations checked too.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(dirname "$here")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tarball=$(cd "$pkg" && npm pack --silent --pack-destination "$tmp" | tail -n 1)
typescript=$(node -p "require('$pkg/node_modules/typescript/package.json').version")
mkdir "$tmp/project"
cd "$tmp/project"
echo '{ "name": "a-user-project", "private": true }' > package.json
npm install --silent --no-audit --no-fund --prefer-offline "$tmp/$tarball" "typescript@$typescript"
cp "$here/samples.ts" esm.mts
cp "$here/samples.ts" cjs.cts
cat > tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "target": "ES2022",
    "module": "node16",
    "moduleResolution": "node16",
    "strict": true,
    "skipLibCheck": false,
    "noEmit": true
  },
  "files": ["esm.mts", "cjs.cts"]
}
JSON
npx tsc -p tsconfig.json
echo "tsc --strict: the samples type-check as ESM and CommonJS with only tinystore and typescript installed"
