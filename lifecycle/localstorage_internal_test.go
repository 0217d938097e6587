package lifecycle

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

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
