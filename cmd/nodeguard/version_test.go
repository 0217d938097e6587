package main

import (
	"debug/buildinfo"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/lab/testbin"
	"github.com/nodeguard/nodeguard/loader"
)

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// runVersion runs `bin args...` and returns its standard output.
func runVersion(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return string(out)
}

func versionJSON(t *testing.T, bin string) versionInfo {
	t.Helper()
	out := runVersion(t, bin, "version", "--json")
	var v versionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("version --json is not JSON: %v\n%s", err, out)
	}
	return v
}

// checkCommon checks the fields that do not depend on how the binary was
// linked.
func checkCommon(t *testing.T, v versionInfo) {
	t.Helper()
	if v.GoVersion != runtime.Version() {
		t.Errorf("goVersion %q, the toolchain is %q", v.GoVersion, runtime.Version())
	}
	if want := runtime.GOOS + "/" + runtime.GOARCH; v.Platform != want {
		t.Errorf("platform %q, want %q", v.Platform, want)
	}
	if !sha256Hex.MatchString(v.BPFObjectsSHA256) {
		t.Errorf("bpfObjectsSHA256 %q is not 64 hex characters", v.BPFObjectsSHA256)
	}
	if want := loader.ObjectsSHA256(); v.BPFObjectsSHA256 != want {
		t.Errorf("bpfObjectsSHA256 %s, loader.ObjectsSHA256() %s", v.BPFObjectsSHA256, want)
	}
}

func TestVersionCommand(t *testing.T) {
	bin := buildBinary(t)

	t.Run("a plain go build reports version dev and the commit git stamped", func(t *testing.T) {
		v := versionJSON(t, bin)
		checkCommon(t, v)
		if v.Version != "dev" {
			t.Errorf("version %q, want dev (no -ldflags)", v.Version)
		}
		// The toolchain stamps the commit only where it may (GOFLAGS
		// may hold -buildvcs=false, and a tree without git has none):
		// the binary must report exactly what was stamped into it.
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatalf("read the binary's build information: %v", err)
		}
		want := "unknown"
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				want = s.Value
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.modified" && s.Value == "true" && want != "unknown" {
				want += "-dirty"
			}
		}
		if v.Commit != want {
			t.Errorf("commit %q, the binary's stamp says %q", v.Commit, want)
		}
	})

	t.Run("the text and --version print every field the JSON has", func(t *testing.T) {
		v := versionJSON(t, bin)
		text := runVersion(t, bin, "version")
		for _, line := range []string{
			"version:      " + v.Version,
			"commit:       " + v.Commit,
			"go:           " + v.GoVersion + " " + v.Platform,
			"bpf objects:  sha256:" + v.BPFObjectsSHA256,
		} {
			if !strings.Contains(text, line+"\n") {
				t.Errorf("version does not print %q:\n%s", line, text)
			}
		}
		if flag := runVersion(t, bin, "--version"); flag != text {
			t.Errorf("--version printed\n%s\nversion printed\n%s", flag, text)
		}
	})

	t.Run("the Makefile's build sets version and commit from git", func(t *testing.T) {
		if _, err := exec.LookPath("make"); err != nil {
			t.Skip("no make here")
		}
		// make -n prints the build command with VERSION and COMMIT
		// expanded; running that command is running make build without
		// touching bin/.
		linked := filepath.Join(testbin.Dir(), "nodeguard-make")
		dry := exec.Command("make", "-s", "--no-print-directory", "-n", "build", "BIN="+linked)
		dry.Dir = "../.."
		script, err := dry.Output()
		if err != nil {
			t.Fatalf("make -n build: %v", err)
		}
		wantVersion := regexp.MustCompile(`-X main\.version=([^ ']+)`).FindStringSubmatch(string(script))
		wantCommit := regexp.MustCompile(`-X main\.commit=([^ ']+)`).FindStringSubmatch(string(script))
		if wantVersion == nil || wantCommit == nil {
			t.Fatalf("make build sets no version or commit:\n%s", script)
		}
		build := exec.Command("sh", "-ec", string(script))
		build.Dir = "../.."
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		v := versionJSON(t, linked)
		checkCommon(t, v)
		if v.Version != wantVersion[1] || v.Commit != wantCommit[1] {
			t.Errorf("version %q commit %q, make build linked %q and %q", v.Version, v.Commit, wantVersion[1], wantCommit[1])
		}
		rev, _ := strings.CutSuffix(v.Commit, "-dirty")
		if out, err := exec.Command("git", "cat-file", "-e", rev+"^{commit}").CombinedOutput(); len(rev) != 40 || err != nil {
			t.Errorf("commit %q is not a full hash of this repository: %v %s", v.Commit, err, out)
		}
	})
}

func TestBuildCommit(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	stamped := func(settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, tc := range []struct {
		name   string
		linked string
		bi     *debug.BuildInfo
		want   string
	}{
		{"the commit set at link time wins over the stamp", "abc", stamped("vcs.revision", rev), "abc"},
		{"a clean checkout's revision is the commit", "", stamped("vcs.revision", rev, "vcs.modified", "false"), rev},
		{"a modified tree is marked dirty", "", stamped("vcs.revision", rev, "vcs.modified", "true"), rev + "-dirty"},
		{"a build without a stamp is unknown", "", stamped("-compiler", "gc"), "unknown"},
		{"a binary without build information is unknown", "", nil, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildCommit(tc.linked, tc.bi); got != tc.want {
				t.Errorf("buildCommit = %q, want %q", got, tc.want)
			}
		})
	}
}
