package cgtest_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// hogEnv makes the test binary a memory hog instead of running tests: it
// allocates and touches the given number of MiB, then exits 0.
const hogEnv = "CGTEST_HOG_MIB"

func TestMain(m *testing.M) {
	if v := os.Getenv(hogEnv); v != "" {
		os.Exit(hog(v))
	}
	os.Exit(m.Run())
}

func hog(v string) int {
	mib, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var keep [][]byte
	for range mib {
		b := make([]byte, 1<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	return len(keep) - mib // 0
}

// procCgroups reads /proc/<pid>/cgroup as hierarchy id -> path.
func procCgroups(t *testing.T, pid int) map[uint32]string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := make(map[uint32]string)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		id, err := strconv.ParseUint(parts[0], 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		out[uint32(id)] = parts[2]
	}
	return out
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// waitFor polls cond every 5 ms for up to 2 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestNewCreatesAndRemovesDirectories(t *testing.T) {
	cgtest.RequirePrivileged(t)
	l, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	var dirs []cgroups.Dir
	t.Run("a new sandbox has one directory per monitored hierarchy beneath our own cgroup", func(t *testing.T) {
		s := cgtest.New(t, cgtest.WithLayout(l))
		dirs = s.Dirs()
		hs := l.Monitored()
		if len(dirs) != len(hs) {
			t.Fatalf("%d dirs, want %d (one per monitored hierarchy)", len(dirs), len(hs))
		}
		for i, d := range dirs {
			if d.Hierarchy != hs[i] {
				t.Errorf("dir %d is in hierarchy %d, want %d", i, d.Hierarchy.ID, hs[i].ID)
			}
			if want := filepath.Join(hs[i].OwnDir(), s.Rel()); d.Path != want {
				t.Errorf("dir %d = %s, want %s", i, d.Path, want)
			}
			if !exists(d.Path) {
				t.Errorf("%s does not exist", d.Path)
			}
		}
		if !strings.HasPrefix(s.Rel(), "nodeguard-test-") || strings.Contains(s.Rel(), "/") {
			t.Errorf("Rel() = %q, want a single nodeguard-test-* component", s.Rel())
		}
		if s.MemoryDir() != dirs[0].Path {
			t.Errorf("MemoryDir() = %q, want %q", s.MemoryDir(), dirs[0].Path)
		}
		wantUnified := ""
		if l.Unified != nil {
			wantUnified = filepath.Join(l.Unified.OwnDir(), s.Rel())
		}
		if s.UnifiedDir() != wantUnified {
			t.Errorf("UnifiedDir() = %q, want %q", s.UnifiedDir(), wantUnified)
		}
	})
	t.Run("the sandbox is gone after its test", func(t *testing.T) {
		if len(dirs) == 0 {
			t.Skip("no sandbox was made")
		}
		for _, d := range dirs {
			if exists(d.Path) {
				t.Errorf("%s is left behind", d.Path)
			}
		}
	})
}

func TestSandboxIDs(t *testing.T) {
	s := cgtest.New(t)
	l := s.Layout()
	tests := []struct {
		name string
		get  func() (uint64, error)
		dir  string
	}{
		{"the memory id is the memory directory's kernfs id", s.MemoryID, s.MemoryDir()},
		{"the cgroup2 id is the cgroup2 directory's kernfs id", s.UnifiedID, s.UnifiedDir()},
		{"the id in the memory hierarchy is the memory id", func() (uint64, error) { return s.ID(l.Memory) }, s.MemoryDir()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.dir == "" {
				cgtest.Need(t, false, "no cgroup2 hierarchy on this host")
			}
			got, err := tt.get()
			if err != nil {
				t.Fatal(err)
			}
			// The file handle of a kernfs directory carries its id: an
			// independent witness for the inode number ID returns.
			h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, tt.dir, 0)
			if err != nil {
				t.Fatalf("name_to_handle_at %s: %v", tt.dir, err)
			}
			if want := binary.LittleEndian.Uint64(h.Bytes()); got != want {
				t.Errorf("id = %d, file handle says %d", got, want)
			}
			parent, err := cgroups.ID(filepath.Dir(tt.dir))
			if err != nil {
				t.Fatal(err)
			}
			if got == parent {
				t.Errorf("id %d equals the parent's id", got)
			}
		})
	}
}

func TestStart(t *testing.T) {
	tests := []struct {
		name string
		cmd  func(t *testing.T) *exec.Cmd
		// check runs after Start with the started command.
		check func(t *testing.T, s *cgtest.Sandbox, cmd *exec.Cmd)
	}{
		{
			name: "a started process is in the sandbox in both hierarchies",
			cmd:  func(t *testing.T) *exec.Cmd { return exec.Command("sleep", "30") },
			check: func(t *testing.T, s *cgtest.Sandbox, cmd *exec.Cmd) {
				pid := cmd.Process.Pid
				got := procCgroups(t, pid)
				for _, d := range s.Dirs() {
					if got[d.Hierarchy.ID] != d.Rel {
						t.Errorf("pid %d is in %q in hierarchy %d, want %q", pid, got[d.Hierarchy.ID], d.Hierarchy.ID, d.Rel)
					}
				}
				waitFor(t, "sleep to replace the gate shell", func() bool {
					exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
					return filepath.Base(exe) == "sleep"
				})
				procs, err := s.Procs()
				if err != nil {
					t.Fatal(err)
				}
				if len(procs) != 1 || procs[0] != pid {
					t.Errorf("Procs() = %v, want [%d]", procs, pid)
				}
				if err := s.Kill(); err != nil {
					t.Fatal(err)
				}
				if err := cmd.Wait(); !killed(err) {
					t.Errorf("Wait() = %v, want killed by SIGKILL", err)
				}
			},
		},
		{
			name: "arguments reach the command unchanged",
			cmd: func(t *testing.T) *exec.Cmd {
				return exec.Command("/bin/echo", "two words", `$HOME`, "-n", "")
			},
			check: func(t *testing.T, s *cgtest.Sandbox, cmd *exec.Cmd) {
				if err := cmd.Wait(); err != nil {
					t.Fatal(err)
				}
				if got, want := cmd.Stdout.(*strings.Builder).String(), "two words $HOME -n \n"; got != want {
					t.Errorf("output %q, want %q", got, want)
				}
			},
		},
		{
			name: "extra files keep their descriptor numbers and the gate stays closed",
			cmd: func(t *testing.T) *exec.Cmd {
				f, err := os.Create(filepath.Join(t.TempDir(), "fd3"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { f.Close() })
				// With one extra file the gate would be fd 4.
				cmd := exec.Command("/bin/sh", "-c", `echo via-fd3 >&3; if [ -e /proc/self/fd/4 ]; then echo "fd 4 open"; fi`)
				cmd.ExtraFiles = []*os.File{f}
				return cmd
			},
			check: func(t *testing.T, s *cgtest.Sandbox, cmd *exec.Cmd) {
				if err := cmd.Wait(); err != nil {
					t.Fatal(err)
				}
				if len(cmd.ExtraFiles) != 1 {
					t.Fatalf("ExtraFiles has %d entries after Start, want the caller's 1", len(cmd.ExtraFiles))
				}
				if out := cmd.Stdout.(*strings.Builder).String(); out != "" {
					t.Errorf("the command printed %q, want nothing (the gate must be closed before exec)", out)
				}
				b, err := os.ReadFile(cmd.ExtraFiles[0].Name())
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != "via-fd3\n" {
					t.Errorf("fd 3 received %q, want %q", b, "via-fd3\n")
				}
			},
		},
		{
			name: "the command's exit status is its own",
			cmd:  func(t *testing.T) *exec.Cmd { return exec.Command("/bin/sh", "-c", "exit 7") },
			check: func(t *testing.T, s *cgtest.Sandbox, cmd *exec.Cmd) {
				var ee *exec.ExitError
				if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 7 {
					t.Errorf("Wait() = %v, want exit status 7", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := cgtest.New(t)
			cmd := tt.cmd(t)
			if cmd.Stdout == nil {
				cmd.Stdout = &strings.Builder{}
			}
			args := append([]string(nil), cmd.Args...)
			if err := s.Start(t, cmd); err != nil {
				t.Fatal(err)
			}
			if strings.Join(cmd.Args, "\x00") != strings.Join(args, "\x00") {
				t.Errorf("cmd.Args = %q after Start, want the caller's %q", cmd.Args, args)
			}
			tt.check(t, s, cmd)
		})
	}
}

func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func TestStartRefusesMisuse(t *testing.T) {
	s := cgtest.New(t)
	tests := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"a command that names a missing program is refused", func() *exec.Cmd { return exec.Command("no-such-program-nodeguard") }},
		{"a command that already chose a cgroup is refused", func() *exec.Cmd {
			c := exec.Command("true")
			c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true}
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.Start(t, tt.cmd()); err == nil {
				t.Error("Start() = nil, want an error")
			}
		})
	}
}

func TestMemoryLimitConfinesAStartedProcess(t *testing.T) {
	const limit = 32 << 20
	s := cgtest.New(t, cgtest.WithMemoryLimit(limit))
	mem := s.Layout().Memory
	limitFile := "memory.limit_in_bytes"
	if mem.V2() {
		limitFile = "memory.max"
	}
	b, err := os.ReadFile(filepath.Join(s.MemoryDir(), limitFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(limit) {
		t.Fatalf("%s = %s, want %d", limitFile, got, limit)
	}

	t.Run("raising the limit above the swap limit works", func(t *testing.T) {
		if err := s.SetMemoryLimit(2 * limit); err != nil {
			t.Fatal(err)
		}
		if err := s.SetMemoryLimit(limit); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a hog above the limit is OOM-killed inside the sandbox", func(t *testing.T) {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), hogEnv+"=256")
		if err := s.Start(t, cmd); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if !killed(err) {
				t.Fatalf("hog ended with %v, want killed by the OOM killer", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatal("hog was not OOM-killed within 20 s")
		}
		n, err := oomKills(s.MemoryDir(), mem.V2())
		if err != nil {
			t.Fatal(err)
		}
		if n < 1 {
			t.Errorf("the sandbox counts %d OOM kills, want at least 1", n)
		}
	})
}

// oomKills reads the oom_kill counter of a memory cgroup.
func oomKills(dir string, v2 bool) (int, error) {
	name := filepath.Join(dir, "memory.oom_control")
	if v2 {
		name = filepath.Join(dir, "memory.events")
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no oom_kill line in %s", name)
}

func TestCleanupLeavesNothing(t *testing.T) {
	cgtest.RequirePrivileged(t)
	var (
		dirs  []string
		cmd   *exec.Cmd
		grand int
	)
	t.Run("a sandbox with running processes and nested cgroups", func(t *testing.T) {
		s := cgtest.New(t)
		child := s.Child(t, "pod")
		if want := s.Rel() + "/pod"; child.Rel() != want {
			t.Errorf("child Rel() = %q, want %q", child.Rel(), want)
		}
		for _, d := range child.Dirs() {
			if !exists(d.Path) || filepath.Dir(d.Path) != filepath.Join(d.Hierarchy.OwnDir(), s.Rel()) {
				t.Errorf("child dir %s is not beneath the parent sandbox", d.Path)
			}
		}
		// A grandchild made behind cgtest's back, as runc would.
		for _, d := range child.Dirs() {
			if err := os.MkdirAll(filepath.Join(d.Path, "ctr", "deeper"), 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, filepath.Join(d.Path, "ctr", "deeper"))
		}
		for _, d := range s.Dirs() {
			dirs = append(dirs, d.Path)
		}
		// A process that leaves a grandchild behind and is never waited
		// for by the test.
		pidFile := filepath.Join(t.TempDir(), "grandchild")
		cmd = exec.Command("/bin/sh", "-c", `sleep 60 & echo $! > "$1.tmp" && mv "$1.tmp" "$1"; exec sleep 60`, "sh", pidFile)
		if err := child.Start(t, cmd); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the grandchild pid", func() bool { return exists(pidFile) })
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		g, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		grand = g
		// mv renames the pid file before it exits: wait for it to go.
		var procs []int
		waitFor(t, "the shell and its grandchild alone in the child", func() bool {
			procs, err = child.Procs()
			return err == nil && len(procs) == 2
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("after the test every directory and process is gone", func(t *testing.T) {
		if cmd == nil || cmd.Process == nil {
			t.Skip("nothing was started")
		}
		if err := cmd.Wait(); !killed(err) {
			t.Errorf("Wait() = %v, want killed by SIGKILL", err)
		}
		for _, d := range dirs {
			if exists(d) {
				t.Errorf("%s is left behind", d)
			}
		}
		// The grandchild was reparented; who reaps it (and when) is not
		// ours to know, so dead means gone or a zombie.
		waitFor(t, "the grandchild to die", func() bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", grand))
			if errors.Is(err, fs.ErrNotExist) {
				return true
			}
			_, rest, _ := strings.Cut(string(b), ") ")
			return !strings.Contains(string(b), "(sleep)") || strings.HasPrefix(rest, "Z") || strings.HasPrefix(rest, "X")
		})
	})
}

// TestSandboxRemovesItsPathInEveryHierarchy: code under test that takes the
// sandbox as its cgroup root makes the same path in the cpu, pids and
// other v1 hierarchies (the pod cgroup manager makes <root>/kubepods in
// every one); the sandbox's cleanup removes those too, so that no test run
// leaves cgroups behind in hierarchies it never named.
func TestSandboxRemovesItsPathInEveryHierarchy(t *testing.T) {
	s := cgtest.New(t)
	l := s.Layout()
	all, err := l.Resolve(s.Rel())
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, d := range all {
		if slices.ContainsFunc(s.Dirs(), func(o cgroups.Dir) bool { return o.Path == d.Path }) {
			continue
		}
		for _, p := range []string{d.Path, filepath.Join(d.Path, "kubepods"), filepath.Join(d.Path, "kubepods", "besteffort")} {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		made = append(made, d.Path)
	}
	if len(made) == 0 {
		t.Skipf("the sandbox's own hierarchies are all there are (%v mode): nothing else to make", l.Mode)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	for _, p := range made {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s left after Remove (stat: %v)", p, err)
		}
	}
}
