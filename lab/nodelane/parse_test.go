//go:build !nodelane

package nodelane

import (
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Files in testdata/guest were taken from the lane's guest (containerd
// 1.6.20 with SystemdCgroup = true, systemd 252, kernel 6.12) with a pod
// made through crictl.

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/guest/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const fixtureUID = "0badc0de-1111-2222-3333-444455556666"

func TestProcCgroupV2(t *testing.T) {
	got, err := ProcCgroupV2(fixture(t, "proc-cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ContainerScope(corev1.PodQOSBurstable, fixtureUID, "f0685152df4708fcff6aac654a1b8af2e154279971e324fc4faed547ea92132b")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("the guest's container cgroup %s is not the expected scope %s", got, want)
	}
	for _, bad := range []string{"", "12:memory:/x\n0::/y\n", "0:cpu:/x", "garbage", "0::relative"} {
		if _, err := ProcCgroupV2([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ProcCgroupV2(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestPodSliceAndContainerScope(t *testing.T) {
	id := strings.Repeat("ab", 32)
	tests := []struct {
		qos  corev1.PodQOSClass
		want string
	}{
		{corev1.PodQOSBestEffort, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b_3c.slice"},
		{corev1.PodQOSBurstable, "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c.slice"},
		{corev1.PodQOSGuaranteed, "/kubepods.slice/kubepods-pod1a2b_3c.slice"},
	}
	for _, tt := range tests {
		t.Run(string(tt.qos)+" pods have the kubelet's slice", func(t *testing.T) {
			got, err := PodSlice(tt.qos, "1a2b-3c")
			if err != nil || got != tt.want {
				t.Errorf("PodSlice = %q, %v; want %q", got, err, tt.want)
			}
			scope, err := ContainerScope(tt.qos, "1a2b-3c", id)
			if err != nil || scope != tt.want+"/cri-containerd-"+id+".scope" {
				t.Errorf("ContainerScope = %q, %v", scope, err)
			}
		})
	}
	for _, bad := range []struct {
		qos      corev1.PodQOSClass
		uid, cid string
	}{{"Platinum", "a", id}, {corev1.PodQOSBurstable, "a/b", id}, {corev1.PodQOSBurstable, "", id}, {corev1.PodQOSBurstable, "a", "short"}, {corev1.PodQOSBurstable, "a", strings.Repeat("G", 64)}} {
		if _, err := ContainerScope(bad.qos, bad.uid, bad.cid); !errors.Is(err, ErrMalformed) {
			t.Errorf("ContainerScope(%q, %q, %q) = %v, want ErrMalformed", bad.qos, bad.uid, bad.cid, err)
		}
	}
}

func TestParseFlatKeyed(t *testing.T) {
	m, err := ParseFlatKeyed(fixture(t, "memory.events"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m["oom_kill"]; !ok || v != 0 || len(m) != 6 {
		t.Errorf("memory.events = %v", m)
	}
	for _, bad := range []string{"oom", "oom x", "oom 1 2"} {
		if _, err := ParseFlatKeyed([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseFlatKeyed(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func TestRuncSystemdCgroup(t *testing.T) {
	systemd, runtime, ok, err := RuncSystemdCgroup(fixture(t, "crictl-info.json"))
	if err != nil || !ok || !systemd || runtime != "runc" {
		t.Errorf("containerd 1.6's crictl info: systemd %v runtime %q ok %v err %v", systemd, runtime, ok, err)
	}
	_, _, ok, err = RuncSystemdCgroup([]byte(`{"config":{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"options":{}}}}}}`))
	if ok || err != nil {
		t.Errorf("options without SystemdCgroup: ok %v err %v, want not ok", ok, err)
	}
	if _, _, _, err := RuncSystemdCgroup([]byte("not json")); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

func TestParseCRIPodsAndContainers(t *testing.T) {
	pods, err := ParseCRIPods(fixture(t, "crictl-pods.json"))
	if err != nil || len(pods) != 1 {
		t.Fatalf("pods %v, %v", pods, err)
	}
	p := pods[0]
	if p.State != "SANDBOX_READY" || p.Metadata.UID != fixtureUID || p.Labels[LabelPodUID] != fixtureUID ||
		p.Labels[LabelPodName] != "fixture" || p.Labels[LabelPodNamespace] != "lane" {
		t.Errorf("sandbox %+v", p)
	}
	cs, err := ParseCRIContainers(fixture(t, "crictl-ps.json"))
	if err != nil || len(cs) != 1 {
		t.Fatalf("containers %v, %v", cs, err)
	}
	c := cs[0]
	if c.PodSandboxID != p.ID || c.State != "CONTAINER_RUNNING" || c.Labels[LabelContainerName] != "sleep" || c.Metadata.Name != "sleep" {
		t.Errorf("container %+v", c)
	}
	if _, err := ParseCRIPods([]byte("[")); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

func TestParseJournal(t *testing.T) {
	es, err := ParseJournal(fixture(t, "journal-containerd.json"))
	if err != nil || len(es) != 5 {
		t.Fatalf("%d entries, %v", len(es), err)
	}
	for _, e := range es {
		if e["SYSLOG_IDENTIFIER"] != "containerd" || e["PRIORITY"] == "" || e["MESSAGE"] == "" || e["__CURSOR"] == "" {
			t.Errorf("entry %v", e)
		}
	}
	t.Run("a message journald stores as bytes is decoded", func(t *testing.T) {
		es, err := ParseJournal([]byte(`{"MESSAGE":[104,105,10],"PRIORITY":"4"}` + "\n"))
		if err != nil || len(es) != 1 || es[0]["MESSAGE"] != "hi\n" || es[0]["PRIORITY"] != "4" {
			t.Errorf("%v, %v", es, err)
		}
	})
	if _, err := ParseJournal([]byte("{\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

func TestIPLeases(t *testing.T) {
	got := IPLeases([]string{"lock", "last_reserved_ip.0", "10.88.0.2", "10.88.0.3", "fd00::2", "10.88.0.x"})
	if !slices.Equal(got, []string{"10.88.0.2", "10.88.0.3", "fd00::2"}) {
		t.Errorf("IPLeases = %q", got)
	}
}

func TestMountsBelow(t *testing.T) {
	mi := fixture(t, "mountinfo")
	if got, err := MountsBelow(mi, "/sys/fs/cgroup"); err != nil || !slices.Equal(got, []string{"/sys/fs/cgroup"}) {
		t.Errorf("MountsBelow /sys/fs/cgroup = %q, %v", got, err)
	}
	extra := append(append([]byte(nil), mi...), []byte("99 1 0:50 / /var/lib/nodeguard/pods/u/volumes/empty\\040dir rw - tmpfs tmpfs rw\n"+
		"100 1 0:51 / /var/lib/nodeguard/podsX rw - tmpfs tmpfs rw\n")...)
	got, err := MountsBelow(extra, "/var/lib/nodeguard/pods/")
	if err != nil || !slices.Equal(got, []string{"/var/lib/nodeguard/pods/u/volumes/empty dir"}) {
		t.Errorf("MountsBelow = %q, %v", got, err)
	}
	if _, err := MountsBelow([]byte("1 2 3\n"), "/"); !errors.Is(err, ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
}

func TestKernelOOMLines(t *testing.T) {
	log := "[ 27.1] nodelane: eviction check\n[ 27.2] hog invoked oom-killer: gfp_mask=0xcc0\n[ 27.3] something else\n" +
		"[ 27.4] Memory cgroup out of memory: Killed process 451 (hog)\n[ 27.5] oom-kill:constraint=CONSTRAINT_MEMCG\n"
	if got := KernelOOMLines(log); len(got) != 3 {
		t.Errorf("KernelOOMLines = %q, want the three OOM lines", got)
	}
	if got := KernelOOMLines("[ 1.0] all quiet\n"); got != nil {
		t.Errorf("KernelOOMLines = %q on a quiet log", got)
	}
}

// Files in testdata/crictl are crictl v1.37.0's output: containerd
// 2.4.2's info and images from the lane's guest (the containerd check
// keeps them on the output disk: the lane's build and version 3 config,
// the three images imported); its version and runtime-config, and
// Debian's 1.6.20's, from each started on the development host with its
// root, state and socket in a temporary directory.

func crictlFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/crictl/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRuntimeConfigDriver(t *testing.T) {
	tests := []struct {
		name   string
		out    []byte
		failed bool
		want   string
		err    error
	}{
		{"containerd 2.4.2 reports the systemd driver", crictlFixture(t, "containerd-2.4.2-runtime-config.txt"), false, "systemd", nil},
		{"the cgroupfs driver is read as such", []byte("cgroup driver:   CGROUPFS\n"), false, "cgroupfs", nil},
		{"containerd 1.6.20's Unimplemented is not reported", crictlFixture(t, "containerd-1.6.20-runtime-config.txt"), true, "", ErrNotReported},
		{"an answer without Linux config is not reported", []byte(""), false, "", ErrNotReported},
		{"another failure is malformed", []byte("connect: connection refused"), true, "", ErrMalformed},
		{"an unknown driver is malformed", []byte("cgroup driver:   WHATEVER\n"), false, "", ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RuntimeConfigDriver(tt.out, tt.failed)
			if got != tt.want || !errors.Is(err, tt.err) || (tt.err == nil) != (err == nil) {
				t.Errorf("RuntimeConfigDriver = %q, %v; want %q, %v", got, err, tt.want, tt.err)
			}
			if errors.Is(err, ErrNotReported) && errors.Is(err, ErrMalformed) {
				t.Errorf("%v is both not reported and malformed", err)
			}
		})
	}
}

func TestParseCRIVersion(t *testing.T) {
	for file, want := range map[string]CRIVersion{
		"containerd-2.4.2-version.txt":  {"containerd", "v2.4.2", "v1"},
		"containerd-1.6.20-version.txt": {"containerd", "1.6.20~ds1", "v1"},
	} {
		got, err := ParseCRIVersion(crictlFixture(t, file))
		if err != nil || got != want {
			t.Errorf("%s: %+v, %v; want %+v", file, got, err, want)
		}
	}
	if _, err := ParseCRIVersion([]byte("Version:  0.1.0\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("no runtime: %v, want ErrMalformed", err)
	}
}

// pinnedField is the pinned field of crictl images -o json, however spaced.
var pinnedField = regexp.MustCompile(`"pinned":\s*(true|false)`)

func TestSandboxImage(t *testing.T) {
	const pause = "registry.local/nodeguard/pause:3.9"
	v2Images := crictlFixture(t, "containerd-2.4.2-images.json")
	t.Run("containerd 1.6 shows it in crictl info", func(t *testing.T) {
		im, src, err := SandboxImage(fixture(t, "crictl-info.json"), []byte(`{"images":[]}`))
		if err != nil || im != pause || !strings.Contains(src, "sandboxImage") {
			t.Errorf("%q from %q, %v", im, src, err)
		}
	})
	t.Run("containerd 2.x pins it", func(t *testing.T) {
		im, src, err := SandboxImage(crictlFixture(t, "containerd-2.4.2-info.json"), v2Images)
		if err != nil || im != pause || !strings.Contains(src, "pinned") {
			t.Errorf("%q from %q, %v", im, src, err)
		}
	})
	t.Run("nothing pinned and no sandboxImage is not reported", func(t *testing.T) {
		unpinned := pinnedField.ReplaceAllString(string(v2Images), `"pinned": false`)
		if _, _, err := SandboxImage([]byte(`{"config":{}}`), []byte(unpinned)); !errors.Is(err, ErrNotReported) {
			t.Errorf("%v, want ErrNotReported", err)
		}
	})
	t.Run("two pinned images are ambiguous", func(t *testing.T) {
		both := pinnedField.ReplaceAllString(string(v2Images), `"pinned": true`)
		if _, _, err := SandboxImage([]byte(`{"config":{}}`), []byte(both)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%v, want ErrMalformed", err)
		}
	})
	for _, bad := range [][2]string{{"not json", "{}"}, {"{}", "not json"}} {
		if _, _, err := SandboxImage([]byte(bad[0]), []byte(bad[1])); !errors.Is(err, ErrMalformed) {
			t.Errorf("SandboxImage(%q, %q) = %v, want ErrMalformed", bad[0], bad[1], err)
		}
	}
}

func TestRuncSystemdCgroupOfContainerd2(t *testing.T) {
	systemd, runtime, ok, err := RuncSystemdCgroup(crictlFixture(t, "containerd-2.4.2-info.json"))
	if err != nil || !ok || !systemd || runtime != "runc" {
		t.Errorf("containerd 2.4.2's crictl info: systemd %v runtime %q ok %v err %v; want runc's SystemdCgroup true, as 1.6 shows it", systemd, runtime, ok, err)
	}
}
