package psi

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Kinds of stall a trigger watches, as in the pressure files.
const (
	KindSome = "some" // at least one task stalled
	KindFull = "full" // all non-idle tasks stalled at once
)

// Trigger window bounds, as the kernel checks them (kernel/sched/psi.c).
const (
	// MinWindow is WINDOW_MIN_US: the shortest window, allowed to
	// openers with CAP_SYS_RESOURCE.
	MinWindow = 500 * time.Millisecond
	// MaxWindow is WINDOW_MAX_US: the longest window.
	MaxWindow = 10 * time.Second
	// UnprivilegedStep is the granularity of windows for openers without
	// CAP_SYS_RESOURCE (Linux 6.5+): their windows must be multiples of
	// 2 s, because their triggers are evaluated on the 2 s averaging
	// tick instead of by the real-time poller.
	UnprivilegedStep = 2 * time.Second
)

// Trigger asks the kernel for a wake-up when tasks stall on a resource for
// at least Stall within any Window.
type Trigger struct {
	// Path is a pressure file: /proc/pressure/<resource> or
	// <cgroup2 dir>/<resource>.pressure.
	Path string
	// Kind is KindSome or KindFull. irq accepts only KindFull.
	Kind string
	// Stall is the stall time that fires the trigger, from 1 µs to
	// Window; Window is from MinWindow to MaxWindow. Both are written in
	// whole microseconds.
	Stall, Window time.Duration
}

// String formats t for logs and errors, e.g. "some 150ms/500ms on
// /proc/pressure/memory".
func (t Trigger) String() string {
	return fmt.Sprintf("%s %v/%v on %s", t.Kind, t.Stall, t.Window, t.Path)
}

// Validate checks t against the kernel's rules, so that a refusal by the
// kernel can only mean a window this process may not use.
func (t Trigger) Validate() error {
	switch {
	case t.Path == "":
		return fmt.Errorf("psi trigger %v: empty path", t)
	case t.Kind != KindSome && t.Kind != KindFull:
		return fmt.Errorf("psi trigger %v: kind %q is neither %q nor %q", t, t.Kind, KindSome, KindFull)
	case t.Kind == KindSome && (filepath.Base(t.Path) == string(IRQ) || filepath.Base(t.Path) == IRQ.CgroupFile()):
		return fmt.Errorf("psi trigger %v: irq pressure has only %q", t, KindFull)
	case t.Window < MinWindow || t.Window > MaxWindow:
		return fmt.Errorf("psi trigger %v: window outside %v..%v", t, MinWindow, MaxWindow)
	case t.Stall < time.Microsecond || t.Stall > t.Window:
		return fmt.Errorf("psi trigger %v: stall outside 1µs..window", t)
	}
	return nil
}

// appendSpec appends the trigger as the kernel parses it, "<kind> <stall
// µs> <window µs>", and the terminating NUL: the /proc/pressure write
// handler overwrites the last byte written with NUL, so without it
// "some 150000 500000" would arrive as "some 150000 50000".
func appendSpec(dst []byte, t Trigger) []byte {
	dst = append(dst, t.Kind...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, t.Stall.Microseconds(), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, t.Window.Microseconds(), 10)
	return append(dst, 0)
}

// unprivileged returns t with its window rounded up to the next multiple of
// UnprivilegedStep and its stall scaled by the same factor, so that the
// stall/window ratio (the pressure that fires it) stays the same: 150ms/500ms
// becomes 600ms/2s. ok is false when t's window already is such a multiple,
// so that falling back would not change anything.
func unprivileged(t Trigger) (_ Trigger, ok bool) {
	w := t.Window.Microseconds()
	step := UnprivilegedStep.Microseconds()
	if w%step == 0 {
		return t, false
	}
	nw := (w + step - 1) / step * step
	// stall <= window <= 10 s: the product stays below 10^14.
	ns := max(t.Stall.Microseconds()*nw/w, 1)
	t.Window, t.Stall = time.Duration(nw)*time.Microsecond, time.Duration(ns)*time.Microsecond
	return t, true
}

// refused reports whether err from writing a trigger is the kernel refusing
// the window for lack of CAP_SYS_RESOURCE: EINVAL from Linux 6.5 on (the
// spec itself was validated), EPERM or EACCES where a security module or an
// older rule says no.
func refused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}
