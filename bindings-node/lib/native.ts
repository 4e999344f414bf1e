// The native layer, built by `napi build` into build/; its types are the
// checked-in native.d.ts (a test fails when the build's copy differs).
import type * as Native from '../native'

// eslint-disable-next-line @typescript-eslint/no-require-imports
export const native: typeof Native = require('../build/native.js')

// A connected store's publishes made in one turn of the event loop leave
// together before the loop waits; a program that exits in that turn
// (`process.exit()` after publishes not awaited) still sends them (and
// the addon again after every exit listener, for those they publish).
process.on('exit', () => native.flushPublishesBeforeExit())

export type NativeStore = Native.NativeStore
export type NativeSubscription = Native.NativeSubscription
export type NativeBatch = Native.NativeBatch
export type NativeMissed = Native.NativeMissed
export type NativeLock = Native.NativeLock
export type NativeLease = Native.NativeLease
export type NativeDatabase = Native.NativeDatabase
export type NativeTx = Native.NativeTx
export type NativeRows = Native.NativeRows
export type NativeDone = Native.NativeDone
