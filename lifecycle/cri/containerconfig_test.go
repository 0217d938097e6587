package cri

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestContainerResources(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name                  string
		requests, limits      corev1.ResourceList
		v2, noEnforce         bool
		shares, quota, period int64
		memory                int64
		unified               map[string]string
	}{
		{name: "limits cpu 500m and memory 128Mi give shares 512, quota 50000 per 100000 and 128Mi",
			requests: corev1.ResourceList{"cpu": q("500m"), "memory": q("128Mi")},
			limits:   corev1.ResourceList{"cpu": q("500m"), "memory": q("128Mi")},
			shares:   512, quota: 50000, period: 100000, memory: 134217728},
		{name: "no resources give the minimum shares and no limits",
			shares: 2, quota: 0, period: 100000},
		{name: "a request below a limit sets shares from the request and quota from the limit",
			requests: corev1.ResourceList{"cpu": q("250m")}, limits: corev1.ResourceList{"cpu": q("2")},
			shares: 256, quota: 200000, period: 100000},
		{name: "a limit without a request is the request too",
			limits: corev1.ResourceList{"cpu": q("1")}, shares: 1024, quota: 100000, period: 100000},
		{name: "an explicit zero request with a limit gets the minimum shares",
			requests: corev1.ResourceList{"cpu": q("0")}, limits: corev1.ResourceList{"cpu": q("1")},
			shares: 2, quota: 100000, period: 100000},
		{name: "a tiny limit gets the minimum quota of 1ms",
			limits: corev1.ResourceList{"cpu": q("5m")}, shares: 5, quota: 1000, period: 100000},
		{name: "a tiny request gets the minimum shares",
			requests: corev1.ResourceList{"cpu": q("1m")}, shares: 2, period: 100000},
		{name: "without CPU limit enforcement neither quota nor period is set",
			limits: corev1.ResourceList{"cpu": q("500m")}, noEnforce: true, shares: 512},
		{name: "cgroup v2 asks for group OOM kills",
			limits: corev1.ResourceList{"memory": q("16Mi")}, v2: true, shares: 2, period: 100000, memory: 16 << 20,
			unified: map[string]string{"memory.oom.group": "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: tt.requests, Limits: tt.limits}}
			r := ContainerResources(c, tt.v2, !tt.noEnforce)
			if r.CpuShares != tt.shares || r.CpuQuota != tt.quota || r.CpuPeriod != tt.period || r.MemoryLimitInBytes != tt.memory {
				t.Errorf("resources = shares %d quota %d period %d memory %d, want %d %d %d %d",
					r.CpuShares, r.CpuQuota, r.CpuPeriod, r.MemoryLimitInBytes, tt.shares, tt.quota, tt.period, tt.memory)
			}
			if len(r.Unified) != 0 || len(tt.unified) != 0 {
				if !reflect.DeepEqual(r.Unified, tt.unified) {
					t.Errorf("unified = %v, want %v", r.Unified, tt.unified)
				}
			}
		})
	}
}

func TestContainerConfigOfAPlainContainer(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Command = []string{"sh", "-c"}
	c.Args = []string{"echo $(GREETING) $$(GREETING) $(MISSING)"}
	c.WorkingDir = "/work"
	c.Ports = []corev1.ContainerPort{{ContainerPort: 80, Protocol: corev1.ProtocolTCP}}
	c.Env = []corev1.EnvVar{{Name: "GREETING", Value: "hi"}}
	before := pod.DeepCopy()
	mounts := []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/var/lib/x"}}
	cfg, err := ContainerConfig(pod, c, ContainerOptions{
		Image: "sha256:abc", Attempt: 3, Mounts: mounts, OOMScoreAdj: 937, EnforceCPULimits: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(pod, before) {
		t.Error("ContainerConfig modified the pod")
	}
	if cfg.Metadata.Name != "app" || cfg.Metadata.Attempt != 3 {
		t.Errorf("metadata = %v", cfg.Metadata)
	}
	if cfg.Image.Image != "sha256:abc" || cfg.Image.UserSpecifiedImage != "busybox:1.36" {
		t.Errorf("image = %v", cfg.Image)
	}
	if !reflect.DeepEqual(cfg.Command, []string{"sh", "-c"}) || !reflect.DeepEqual(cfg.Args, []string{"echo hi $(GREETING) $(MISSING)"}) {
		t.Errorf("command %q args %q", cfg.Command, cfg.Args)
	}
	if cfg.WorkingDir != "/work" || cfg.LogPath != "app/3.log" || cfg.Stdin || cfg.StdinOnce || cfg.Tty {
		t.Errorf("working dir %q, log path %q, stdin %v, tty %v", cfg.WorkingDir, cfg.LogPath, cfg.Stdin, cfg.Tty)
	}
	if !reflect.DeepEqual(cfg.Mounts, mounts) {
		t.Errorf("mounts = %v", cfg.Mounts)
	}
	wantLabels := map[string]string{
		"io.kubernetes.pod.name":       "web",
		"io.kubernetes.pod.namespace":  "default",
		"io.kubernetes.pod.uid":        string(pod.UID),
		"io.kubernetes.container.name": "app",
		"nodeguard.io/managed":         "true",
	}
	if !reflect.DeepEqual(cfg.Labels, wantLabels) {
		t.Errorf("labels = %v, want %v", cfg.Labels, wantLabels)
	}
	ports, _ := json.Marshal(c.Ports)
	wantAnn := map[string]string{
		"io.kubernetes.container.hash":                     HashContainer(c),
		"io.kubernetes.container.restartCount":             "3",
		"io.kubernetes.container.terminationMessagePath":   "/dev/termination-log",
		"io.kubernetes.container.terminationMessagePolicy": "File",
		"io.kubernetes.pod.terminationGracePeriod":         "30",
		"io.kubernetes.container.ports":                    string(ports),
		"io.kubernetes.container.type":                     "container",
	}
	if !reflect.DeepEqual(cfg.Annotations, wantAnn) {
		t.Errorf("annotations = %v\nwant %v", cfg.Annotations, wantAnn)
	}
	r := cfg.Linux.Resources
	if r.CpuShares != 512 || r.CpuQuota != 50000 || r.CpuPeriod != 100000 || r.MemoryLimitInBytes != 134217728 || r.OomScoreAdj != 937 {
		t.Errorf("resources = %v", r)
	}
}

func TestContainerConfigDefaults(t *testing.T) {
	pod := testPod()
	pod.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox:1.36"}}
	cfg, err := ContainerConfig(pod, &pod.Spec.InitContainers[0], ContainerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Image.Image != "busybox:1.36" {
		t.Errorf("without a resolved image the image is %q, want the container's", cfg.Image.Image)
	}
	if cfg.LogPath != "setup/0.log" {
		t.Errorf("log path = %q", cfg.LogPath)
	}
	if got := cfg.Annotations[ContainerTypeAnnotation]; got != "init" {
		t.Errorf("type = %q, want init", got)
	}
	if cfg.Command != nil || cfg.Args != nil {
		t.Errorf("command %q args %q, want none (the image's)", cfg.Command, cfg.Args)
	}
	if r := cfg.Linux.Resources; r.CpuQuota != 0 || r.CpuPeriod != 0 {
		t.Errorf("quota %d period %d without EnforceCPULimits", r.CpuQuota, r.CpuPeriod)
	}
}

func TestHashContainerChangesWithTheSpec(t *testing.T) {
	a := testPod().Spec.Containers[0]
	b := *a.DeepCopy()
	if HashContainer(&a) != HashContainer(&b) {
		t.Error("equal containers hash differently")
	}
	b.Image = "busybox:1.37"
	if HashContainer(&a) == HashContainer(&b) {
		t.Error("a changed image keeps the hash")
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "x", "B": "y z", "EMPTY": ""}
	tests := []struct{ name, in, want string }{
		{"a reference is replaced", "$(A)", "x"},
		{"references inside text are replaced", "pre-$(A)-$(B)-post", "pre-x-y z-post"},
		{"a double dollar escapes a reference", "$$(A)", "$(A)"},
		{"a double dollar alone is one dollar", "cost: $$5", "cost: $5"},
		{"an undefined reference stays as written", "$(NOPE)", "$(NOPE)"},
		{"a reference to an empty value is replaced by nothing", "[$(EMPTY)]", "[]"},
		{"a dollar before another character is literal", "$A and $", "$A and $"},
		{"an unclosed reference is literal", "$(A", "$(A"},
		{"an empty reference stays", "$()", "$()"},
		{"a trailing dollar is literal", "a$", "a$"},
		{"no dollar is untouched", "plain", "plain"},
		// Cases of the kubelet's expansion tests.
		{"an escape before a reference leaves a dollar and the value", "$$$(A)", "$x"},
		{"two escapes before a reference stay a reference", "$$$$(A)", "$$(A)"},
		{"an unclosed reference runs to the next closer", "$(A$(B)", "$(A$(B)"},
		{"text after a closed reference is kept", "$(A)(B)", "x(B)"},
		{"an unclosed opener at the end is literal", "foo$(", "foo$("},
		{"a dollar before a closer is literal", "$)", "$)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expand(tt.in, vars); got != tt.want {
				t.Errorf("expand(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestContainerEnv(t *testing.T) {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	tests := []struct {
		name    string
		env     []corev1.EnvVar
		want    []string // KEY=VALUE in order
		wantErr error
	}{
		{name: "values pass through in order",
			env:  []corev1.EnvVar{{Name: "B", Value: "2"}, {Name: "A", Value: "1"}},
			want: []string{"B=2", "A=1"}},
		{name: "fieldRefs give the pod's name, namespace, uid, IP, labels and annotations",
			env: []corev1.EnvVar{
				{Name: "NAME", ValueFrom: field("metadata.name")},
				{Name: "NS", ValueFrom: field("metadata.namespace")},
				{Name: "UID", ValueFrom: field("metadata.uid")},
				{Name: "IP", ValueFrom: field("status.podIP")},
				{Name: "IPS", ValueFrom: field("status.podIPs")},
				{Name: "APP", ValueFrom: field("metadata.labels['app']")},
				{Name: "NOTE", ValueFrom: field("metadata.annotations['note']")},
			},
			want: []string{"NAME=web", "NS=default", "UID=6f1c2c8e-0d3f-8a3e-9c51-2b7e1f0a4d11", "IP=10.88.0.7", "IPS=10.88.0.7", "APP=web", "NOTE=hello"}},
		{name: "a value refers to variables defined before it, not after",
			env: []corev1.EnvVar{
				{Name: "HOST", ValueFrom: field("status.podIP")},
				{Name: "URL", Value: "http://$(HOST):$(PORT)/"},
				{Name: "PORT", Value: "80"},
			},
			want: []string{"HOST=10.88.0.7", "URL=http://10.88.0.7:$(PORT)/", "PORT=80"}},
		{name: "a repeated name replaces the earlier value in its place",
			env:  []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}, {Name: "A", Value: "$(A)3"}},
			want: []string{"A=13", "B=2"}},
		{name: "an unsupported fieldRef is an error",
			env:     []corev1.EnvVar{{Name: "N", ValueFrom: field("status.phase")}},
			wantErr: ErrUnsupportedField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			pod.Spec.Containers[0].Env = tt.env
			cfg, err := ContainerConfig(pod, &pod.Spec.Containers[0], ContainerOptions{PodIP: "10.88.0.7"})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, kv := range cfg.Envs {
				got = append(got, kv.Key+"="+string(kv.Value))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("env = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestContainerCommandUsesTheExpandedEnvironment(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}
	c.Command = []string{"/bin/serve", "--bind=$(IP)"}
	cfg, err := ContainerConfig(pod, c, ContainerOptions{PodIP: "10.88.0.9"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Command[1] != "--bind=10.88.0.9" {
		t.Errorf("command = %q", cfg.Command)
	}
}

func TestContainerSecurityContext(t *testing.T) {
	defaultMasked := defaultMaskedPaths
	tests := []struct {
		name   string
		podSC  *corev1.PodSecurityContext
		sc     *corev1.SecurityContext
		check  func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext)
		hostNS bool
	}{
		{name: "no security context leaves the image's user and masks /proc",
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.Privileged || sc.ReadonlyRootfs || sc.NoNewPrivs || sc.Capabilities != nil {
					t.Errorf("security context = %v", sc)
				}
				if !reflect.DeepEqual(sc.MaskedPaths, defaultMasked) || !reflect.DeepEqual(sc.ReadonlyPaths, defaultReadonlyPaths) {
					t.Errorf("masked %v read-only %v", sc.MaskedPaths, sc.ReadonlyPaths)
				}
				if sc.Seccomp.GetProfileType() != runtimeapi.SecurityProfile_Unconfined {
					t.Errorf("seccomp = %v, want Unconfined", sc.Seccomp)
				}
			}},
		{name: "the pod's user and group apply when the container sets none",
			podSC: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1001)), SupplementalGroups: []int64{5}},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser.GetValue() != 1000 || sc.RunAsGroup.GetValue() != 1001 || !reflect.DeepEqual(sc.SupplementalGroups, []int64{5}) {
					t.Errorf("user %v group %v groups %v", sc.RunAsUser, sc.RunAsGroup, sc.SupplementalGroups)
				}
			}},
		{name: "the container's user and group win over the pod's",
			podSC: &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(1001))},
			sc:    &corev1.SecurityContext{RunAsUser: ptr(int64(0)), RunAsGroup: ptr(int64(7))},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.RunAsUser.GetValue() != 0 || sc.RunAsUser == nil || sc.RunAsGroup.GetValue() != 7 {
					t.Errorf("user %v group %v", sc.RunAsUser, sc.RunAsGroup)
				}
			}},
		{name: "privileged and a read-only root filesystem pass through",
			sc: &corev1.SecurityContext{Privileged: ptr(true), ReadOnlyRootFilesystem: ptr(true)},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !sc.Privileged || !sc.ReadonlyRootfs {
					t.Errorf("privileged %v read-only %v", sc.Privileged, sc.ReadonlyRootfs)
				}
			}},
		{name: "capability names lose CAP_ and become upper case, ALL stays",
			sc: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
				Add: []corev1.Capability{"CAP_NET_BIND_SERVICE", "net_admin", "SYS_TIME"}, Drop: []corev1.Capability{"ALL", "cap_chown"}}},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				want := &runtimeapi.Capability{AddCapabilities: []string{"NET_BIND_SERVICE", "NET_ADMIN", "SYS_TIME"}, DropCapabilities: []string{"ALL", "CHOWN"}}
				if sc.Capabilities.String() != want.String() {
					t.Errorf("capabilities = %v, want %v", sc.Capabilities, want)
				}
			}},
		{name: "allowPrivilegeEscalation false sets no_new_privs",
			sc: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(false)},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if !sc.NoNewPrivs {
					t.Error("no_new_privs not set")
				}
			}},
		{name: "allowPrivilegeEscalation true leaves no_new_privs off",
			sc: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr(true)},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.NoNewPrivs {
					t.Error("no_new_privs set")
				}
			}},
		{name: "procMount Unmasked masks nothing",
			sc: &corev1.SecurityContext{ProcMount: ptr(corev1.UnmaskedProcMount)},
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				if sc.MaskedPaths == nil || len(sc.MaskedPaths) != 0 || len(sc.ReadonlyPaths) != 0 {
					t.Errorf("masked %v read-only %v, want empty (not nil: nil means the runtime's defaults)", sc.MaskedPaths, sc.ReadonlyPaths)
				}
			}},
		{name: "the container shares the pod's namespaces", hostNS: true,
			check: func(t *testing.T, sc *runtimeapi.LinuxContainerSecurityContext) {
				ns := sc.NamespaceOptions
				if ns.Network != runtimeapi.NamespaceMode_NODE || ns.Pid != runtimeapi.NamespaceMode_NODE || ns.Ipc != runtimeapi.NamespaceMode_POD {
					t.Errorf("namespaces = %v", ns)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.podSC != nil {
				pod.Spec.SecurityContext = tt.podSC
			}
			pod.Spec.HostNetwork, pod.Spec.HostPID = tt.hostNS, tt.hostNS
			pod.Spec.Containers[0].SecurityContext = tt.sc
			cfg, err := ContainerConfig(pod, &pod.Spec.Containers[0], ContainerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg.Linux.SecurityContext)
		})
	}
}

func TestContainerConfigPassesStdinAndTTY(t *testing.T) {
	pod := testPod()
	for _, c := range []corev1.Container{
		{Name: "plain", Image: "busybox:1.36"},
		{Name: "attachable", Image: "busybox:1.36", Stdin: true, StdinOnce: true, TTY: true},
		{Name: "stdin-only", Image: "busybox:1.36", Stdin: true},
	} {
		cfg, err := ContainerConfig(pod, &c, ContainerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Stdin != c.Stdin || cfg.StdinOnce != c.StdinOnce || cfg.Tty != c.TTY {
			t.Errorf("%s: stdin %v stdinOnce %v tty %v, want the container's %v %v %v",
				c.Name, cfg.Stdin, cfg.StdinOnce, cfg.Tty, c.Stdin, c.StdinOnce, c.TTY)
		}
	}
}
