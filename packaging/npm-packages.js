// Lays out the two npm packages of `make dist`, as napi-rs does:
//   <out>/tinystore: the JavaScript, its types, the loader build/native.js
//     and the `tinystore` bin; the addon comes from the platform package,
//     an optional dependency npm installs where it fits;
//   <out>/tinystore-linux-x64-gnu: the release addon alone.
// Usage: node npm-packages.js <bindings-node> <addon dir> <out>
'use strict'
const fs = require('node:fs')
const path = require('node:path')

const [src, addon, out] = process.argv.slice(2)
const pkg = JSON.parse(fs.readFileSync(path.join(src, 'package.json'), 'utf8'))
const platform = 'linux-x64-gnu'
const platformName = `${pkg.name}-${platform}`
const nodeFile = `${pkg.napi.binaryName}.${platform}.node`

function copy(from, to) {
  fs.mkdirSync(path.dirname(to), { recursive: true })
  fs.cpSync(from, to, { recursive: true })
}

// The main package: what `files` lists, but the addon, which the loader
// takes from the platform package when none is next to it.
const main = path.join(out, pkg.name)
for (const f of ['bin', 'dist', 'index.mjs', 'index.d.mts', 'native.d.ts', 'README.md']) copy(path.join(src, f), path.join(main, f))
copy(path.join(addon, 'native.js'), path.join(main, 'build', 'native.js'))
const { scripts, devDependencies, ...published } = pkg
void scripts
void devDependencies
published.files = pkg.files.filter((f) => !f.endsWith('.node')).concat('README.md')
published.optionalDependencies = { [platformName]: pkg.version }
fs.writeFileSync(path.join(main, 'package.json'), JSON.stringify(published, null, 2) + '\n')

// The platform package, as `napi create-npm-dirs` makes it.
const plat = path.join(out, platformName)
copy(path.join(addon, nodeFile), path.join(plat, nodeFile))
const platformPkg = {
  name: platformName,
  version: pkg.version,
  description: `The ${platform} native addon of the npm package ${pkg.name} (a release build); installed by it.`,
  license: pkg.license,
  main: nodeFile,
  files: [nodeFile],
  os: ['linux'],
  cpu: ['x64'],
  libc: ['glibc'],
  engines: pkg.engines,
}
fs.writeFileSync(path.join(plat, 'package.json'), JSON.stringify(platformPkg, null, 2) + '\n')
fs.writeFileSync(path.join(plat, 'README.md'), `# ${platformName}\n\nThe native addon of [${pkg.name}](../${pkg.name}) for ${platform}, a release build. Install \`${pkg.name}\`, which depends on it.\n`)
