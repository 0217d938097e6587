// Package promtest runs a real Prometheus server for integration tests:
// Debian's prometheus binary, listening on loopback only, storage in a temp
// dir, scraping the targets a test names every second, and a small client
// for the HTTP query API. The server is stopped (by its pid) and its files
// removed when the test ends.
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Server is a running Prometheus.
type Server struct {
	URL string
	cmd *exec.Cmd
	log *strings.Builder
}

// FreeLoopbackAddr returns 127.0.0.1:<port> with a port free right now.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start runs prometheus scraping targets (host:port on loopback) every
// second, with ruleFiles loaded, and waits until it is ready.
func Start(t testing.TB, targets []string, ruleFiles ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not installed (make deps installs Debian's package): %v", err)
	}
	for _, tg := range targets {
		if !strings.HasPrefix(tg, "127.") && !strings.HasPrefix(tg, "localhost:") {
			t.Fatalf("target %s is not on loopback", tg)
		}
	}
	dir := t.TempDir()
	var rules []string
	for _, rf := range ruleFiles {
		abs, err := filepath.Abs(rf)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, fmt.Sprintf("  - %q", abs))
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = fmt.Sprintf("%q", tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
%s
scrape_configs:
  - job_name: nodeguard
    static_configs:
      - targets: [%s]
`, strings.Join(rules, "\n"), strings.Join(quoted, ", "))
	if len(rules) == 0 {
		cfg = strings.Replace(cfg, "rule_files:\n\n", "", 1)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := FreeLoopbackAddr(t)
	logb := &strings.Builder{}
	cmd := exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--storage.tsdb.retention.time=1h",
		"--log.level=warn",
	)
	cmd.Stdout, cmd.Stderr = logb, logb
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	s := &Server{URL: "http://" + addr, cmd: cmd, log: logb}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after 30s: %v\n%s", err, logb.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Log is what prometheus printed so far.
func (s *Server) Log() string { return s.log.String() }

// Result is one query's answer.
type Result struct {
	Type   string   // vector, matrix, scalar, string
	Series []Series // for vector results
}

// Series is one labelled sample.
type Series struct {
	Labels map[string]string
	Value  string
}

// QueryError is an expression Prometheus refused.
type QueryError struct {
	Expr, Type, Msg string
}

func (e *QueryError) Error() string { return fmt.Sprintf("query %q: %s: %s", e.Expr, e.Type, e.Msg) }

// Query evaluates expr now through /api/v1/query.
func (s *Server) Query(ctx context.Context, expr string) (Result, error) {
	u := s.URL + "/api/v1/query?" + url.Values{"query": {expr}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return Result{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("query %q: %w", expr, err)
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return Result{}, fmt.Errorf("query %q: decode answer: %w", expr, err)
	}
	if body.Status != "success" {
		return Result{}, &QueryError{Expr: expr, Type: body.ErrorType, Msg: body.Error}
	}
	r := Result{Type: body.Data.ResultType}
	if r.Type == "vector" {
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(body.Data.Result, &vs); err != nil {
			return Result{}, fmt.Errorf("query %q: decode vector: %w", expr, err)
		}
		for _, v := range vs {
			val, _ := v.Value[1].(string)
			r.Series = append(r.Series, Series{Labels: v.Metric, Value: val})
		}
	}
	return r, nil
}

// Rule is one alerting or recording rule as Prometheus loaded it.
type Rule struct {
	Name   string `json:"name"`
	Query  string `json:"query"`
	Health string `json:"health"`
	Error  string `json:"lastError"`
	Type   string `json:"type"`
}

// Rules lists the loaded rules with their evaluation health.
func (s *Server) Rules(ctx context.Context) ([]Rule, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/rules", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Groups []struct {
				Rules []Rule `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	var out []Rule
	for _, g := range body.Data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}
