package testkit

import (
	"syscall"
	"unsafe"
)

// clockMonotonic is Linux's CLOCK_MONOTONIC.
const clockMonotonic = 1

// Mono reads CLOCK_MONOTONIC, in nanoseconds. On Linux it is one clock for
// every process of the machine (of one time namespace, which child
// processes share), never steps with the wall clock, and so orders events
// of several processes in real time. time.Now cannot serve: its monotonic
// reading counts from its own process's start, and its wall reading may
// jump.
func Mono() int64 {
	var ts syscall.Timespec
	_, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		panic("clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
