package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/testbin"
)

func buildBinary(t *testing.T) string { return testbin.Nodeguard(t) }

func TestDoctorJSONDescribesThisHost(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := buildBinary(t)
	out, err := exec.Command(bin, "doctor", "--json").Output()
	if err != nil {
		t.Fatalf("doctor --json exited with %v (a host that runs the privileged tests can run nodeguard)\n%s", err, out)
	}
	var r doctorReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("doctor --json is not JSON: %v\n%s", err, out)
	}
	if rel, err := os.ReadFile("/proc/sys/kernel/osrelease"); err != nil || r.Kernel != strings.TrimSpace(string(rel)) {
		t.Errorf("kernel %q, /proc says %q (%v)", r.Kernel, rel, err)
	}
	if !r.BTF.Present || !r.CanRun {
		t.Errorf("btf present %v, can run %v, reasons %v", r.BTF.Present, r.CanRun, r.Reasons)
	}
	if r.Cgroup.Mode == "" || r.Cgroup.Memory == "" {
		t.Errorf("cgroup mode %q, memory controller %q", r.Cgroup.Mode, r.Cgroup.Memory)
	}
	if r.PSI.TriggerWindow == "" && r.PSI.TriggerError == "" {
		t.Error("no PSI trigger window and no error")
	}
	if _, ok := r.Capabilities["CAP_SYS_RESOURCE"]; !ok {
		t.Error("CAP_SYS_RESOURCE not reported")
	}
	names := map[string]string{}
	for _, h := range r.Hooks {
		names[h.Name] = string(h.Path)
	}
	for _, want := range []string{"mark_victim", "oom_score_adj_update", "mm_vmscan_memcg_reclaim_begin", "cgroup_mkdir", "cgroup_rmdir", "sched_process_exit"} {
		if p := names[want]; p == "" || p == "off" {
			t.Errorf("hook %s: %q", want, p)
		}
	}
}

func TestDoctorTableEndsWithAVerdict(t *testing.T) {
	cgtest.RequirePrivileged(t)
	out, _ := exec.Command(buildBinary(t), "doctor").Output()
	if !bytes.Contains(out, []byte("verdict: nodeguard can run here")) {
		t.Fatalf("no verdict line:\n%s", out)
	}
}

// TestEventsJSONFollowsAnOOMInACgroup runs `nodeguard events --json --cgroup
// REL` while a hog is OOM-killed in a child of REL made after it started.
func TestEventsJSONFollowsAnOOMInACgroup(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := buildBinary(t)
	sb := cgtest.New(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "events", "--json", "--cgroup", sb.Rel(), "--duration", "6s", "--min-reclaim", "0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan map[string]any, 4096)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"bad_line": sc.Text()}
			}
			lines <- m
		}
	}()
	time.Sleep(1500 * time.Millisecond) // let it load and attach

	child := sb.Child(t, "hog")
	if err := child.SetMemoryLimit(64 << 20); err != nil {
		t.Fatal(err)
	}
	memID, err := child.MemoryID()
	if err != nil {
		t.Fatal(err)
	}
	hog := exec.Command("stress-ng", "--vm", "1", "--vm-bytes", "256M", "--vm-keep", "--timeout", "3s", "--oomable", "--quiet")
	if _, err := exec.LookPath("stress-ng"); err != nil {
		t.Fatalf("stress-ng missing (make deps installs it): %v", err)
	}
	if err := child.Start(t, hog); err != nil {
		t.Fatal(err)
	}
	_ = hog.Wait()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("nodeguard events: %v\n%s", err, stderr.String())
	}

	kinds := map[string]int{}
	var oom map[string]any
	for m := range lines {
		if bad, ok := m["bad_line"]; ok {
			t.Fatalf("not a JSON line: %v", bad)
		}
		for _, k := range []string{"kind", "time", "pid", "cgroup_id"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("line without %q: %v", k, m)
			}
		}
		kind := m["kind"].(string)
		kinds[kind]++
		if kind == "oom_kill" && oom == nil {
			oom = m
		}
	}
	if oom == nil {
		t.Fatalf("no oom_kill line; kinds seen %v\nstderr: %s", kinds, stderr.String())
	}
	if got := uint64(oom["memcg_id"].(float64)); got != memID {
		t.Errorf("oom_kill memcg_id %d, want the hog cgroup %d", got, memID)
	}
	if got, _ := oom["cgroup_path"].(string); got != child.MemoryDir() {
		t.Errorf("oom_kill cgroup_path %q, want %q", got, child.MemoryDir())
	}
	if kinds["cgroup_mkdir"] == 0 || kinds["exit"] == 0 || kinds["reclaim"] == 0 {
		t.Errorf("want cgroup_mkdir, exit and reclaim lines too; got %v", kinds)
	}
	if !strings.Contains(stderr.String(), "ring oom") {
		t.Errorf("no ring accounting on stderr: %s", stderr.String())
	}
}

func TestEventsRejectsAMissingCgroup(t *testing.T) {
	cgtest.RequirePrivileged(t)
	out, err := exec.Command(buildBinary(t), "events", "--cgroup", "no-such-cgroup-"+strings.Repeat("x", 8), "--duration", "1s").CombinedOutput()
	if err == nil {
		t.Fatalf("events accepted a cgroup that does not exist:\n%s", out)
	}
	if !bytes.Contains(out, []byte("no-such-cgroup")) || !bytes.Contains(out, []byte("no such file")) {
		t.Errorf("error does not name the cgroup and the cause:\n%s", out)
	}
}

// The tests drive the command as its users do.
func TestMain(m *testing.M) { testbin.Main(m) }
