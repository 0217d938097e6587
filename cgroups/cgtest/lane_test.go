package cgtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups"
)

// modeRecorder is a testing.TB that records Skip and Fatal instead of
// stopping the goroutine.
type modeRecorder struct {
	testing.TB
	skipped, failed string
}

func (r *modeRecorder) Helper()                           {}
func (r *modeRecorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *modeRecorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func layoutOf(m cgroups.Mode) func() (*cgroups.Layout, error) {
	return func() (*cgroups.Layout, error) { return &cgroups.Layout{Mode: m}, nil }
}

func failing(err error) func() (*cgroups.Layout, error) {
	return func() (*cgroups.Layout, error) { return nil, err }
}

func TestLane(t *testing.T) {
	tests := []struct {
		name     string
		kernel   string
		discover func() (*cgroups.Layout, error)
		want     string
	}{
		{"the VM lane is named after its pure v2 layout", "6.12", layoutOf(cgroups.ModeV2), "vm-v2"},
		{"the development machines are the hybrid host lane", "", layoutOf(cgroups.ModeHybrid), "host-hybrid"},
		{"a pure v2 host is the v2 host lane", "", layoutOf(cgroups.ModeV2), "host-v2"},
		{"an undiscoverable layout is unknown", "", failing(cgroups.ErrUnsupported), "host-unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == EnvVMKernel {
					return tt.kernel
				}
				return ""
			}
			if got := lane(getenv, tt.discover); got != tt.want {
				t.Errorf("lane() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRequireMode(t *testing.T) {
	tests := []struct {
		name        string
		discover    func() (*cgroups.Layout, error)
		modes       []cgroups.Mode
		env         string
		wantSkip    string // substring; "" means no skip
		wantFailure string // substring; "" means no failure
	}{
		{name: "a matching mode neither skips nor fails", discover: layoutOf(cgroups.ModeV2), modes: []cgroups.Mode{cgroups.ModeV2}, env: "1"},
		{name: "any of several modes matches", discover: layoutOf(cgroups.ModeHybrid), modes: []cgroups.Mode{cgroups.ModeV2, cgroups.ModeHybrid}},
		{name: "another mode skips with the reason", discover: layoutOf(cgroups.ModeHybrid), modes: []cgroups.Mode{cgroups.ModeV2},
			wantSkip: "needs cgroup mode v2; this lane is hybrid"},
		{name: "another mode still skips when privileged tests are required", discover: layoutOf(cgroups.ModeHybrid), modes: []cgroups.Mode{cgroups.ModeV2}, env: "1",
			wantSkip: "needs cgroup mode v2; this lane is hybrid"},
		{name: "several wanted modes are all named", discover: layoutOf(cgroups.ModeV1), modes: []cgroups.Mode{cgroups.ModeV2, cgroups.ModeHybrid},
			wantSkip: "needs cgroup mode v2 or hybrid; this lane is v1"},
		{name: "a host without cgroups skips by default", discover: failing(fmt.Errorf("no mounts: %w", cgroups.ErrUnsupported)), modes: []cgroups.Mode{cgroups.ModeV2},
			wantSkip: "no usable cgroups"},
		{name: "a host without cgroups fails when privileged tests are required", discover: failing(fmt.Errorf("no mounts: %w", cgroups.ErrUnsupported)), modes: []cgroups.Mode{cgroups.ModeV2}, env: "1",
			wantFailure: "no usable cgroups"},
		{name: "a malformed host file fails", discover: failing(fmt.Errorf("parse: %w", cgroups.ErrMalformed)), modes: []cgroups.Mode{cgroups.ModeV2},
			wantFailure: "discover cgroup mode"},
		{name: "asking for no mode is a mistake", discover: layoutOf(cgroups.ModeV2),
			wantFailure: "at least one mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRequirePrivileged, tt.env)
			r := &modeRecorder{TB: t}
			requireMode(r, tt.discover, tt.modes...)
			check := func(what, got, want string) {
				t.Helper()
				switch {
				case want == "" && got != "":
					t.Errorf("%s %q, want none", what, got)
				case want != "" && !strings.Contains(got, want):
					t.Errorf("%s %q, want one containing %q", what, got, want)
				}
			}
			check("skipped with", r.skipped, tt.wantSkip)
			check("failed with", r.failed, tt.wantFailure)
		})
	}
}

// In whichever lane runs this, RequireMode agrees with Lane about the mode.
func TestRequireModeAgreesWithLane(t *testing.T) {
	l, err := cgroups.Discover()
	if errors.Is(err, cgroups.ErrUnsupported) {
		t.Skipf("no cgroups here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	lane := Lane()
	if !strings.HasSuffix(lane, "-"+l.Mode.String()) {
		t.Fatalf("Lane() = %q, want it to end in the discovered mode %v", lane, l.Mode)
	}
	t.Logf("lane %s", lane)
	r := &modeRecorder{TB: t}
	RequireMode(r, l.Mode)
	if r.skipped != "" || r.failed != "" {
		t.Errorf("RequireMode(%v) in lane %s: skipped %q, failed %q", l.Mode, lane, r.skipped, r.failed)
	}
}
