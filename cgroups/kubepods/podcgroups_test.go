package kubepods_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
)

func pod(uid string, req, lim corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: k8stypes.UID("0000-" + uid)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}},
	}
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestEnsureMakesThePodHierarchyWithLimits(t *testing.T) {
	cgtest.RequirePrivileged(t)
	sb := cgtest.New(t)
	layout := sb.Layout()
	m, err := kubepods.New(t.Context(), layout, kubepods.Cgroupfs, sb.Rel(), kubepods.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	cases := []struct {
		name       string
		pod        *corev1.Pod
		wantParent string
		wantMemory string // "" when no limit is written
	}{
		{"a guaranteed pod sits directly under kubepods with its memory limit",
			pod("g1", corev1.ResourceList{"cpu": q("500m"), "memory": q("64Mi")}, corev1.ResourceList{"cpu": q("500m"), "memory": q("64Mi")}),
			"kubepods/pod0000-g1", fmt.Sprint(64 << 20)},
		{"a burstable pod sits under burstable",
			pod("b1", corev1.ResourceList{"memory": q("32Mi")}, nil), "kubepods/burstable/pod0000-b1", ""},
		{"a best-effort pod sits under besteffort",
			pod("e1", nil, nil), "kubepods/besteffort/pod0000-e1", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent, err := m.Ensure(t.Context(), c.pod)
			if err != nil {
				t.Fatal(err)
			}
			// The runtime is handed the parent relative on a hybrid host,
			// and spelled absolute from this process's cgroup on pure v2.
			want := sb.Rel() + "/" + c.wantParent
			if m.AbsoluteParents() {
				want = path.Join(layout.Unified.Own, want)
			}
			if parent != want {
				t.Fatalf("parent %q, want %q", parent, want)
			}
			dirs, err := m.Dirs(parent)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range dirs {
				for _, sd := range sb.Dirs() {
					if wantDir := filepath.Join(sd.Path, c.wantParent); sd.Hierarchy.ID == d.Hierarchy.ID && d.Path != wantDir {
						t.Errorf("directory %s, want %s", d.Path, wantDir)
					}
				}
				if _, err := os.Stat(d.Path); err != nil {
					t.Errorf("no pod cgroup in hierarchy %d: %v", d.Hierarchy.ID, err)
				}
				if d.Hierarchy.Has("memory") && c.wantMemory != "" {
					name := "memory.limit_in_bytes"
					if d.Hierarchy.V2() {
						name = "memory.max"
					}
					if got := read(t, filepath.Join(d.Path, name)); got != c.wantMemory {
						t.Errorf("%s = %s, want %s", name, got, c.wantMemory)
					}
				}
			}
			if err := m.Remove(t.Context(), parent); err != nil {
				t.Fatal(err)
			}
			for _, d := range dirs {
				if _, err := os.Stat(d.Path); !os.IsNotExist(err) {
					t.Errorf("pod cgroup %s still there after Remove (%v)", d.Path, err)
				}
			}
		})
	}
	if err := m.RemoveRoot(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestTheSystemdDriverWithoutSystemdSaysToUseCgroupfs(t *testing.T) {
	cgtest.RequirePrivileged(t)
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is this host's init: the driver works here (the node lane tests it)")
	}
	sb := cgtest.New(t)
	_, err := kubepods.New(t.Context(), sb.Layout(), kubepods.Systemd, "/", kubepods.Options{})
	if !errors.Is(err, kubepods.ErrUnsupported) || !strings.Contains(err.Error(), "cgroupDriver: cgroupfs") {
		t.Fatalf("got %v, want ErrUnsupported saying to use cgroupfs", err)
	}
}

func TestAllocatableIsEnforcedOnKubepods(t *testing.T) {
	cgtest.RequirePrivileged(t)
	sb := cgtest.New(t)
	m, err := kubepods.New(t.Context(), sb.Layout(), kubepods.Cgroupfs, sb.Rel(), kubepods.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	rc, err := m.EnforceAllocatable(t.Context(),
		corev1.ResourceList{"memory": q("4Gi"), "cpu": q("2")},
		corev1.ResourceList{"memory": q("512Mi"), "cpu": q("500m")},
		corev1.ResourceList{"memory": q("256Mi")})
	if err != nil {
		t.Fatal(err)
	}
	want := int64(4<<30 - 512<<20 - 256<<20)
	if rc.Memory == nil || *rc.Memory != want {
		t.Fatalf("allocatable memory %v, want %d", rc.Memory, want)
	}
	dirs, err := sb.Layout().Resolve(sb.Rel() + "/kubepods")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.Hierarchy.Has("memory") {
			continue
		}
		name := "memory.limit_in_bytes"
		if d.Hierarchy.V2() {
			name = "memory.max"
		}
		if got := read(t, filepath.Join(d.Path, name)); got != fmt.Sprint(want) {
			t.Errorf("kubepods %s = %s, want %d", name, got, want)
		}
	}
	if err := m.RemoveRoot(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestKillEndsEveryProcessOfThePod is the hard-eviction path: every
// process in the pod's cgroups dies by SIGKILL (cgroup.kill on cgroup2,
// cgroup.procs walked on v1), and only then can the cgroups go.
func TestKillEndsEveryProcessOfThePod(t *testing.T) {
	cgtest.RequirePrivileged(t)
	sb := cgtest.New(t)
	m, err := kubepods.New(t.Context(), sb.Layout(), kubepods.Cgroupfs, sb.Rel(), kubepods.Options{})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := m.Ensure(t.Context(), pod("k1", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := m.Dirs(parent)
	if err != nil {
		t.Fatal(err)
	}
	starter := sb.Child(t, "starter")
	var cmds []*exec.Cmd
	for i := 0; i < 3; i++ {
		cmd := exec.Command("sleep", "60")
		if err := starter.Start(t, cmd); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		for _, d := range dirs {
			// Into the pod's cgroup in every hierarchy, as runc puts a
			// container's processes.
			err := os.WriteFile(filepath.Join(d.Path, "cgroup.procs"), []byte(fmt.Sprint(cmd.Process.Pid)), 0)
			if errors.Is(err, syscall.ENOSPC) {
				continue // a v1 cpuset without cpus/mems (runc fills them)
			}
			if err != nil {
				t.Fatalf("move pid %d into %s: %v", cmd.Process.Pid, d.Path, err)
			}
		}
	}
	pids, err := m.Procs(parent)
	if err != nil || len(pids) != 3 {
		t.Fatalf("pod procs %v, %v; want the 3 sleeps", pids, err)
	}
	if err := m.Remove(t.Context(), parent); !errors.Is(err, kubepods.ErrPopulated) {
		t.Fatalf("Remove of a populated pod cgroup: %v, want ErrPopulated at once", err)
	}
	n, err := m.Kill(parent)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Kill signalled %d processes by pid (0 when cgroup.kill did it)", n)
	for _, cmd := range cmds {
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("pid %d ended with %v, want SIGKILL", cmd.Process.Pid, err)
		}
	}
	if err := m.Remove(t.Context(), parent); err != nil {
		t.Fatalf("Remove after Kill: %v", err)
	}
}

// KillContainer ends what runs in one container's cgroup and nothing else
// of the pod: a stranded task is killed while its pod's other containers
// keep running.
func TestKillContainerEndsOnlyThatContainer(t *testing.T) {
	cgtest.RequirePrivileged(t)
	sb := cgtest.New(t)
	m, err := kubepods.New(t.Context(), sb.Layout(), kubepods.Cgroupfs, sb.Rel(), kubepods.Options{})
	if err != nil {
		t.Fatal(err)
	}
	parent, err := m.Ensure(t.Context(), pod("k2", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := m.MemoryDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	const stranded, other = "0123abcd", "4567ef01"
	starter := sb.Child(t, "starter")
	cmds := map[string]*exec.Cmd{}
	for _, id := range []string{stranded, other} {
		dir := filepath.Join(mem.Path, id) // runc's cgroupfs path: <parent>/<id>
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sleep", "60")
		if err := starter.Start(t, cmd); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(fmt.Sprint(cmd.Process.Pid)), 0); err != nil {
			t.Fatalf("move pid %d into %s: %v", cmd.Process.Pid, dir, err)
		}
		cmds[id] = cmd
	}
	t.Cleanup(func() {
		_ = cmds[other].Process.Kill()
		_ = cmds[other].Wait()
		_, _ = m.Kill(parent)
		_ = m.Remove(t.Context(), parent)
	})
	for _, bad := range []string{"", "..", "a/b"} {
		if _, err := m.KillContainer(parent, bad); err == nil {
			t.Errorf("KillContainer(%q) = nil, want an error naming the id", bad)
		}
	}
	if n, err := m.KillContainer(parent, "notthere"); n != 0 || err != nil {
		t.Errorf("KillContainer of a container without a cgroup = %d, %v; want 0, nil", n, err)
	}
	n, err := m.KillContainer(parent, stranded)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KillContainer signalled %d processes by pid (0 when cgroup.kill did it)", n)
	err = cmds[stranded].Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the stranded container's process ended with %v, want SIGKILL", err)
	}
	if err := cmds[other].Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the pod's other container was hit: %v", err)
	}
}

func TestUpdateQOSWritesTheQoSCgroupsCPUShares(t *testing.T) {
	cgtest.RequirePrivileged(t)
	sb := cgtest.New(t)
	m, err := kubepods.New(t.Context(), sb.Layout(), kubepods.Cgroupfs, sb.Rel(), kubepods.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.RemoveRoot(context.WithoutCancel(t.Context())) })
	if err := m.EnsureRoot(t.Context()); err != nil {
		t.Fatal(err)
	}
	q := resource.MustParse
	checked := 0
	check := func(pods []*corev1.Pod, milliCPU int64) {
		t.Helper()
		if err := m.UpdateQOS(t.Context(), pods); err != nil {
			t.Fatal(err)
		}
		for _, class := range []struct {
			name   string
			shares uint64
		}{{"burstable", kubepods.MilliCPUToShares(milliCPU)}, {"besteffort", kubepods.MinShares}} {
			k, _ := m.Kubepods()
			dirs, err := m.Dirs(k + "/" + class.name)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range dirs {
				file, want := "cpu.shares", fmt.Sprint(class.shares)
				if d.Hierarchy.V2() {
					file, want = "cpu.weight", fmt.Sprint(kubepods.CPUWeight(class.shares))
				}
				b, err := os.ReadFile(filepath.Join(d.Path, file))
				if err != nil {
					continue // no cpu controller in this hierarchy
				}
				checked++
				if got := strings.TrimSpace(string(b)); got != want {
					t.Errorf("%d pods: %s/%s = %s, want %s", len(pods), d.Path, file, got, want)
				}
			}
		}
	}
	q1 := pod("q1", corev1.ResourceList{"cpu": q("500m")}, nil)
	check([]*corev1.Pod{q1}, 500)
	// The figures of a pod object are remembered between calls: a new
	// pod counts, one gone stops counting, and a pod whose object is
	// replaced counts with its new requests.
	q2 := pod("q2", corev1.ResourceList{"cpu": q("250m")}, nil)
	check([]*corev1.Pod{q1, q2}, 750)
	check([]*corev1.Pod{q2}, 250)
	check([]*corev1.Pod{q2, pod("q1", corev1.ResourceList{"cpu": q("100m")}, nil)}, 350)
	if checked == 0 {
		t.Fatal("no hierarchy has the cpu controller: nothing checked")
	}
}
