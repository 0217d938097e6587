package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
)

// ProbeKinds are the probe handlers a probed overhead pod can carry, each
// a readiness and a liveness probe as real specs pair them:
//
//   - exec: readiness `cat /www/healthz`, liveness `true` (two runc execs
//     per period, in containerd and its shim);
//   - http: readiness httpGet /healthz, liveness tcpSocket, on busybox
//     httpd (as web servers' specs);
//   - tcp: readiness and liveness tcpSocket;
//   - grpc: readiness and liveness grpc (/bin/grpchealth of the image).
var ProbeKinds = []string{"exec", "http", "tcp", "grpc"}

// ParseProbeMix parses --probes: handler kinds separated by commas (a kind
// may repeat to weigh it), given to the probed pods in turn.
func ParseProbeMix(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var mix []string
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(ProbeKinds, k) {
			return nil, fmt.Errorf("probe kind %q: want one of %s", k, strings.Join(ProbeKinds, ", "))
		}
		mix = append(mix, k)
	}
	return mix, nil
}

// ProbeTotals is the agent's prober_probe_total summed over its series.
type ProbeTotals struct {
	All, Failed uint64
}

// ParseProbeTotals sums prober_probe_total in a Prometheus text exposition
// (the agent's /metrics): every result, and result="failed" apart.
func ParseProbeTotals(r io.Reader) (ProbeTotals, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(r)
	if err != nil {
		return ProbeTotals{}, fmt.Errorf("parse metrics: %w", err)
	}
	var t ProbeTotals
	mf, ok := mfs["prober_probe_total"]
	if !ok {
		return t, nil // no probe has run yet: the series come with the first
	}
	for _, m := range mf.GetMetric() {
		v := uint64(m.GetCounter().GetValue())
		t.All += v
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" && l.GetValue() == "failed" {
				t.Failed += v
			}
		}
	}
	return t, nil
}

// probedPrefix names the probed pods.
const probedPrefix = "probed-"

// probedManifest is a pod of kind's readiness and liveness probes, every
// period (10 s is the default and what most specs use).
func probedManifest(name, image, memory, kind string, period time.Duration) []byte {
	secs := max(int(period/time.Second), 1)
	cmd := `[sh, -c, "mkdir -p /www && echo ok > /www/healthz && exec httpd -f -p 8080 -h /www"]`
	var readiness, liveness string
	switch kind {
	case "exec":
		readiness, liveness = `exec: {command: [cat, /www/healthz]}`, `exec: {command: ["true"]}`
	case "http":
		readiness, liveness = `httpGet: {path: /healthz, port: 8080}`, `tcpSocket: {port: 8080}`
	case "tcp":
		readiness, liveness = `tcpSocket: {port: 8080}`, `tcpSocket: {port: 8080}`
	case "grpc":
		// SERVING while its own binary exists: always.
		cmd = `[/bin/grpchealth, -port, "9090", "=/bin/grpchealth"]`
		readiness, liveness = `grpc: {port: 9090}`, `grpc: {port: 9090}`
	}
	return fmt.Appendf(nil, `apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: %s
    command: %s
    resources: {limits: {memory: %s}}
    readinessProbe:
      %s
      periodSeconds: %d
    livenessProbe:
      %s
      periodSeconds: %d
`, name, overheadNamespace, image, cmd, memory, readiness, secs, liveness, secs)
}

// podReady: the pod runs and every container passes its readiness probe.
func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sampleProbed swaps the n probe-less pods for n probed ones, waits until
// all are ready, samples a window with the agent's probe totals read
// before and after, and swaps back when more counts follow (refill). The
// rows' phase is "probed".
func sampleProbed(ctx context.Context, c PodClient, groups []ProcGroup, cfg OverheadConfig, n int, refill bool) ([]OverheadRow, error) {
	progressf(cfg.Progress, "overhead: %d pods: replacing them with pods probed by %s every %s", n, strings.Join(cfg.Probes, ","), cfg.ProbePeriod)
	if err := deletePrefix(ctx, c, cfg, "idle-", n); err != nil {
		return nil, err
	}
	if _, err := parallel(ctx, n, cfg.Parallel, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%s%d", probedPrefix, i)
		kind := cfg.Probes[i%len(cfg.Probes)]
		_, err := c.Apply(ctx, probedManifest(name, cfg.Image, cfg.MemoryLimit, kind, cfg.ProbePeriod), "bench-overhead/"+name)
		return err
	}); err != nil {
		return nil, fmt.Errorf("bench overhead: apply probed pods: %w", err)
	}
	// Ready, not only running: the window sees steady probing, not the
	// first probes of containers that are still starting. The runtime
	// knows no readiness: there two periods after Running stand for it.
	ready := podReady
	if cfg.RuntimeView {
		ready = podRunning
	}
	if err := waitPods(ctx, c, cfg.Progress, probedPrefix, n, 10*time.Minute, ready); err != nil {
		return nil, err
	}
	if cfg.RuntimeView {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * cfg.ProbePeriod):
		}
	}
	progressf(cfg.Progress, "overhead: %d probed pods ready; probed window of %s", n, cfg.Window)
	before, err := cfg.ProbeTotals(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench overhead: probe totals: %w", err)
	}
	wait := cfg.profile(ctx, n, "probed")
	t0 := time.Now()
	series, err := Sample(ctx, cfg.ProcDir, groups, cfg.Window, cfg.Interval)
	elapsed := time.Since(t0)
	if err = errors.Join(err, wait()); err != nil {
		return nil, err
	}
	after, err := cfg.ProbeTotals(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench overhead: probe totals: %w", err)
	}
	rows := overheadRows(n, "probed", 0, series)
	for i := range rows {
		rows[i].Probes, rows[i].ProbesFailed = after.All-before.All, after.Failed-before.Failed
		rows[i].ProbeWindow = elapsed
	}
	progressf(cfg.Progress, "overhead: %d probed pods: %d probes (%d failed) in %s", n, after.All-before.All, after.Failed-before.Failed, elapsed.Round(time.Second))
	if !refill {
		return rows, nil
	}
	if err := deletePrefix(ctx, c, cfg, probedPrefix, n); err != nil {
		return rows, err
	}
	progressf(cfg.Progress, "overhead: %d pods: back to probe-less pods", n)
	if _, err := parallel(ctx, n, cfg.Parallel, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("idle-%d", i)
		_, err := c.Apply(ctx, overheadManifest(name, cfg.Image, cfg.MemoryLimit), "bench-overhead/"+name)
		return err
	}); err != nil {
		return rows, fmt.Errorf("bench overhead: apply: %w", err)
	}
	return rows, waitPods(ctx, c, cfg.Progress, "idle-", n, 10*time.Minute, podRunning)
}

// deletePrefix deletes pods prefix0..prefix<n-1> and waits until they are
// gone.
func deletePrefix(ctx context.Context, c PodClient, cfg OverheadConfig, prefix string, n int) error {
	if _, err := parallel(ctx, n, max(cfg.Parallel, 8), func(ctx context.Context, i int) error {
		return c.Delete(ctx, overheadNamespace, fmt.Sprintf("%s%d", prefix, i))
	}); err != nil {
		return fmt.Errorf("bench overhead: delete %s*: %w", prefix, err)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for {
		l, err := c.List(dctx)
		if err != nil {
			return fmt.Errorf("bench overhead: list pods: %w", err)
		}
		left := 0
		for _, p := range l.Items {
			if p.Namespace == overheadNamespace && strings.HasPrefix(p.Name, prefix) {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-dctx.Done():
			return fmt.Errorf("bench overhead: %d %s* pods left: %w", left, prefix, dctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ProbeRate is the probes per second of a probed row (0 for the others).
func (r OverheadRow) ProbeRate() float64 {
	if r.ProbeWindow <= 0 {
		return 0
	}
	return float64(r.Probes) / r.ProbeWindow.Seconds()
}
