package lifecycle_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lab/corpus"
	"github.com/nodeguard/nodeguard/lab/registry"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/mounts"
)

var (
	corpusOut  = flag.String("corpus.out", "", "write the corpus table as corpus.md and corpus.csv into this directory")
	corpusOnly = flag.String("corpus.only", "", "run only the specs whose names contain this (the expectations of the others are not checked)")
)

const (
	corpusDir          = "podspec/testdata/corpus"
	corpusExpectations = "podspec/testdata/corpus/expectations.txt"
	// corpusInFlight is how many pods of the corpus exist at once: few
	// enough for a 2-core machine that others share. A spec is applied
	// as soon as a slot is free (one of the earlier pods is gone), so a
	// slow pod holds one slot, not a whole batch.
	corpusInFlight = 30
	// corpusWait bounds how long a pod may take, from its apply, to be
	// Running and Ready: the slowest readiness probe of the corpus starts
	// after 15 s and probes every 10 s. A run-once pod that serves
	// forever (restartPolicy Never) takes all of it.
	corpusWait = 75 * time.Second
	// corpusGone bounds a deleted pod's way out: its grace period (30 s
	// by default, which a shell as PID 1, deaf to SIGTERM, takes whole),
	// then the kill and the teardown.
	corpusGone = 60 * time.Second
	// corpusPoll is how often the harness reads a pod's status: Get
	// copies the pod under the Manager's lock, so thirty pods watched at
	// once are read no more often than this each.
	corpusPoll = 100 * time.Millisecond
	// corpusClaimSize is the capacity of every PersistentVolume the
	// harness writes and the request of its claim: the pod specs name
	// claims, not their size.
	corpusClaimSize = "1Gi"
	// corpusRepository is where the corpus's busybox is pushed in the
	// test registry, for the containers whose imagePullPolicy is Always.
	corpusRepository = "corpus/busybox:1"
)

// corpusNode is the node the corpus runs on: one that runs node agents and
// CNI daemons (allowPrivileged, for hostNetwork and hostPID), that pulls
// images (from the test registry, the only one it can reach), with the
// label the documentation's nodeSelector example asks the reader to give a
// node.
func corpusNode(apparmor bool) (podspec.Options, map[string]string) {
	opts := podspec.Options{AllowPrivileged: true, AppArmorEnabled: apparmor, ImagePull: true}
	labels := map[string]string{"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": "corpus", "disktype": "ssd"}
	return opts, labels
}

// TestCorpus applies every spec of the corpus to a real nodeguard (a
// Manager on a real containerd, through Apply as the local API does),
// waits for each to be Running and Ready or Succeeded, and compares what
// happened with the expectations file: a spec that is refused, or does not
// run, for anything but a control plane or a plugin fails the test unless
// its line waits for a feature being merged. It prints the table (and
// writes it with -corpus.out DIR).
func TestCorpus(t *testing.T) {
	specs, err := corpus.Load(corpusDir)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := corpus.LoadExpectations(corpusExpectations)
	if err != nil {
		t.Fatal(err)
	}
	if *corpusOnly != "" {
		specs = slices.DeleteFunc(specs, func(s corpus.Spec) bool { return !strings.Contains(s.Name, *corpusOnly) })
		for name := range exp {
			if !strings.Contains(name, *corpusOnly) {
				delete(exp, name)
			}
		}
	}
	r := newRig(t)
	hostRoot := sharedDir(t)
	reg, pullRef, credentials, pulling := corpusRegistry(t, r)
	pullsBefore := corpusManifestPulls(t, reg)
	apparmor, err := lifecycle.AppArmorEnabled(lifecycle.AppArmorEnabledPath)
	if err != nil {
		t.Fatal(err)
	}
	opts, labels := corpusNode(apparmor)
	// As nodeguard run decides: image volumes where the runtime mounts them.
	iv := cri.ImageVolumesOf(r.client.Runtime())
	opts.ImageVolumes, opts.ImageVolumeSubPath, opts.Runtime = iv.Mount, iv.SubPath, iv.Runtime
	vols, err := mounts.New(mounts.Config{RootDir: r.root, HostPathAllow: []string{hostRoot}, SourceDir: r.sources, NodeMemory: 8 << 30})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	m, err := lifecycle.New(lifecycle.Config{
		Runtime: pulling, Cgroups: r.cg, RootDir: r.root, MemoryCapacity: 8 << 30,
		BackoffInitial: 300 * time.Millisecond, BackoffMax: time.Second, Resync: 200 * time.Millisecond,
		CgroupV2: r.layout.Memory.V2(), MinOOMScoreAdj: -999,
		Volumes: vols, Network: r.network(), GCInterval: time.Hour,
		PodOptions: opts, NodeLabels: labels, ImageCredentialsFile: credentials,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	m.SourcesReady()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	began := time.Now()
	results, rewritten := runCorpus(t, m, r, vols, opts, hostRoot, pullRef, specs)
	t.Logf("corpus: %d specs done in %v, at most %d pods at once", len(specs), time.Since(began).Round(time.Second), corpusInFlight)

	var md bytes.Buffer
	if err := corpus.Markdown(&md, results); err != nil {
		t.Fatal(err)
	}
	t.Logf("corpus results:\n%s", md.String())
	if *corpusOut != "" {
		var csv bytes.Buffer
		if err := corpus.CSV(&csv, results); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"corpus.md": md.Bytes(), "corpus.csv": csv.Bytes()} {
			if err := os.WriteFile(filepath.Join(*corpusOut, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every container given the registry's image pulled it when it
	// started (the registry's access log has a 200 for the tag's
	// manifest each time): Always was honoured, not served from the
	// local copy.
	if pulls := corpusManifestPulls(t, reg) - pullsBefore; pulls < rewritten {
		t.Errorf("the registry served %s's manifest %d times, want at least once for each of the %d containers with imagePullPolicy Always that started", pullRef, pulls, rewritten)
	} else {
		t.Logf("corpus: %d containers with imagePullPolicy Always pulled %s (%d manifest requests served)", rewritten, pullRef, pulls)
	}

	failures, changes := corpus.Check(results, exp)
	for _, c := range changes {
		t.Logf("waiting for a feature: %s", c)
	}
	for _, f := range failures {
		t.Errorf("%s", f)
	}
	if t.Failed() {
		t.Logf("nodeguard's warnings and errors:\n%s", logs.String())
	}
}

// corpusPod is one pod of the corpus on its way.
type corpusPod struct {
	result *corpus.Result
	pod    *corev1.Pod
	// pulls is how many of its containers were given the registry's
	// image (corpusPullFromRegistry).
	pulls   int
	applied time.Time
}

// runCorpus applies the specs in order, each once a slot of corpusInFlight
// is free, and watches every applied pod on its own (settle, then delete
// and wait until it is gone, which frees its slot). It returns one result
// per spec, in the specs' order, and how many containers given the
// registry's image started.
func runCorpus(t *testing.T, m *lifecycle.Manager, r *rig, vols *mounts.Volumes, opts podspec.Options, hostRoot, pullRef string, specs []corpus.Spec) (_ []corpus.Result, pulled int) {
	t.Helper()
	results := make([]corpus.Result, len(specs))
	slots := make(chan struct{}, corpusInFlight)
	type done struct {
		pulled int
		err    error
	}
	var watching []chan done
	// A test that stops early (t.Fatal here) still waits for its
	// watchers, which end with its context, before the Manager stops.
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, s := range specs {
		results[i].Spec = s
		res := &results[i]
		pods, err := podspec.Parse(bytes.NewReader(s.Manifest(r.env.BusyboxImage(), hostRoot)), s.Name+".yaml")
		if err != nil {
			res.Outcome, res.Reason = corpus.RefusedOther, err.Error()
			continue
		}
		if len(pods) != 1 {
			t.Fatalf("%s: %d pods, want one", s.Name, len(pods))
		}
		p := pods[0]
		pulls := corpusPullFromRegistry(p, r.env.BusyboxImage(), pullRef)
		// The objects a user puts beside the manifest: the node's paths
		// its hostPath volumes name, its ConfigMaps and Secrets, its
		// claims and their volumes.
		corpusHostPaths(t, hostRoot, p)
		corpusSources(t, r, p)
		corpusClaims(t, r, p)
		select {
		case slots <- struct{}{}:
		case <-t.Context().Done():
			t.Fatalf("%s: no slot free: %v", s.Name, t.Context().Err())
		}
		applied, err := m.Apply(t.Context(), []*corev1.Pod{p}, lifecycle.SourceAPI)
		if err != nil {
			<-slots
			res.Refusals = corpusRefusals(p, opts, vols)
			if errors.Is(err, lifecycle.ErrRejected) || len(res.Refusals) == 0 {
				res.Refusals = nil
				res.Outcome, res.Reason = corpus.RefusedOther, err.Error()
				continue
			}
			res.Outcome = corpus.Classify(res.Refusals)
			continue
		}
		cp := corpusPod{result: res, pod: applied[0], pulls: pulls, applied: time.Now()}
		ch := make(chan done, 1)
		watching = append(watching, ch)
		wg.Go(func() {
			defer func() { <-slots }()
			n, err := watchCorpusPod(t, m, cp)
			ch <- done{n, err}
		})
	}
	var errs []error
	for _, ch := range watching {
		d := <-ch
		pulled += d.pulled
		if d.err != nil {
			errs = append(errs, d.err)
		}
	}
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	return results, pulled
}

// watchCorpusPod waits for the pod to settle and records its outcome,
// then deletes it and waits until it is gone. It runs beside the test's
// goroutine: it reports what went wrong instead of failing the test.
//
// A pod that restarts its containers always is settled once Running and
// Ready. One that does not (a Job's, or a Pod run once) may be Running and
// Ready on its way to Succeeded: it is watched until it ends, or until
// corpusWait after its apply finds it still Running and Ready (a
// restartPolicy Never pod whose command serves forever).
func watchCorpusPod(t *testing.T, m *lifecycle.Manager, cp corpusPod) (pulled int, _ error) {
	ctx, cancel := context.WithDeadline(t.Context(), cp.applied.Add(corpusWait))
	completes := cp.pod.Spec.RestartPolicy == corev1.RestartPolicyNever || cp.pod.Spec.RestartPolicy == corev1.RestartPolicyOnFailure
	var last *corev1.Pod
	err := corpusWatch(ctx, m, cp.pod.Namespace, cp.pod.Name, func(p *corev1.Pod, ok bool) bool {
		if ok {
			last = p
		}
		return ok && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !completes && runningAndReady(p))
	})
	cancel()
	settled := time.Since(cp.applied)
	switch {
	case err == nil && last.Status.Phase == corev1.PodSucceeded:
		cp.result.Outcome = corpus.Succeeded
		pulled = cp.pulls
	case runningAndReady(last) && (err == nil || completes && errors.Is(err, context.DeadlineExceeded)):
		cp.result.Outcome = corpus.Running
		pulled = cp.pulls
	default:
		cp.result.Outcome, cp.result.Reason = corpus.NotRunning, notRunningWhy(t, m, last)
	}
	deleted := time.Now()
	if err := m.Delete(t.Context(), cp.pod.Namespace, cp.pod.Name); err != nil {
		return pulled, fmt.Errorf("delete %s: %w", cp.pod.Name, err)
	}
	ctx, cancel = context.WithTimeout(t.Context(), corpusGone)
	defer cancel()
	if err := corpusWatch(ctx, m, cp.pod.Namespace, cp.pod.Name, func(_ *corev1.Pod, ok bool) bool { return !ok }); err != nil {
		return pulled, fmt.Errorf("pod %s never went away: %w", cp.pod.Name, err)
	}
	t.Logf("corpus: %s %s %v after its apply, gone %v after its deletion", cp.result.Spec.Name, cp.result.Outcome,
		settled.Round(100*time.Millisecond), time.Since(deleted).Round(100*time.Millisecond))
	return pulled, nil
}

// corpusWatch is Manager.Wait at corpusPoll.
func corpusWatch(ctx context.Context, m *lifecycle.Manager, namespace, name string, pred func(*corev1.Pod, bool) bool) error {
	tick := time.NewTicker(corpusPoll)
	defer tick.Stop()
	for {
		if p, ok := m.Get(namespace, name); pred(p, ok) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s/%s: %w", namespace, name, ctx.Err())
		case <-tick.C:
		}
	}
}

func runningAndReady(p *corev1.Pod) bool {
	if p == nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// notRunningWhy says what the pod's status shows: its phase and reason,
// and each container that is not ready with its state's reason.
func notRunningWhy(t *testing.T, m *lifecycle.Manager, p *corev1.Pod) string {
	if p == nil {
		return "no status"
	}
	parts := []string{"phase " + string(p.Status.Phase)}
	if p.Status.Reason != "" {
		parts = append(parts, p.Status.Reason+": "+p.Status.Message)
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason == "CrashLoopBackOff":
			// What the failed container last said.
			var out bytes.Buffer
			_ = m.Logs(t.Context(), p.Namespace, p.Name, lifecycle.LogOptions{Container: cs.Name, Tail: 2}, &out)
			last := ""
			if term := cs.LastTerminationState.Terminated; term != nil {
				last = fmt.Sprintf(" after %s (exit %d) %s", term.Reason, term.ExitCode, term.Message)
			}
			parts = append(parts, fmt.Sprintf("%s waiting: CrashLoopBackOff%s, its log ends %q", cs.Name, last, out.String()))
		case cs.State.Waiting != nil:
			parts = append(parts, fmt.Sprintf("%s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
			parts = append(parts, fmt.Sprintf("%s terminated: %s exit %d", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode))
		case cs.State.Running != nil && !cs.Ready:
			parts = append(parts, cs.Name+" running, not ready")
		}
	}
	return strings.Join(parts, "; ")
}

// corpusRefusals are the field errors Apply refused the pod for, from the
// same checks: podspec's and the volume manager's.
func corpusRefusals(p *corev1.Pod, opts podspec.Options, vols *mounts.Volumes) []corpus.Refusal {
	p = p.DeepCopy()
	podspec.Default(p, lifecycle.SourceAPI)
	_, errs := podspec.Validate(p, opts)
	errs = append(errs, vols.Validate(p)...)
	return corpus.Refusals(errs)
}

// corpusHostPaths makes, beneath hostRoot, what the pod's hostPath volumes
// expect of the node: a directory, a file, or a socket (/dev/log, the
// docker socket), as the type says; a directory when it says nothing.
func corpusHostPaths(t *testing.T, hostRoot string, p *corev1.Pod) {
	t.Helper()
	for _, v := range p.Spec.Volumes {
		hp := v.HostPath
		if hp == nil || !strings.HasPrefix(hp.Path, hostRoot) {
			continue
		}
		path := hp.Path
		typ := corev1.HostPathUnset
		if hp.Type != nil {
			typ = *hp.Type
		}
		if _, err := os.Lstat(path); err == nil {
			continue
		}
		var err error
		switch typ {
		case corev1.HostPathFile, corev1.HostPathFileOrCreate:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.WriteFile(path, nil, 0o644)
			}
		case corev1.HostPathSocket:
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				var l net.Listener
				if l, err = net.Listen("unix", path); err == nil {
					t.Cleanup(func() { l.Close() })
				}
			}
		default:
			err = os.MkdirAll(path, 0o755)
		}
		if err == nil && path == filepath.Join(hostRoot, "dev") {
			err = corpusDevices(path)
		}
		if err != nil {
			t.Fatalf("make hostPath %s: %v", path, err)
		}
	}
}

// corpusSources writes every ConfigMap and Secret the pod names (volumes,
// envFrom, key references) with the keys it names, as the documentation's
// examples have the reader create them first.
func corpusSources(t *testing.T, r *rig, p *corev1.Pod) {
	t.Helper()
	want := map[[2]string]map[string]bool{}
	add := func(kind, name string, keys ...string) {
		k := [2]string{kind, name}
		if want[k] == nil {
			want[k] = map[string]bool{}
		}
		for _, key := range keys {
			want[k][key] = true
		}
	}
	items := func(kind, name string, its []corev1.KeyToPath) {
		add(kind, name)
		for _, it := range its {
			add(kind, name, it.Key)
		}
	}
	for _, v := range p.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			items("configmaps", v.ConfigMap.Name, v.ConfigMap.Items)
		case v.Secret != nil:
			items("secrets", v.Secret.SecretName, v.Secret.Items)
		case v.Projected != nil:
			for _, src := range v.Projected.Sources {
				if src.ConfigMap != nil {
					items("configmaps", src.ConfigMap.Name, src.ConfigMap.Items)
				}
				if src.Secret != nil {
					items("secrets", src.Secret.Name, src.Secret.Items)
				}
			}
		}
	}
	for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, ef := range c.EnvFrom {
			if ef.ConfigMapRef != nil {
				add("configmaps", ef.ConfigMapRef.Name)
			}
			if ef.SecretRef != nil {
				add("secrets", ef.SecretRef.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				continue
			}
			if ref := e.ValueFrom.ConfigMapKeyRef; ref != nil {
				add("configmaps", ref.Name, ref.Key)
			}
			if ref := e.ValueFrom.SecretKeyRef; ref != nil {
				add("secrets", ref.Name, ref.Key)
			}
		}
	}
	keys := make([][2]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i][0]+keys[i][1] < keys[j][0]+keys[j][1] })
	for _, k := range keys {
		ns := p.Namespace
		if ns == "" {
			ns = "default"
		}
		data := map[string]string{"corpus": "the corpus harness made this object"}
		for key := range want[k] {
			data[key] = "corpus"
		}
		dir := filepath.Join(r.sources, k[0], ns, k[1])
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for key, v := range data {
			// Another spec's pod may be reading this object: what it
			// has already is left as it is, never truncated and
			// written again.
			path := filepath.Join(dir, key)
			if b, err := os.ReadFile(path); err == nil && string(b) == v {
				continue
			}
			if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// corpusRegistry starts the test registry (lab/registry: TLS and
// htpasswd, in crienv's network namespace, the only registry the node can
// reach), pushes the corpus's busybox to it, and writes the node's
// credentials file for it, as an admin of a node that pulls from a private
// registry does. It returns the image reference the containers that always
// pull are given, the credentials file (Config.ImageCredentialsFile), and
// a runtime client that pulls.
func corpusRegistry(t *testing.T, r *rig) (reg *registry.Registry, ref, credentials string, pulling *cri.Client) {
	t.Helper()
	reg = registry.New(t, r.env)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ref = reg.Host() + "/" + corpusRepository
	if err := reg.Push(ctx, r.env.Socket(), r.env.BusyboxImage(), ref); err != nil {
		t.Fatal(err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte(reg.Username() + ":" + reg.Password()))
	credentials = filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(credentials, fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, reg.Host(), auth), 0o600); err != nil {
		t.Fatal(err)
	}
	pulling, err := cri.Dial(ctx, r.env.Endpoint(), 10*time.Second, cri.WithImagePull())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pulling.Close() })
	return reg, ref, credentials, pulling
}

// corpusManifestPulls counts the requests for the corpus tag's manifest
// the registry answered 200 (its access log: one line a request, as
// `"HEAD /v2/corpus/busybox/manifests/1 HTTP/1.1" 200`): containerd
// resolves the tag at each pull.
func corpusManifestPulls(t *testing.T, reg *registry.Registry) int {
	t.Helper()
	b, err := os.ReadFile(reg.LogFile())
	if err != nil {
		t.Fatal(err)
	}
	repo, tag, _ := strings.Cut(corpusRepository, ":")
	path := "/v2/" + repo + "/manifests/" + tag + " HTTP/1.1\" 200 "
	return strings.Count(string(b), "HEAD "+path) + strings.Count(string(b), "GET "+path)
}

// corpusPullFromRegistry gives every container of p whose imagePullPolicy
// is Always the busybox of the test registry (ref) in place of the local
// one: such a container pulls on every start, and the node's only registry
// is the test one. The other containers keep the local busybox, present on
// the node, which IfNotPresent does not pull. This is the one change the
// harness makes to a spec's images after the BUSYBOX swap (README.md).
func corpusPullFromRegistry(p *corev1.Pod, local, ref string) (rewritten int) {
	rewrite := func(image *string, policy corev1.PullPolicy) {
		if policy == corev1.PullAlways && *image == local {
			*image = ref
			rewritten++
		}
	}
	for i := range p.Spec.InitContainers {
		rewrite(&p.Spec.InitContainers[i].Image, p.Spec.InitContainers[i].ImagePullPolicy)
	}
	for i := range p.Spec.Containers {
		rewrite(&p.Spec.Containers[i].Image, p.Spec.Containers[i].ImagePullPolicy)
	}
	return rewritten
}

// corpusClaims writes, for every persistentVolumeClaim volume of p, what a
// node admin provisions for it in the source directory (mounts/pv.go): the
// claim (ReadWriteOnce, corpusClaimSize, no storage class: the specs name
// claims, not their size or class) and a local PersistentVolume pre-bound
// to it (spec.claimRef, and the claim's spec.volumeName), a directory
// beneath the test's temp dir, with the node affinity a local volume has.
// A claim of an NFS volume in its source (examples-nfs-busybox) gets a
// local one too: this host's kernel has no NFS client.
func corpusClaims(t *testing.T, r *rig, p *corev1.Pod) {
	t.Helper()
	ns := p.Namespace
	if ns == "" {
		ns = "default"
	}
	for _, v := range p.Spec.Volumes {
		c := v.PersistentVolumeClaim
		if c == nil {
			continue
		}
		pvName := "corpus-" + ns + "-" + c.ClaimName
		dir := filepath.Join(r.hostDir, "persistentvolumes", pvName)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		size := resource.MustParse(corpusClaimSize)
		class := ""
		claim := corev1.PersistentVolumeClaim{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
			ObjectMeta: metav1.ObjectMeta{Name: c.ClaimName, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
				StorageClassName: &class,
				VolumeName:       pvName,
			},
		}
		pv := corev1.PersistentVolume{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolume"},
			ObjectMeta: metav1.ObjectMeta{Name: pvName},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				StorageClassName:              class,
				ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: c.ClaimName},
				PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
				NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"corpus"}}},
				}}}},
			},
		}
		for rel, obj := range map[string]any{
			filepath.Join("persistentvolumeclaims", ns, c.ClaimName+".yaml"): &claim,
			filepath.Join("persistentvolumes", pvName+".yaml"):               &pv,
		} {
			b, err := yaml.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(r.sources, rel)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sharedDir is a temporary directory bind-mounted on itself and made
// rshared: the node's root stands for the machine's, which systemd mounts
// shared, so that hostPath volumes with mountPropagation HostToContainer
// or Bidirectional can be mounted (the runtime refuses them from a
// private mount). Unmounted at the end.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	if err := unix.Mount("", dir, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		t.Fatalf("make %s rshared: %v", dir, err)
	}
	return dir
}

// corpusDevices makes, in the stand-in of the node's /dev, the devices
// every /dev has and a runtime needs in a container that mounts it (runc
// opens /dev/null to set the user up).
func corpusDevices(dir string) error {
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}} {
		if err := unix.Mknod(filepath.Join(dir, d.name), unix.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("make %s: %w", d.name, err)
		}
	}
	return nil
}
