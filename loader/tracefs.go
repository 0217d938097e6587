package loader

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// tracefsPaths are where cilium/ebpf looks for tracefs, in its order.
var tracefsPaths = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// ensureTracefs makes sure tracefs is mounted before the first classic
// tracepoint attach (perf_event_open needs the tracepoint id from
// events/<group>/<name>/id). Minimal systems often leave it unmounted; a
// fresh tracefs mount is harmless and what `mount -t tracefs` would do.
func ensureTracefs() error {
	for _, p := range tracefsPaths {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil && st.Type == unix.TRACEFS_MAGIC {
			return nil
		}
	}
	target := tracefsPaths[0]
	if _, err := os.Stat(target); err != nil {
		return fmt.Errorf("mount tracefs: %w", err)
	}
	if err := unix.Mount("tracefs", target, "tracefs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("mount tracefs on %s: %w", target, err)
	}
	return nil
}
