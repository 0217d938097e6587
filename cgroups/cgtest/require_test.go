package cgtest

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Skip and Fatal instead of stopping
// the goroutine.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestNeed(t *testing.T) {
	tests := []struct {
		name        string
		ok          bool
		env         string
		wantSkip    bool
		wantFailure bool
	}{
		{name: "a present feature neither skips nor fails", ok: true, env: "1"},
		{name: "a missing feature skips by default", ok: false, env: "", wantSkip: true},
		{name: "a missing feature skips when the variable is not exactly 1", ok: false, env: "true", wantSkip: true},
		{name: "a missing feature fails when privileged tests are required", ok: false, env: "1", wantFailure: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRequirePrivileged, tt.env)
			r := &recorder{TB: t}
			Need(r, tt.ok, "no widget here")
			if got := r.skipped != ""; got != tt.wantSkip {
				t.Errorf("skipped = %q, want a skip: %v", r.skipped, tt.wantSkip)
			}
			if got := r.failed != ""; got != tt.wantFailure {
				t.Errorf("failed = %q, want a failure: %v", r.failed, tt.wantFailure)
			}
			for _, msg := range []string{r.skipped, r.failed} {
				if msg != "" && !strings.Contains(msg, "no widget here") {
					t.Errorf("message %q does not carry the reason", msg)
				}
			}
		})
	}
}
