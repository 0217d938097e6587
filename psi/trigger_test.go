package psi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const ms = time.Millisecond

func TestUnprivilegedFallback(t *testing.T) {
	tests := []struct {
		name          string
		stall, window time.Duration
		wantStall     time.Duration
		wantWindow    time.Duration
		wantFallback  bool
	}{
		{"500 ms becomes 2 s and the stall keeps its 30% share", 150 * ms, 500 * ms, 600 * ms, 2 * time.Second, true},
		{"1 s becomes 2 s and the stall doubles", 100 * ms, time.Second, 200 * ms, 2 * time.Second, true},
		{"3 s rounds up to 4 s, not down to 2 s", 300 * ms, 3 * time.Second, 400 * ms, 4 * time.Second, true},
		{"9.5 s rounds up to the 10 s maximum", 950 * ms, 9500 * ms, time.Second, 10 * time.Second, true},
		{"a stall equal to the window stays equal", 500 * ms, 500 * ms, 2 * time.Second, 2 * time.Second, true},
		{"a 1 µs stall scales to 4 µs", time.Microsecond, 500 * ms, 4 * time.Microsecond, 2 * time.Second, true},
		{"a 2 s window needs no fallback", 200 * ms, 2 * time.Second, 200 * ms, 2 * time.Second, false},
		{"a 10 s window needs no fallback", time.Second, 10 * time.Second, time.Second, 10 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Trigger{Path: "/proc/pressure/memory", Kind: KindFull, Stall: tt.stall, Window: tt.window}
			got, ok := unprivileged(in)
			if ok != tt.wantFallback || got.Stall != tt.wantStall || got.Window != tt.wantWindow {
				t.Errorf("unprivileged(%v) = %v, %v; want %v/%v, %v", in, got, ok, tt.wantStall, tt.wantWindow, tt.wantFallback)
			}
			if got.Path != in.Path || got.Kind != in.Kind {
				t.Errorf("unprivileged(%v) changed path or kind: %v", in, got)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("fallback %v is invalid: %v", got, err)
			}
		})
	}
}

func TestTriggerValidate(t *testing.T) {
	ok := Trigger{Path: "/proc/pressure/memory", Kind: KindSome, Stall: 150 * ms, Window: 500 * ms}
	tests := []struct {
		name    string
		edit    func(*Trigger)
		wantErr string
	}{
		{"the kernel documentation's example is valid", func(*Trigger) {}, ""},
		{"a full trigger over 10 s is valid", func(t *Trigger) { t.Kind, t.Window, t.Stall = KindFull, 10*time.Second, 10*time.Second }, ""},
		{"an empty path is invalid", func(t *Trigger) { t.Path = "" }, "empty path"},
		{"an unknown kind is invalid", func(t *Trigger) { t.Kind = "partial" }, "kind"},
		{"a window below 500 ms is invalid", func(t *Trigger) { t.Window = 499 * ms }, "window"},
		{"a window above 10 s is invalid", func(t *Trigger) { t.Window = 10*time.Second + time.Microsecond }, "window"},
		{"a full trigger on the system irq file is valid", func(t *Trigger) { t.Path, t.Kind = "/proc/pressure/irq", KindFull }, ""},
		{"a some trigger on the system irq file is invalid", func(t *Trigger) { t.Path = "/proc/pressure/irq" }, "irq"},
		{"a some trigger on a cgroup irq.pressure is invalid", func(t *Trigger) { t.Path = "/sys/fs/cgroup/a/irq.pressure" }, "irq"},
		{"a zero stall is invalid", func(t *Trigger) { t.Stall = 0 }, "stall"},
		{"a sub-microsecond stall is invalid", func(t *Trigger) { t.Stall = 999 }, "stall"},
		{"a stall longer than the window is invalid", func(t *Trigger) { t.Stall = 501 * ms }, "stall"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := ok
			tt.edit(&tr)
			err := tr.Validate()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate(%v) = %v, want an error saying %q", tr, err, tt.wantErr)
			}
		})
	}
}

func TestAppendSpec(t *testing.T) {
	tests := []struct {
		name string
		tr   Trigger
		want string
	}{
		{"durations are written in microseconds and end in NUL", Trigger{Kind: KindSome, Stall: 150 * ms, Window: 500 * ms}, "some 150000 500000\x00"},
		{"full triggers keep their kind", Trigger{Kind: KindFull, Stall: time.Microsecond, Window: 10 * time.Second}, "full 1 10000000\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(appendSpec(nil, tt.tr)); got != tt.want {
				t.Errorf("appendSpec() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestArm(t *testing.T) {
	fast := "some 150000 500000\x00"
	slow := "some 600000 2000000\x00"
	tr := Trigger{Path: "/proc/pressure/memory", Kind: KindSome, Stall: 150 * ms, Window: 500 * ms}
	tests := []struct {
		name       string
		tr         Trigger
		kernel     map[string]error // the kernel's answer per spec
		wantTried  []string
		wantWindow time.Duration
		wantFell   bool
		wantErr    []error
	}{
		{
			name:       "a privileged opener gets the window it asked for",
			tr:         tr,
			kernel:     map[string]error{fast: nil},
			wantTried:  []string{fast},
			wantWindow: 500 * ms,
		},
		{
			name:       "EINVAL for the window falls back to 2 s with the same stall share",
			tr:         tr,
			kernel:     map[string]error{fast: unix.EINVAL},
			wantTried:  []string{fast, slow},
			wantWindow: 2 * time.Second,
			wantFell:   true,
		},
		{
			name:       "EPERM falls back too",
			tr:         tr,
			kernel:     map[string]error{fast: unix.EPERM},
			wantTried:  []string{fast, slow},
			wantWindow: 2 * time.Second,
			wantFell:   true,
		},
		{
			name:       "EACCES falls back too",
			tr:         tr,
			kernel:     map[string]error{fast: unix.EACCES},
			wantTried:  []string{fast, slow},
			wantWindow: 2 * time.Second,
			wantFell:   true,
		},
		{
			name:      "when both are refused the error carries both errnos",
			tr:        tr,
			kernel:    map[string]error{fast: unix.EINVAL, slow: unix.EPERM},
			wantTried: []string{fast, slow},
			wantErr:   []error{unix.EINVAL, unix.EPERM},
		},
		{
			name:      "an error that is no refusal is not retried",
			tr:        tr,
			kernel:    map[string]error{fast: unix.EBUSY},
			wantTried: []string{fast},
			wantErr:   []error{unix.EBUSY},
		},
		{
			name:      "a refused 2 s window has nothing to fall back to",
			tr:        Trigger{Path: tr.Path, Kind: KindSome, Stall: 600 * ms, Window: 2 * time.Second},
			kernel:    map[string]error{slow: unix.EINVAL},
			wantTried: []string{slow},
			wantErr:   []error{unix.EINVAL},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tried []string
			got, fb, err := arm(3, tt.tr, func(fd int, spec []byte) error {
				if fd != 3 {
					t.Errorf("write to fd %d, want 3", fd)
				}
				tried = append(tried, string(spec))
				return tt.kernel[string(spec)]
			})
			if strings.Join(tried, "|") != strings.Join(tt.wantTried, "|") {
				t.Errorf("tried %q, want %q", tried, tt.wantTried)
			}
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("arm() = %v, want an error", got)
				}
				for _, e := range tt.wantErr {
					if !errors.Is(err, e) {
						t.Errorf("error %q does not match %v", err, e)
					}
				}
				if !strings.Contains(err.Error(), tt.tr.Path) {
					t.Errorf("error %q does not name the file", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Window != tt.wantWindow || (fb.refusal != nil) != tt.wantFell {
				t.Errorf("arm() = %v, fallback %v; want window %v, fallback %v", got, fb.refusal, tt.wantWindow, tt.wantFell)
			}
			if tt.wantFell && (fb.asked != tt.tr || fb.used != got) {
				t.Errorf("fallback records %v -> %v, want %v -> %v", fb.asked, fb.used, tt.tr, got)
			}
		})
	}
}

func TestDeliverNeverBlocks(t *testing.T) {
	w := &Watcher{
		trig:  []Trigger{{Path: "a"}, {Path: "b"}},
		fired: make([]atomic.Uint64, 2),
	}
	wake := make(chan Wake, 1)
	now := time.Unix(1, 0)
	w.deliver(wake, 1, now) // fits
	w.deliver(wake, 1, now) // channel full: dropped
	w.deliver(wake, 0, now) // dropped
	w.deliver(nil, 0, now)  // no consumer: dropped
	if got := <-wake; got.Index != 1 || got.Trigger.Path != "b" || !got.Time.Equal(now) {
		t.Errorf("delivered %+v, want trigger 1 at %v", got, now)
	}
	if w.Fired(0) != 2 || w.Fired(1) != 2 || w.Dropped() != 3 {
		t.Errorf("fired %d, %d, dropped %d; want 2, 2, 3", w.Fired(0), w.Fired(1), w.Dropped())
	}
	if w.Fired(-1) != 0 || w.Fired(2) != 0 {
		t.Errorf("Fired out of range is not 0")
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestNewWatcherErrors(t *testing.T) {
	dir := t.TempDir()
	notPressure := filepath.Join(dir, "regular")
	writeFile(t, notPressure, "")
	good := Trigger{Path: notPressure, Kind: KindSome, Stall: 600 * ms, Window: 2 * time.Second}
	tests := []struct {
		name     string
		triggers []Trigger
		want     error // nil: only check that it fails
		wantText string
	}{
		{
			name:     "an invalid trigger is rejected before anything is opened",
			triggers: []Trigger{good, {Path: notPressure, Kind: "some", Stall: 0, Window: time.Second}},
			wantText: "trigger 1",
		},
		{
			name:     "a missing pressure file is unsupported",
			triggers: []Trigger{{Path: filepath.Join(dir, "memory.pressure"), Kind: KindSome, Stall: 150 * ms, Window: 500 * ms}},
			want:     ErrUnsupported,
			wantText: "memory.pressure",
		},
		{
			// A regular file takes the write but cannot be polled.
			name:     "a file that is no pressure file fails and leaves nothing open",
			triggers: []Trigger{good},
			wantText: "epoll_ctl",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := openFDs(t)
			w, err := NewWatcher(nil, tt.triggers)
			if err == nil {
				w.Close()
				t.Fatal("NewWatcher() succeeded, want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("NewWatcher() = %v, want an error matching %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("NewWatcher() = %q, want it to say %q", err, tt.wantText)
			}
			if after := openFDs(t); after != before {
				t.Errorf("%d descriptors open after the failure, %d before", after, before)
			}
		})
	}
}

// runBound bounds how long a test waits for Run to return after it was
// told to stop; a kick through the eventfd takes microseconds.
const runBound = 2 * time.Second

func TestRunStops(t *testing.T) {
	// A Watcher without triggers still runs its epoll loop, so Run's
	// stopping is tested without privileges.
	t.Run("Run returns ctx.Err() promptly after cancel and can run again", func(t *testing.T) {
		w, err := NewWatcher(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		for range 2 {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, nil) }()
			time.Sleep(20 * ms) // let it block in epoll_wait
			start := time.Now()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Run() = %v, want context.Canceled", err)
				}
				t.Logf("Run returned %v after cancel", time.Since(start))
			case <-time.After(runBound):
				t.Fatalf("Run still running %v after cancel", runBound)
			}
		}
	})
	t.Run("Close stops Run with ErrClosed and later Runs fail", func(t *testing.T) {
		w, err := NewWatcher(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(t.Context(), nil) }()
		time.Sleep(20 * ms)
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("Run() = %v, want ErrClosed", err)
			}
		case <-time.After(runBound):
			t.Fatalf("Run still running %v after Close", runBound)
		}
		if err := <-closed; err != nil {
			t.Errorf("Close() = %v", err)
		}
		if err := w.Run(t.Context(), nil); !errors.Is(err, ErrClosed) {
			t.Errorf("Run() after Close = %v, want ErrClosed", err)
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close() = %v", err)
		}
	})
	t.Run("a second concurrent Run is refused", func(t *testing.T) {
		w, err := NewWatcher(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx, nil) }()
		deadline := time.Now().Add(runBound)
		for !w.active() && time.Now().Before(deadline) {
			time.Sleep(ms)
		}
		if err := w.Run(ctx, nil); err == nil || !strings.Contains(err.Error(), "already running") {
			t.Errorf("second Run() = %v, want already running", err)
		}
		cancel()
		<-done
	})
	t.Run("a cancelled context stops Run before it waits", func(t *testing.T) {
		w, err := NewWatcher(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := w.Run(ctx, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("Run() = %v, want context.Canceled", err)
		}
	})
}

// active reports whether a Run is in progress.
func (w *Watcher) active() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running != nil
}
