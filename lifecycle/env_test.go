package lifecycle_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// writeSource writes a ConfigMap or Secret (kind "configmaps" or
// "secrets") into the rig's SourceDir, one file per key.
func (r *rig) writeSource(t *testing.T, kind, name string, data map[string]string) {
	t.Helper()
	dir := filepath.Join(r.sources, kind, "default", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

const containerEnvPod = `
apiVersion: v1
kind: Pod
metadata: {name: env, labels: {app: env}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    # The expanded words reach sh as its positional parameters, which it
    # prints as they are (a "$(...)" in the script itself would be run).
    # PID 1's environ is the env the runtime was given (sh passes only
    # names that are shell identifiers on to its children).
    command: [sh, -c, 'tr "\\0" "\\n" </proc/1/environ | sort; echo "cmd $0|$1|$2|$3"', '$(MODE)']
    args: ['$(GREETING)', '$$(GREETING)', '$(UNDEFINED)']
    resources:
      limits: {cpu: 250m, memory: 64Mi}
    envFrom:
    - configMapRef: {name: app}
    - prefix: DB_
      secretRef: {name: db}
    - configMapRef: {name: absent, optional: true}
    env:
    - {name: GREETING, value: "hello $(MODE) on $(NODE)"}
    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: LATE, value: "node $(NODE)"}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    - {name: HOST_IPS, valueFrom: {fieldRef: {fieldPath: status.hostIPs}}}
    - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: db, key: PASSWORD}}}
    - {name: PORT_REF, valueFrom: {configMapKeyRef: {name: app, key: PORT}}}
    - {name: OPTIONAL, valueFrom: {configMapKeyRef: {name: app, key: NOPE, optional: true}}}
    - {name: MEM_MI, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    - {name: CPU_M, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
    - {name: STORAGE_GI, valueFrom: {resourceFieldRef: {resource: limits.ephemeral-storage, divisor: 1Gi}}}
`

// TestContainerEnvAgainstARealContainerd: a busybox container prints its
// environment and the pod's logs show every source resolved as the
// kubelet resolves it: envFrom ConfigMap (every key, relaxed names too) and
// prefixed Secret, key
// references, the node's and the pod's fieldRefs, resourceFieldRefs with
// divisors and the node's allocatable for an unset limit, and $(VAR)
// expansion in env and command.
func TestContainerEnvAgainstARealContainerd(t *testing.T) {
	r := newRig(t)
	r.node = cri.NodeInfo{
		Name: "node-a", HostIPs: []string{"192.0.2.10", "2001:db8::10"},
		Allocatable: corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("20Gi")},
	}
	r.writeSource(t, "configmaps", "app", map[string]string{"MODE": "prod", "PORT": "8080", "1ST": "relaxed"})
	r.writeSource(t, "secrets", "db", map[string]string{"PASSWORD": "s3cret", "USER": "admin"})
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, containerEnvPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "env", "succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	var b bytes.Buffer
	if err := m.Logs(ctx, "default", "env", lifecycle.LogOptions{Tail: -1}, &b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("pod logs:\n%s", out)
	want := []string{
		"MODE=prod", "PORT=8080", "1ST=relaxed", "DB_PASSWORD=s3cret", "DB_USER=admin",
		"GREETING=hello prod on $(NODE)", // NODE is defined after it
		"NODE=node-a", "LATE=node node-a", "APP=env",
		"HOST_IP=192.0.2.10", "HOST_IPS=192.0.2.10,2001:db8::10", "POD_IP=" + p.Status.PodIP,
		"PASSWORD=s3cret", "PORT_REF=8080", "MEM_MI=64", "CPU_M=250", "STORAGE_GI=20",
		"cmd prod|hello prod on $(NODE)|$(GREETING)|$(UNDEFINED)",
	}
	lines := strings.Split(out, "\n")
	for _, w := range want {
		if !contains(lines, w) {
			t.Errorf("logs have no line %q", w)
		}
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "OPTIONAL=") {
			t.Errorf("logs have %q: a missing optional key was set", l)
		}
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

const missingConfigMapPod = `
apiVersion: v1
kind: Pod
metadata: {name: missing}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    command: [sh, -c, 'echo "value=$VALUE"']
    env:
    - {name: VALUE, valueFrom: {configMapKeyRef: {name: late, key: VALUE}}}
`

// TestMissingConfigMapIsCreateContainerConfigErrorUntilItAppears: the
// container waits with the kubelet's reason and message while its
// ConfigMap is missing, then its key, and starts once both exist.
func TestMissingConfigMapIsCreateContainerConfigErrorUntilItAppears(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, missingConfigMapPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waiting := func(msg string) func(*corev1.Pod) bool {
		return func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 1 && cs[0].State.Waiting != nil &&
				cs[0].State.Waiting.Reason == "CreateContainerConfigError" && cs[0].State.Waiting.Message == msg
		}
	}
	waitPod(t, m, "missing", `waiting for its ConfigMap`, waiting(`configmap "late" not found`))
	r.writeSource(t, "configmaps", "late", map[string]string{"OTHER": "x"})
	waitPod(t, m, "missing", `waiting for its key`, waiting(`couldn't find key VALUE in ConfigMap default/late`))
	r.writeSource(t, "configmaps", "late", map[string]string{"VALUE": "arrived"})
	waitPod(t, m, "missing", "succeeded", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	var b bytes.Buffer
	if err := m.Logs(ctx, "default", "missing", lifecycle.LogOptions{Tail: -1}, &b); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(b.String()); got != "value=arrived" {
		t.Errorf("logs %q, want value=arrived", got)
	}
}
