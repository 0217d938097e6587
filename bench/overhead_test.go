package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name       string
		stat       string
		cpu, start time.Duration
		wantErr    bool
	}{
		{
			name: "utime and stime are summed in 10 ms ticks",
			stat: "1234 (nodeguard) S 1 1234 1234 0 -1 4194560 5000 0 0 0 150 25 0 0 20 0 12 0 100 1000000 5000 18446744073709551615",
			cpu:  1750 * time.Millisecond, start: time.Second,
		},
		{
			name: "the CPU of reaped children (cutime, cstime) is the parent's",
			stat: "99 (containerd-shim) S 1 99 99 0 -1 0 0 0 0 0 10 5 7 3 20 0 12 0 4200 1 1 1",
			cpu:  250 * time.Millisecond, start: 42 * time.Second,
		},
		{
			name: "a command name with spaces and parentheses does not shift the fields",
			stat: "7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 1 1 1",
			cpu:  70 * time.Millisecond, start: 10 * time.Millisecond,
		},
		{name: "a line without the command's closing parenthesis is refused", stat: "7 (abc S 1", wantErr: true},
		{name: "a line cut before starttime is refused", stat: "7 (a) S 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1", wantErr: true},
		{name: "a non-numeric utime is refused", stat: "7 (a) S 1 7 7 0 -1 0 0 0 0 0 x 4 0 0 20 0 1 0 1 1 1 1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu, start, err := ParseStat([]byte(tt.stat))
			if (err != nil) != tt.wantErr || cpu != tt.cpu || start != tt.start {
				t.Fatalf("ParseStat = %v, %v, %v; want %v, %v, error %v", cpu, start, err, tt.cpu, tt.start, tt.wantErr)
			}
		})
	}
}

func TestParseUptime(t *testing.T) {
	if up, err := ParseUptime([]byte("12345.67 23456.78\n")); err != nil || up != 12345670*time.Millisecond {
		t.Errorf("ParseUptime = %v, %v; want 12345.67s", up, err)
	}
	for _, bad := range []string{"", "x 1", "-1 2"} {
		if _, err := ParseUptime([]byte(bad)); err == nil {
			t.Errorf("ParseUptime(%q) took it", bad)
		}
	}
}

func TestParseStatusRSS(t *testing.T) {
	tests := []struct {
		name    string
		status  string
		want    uint64
		ok      bool
		wantErr bool
	}{
		{name: "VmRSS in kB is returned in bytes", status: "Name:\tx\nVmHWM:\t  900 kB\nVmRSS:\t  812 kB\nThreads:\t9\n", want: 812 << 10, ok: true},
		{name: "a kernel thread without VmRSS is not ok, and not 0 bytes", status: "Name:\tkthreadd\nThreads:\t1\n"},
		{name: "a VmRSS without its unit is refused", status: "VmRSS:\t812\n", wantErr: true},
		{name: "a non-numeric VmRSS is refused", status: "VmRSS:\tlots kB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok, err := ParseStatusRSS([]byte(tt.status))
			if (err != nil) != tt.wantErr || ok != tt.ok || got != tt.want {
				t.Fatalf("ParseStatusRSS = %d, %v, %v; want %d, %v, error %v", got, ok, err, tt.want, tt.ok, tt.wantErr)
			}
		})
	}
}

func TestReadProcUsageOfThisProcess(t *testing.T) {
	u, err := ReadProcUsage("/proc", os.Getpid())
	if err != nil || u.RSS == 0 {
		t.Fatalf("ReadProcUsage(self) = %+v, %v", u, err)
	}
	if _, err := ReadProcUsage(t.TempDir(), 1); !os.IsNotExist(err) {
		t.Fatalf("a missing process gave %v, want an error matching os.ErrNotExist", err)
	}
}

func TestFindProcsFindsThisProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pids, err := FindProcs("/proc", func(argv []string) bool {
		exe, _ := filepath.Abs(argv[0])
		return exe == self
	})
	found := false
	for _, p := range pids {
		found = found || p == os.Getpid()
	}
	if err != nil || !found {
		t.Fatalf("FindProcs = %v, %v; this process is %d", pids, err, os.Getpid())
	}
}

// fakeProc writes a /proc-like tree with one process whose CPU time the test
// advances.
type fakeProc struct {
	dir   string
	pid   int
	start int // starttime, ticks after boot
}

func (f fakeProc) set(t *testing.T, ticks int, rssKB int) {
	t.Helper()
	d := filepath.Join(f.dir, fmt.Sprint(f.pid))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (fake) S 1 1 1 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 %d 1 1 1\n", f.pid, ticks, f.start)
	if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "status"), fmt.Appendf(nil, "VmRSS:\t%d kB\n", rssKB), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSampleTurnsCPUTimeDeltasIntoCores(t *testing.T) {
	p := fakeProc{dir: t.TempDir(), pid: 42}
	p.set(t, 0, 1024)
	var mu sync.Mutex
	reads := 0
	// Each read of the group's pids advances the process by 5 ticks
	// (50 ms of CPU) and grows its RSS: over 100 ms intervals that is
	// about half a core.
	group := ProcGroup{Name: "fake", PIDs: func() ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		p.set(t, 5*reads, 1024+reads)
		reads++
		return []int{p.pid, 4242}, nil // 4242 does not exist: skipped
	}}
	series, err := Sample(t.Context(), p.dir, []ProcGroup{group}, 500*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := series[0]
	if len(s.RSS) < 5 || len(s.Cores) != len(s.RSS)-1 {
		t.Fatalf("%d RSS samples and %d CPU intervals", len(s.RSS), len(s.Cores))
	}
	if c := s.MeanCores(); c < 0.3 || c > 0.55 {
		t.Errorf("mean %.3f cores, want about 0.5 (50 ms of CPU per 100 ms)", c)
	}
	if want := uint64(1024+len(s.RSS)-1) << 10; s.MaxRSS() != want {
		t.Errorf("max RSS %d, want %d", s.MaxRSS(), want)
	}
	if s.Procs[0] != 1 {
		t.Errorf("procs %v: the missing pid was counted", s.Procs)
	}
}

// A process that starts between two readings (a shim of a churned pod)
// counts whole in that interval: its start-up CPU is not lost. One that
// was already running when it first shows up counts from then on only.
func TestSampleCountsAProcessBornWithinAnInterval(t *testing.T) {
	dir := t.TempDir()
	setUptime := func(ticks int) {
		if err := os.WriteFile(filepath.Join(dir, "uptime"), fmt.Appendf(nil, "%d.%02d 0.00\n", ticks/100, ticks%100), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := fakeProc{dir: dir, pid: 10, start: 100}
	born := fakeProc{dir: dir, pid: 11} // started at the second reading
	late := fakeProc{dir: dir, pid: 12, start: 50}
	var mu sync.Mutex
	reads := 0
	group := ProcGroup{Name: "fake", PIDs: func() ([]int, error) {
		mu.Lock()
		defer mu.Unlock()
		setUptime(1000 + 10*(reads+1)) // what the next reading sees: 100 ms on
		old.set(t, 0, 1024)
		pids := []int{old.pid}
		if reads >= 1 {
			born.start = 1000 + 5 // after the first reading
			born.set(t, 30, 1024) // 300 ms of CPU (its own and its children's) at once
			late.set(t, 500, 1024)
			pids = append(pids, born.pid, late.pid)
		}
		reads++
		return pids, nil
	}}
	setUptime(1000) // Sample reads the uptime before the pids
	series, err := Sample(t.Context(), dir, []ProcGroup{group}, 300*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s := series[0]
	if len(s.Cores) < 2 {
		t.Fatalf("%d intervals", len(s.Cores))
	}
	// 300 ms in an interval of about 100 ms is about 3 cores; the late
	// process's 5 s would make it about 50, and losing the born one 0.
	if c := s.Cores[0]; c < 1.5 || c > 6 {
		t.Errorf("the first interval: %.2f cores, want about 3 (the born process's 300 ms whole, none of the late one's 5 s)", c)
	}
	for i, c := range s.Cores[1:] {
		if c != 0 {
			t.Errorf("interval %d: %.2f cores, want 0 (nothing ran)", i+1, c)
		}
	}
}

// fakePods is an agent whose pods run as soon as they are applied.
type fakePods struct {
	mu      sync.Mutex
	pods    map[string]corev1.Pod
	applied int
}

func (f *fakePods) Apply(_ context.Context, manifest []byte, _ string) (*corev1.PodList, error) {
	var p corev1.Pod
	if err := yaml.Unmarshal(manifest, &p); err != nil {
		return nil, err
	}
	probed := strings.HasPrefix(p.Name, probedPrefix)
	if !probed && !bytes.Contains(manifest, []byte(`command: [sleep, "3600"]`)) {
		return nil, fmt.Errorf("pod %s does not sleep", p.Name)
	}
	if probed && (p.Spec.Containers[0].ReadinessProbe == nil || p.Spec.Containers[0].LivenessProbe == nil) {
		return nil, fmt.Errorf("probed pod %s lacks a readiness or liveness probe", p.Name)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[p.Namespace+"/"+p.Name] = p
	f.applied++
	return &corev1.PodList{Items: []corev1.Pod{p}}, nil
}

func (f *fakePods) Delete(_ context.Context, namespace, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.pods[namespace+"/"+name]; !ok {
		return fmt.Errorf("%s/%s not found", namespace, name)
	}
	delete(f.pods, namespace+"/"+name)
	return nil
}

func (f *fakePods) Get(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[namespace+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", namespace, name, api.ErrNotFound)
	}
	return &p, nil
}

func (f *fakePods) List(context.Context) (*corev1.PodList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &corev1.PodList{}
	for _, p := range f.pods {
		l.Items = append(l.Items, p)
	}
	return l, nil
}

func TestRunOverheadFillsMeasuresChurnsAndCleansUp(t *testing.T) {
	agent := &fakePods{pods: map[string]corev1.Pod{}}
	self := ProcGroup{Name: "self", PIDs: func() ([]int, error) { return []int{os.Getpid()}, nil }}
	rows, err := RunOverhead(t.Context(), agent, []ProcGroup{self}, OverheadConfig{
		Pods: []int{3, 5}, Window: 400 * time.Millisecond, Interval: 100 * time.Millisecond, Parallel: 2, Image: "busybox",
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%d %s %s", r.Pods, r.Phase, r.Process))
		if r.MaxRSS == 0 || len(r.Series.Cores) == 0 {
			t.Errorf("row %+v has no samples", r)
		}
		if r.Phase == "churn" && r.Churned == 0 {
			t.Errorf("no pod was churned at %d pods", r.Pods)
		}
		if r.Phase == "churn" && (r.Start.N != r.Churned || r.Delete.N != r.Churned || r.Start.P99 <= 0 || r.Delete.P99 <= 0) {
			t.Errorf("churn at %d pods: %d pods churned, starts %+v, deletes %+v: want one timing each", r.Pods, r.Churned, r.Start, r.Delete)
		}
	}
	if want := "3 idle self,3 churn self,5 idle self,5 churn self"; strings.Join(got, ",") != want {
		t.Fatalf("rows %v, want %s", got, want)
	}
	if len(agent.pods) != 0 {
		t.Fatalf("%d pods left after the benchmark", len(agent.pods))
	}
	if agent.applied <= 5 {
		t.Fatalf("%d pods applied: the churn applied none", agent.applied)
	}

	var table bytes.Buffer
	WriteOverheadTable(&table, rows, "self")
	if !strings.Contains(table.String(), "MET") && !strings.Contains(table.String(), "MISSED") {
		t.Errorf("the table has no verdict against the target:\n%s", table.String())
	}
	dir := t.TempDir()
	files, err := WriteOverheadFiles(dir, rows, "self", 100*time.Millisecond)
	if err != nil || len(files) != 3 {
		t.Fatalf("WriteOverheadFiles = %v, %v", files, err)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "overhead.csv"))
	if err != nil || strings.Count(string(csv), "\n") != len(rows)+1 {
		t.Fatalf("overhead.csv:\n%s (%v)", csv, err)
	}
}

func TestRunOverheadWithProbesSwapsInProbedPods(t *testing.T) {
	agent := &fakePods{pods: map[string]corev1.Pod{}}
	self := ProcGroup{Name: "self", PIDs: func() ([]int, error) { return []int{os.Getpid()}, nil }}
	mix, err := ParseProbeMix("exec,http,tcp,grpc")
	if err != nil {
		t.Fatal(err)
	}
	// The agent's counter: 7 more probes, 1 of them failed, at each read.
	var reads uint64
	totals := func(context.Context) (ProbeTotals, error) {
		reads++
		return ProbeTotals{All: 7 * reads, Failed: reads}, nil
	}
	rows, err := RunOverhead(t.Context(), agent, []ProcGroup{self}, OverheadConfig{
		Pods: []int{2, 4}, Window: 300 * time.Millisecond, Interval: 100 * time.Millisecond, Parallel: 2, Image: "busybox",
		Probes: mix, ProbeTotals: totals,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%d %s", r.Pods, r.Phase))
		if r.Phase == "probed" && (r.Probes != 7 || r.ProbesFailed != 1 || r.ProbeRate() <= 0) {
			t.Errorf("probed row at %d pods: %d probes, %d failed, %.1f/s; want 7, 1 and a rate", r.Pods, r.Probes, r.ProbesFailed, r.ProbeRate())
		}
	}
	if want := "2 idle,2 churn,2 probed,4 idle,4 churn,4 probed"; strings.Join(got, ",") != want {
		t.Fatalf("rows %v, want %s", got, want)
	}
	if len(agent.pods) != 0 {
		t.Fatalf("%d pods left after the benchmark", len(agent.pods))
	}
	var table bytes.Buffer
	WriteOverheadTable(&table, rows, "self")
	if !strings.Contains(table.String(), "self at 4 pods: ") || !strings.Contains(table.String(), "cores idle without probes") {
		t.Errorf("the table does not set the probed window beside the idle one:\n%s", table.String())
	}
	t.Run("without a probe counter it refuses to start", func(t *testing.T) {
		if _, err := RunOverhead(t.Context(), agent, []ProcGroup{self}, OverheadConfig{Pods: []int{1}, Probes: mix}); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestProbedManifestsAreValidPods(t *testing.T) {
	for _, kind := range ProbeKinds {
		t.Run(kind, func(t *testing.T) {
			m := probedManifest(probedPrefix+"0", "registry.local/nodeguard/busybox:1.35", "16Mi", kind, 10*time.Second)
			pods, err := podspec.Parse(bytes.NewReader(m), kind+".yaml")
			if err != nil {
				t.Fatalf("%s\n%v", m, err)
			}
			if _, errs := podspec.Validate(pods[0], podspec.Options{}); len(errs) > 0 {
				t.Fatalf("%s\nrefused: %v", m, errs.ToAggregate())
			}
			c := pods[0].Spec.Containers[0]
			if c.ReadinessProbe == nil || c.LivenessProbe == nil || c.ReadinessProbe.PeriodSeconds != 10 {
				t.Fatalf("probes %+v %+v, want both every 10 s", c.ReadinessProbe, c.LivenessProbe)
			}
		})
	}
	if _, err := ParseProbeMix("exec,udp"); err == nil {
		t.Error("ParseProbeMix accepted udp")
	}
}

func TestParseProbeTotals(t *testing.T) {
	text := `# HELP prober_probe_total Cumulative number of a liveness, readiness or startup probe for a container by result.
# TYPE prober_probe_total counter
prober_probe_total{container="main",namespace="bench",pod="probed-0",probe_type="Liveness",result="successful"} 12
prober_probe_total{container="main",namespace="bench",pod="probed-0",probe_type="Readiness",result="failed"} 3
prober_probe_total{container="main",namespace="bench",pod="probed-1",probe_type="Readiness",result="unknown"} 1
# TYPE other_total counter
other_total 99
`
	got, err := ParseProbeTotals(strings.NewReader(text))
	if err != nil || got != (ProbeTotals{All: 16, Failed: 3}) {
		t.Fatalf("ParseProbeTotals = %+v, %v; want 16 of which 3 failed", got, err)
	}
	if got, err := ParseProbeTotals(strings.NewReader("other_total 1\n")); err != nil || got != (ProbeTotals{}) {
		t.Fatalf("without the metric: %+v, %v; want zero", got, err)
	}
	if _, err := ParseProbeTotals(strings.NewReader("prober_probe_total{ 1\n")); err == nil {
		t.Fatal("malformed exposition: no error")
	}
}

// slowPods runs a pod late: Get says Pending until runAfter has passed
// since its apply, while its container's status says it started startAt
// after the apply, as a runtime stamps it.
type slowPods struct {
	fakePods
	runAfter, startAt time.Duration
	applied           map[string]time.Time
}

func (f *slowPods) Apply(ctx context.Context, manifest []byte, source string) (*corev1.PodList, error) {
	l, err := f.fakePods.Apply(ctx, manifest, source)
	if err == nil {
		f.mu.Lock()
		f.applied[l.Items[0].Name] = time.Now()
		f.mu.Unlock()
	}
	return l, err
}

func (f *slowPods) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	p, err := f.fakePods.Get(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	at := f.applied[name]
	f.mu.Unlock()
	if time.Since(at) < f.runAfter {
		p.Status.Phase = corev1.PodPending
		return p, nil
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{
		Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at.Add(f.startAt))}}}}
	return p, nil
}

// A churned pod's start is the runtime's stamp when the client reads pods
// from the runtime, and when a poll saw it Running otherwise.
func TestChurnOneTimesTheStartAsTheRuntimeStampedIt(t *testing.T) {
	for _, runtimeView := range []bool{true, false} {
		f := &slowPods{fakePods: fakePods{pods: map[string]corev1.Pod{}}, runAfter: 400 * time.Millisecond, startAt: 20 * time.Millisecond,
			applied: map[string]time.Time{}}
		start, del, err := churnOne(t.Context(), t.Context(), f, "churn-0", OverheadConfig{Image: "busybox", MemoryLimit: "16Mi", RuntimeView: runtimeView})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case runtimeView && (start < 20*time.Millisecond || start >= 400*time.Millisecond):
			t.Errorf("runtime view: start %s, want the stamp's 20 ms", start)
		case !runtimeView && start < 400*time.Millisecond:
			t.Errorf("agent view: start %s, want when a poll saw it Running (>= 400 ms)", start)
		}
		if del <= 0 || len(f.pods) != 0 {
			t.Errorf("delete %s, %d pods left", del, len(f.pods))
		}
	}
}

// The open loop applies pods at its rate whatever the agent's pace, and
// counts the arrivals it skips while its in-flight pods are all taken.
func TestOpenLoopChurnKeepsItsRateAndCountsSkips(t *testing.T) {
	self := ProcGroup{Name: "self", PIDs: func() ([]int, error) { return []int{os.Getpid()}, nil }}
	for _, tc := range []struct {
		name     string
		runAfter time.Duration
		skips    bool
	}{{"a fast agent", 0, false}, {"a slow agent", 300 * time.Millisecond, true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := &slowPods{fakePods: fakePods{pods: map[string]corev1.Pod{}}, runAfter: tc.runAfter, applied: map[string]time.Time{}}
			rows, err := RunOverhead(t.Context(), f, []ProcGroup{self}, OverheadConfig{
				Pods: []int{1}, Window: 500 * time.Millisecond, Interval: 100 * time.Millisecond, Parallel: 1, Image: "busybox",
				ChurnRate: 40, MaxPods: 1 + 2 + 8,
			})
			if err != nil {
				t.Fatal(err)
			}
			var churn OverheadRow
			for _, r := range rows {
				if r.Phase == "churn" {
					churn = r
				}
			}
			switch {
			case !tc.skips && (churn.Churned < 8 || churn.ChurnSkipped != 0):
				// 40/s over 0.5 s is 20 arrivals; a loaded machine's
				// ticker may merge some, never to under 8.
				t.Errorf("fast agent: %d churned, %d skipped; want most of 20 arrivals churned and none skipped", churn.Churned, churn.ChurnSkipped)
			case tc.skips && (churn.ChurnSkipped == 0 || churn.Churned == 0):
				t.Errorf("slow agent: %d churned, %d skipped; want some of each (2 in flight, 300 ms each, 40 arrivals/s)", churn.Churned, churn.ChurnSkipped)
			}
			if len(f.pods) != 0 {
				t.Errorf("%d pods left", len(f.pods))
			}
		})
	}
}
