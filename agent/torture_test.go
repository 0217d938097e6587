package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// The restart torture test's size and bounds. Its defaults keep it near
// three minutes on a loaded 2-core host, inside make test's host lane.
const (
	// tortureSteps is the default number of steps
	// (NODEGUARD_TORTURE_STEPS overrides it).
	tortureSteps = 90
	// tortureBudget is the wall-clock time after which no new step is
	// taken (NODEGUARD_TORTURE_BUDGET, a Go duration, overrides it); the
	// final checks follow.
	tortureBudget = 150 * time.Second
	// tortureServe bounds a restarted agent's way to serving its API: a
	// crash loop or an exit at start fails well before it.
	tortureServe = 30 * time.Second
	// tortureConverge bounds the time until the pods match the model after
	// a restart: pods to start again run busybox from the local store.
	tortureConverge = 60 * time.Second
	// tortureEvict bounds the wait for the local-storage eviction of the
	// hog: the agent measures every DefaultLocalStorageInterval (10 s).
	tortureEvict = 35 * time.Second
	// tortureRaise bounds the wait for the agent to raise the next
	// victim's oom_score_adj once memory is near its threshold.
	tortureRaise = 20 * time.Second
	// nearBudget is node allocatable memory in the "near" configuration
	// (systemReserved = MemTotal - nearBudget) and nearThreshold its hard
	// allocatableMemory.available threshold: the test's pods use a few
	// MiB, so available stays above the threshold (no eviction) and below
	// twice it, where the agent raises the next victim's oom_score_adj.
	nearBudget    = 128 << 20
	nearThreshold = "72Mi"

	zoneLabel     = "torture.nodeguard.io/zone"
	genAnnotation = "torture.nodeguard.io/gen"
)

// wantState is what the model expects of a pod.
type wantState int

const (
	wantAbsent   wantState = iota
	wantRunning            // Running, its container running, of the wanted generation
	wantRejected           // Failed at admission (a config change), with a reason
	wantEvicted            // Failed, reason Evicted
)

func (w wantState) String() string {
	return [...]string{"absent", "running", "rejected", "evicted"}[w]
}

// podWant is one state the model accepts for a pod.
type podWant struct {
	state wantState
	gen   int // the generation of the spec (annotation genAnnotation) when running
}

func (w podWant) String() string {
	if w.state == wantRunning || w.state == wantRejected {
		return fmt.Sprintf("%s gen %d", w.state, w.gen)
	}
	return w.state.String()
}

// modelPod is the model's view of one pod name: its last accepted state
// (an apply the API accepted, a manifest that parsed, a delete).
type modelPod struct {
	name     string
	static   bool
	hog      bool   // the local-storage hog: writes past its emptyDir's sizeLimit
	volume   bool   // has emptyDir volumes (disk and memory) that get a marker
	selector string // nodeSelector zone ("": none)
	nextGen  int

	want podWant
	// alts are further states accepted at the next check: an operation
	// whose answer a SIGKILL cut off may have been accepted or not.
	alts []podWant
	// anyState: a corrupted state record named the pod; any settled
	// state is accepted once, then adopted.
	anyState bool
	// mayEvict: the hog, before its eviction was seen.
	mayEvict bool
	// kept: the container of an API pod whose record was corrupted while
	// it ran. The agent can no longer say what the pod is, so it keeps
	// its sandbox as it is, unlisted, at every start, until the name is
	// applied again or deleted (docs/state.md): checked through the CRI.
	kept string

	uid         string          // last observed
	uids        map[string]bool // every UID observed: records of any may be left
	containerID string          // baseline: seen at the last check, unchanged since
	marker      string          // written into its volumes; "" none
	// static only
	file string
	torn bool // the file holds half a manifest; the pod keeps its last parsed spec
}

func (p *modelPod) accepts() []podWant {
	out := append([]podWant{p.want}, p.alts...)
	if p.mayEvict {
		out = append(out, podWant{state: wantEvicted})
	}
	return out
}

// seenPod is a listed pod as the checks read it.
type seenPod struct {
	state       wantState // wantAbsent: listed but not settled (Pending, starting)
	phase       corev1.PodPhase
	reason, msg string
	gen         int
	uid         string
	containerID string
	source      string
}

func observe(p *corev1.Pod) seenPod {
	s := seenPod{phase: p.Status.Phase, reason: p.Status.Reason, msg: p.Status.Message, uid: string(p.UID),
		source: p.Annotations[lifecycle.AnnotationSource]}
	s.gen, _ = strconv.Atoi(p.Annotations[genAnnotation])
	running := 0
	for _, c := range p.Status.ContainerStatuses {
		if c.State.Running != nil {
			running++
			s.containerID = c.ContainerID
		}
	}
	switch {
	case p.Status.Phase == corev1.PodRunning && running == len(p.Spec.Containers):
		s.state = wantRunning
	case p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted":
		s.state = wantEvicted
	case p.Status.Phase == corev1.PodFailed && running == 0:
		s.state = wantRejected
	}
	return s
}

func (s seenPod) String() string {
	return fmt.Sprintf("%s (reason %q, gen %d, %s)", s.phase, s.reason, s.gen, s.msg)
}

// matches reports whether the pod seen (or its absence, !ok) is the
// state w.
func (w podWant) matches(s seenPod, ok bool) bool {
	switch w.state {
	case wantAbsent:
		return !ok
	case wantRunning:
		return ok && s.state == wantRunning && s.gen == w.gen
	case wantRejected:
		return ok && s.state == wantRejected && s.reason != ""
	default:
		return ok && s.state == w.state
	}
}

// torture is one run: the agent, the model, the seeded PRNG and the step
// log that replays it.
type torture struct {
	t         *testing.T
	ctx       context.Context
	env       *crienv.Env
	a         *agent
	rng       *rand.Rand
	seed      uint64
	steps     []string
	step      int
	pods      []*modelPod
	manifests string
	base      map[string]any // envConfig's configuration
	zone      int            // nodeLabels[zoneLabel] is "z<zone>"
	near      bool           // the near-threshold eviction configuration
	memTotal  uint64
	layout    *cgroups.Layout
	highs     map[string]string // memory.high at the start, cgroup v2 only
	skip      map[string]bool
	down      bool // the agent failed to start again: no more steps
	// diverged: the pods differ from the model, which no longer
	// predicts them: no more steps. Other failed checks (a lost
	// container, marker or raise) leave the model right and the steps go on.
	diverged bool
	reported map[string]bool // raises already reported
}

// TestRestartTorture runs random, bounded sequences of operations against
// the real agent and a real private containerd, from a seeded PRNG (its
// seed is logged; NODEGUARD_TORTURE_SEED replays it,
// NODEGUARD_TORTURE_STEPS and NODEGUARD_TORTURE_BUDGET bound it,
// NODEGUARD_TORTURE_SKIP=op,op leaves operations out): API pods applied,
// updated and deleted, static manifests written, updated, removed and torn,
// a config change that invalidates running pods, a corrupted state record,
// a local-storage eviction and an oom_score_adj raise each followed by a
// SIGKILL, SIGKILLs in the middle of applies and deletes, clean restarts.
// After every restart the agent serves its API within a bound, every pod
// is in the state its source last accepted, no pod that kept its spec lost
// its container or the marker written into its volumes, and no process of
// a pod is left at oom_score_adj 1000; on cgroup v2 no memory.high is left
// armed by a stopped agent. Once everything is deleted nothing is left on
// the node: no sandbox, container, pod cgroup, mount, netns, IP lease or
// state record of a pod.
func TestRestartTorture(t *testing.T) {
	env := crienv.New(t)
	tt := newTorture(t, env)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed=%d: replay with NODEGUARD_TORTURE_SEED=%d NODEGUARD_TORTURE_STEPS=%d; steps:\n%s",
				tt.seed, tt.seed, len(tt.steps), strings.Join(tt.steps, "\n"))
		}
	})
	steps, budget := tortureSteps, tortureBudget
	if v := os.Getenv("NODEGUARD_TORTURE_STEPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			t.Fatalf("NODEGUARD_TORTURE_STEPS=%q: not a step count", v)
		}
		steps = n
	}
	if v := os.Getenv("NODEGUARD_TORTURE_BUDGET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NODEGUARD_TORTURE_BUDGET=%q: %v", v, err)
		}
		budget = d
	}
	t.Logf("seed=%d steps=%d budget=%v", tt.seed, steps, budget)

	tt.writeConfig()
	tt.up("start")
	start := time.Now()
	taken := 0
	for ; taken < steps && !tt.down && !tt.diverged; taken++ {
		if time.Since(start) > budget {
			t.Logf("budget of %v spent after %d steps: no new step", budget, taken)
			break
		}
		tt.randomStep()
	}
	tt.final()
	t.Logf("seed=%d: %d steps in %v", tt.seed, taken, time.Since(start).Round(time.Millisecond))
}

func newTorture(t *testing.T, env *crienv.Env) *torture {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("NODEGUARD_TORTURE_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("NODEGUARD_TORTURE_SEED=%q: %v", v, err)
		}
		seed = s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	t.Cleanup(cancel)
	tt := &torture{t: t, ctx: ctx, env: env, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x70727475)),
		skip: map[string]bool{}, reported: map[string]bool{}}
	for _, op := range strings.Split(os.Getenv("NODEGUARD_TORTURE_SKIP"), ",") {
		if op = strings.TrimSpace(op); op != "" {
			tt.skip[op] = true
		}
	}
	tt.a = newAgent(t, env, "")
	tt.manifests = filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(tt.manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(tt.a.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &tt.base); err != nil {
		t.Fatal(err)
	}
	if tt.memTotal, err = memTotal(); err != nil {
		t.Fatal(err)
	}
	if tt.layout, err = cgroups.Discover(); err != nil {
		t.Fatal(err)
	}
	tt.highs = tt.memoryHighs()
	for i := 0; i < 4; i++ {
		tt.pods = append(tt.pods, &modelPod{name: fmt.Sprintf("ta-%d", i)})
	}
	tt.pods = append(tt.pods, &modelPod{name: "ta-hog", hog: true})
	for i := 0; i < 3; i++ {
		name := fmt.Sprintf("ts-%d", i)
		tt.pods = append(tt.pods, &modelPod{name: name, static: true, volume: i == 0,
			file: filepath.Join(tt.manifests, name+".json")})
	}
	return tt
}

func memTotal() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read MemTotal: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("read MemTotal: not in /proc/meminfo")
}

// logStep records and prints one step.
func (tt *torture) logStep(format string, args ...any) {
	tt.t.Helper()
	s := fmt.Sprintf("step %d: ", tt.step) + fmt.Sprintf(format, args...)
	tt.steps = append(tt.steps, s)
	tt.t.Log(s)
}

// note prints what a step observed without being one.
func (tt *torture) note(format string, args ...any) {
	tt.t.Helper()
	tt.t.Logf("  step %d: "+format, append([]any{tt.step}, args...)...)
}

// writeConfig writes the agent's configuration from the model: envConfig's
// network, the manifest directory, the zone label, and the near-threshold
// eviction settings while near.
func (tt *torture) writeConfig() {
	tt.t.Helper()
	c := maps.Clone(tt.base)
	c["podManifestPath"] = tt.manifests
	c["nodeLabels"] = map[string]string{zoneLabel: fmt.Sprintf("z%d", tt.zone)}
	if tt.near {
		c["systemReserved"] = map[string]string{"memory": strconv.FormatUint(tt.memTotal-nearBudget, 10)}
		c["eviction"] = map[string]any{"evictionHard": map[string]string{"allocatableMemory.available": nearThreshold}}
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		tt.t.Fatal(err)
	}
	if err := os.WriteFile(tt.a.config, b, 0o600); err != nil {
		tt.t.Fatal(err)
	}
}

// up starts the agent; an agent that does not serve its API within
// tortureServe fails the test and ends the steps.
func (tt *torture) up(why string) bool {
	tt.t.Helper()
	if err := tt.a.launch(tortureServe); err != nil {
		tt.t.Errorf("step %d (%s): the agent does not serve its API: %v", tt.step, why, err)
		tt.down = true
		return false
	}
	return true
}

// halt ends the agent: SIGKILL, or SIGTERM and a wait (a clean stop,
// after which no memory.high may be left armed).
func (tt *torture) halt(kill bool) {
	tt.t.Helper()
	if kill {
		tt.a.kill()
		return
	}
	tt.a.stop()
	tt.checkMemoryHigh("after a clean stop")
}

// pod returns the model pod of name.
func (tt *torture) pod(name string) *modelPod {
	for _, p := range tt.pods {
		if p.name == name {
			return p
		}
	}
	tt.t.Fatalf("no model pod %s", name)
	return nil
}

// pick returns a random model pod for which ok holds, or nil.
func (tt *torture) pick(ok func(*modelPod) bool) *modelPod {
	var c []*modelPod
	for _, p := range tt.pods {
		if ok(p) {
			c = append(c, p)
		}
	}
	if len(c) == 0 {
		return nil
	}
	return c[tt.rng.IntN(len(c))]
}

// manifest is the pod's manifest of generation gen, as JSON (which the
// manifest directory reads as YAML; half of it never parses). Pods are
// Burstable (oom_score_adj 999 at most), so that 1000 is only ever a raise.
func (tt *torture) manifest(p *modelPod, gen int) []byte {
	zero := int64(0)
	c := corev1.Container{Name: "c", Image: tt.env.BusyboxImage(), Command: []string{"sleep", strconv.Itoa(36000 + gen)},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Mi"), corev1.ResourceCPU: resource.MustParse("10m")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		}}
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Annotations: map[string]string{genAnnotation: strconv.Itoa(gen)}},
		Spec:       corev1.PodSpec{TerminationGracePeriodSeconds: &zero},
	}
	if p.selector != "" {
		pod.Spec.NodeSelector = map[string]string{zoneLabel: p.selector}
	}
	switch {
	case p.hog:
		limit := resource.MustParse("1Mi")
		pod.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &limit}}}}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
		c.Command = []string{"sh", "-c", "dd if=/dev/zero of=/scratch/fill bs=1M count=4; exec sleep 36000"}
	case p.volume:
		limit := resource.MustParse("4Mi")
		pod.Spec.Volumes = []corev1.Volume{
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "fast", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &limit}}},
		}
		c.VolumeMounts = []corev1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}, {Name: "fast", MountPath: "/fast"}}
	}
	pod.Spec.Containers = []corev1.Container{c}
	// Without the fields only an API server sets (creationTimestamp,
	// status), which the agent warns about.
	b, err := json.Marshal(&pod)
	if err != nil {
		tt.t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		tt.t.Fatal(err)
	}
	delete(m, "status")
	delete(m["metadata"].(map[string]any), "creationTimestamp")
	if b, err = json.Marshal(m); err != nil {
		tt.t.Fatal(err)
	}
	return b
}

// namedIn reports whether a state record's bytes name the pod: its name
// (alone or in a namespace/name key) or one of its UIDs.
func (p *modelPod) namedIn(b []byte) bool {
	if bytes.Contains(b, []byte(`"`+p.name+`"`)) || bytes.Contains(b, []byte(`/`+p.name+`"`)) {
		return true
	}
	for uid := range p.uids {
		if bytes.Contains(b, []byte(uid)) {
			return true
		}
	}
	return false
}

// changed forgets what a new spec (or an unknown outcome) invalidates:
// the container baseline and the volume marker.
func (p *modelPod) changed() {
	p.containerID, p.marker = "", ""
}

// op is one kind of step.
type op struct {
	name   string
	weight int
	run    func(tt *torture) bool // false: not applicable now, pick another
}

var tortureOps = []op{
	{"apply", 4, (*torture).opApply},
	{"update", 3, (*torture).opUpdate},
	{"delete", 2, (*torture).opDelete},
	{"manifest", 3, (*torture).opManifest},
	{"manifest-remove", 1, (*torture).opManifestRemove},
	{"manifest-torn", 1, (*torture).opManifestTorn},
	{"config", 1, (*torture).opConfig},
	{"corrupt", 1, (*torture).opCorrupt},
	{"kill-during", 3, (*torture).opKillDuring},
	{"kill", 1, (*torture).opKill},
	{"restart", 1, (*torture).opRestart},
	{"evict", 1, (*torture).opEvict},
	{"raise", 1, (*torture).opRaise},
}

// randomStep runs one operation drawn by weight among those applicable.
func (tt *torture) randomStep() {
	tt.step++
	total := 0
	for _, o := range tortureOps {
		if !tt.skip[o.name] {
			total += o.weight
		}
	}
	for tries := 0; tries < 50; tries++ {
		n := tt.rng.IntN(total)
		for _, o := range tortureOps {
			if tt.skip[o.name] {
				continue
			}
			if n -= o.weight; n < 0 {
				if o.run(tt) {
					return
				}
				break
			}
		}
	}
	tt.logStep("nothing applicable")
}

func (tt *torture) apply(p *modelPod, gen int) error {
	p.kept = "" // applied again, the name's kept sandbox is an orphan
	_, err := tt.a.client.Apply(tt.ctx, tt.manifest(p, gen), "torture")
	return err
}

// opApply applies a new API pod, with emptyDir volumes or a nodeSelector
// on the current zone at random.
func (tt *torture) opApply() bool {
	p := tt.pick(func(p *modelPod) bool { return !p.static && !p.hog && p.want.state == wantAbsent })
	if p == nil {
		return false
	}
	p.volume = tt.rng.IntN(2) == 0
	p.selector = ""
	if tt.rng.IntN(3) == 0 {
		p.selector = fmt.Sprintf("z%d", tt.zone)
	}
	p.nextGen++
	err := tt.apply(p, p.nextGen)
	tt.logStep("apply %s gen %d (volume %v, selector %q): %v", p.name, p.nextGen, p.volume, p.selector, errOK(err))
	if err == nil {
		p.want = podWant{wantRunning, p.nextGen}
		p.changed()
	}
	return true
}

// opUpdate re-applies a running API pod: a new generation (a changed
// command), or now and then the same one, which must change nothing.
func (tt *torture) opUpdate() bool {
	p := tt.pick(func(p *modelPod) bool { return !p.static && !p.hog && p.want.state == wantRunning })
	if p == nil {
		return false
	}
	gen := p.want.gen
	if tt.rng.IntN(4) != 0 {
		p.nextGen++
		gen = p.nextGen
	}
	err := tt.apply(p, gen)
	tt.logStep("update %s gen %d -> %d: %v", p.name, p.want.gen, gen, errOK(err))
	if err == nil && gen != p.want.gen {
		p.want = podWant{wantRunning, gen}
		p.changed()
	}
	return true
}

// opDelete deletes an API pod in whatever state.
func (tt *torture) opDelete() bool {
	p := tt.pick(func(p *modelPod) bool { return !p.static && p.want.state != wantAbsent })
	if p == nil {
		return false
	}
	p.kept = ""
	err := tt.a.client.Delete(tt.ctx, "default", p.name)
	tt.logStep("delete %s (%v): %v", p.name, p.want, errOK(err))
	if err == nil {
		p.want = podWant{state: wantAbsent}
		p.mayEvict = false
		p.changed()
	}
	return true
}

// opManifest writes a static pod's manifest: a new one, or a new
// generation of an existing one (or a repair of a torn one).
func (tt *torture) opManifest() bool {
	p := tt.pick(func(p *modelPod) bool { return p.static })
	p.nextGen++
	if err := os.WriteFile(p.file, tt.manifest(p, p.nextGen), 0o644); err != nil {
		tt.t.Fatal(err)
	}
	tt.logStep("write manifest %s gen %d (was %v, torn %v)", p.name, p.nextGen, p.want, p.torn)
	p.want, p.torn = podWant{wantRunning, p.nextGen}, false
	p.changed()
	tt.settle(p)
	return true
}

// settle waits, bounded, until the agent shows the manifest change the
// model made to p: the file source reads the directory 100 ms after a
// change, so a second change within that reads as one, and the model
// would expect a state the agent never saw (gen 4 written, removed and
// torn at once: the agent saw gen 3, then a torn file). A change the
// agent does not show in time is left to the next restart's checks.
func (tt *torture) settle(p *modelPod) {
	tt.t.Helper()
	if tt.a.cmd == nil {
		return
	}
	deadline := time.Now().Add(15 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		list, err := tt.a.client.List(tt.ctx)
		if err == nil {
			var s seenPod
			ok := false
			last = "absent"
			for i := range list.Items {
				if list.Items[i].Name == p.name {
					s, ok = observe(&list.Items[i]), true
				}
			}
			if p.want.matches(s, ok) {
				return
			}
			if ok {
				last = s.String()
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	tt.note("%s did not show %v within 15 s: %s", p.name, p.want, last)
}

func (tt *torture) opManifestRemove() bool {
	p := tt.pick(func(p *modelPod) bool { return p.static && fileExists(p.file) })
	if p == nil {
		return false
	}
	if err := os.Remove(p.file); err != nil {
		tt.t.Fatal(err)
	}
	tt.logStep("remove manifest %s (was %v, torn %v)", p.name, p.want, p.torn)
	p.want, p.torn = podWant{state: wantAbsent}, false
	p.changed()
	tt.settle(p)
	return true
}

// opManifestTorn writes the first half of a static pod's next manifest: a
// torn write, which does not parse. Its pod keeps its last parsed spec (or
// stays absent), across restarts too.
func (tt *torture) opManifestTorn() bool {
	p := tt.pick(func(p *modelPod) bool { return p.static })
	b := tt.manifest(p, p.nextGen+1)
	b = b[:len(b)/2]
	if err := os.WriteFile(p.file, b, 0o644); err != nil {
		tt.t.Fatal(err)
	}
	tt.logStep("tear manifest %s (%d bytes; the pod stays %v)", p.name, len(b), p.want)
	p.torn = true
	return true
}

// opConfig moves the node to a new zone (nodeLabels), which running pods
// with a nodeSelector no longer match, and restarts the agent: they are
// rejected at start (Failed, with a reason), and the agent runs on.
func (tt *torture) opConfig() bool {
	kill := tt.rng.IntN(2) == 0
	tt.zone++
	var hit []string
	for _, p := range tt.pods {
		if p.selector != "" && p.want.state == wantRunning {
			p.want.state = wantRejected
			p.changed()
			hit = append(hit, p.name)
		}
	}
	tt.logStep("config: zone z%d (invalidates %v), restart (SIGKILL %v)", tt.zone, hit, kill)
	tt.halt(kill)
	tt.writeConfig()
	tt.restartChecks("config change")
	return true
}

// opCorrupt stops the agent, corrupts one record of its state store (a
// bit flipped in its payload, or the file truncated) and starts it again:
// the agent starts, the record is quarantined, and the pods it named may
// be in any settled state once (the record was their memory).
func (tt *torture) opCorrupt() bool {
	recs, _ := filepath.Glob(filepath.Join(tt.a.dir, StateSubdir, "*", "*.rec"))
	kill := tt.rng.IntN(2) == 0
	if len(recs) == 0 {
		tt.logStep("corrupt: the state store holds no record; restart (SIGKILL %v)", kill)
		tt.halt(kill)
		tt.restartChecks("restart")
		return true
	}
	tt.halt(kill)
	// Read the records again: a clean stop may have removed some.
	recs, _ = filepath.Glob(filepath.Join(tt.a.dir, StateSubdir, "*", "*.rec"))
	if len(recs) == 0 {
		tt.logStep("corrupt: no record left after the stop (SIGKILL %v); start", kill)
		tt.restartChecks("restart")
		return true
	}
	slices.Sort(recs)
	path := recs[tt.rng.IntN(len(recs))]
	b, err := os.ReadFile(path)
	if err != nil {
		tt.t.Fatal(err)
	}
	var named []string
	kindOf := filepath.Base(filepath.Dir(path))
	for _, p := range tt.pods {
		if p.namedIn(b) {
			if kindOf == lifecycle.KindAPIPod.Name && !p.static && p.want.state == wantRunning && p.containerID != "" && len(p.alts) == 0 && p.kept == "" {
				p.kept = p.containerID
			}
			p.anyState = true
			p.changed()
			named = append(named, p.name)
		}
	}
	bad, how := corruptRecord(tt.rng, b)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		tt.t.Fatal(err)
	}
	kind := filepath.Base(filepath.Dir(path))
	qdir := filepath.Join(tt.a.dir, StateSubdir, statestore.QuarantineDir, kind)
	before := countEntries(qdir)
	rel, _ := filepath.Rel(tt.a.dir, path)
	tt.logStep("corrupt %s (%s; names pods %v) after SIGKILL %v, start", rel, how, named, kill)
	if !tt.restartChecks("corrupt record") {
		return true
	}
	now, err := os.ReadFile(path)
	recKey, _ := url.PathUnescape(strings.TrimSuffix(filepath.Base(path), ".rec"))
	_, perr := statestore.Parse(now, statestore.Kind{Name: kind, Version: 1}, recKey)
	switch {
	case err == nil && bytes.Equal(now, bad):
		tt.note("the corrupt record %s is still in place: the agent has not read it", rel)
	case errors.Is(err, fs.ErrNotExist) && kind == lifecycle.KindStaticPods.Name && !fileExists(strings.TrimPrefix(recKey, "file:")):
		// The record of a manifest removed while the agent was down is
		// pruned unread once every source has loaded.
		tt.note("the corrupt record %s, of a removed manifest, was pruned", rel)
	case err == nil && perr == nil:
		// A manifest file that loads is the truth: its static-pods
		// record is written anew over the corrupt one, unread.
		tt.note("the corrupt record %s was written anew", rel)
	case countEntries(qdir) <= before:
		tt.t.Errorf("step %d: the corrupt record %s went from its place (%v) and nothing was quarantined in %s", tt.step, rel, err, qdir)
	default:
		tt.note("the corrupt record %s was quarantined", rel)
	}
	return true
}

// corruptRecord returns b with one bit flipped in its payload (which the
// record's CRC-32C always detects) or truncated before its closing brace.
func corruptRecord(rng *rand.Rand, b []byte) ([]byte, string) {
	out := slices.Clone(b)
	end := bytes.LastIndexByte(out, '}')
	if end <= 0 {
		return out[:len(out)/2], "truncated to half"
	}
	if rng.IntN(2) == 0 {
		n := rng.IntN(end)
		return out[:n], fmt.Sprintf("truncated to %d of %d bytes", n, len(b))
	}
	from := 0
	if i := bytes.Index(out, []byte(`"data":`)); i >= 0 && i+8 < end {
		from = i + 8
	}
	i := from + rng.IntN(end-from)
	out[i] ^= 1 << rng.IntN(7)
	return out, fmt.Sprintf("bit flipped at byte %d of %d", i, len(b))
}

func countEntries(dir string) int {
	ents, _ := os.ReadDir(dir)
	return len(ents)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// opKillDuring applies, updates or deletes an API pod and SIGKILLs the
// agent a random few milliseconds later; an operation whose answer the
// kill cut off may have been accepted or not.
func (tt *torture) opKillDuring() bool {
	p := tt.pick(func(p *modelPod) bool { return !p.static && !p.hog })
	old := p.want
	var (
		what string
		next podWant
		do   func() error
	)
	switch {
	case old.state == wantAbsent:
		p.volume = tt.rng.IntN(2) == 0
		p.selector = ""
		p.nextGen++
		next = podWant{wantRunning, p.nextGen}
		what = fmt.Sprintf("apply %s gen %d (volume %v)", p.name, next.gen, p.volume)
		do = func() error { return tt.apply(p, next.gen) }
	case old.state == wantRunning && tt.rng.IntN(2) == 0:
		p.nextGen++
		next = podWant{wantRunning, p.nextGen}
		what = fmt.Sprintf("update %s gen %d -> %d", p.name, old.gen, next.gen)
		do = func() error { return tt.apply(p, next.gen) }
	default:
		next = podWant{state: wantAbsent}
		what = fmt.Sprintf("delete %s (%v)", p.name, old)
		p.kept = ""
		do = func() error { return tt.a.client.Delete(tt.ctx, "default", p.name) }
	}
	delay := time.Duration(tt.rng.IntN(80)) * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- do() }()
	time.Sleep(delay)
	tt.a.kill()
	err := <-done
	tt.logStep("%s, SIGKILL after %v: %v", what, delay, errOK(err))
	p.changed()
	if err == nil {
		p.want = next
	} else {
		p.alts = append(p.alts, next)
	}
	tt.restartChecks("kill during " + what)
	return true
}

// opKill SIGKILLs the agent at a random moment after the previous step
// (pods may be starting or stopping) and starts it again.
func (tt *torture) opKill() bool {
	delay := time.Duration(tt.rng.IntN(1500)) * time.Millisecond
	time.Sleep(delay)
	tt.logStep("SIGKILL after %v, start", delay)
	tt.halt(true)
	tt.restartChecks("SIGKILL")
	return true
}

func (tt *torture) opRestart() bool {
	tt.logStep("clean restart (SIGTERM)")
	tt.halt(false)
	tt.restartChecks("clean restart")
	return true
}

// opEvict applies the hog, which writes past its emptyDir's sizeLimit,
// waits for the agent's local-storage eviction and SIGKILLs the agent at
// once: the eviction must hold across the restart.
func (tt *torture) opEvict() bool {
	p := tt.pod("ta-hog")
	if p.want.state != wantAbsent {
		return false
	}
	p.nextGen++
	err := tt.apply(p, p.nextGen)
	if err != nil {
		tt.logStep("apply the hog %s: %v", p.name, err)
		return true
	}
	p.want, p.mayEvict = podWant{wantRunning, p.nextGen}, true
	p.changed()
	evicted := false
	deadline := time.Now().Add(tortureEvict)
	for !evicted && time.Now().Before(deadline) {
		if got, err := tt.a.client.Get(tt.ctx, "default", p.name); err == nil && observe(got).state == wantEvicted {
			evicted = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if evicted {
		p.want, p.mayEvict = podWant{state: wantEvicted}, false
	}
	tt.logStep("apply the hog %s, evicted %v (within %v), SIGKILL at once", p.name, evicted, tortureEvict)
	tt.halt(true)
	tt.restartChecks("SIGKILL after an eviction")
	return true
}

// opRaise restarts the agent with memory near its threshold, waits until
// it raises the next victim's oom_score_adj to 1000, SIGKILLs it there and
// starts it with the usual configuration, where nothing is near: no
// process may be left raised.
func (tt *torture) opRaise() bool {
	if tt.pick(func(p *modelPod) bool { return !p.static && !p.hog && p.want.state == wantRunning }) == nil {
		return false
	}
	tt.logStep("clean restart near the memory threshold, SIGKILL once an oom_score_adj is raised, start as before")
	tt.halt(false)
	tt.near = true
	tt.writeConfig()
	tt.near = false
	if !tt.up("near the memory threshold") {
		return true
	}
	var raised map[string][]int
	for deadline := time.Now().Add(tortureRaise); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if raised = tt.raisedPods(); len(raised) > 0 {
			break
		}
	}
	tt.note("raised to %d: %v", eviction.NextVictimOOMScoreAdj, raised)
	tt.halt(true)
	tt.writeConfig()
	tt.restartChecks("SIGKILL after an oom_score_adj raise")
	return true
}

// restartChecks starts the agent and runs the checks; false when the
// agent did not come up or the pods diverged from the model (a failed
// check that leaves the model right does not stop the steps).
func (tt *torture) restartChecks(why string) bool {
	if !tt.up(why) {
		return false
	}
	tt.check(why)
	return !tt.diverged
}

// check waits until the pods match the model, then checks what a restart
// must not cost: containers, volume data, oom_score_adj.
func (tt *torture) check(why string) bool {
	tt.t.Helper()
	start := time.Now()
	seen, diff := tt.converge(tortureConverge)
	if len(diff) > 0 {
		tt.t.Errorf("step %d (%s): the pods differ from the model %v after the restart:\n  %s", tt.step, why, tortureConverge, strings.Join(diff, "\n  "))
		tt.diverged = true
		return false
	}
	ok := true
	for _, p := range tt.pods {
		s, listed := seen[p.name]
		ambiguous := len(p.alts) > 0 || p.anyState
		for _, w := range p.accepts() {
			if w.matches(s, listed) {
				p.want = w
				break
			}
		}
		if p.anyState {
			switch {
			case !listed:
				p.want = podWant{state: wantAbsent}
			default:
				p.want = podWant{state: s.state, gen: s.gen}
			}
		}
		if p.want.state == wantEvicted {
			p.mayEvict = false
		}
		p.alts, p.anyState = nil, false
		if listed {
			p.uid = s.uid
			if p.uids == nil {
				p.uids = map[string]bool{}
			}
			p.uids[s.uid] = true
		}
		if p.want.state != wantRunning {
			p.changed()
			continue
		}
		if ambiguous {
			p.changed()
		}
		if p.containerID != "" && s.containerID != p.containerID {
			tt.t.Errorf("step %d (%s): pod %s lost its container across the restart: %s -> %s", tt.step, why, p.name, p.containerID, s.containerID)
			ok = false
		}
		p.containerID = s.containerID
	}
	ok = tt.checkKept(why) && ok
	ok = tt.checkMarkers(why) && ok
	ok = tt.checkOOMScoreAdj(why) && ok
	tt.note("pods as the model wants %v after the start: %s", time.Since(start).Round(time.Millisecond), tt.summary())
	return ok
}

// checkKept checks that the container of every pod whose record was
// corrupted still runs (the agent keeps it, unlisted).
func (tt *torture) checkKept(why string) bool {
	tt.t.Helper()
	ok := true
	var rt *cri.Client
	for _, p := range tt.pods {
		if p.kept == "" {
			continue
		}
		if rt == nil {
			var err error
			if rt, err = cri.Dial(tt.ctx, tt.env.Endpoint(), 10*time.Second); err != nil {
				tt.t.Fatal(err)
			}
			defer rt.Close()
		}
		id := strings.TrimPrefix(p.kept, "containerd://")
		st, err := rt.ContainerStatus(tt.ctx, id)
		if err != nil || st.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			tt.t.Errorf("step %d (%s): pod %s, kept after its record was corrupted, lost its container %s: %v %v", tt.step, why, p.name, id, st.GetState(), err)
			p.kept = ""
			ok = false
		}
	}
	return ok
}

func (tt *torture) summary() string {
	var s []string
	for _, p := range tt.pods {
		if p.want.state != wantAbsent {
			e := p.name + " " + p.want.String()
			if p.torn {
				e += " (torn manifest)"
			}
			s = append(s, e)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// converge lists the pods until every one matches a state the model
// accepts and no other pod is listed, at most within; it returns what it
// saw last and, past the bound, the differences.
func (tt *torture) converge(within time.Duration) (map[string]seenPod, []string) {
	deadline := time.Now().Add(within)
	for {
		seen := map[string]seenPod{}
		var diff []string
		list, err := tt.a.client.List(tt.ctx)
		if err != nil {
			diff = append(diff, fmt.Sprintf("list: %v", err))
		} else {
			for i := range list.Items {
				seen[list.Items[i].Name] = observe(&list.Items[i])
			}
			for name, s := range seen {
				if !slices.ContainsFunc(tt.pods, func(p *modelPod) bool { return p.name == name }) {
					diff = append(diff, fmt.Sprintf("%s: listed, unknown to the model: %v", name, s))
				}
			}
			for _, p := range tt.pods {
				s, ok := seen[p.name]
				if p.anyState {
					if ok && s.state == wantAbsent {
						diff = append(diff, fmt.Sprintf("%s: %v, not settled", p.name, s))
					}
					continue
				}
				if !slices.ContainsFunc(p.accepts(), func(w podWant) bool { return w.matches(s, ok) }) {
					got := "absent"
					if ok {
						got = s.String()
					}
					diff = append(diff, fmt.Sprintf("%s: want %v, got %s", p.name, p.accepts(), got))
				}
			}
		}
		if len(diff) == 0 || time.Now().After(deadline) {
			return seen, diff
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkMarkers reads back the marker of every running pod with volumes
// that has one, and writes one into those that have none yet.
func (tt *torture) checkMarkers(why string) bool {
	ok := true
	for _, p := range tt.pods {
		if !p.volume || p.want.state != wantRunning {
			continue
		}
		if p.marker != "" {
			r, err := tt.a.client.Exec(tt.ctx, "default", p.name, "c", []string{"cat", "/scratch/marker", "/fast/marker"}, 10*time.Second)
			if want := p.marker + "\n" + p.marker + "\n"; err != nil || r.ExitCode != 0 || string(r.Stdout) != want {
				tt.t.Errorf("step %d (%s): pod %s lost its volume data: read %q (exit %d, stderr %q, %v), want %q",
					tt.step, why, p.name, r.Stdout, r.ExitCode, r.Stderr, err, want)
				ok = false
			}
			continue
		}
		token := fmt.Sprintf("%s-step-%d", p.name, tt.step)
		r, err := tt.a.client.Exec(tt.ctx, "default", p.name, "c",
			[]string{"sh", "-c", "echo " + token + " > /scratch/marker && echo " + token + " > /fast/marker"}, 10*time.Second)
		if err != nil || r.ExitCode != 0 {
			tt.t.Errorf("step %d (%s): write the marker into pod %s: exit %d, stderr %q, %v", tt.step, why, p.name, r.ExitCode, r.Stderr, err)
			ok = false
			continue
		}
		p.marker = token
	}
	return ok
}

// podCgroupDirs returns the pod cgroups under the agent's cgroup root in
// the memory and cgroup2 hierarchies, by pod UID (dashes, whatever the
// driver's spelling).
func (tt *torture) podCgroupDirs() map[string][]string {
	out := map[string][]string{}
	dirs, err := tt.layout.Resolve(tt.a.root)
	if err != nil {
		tt.t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.Hierarchy.V2() && !d.Hierarchy.Has("memory") {
			continue
		}
		_ = filepath.WalkDir(d.Path, func(p string, de fs.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			name := strings.TrimSuffix(de.Name(), ".slice")
			if i := strings.LastIndex(name, "-pod"); i >= 0 {
				name = name[i+1:]
			}
			if uid, ok := strings.CutPrefix(name, "pod"); ok && len(uid) >= 32 {
				uid = strings.ReplaceAll(uid, "_", "-")
				out[uid] = append(out[uid], p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return out
}

// raisedPods returns the pods (by name, or UID when the model does not
// know it) that have a process at oom_score_adj 1000, with those pids.
func (tt *torture) raisedPods() map[string][]int {
	out := map[string][]int{}
	for uid, dirs := range tt.podCgroupDirs() {
		name := uid
		for _, p := range tt.pods {
			if p.uids[uid] {
				name = p.name
			}
		}
		seen := map[int]bool{}
		for _, d := range dirs {
			_ = cgroups.Walk(d, func(dir string) error {
				b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
				if err != nil {
					return nil
				}
				for _, f := range strings.Fields(string(b)) {
					pid, err := strconv.Atoi(f)
					if err != nil || seen[pid] {
						continue
					}
					seen[pid] = true
					adj, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
					if err == nil && strings.TrimSpace(string(adj)) == strconv.Itoa(eviction.NextVictimOOMScoreAdj) {
						out[name] = append(out[name], pid)
					}
				}
				return nil
			})
		}
	}
	return out
}

// checkOOMScoreAdj: the agent runs with nothing near a threshold, so it
// raises nothing; a pod process at 1000 is a raise left by a killed one.
func (tt *torture) checkOOMScoreAdj(why string) bool {
	raised := tt.raisedPods()
	if len(raised) == 0 {
		return true
	}
	if key := fmt.Sprint(raised); !tt.reported[key] {
		tt.reported[key] = true
		tt.t.Errorf("step %d (%s): oom_score_adj %d left raised with no agent raising it: %v", tt.step, why, eviction.NextVictimOOMScoreAdj, raised)
	}
	return false
}

// memoryHighs reads memory.high of the agent's cgroup root and the
// cgroups directly beneath it that are not pods, in the cgroup2 memory
// hierarchy; nil when there is none (cgroup v1 memory).
func (tt *torture) memoryHighs() map[string]string {
	dirs, err := tt.layout.Resolve(tt.a.root)
	if err != nil {
		tt.t.Fatal(err)
	}
	for _, d := range dirs {
		if !d.Hierarchy.V2() || !d.Hierarchy.Has("memory") {
			continue
		}
		out := map[string]string{}
		read := func(dir string) {
			if b, err := os.ReadFile(filepath.Join(dir, "memory.high")); err == nil {
				out[dir] = strings.TrimSpace(string(b))
			}
		}
		// The root may not exist before the agent's first start: its
		// memory.high is then "max" once made.
		read(d.Path)
		ents, _ := os.ReadDir(d.Path)
		for _, e := range ents {
			if e.IsDir() && !strings.Contains(e.Name(), "pod") {
				read(filepath.Join(d.Path, e.Name()))
			}
		}
		return out
	}
	return nil
}

// checkMemoryHigh, with the agent stopped: memory.high of the pod roots is
// what it was before the agent, "max" for one it made.
func (tt *torture) checkMemoryHigh(when string) {
	tt.t.Helper()
	if !slices.ContainsFunc(tt.layout.Hierarchies, func(h cgroups.Hierarchy) bool { return h.V2() && h.Has("memory") }) {
		if when == "at the end" {
			tt.t.Log("memory.high not checked: the memory controller is cgroup v1 here, where the tripwire arms a usage threshold " +
				"on an eventfd (cgroup.event_control), which the kernel drops with the agent's last descriptor")
		}
		return
	}
	for dir, v := range tt.memoryHighs() {
		want, ok := tt.highs[dir]
		if !ok {
			want = "max"
		}
		if v != want {
			tt.t.Errorf("step %d (%s): memory.high of %s is %s with no agent running, was %s", tt.step, when, dir, v, want)
		}
	}
}

// final deletes everything (manifests removed, API pods deleted) and checks
// that nothing is left: no pod, sandbox, container, pod cgroup, mount,
// pod directory, netns, IP lease or veth, no state record naming a pod,
// and, after a clean stop, no memory.high armed.
func (tt *torture) final() {
	tt.step++
	tt.logStep("final: remove every manifest, delete every pod")
	if tt.down {
		tt.t.Log("the agent is down: the final checks are skipped")
		return
	}
	for _, p := range tt.pods {
		if p.static {
			if err := os.Remove(p.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
				tt.t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(tt.ctx, 3*time.Minute)
	defer cancel()
	list, err := tt.a.client.List(ctx)
	if err != nil {
		tt.t.Fatalf("final list: %v", err)
	}
	listed := map[string]bool{}
	for _, p := range list.Items {
		listed[p.Name] = true
		if !strings.HasPrefix(p.Annotations[lifecycle.AnnotationSource], "file:") {
			if err := tt.a.client.Delete(ctx, p.Namespace, p.Name); err != nil {
				tt.t.Errorf("final delete %s: %v", p.Name, err)
			}
		}
	}
	for _, p := range tt.pods {
		if !p.static && !listed[p.name] {
			// An API pod whose record was corrupted is unlisted, kept (or
			// only its stand-in, when nothing of it ran): deleted by
			// its name, as its event says.
			err := tt.a.client.Delete(ctx, "default", p.name)
			switch {
			case err == nil:
				tt.note("final: unlisted %s deleted by its name", p.name)
			case p.kept != "":
				tt.t.Errorf("final delete of the kept %s: %v", p.name, err)
			}
		}
		p.want, p.alts, p.anyState, p.mayEvict, p.kept = podWant{state: wantAbsent}, nil, false, false, ""
	}
	if _, diff := tt.converge(90 * time.Second); len(diff) > 0 {
		tt.t.Errorf("final: pods left 90 s after every manifest was removed and every pod deleted:\n  %s", strings.Join(diff, "\n  "))
	}
	rt, err := cri.Dial(ctx, tt.env.Endpoint(), 10*time.Second)
	if err != nil {
		tt.t.Fatal(err)
	}
	defer rt.Close()
	var left []string
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		left = append(tt.a.leftovers(ctx, rt), tt.podRecords()...)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		tt.t.Errorf("final: left after deleting every pod: %v", left)
	}
	tt.halt(false)
	tt.checkMemoryHigh("at the end")
}

// podRecords lists the state records that still name one of the test's
// pods (by name or last seen UID): one record per object, removed with it.
func (tt *torture) podRecords() []string {
	recs, _ := filepath.Glob(filepath.Join(tt.a.dir, StateSubdir, "*", "*.rec"))
	var out []string
	for _, r := range recs {
		b, err := os.ReadFile(r)
		if err != nil {
			continue
		}
		for _, p := range tt.pods {
			if p.namedIn(b) {
				rel, _ := filepath.Rel(tt.a.dir, r)
				out = append(out, "state record "+rel+" of "+p.name)
				break
			}
		}
	}
	return out
}

func errOK(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}
