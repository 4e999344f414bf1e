#!/usr/bin/env node
// The `tinystore` command of the npm package: the core's command, run in
// this process by the native addon (`npx tinystore status data`,
// `npx tinystore --version`; `--help` lists them).
'use strict'
const { native } = require('../dist/native.js')

process.exit(native.cli(['tinystore', ...process.argv.slice(2)]))
