// Package kubernetes_test checks the manifests of guard mode's DaemonSet
// (deploy/kubernetes, applied with `kubectl apply -f deploy/kubernetes/`)
// and the example configuration deploy/guard.example.yaml: every document
// decodes strictly into its Kubernetes type, the ServiceAccount has exactly
// the API rights guard mode uses, and the DaemonSet has the host access
// its sensing and actions need.
package kubernetes_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"maps"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/deploy/kubernetes"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/internal/strictyaml"
)

// exampleConfig is the guard's example configuration file.
const exampleConfig = "../guard.example.yaml"

// object is one document of one manifest file.
type object struct {
	file string
	obj  runtime.Object
}

// decodeStrict decodes every YAML document of data into the type its
// apiVersion and kind name; an unknown or duplicate field is an error.
func decodeStrict(data []byte) ([]runtime.Object, error) {
	dec := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var objs []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, err
		}
		objs = append(objs, obj)
	}
}

// stripComments drops the comment lines of a YAML document, to tell an
// empty one (a file's leading comment before ---) from a real one.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// load decodes every manifest in the directory, in file name order (the
// order kubectl applies them in), and fails on any file kubectl apply
// would skip or that is not ours.
func load(t *testing.T) []object {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".go"):
			continue // this test, and embed.go (kubectl apply -f skips them)
		case e.IsDir() || !strings.HasSuffix(name, ".yaml"):
			t.Errorf("%s: only .yaml manifests and Go files belong here (kubectl apply -f reads .yaml, .yml and .json)", name)
			continue
		}
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := decodeStrict(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(decoded) == 0 {
			t.Errorf("%s: no object", name)
		}
		for _, o := range decoded {
			objs = append(objs, object{file: name, obj: o})
		}
	}
	return objs
}

// only returns the one object of type T, failing unless there is exactly
// one, and the file it is in.
func only[T runtime.Object](t *testing.T, objs []object) (T, string) {
	t.Helper()
	var found []object
	for _, o := range objs {
		if _, ok := o.obj.(T); ok {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0].obj.(T), found[0].file
}

func TestDecodingIsStrict(t *testing.T) {
	// The check is not vacuous: a misspelt field fails, as kubectl apply
	// --validate=strict fails it.
	_, err := decodeStrict([]byte("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a, namespce: b}\n"))
	if err == nil || !strings.Contains(err.Error(), "namespce") {
		t.Errorf("an unknown field decoded: %v", err)
	}
	_, err = decodeStrict([]byte("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: a, name: b}\n"))
	if err == nil {
		t.Error("a duplicate field decoded")
	}
}

func TestManifests(t *testing.T) {
	objs := load(t)
	ns, nsFile := only[*corev1.Namespace](t, objs)
	sa, saFile := only[*corev1.ServiceAccount](t, objs)
	role, roleFile := only[*rbacv1.ClusterRole](t, objs)
	binding, bindingFile := only[*rbacv1.ClusterRoleBinding](t, objs)
	cm, cmFile := only[*corev1.ConfigMap](t, objs)
	ds, dsFile := only[*appsv1.DaemonSet](t, objs)

	t.Run("nothing but the guard's objects", func(t *testing.T) {
		if len(objs) != 6 {
			t.Errorf("%d objects, want the namespace, service account, cluster role and binding, config map and daemon set", len(objs))
		}
	})
	t.Run("files apply in the order their objects need", func(t *testing.T) {
		// kubectl apply -f DIR goes through the files in name order.
		before := func(a, b string, what string) {
			if a >= b {
				t.Errorf("%s: %s must sort before %s", what, a, b)
			}
		}
		before(nsFile, saFile, "the namespace before its objects")
		before(nsFile, cmFile, "the namespace before its objects")
		before(saFile, dsFile, "the service account before its pods")
		before(cmFile, dsFile, "the config map before the pods that mount it")
		if roleFile != bindingFile {
			before(roleFile, bindingFile, "the role before its binding")
		}
		for _, o := range []metav1.Object{sa, cm, ds} {
			if o.GetNamespace() != ns.Name {
				t.Errorf("%s is in namespace %q, not %q", o.GetName(), o.GetNamespace(), ns.Name)
			}
		}
		if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
			t.Errorf("namespace %s does not let Pod Security Admission run a privileged pod: labels %v", ns.Name, ns.Labels)
		}
	})
	t.Run("the cluster role grants exactly what guard mode uses", func(t *testing.T) {
		want := []string{
			"core/events create", "core/events patch",
			"core/nodes get", "core/nodes list", "core/nodes watch",
			"core/pods delete", "core/pods get", "core/pods list", "core/pods watch",
			"core/pods/eviction create",
			"core/pods/status patch",
		}
		var got []string
		for i, r := range role.Rules {
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("rule %d: resourceNames %v, nonResourceURLs %v", i, r.ResourceNames, r.NonResourceURLs)
			}
			if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") || slices.Contains(r.Verbs, "*") {
				t.Errorf("rule %d has a wildcard: %+v", i, r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if g == "" {
							g = "core"
						}
						got = append(got, g+"/"+res+" "+v)
					}
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("the cluster role grants\n  %v\nwant\n  %v", got, want)
		}
		if role.AggregationRule != nil {
			t.Errorf("an aggregation rule would add rights: %+v", role.AggregationRule)
		}
	})
	t.Run("the binding gives the role to the service account", func(t *testing.T) {
		want := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}
		if binding.RoleRef != want {
			t.Errorf("roleRef %+v, want %+v", binding.RoleRef, want)
		}
		subj := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}}
		if !reflect.DeepEqual(binding.Subjects, subj) {
			t.Errorf("subjects %+v, want %+v", binding.Subjects, subj)
		}
	})

	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	t.Run("the daemon set runs as the service account", func(t *testing.T) {
		if pod.ServiceAccountName != sa.Name {
			t.Errorf("serviceAccountName %q, want %q", pod.ServiceAccountName, sa.Name)
		}
		if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
			t.Error("the token is not mounted: no in-cluster configuration")
		}
		if sa.AutomountServiceAccountToken != nil && !*sa.AutomountServiceAccountToken && pod.AutomountServiceAccountToken == nil {
			t.Error("the service account turns the token off and the pod does not turn it on")
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		if sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
			t.Errorf("selector %v does not select the template's labels %v", sel, ds.Spec.Template.Labels)
		}
	})
	t.Run("the guard's pod is privileged in the host's namespaces on every node", func(t *testing.T) {
		if !pod.HostPID || !pod.HostNetwork {
			t.Errorf("hostPID %v, hostNetwork %v", pod.HostPID, pod.HostNetwork)
		}
		if pod.PriorityClassName != "system-node-critical" {
			t.Errorf("priorityClassName %q", pod.PriorityClassName)
		}
		if !slices.ContainsFunc(pod.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
		}) {
			t.Errorf("no toleration of every taint: %+v", pod.Tolerations)
		}
		if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
			t.Errorf("not privileged: %+v", c.SecurityContext)
		}
	})
	t.Run("the container runs guard mode on its node", func(t *testing.T) {
		want := []string{"/usr/local/bin/nodeguard", "guard", "--config", "/etc/nodeguard/guard.yaml", "--node-name", "$(NODE_NAME)"}
		if !slices.Equal(c.Command, want) || len(c.Args) > 0 {
			t.Errorf("command %q args %q, want %q", c.Command, c.Args, want)
		}
		if c.Image != "localhost/nodeguard:dev" || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("image %q pull %q", c.Image, c.ImagePullPolicy)
		}
		i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
		if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("NODE_NAME is not the downward API's spec.nodeName: %+v", c.Env)
		}
	})
	t.Run("memory is bounded and CPU is not", func(t *testing.T) {
		req, lim := c.Resources.Requests, c.Resources.Limits
		if _, ok := lim[corev1.ResourceCPU]; ok {
			t.Errorf("a CPU limit throttles the guard when it must act: %v", lim)
		}
		mreq, lim1, cpu := req[corev1.ResourceMemory], lim[corev1.ResourceMemory], req[corev1.ResourceCPU]
		if mreq.IsZero() || cpu.IsZero() || lim1.Cmp(mreq) <= 0 {
			t.Errorf("requests %v, limits %v: want memory and cpu requested, memory limited above its request", req, lim)
		}
	})

	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	// hostPathAt returns the host path mounted at path, at the same path.
	hostPathAt := func(t *testing.T, path string) (corev1.VolumeMount, *corev1.HostPathVolumeSource) {
		t.Helper()
		m, ok := mounts[path]
		if !ok {
			t.Errorf("nothing mounted at %s", path)
			return m, nil
		}
		hp := volumes[m.Name].HostPath
		if hp == nil || hp.Path != path || m.SubPath != "" {
			t.Errorf("%s: volume %q is not the host's %s: %+v", path, m.Name, path, volumes[m.Name])
			return m, nil
		}
		return m, hp
	}
	t.Run("the host paths sensing and acting need are mounted where the host has them", func(t *testing.T) {
		for _, tc := range []struct {
			path     string
			writable bool
		}{
			{"/sys/fs/cgroup", true}, // cgroup.kill, memory.pressure triggers
			{"/sys/kernel/tracing", false},
			{"/sys/kernel/debug", false},
			{"/sys/fs/bpf", false},
			{"/run/containerd", false},
			{"/var/lib/nodeguard-guard", true},
		} {
			m, hp := hostPathAt(t, tc.path)
			if hp != nil && tc.writable && m.ReadOnly {
				t.Errorf("%s is read-only", tc.path)
			}
		}
		if _, hp := hostPathAt(t, "/var/lib/nodeguard-guard"); hp != nil && (hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate) {
			t.Errorf("the state directory is not made on a new node: %+v", hp)
		}
		// hostPID makes the container's /proc the host's.
		if _, ok := mounts["/proc"]; ok {
			t.Error("/proc is mounted: hostPID already gives the host's")
		}
		for path, m := range mounts {
			if m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional {
				t.Errorf("%s: the guard mounts nothing the host must see", path)
			}
		}
	})
	t.Run("the config map is mounted where the command reads it", func(t *testing.T) {
		m, ok := mounts["/etc/nodeguard"]
		if !ok {
			t.Fatal("nothing mounted at /etc/nodeguard")
		}
		v := volumes[m.Name]
		if v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || len(v.ConfigMap.Items) > 0 || !m.ReadOnly {
			t.Errorf("/etc/nodeguard: volume %+v, mount %+v: want config map %s, every key, read-only", v, m, cm.Name)
		}
		if _, ok := cm.Data["guard.yaml"]; !ok || len(cm.Data) != 1 {
			t.Errorf("config map keys %v, want guard.yaml", slices.Collect(maps.Keys(cm.Data)))
		}
	})
	t.Run("the configuration's paths are mounted", func(t *testing.T) {
		cfg := parseConfig(t, []byte(cm.Data["guard.yaml"]))
		ep, err := url.Parse(stringKey(t, cfg, "runtimeEndpoint"))
		if err != nil || ep.Scheme != "unix" {
			t.Fatalf("runtimeEndpoint %q: %v", cfg["runtimeEndpoint"], err)
		}
		for _, p := range []string{ep.Path, stringKey(t, cfg, "rootDir")} {
			if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
				return v.HostPath != nil && mounts[v.HostPath.Path].Name == v.Name &&
					(p == v.HostPath.Path || strings.HasPrefix(p, v.HostPath.Path+"/"))
			}) {
				t.Errorf("%s is beneath no host path mounted at its own path", p)
			}
		}
		if addr := stringKey(t, cfg, "metricsAddr"); !strings.HasPrefix(addr, "127.0.0.1:") {
			t.Errorf("metricsAddr %q is beyond the node's loopback (hostNetwork)", addr)
		}
	})
}

// parseConfig parses a guard configuration as YAML (duplicate keys are
// errors) into its generic form.
func parseConfig(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var cfg map[string]any
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	return cfg
}

func stringKey(t *testing.T, cfg map[string]any, key string) string {
	t.Helper()
	s, ok := cfg[key].(string)
	if !ok {
		t.Fatalf("%s: %#v is not a string", key, cfg[key])
	}
	return s
}

// evictionKeys are the keys of nodeguard's eviction section, as the
// configuration's strict decoder knows them.
func evictionKeys(t *testing.T) []string {
	t.Helper()
	return slices.Sorted(maps.Keys(strictyaml.Fields(reflect.TypeFor[config.Eviction]())))
}

// TestGuardConfigurations checks the key names of the example file and of
// the DaemonSet's copy: the top-level keys of guard mode, and in each
// section only keys that nodeguard's configuration has. Key names only:
// values are for the guard's own strict loader to judge, and
// cmd/nodeguard's tests load configuration files through it.
func TestGuardConfigurations(t *testing.T) {
	data, err := os.ReadFile("20-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeStrict(data)
	if err != nil || len(objs) != 1 {
		t.Fatalf("20-config.yaml: %d objects, %v", len(objs), err)
	}
	cm, ok := objs[0].(*corev1.ConfigMap)
	if !ok {
		t.Fatalf("20-config.yaml holds a %T", objs[0])
	}
	example, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	allowedEviction := append(evictionKeys(t), "hardAction")
	kubeletHard := resource.MustParse(eviction.DefaultEvictionHard()["memory.available"])
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"the example file", example},
		{"the daemon set's config map", []byte(cm.Data["guard.yaml"])},
	} {
		t.Run(tc.name+" has guard mode's keys", func(t *testing.T) {
			cfg := parseConfig(t, tc.data)
			top := []string{"cgroupDriver", "cgroupRoot", "enableProfiling", "eviction", "kernel", "kubeconfig",
				"logging", "metricsAddr", "nodeName", "rootDir", "runtimeEndpoint"}
			if got := slices.Sorted(maps.Keys(cfg)); !slices.Equal(got, top) {
				t.Errorf("top-level keys\n  %v\nwant\n  %v", got, top)
			}
			for _, sec := range []struct {
				name    string
				allowed []string
			}{
				{"eviction", allowedEviction},
				{"logging", []string{"level", "format"}},
				{"kernel", []string{"bpf", "ringSizeBytes", "queueSize"}},
			} {
				m, ok := cfg[sec.name].(map[string]any)
				if !ok {
					t.Errorf("%s: %#v is not a section", sec.name, cfg[sec.name])
					continue
				}
				for k := range m {
					if !slices.Contains(sec.allowed, k) {
						t.Errorf("%s.%s is not a key of the section (%v)", sec.name, k, sec.allowed)
					}
				}
			}
			ev, _ := cfg["eviction"].(map[string]any)
			if a := ev["hardAction"]; a != "delete" && a != "evict" {
				t.Errorf("eviction.hardAction %#v", a)
			}
			hard, _ := ev["evictionHard"].(map[string]any)
			s, _ := hard["memory.available"].(string)
			q, err := resource.ParseQuantity(s)
			if err != nil {
				t.Fatalf("eviction.evictionHard[memory.available] %#v: %v", hard["memory.available"], err)
			}
			if q.Cmp(kubeletHard) <= 0 {
				t.Errorf("eviction.evictionHard[memory.available] %s is not above the kubelet's default %s: the guard would not act first",
					&q, &kubeletHard)
			}
		})
	}
}

// Manifests embeds every manifest of the directory, and nothing else.
func TestEmbeddedManifests(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := kubernetes.Manifests.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".yaml") {
			want = append(want, e.Name())
		}
	}
	for _, e := range embedded {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("embedded %v, want the directory's manifests %v", got, want)
	}
}
