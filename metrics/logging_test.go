package metrics_test

import (
	"bytes"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nodeguard/nodeguard/metrics"
)

func TestLogDroppedIsReadAtEveryScrape(t *testing.T) {
	var dropped atomic.Uint64
	e := metrics.New(metrics.Options{Snapshots: fixedSnapshots{nil}})
	e.LogDropped(dropped.Load)
	for _, n := range []uint64{0, 7} {
		dropped.Store(n)
		body := string(exposition(t, e))
		want := "# TYPE nodeguard_log_dropped_total counter\nnodeguard_log_dropped_total " + map[uint64]string{0: "0", 7: "7"}[n] + "\n"
		if !strings.Contains(body, want) {
			t.Errorf("after %d drops, want %q in\n%s", n, want, body)
		}
	}
	if promtool, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(exposition(t, e))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}
