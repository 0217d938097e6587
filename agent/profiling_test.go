package agent

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/lab/promtest"
)

// TestProfilingIsServedOnlyWhenEnabled: /debug/pprof/ beside /metrics with
// --enable-profiling, a 404 without it; a CPU profile of a real agent
// comes back as a gzipped protobuf.
func TestProfilingIsServedOnlyWhenEnabled(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := buildBinary(t)
	sb := cgtest.New(t)
	for _, on := range []bool{false, true} {
		addr := promtest.FreeLoopbackAddr(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		args := []string{"metrics", "--metrics-addr", addr, "--cgroup-root", sb.Rel(), "--no-bpf"}
		if on {
			args = append(args, "--enable-profiling")
		}
		ng := exec.CommandContext(ctx, bin, args...)
		logb := &syncbuf.Buffer{}
		ng.Stdout, ng.Stderr = logb, logb
		if err := ng.Start(); err != nil {
			cancel()
			t.Fatal(err)
		}
		waitHTTP(t, "http://"+addr+"/healthz", 20*time.Second, logb)
		get := func(path string) (int, []byte) {
			resp, err := http.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		}
		code, body := get("/debug/pprof/cmdline")
		switch {
		case !on && code != http.StatusNotFound:
			t.Errorf("without --enable-profiling: /debug/pprof/cmdline answered %d, want 404", code)
		case on && (code != http.StatusOK || !strings.Contains(string(body), "--enable-profiling")):
			t.Errorf("with --enable-profiling: /debug/pprof/cmdline answered %d %q", code, body)
		case on:
			code, body = get("/debug/pprof/profile?seconds=1")
			// A CPU profile is a gzipped protobuf: the gzip magic.
			if code != http.StatusOK || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
				t.Errorf("CPU profile: status %d, %d bytes, not gzip", code, len(body))
			}
			t.Logf("1 s CPU profile of an idle agent: %d bytes", len(body))
		}
		_ = ng.Process.Kill()
		_ = ng.Wait()
		cancel()
	}
}
