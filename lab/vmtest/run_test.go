package vmtest

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromEnv(t *testing.T) {
	c, err := ConfigFromEnv(envOf(map[string]string{EnvKernel: "6.12"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kernel != "6.12" || c.CacheDir != DefaultCacheDir || c.Timeout != DefaultTimeout || c.Memory != DefaultMemory || c.CPUs != DefaultCPUs || c.Console {
		t.Errorf("defaults: %+v", c)
	}
	c, err = ConfigFromEnv(envOf(map[string]string{EnvKernel: "6.1", EnvCache: "/c", EnvTimeout: "90", EnvMemory: "1G", EnvCPUs: "1", EnvConsole: "1"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.CacheDir != "/c" || c.Timeout != 90*time.Second || c.Memory != "1G" || c.CPUs != 1 || !c.Console {
		t.Errorf("overrides: %+v", c)
	}

	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no kernel", map[string]string{}, EnvKernel + " is not set"},
		{"an unknown kernel", map[string]string{EnvKernel: "5.10"}, "unknown kernel series"},
		{"a timeout that is not a duration", map[string]string{EnvKernel: "6.1", EnvTimeout: "soon"}, EnvTimeout},
		{"a timeout below a second", map[string]string{EnvKernel: "6.1", EnvTimeout: "10ms"}, "at least one second"},
		{"no vCPUs", map[string]string{EnvKernel: "6.1", EnvCPUs: "0"}, EnvCPUs},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ConfigFromEnv(envOf(tt.env), nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]time.Duration{"240": 240 * time.Second, "4m": 4 * time.Minute, "1s": time.Second} {
		if got, err := ParseTimeout(in); err != nil || got != want {
			t.Errorf("ParseTimeout(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

func TestParseTSCkHz(t *testing.T) {
	tests := []struct {
		name, cpuinfo string
		want          int
	}{
		{"an invariant TSC gives the host's frequency", "processor\t: 0\ncpu MHz\t\t: 2596.134\nflags\t\t: fpu tsc constant_tsc nonstop_tsc\n\nprocessor\t: 1\ncpu MHz\t\t: 1800.000\n", 2596134},
		{"a TSC that is not constant gives the default", "cpu MHz\t\t: 2596.134\nflags\t\t: fpu tsc\n", defaultTSCkHz},
		{"no frequency gives the default", "flags\t\t: constant_tsc\n", defaultTSCkHz},
		{"a nonsense frequency gives the default", "cpu MHz\t: 0.5\nflags\t: constant_tsc\n", defaultTSCkHz},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseTSCkHz([]byte(tt.cpuinfo)); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

func TestGuestEnv(t *testing.T) {
	host := []string{
		"PATH=/usr/bin", "HOME=/root", "NODEGUARD_REQUIRE_PRIVILEGED=1", "NODEGUARD_X=a=b",
		EnvKernel + "=stale", "GOTRACEBACK=all", "GOFLAGS=-mod=mod", "CGO_ENABLED=0",
	}
	got := GuestEnv(host, "6.12", "6.12.117+deb12-amd64")
	want := []string{"NODEGUARD_REQUIRE_PRIVILEGED=1", "NODEGUARD_X=a=b", "GOTRACEBACK=all",
		EnvKernel + "=6.12", EnvRelease + "=6.12.117+deb12-amd64"}
	if !slices.Equal(got, want) {
		t.Errorf("GuestEnv = %q, want %q", got, want)
	}
}

func TestQemuArgs(t *testing.T) {
	c := Config{Memory: "512M", CPUs: 2}
	args := qemuArgs(c, "/cache/vmlinux", "/tmp/x/initrd.cpio", "/tmp/x/console.log", 2596134)
	line := strings.Join(args, " ")
	for _, want := range []string{
		"-M microvm,pit=on", "-kernel /cache/vmlinux", "-initrd /tmp/x/initrd.cpio", "-m 512M", "-smp 2",
		"-no-reboot", "-nodefaults", "path=/tmp/x/console.log", "isa-serial,chardev=test,index=1",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("qemu args lack %q: %s", want, line)
		}
	}
	i := slices.Index(args, "-append")
	if i < 0 {
		t.Fatalf("no -append: %s", line)
	}
	cmdline := strings.Fields(args[i+1])
	for _, want := range []string{"console=ttyS0", "cgroup_no_v1=all", "tsc_early_khz=2596134", "tsc=reliable", "panic=-1"} {
		if !slices.Contains(cmdline, want) {
			t.Errorf("kernel command line lacks %q: %s", want, args[i+1])
		}
	}
}

func TestRunRefusesADynamicBinary(t *testing.T) {
	err := CheckStatic("/bin/ls")
	if errors.Is(err, ErrNotStatic) && !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("the error does not say how to fix it: %v", err)
	}
	if err == nil {
		t.Skip("/bin/ls is static here")
	}
	if !errors.Is(err, ErrNotStatic) {
		t.Fatalf("CheckStatic(/bin/ls) = %v, want ErrNotStatic", err)
	}
	if err := RunArchive(&strings.Builder{}, &RunSpec{Binary: "/bin/ls", Dir: "/work"}); !errors.Is(err, ErrNotStatic) {
		t.Errorf("RunArchive with /bin/ls = %v, want ErrNotStatic", err)
	}
}

func TestSweepStaleRuns(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, runDirPrefix+strconv.Itoa(os.Getpid())+"-1")
	dead := filepath.Join(dir, runDirPrefix+"2147483646-1") // above pid_max
	other := filepath.Join(dir, "unrelated-2147483646-1")
	for _, d := range []string{live, dead, other} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sweepStaleRuns(dir)
	for d, want := range map[string]bool{live: true, dead: false, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}
