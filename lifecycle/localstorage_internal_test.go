package lifecycle

import (
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/mounts"
)

const mi = 1 << 20

func emptyDir(name string, medium corev1.StorageMedium, sizeLimit string) corev1.Volume {
	e := &corev1.EmptyDirVolumeSource{Medium: medium}
	if sizeLimit != "" {
		q := resource.MustParse(sizeLimit)
		e.SizeLimit = &q
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: e}}
}

func ctr(name, limit string) corev1.Container {
	c := corev1.Container{Name: name, Image: "busybox"}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse(limit)}
	}
	return c
}

func disk(name string, bytes uint64) mounts.VolumeUsage {
	return mounts.VolumeUsage{Plugin: mounts.PluginEmptyDir, Name: name, Bytes: bytes, Medium: mounts.MediumDisk}
}

func TestCheckLocalStorage(t *testing.T) {
	for _, c := range []struct {
		name       string
		volumes    []corev1.Volume
		init, ctrs []corev1.Container
		usage      PodStorage
		// wantSignal "" is no violation.
		wantSignal, wantMessage string
		wantUsed                uint64
	}{
		{
			name:       "an emptyDir past its sizeLimit is the kubelet's emptydirfs.limit",
			volumes:    []corev1.Volume{emptyDir("cache", "", ""), emptyDir("scratch", "", "4Mi")},
			ctrs:       []corev1.Container{ctr("main", "")},
			usage:      PodStorage{Volumes: []mounts.VolumeUsage{disk("cache", 100*mi), disk("scratch", 5*mi)}},
			wantSignal: SignalEmptyDirFsLimit, wantUsed: 5 * mi,
			wantMessage: `Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". `,
		},
		{
			name:    "an emptyDir at exactly its sizeLimit is within it",
			volumes: []corev1.Volume{emptyDir("scratch", "", "4Mi")},
			ctrs:    []corev1.Container{ctr("main", "")},
			usage:   PodStorage{Volumes: []mounts.VolumeUsage{disk("scratch", 4*mi)}},
		},
		{
			name:    "an emptyDir without a sizeLimit is never judged alone",
			volumes: []corev1.Volume{emptyDir("cache", "", "")},
			ctrs:    []corev1.Container{ctr("main", "")},
			usage:   PodStorage{Volumes: []mounts.VolumeUsage{disk("cache", 100<<30)}},
		},
		{
			name:    "a sizeLimit of zero means no limit, as for the kubelet",
			volumes: []corev1.Volume{emptyDir("scratch", "", "0")},
			ctrs:    []corev1.Container{ctr("main", "")},
			usage:   PodStorage{Volumes: []mounts.VolumeUsage{disk("scratch", 5*mi)}},
		},
		{
			name:    "an unmeasured emptyDir is not judged",
			volumes: []corev1.Volume{emptyDir("scratch", "", "4Mi")},
			ctrs:    []corev1.Container{ctr("main", "")},
			usage:   PodStorage{},
		},
		{
			name:    "the sizeLimit check comes before the pod's total",
			volumes: []corev1.Volume{emptyDir("scratch", "", "1Mi")},
			ctrs:    []corev1.Container{ctr("main", "2Mi")},
			usage: PodStorage{Volumes: []mounts.VolumeUsage{disk("scratch", 3*mi)},
				Containers: []ContainerStorage{{Name: "main", RootfsBytes: 3 * mi}}},
			wantSignal: SignalEmptyDirFsLimit, wantUsed: 3 * mi,
			wantMessage: `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". `,
		},
		{
			name:    "disk emptyDirs, writable layers and logs add up past the sum of the containers' limits",
			volumes: []corev1.Volume{emptyDir("cache", "", "")},
			ctrs:    []corev1.Container{ctr("a", "4Mi"), ctr("b", "4Mi")},
			usage: PodStorage{Volumes: []mounts.VolumeUsage{disk("cache", 3*mi)}, Containers: []ContainerStorage{
				{Name: "a", RootfsBytes: 2 * mi, LogsBytes: 1 * mi}, {Name: "b", RootfsBytes: 1 * mi, LogsBytes: 1*mi + 1}}},
			wantSignal: SignalEphemeralPodFsLimit, wantUsed: 8*mi + 1,
			wantMessage: "Pod ephemeral local storage usage exceeds the total limit of containers 8Mi. ",
		},
		{
			name:    "a memory emptyDir counts towards memory, not the pod's local storage",
			volumes: []corev1.Volume{emptyDir("mem", corev1.StorageMediumMemory, "")},
			ctrs:    []corev1.Container{ctr("main", "4Mi")},
			usage: PodStorage{Volumes: []mounts.VolumeUsage{{Plugin: mounts.PluginEmptyDir, Name: "mem", Bytes: 64 * mi, Medium: mounts.MediumMemory}},
				Containers: []ContainerStorage{{Name: "main", RootfsBytes: 1 * mi}}},
		},
		{
			name:       "a memory emptyDir past its sizeLimit (the tmpfs rounded up to pages) is evicted, as by the kubelet",
			volumes:    []corev1.Volume{emptyDir("mem", corev1.StorageMediumMemory, "1M")},
			ctrs:       []corev1.Container{ctr("main", "")},
			usage:      PodStorage{Volumes: []mounts.VolumeUsage{{Plugin: mounts.PluginEmptyDir, Name: "mem", Bytes: 245 * 4096, Medium: mounts.MediumMemory}}},
			wantSignal: SignalEmptyDirFsLimit, wantUsed: 245 * 4096,
			wantMessage: `Usage of EmptyDir volume "mem" exceeds the limit "1M". `,
		},
		{
			name: "an init container's limit counts when it is larger than the app containers' sum",
			init: []corev1.Container{ctr("setup", "16Mi")},
			ctrs: []corev1.Container{ctr("main", "4Mi")},
			usage: PodStorage{Containers: []ContainerStorage{
				{Name: "setup", LogsBytes: 2 * mi}, {Name: "main", RootfsBytes: 3 * mi}}},
		},
		{
			name: "a container's writable layer and logs past its own limit, the pod's total within",
			ctrs: []corev1.Container{ctr("quiet", "64Mi"), ctr("talker", "4Mi")},
			usage: PodStorage{Containers: []ContainerStorage{
				{Name: "quiet", RootfsBytes: 1 * mi}, {Name: "talker", RootfsBytes: 1 * mi, LogsBytes: 3*mi + 1}}},
			wantSignal: SignalEphemeralContainerFsLimit, wantUsed: 4*mi + 1,
			wantMessage: `Container talker exceeded its local ephemeral storage limit "4Mi". `,
		},
		{
			name: "a container without a limit is judged only within the pod's total",
			ctrs: []corev1.Container{ctr("limited", "4Mi"), ctr("free", "")},
			usage: PodStorage{Containers: []ContainerStorage{
				{Name: "limited", RootfsBytes: 1 * mi}, {Name: "free", LogsBytes: 4 * mi}}},
			wantSignal: SignalEphemeralPodFsLimit, wantUsed: 5 * mi,
			wantMessage: "Pod ephemeral local storage usage exceeds the total limit of containers 4Mi. ",
		},
		{
			name:  "a pod without limits is never in violation",
			ctrs:  []corev1.Container{ctr("main", "")},
			usage: PodStorage{Containers: []ContainerStorage{{Name: "main", RootfsBytes: 100 << 30}}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: c.volumes, InitContainers: c.init, Containers: c.ctrs}}
			v, over := checkLocalStorage(pod, &c.usage)
			if c.wantSignal == "" {
				if over {
					t.Fatalf("violation %+v, want none", v)
				}
				return
			}
			if !over {
				t.Fatalf("no violation, want %s", c.wantSignal)
			}
			if v.Signal != c.wantSignal || v.Message != c.wantMessage || v.Used != c.wantUsed {
				t.Errorf("violation %s %q used %d, want %s %q used %d", v.Signal, v.Message, v.Used, c.wantSignal, c.wantMessage, c.wantUsed)
			}
			if v.Threshold == "" {
				t.Error("the violation names no threshold")
			}
		})
	}
}

// decisions records what an Observer is told.
type decisions struct{ got []evictionapi.Decision }

func (d *decisions) OnDecision(dec evictionapi.Decision, _ evictionapi.Timing) {
	d.got = append(d.got, dec)
}

// TestEnforceLocalStorage drives the enforcement of one measured pod
// through the eviction actor, without a runtime: a soft eviction only
// marks the pod and wakes its worker, which is not running here.
func TestEnforceLocalStorage(t *testing.T) {
	over := PodStorage{Volumes: []mounts.VolumeUsage{disk("scratch", 5*mi)}}
	const msg = `Usage of EmptyDir volume "scratch" exceeds the limit "4Mi". `
	for _, c := range []struct {
		name     string
		cfg      LocalStorageConfig
		source   string
		priority int32
		// wantEvicted: the pod is Failed, Evicted; wantReported: the
		// observer hears of it (once over two passes).
		wantEvicted, wantReported, wantDryRun bool
	}{
		{name: "an API pod past its sizeLimit is evicted and reported", source: SourceAPI, wantEvicted: true, wantReported: true},
		{name: "in dry run it is reported once and left running", cfg: LocalStorageConfig{DryRun: true}, source: SourceAPI, wantReported: true, wantDryRun: true},
		{name: "a static pod is spared, as by the kubelet", source: "file"},
		{name: "a critical pod is spared", source: SourceAPI, priority: 2000000000},
		{name: "an exempt pod is spared", cfg: LocalStorageConfig{Exempt: []string{"default/p"}}, source: SourceAPI},
	} {
		t.Run(c.name, func(t *testing.T) {
			obs := &decisions{}
			c.cfg.Observer = obs
			m := &Manager{cfg: Config{RootDir: t.TempDir(), LocalStorage: c.cfg}, log: slog.New(slog.DiscardHandler), now: time.Now,
				pods: map[types.UID]*podState{}, ls: newLocalStorage(c.cfg), state: testStore(t)}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "u1"},
				Spec: corev1.PodSpec{Volumes: []corev1.Volume{emptyDir("scratch", "", "4Mi")}, Containers: []corev1.Container{ctr("main", "")},
					Priority: &c.priority}}
			st := &podState{pod: pod, source: c.source, sandboxID: "sb", kick: make(chan struct{}, 1),
				status: corev1.PodStatus{Phase: corev1.PodRunning}}
			m.pods[pod.UID] = st
			s := over
			s.UID = pod.UID
			for range 2 {
				m.enforceLocalStorage(t.Context(), &s, time.Now())
			}

			got, _ := m.Get("default", "p")
			evicted := got.Status.Phase == corev1.PodFailed && got.Status.Reason == ReasonEvicted && got.Status.Message == msg
			if evicted != c.wantEvicted {
				t.Errorf("status %s %q %q; evicted %v, want %v", got.Status.Phase, got.Status.Reason, got.Status.Message, evicted, c.wantEvicted)
			}
			if c.wantEvicted {
				if st.evicted == nil || st.evicted.Grace != localStorageGrace {
					t.Errorf("eviction %+v, want the kubelet's grace of %v", st.evicted, localStorageGrace)
				}
				if m.loadEviction(pod.UID) == nil {
					t.Error("the eviction was not persisted: a restarted nodeguard would run the pod again")
				}
			}
			if reported := len(obs.got) == 1; reported != c.wantReported || len(obs.got) > 1 {
				t.Fatalf("observer got %d decisions, want reported=%v once", len(obs.got), c.wantReported)
			}
			if c.wantReported {
				d := obs.got[0]
				if d.Signal != SignalEmptyDirFsLimit || d.Message != msg || d.DryRun != c.wantDryRun || d.Hard ||
					d.Observed != 5*mi || d.Threshold != "spec.volumes[0].emptyDir.sizeLimit=4Mi" {
					t.Errorf("decision %+v", d)
				}
			}
		})
	}
}

func TestUnenforcedLocalStorageIsWarnedAbout(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"},
		Spec: corev1.PodSpec{
			Volumes:    []corev1.Volume{emptyDir("mem", corev1.StorageMediumMemory, "1Mi"), emptyDir("scratch", "", "4Mi")},
			Containers: []corev1.Container{ctr("main", "4Mi")},
		}}
	for _, c := range []struct {
		name   string
		cfg    LocalStorageConfig
		source string
		want   int
	}{
		{"an API pod's limits are enforced: no warning", LocalStorageConfig{}, SourceAPI, 0},
		{"a static pod's disk sizeLimit and ephemeral-storage limit are not", LocalStorageConfig{}, "file", 2},
		{"an exempt pod's are not", LocalStorageConfig{Exempt: []string{"default/p"}}, SourceAPI, 2},
		{"with eviction disabled nobody's are", LocalStorageConfig{Disabled: true}, SourceAPI, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &Manager{cfg: Config{LocalStorage: c.cfg}, ls: newLocalStorage(c.cfg)}
			got := m.unenforcedLocalStorage(pod, c.source)
			if len(got) != c.want {
				t.Errorf("warnings %q, want %d (a memory emptyDir's sizeLimit sizes its tmpfs: always honoured)", got, c.want)
			}
		})
	}
}
