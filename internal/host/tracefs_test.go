package host

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func TestTracefsAtRejectsOtherFilesystems(t *testing.T) {
	dir := t.TempDir()
	_, err := tracefsAt(dir, filepath.Join(dir, "missing"))
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("tracefsAt() = %v, want ErrUnsupported", err)
	}
	for _, want := range []string{dir + ": not tracefs", filepath.Join(dir, "missing") + ": no such file"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestTracepointIn(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "events", "oom", "mark_victim"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "events", "oom", "mark_victim", "id"), []byte("512\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "events", "oom", "no_id"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		category, tp   string
		want           error // nil: exists
		wantAnyFailure bool
	}{
		{name: "an event directory with an id exists", category: "oom", tp: "mark_victim"},
		{name: "an event directory without an id does not exist", category: "oom", tp: "no_id", want: ErrUnsupported},
		{name: "an unknown event is unsupported", category: "oom", tp: "nope", want: ErrUnsupported},
		{name: "an unknown category is unsupported", category: "nope", tp: "mark_victim", want: ErrUnsupported},
		{name: "a name with a slash is refused", category: "oom/../oom", tp: "mark_victim", wantAnyFailure: true},
		{name: "a dot-dot name is refused", category: "..", tp: "events", wantAnyFailure: true},
		{name: "an empty name is refused", category: "oom", tp: "", wantAnyFailure: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tracepointIn(root, tt.category, tt.tp)
			switch {
			case tt.wantAnyFailure:
				if err == nil || errors.Is(err, ErrUnsupported) {
					t.Errorf("tracepointIn() = %v, want a refusal", err)
				}
			case tt.want == nil && err != nil:
				t.Errorf("tracepointIn() = %v, want nil", err)
			case tt.want != nil && !errors.Is(err, tt.want):
				t.Errorf("tracepointIn() = %v, want an error matching %v", err, tt.want)
			}
		})
	}
}

// tracefsAtStart is what Tracefs found before any test of the package ran
// (package variables are set before TestMain and the tests).
var tracefsAtStart = func() error { _, err := Tracefs(); return err }()

func TestTracefsOnThisHost(t *testing.T) {
	cgtest.RequirePrivileged(t)
	// What the agent does before its first classic attach: on a freshly
	// booted machine nothing has mounted tracefs yet. The VM lane's guest
	// (NODEGUARD_VM_RELEASE set) boots like one, with neither tracefs nor
	// debugfs mounted, so there the mount itself is what is tested.
	inVM := os.Getenv("NODEGUARD_VM_RELEASE") != ""
	if inVM && tracefsAtStart == nil {
		t.Fatal("the VM lane's guest had tracefs mounted before the tests: its init must leave it unmounted, as on a freshly booted machine")
	}
	root, err := EnsureTracefs()
	if err != nil {
		t.Fatalf("EnsureTracefs (tracefs before the tests: %v): %v", tracefsAtStart, err)
	}
	if tracefsAtStart != nil {
		t.Logf("tracefs was not mounted (%v); EnsureTracefs mounted it", tracefsAtStart)
	}
	if again, err := Tracefs(); err != nil || again != root {
		t.Fatalf("Tracefs() after EnsureTracefs = %q, %v; want %q", again, err, root)
	}
	t.Logf("tracefs at %s", root)
	tests := []struct {
		name         string
		category, tp string
		want         bool
	}{
		{"the OOM victim tracepoint exists", "oom", "mark_victim", true},
		{"the cgroup mkdir tracepoint exists", "cgroup", "cgroup_mkdir", true},
		{"the memcg reclaim tracepoint exists", "vmscan", "mm_vmscan_memcg_reclaim_begin", true},
		{"a made-up tracepoint does not exist", "nodeguard", "nothing", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TracepointExists(tt.category, tt.tp); got != tt.want {
				t.Errorf("TracepointExists(%q, %q) = %v, want %v (%v)", tt.category, tt.tp, got, tt.want, CheckTracepoint(tt.category, tt.tp))
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
