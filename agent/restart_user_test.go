package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/lab/crienv"
)

// userPod is an API pod as a user writes it; selector, when set, is its
// nodeSelector's disktype.
func userPod(name, image, selector string) string {
	s := `apiVersion: v1
kind: Pod
metadata: {name: ` + name + `}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: ` + image + `
    command: [sh, -c, "exec sleep 3600"]
`
	if selector != "" {
		s += "  nodeSelector: {disktype: " + selector + "}\n"
	}
	return s
}

// TestRestartAsANewUserTriesIt is issue 31's check as a user would make it,
// through the binary's own commands: pods running (API pods, one with a
// nodeSelector, and a static pod), one deleted, the node's label changed,
// the static pod's manifest torn, the agent restarted. It comes back, the
// deleted pod stays deleted, the others keep their containers, the torn
// manifest's pod keeps running, and `nodeguard pod ls` says what it
// refused and why.
func TestRestartAsANewUserTriesIt(t *testing.T) {
	env := crienv.New(t)
	a := newAgent(t, env, "")
	base, err := os.ReadFile(a.config)
	if err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	config := func(disktype string) {
		t.Helper()
		extra := "podManifestPath: " + manifests + "\nnodeLabels: {disktype: " + disktype + "}\n"
		if err := os.WriteFile(a.config, append(append([]byte{}, base...), extra...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(a.bin, append(args, "--api-socket", a.sock)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nodeguard %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	static := filepath.Join(manifests, "static-web.yaml")
	manifest := []byte(userPod("static-web", env.BusyboxImage(), ""))
	if err := os.WriteFile(static, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	config("ssd")
	a.start()
	dir := t.TempDir()
	for _, p := range []struct{ name, selector string }{{"picky", "ssd"}, {"keeper", ""}, {"doomed", ""}} {
		f := filepath.Join(dir, p.name+".yaml")
		if err := os.WriteFile(f, []byte(userPod(p.name, env.BusyboxImage(), p.selector)), 0o644); err != nil {
			t.Fatal(err)
		}
		cli("pod", "apply", "-f", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a.waitRunning(ctx, map[string]bool{"picky": true, "keeper": true, "doomed": true, "static-web": true}, time.Minute)
	before := containerIDs(ctx, t, a)
	t.Logf("before the restart:\n%s", cli("pod", "ls"))
	cli("pod", "rm", "doomed")
	a.waitRunning(ctx, map[string]bool{"picky": true, "keeper": true, "static-web": true}, time.Minute)

	// The operator relabels the node and restarts the agent; a crash
	// tore the static pod's manifest meanwhile.
	a.stop()
	config("hdd")
	if err := os.WriteFile(static, manifest[:len(manifest)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a.start()
	t.Logf("the agent served its API %v after its start", time.Since(start).Round(time.Millisecond))

	// Settled: picky Failed, the others running.
	deadline := time.Now().Add(time.Minute)
	var ls string
	for {
		ls = cli("pod", "ls")
		if strings.Contains(ls, "NodeAffinity") && strings.Count(ls, "Running") == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never settled; nodeguard pod ls:\n%s", ls)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("after the restart, nodeguard pod ls:\n%s", ls)
	lines := map[string]string{}
	for _, l := range strings.Split(ls, "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			lines[f[1]] = l // NAMESPACE NAME ...
		}
	}
	if _, ok := lines["doomed"]; ok {
		t.Errorf("the deleted pod came back: %q", lines["doomed"])
	}
	if l := lines["picky"]; !strings.Contains(l, "0/1") || !strings.Contains(l, "NodeAffinity") {
		t.Errorf("the pod whose nodeSelector no longer matches: %q, want 0/1 NodeAffinity", l)
	}
	for _, name := range []string{"keeper", "static-web"} {
		if !strings.Contains(lines[name], "Running") {
			t.Errorf("%s: %q, want Running", name, lines[name])
		}
	}
	after := containerIDs(ctx, t, a)
	for _, name := range []string{"keeper", "static-web"} {
		if after[name] != before[name] {
			t.Errorf("%s's container changed across the restart: %s, before %s", name, after[name], before[name])
		}
	}
	get := cli("pod", "get", "picky", "-o", "json")
	if !strings.Contains(get, `"phase": "Failed"`) || !strings.Contains(get, `"reason": "NodeAffinity"`) {
		t.Errorf("pod get picky does not say why it was refused:\n%s", get)
	}
}
