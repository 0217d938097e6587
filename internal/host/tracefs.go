package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Where tracefs lives: its own mount point since Linux 4.1, and the older
// spelling under debugfs (automounted on first access).
const (
	TracefsPath        = "/sys/kernel/tracing"
	TracefsDebugfsPath = "/sys/kernel/debug/tracing"
)

// Tracefs returns the mount point of tracefs: TracefsPath, or else
// TracefsDebugfsPath. It fails with ErrUnsupported, naming what it found at
// each, when neither is a tracefs.
func Tracefs() (string, error) {
	return tracefsAt(TracefsPath, TracefsDebugfsPath)
}

// EnsureTracefs returns the mount point of tracefs, mounting a fresh
// tracefs on TracefsPath first when neither place has one (minimal systems
// and freshly booted machines leave it unmounted until something needs it;
// the debugfs spelling automounts only where debugfs itself is mounted).
// Classic tracepoint attach needs it: perf_event_open takes the tracepoint
// id from events/<group>/<name>/id. A new tracefs mount is harmless, what
// `mount -t tracefs tracefs /sys/kernel/tracing` does, and shares the one
// kernel tracing instance. Mounting needs CAP_SYS_ADMIN; without it the
// error says so and wraps the search's ErrUnsupported.
func EnsureTracefs() (string, error) {
	root, err := Tracefs()
	if err == nil {
		return root, nil
	}
	if _, serr := os.Stat(TracefsPath); serr != nil {
		return "", fmt.Errorf("mount tracefs: %w (%w)", serr, err)
	}
	if merr := unix.Mount("tracefs", TracefsPath, "tracefs", 0, ""); merr != nil && !errors.Is(merr, unix.EBUSY) {
		return "", fmt.Errorf("mount tracefs on %s: %w (%w)", TracefsPath, merr, err)
	}
	return tracefsAt(TracefsPath)
}

func tracefsAt(candidates ...string) (string, error) {
	var why []string
	for _, p := range candidates {
		var st unix.Statfs_t
		// statfs follows the debugfs automount, so an unmounted
		// /sys/kernel/debug/tracing is mounted by looking at it.
		if err := unix.Statfs(p, &st); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		if st.Type == unix.TRACEFS_MAGIC {
			return p, nil
		}
		why = append(why, fmt.Sprintf("%s: not tracefs (magic %#x)", p, st.Type))
	}
	return "", fmt.Errorf("find tracefs: %w: %s", ErrUnsupported, strings.Join(why, "; "))
}

// CheckTracepoint returns nil when tracepoint category/name (e.g.
// "oom", "mark_victim") exists, and otherwise says why not: tracefs
// missing and not mountable (EnsureTracefs), the event unknown to this kernel (ErrUnsupported), or tracefs
// not readable.
func CheckTracepoint(category, name string) error {
	root, err := EnsureTracefs()
	if err != nil {
		return fmt.Errorf("check tracepoint %s/%s: %w", category, name, err)
	}
	return tracepointIn(root, category, name)
}

// TracepointExists reports whether CheckTracepoint finds the tracepoint.
func TracepointExists(category, name string) bool {
	return CheckTracepoint(category, name) == nil
}

func tracepointIn(root, category, name string) error {
	for _, c := range []string{category, name} {
		if c == "" || c == "." || c == ".." || strings.ContainsAny(c, "/\x00") {
			return fmt.Errorf("check tracepoint %q/%q: %q is not a valid name", category, name, c)
		}
	}
	// Every event directory has an "id" file; a category directory alone
	// does not make an event.
	p := filepath.Join(root, "events", category, name, "id")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("check tracepoint %s/%s: %w: %w", category, name, ErrUnsupported, err)
		}
		return fmt.Errorf("check tracepoint %s/%s: %w", category, name, err)
	}
	return nil
}
