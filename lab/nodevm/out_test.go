package nodevm

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// needE2fsprogs skips t without mkfs.ext4 and debugfs (the runner
// installs e2fsprogs; a non-login PATH may lack /usr/sbin).
func needE2fsprogs(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err == nil {
			continue
		}
		if _, err := os.Stat("/usr/sbin/" + tool); err != nil {
			t.Skipf("no %s (e2fsprogs): the node lane's runner installs it", tool)
		}
		t.Setenv("PATH", os.Getenv("PATH")+":/usr/sbin:/sbin")
	}
}

// putFiles makes files (path: content) beneath dir.
func putFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// imageOf makes an ext4 image of the tree at src with mkfs.ext4 -d, as
// the guest would leave the output disk.
func imageOf(t *testing.T, src string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "out.img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", OutLabel, "-O", "^has_journal", "-d", src, img, "8M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 -d: %v: %s", err, out)
	}
	return img
}

func readAll(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.Type()&os.ModeSymlink != 0 {
			got[filepath.ToSlash(rel)] = "symlink"
			return nil
		}
		b, err := os.ReadFile(p)
		got[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestCopyOut(t *testing.T) {
	needE2fsprogs(t)
	ctx := context.Background()

	t.Run("the guest's files and directories are copied, lost+found is not", func(t *testing.T) {
		src := t.TempDir()
		files := map[string]string{
			"race-quick/eviction.csv":   "rate_bytes_per_s,strategy\n",
			"race-quick/eviction.png":   "\x89PNG\r\n\x1a\n",
			"race-quick/sub/deeper.txt": "x",
			"top.txt":                   strings.Repeat("y", 300<<10),
		}
		putFiles(t, src, files)
		dir := filepath.Join(t.TempDir(), "out", "node") // made by CopyOut
		got, err := CopyOut(ctx, imageOf(t, src), dir)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"race-quick/eviction.csv", "race-quick/eviction.png", "race-quick/sub/deeper.txt", "top.txt"}
		if !slices.Equal(got, want) {
			t.Errorf("copied %q, want %q", got, want)
		}
		all := readAll(t, dir)
		if len(all) != len(files) {
			t.Errorf("the directory holds %q, want %d files", slices.Sorted(maps.Keys(all)), len(files))
		}
		for p, data := range files {
			if all[p] != data {
				t.Errorf("%s: %d bytes, want %d", p, len(all[p]), len(data))
			}
		}
		if _, err := os.Stat(filepath.Join(dir, lostFound)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("lost+found was copied: %v", err)
		}
	})

	t.Run("files of the same name are replaced and others kept", func(t *testing.T) {
		src := t.TempDir()
		putFiles(t, src, map[string]string{"race-quick/eviction.csv": "new"})
		dir := t.TempDir()
		putFiles(t, dir, map[string]string{"race-quick/eviction.csv": "an older and longer run", "race-full/eviction.csv": "full"})
		if _, err := CopyOut(ctx, imageOf(t, src), dir); err != nil {
			t.Fatal(err)
		}
		all := readAll(t, dir)
		if all["race-quick/eviction.csv"] != "new" || all["race-full/eviction.csv"] != "full" {
			t.Errorf("after the copy: %q", all)
		}
	})

	t.Run("a symbolic link the guest made is left out, and said so", func(t *testing.T) {
		src := t.TempDir()
		putFiles(t, src, map[string]string{"ok.txt": "ok"})
		if err := os.Symlink("/etc/passwd", filepath.Join(src, "escape")); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		got, err := CopyOut(ctx, imageOf(t, src), dir)
		if !errors.Is(err, errNotRegular) || !strings.Contains(err.Error(), "escape") {
			t.Errorf("err = %v, want one naming the link", err)
		}
		if !slices.Equal(got, []string{"ok.txt"}) {
			t.Errorf("copied %q", got)
		}
		if _, err := os.Lstat(filepath.Join(dir, "escape")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the link is in the host directory: %v", err)
		}
	})

	t.Run("an image that is not ext4 is an error", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "out.img")
		if err := os.WriteFile(img, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := CopyOut(ctx, img, t.TempDir()); err == nil || !strings.Contains(err.Error(), "debugfs") {
			t.Errorf("err = %v, want debugfs's complaint", err)
		}
	})

	t.Run("the output disk MakeOutImage makes is empty, labelled and has no journal", func(t *testing.T) {
		img := filepath.Join(t.TempDir(), "out.img")
		if err := MakeOutImage(ctx, nil, img); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(img)
		if err != nil || st.Size() != OutImageSize {
			t.Fatalf("image size %v (%v), want %d", st.Size(), err, OutImageSize)
		}
		out, err := exec.Command("debugfs", "-R", "stats", img).CombinedOutput()
		if err != nil {
			t.Fatal(err)
		}
		stats := string(out)
		if !strings.Contains(stats, "Filesystem volume name:   "+OutLabel) {
			t.Errorf("no label %s:\n%s", OutLabel, stats)
		}
		if strings.Contains(stats, "has_journal") {
			t.Errorf("the output disk has a journal (debugfs would not replay it)")
		}
		got, err := CopyOut(ctx, img, t.TempDir())
		if err != nil || len(got) != 0 {
			t.Errorf("an empty disk gave %q, %v", got, err)
		}
	})
}

func TestGuestEnvLeavesOutTheOutputDisk(t *testing.T) {
	env := guestEnv([]string{"NODEGUARD_NODE_RACE=full", EnvOut + "=/host/out", EnvOutDir + "=/host/elsewhere", "HOME=/root"}, "6.12.1")
	if !slices.Contains(env, "NODEGUARD_NODE_RACE=full") {
		t.Errorf("the race mode does not reach the guest: %q", env)
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, EnvOut+"=") || strings.HasPrefix(kv, "HOME=") {
			t.Errorf("%q reaches the guest", kv)
		}
	}
}

func TestRaceModes(t *testing.T) {
	for in, want := range map[string]string{"": RaceQuick, "quick": RaceQuick, "full": RaceFull, "off": RaceOff} {
		if got, err := ParseRace(in); err != nil || got != want {
			t.Errorf("ParseRace(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"Quick", "on", "1"} {
		if _, err := ParseRace(bad); err == nil {
			t.Errorf("ParseRace(%q): no error", bad)
		}
	}
	q, okq := Race(RaceQuick)
	f, okf := Race(RaceFull)
	if _, ok := Race(RaceOff); ok || !okq || !okf {
		t.Fatalf("Race: quick %v full %v, off must have none", okq, okf)
	}
	if f.Rates != "50Mi/s,200Mi/s,1Gi/s" || f.Trials != 3 {
		t.Errorf("the full race is not docs/benchmarks.md's set: %+v", f)
	}
	if RaceAllowance(RaceOff) != 0 || RaceAllowance(RaceQuick) != q.Bound || q.Bound >= f.Bound {
		t.Errorf("allowances: off %s, quick %s, full %s", RaceAllowance(RaceOff), q.Bound, f.Bound)
	}
}
