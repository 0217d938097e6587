package cri

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func ptr[T any](v T) *T { return &v }

// testPod is a defaulted pod as lifecycle/podspec hands it over: one app
// container with limits cpu 500m and memory 128Mi (requests defaulted to
// them).
func testPod() *corev1.Pod {
	limits := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("500m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "default", UID: "6f1c2c8e-0d3f-8a3e-9c51-2b7e1f0a4d11",
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"note": "hello"},
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyAlways,
			DNSPolicy:                     corev1.DNSClusterFirst,
			TerminationGracePeriodSeconds: ptr(int64(30)),
			SecurityContext:               &corev1.PodSecurityContext{},
			Containers: []corev1.Container{{
				Name:                     "app",
				Image:                    "busybox:1.36",
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources:                corev1.ResourceRequirements{Limits: limits, Requests: limits.DeepCopy()},
			}},
		},
	}
}

func nodeDNS() *runtimeapi.DNSConfig {
	return &runtimeapi.DNSConfig{
		Servers:  []string{"192.0.2.53"},
		Searches: []string{"example.test"},
		Options:  []string{"ndots:1", "timeout:2"},
	}
}

func TestSandboxConfigOfAPlainPod(t *testing.T) {
	pod := testPod()
	before := pod.DeepCopy()
	cfg := SandboxConfig(pod, SandboxOptions{
		CgroupParent: "ng/kubepods/podabc", LogDir: "/var/log/pods/x", Attempt: 2, DNS: nodeDNS(),
	})

	if m := cfg.Metadata; m.Name != "web" || m.Namespace != "default" || m.Uid != string(pod.UID) || m.Attempt != 2 {
		t.Errorf("metadata = %v", m)
	}
	wantLabels := map[string]string{
		"app":                         "web",
		"io.kubernetes.pod.name":      "web",
		"io.kubernetes.pod.namespace": "default",
		"io.kubernetes.pod.uid":       string(pod.UID),
		"nodeguard.io/managed":        "true",
	}
	if !reflect.DeepEqual(cfg.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v", cfg.Labels, wantLabels)
	}
	if !reflect.DeepEqual(cfg.Annotations, pod.Annotations) {
		t.Errorf("annotations = %v, want the pod's %v", cfg.Annotations, pod.Annotations)
	}
	cfg.Annotations["note"] = "changed"
	cfg.Labels["app"] = "changed"
	if !reflect.DeepEqual(pod, before) {
		t.Errorf("SandboxConfig or its result shares maps with the pod: %v", pod.ObjectMeta)
	}
	if cfg.Hostname != "web" || cfg.LogDirectory != "/var/log/pods/x" {
		t.Errorf("hostname %q, log directory %q", cfg.Hostname, cfg.LogDirectory)
	}
	lc := cfg.Linux
	if lc.CgroupParent != "ng/kubepods/podabc" {
		t.Errorf("cgroup parent = %q", lc.CgroupParent)
	}
	ns := lc.SecurityContext.NamespaceOptions
	if ns.Network != runtimeapi.NamespaceMode_POD || ns.Pid != runtimeapi.NamespaceMode_CONTAINER || ns.Ipc != runtimeapi.NamespaceMode_POD {
		t.Errorf("namespaces = %v, want POD network, CONTAINER pid, POD ipc", ns)
	}
	if lc.SecurityContext.Privileged {
		t.Error("sandbox is privileged without a privileged container")
	}
	if lc.SecurityContext.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_RuntimeDefault {
		t.Errorf("sandbox seccomp = %v, want RuntimeDefault", lc.SecurityContext.Seccomp)
	}
	r := lc.Resources
	if r.CpuShares != 512 || r.CpuQuota != 50000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 134217728 || r.OomScoreAdj != 0 {
		t.Errorf("sandbox resources = %v, want shares 512, quota 50000, period 100000, memory 134217728", r)
	}
	if len(cfg.PortMappings) != 0 {
		t.Errorf("port mappings = %v, want none", cfg.PortMappings)
	}
}

func TestSandboxNamespacesAndPrivilege(t *testing.T) {
	const (
		pod  = runtimeapi.NamespaceMode_POD
		ctr  = runtimeapi.NamespaceMode_CONTAINER
		node = runtimeapi.NamespaceMode_NODE
	)
	tests := []struct {
		name               string
		edit               func(*corev1.Pod)
		net, pid, ipc      runtimeapi.NamespaceMode
		privileged         bool
		hostnameIsNodeName bool
	}{
		{name: "a plain pod gets its own network and IPC and a pid namespace per container",
			edit: func(*corev1.Pod) {}, net: pod, pid: ctr, ipc: pod},
		{name: "hostNetwork shares the node's network and leaves the hostname to the node",
			edit: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, net: node, pid: ctr, ipc: pod, hostnameIsNodeName: true},
		{name: "hostPID shares the node's pid namespace",
			edit: func(p *corev1.Pod) { p.Spec.HostPID = true }, net: pod, pid: node, ipc: pod},
		{name: "hostIPC shares the node's IPC namespace",
			edit: func(p *corev1.Pod) { p.Spec.HostIPC = true }, net: pod, pid: ctr, ipc: node},
		{name: "shareProcessNamespace gives one pid namespace to the pod",
			edit: func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr(true) }, net: pod, pid: pod, ipc: pod},
		{name: "hostPID wins over shareProcessNamespace",
			edit: func(p *corev1.Pod) { p.Spec.HostPID = true; p.Spec.ShareProcessNamespace = ptr(true) }, net: pod, pid: node, ipc: pod},
		{name: "a privileged init container makes the sandbox privileged",
			edit: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)}}}
			}, net: pod, pid: ctr, ipc: pod, privileged: true},
		{name: "privileged false is not privileged",
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(false)}
			}, net: pod, pid: ctr, ipc: pod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPod()
			tt.edit(p)
			cfg := SandboxConfig(p, SandboxOptions{CgroupParent: "x"})
			ns := cfg.Linux.SecurityContext.NamespaceOptions
			if ns.Network != tt.net || ns.Pid != tt.pid || ns.Ipc != tt.ipc {
				t.Errorf("namespaces = %v, want network %v pid %v ipc %v", ns, tt.net, tt.pid, tt.ipc)
			}
			if got := cfg.Linux.SecurityContext.Privileged; got != tt.privileged {
				t.Errorf("privileged = %v, want %v", got, tt.privileged)
			}
			if (cfg.Hostname == "") != tt.hostnameIsNodeName {
				t.Errorf("hostname = %q", cfg.Hostname)
			}
		})
	}
}

func TestSandboxPodSecurityContext(t *testing.T) {
	p := testPod()
	p.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(2000)),
		FSGroup: ptr(int64(3000)), SupplementalGroups: []int64{4000, 4001},
		Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
	}
	sc := SandboxConfig(p, SandboxOptions{CgroupParent: "x"}).Linux
	if sc.SecurityContext.RunAsUser.GetValue() != 1000 || sc.SecurityContext.RunAsGroup.GetValue() != 2000 {
		t.Errorf("run as %v:%v, want 1000:2000", sc.SecurityContext.RunAsUser, sc.SecurityContext.RunAsGroup)
	}
	if got, want := sc.SecurityContext.SupplementalGroups, []int64{3000, 4000, 4001}; !reflect.DeepEqual(got, want) {
		t.Errorf("supplemental groups = %v, want fsGroup first: %v", got, want)
	}
	if got := sc.Sysctls["net.ipv4.ip_unprivileged_port_start"]; got != "0" {
		t.Errorf("sysctls = %v", sc.Sysctls)
	}
}

func TestSandboxHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-bc"
	tests := []struct {
		name, podName, specHostname, opt, want string
	}{
		{name: "the pod's name is the default", podName: "web", want: "web"},
		{name: "spec.hostname wins over the name", podName: "web", specHostname: "front", want: "front"},
		{name: "the option wins over both", podName: "web", specHostname: "front", opt: "override", want: "override"},
		{name: "a long name is cut to 63 bytes without a trailing dash", podName: long, want: strings.Repeat("a", 62)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPod()
			p.Name, p.Spec.Hostname = tt.podName, tt.specHostname
			if got := SandboxConfig(p, SandboxOptions{Hostname: tt.opt}).Hostname; got != tt.want {
				t.Errorf("hostname = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSandboxPortMappings(t *testing.T) {
	p := testPod()
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{
		{Name: "http", ContainerPort: 80, HostPort: 8080, Protocol: corev1.ProtocolTCP, HostIP: "127.0.0.1"},
		{Name: "dns", ContainerPort: 53, HostPort: 5353, Protocol: corev1.ProtocolUDP},
		{ContainerPort: 9090, Protocol: corev1.ProtocolSCTP},
		{ContainerPort: 9090, Protocol: corev1.ProtocolSCTP}, // a repeat: dropped
	}
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Ports: []corev1.ContainerPort{{ContainerPort: 1, HostPort: 1}}}}
	got := SandboxConfig(p, SandboxOptions{}).PortMappings
	want := []*runtimeapi.PortMapping{
		{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: 8080, HostIp: "127.0.0.1"},
		{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 53, HostPort: 5353},
		{Protocol: runtimeapi.Protocol_SCTP, ContainerPort: 9090},
	}
	if len(got) != len(want) {
		t.Fatalf("port mappings = %v, want %v (app containers only, repeats dropped)", got, want)
	}
	for i := range want {
		if got[i].String() != want[i].String() {
			t.Errorf("mapping %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestSandboxDNS(t *testing.T) {
	podCfg := &corev1.PodDNSConfig{
		Nameservers: []string{"192.0.2.53", "198.51.100.1"},
		Searches:    []string{"pods.test", "example.test"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr("5")}, {Name: "edns0"}},
	}
	many := func(n int, prefix string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = prefix + strings.Repeat("x", i%3) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		}
		return out
	}
	tests := []struct {
		name      string
		policy    corev1.DNSPolicy
		hostNet   bool
		podConfig *corev1.PodDNSConfig
		node      *runtimeapi.DNSConfig
		want      *runtimeapi.DNSConfig
	}{
		{name: "Default uses the node's resolver config", policy: corev1.DNSDefault, node: nodeDNS(), want: nodeDNS()},
		{name: "ClusterFirst falls back to the node's config as the kubelet does without cluster DNS",
			policy: corev1.DNSClusterFirst, node: nodeDNS(), want: nodeDNS()},
		{name: "ClusterFirstWithHostNet on the host network uses the node's config too",
			policy: corev1.DNSClusterFirstWithHostNet, hostNet: true, node: nodeDNS(), want: nodeDNS()},
		{name: "no node config gives the local resolver and no search, never nil",
			policy: corev1.DNSDefault, want: &runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}, Searches: []string{"."}}},
		{name: "None uses only the pod's dnsConfig", policy: corev1.DNSNone, node: nodeDNS(), podConfig: podCfg,
			want: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53", "198.51.100.1"}, Searches: []string{"pods.test", "example.test"}, Options: []string{"ndots:5", "edns0"}}},
		{name: "None without a dnsConfig is empty but not nil", policy: corev1.DNSNone, node: nodeDNS(), want: &runtimeapi.DNSConfig{}},
		{name: "a pod's dnsConfig is appended without duplicates and its options override the node's in place",
			policy: corev1.DNSDefault, node: nodeDNS(), podConfig: podCfg,
			want: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.53", "198.51.100.1"}, Searches: []string{"example.test", "pods.test"}, Options: []string{"ndots:5", "timeout:2", "edns0"}}},
		{name: "more than three nameservers are cut to three",
			policy: corev1.DNSDefault, node: &runtimeapi.DNSConfig{Servers: []string{"192.0.2.1", "192.0.2.2"}},
			podConfig: &corev1.PodDNSConfig{Nameservers: []string{"192.0.2.3", "192.0.2.4"}},
			want:      &runtimeapi.DNSConfig{Servers: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}, Searches: []string{}}},
		{name: "more than 32 search domains are cut to 32",
			policy: corev1.DNSDefault, node: &runtimeapi.DNSConfig{Searches: many(40, "d")},
			want: &runtimeapi.DNSConfig{Searches: many(32, "d")}},
		{name: "search domains are cut to 2048 characters",
			policy: corev1.DNSDefault, node: &runtimeapi.DNSConfig{Searches: []string{strings.Repeat("a", 1500), strings.Repeat("b", 547), "c"}},
			want: &runtimeapi.DNSConfig{Searches: []string{strings.Repeat("a", 1500), strings.Repeat("b", 547)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testPod()
			p.Spec.DNSPolicy, p.Spec.HostNetwork, p.Spec.DNSConfig = tt.policy, tt.hostNet, tt.podConfig
			var nodeBefore string
			if tt.node != nil {
				nodeBefore = tt.node.String()
			}
			got := SandboxConfig(p, SandboxOptions{DNS: tt.node}).DnsConfig
			if got == nil {
				t.Fatal("DNS config is nil")
			}
			if !equalStrings(got.Servers, tt.want.Servers) || !equalStrings(got.Searches, tt.want.Searches) || !equalStrings(got.Options, tt.want.Options) {
				t.Errorf("DNS = %v, want %v", got, tt.want)
			}
			if tt.node != nil && tt.node.String() != nodeBefore {
				t.Errorf("the node's config was modified: %v", tt.node)
			}
		})
	}
}

// equalStrings treats nil and empty alike.
func equalStrings(a, b []string) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	return reflect.DeepEqual(a, b)
}

func TestSandboxResourcesFollowThePod(t *testing.T) {
	p := testPod()
	second := p.Spec.Containers[0]
	second.Name = "sidecar"
	second.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}
	p.Spec.Containers = append(p.Spec.Containers, second)
	r := SandboxConfig(p, SandboxOptions{}).Linux.Resources
	// Requests 500m+250m; limits only the first container's.
	if r.CpuShares != 768 || r.CpuQuota != 50000 || r.MemoryLimitInBytes != 134217728 {
		t.Errorf("sandbox resources = %v, want shares 768, quota 50000, memory 134217728", r)
	}
}
