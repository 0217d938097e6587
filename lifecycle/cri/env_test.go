package cri

import (
	"errors"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// fakeSources holds ConfigMaps and Secrets by "namespace/name".
type fakeSources struct {
	configMaps, secrets map[string]map[string][]byte
	err                 error
}

func (f fakeSources) ConfigMap(ns, name string) (map[string][]byte, bool, error) {
	d, ok := f.configMaps[ns+"/"+name]
	return d, ok, f.err
}

func (f fakeSources) Secret(ns, name string) (map[string][]byte, bool, error) {
	d, ok := f.secrets[ns+"/"+name]
	return d, ok, f.err
}

func TestContainerEnvSources(t *testing.T) {
	src := fakeSources{
		configMaps: map[string]map[string][]byte{
			"default/app": {"MODE": []byte("prod"), "PORT": []byte("8080"), "bad.key": []byte("x"), "1ST": []byte("y")},
			"default/ref": {"URL": []byte("$(MODE)")},
		},
		secrets: map[string]map[string][]byte{
			"default/db": {"PASSWORD": []byte("s3cret"), "USER": []byte("admin")},
		},
	}
	node := NodeInfo{
		Name:    "node-a",
		HostIPs: []string{"192.0.2.10", "2001:db8::10"},
		Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("2"),
			corev1.ResourceMemory:           resource.MustParse("4Gi"),
			corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
		},
	}
	yes := true
	cm := func(name string, optional bool) *corev1.ConfigMapEnvSource {
		return &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Optional: &optional}
	}
	cmKey := func(name, key string, optional *bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}
	}
	secretKey := func(name, key string, optional *bool) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key, Optional: optional}}
	}
	res := func(container, name, divisor string) *corev1.EnvVarSource {
		fs := &corev1.ResourceFieldSelector{ContainerName: container, Resource: name}
		if divisor != "" {
			fs.Divisor = resource.MustParse(divisor)
		}
		return &corev1.EnvVarSource{ResourceFieldRef: fs}
	}
	fieldRef := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}
	}
	tests := []struct {
		name    string
		envFrom []corev1.EnvFromSource
		env     []corev1.EnvVar
		mutate  func(*corev1.Pod)
		want    []string // KEY=VALUE in order
		wantErr string   // the kubelet's message
	}{
		{name: "envFrom gives every key in key order, names that are no C identifier too (relaxed names)",
			envFrom: []corev1.EnvFromSource{{ConfigMapRef: cm("app", false)}},
			want:    []string{"1ST=y", "MODE=prod", "PORT=8080", "bad.key=x"}},
		{name: "a prefix goes before every key and a secret's values are its bytes",
			envFrom: []corev1.EnvFromSource{{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}},
			want:    []string{"DB_PASSWORD=s3cret", "DB_USER=admin"}},
		{name: "envFrom values are not expanded, env values are",
			envFrom: []corev1.EnvFromSource{{ConfigMapRef: cm("app", false)}, {ConfigMapRef: cm("ref", false)}},
			env:     []corev1.EnvVar{{Name: "ADDR", Value: ":$(PORT)"}},
			want:    []string{"1ST=y", "MODE=prod", "PORT=8080", "bad.key=x", "URL=$(MODE)", "ADDR=:8080"}},
		{name: "env overrides envFrom in its place",
			envFrom: []corev1.EnvFromSource{{Prefix: "DB_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}},
			env:     []corev1.EnvVar{{Name: "DB_PASSWORD", Value: "override"}},
			want:    []string{"DB_PASSWORD=override", "DB_USER=admin"}},
		{name: "a missing optional envFrom source is skipped",
			envFrom: []corev1.EnvFromSource{{ConfigMapRef: cm("nope", true)}},
			env:     []corev1.EnvVar{{Name: "A", Value: "1"}},
			want:    []string{"A=1"}},
		{name: "a missing envFrom ConfigMap is the kubelet's not found",
			envFrom: []corev1.EnvFromSource{{ConfigMapRef: cm("nope", false)}},
			wantErr: `configmap "nope" not found`},
		{name: "a missing envFrom Secret is the kubelet's not found",
			envFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}}}},
			wantErr: `secret "nope" not found`},
		{name: "key references give one value, unexpanded",
			env: []corev1.EnvVar{
				{Name: "MODE", ValueFrom: cmKey("app", "MODE", nil)},
				{Name: "URL", ValueFrom: cmKey("ref", "URL", nil)},
				{Name: "PW", ValueFrom: secretKey("db", "PASSWORD", nil)},
			},
			want: []string{"MODE=prod", "URL=$(MODE)", "PW=s3cret"}},
		{name: "an optional missing key or object leaves the variable unset",
			env: []corev1.EnvVar{
				{Name: "A", ValueFrom: cmKey("app", "NOPE", &yes)},
				{Name: "B", ValueFrom: cmKey("nope", "K", &yes)},
				{Name: "C", ValueFrom: secretKey("db", "NOPE", &yes)},
				{Name: "D", Value: "[$(A)]"},
			},
			want: []string{"D=[$(A)]"}},
		{name: "a missing ConfigMap key is the kubelet's couldn't find key",
			env:     []corev1.EnvVar{{Name: "A", ValueFrom: cmKey("app", "NOPE", nil)}},
			wantErr: "couldn't find key NOPE in ConfigMap default/app"},
		{name: "a missing Secret key is the kubelet's couldn't find key",
			env:     []corev1.EnvVar{{Name: "A", ValueFrom: secretKey("db", "NOPE", nil)}},
			wantErr: "couldn't find key NOPE in Secret default/db"},
		{name: "a missing referenced ConfigMap is the kubelet's not found",
			env:     []corev1.EnvVar{{Name: "A", ValueFrom: cmKey("nope", "K", nil)}},
			wantErr: `configmap "nope" not found`},
		{name: "node fieldRefs give the node's name and addresses, the service account its name",
			mutate: func(p *corev1.Pod) { p.Spec.ServiceAccountName = "builder"; p.Spec.NodeName = "elsewhere" },
			env: []corev1.EnvVar{
				{Name: "NODE", ValueFrom: fieldRef("spec.nodeName")},
				{Name: "SA", ValueFrom: fieldRef("spec.serviceAccountName")},
				{Name: "HOST_IP", ValueFrom: fieldRef("status.hostIP")},
				{Name: "HOST_IPS", ValueFrom: fieldRef("status.hostIPs")},
				{Name: "POD_IPS", ValueFrom: fieldRef("status.podIPs")},
			},
			want: []string{"NODE=node-a", "SA=builder", "HOST_IP=192.0.2.10", "HOST_IPS=192.0.2.10,2001:db8::10", "POD_IPS=10.88.0.7"}},
		{name: "a host-network pod's IPs are the node's (the kubelet's status for it)",
			mutate: func(p *corev1.Pod) { p.Spec.HostNetwork = true },
			env: []corev1.EnvVar{
				{Name: "POD_IP", ValueFrom: fieldRef("status.podIP")},
				{Name: "POD_IPS", ValueFrom: fieldRef("status.podIPs")},
			},
			want: []string{"POD_IP=192.0.2.10", "POD_IPS=192.0.2.10,2001:db8::10"}},
		{name: "resourceFieldRefs divide and round up, requests and limits",
			env: []corev1.EnvVar{
				{Name: "CPU", ValueFrom: res("", "limits.cpu", "")},
				{Name: "CPU_M", ValueFrom: res("", "limits.cpu", "1m")},
				{Name: "MEM", ValueFrom: res("", "limits.memory", "")},
				{Name: "MEM_MI", ValueFrom: res("", "requests.memory", "1Mi")},
				{Name: "MEM_G", ValueFrom: res("", "limits.memory", "1G")},
			},
			want: []string{"CPU=1", "CPU_M=500", "MEM=134217728", "MEM_MI=128", "MEM_G=1"}},
		{name: "an unset limit is the node's allocatable; an unset request is 0",
			env: []corev1.EnvVar{
				{Name: "STORAGE", ValueFrom: res("", "limits.ephemeral-storage", "1Gi")},
				{Name: "STORAGE_REQ", ValueFrom: res("", "requests.ephemeral-storage", "")},
				{Name: "SIDE_CPU", ValueFrom: res("side", "limits.cpu", "1m")},
				{Name: "SIDE_MEM", ValueFrom: res("side", "limits.memory", "1Mi")},
			},
			mutate: func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side"}) },
			want:   []string{"STORAGE=10", "STORAGE_REQ=0", "SIDE_CPU=2000", "SIDE_MEM=4096"}},
		{name: "a resourceFieldRef to an unknown container is an error",
			env:     []corev1.EnvVar{{Name: "X", ValueFrom: res("nope", "limits.cpu", "")}},
			wantErr: "container nope not found"},
		{name: "a resourceFieldRef to an unknown resource is an error",
			env:     []corev1.EnvVar{{Name: "X", ValueFrom: res("", "limits.hugepages-2Mi", "")}},
			wantErr: "unsupported container resource : limits.hugepages-2Mi"},
		{name: "an empty value without valueFrom is set empty",
			env:  []corev1.EnvVar{{Name: "E"}},
			want: []string{"E="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := testPod()
			if tt.mutate != nil {
				tt.mutate(pod)
			}
			c := &pod.Spec.Containers[0]
			c.EnvFrom, c.Env = tt.envFrom, tt.env
			podIP := "10.88.0.7"
			if pod.Spec.HostNetwork {
				podIP = "" // the runtime gives a host-network sandbox none
			}
			cfg, err := ContainerConfig(pod, c, ContainerOptions{PodIP: podIP, Node: node, EnvSources: src})
			if tt.wantErr != "" {
				var ce *ConfigError
				if !errors.As(err, &ce) || ce.Container != c.Name || ce.Err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want a ConfigError of %s with %q", err, c.Name, tt.wantErr)
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
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("env:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestContainerEnvSourceErrorIsReturned(t *testing.T) {
	broken := errors.New("read configmaps default/app: permission denied")
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Optional: ptr(true)}}}
	_, err := ContainerConfig(pod, c, ContainerOptions{EnvSources: fakeSources{err: broken}})
	if !errors.Is(err, broken) {
		t.Fatalf("err = %v, want the source's own error even for an optional source", err)
	}
}

func TestCommandAndArgsExpandFromTheWholeEnv(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
	c.Env = []corev1.EnvVar{{Name: "NODE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}}
	c.Command = []string{"/bin/sh", "-c", "echo $(USER)@$(NODE) $$(USER) $(NOPE)"}
	c.Args = []string{"$(USER)"}
	src := fakeSources{secrets: map[string]map[string][]byte{"default/db": {"USER": []byte("admin")}}}
	cfg, err := ContainerConfig(pod, c, ContainerOptions{EnvSources: src, Node: NodeInfo{Name: "node-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Command[2], "echo admin@node-a $(USER) $(NOPE)"; got != want {
		t.Errorf("command = %q, want %q", got, want)
	}
	if got, want := cfg.Args[0], "admin"; got != want {
		t.Errorf("args = %q, want %q", got, want)
	}
}

// countingSources counts reads, to show each object is read once per
// container config.
type countingSources struct {
	fakeSources
	reads map[string]int
}

func (c countingSources) ConfigMap(ns, name string) (map[string][]byte, bool, error) {
	c.reads["configmap/"+name]++
	return c.fakeSources.ConfigMap(ns, name)
}

func (c countingSources) Secret(ns, name string) (map[string][]byte, bool, error) {
	c.reads["secret/"+name]++
	return c.fakeSources.Secret(ns, name)
}

func TestEachSourceIsReadOnce(t *testing.T) {
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}}
	c.Env = []corev1.EnvVar{
		{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "MODE"}}},
		{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "K", Optional: ptr(true)}}},
		{Name: "C", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "gone"}, Key: "L", Optional: ptr(true)}}},
		{Name: "D", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}, Key: "MODE", Optional: ptr(true)}}},
	}
	src := countingSources{
		fakeSources: fakeSources{configMaps: map[string]map[string][]byte{"default/app": {"MODE": []byte("prod")}}},
		reads:       map[string]int{},
	}
	if _, err := ContainerConfig(pod, c, ContainerOptions{EnvSources: src}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"configmap/app": 1, "configmap/gone": 1, "secret/app": 1}
	if !maps.Equal(src.reads, want) {
		t.Errorf("reads %v, want %v (a Secret and a ConfigMap of one name are two objects)", src.reads, want)
	}
}
