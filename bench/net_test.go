package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func TestRunNetMeasuresAndCleansUp(t *testing.T) {
	cgtest.RequirePrivileged(t)
	_, err := os.Stat("/usr/lib/cni/bridge")
	cgtest.Need(t, err == nil, "needs the CNI plugins in /usr/lib/cni (apt-get install containernetworking-plugins)")
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "nodeguard-bench-net-*"))
	out := t.TempDir()
	rep, err := RunNet(t.Context(), NetConfig{Pods: 4, Parallel: 2, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Add.N != 4 || rep.Del.N != 4 || rep.Verified != 4 || rep.Add.Min <= 0 || rep.Del.Min <= 0 || rep.Add.Max > time.Minute {
		t.Errorf("report: %+v", rep)
	}
	if rep.Subnet.String() != "10.88.0.0/29" {
		t.Errorf("subnet for 4 pods = %s, want 10.88.0.0/29", rep.Subnet)
	}
	for _, f := range []string{"net.csv", "net-add.png", "net-del.png"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "nodeguard-bench-net-*"))
	if len(after) != len(before) {
		t.Errorf("RunNet left its directory: before %v, after %v", before, after)
	}
}
