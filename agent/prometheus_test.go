package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/promtest"
)

// dashboardExprs returns every PromQL expression of the Grafana dashboard,
// by panel title, with the $instance variable set to match everything.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../deploy/grafana/nodeguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out[p.Title] = append(out[p.Title], strings.ReplaceAll(tg.Expr, "$instance", ".*"))
		}
	}
	return out
}

func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `json:"alert"`
				Expr  string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// TestDashboardAgainstARealPrometheus: nodeguard metrics scraped by a real
// Prometheus while a test cgroup is under real memory pressure; every
// dashboard and alert expression is evaluated through the HTTP API.
func TestDashboardAgainstARealPrometheus(t *testing.T) {
	cgtest.RequirePrivileged(t)
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Fatalf("stress-ng missing (make deps installs it): %v", err)
	}
	bin := buildBinary(t)
	sb := cgtest.New(t)
	hogCg := sb.Child(t, "hog")
	if err := hogCg.SetMemoryLimit(64 << 20); err != nil {
		t.Fatal(err)
	}

	addr := promtest.FreeLoopbackAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ng := exec.CommandContext(ctx, bin, "metrics", "--metrics-addr", addr, "--cgroup-root", sb.Rel(), "--tick", "500ms", "--full-stats-every", "2s")
	var ngLog strings.Builder
	ng.Stdout, ng.Stderr = &ngLog, &ngLog
	if err := ng.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ng.Process.Kill()
		_ = ng.Wait()
	})
	waitHTTP(t, "http://"+addr+"/healthz", 20*time.Second, &ngLog)

	prom := promtest.Start(t, []string{addr}, "../deploy/prometheus/alerts.yaml")
	for deadline := time.Now().Add(20 * time.Second); ; {
		up, err := prom.Query(ctx, `up{job="nodeguard"} == 1`)
		if err == nil && len(up.Series) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus never scraped nodeguard: %+v %v\n%s", up, err, prom.Log())
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Real memory pressure: a hog that keeps hitting the 64 MiB limit and
	// is OOM-killed and respawned by stress-ng, bounded to 12 s.
	hog := exec.Command("stress-ng", "--vm", "1", "--vm-bytes", "256M", "--vm-keep", "--timeout", "12s", "--quiet")
	if err := hogCg.Start(t, hog); err != nil {
		t.Fatal(err)
	}
	_ = hog.Wait()
	time.Sleep(3 * time.Second) // two more scrapes after the hog

	name := filepath.Base(sb.MemoryDir())
	mustData := map[string]bool{
		"Top pods by memory pressure (some)": true,
		"Top pods by memory pressure (full)": true,
		"Top pods by working set":            true,
		"OOM kills":                          true,
	}
	for title, exprs := range dashboardExprs(t) {
		found := false // some expression of the panel shows the test cgroup
		for _, expr := range exprs {
			res, err := prom.Query(ctx, expr)
			if err != nil {
				t.Errorf("panel %q: %v", title, err)
				continue
			}
			for _, s := range res.Series {
				if strings.Contains(s.Labels["id"], name) {
					found = true
				}
			}
		}
		if mustData[title] && !found {
			t.Errorf("panel %q returns no series for the test cgroup %s: %q", title, name, exprs)
		}
	}
	for alert, expr := range alertExprs(t) {
		if _, err := prom.Query(ctx, expr); err != nil {
			t.Errorf("alert %s: %v", alert, err)
		}
	}
	rules, err := prom.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != len(alertExprs(t)) {
		t.Errorf("prometheus loaded %d rules, alerts.yaml has %d", len(rules), len(alertExprs(t)))
	}
	for _, r := range rules {
		if r.Health == "err" {
			t.Errorf("rule %s: %s", r.Name, r.Error)
		}
	}

	// The OOM kills in the cgroup must show as counts, and the kernel
	// pipeline must have counted them too.
	oom, err := prom.Query(ctx, fmt.Sprintf(`container_oom_events_total{id=~".*%s/hog"}`, name))
	if err != nil || len(oom.Series) == 0 || oom.Series[0].Value == "0" {
		t.Errorf("container_oom_events_total for the hog cgroup: %+v, %v", oom.Series, err)
	}
	// Full statistics (through containerd/cgroups): the hog's CPU time.
	cpu, err := prom.Query(ctx, fmt.Sprintf(`container_cpu_usage_seconds_total{id=~".*%s/hog"} > 0`, name))
	if err != nil || len(cpu.Series) == 0 {
		t.Errorf("container_cpu_usage_seconds_total for the hog cgroup: %+v, %v", cpu.Series, err)
	}
	ev, err := prom.Query(ctx, `nodeguard_bpf_events_total{kind="oom_kill"}`)
	if err != nil || len(ev.Series) == 0 || ev.Series[0].Value == "0" {
		t.Errorf("nodeguard_bpf_events_total{kind=oom_kill}: %+v, %v", ev.Series, err)
	}
	if t.Failed() {
		t.Logf("nodeguard log:\n%s\nprometheus log:\n%s", ngLog.String(), prom.Log())
	}
}

func waitHTTP(t *testing.T, url string, within time.Duration, log fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v: %v\n%s", url, within, err, log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
