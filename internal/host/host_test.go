package host

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func TestKernelReleaseMatchesProc(t *testing.T) {
	got, err := KernelRelease()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(b)); got != want {
		t.Errorf("KernelRelease() = %q, /proc says %q", got, want)
	}
}

func TestBTF(t *testing.T) {
	tests := []struct {
		name        string
		path        func(t *testing.T) string
		wantPresent bool
	}{
		{"a missing file is absent", func(t *testing.T) string { return filepath.Join(t.TempDir(), "vmlinux") }, false},
		{"an empty file is absent", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "vmlinux")
			if err := os.WriteFile(p, nil, 0o444); err != nil {
				t.Fatal(err)
			}
			return p
		}, false},
		{"a directory is absent", func(t *testing.T) string { return t.TempDir() }, false},
		{"a non-empty file is present", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "vmlinux")
			if err := os.WriteFile(p, []byte{0x9f, 0xeb}, 0o444); err != nil {
				t.Fatal(err)
			}
			return p
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := tt.path(t)
			present, got := btfAt(p)
			if present != tt.wantPresent {
				t.Errorf("present = %v, want %v", present, tt.wantPresent)
			}
			if want := map[bool]string{true: p, false: ""}[tt.wantPresent]; got != want {
				t.Errorf("path = %q, want %q", got, want)
			}
		})
	}
	t.Run("this kernel exposes its BTF", func(t *testing.T) {
		present, p := BTF()
		cgtest.Need(t, present, "no BTF at "+BTFPath)
		if p != BTFPath {
			t.Errorf("path = %q, want %q", p, BTFPath)
		}
	})
}

// capEff reads this process's effective capability set from /proc, the
// witness HasCapability is checked against.
func capEff(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no CapEff line")
	return 0
}

func TestHasCapability(t *testing.T) {
	eff := capEff(t)
	last, err := lastCap()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cap     int
		wantErr error // nil: the answer must match /proc
		anyErr  bool
	}{
		{name: "CAP_SYS_ADMIN matches /proc", cap: CapSysAdmin},
		{name: "CAP_SYS_RESOURCE matches /proc", cap: CapSysResource},
		{name: "CAP_PERFMON matches /proc", cap: CapPerfmon},
		{name: "CAP_BPF matches /proc", cap: CapBPF},
		{name: "a capability beyond the kernel's last is unsupported", cap: last + 1, wantErr: ErrUnsupported},
		{name: "a negative capability is an error", cap: -1, anyErr: true},
		{name: "a capability above 63 is an error", cap: 64, anyErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := HasCapability(tt.cap)
			switch {
			case tt.anyErr || tt.wantErr != nil:
				if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Errorf("HasCapability(%d) = %v, %v; want an error matching %v", tt.cap, got, err, tt.wantErr)
				}
				if got {
					t.Errorf("HasCapability(%d) = true with an error", tt.cap)
				}
			case err != nil:
				t.Errorf("HasCapability(%d): %v", tt.cap, err)
			default:
				if want := eff&(1<<uint(tt.cap)) != 0; got != want {
					t.Errorf("HasCapability(%d) = %v, /proc CapEff says %v", tt.cap, got, want)
				}
			}
		})
	}
}

func TestIsRootMatchesEUID(t *testing.T) {
	if got, want := IsRoot(), os.Geteuid() == 0; got != want {
		t.Errorf("IsRoot() = %v, want %v", got, want)
	}
}
