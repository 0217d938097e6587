package main

import (
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
)

type loggerT = *slog.Logger

// bootWallClock is the wall-clock time at which CLOCK_MONOTONIC was zero, so
// that a BPF timestamp (bpf_ktime_get_ns) converts to wall time by addition.
func bootWallClock() time.Time {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Now().Add(-time.Duration(ts.Nano()))
}
