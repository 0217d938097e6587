package kubepods

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups"
)

// fakeSystemd stands for systemd's D-Bus API over a directory tree that
// stands for /sys/fs/cgroup: starting a slice makes its directory (at the
// path its expanded name spells, as systemd does), stopping one removes
// it. Every call is recorded.
type fakeSystemd struct {
	mount string

	mu       sync.Mutex
	units    map[string]bool // loaded units; false: failed leftover
	calls    []string
	props    map[string][]sddbus.Property // by unit, the last properties given
	failOn   string                       // a unit whose start job fails
	failStop string                       // a unit whose stop job fails
	version  string                       // the Version property; "" is 252
	inactive map[string]bool              // loaded units without a cgroup that StartUnit starts
}

func newFakeSystemd(mount string) *fakeSystemd {
	return &fakeSystemd{mount: mount, units: map[string]bool{}, props: map[string][]sddbus.Property{}}
}

func (f *fakeSystemd) dir(unit string) string {
	p, err := expandSlice(unit)
	if err != nil {
		panic(err)
	}
	return filepath.Join(f.mount, p)
}

func (f *fakeSystemd) StartTransientUnitContext(_ context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "start "+name)
	if _, ok := f.units[name]; ok {
		return 0, godbus.Error{Name: "org.freedesktop.systemd1.UnitExists", Body: []any{"Unit " + name + " already exists."}}
	}
	if name == f.failOn {
		f.units[name] = false
		ch <- "failed"
		return 1, nil
	}
	if err := os.MkdirAll(f.dir(name), 0o755); err != nil {
		return 0, err
	}
	f.units[name] = true
	f.props[name] = props
	ch <- "done"
	return 1, nil
}

func (f *fakeSystemd) StartUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "start-existing "+name)
	if err := os.MkdirAll(f.dir(name), 0o755); err != nil {
		return 0, err
	}
	f.units[name] = true
	ch <- "done"
	return 1, nil
}

func (f *fakeSystemd) GetManagerProperty(name string) (string, error) {
	if name != "Version" {
		return "", fmt.Errorf("no property %s", name)
	}
	if f.version == "" {
		return `"252.33-1~deb12u1"`, nil
	}
	return f.version, nil
}

func (f *fakeSystemd) SetUnitPropertiesContext(_ context.Context, name string, runtime bool, props ...sddbus.Property) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("set %s runtime=%v", name, runtime))
	f.props[name] = props
	return nil
}

func (f *fakeSystemd) StopUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "stop "+name)
	if _, ok := f.units[name]; !ok {
		return 0, godbus.Error{Name: "org.freedesktop.systemd1.NoSuchUnit"}
	}
	if name == f.failStop {
		ch <- "failed"
		return 1, nil
	}
	delete(f.units, name)
	if err := os.Remove(f.dir(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	ch <- "done"
	return 1, nil
}

func (f *fakeSystemd) ResetFailedUnitContext(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "reset-failed "+name)
	if ok, loaded := f.units[name]; loaded && !ok && !f.inactive[name] {
		delete(f.units, name)
	}
	return nil
}

func (f *fakeSystemd) Close() {}

func (f *fakeSystemd) takeCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakeSystemd) prop(unit, name string) (any, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.props[unit] {
		if p.Name == name {
			return p.Value.Value(), true
		}
	}
	return nil, false
}

// v2Layout is a pure cgroup v2 layout whose one hierarchy is mounted at a
// temporary directory, nodeguard running in its systemd unit's cgroup.
func v2Layout(t *testing.T) *cgroups.Layout {
	t.Helper()
	return cgroups.NewLayout(cgroups.Hierarchy{
		ID: 0, Controllers: []string{"cpu", "io", "memory", "pids"}, Mount: t.TempDir(), Root: "/",
		Own: "/system.slice/nodeguard.service",
	})
}

func testPod(uid string, req, lim corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: types.UID(uid)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}},
	}
}

func newSystemdManager(t *testing.T) (*Cgroups, *fakeSystemd) {
	t.Helper()
	l := v2Layout(t)
	f := newFakeSystemd(l.Unified.Mount)
	m, err := New(t.Context(), l, Systemd, "/", Options{Systemd: f})
	if err != nil {
		t.Fatal(err)
	}
	return m, f
}

func TestTheSystemdDriverMakesTheKubeletsSlices(t *testing.T) {
	m, f := newSystemdManager(t)
	q := resource.MustParse
	g := testPod("1234-abcd", corev1.ResourceList{"cpu": q("250m"), "memory": q("64Mi")}, corev1.ResourceList{"cpu": q("250m"), "memory": q("64Mi")})
	parent, err := m.Ensure(t.Context(), g)
	if err != nil {
		t.Fatal(err)
	}
	if want := "/kubepods.slice/kubepods-pod1234_abcd.slice"; parent != want {
		t.Fatalf("parent %q, want %q", parent, want)
	}
	if got, want := f.takeCalls(), []string{
		"start kubepods.slice", "start kubepods-burstable.slice", "start kubepods-besteffort.slice", "start kubepods-pod1234_abcd.slice",
	}; !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	t.Run("a pod slice wants its parent and carries the pod's limits as the kubelet sets them", func(t *testing.T) {
		for name, want := range map[string]any{
			"Wants":               []string{"kubepods.slice"},
			"DefaultDependencies": false,
			"MemoryAccounting":    true,
			"MemoryMax":           uint64(64 << 20),
			"CPUWeight":           CPUWeight(MilliCPUToShares(250)),
			"CPUQuotaPerSecUSec":  uint64(250000),
			"CPUQuotaPeriodUSec":  uint64(QuotaPeriod),
		} {
			got, ok := f.prop("kubepods-pod1234_abcd.slice", name)
			if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s = %v (set %v), want %v", name, got, ok, want)
			}
		}
		if _, ok := f.prop("kubepods-pod1234_abcd.slice", "Delegate"); ok {
			t.Errorf("a slice was given Delegate=: delegation is for the runtime's scopes")
		}
	})
	t.Run("the QoS slices hang from kubepods.slice and kubepods from the root slice", func(t *testing.T) {
		for unit, parent := range map[string]string{"kubepods.slice": "-.slice", "kubepods-burstable.slice": "kubepods.slice"} {
			if got, _ := f.prop(unit, "Wants"); fmt.Sprint(got) != fmt.Sprint([]string{parent}) {
				t.Errorf("%s Wants=%v, want %s", unit, got, parent)
			}
		}
	})
	t.Run("ensuring it again updates the existing slice's properties at runtime", func(t *testing.T) {
		if _, err := m.Ensure(t.Context(), g); err != nil {
			t.Fatal(err)
		}
		calls := f.takeCalls()
		if !slices.Contains(calls, "set kubepods-pod1234_abcd.slice runtime=true") {
			t.Errorf("calls %q: no runtime property update of the pod slice", calls)
		}
	})
	t.Run("the pod slice is listed by its UID", func(t *testing.T) {
		got, err := m.PodParents()
		if err != nil {
			t.Fatal(err)
		}
		if got["1234-abcd"] != parent || len(got) != 1 {
			t.Errorf("PodParents = %v, want only 1234-abcd: %s", got, parent)
		}
	})
	t.Run("a slice with processes is not stopped", func(t *testing.T) {
		d, _ := m.MemoryDir(parent)
		procs := filepath.Join(d.Path, "cri-containerd-abc.scope", cgroups.FileProcs)
		if err := os.MkdirAll(filepath.Dir(procs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(procs, []byte("4242\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := m.Remove(t.Context(), parent)
		if !errors.Is(err, ErrPopulated) || !strings.Contains(err.Error(), "4242") {
			t.Fatalf("Remove = %v, want ErrPopulated naming pid 4242", err)
		}
		if calls := f.takeCalls(); len(calls) != 0 {
			t.Errorf("calls %q on a populated slice", calls)
		}
		if err := os.RemoveAll(filepath.Dir(procs)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an empty pod slice is stopped and reset, and its cgroup is gone", func(t *testing.T) {
		if err := m.Remove(t.Context(), parent); err != nil {
			t.Fatal(err)
		}
		if got, want := f.takeCalls(), []string{"stop kubepods-pod1234_abcd.slice", "reset-failed kubepods-pod1234_abcd.slice"}; !slices.Equal(got, want) {
			t.Errorf("calls %q, want %q", got, want)
		}
		d, _ := m.MemoryDir(parent)
		if _, err := os.Stat(d.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there: %v", d.Path, err)
		}
	})
}

func TestTheSystemdDriverEnforcesAllocatableOnKubepodsSlice(t *testing.T) {
	m, f := newSystemdManager(t)
	q := resource.MustParse
	rc, err := m.EnforceAllocatable(t.Context(),
		corev1.ResourceList{"memory": q("8Gi"), "cpu": q("4")},
		corev1.ResourceList{"memory": q("1Gi")}, corev1.ResourceList{"cpu": q("500m")})
	if err != nil {
		t.Fatal(err)
	}
	if *rc.Memory != 7<<30 {
		t.Fatalf("allocatable memory %d", *rc.Memory)
	}
	if got, _ := f.prop("kubepods.slice", "MemoryMax"); got != uint64(7<<30) {
		t.Errorf("kubepods.slice MemoryMax = %v, want %d", got, uint64(7<<30))
	}
	if got, _ := f.prop("kubepods.slice", "CPUWeight"); got != CPUWeight(MilliCPUToShares(3500)) {
		t.Errorf("kubepods.slice CPUWeight = %v", got)
	}
	t.Run("a restart with a new reservation updates kubepods.slice", func(t *testing.T) {
		f.takeCalls()
		if _, err := m.EnforceAllocatable(t.Context(), corev1.ResourceList{"memory": q("8Gi")}, corev1.ResourceList{"memory": q("2Gi")}, nil); err != nil {
			t.Fatal(err)
		}
		if got, _ := f.prop("kubepods.slice", "MemoryMax"); got != uint64(6<<30) {
			t.Errorf("kubepods.slice MemoryMax = %v after the update", got)
		}
		if calls := f.takeCalls(); !slices.Contains(calls, "set kubepods.slice runtime=true") {
			t.Errorf("calls %q", calls)
		}
	})
}

func TestTheSystemdDriverResetsAFailedLeftoverAndRetriesOnce(t *testing.T) {
	m, f := newSystemdManager(t)
	if err := m.EnsureRoot(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.takeCalls()
	// A unit of the same name, loaded but failed, without a cgroup.
	f.units["kubepods-besteffort-pod0000_dead.slice"] = false
	if _, err := m.Ensure(t.Context(), testPod("0000-dead", nil, nil)); err != nil {
		t.Fatal(err)
	}
	// The root slices exist already: no D-Bus call for them.
	want := []string{
		"start kubepods-besteffort-pod0000_dead.slice", "reset-failed kubepods-besteffort-pod0000_dead.slice",
		"start kubepods-besteffort-pod0000_dead.slice",
	}
	got := f.takeCalls()
	if !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
}

func TestAFailedStartJobIsAnErrorNamingTheUnit(t *testing.T) {
	m, f := newSystemdManager(t)
	f.failOn = "kubepods-besteffort-pod0000_bad.slice"
	_, err := m.Ensure(t.Context(), testPod("0000-bad", nil, nil))
	if err == nil || !strings.Contains(err.Error(), `kubepods-besteffort-pod0000_bad.slice: systemd's job ended "failed"`) {
		t.Fatalf("Ensure = %v, want the failed job named", err)
	}
}

func TestTheSystemdDriverNeedsAnAbsoluteRoot(t *testing.T) {
	l := v2Layout(t)
	_, err := New(t.Context(), l, Systemd, "nodeguard", Options{Systemd: newFakeSystemd(l.Unified.Mount)})
	if err == nil || !strings.Contains(err.Error(), "relative") {
		t.Fatalf("New = %v, want a refusal of the relative root", err)
	}
}

func TestResourcePropertiesConvertAsRuncDoes(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	cases := []struct {
		name string
		rc   ResourceConfig
		v2   bool
		want map[string]any
	}{
		{"a quota is per second, rounded up to systemd's 10 ms", ResourceConfig{CPUQuota: i64(12345), CPUPeriod: u64(100000)}, true,
			map[string]any{"CPUQuotaPerSecUSec": uint64(130000), "CPUQuotaPeriodUSec": uint64(100000)}},
		{"no quota is infinity", ResourceConfig{CPUQuota: i64(-1), CPUPeriod: u64(100000)}, true,
			map[string]any{"CPUQuotaPerSecUSec": uint64(math.MaxUint64)}},
		{"memory is MemoryMax on v2", ResourceConfig{Memory: i64(1 << 20)}, true, map[string]any{"MemoryMax": uint64(1 << 20)}},
		{"memory is MemoryLimit on v1", ResourceConfig{Memory: i64(1 << 20)}, false, map[string]any{"MemoryLimit": uint64(1 << 20)}},
		{"shares are CPUShares on v1", ResourceConfig{CPUShares: u64(512)}, false, map[string]any{"CPUShares": uint64(512)}},
		{"a zero pids limit is 1, systemd refuses 0", ResourceConfig{PidsLimit: i64(0)}, true, map[string]any{"TasksMax": uint64(1)}},
		{"a negative pids limit is infinity", ResourceConfig{PidsLimit: i64(-1)}, true, map[string]any{"TasksMax": uint64(math.MaxUint64)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]any{}
			for _, p := range resourceProperties(c.rc, c.v2, 252) {
				got[p.Name] = p.Value.Value()
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
				}
			}
		})
	}
}

func TestCheckSandboxTellsTheRuntimesDriver(t *testing.T) {
	l := v2Layout(t)
	f := newFakeSystemd(l.Unified.Mount)
	sd, err := New(t.Context(), l, Systemd, "/", Options{Systemd: f})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := New(t.Context(), l, Cgroupfs, "/", Options{})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(m *Cgroups, name string) string {
		parent, err := m.Parent(testPod("0000-aaaa", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		d, _ := m.MemoryDir(parent)
		if name != "" {
			if err := os.MkdirAll(filepath.Join(d.Path, name), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return parent
	}
	cases := []struct {
		name string
		m    *Cgroups
		dir  string // made beneath the pod cgroup
		want error
	}{
		{"a containerd scope in a systemd slice is right", sd, "cri-containerd-sb1.scope", nil},
		{"a CRI-O scope in a systemd slice is right", sd, "crio-sb1.scope", nil},
		{"a bare directory in a systemd slice means a cgroupfs runtime", sd, "sb1", ErrDriverMismatch},
		{"a bare directory under cgroupfs is right", fs, "sb1", nil},
		{"CRI-O's cgroupfs name is right under cgroupfs", fs, "crio-sb1", nil},
		{"a scope under cgroupfs means a systemd runtime", fs, "cri-containerd-sb1.scope", ErrDriverMismatch},
		{"no cgroup at all is a misplaced sandbox", fs, "", ErrMisplaced},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := mk(c.m, c.dir)
			t.Cleanup(func() {
				d, _ := c.m.MemoryDir(parent)
				os.RemoveAll(d.Path)
			})
			err := c.m.CheckSandbox(parent, "sb1")
			if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("CheckSandbox = %v, want %v", err, c.want)
			}
			if c.want == ErrDriverMismatch && !strings.Contains(err.Error(), "cgroupDriver") {
				t.Errorf("%v does not say what to set", err)
			}
		})
	}
	t.Run("a container id that is a path is refused", func(t *testing.T) {
		if err := fs.CheckSandbox(mk(fs, ""), "../x"); !errors.Is(err, cgroups.ErrInvalidPath) {
			t.Errorf("CheckSandbox(../x) = %v", err)
		}
	})
}

func TestContainerProcsFindsTheContainerUnderEitherDriver(t *testing.T) {
	l := v2Layout(t)
	sd, err := New(t.Context(), l, Systemd, "/", Options{Systemd: newFakeSystemd(l.Unified.Mount)})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := New(t.Context(), l, Cgroupfs, "/", Options{})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		m     *Cgroups
		dir   string // the container's cgroup beneath the pod cgroup
		procs string // its cgroup.procs
		want  []int
	}{
		{"a containerd scope in a systemd slice is the container's cgroup", sd, "cri-containerd-c1.scope", "12\n34\n", []int{12, 34}},
		{"a CRI-O scope in a systemd slice is the container's cgroup", sd, "crio-c1.scope", "56\n", []int{56}},
		{"a bare directory under cgroupfs is the container's cgroup", fs, "c1", "78\n", []int{78}},
		{"a container without a cgroup has no processes", fs, "", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent, err := c.m.Parent(testPod("0000-bbbb", nil, nil))
			if err != nil {
				t.Fatal(err)
			}
			d, _ := c.m.MemoryDir(parent)
			t.Cleanup(func() { os.RemoveAll(d.Path) })
			if c.dir != "" {
				if err := os.MkdirAll(filepath.Join(d.Path, c.dir), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d.Path, c.dir, cgroups.FileProcs), []byte(c.procs), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.m.ContainerProcs(parent, "c1")
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("ContainerProcs = %v, %v; want %v", got, err, c.want)
			}
		})
	}
	t.Run("a container id that is a path is refused", func(t *testing.T) {
		parent, _ := fs.Parent(testPod("0000-bbbb", nil, nil))
		if _, err := fs.ContainerProcs(parent, "../x"); !errors.Is(err, cgroups.ErrInvalidPath) {
			t.Errorf("ContainerProcs(../x) = %v", err)
		}
	})
}

func TestTheRuntimesDriverMustBeNodeguards(t *testing.T) {
	l := v2Layout(t)
	m, err := New(t.Context(), l, Cgroupfs, "/", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CheckRuntimeDriver("cgroupfs"); err != nil {
		t.Errorf("same driver: %v", err)
	}
	err = m.CheckRuntimeDriver("systemd")
	if !errors.Is(err, ErrDriverMismatch) || !strings.Contains(err.Error(), "set cgroupDriver: systemd") {
		t.Errorf("other driver: %v", err)
	}
	if err := m.CheckRuntimeDriver("weird"); err == nil || errors.Is(err, ErrDriverMismatch) {
		t.Errorf("unknown driver: %v", err)
	}
	t.Run("runc's refusal of a cgroupfs parent names the systemd driver", func(t *testing.T) {
		runc := errors.New(`rpc error: code = Unknown desc = failed to create containerd task: OCI runtime create failed: expected cgroupsPath to be of format "slice:prefix:name" for systemd cgroups, got "/kubepods/besteffort/pod1/abc" instead`)
		err := m.ExplainRunError(runc)
		if !errors.Is(err, ErrDriverMismatch) || !errors.Is(err, runc) || !strings.Contains(err.Error(), "cgroupDriver: systemd") {
			t.Errorf("ExplainRunError = %v", err)
		}
		other := errors.New("image not found")
		if m.ExplainRunError(other) != other {
			t.Errorf("another error was rewritten")
		}
	})
}

func TestParentsAreAbsoluteWhereTheRuntimeNeedsThem(t *testing.T) {
	t.Run("a relative root on pure v2 is spelled from nodeguard's cgroup", func(t *testing.T) {
		m, err := New(t.Context(), v2Layout(t), Cgroupfs, "nodeguard", Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.Parent(testPod("0000-bbbb", nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		if want := "/system.slice/nodeguard.service/nodeguard/kubepods/besteffort/pod0000-bbbb"; p != want || !m.AbsoluteParents() {
			t.Errorf("Parent = %q (absolute parents %v), want %q", p, m.AbsoluteParents(), want)
		}
	})
	t.Run("a relative root on a hybrid host stays relative", func(t *testing.T) {
		l := v2Layout(t)
		l.Mode = cgroups.ModeHybrid
		m, err := New(t.Context(), l, Cgroupfs, "nodeguard", Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := m.Parent(testPod("0000-bbbb", nil, nil))
		if p != "nodeguard/kubepods/besteffort/pod0000-bbbb" || m.AbsoluteParents() {
			t.Errorf("Parent = %q (absolute parents %v)", p, m.AbsoluteParents())
		}
	})
	t.Run("the node default is /kubepods", func(t *testing.T) {
		m, err := New(t.Context(), v2Layout(t), Cgroupfs, "/", Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, _ := m.Parent(testPod("0000-bbbb", nil, nil))
		k, _ := m.Kubepods()
		if p != "/kubepods/besteffort/pod0000-bbbb" || k != "/kubepods" {
			t.Errorf("Parent = %q, Kubepods = %q", p, k)
		}
	})
}

func TestSystemdBefore242GetsNoCPUQuotaPeriod(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	u64 := func(v uint64) *uint64 { return &v }
	rc := ResourceConfig{CPUQuota: i64(50000), CPUPeriod: u64(100000)}
	for _, v := range []int{239, 241} {
		for _, p := range resourceProperties(rc, true, v) {
			if p.Name == "CPUQuotaPeriodUSec" {
				t.Errorf("systemd %d was given CPUQuotaPeriodUSec, which it refuses", v)
			}
		}
	}
	var names []string
	for _, p := range resourceProperties(rc, true, 242) {
		names = append(names, p.Name)
	}
	if !slices.Contains(names, "CPUQuotaPeriodUSec") || !slices.Contains(names, "CPUQuotaPerSecUSec") {
		t.Errorf("systemd 242: %v", names)
	}
	t.Run("the version is read from the manager at start", func(t *testing.T) {
		l := v2Layout(t)
		f := newFakeSystemd(l.Unified.Mount)
		f.version = `"239 (239-78.el8)"`
		m, err := New(t.Context(), l, Systemd, "/", Options{Systemd: f})
		if err != nil {
			t.Fatal(err)
		}
		q := resource.MustParse
		if _, err := m.Ensure(t.Context(), testPod("0000-c239", corev1.ResourceList{"cpu": q("1"), "memory": q("1Mi")}, corev1.ResourceList{"cpu": q("1"), "memory": q("1Mi")})); err != nil {
			t.Fatal(err)
		}
		if _, ok := f.prop("kubepods-pod0000_c239.slice", "CPUQuotaPeriodUSec"); ok {
			t.Errorf("systemd 239's pod slice got CPUQuotaPeriodUSec")
		}
		if got, _ := f.prop("kubepods-pod0000_c239.slice", "CPUQuotaPerSecUSec"); got != uint64(1000000) {
			t.Errorf("CPUQuotaPerSecUSec = %v", got)
		}
	})
}

func TestAnInactiveSliceOfThatNameIsStartedAgain(t *testing.T) {
	m, f := newSystemdManager(t)
	if err := m.EnsureRoot(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.takeCalls()
	f.units["kubepods-besteffort-pod0000_idle.slice"] = false
	f.inactive = map[string]bool{"kubepods-besteffort-pod0000_idle.slice": true}
	parent, err := m.Ensure(t.Context(), testPod("0000-idle", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	calls := f.takeCalls()
	if !slices.Contains(calls, "start-existing kubepods-besteffort-pod0000_idle.slice") {
		t.Errorf("calls %q: the inactive slice was not started", calls)
	}
	if d, _ := m.MemoryDir(parent); !f.hasDir(d.Path) {
		t.Errorf("no cgroup %s", d.Path)
	}
}

func (f *fakeSystemd) hasDir(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func TestAFailedStopJobIsAnError(t *testing.T) {
	m, f := newSystemdManager(t)
	parent, err := m.Ensure(t.Context(), testPod("0000-stop", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	f.failStop = "kubepods-besteffort-pod0000_stop.slice"
	err = m.Remove(t.Context(), parent)
	if err == nil || !strings.Contains(err.Error(), `stop kubepods-besteffort-pod0000_stop.slice: systemd's job ended "failed"`) {
		t.Fatalf("Remove = %v, want the failed stop job", err)
	}
	if d, _ := m.MemoryDir(parent); !f.hasDir(d.Path) {
		t.Errorf("the cgroup of a slice systemd did not stop was removed underneath it")
	}
}

func TestAPopulatedSliceIsRefusedRightBeforeTheStop(t *testing.T) {
	m, f := newSystemdManager(t)
	parent, err := m.Ensure(t.Context(), testPod("0000-late", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	// A sandbox scope that appeared after the walk of cgroup.procs: the
	// kernel's cgroup.events says so for the whole subtree.
	d, _ := m.MemoryDir(parent)
	if err := os.WriteFile(filepath.Join(d.Path, "cgroup.events"), []byte("populated 1\nfrozen 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.takeCalls()
	err = m.placer.remove(t.Context(), parent, time.Now().Add(time.Second))
	if !errors.Is(err, ErrPopulated) {
		t.Fatalf("remove = %v, want ErrPopulated", err)
	}
	if calls := f.takeCalls(); len(calls) != 0 {
		t.Errorf("calls %q: a populated slice was stopped (stopping kills what it holds)", calls)
	}
}

// closedOnce is a SystemdConn whose every call fails with ErrClosed, as a
// connection does once systemd re-executed itself.
type closedOnce struct{ fakeSystemd }

func (c *closedOnce) StartTransientUnitContext(context.Context, string, string, []sddbus.Property, chan<- string) (int, error) {
	return 0, godbus.ErrClosed
}
func (c *closedOnce) Close() { c.calls = append(c.calls, "close") }

func TestADroppedDBusConnectionIsDialledAgain(t *testing.T) {
	l := v2Layout(t)
	dead := &closedOnce{}
	fresh := newFakeSystemd(l.Unified.Mount)
	dials := 0
	r := newReconnecting(dead, func() (SystemdConn, error) { dials++; return fresh, nil })
	m, err := New(t.Context(), l, Systemd, "/", Options{Systemd: r})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ensure(t.Context(), testPod("0000-redial", nil, nil)); err != nil {
		t.Fatalf("Ensure after systemd closed the connection: %v", err)
	}
	if dials != 1 || !slices.Contains(dead.calls, "close") {
		t.Errorf("dials %d, the dead connection closed: %v", dials, dead.calls)
	}
	if !slices.Contains(fresh.takeCalls(), "start kubepods-besteffort-pod0000_redial.slice") {
		t.Errorf("the pod slice was not started on the new connection")
	}
	t.Run("a connection that stays closed fails, after one retry", func(t *testing.T) {
		dead2 := &closedOnce{}
		r := newReconnecting(dead2, func() (SystemdConn, error) { return &closedOnce{}, nil })
		_, err := r.StartTransientUnitContext(t.Context(), "x.slice", "replace", nil, nil)
		if !errors.Is(err, godbus.ErrClosed) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestSameCgroupComparesDirectoriesNotSpellings(t *testing.T) {
	m, err := New(t.Context(), v2Layout(t), Cgroupfs, "nodeguard", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"nodeguard/kubepods/pod1", "/system.slice/nodeguard.service/nodeguard/kubepods/pod1", true},
		{"nodeguard/kubepods/pod1", "nodeguard/kubepods/pod2", false},
		{"/kubepods/pod1", "nodeguard/kubepods/pod1", false},
		{"/kubepods.slice/kubepods-pod1.slice", "/kubepods/pod1", false},
		{"../../escape", "nodeguard", false},
	} {
		if got := m.SameCgroup(c.a, c.b); got != c.same {
			t.Errorf("SameCgroup(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}

func TestTheQoSSlicesGetTheKubeletsCPUShares(t *testing.T) {
	m, f := newSystemdManager(t)
	if err := m.EnsureRoot(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.takeCalls()
	q := resource.MustParse
	pods := []*corev1.Pod{
		testPod("0000-b1", corev1.ResourceList{"cpu": q("250m")}, nil),
		testPod("0000-b2", corev1.ResourceList{"cpu": q("750m"), "memory": q("1Mi")}, nil),
		testPod("0000-e1", nil, nil),
	}
	if err := m.UpdateQOS(t.Context(), pods); err != nil {
		t.Fatal(err)
	}
	if got, want := f.takeCalls(), []string{"start kubepods-burstable.slice", "set kubepods-burstable.slice runtime=true",
		"start kubepods-besteffort.slice", "set kubepods-besteffort.slice runtime=true"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	if got, _ := f.prop("kubepods-burstable.slice", "CPUWeight"); got != CPUWeight(MilliCPUToShares(1000)) {
		t.Errorf("burstable CPUWeight = %v, want the weight of 1 CPU's shares", got)
	}
	if got, _ := f.prop("kubepods-besteffort.slice", "CPUWeight"); got != CPUWeight(MinShares) {
		t.Errorf("besteffort CPUWeight = %v, want the least", got)
	}
	t.Run("an unchanged pod set costs no D-Bus call", func(t *testing.T) {
		if err := m.UpdateQOS(t.Context(), pods); err != nil {
			t.Fatal(err)
		}
		if calls := f.takeCalls(); len(calls) != 0 {
			t.Errorf("calls %q", calls)
		}
	})
	t.Run("a burstable pod gone lowers the burstable slice's weight", func(t *testing.T) {
		if err := m.UpdateQOS(t.Context(), pods[1:]); err != nil {
			t.Fatal(err)
		}
		if got, _ := f.prop("kubepods-burstable.slice", "CPUWeight"); got != CPUWeight(MilliCPUToShares(750)) {
			t.Errorf("burstable CPUWeight = %v", got)
		}
	})
}
