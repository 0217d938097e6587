package lifecycle

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// sidecarSpec is a pod from names: "+name" is a sidecar init container,
// "name" a plain one; app are the app containers.
func sidecarSpec(policy corev1.RestartPolicy, inits []string, app ...string) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{Spec: corev1.PodSpec{RestartPolicy: policy}}
	for _, n := range inits {
		c := corev1.Container{Name: strings.TrimPrefix(n, "+")}
		if strings.HasPrefix(n, "+") {
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	for _, n := range app {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: n})
	}
	return p
}

// scSeen is what the runtime reports: a container per name, in a phase,
// with an exit code for the exited ones.
type scSeen map[string]cri.State

func (s scSeen) views() (map[string]*runtimeapi.Container, map[string]cri.State) {
	byName := map[string]*runtimeapi.Container{}
	for n := range s {
		byName[n] = &runtimeapi.Container{Id: "id-" + n, Metadata: &runtimeapi.ContainerMetadata{Name: n}}
	}
	return byName, s
}

var (
	scRunning = cri.State{Phase: cri.PhaseRunning}
	scCreated = cri.State{Phase: cri.PhaseCreated}
	scUnknown = cri.State{Phase: cri.PhaseUnknown}
	scExited0 = cri.State{Phase: cri.PhaseExited}
	scExited1 = cri.State{Phase: cri.PhaseExited, ExitCode: 1}
	scKilled  = cri.State{Phase: cri.PhaseExited, ExitCode: 137}
)

func TestPlanInit(t *testing.T) {
	pod := sidecarSpec(corev1.RestartPolicyNever, []string{"+log", "setup", "+proxy"}, "app")
	noProbe := func(string, string) bool { return true }
	tests := []struct {
		name    string
		pod     *corev1.Pod
		scSeen  scSeen
		started func(name, id string) bool
		done    bool
		want    initPlan
	}{
		{"a pod without init containers is initialized at once", sidecarSpec(corev1.RestartPolicyAlways, nil, "app"), scSeen{}, noProbe, false,
			initPlan{initDone: true}},
		{"the first init container starts first, a sidecar like any", pod, scSeen{}, noProbe, false,
			initPlan{steps: []initStep{{0, opStart}}}},
		{"a scRunning sidecar whose startup probe has not passed holds the next back", pod, scSeen{"log": scRunning},
			func(string, string) bool { return false }, false, initPlan{}},
		{"a started sidecar lets the next init container start, and keeps scRunning", pod, scSeen{"log": scRunning}, noProbe, false,
			initPlan{steps: []initStep{{1, opStart}}}},
		{"a scRunning plain init container is waited for", pod, scSeen{"log": scRunning, "setup": scRunning}, noProbe, false,
			initPlan{}},
		{"a plain init container that exits 0 lets the next start", pod, scSeen{"log": scRunning, "setup": scExited0}, noProbe, false,
			initPlan{steps: []initStep{{2, opStart}}}},
		{"a plain init container that fails under Never fails the pod", pod, scSeen{"log": scRunning, "setup": scExited1}, noProbe, false,
			initPlan{failed: true}},
		{"a plain init container that fails under OnFailure is restarted",
			sidecarSpec(corev1.RestartPolicyOnFailure, []string{"+log", "setup"}, "app"), scSeen{"log": scRunning, "setup": scExited1}, noProbe, false,
			initPlan{steps: []initStep{{1, opRestart}}}},
		{"the last init container started makes the pod initialized", pod, scSeen{"log": scRunning, "setup": scExited0, "proxy": scRunning}, noProbe, false,
			initPlan{initDone: true}},
		{"a sidecar that exits before initialization is restarted under Never", pod, scSeen{"log": scKilled}, noProbe, false,
			initPlan{steps: []initStep{{0, opRestart}}}},
		{"a scCreated init container is started", pod, scSeen{"log": scCreated}, noProbe, false,
			initPlan{steps: []initStep{{0, opStartCreated}}}},
		{"an init container in an unknown state is replaced, not waited for", pod, scSeen{"log": scRunning, "setup": scUnknown}, noProbe, false,
			initPlan{steps: []initStep{{1, opReplaceUnknown}}}},
		{"once initialized, a sidecar in an unknown state is replaced", pod, scSeen{"log": scUnknown, "proxy": scRunning, "app": scRunning}, noProbe, false,
			initPlan{initDone: true, steps: []initStep{{0, opReplaceUnknown}}}},
		{"once initialized, exited and missing sidecars come back and plain init containers never run again", pod,
			scSeen{"log": scExited0, "setup": scExited1, "app": scRunning}, noProbe, false,
			initPlan{initDone: true, steps: []initStep{{0, opRestart}, {2, opStart}}}},
		{"once initialized, a sidecar left scCreated is started", pod, scSeen{"log": scRunning, "proxy": scCreated, "app": scRunning}, noProbe, false,
			initPlan{initDone: true, steps: []initStep{{2, opStartCreated}}}},
		{"once the app containers are done, sidecars are not restarted", pod, scSeen{"log": scKilled, "proxy": scKilled, "app": scExited0}, noProbe, true,
			initPlan{initDone: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			byName, states := tt.scSeen.views()
			got := planInit(tt.pod, byName, states, tt.started, tt.done)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("planInit = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRegularDone(t *testing.T) {
	tests := []struct {
		name   string
		policy corev1.RestartPolicy
		scSeen scSeen
		want   bool
	}{
		{"Always never ends", corev1.RestartPolicyAlways, scSeen{"a": scExited0, "b": scExited0}, false},
		{"Never ends once every app container exited, whatever its code", corev1.RestartPolicyNever, scSeen{"a": scExited0, "b": scExited1}, true},
		{"an app container still scRunning keeps it going", corev1.RestartPolicyNever, scSeen{"a": scExited0, "b": scRunning}, false},
		{"an app container not scCreated yet keeps it going", corev1.RestartPolicyNever, scSeen{"a": scExited0}, false},
		{"OnFailure restarts a failed one", corev1.RestartPolicyOnFailure, scSeen{"a": scExited0, "b": scExited1}, false},
		{"OnFailure ends when all exited 0", corev1.RestartPolicyOnFailure, scSeen{"a": scExited0, "b": scExited0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := sidecarSpec(tt.policy, []string{"+log"}, "a", "b")
			tt.scSeen["log"] = scRunning
			byName, states := tt.scSeen.views()
			if got := regularDone(pod, byName, states); got != tt.want {
				t.Fatalf("regularDone = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestTerminationWaves(t *testing.T) {
	names := func(waves [][]*runtimeapi.Container) [][]string {
		var out [][]string
		for _, w := range waves {
			var ns []string
			for _, c := range w {
				ns = append(ns, c.GetMetadata().GetName())
			}
			out = append(out, ns)
		}
		return out
	}
	ctrs := func(ns ...string) []*runtimeapi.Container {
		var out []*runtimeapi.Container
		for _, n := range ns {
			out = append(out, &runtimeapi.Container{Id: n, Metadata: &runtimeapi.ContainerMetadata{Name: n}})
		}
		return out
	}
	pod := sidecarSpec(corev1.RestartPolicyAlways, []string{"+log", "setup", "+proxy", "+mesh"}, "app", "web")
	tests := []struct {
		name string
		pod  *corev1.Pod
		ctrs []*runtimeapi.Container
		want [][]string
	}{
		{"app containers together, then sidecars one by one, last first", pod,
			ctrs("log", "proxy", "app", "mesh", "web"), [][]string{{"app", "web"}, {"mesh"}, {"proxy"}, {"log"}}},
		{"sidecars alone, still in reverse order", pod, ctrs("log", "mesh"), [][]string{{"mesh"}, {"log"}}},
		{"a pod without sidecars is one wave", sidecarSpec(corev1.RestartPolicyAlways, []string{"setup"}, "app", "web"),
			ctrs("web", "app"), [][]string{{"web", "app"}}},
		{"an orphan (no pod) is one wave", nil, ctrs("log", "app"), [][]string{{"log", "app"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(terminationWaves(tt.pod, tt.ctrs)); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("terminationWaves = %q, want %q", got, tt.want)
			}
		})
	}
}
