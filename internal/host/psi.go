package host

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// PSIDir holds the system-wide pressure files.
const PSIDir = "/proc/pressure"

// PSI trigger windows PSITriggerWindow tries, fastest first.
const (
	// FastTriggerWindow is the kernel's smallest trigger window
	// (WINDOW_MIN_US), allowed to openers with CAP_SYS_RESOURCE.
	FastTriggerWindow = 500 * time.Millisecond
	// UnprivilegedTriggerWindow is the smallest window allowed without
	// CAP_SYS_RESOURCE: since Linux 6.5 such windows must be multiples of
	// 2 s, and such triggers are evaluated on the 2 s averaging tick.
	UnprivilegedTriggerWindow = 2 * time.Second
	// probeStall is the stall threshold of the probe trigger. Any value
	// from 1 µs up to the window would do; 150 ms is the kernel
	// documentation's example.
	probeStall = 150 * time.Millisecond
)

// PSISystem checks every system-wide pressure file and returns, per
// resource ("cpu", "memory", "io", "irq"), nil when it is readable and
// parses, or the error that says why not (ErrUnsupported for a missing file
// or PSI disabled at boot, ErrMalformed for content that does not parse).
func PSISystem() map[string]error {
	return psiSystemIn(PSIDir)
}

func psiSystemIn(dir string) map[string]error {
	// irq needs Linux 6.1 with CONFIG_IRQ_TIME_ACCOUNTING.
	resources := []string{"cpu", "memory", "io", "irq"}
	out := make(map[string]error, len(resources))
	for _, r := range resources {
		out[r] = checkPressureFile(filepath.Join(dir, r))
	}
	return out
}

// PSICgroup checks that memory.pressure in the cgroup2 directory dir is
// readable and parses. A v1 directory, or a cgroup with PSI disabled, gives
// ErrUnsupported.
func PSICgroup(dir string) error {
	return checkPressureFile(filepath.Join(dir, "memory.pressure"))
}

// checkPressureFile reads and validates one pressure file.
func checkPressureFile(name string) error {
	b, err := os.ReadFile(name)
	if err != nil {
		// ENOENT: no PSI (or not a cgroup2 directory); EOPNOTSUPP: PSI
		// compiled in but disabled (psi=0, or cgroup.pressure=0).
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("read %s: %w: %w", name, ErrUnsupported, err)
		}
		return fmt.Errorf("read %s: %w", name, err)
	}
	return parsePressure(b, name)
}

// parsePressure validates the format of Documentation/accounting/psi.rst:
// one or two lines, "some" and/or "full", each with avg10, avg60, avg300
// (percentages) and total (microseconds).
func parsePressure(b []byte, name string) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	n, lines := 0, 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if line == "" {
			continue
		}
		lines++
		f := strings.Fields(line)
		if len(f) != 5 || (f[0] != "some" && f[0] != "full") {
			return fmt.Errorf("parse %s line %d: %w: want \"some|full avg10=.. avg60=.. avg300=.. total=..\", have %q", name, n, ErrMalformed, line)
		}
		for i, key := range []string{"avg10", "avg60", "avg300", "total"} {
			v, ok := strings.CutPrefix(f[i+1], key+"=")
			if !ok {
				return fmt.Errorf("parse %s line %d: %w: field %d is %q, want %s=", name, n, ErrMalformed, i+2, f[i+1], key)
			}
			var err error
			if key == "total" {
				_, err = strconv.ParseUint(v, 10, 64)
			} else {
				_, err = strconv.ParseFloat(v, 64)
			}
			if err != nil {
				return fmt.Errorf("parse %s line %d: %w: %s: %w", name, n, ErrMalformed, key, err)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if lines == 0 {
		return fmt.Errorf("parse %s: %w: empty", name, ErrMalformed)
	}
	return nil
}

// PSITriggerWindow finds the smallest PSI trigger window the kernel allows
// this process on the pressure file at path (a /proc/pressure file or a
// cgroup2 *.pressure file): it writes a "some" trigger with
// FastTriggerWindow and, if the kernel refuses it with EINVAL, EPERM or
// EACCES, one with UnprivilegedTriggerWindow. Each attempt uses its own
// descriptor and closes it, which destroys the trigger. The error names
// both attempts when both fail.
func PSITriggerWindow(path string) (time.Duration, error) {
	return triggerWindow(path, tryTrigger)
}

// triggerWindow is PSITriggerWindow with the attempt injected.
func triggerWindow(path string, try func(path, spec string) error) (time.Duration, error) {
	fast := TriggerSpec("some", probeStall, FastTriggerWindow)
	errFast := try(path, fast)
	if errFast == nil {
		return FastTriggerWindow, nil
	}
	if !errors.Is(errFast, unix.EINVAL) && !errors.Is(errFast, unix.EPERM) && !errors.Is(errFast, unix.EACCES) {
		// Not a refusal of the window: a slower one would fail alike.
		return 0, fmt.Errorf("probe psi trigger window of %s: %q: %w", path, fast, errFast)
	}
	slow := TriggerSpec("some", probeStall, UnprivilegedTriggerWindow)
	errSlow := try(path, slow)
	if errSlow == nil {
		return UnprivilegedTriggerWindow, nil
	}
	return 0, fmt.Errorf("probe psi trigger window of %s: %q: %w; %q: %w", path, fast, errFast, slow, errSlow)
}

// TriggerSpec formats a PSI trigger: kind ("some" or "full"), the stall
// threshold and the window, in microseconds, as the kernel parses them.
func TriggerSpec(kind string, stall, window time.Duration) string {
	return fmt.Sprintf("%s %d %d", kind, stall.Microseconds(), window.Microseconds())
}

// tryTrigger opens path, writes spec as a trigger and closes it again.
//
// The write includes the terminating NUL: the /proc/pressure handler
// (psi_write) overwrites the LAST byte written with NUL, so without it
// "some 150000 500000" would arrive as "some 150000 50000".
func tryTrigger(path, spec string) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, append([]byte(spec), 0)); err != nil {
		return &fs.PathError{Op: "write trigger to", Path: path, Err: err}
	}
	return nil
}
