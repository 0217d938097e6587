package podspec

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// withPull is c renamed "i" with pull policy p.
func withPull(c corev1.Container, p corev1.PullPolicy) corev1.Container {
	c.Name, c.ImagePullPolicy = "i", p
	return c
}

// base returns a valid, defaulted pod.
func base(t *testing.T) *corev1.Pod {
	t.Helper()
	return parse(t, pod("base"))[0]
}

func TestValidate(t *testing.T) {
	tr := true
	prio := func(v int32) *int32 { return &v }
	tests := []struct {
		name         string
		opts         Options
		mutate       func(p *corev1.Pod)
		wantErrs     []string
		wantWarnings []string
	}{
		{
			name:   "a minimal pod is valid",
			mutate: func(*corev1.Pod) {},
		},
		{
			name:   "a privileged container is refused by default",
			mutate: func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &tr} },
			wantErrs: []string{
				"spec.containers[0].securityContext.privileged: Forbidden: disallowed by node policy",
			},
		},
		{
			name:   "a privileged container is allowed when the node allows it",
			opts:   Options{AllowPrivileged: true},
			mutate: func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &tr} },
		},
		{
			name: "imagePullPolicy Always is refused on a node that does not pull",
			mutate: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{withPull(p.Spec.Containers[0], corev1.PullAlways)}
			},
			wantErrs: []string{
				"spec.initContainers[0].imagePullPolicy: Forbidden: Always pulls at every start, and this node does not pull images (imagePull: false in nodeguard's config): use IfNotPresent or Never, or set imagePull: true",
			},
		},
		{
			name:   "imagePullPolicy Always is accepted on a node that pulls",
			opts:   Options{ImagePull: true},
			mutate: func(p *corev1.Pod) { p.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways },
		},
		{
			name: "imagePullPolicy IfNotPresent and Never are accepted on a node that does not pull",
			mutate: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{withPull(p.Spec.Containers[0], corev1.PullNever)}
			},
		},
		{
			name: "scheduling fields are accepted with warnings",
			mutate: func(p *corev1.Pod) {
				p.Spec.NodeName = "n1"
				p.Spec.SchedulerName = "default-scheduler"
			},
			wantWarnings: []string{
				"spec.nodeName: ignored: nodeguard does no scheduling, it runs every pod it is given",
				"spec.schedulerName: ignored: nodeguard does no scheduling, it runs every pod it is given",
			},
		},
		{
			name: "a nodeSelector and tolerations are accepted silently (admission matches the selector)",
			mutate: func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
				p.Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}, {Operator: corev1.TolerationOpExists}}
			},
		},
		{
			name: "a nodeSelector and tolerations are validated as Kubernetes does",
			mutate: func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"bad key": "v"}
				p.Spec.Tolerations = []corev1.Toleration{
					{Operator: corev1.TolerationOpEqual},
					{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"},
					{Key: "k", Operator: "In"},
					{Key: "k", Effect: "Never"},
					{Key: "k", Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptr(int64(5))},
				}
			},
			wantErrs: []string{
				`spec.nodeSelector: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`,
				"spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
				`spec.tolerations[1].operator: Invalid value: {"key":"k","operator":"Exists","value":"v"}: value must be empty when ` + "`operator` is 'Exists'",
				`spec.tolerations[2].operator: Unsupported value: "In": supported values: "Equal", "Exists"`,
				`spec.tolerations[3].effect: Unsupported value: "Never": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"`,
				"spec.tolerations[4].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
			},
		},
		{
			name: "serviceAccountName and automountServiceAccountToken are accepted",
			mutate: func(p *corev1.Pod) {
				p.Spec.ServiceAccountName, p.Spec.DeprecatedServiceAccount = "builder", "builder"
				p.Spec.AutomountServiceAccountToken = &tr
			},
		},
		{
			name:     "a serviceAccountName must be a DNS subdomain",
			mutate:   func(p *corev1.Pod) { p.Spec.ServiceAccountName = "Builder" },
			wantErrs: []string{`spec.serviceAccountName: Invalid value: "Builder": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`},
		},
		{
			name: "activeDeadlineSeconds, hostAliases and shareProcessNamespace are accepted",
			mutate: func(p *corev1.Pod) {
				p.Spec.ActiveDeadlineSeconds = ptr(int64(2))
				p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"db", "db.example.com"}}, {IP: "fd00::1", Hostnames: []string{"v6"}}}
				p.Spec.ShareProcessNamespace = &tr
				p.Spec.EnableServiceLinks = &tr
			},
		},
		{
			name: "activeDeadlineSeconds must be positive and hostAliases well formed",
			mutate: func(p *corev1.Pod) {
				p.Spec.ActiveDeadlineSeconds = ptr(int64(0))
				p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2", Hostnames: []string{"db_1"}}}
			},
			wantErrs: []string{
				"spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
				`spec.hostAliases[0].ip: Invalid value: "10.1.2": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`,
				`spec.hostAliases[0].hostnames[0]: Invalid value: "db_1": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
			},
		},
		{
			name:   "the node's namespaces are refused unless the node allows privileged pods",
			mutate: func(p *corev1.Pod) { p.Spec.HostNetwork, p.Spec.HostPID, p.Spec.HostIPC = true, true, true },
			wantErrs: []string{
				"spec.hostNetwork: Forbidden: disallowed by node policy: the node's namespaces need allowPrivileged: true",
				"spec.hostPID: Forbidden: disallowed by node policy: the node's namespaces need allowPrivileged: true",
				"spec.hostIPC: Forbidden: disallowed by node policy: the node's namespaces need allowPrivileged: true",
			},
		},
		{
			name:   "the node's namespaces are accepted where the node allows privileged pods",
			opts:   Options{AllowPrivileged: true},
			mutate: func(p *corev1.Pod) { p.Spec.HostNetwork, p.Spec.HostPID, p.Spec.HostIPC = true, true, true },
		},
		{
			name:     "shareProcessNamespace and hostPID are exclusive",
			opts:     Options{AllowPrivileged: true},
			mutate:   func(p *corev1.Pod) { p.Spec.HostPID, p.Spec.ShareProcessNamespace = true, &tr },
			wantErrs: []string{"spec.shareProcessNamespace: Invalid value: true: ShareProcessNamespace and HostPID cannot both be enabled"},
		},
		{
			name:         "imagePullSecrets are harmless on a node that does not pull",
			mutate:       func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}} },
			wantWarnings: []string{"spec.imagePullSecrets: ignored: this node does not pull images (imagePull: false in nodeguard's config)"},
		},
		{
			name:   "imagePullSecrets are accepted on a node that pulls (lifecycle pulls with them)",
			opts:   Options{ImagePull: true},
			mutate: func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}} },
		},
		{
			name:     "an imagePullSecret without a name is refused",
			opts:     Options{ImagePull: true},
			mutate:   func(p *corev1.Pod) { p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}, {}} },
			wantErrs: []string{"spec.imagePullSecrets[1].name: Required value"},
		},
		{
			name:     "a field that needs a control plane is refused with the reason",
			mutate:   func(p *corev1.Pod) { p.Spec.RuntimeClassName = ptr("kata") },
			wantErrs: []string{"spec.runtimeClassName: Forbidden: not supported by nodeguard: a RuntimeClass is a control plane's object, and nodeguard configures no runtime handlers"},
		},
		{
			name:         "status is accepted with a warning",
			mutate:       func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning },
			wantWarnings: []string{"status: ignored: set by an API server, not read from manifests"},
		},
		{
			name:   "a configured priority class resolves",
			opts:   Options{PriorityClasses: map[string]int32{"high": 100}},
			mutate: func(p *corev1.Pod) { p.Spec.PriorityClassName, p.Spec.Priority = "high", prio(100) },
		},
		{
			name:     "a priority without a class must be zero",
			mutate:   func(p *corev1.Pod) { p.Spec.Priority = prio(7) },
			wantErrs: []string{"spec.priority: Forbidden: the integer value of priority (7) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name"},
		},
		{
			name: "a configured class cannot shadow a built-in one",
			opts: Options{PriorityClasses: map[string]int32{"system-node-critical": 1}},
			mutate: func(p *corev1.Pod) {
				p.Spec.PriorityClassName, p.Spec.Priority = "system-node-critical", prio(2000001000)
			},
		},
		{
			name:     "a pod without a uid is refused",
			mutate:   func(p *corev1.Pod) { p.UID = "" },
			wantErrs: []string{"metadata.uid: Required value: Parse and Default set it"},
		},
		{
			name:     "a pod of another kind is refused",
			mutate:   func(p *corev1.Pod) { p.Kind = "Deployment" },
			wantErrs: []string{`kind: Unsupported value: "Deployment": supported values: "Pod"`},
		},
		{
			name:     "labels are validated as Kubernetes does",
			mutate:   func(p *corev1.Pod) { p.Labels = map[string]string{"bad key": "v"} },
			wantErrs: []string{`metadata.labels: Invalid value: "bad key": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`},
		},
		{
			name:     "a pod-level resources stanza is refused",
			mutate:   func(p *corev1.Pod) { p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{}} },
			wantErrs: []string{"spec.resources: Forbidden: not supported by nodeguard: nodeguard sizes pod cgroups from the containers' resources only (no PodLevelResources feature): set resources per container"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base(t)
			tt.mutate(p)
			warnings, errs := Validate(p, tt.opts)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.wantErrs) {
				t.Errorf("errors:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.wantErrs, "\n  "))
			}
			slices.Sort(warnings)
			if !slices.Equal(warnings, tt.wantWarnings) {
				t.Errorf("warnings:\n  %s\nwant:\n  %s", strings.Join(warnings, "\n  "), strings.Join(tt.wantWarnings, "\n  "))
			}
		})
	}
}

func TestValidateDoesNotModifyThePod(t *testing.T) {
	p := parse(t, strings.Replace(pod("p"), "{name: p}", "{name: p}\n  # x", 1))[0]
	p.Spec.PriorityClassName = "system-cluster-critical"
	before := p.DeepCopy()
	Validate(p, Options{})
	if !equality.Semantic.DeepEqual(before, p) {
		t.Fatal("Validate modified the pod")
	}
}

func TestResolvePriority(t *testing.T) {
	opts := Options{PriorityClasses: map[string]int32{"high": 1000}}
	tests := []struct {
		name      string
		className string
		want      int32
		wantErr   string
	}{
		{"no class gives priority 0", "", 0, ""},
		{"system-node-critical is built in", "system-node-critical", 2000001000, ""},
		{"system-cluster-critical is built in", "system-cluster-critical", 2000000000, ""},
		{"a configured class gives its value", "high", 1000, ""},
		{"an unknown class is an error", "low", 0, `spec.priorityClassName: Not found: "low"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := base(t)
			p.Spec.PriorityClassName = tt.className
			got, err := ResolvePriority(p, opts)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ResolvePriority = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

// TestEveryUnlistedPodSpecFieldIsRefused sets, one at a time, every PodSpec
// and Container field that the support table does not list, and checks that
// Validate refuses it by path: new API fields can never be ignored silently.
func TestEveryUnlistedPodSpecFieldIsRefused(t *testing.T) {
	for _, target := range []struct {
		typ  reflect.Type
		path string
		get  func(p *corev1.Pod) reflect.Value
	}{
		{reflect.TypeFor[corev1.PodSpec](), "spec.", func(p *corev1.Pod) reflect.Value { return reflect.ValueOf(&p.Spec).Elem() }},
		{reflect.TypeFor[corev1.Container](), "spec.containers[0].", func(p *corev1.Pod) reflect.Value { return reflect.ValueOf(&p.Spec.Containers[0]).Elem() }},
		{reflect.TypeFor[corev1.VolumeSource](), "spec.volumes[0].", func(p *corev1.Pod) reflect.Value {
			p.Spec.Volumes = []corev1.Volume{{Name: "v"}}
			return reflect.ValueOf(&p.Spec.Volumes[0].VolumeSource).Elem()
		}},
	} {
		uses := fieldUse[target.typ]
		if target.typ == reflect.TypeFor[corev1.VolumeSource]() {
			uses = fieldUse[reflect.TypeFor[corev1.Volume]()]
		}
		for i := 0; i < target.typ.NumField(); i++ {
			f := target.typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if _, listed := uses[name]; listed {
				continue
			}
			t.Run("setting "+target.path+name+" is refused", func(t *testing.T) {
				p := base(t)
				fv := target.get(p).Field(i)
				setNonZero(fv)
				_, errs := Validate(p, Options{})
				want := target.path + name + ": Forbidden: " + NotSupported
				if why, ok := refusedWhy[target.typ][name]; ok {
					want += ": " + why
				} else if target.typ != reflect.TypeFor[corev1.Container]() {
					t.Errorf("refusedWhy has no reason for %s: say what is missing", name)
				}
				for _, e := range errs {
					if e.Error() == want {
						return
					}
				}
				t.Fatalf("no %q among %v", want, errs)
			})
		}
	}
}

// setNonZero gives v some non-zero value of its type.
func setNonZero(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		if v.Elem().IsZero() {
			setNonZero(v.Elem())
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem())
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				setNonZero(v.Field(i))
				return
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// Readiness gates need a control plane to set their conditions: refused
// standalone with the reason, accepted in node mode.
func TestReadinessGatesNeedNodeMode(t *testing.T) {
	pods, err := Parse(strings.NewReader(`apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  readinessGates: [{conditionType: example.com/lb}]
  containers: [{name: c, image: busybox:1.35}]
`), "gated.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, errs := Validate(pods[0], Options{})
	if len(errs) != 1 || errs[0].Field != "spec.readinessGates" || !strings.Contains(errs[0].Error(), "control plane") {
		t.Errorf("standalone: %v, want spec.readinessGates refused naming the control plane", errs)
	}
	if _, errs := Validate(pods[0], Options{ReadinessGates: true}); len(errs) != 0 {
		t.Errorf("node mode: %v, want none", errs)
	}
}
