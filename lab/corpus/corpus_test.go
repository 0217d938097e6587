package corpus

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestClassifySortsARefusalByWhatItNeeds(t *testing.T) {
	cp := Refusal{Field: "spec.volumes[0].persistentVolumeClaim", Detail: "Forbidden: not supported by nodeguard: a PersistentVolumeClaim is a control plane's object"}
	plugin := Refusal{Field: "spec.volumes[1].iscsi", Detail: "Forbidden: not supported by nodeguard: the iscsi volume plugin, which nodeguard has not"}
	csi := Refusal{Field: "spec.volumes[2].csi", Detail: "Forbidden: not supported by nodeguard: CSI drivers register with a kubelet's CSI volume plugin"}
	other := Refusal{Field: "spec.containers[0].lifecycle", Detail: "Forbidden: not supported by nodeguard"}
	for _, tc := range []struct {
		name string
		in   []Refusal
		want Outcome
	}{
		{"a field that needs a control plane", []Refusal{cp}, RefusedControlPlane},
		{"a volume plugin", []Refusal{plugin}, RefusedPlugin},
		{"a CSI volume", []Refusal{csi}, RefusedPlugin},
		{"a field nodeguard lacks", []Refusal{other}, RefusedOther},
		{"a control plane wins over everything else", []Refusal{other, plugin, cp}, RefusedControlPlane},
		{"a plugin wins over what nodeguard lacks", []Refusal{other, plugin}, RefusedPlugin},
	} {
		t.Run(tc.name+" is "+string(tc.want), func(t *testing.T) {
			if got := Classify(tc.in); got != tc.want {
				t.Errorf("Classify = %s, want %s", got, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadReadsTheHeaders(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b.yaml", "# source: https://example.com/b\n# production: coredns\n# swap: container c: image x -> BUSYBOX\n# swap: volume v: hostPath /sys -> HOSTROOT/sys\napiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: c, image: BUSYBOX}]\n  volumes: [{name: v, hostPath: {path: HOSTROOT/sys}}]\n")
	writeFile(t, dir, "a.yaml", "# source: https://example.com/a\napiVersion: v1\n")
	specs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].Name != "a" || specs[1].Name != "b" {
		t.Fatalf("specs %+v, want a then b", specs)
	}
	b := specs[1]
	if b.Source != "https://example.com/b" || b.Production != "coredns" || len(b.Swaps) != 2 {
		t.Errorf("headers of b: %+v", b)
	}
	m := string(b.Manifest("registry.local/busybox:1", "/tmp/root"))
	if !strings.Contains(m, "image: registry.local/busybox:1}") || !strings.Contains(m, "path: /tmp/root/sys}") {
		t.Errorf("BUSYBOX or HOSTROOT left unsubstituted:\n%s", m)
	}

	writeFile(t, dir, "c.yaml", "apiVersion: v1\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "c.yaml: no \"# source:\" header") {
		t.Errorf("a spec without its source: %v", err)
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no *.yaml file") {
		t.Errorf("an empty corpus: %v", err)
	}
}

func TestLoadExpectations(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "ok.txt", "# comment\n\na running\nb refused-control-plane # a PVC\nc running waits=hooks15 # lifecycle hooks\n")
	exp, err := LoadExpectations(p)
	if err != nil {
		t.Fatal(err)
	}
	if exp["a"].Outcome != Running || exp["b"].Note != "a PVC" || exp["c"].Waits != "hooks15" || exp["c"].Outcome != Running {
		t.Errorf("expectations %+v", exp)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"an unknown outcome", "a runs\n", `:1: outcome "runs" is none of`},
		{"a spec listed twice", "a running\na running\n", ":2: spec a listed twice"},
		{"a third word that is not waits=", "a running hooks15\n", `:1: third word "hooks15" is not waits=<feature>`},
		{"an empty feature", "a running waits=\n", `:1: third word "waits=" is not waits=<feature>`},
		{"a line with one word", "a\n", `:1: want "<spec> <outcome> [waits=<feature>]"`},
	} {
		t.Run(tc.name+" is an error naming the line", func(t *testing.T) {
			_, err := LoadExpectations(writeFile(t, dir, "bad.txt", tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	res := func(name string, o Outcome, why string) Result {
		return Result{Spec: Spec{Name: name}, Outcome: o, Reason: why}
	}
	results := []Result{
		res("as-expected", Running, ""),
		res("regressed", NotRunning, "phase Pending; c waiting: CrashLoopBackOff"),
		res("unlisted", RefusedOther, "spec.containers[0].lifecycle: Forbidden"),
		res("landed", Running, ""),
		res("still-waiting", RefusedOther, "spec.containers[0].lifecycle: Forbidden"),
		res("excused", RefusedOther, "spec.containers[0].lifecycle: Forbidden"),
	}
	exp := map[string]Expectation{
		"as-expected":   {Outcome: Running},
		"regressed":     {Outcome: Running},
		"landed":        {Outcome: Running, Waits: "hooks15"},
		"still-waiting": {Outcome: Running, Waits: "hooks15"},
		"gone":          {Outcome: Running, line: 7},
		"excused":       {Outcome: RefusedOther},
	}
	failures, changes := Check(results, exp)
	wantFailures := []string{
		"regressed: expected running, got not-running: phase Pending; c waiting: CrashLoopBackOff",
		"unlisted: refused-other (spec.containers[0].lifecycle: Forbidden), and the expectations file has no line for it",
		"excused: expected refused-other, which needs neither a control plane nor a plugin: the line must say what it waits for (waits=<feature>)",
		"gone: in the expectations file (line 7) but not in the corpus",
	}
	wantChanges := []string{
		"landed: now running as expected once hooks15 is in: drop its waits=hooks15",
		"still-waiting: still refused-other, expected running once hooks15 is in: spec.containers[0].lifecycle: Forbidden",
	}
	if strings.Join(failures, "\n") != strings.Join(wantFailures, "\n") {
		t.Errorf("failures\n%s\nwant\n%s", strings.Join(failures, "\n"), strings.Join(wantFailures, "\n"))
	}
	if strings.Join(changes, "\n") != strings.Join(wantChanges, "\n") {
		t.Errorf("changes\n%s\nwant\n%s", strings.Join(changes, "\n"), strings.Join(wantChanges, "\n"))
	}
}

func TestTables(t *testing.T) {
	results := []Result{
		{Spec: Spec{Name: "web", Source: "https://example.com/web", Production: "nginx"}, Outcome: Running},
		{Spec: Spec{Name: "job", Source: "https://example.com/job"}, Outcome: Succeeded},
		{Spec: Spec{Name: "pvc", Source: "https://example.com/pvc"}, Outcome: RefusedControlPlane,
			Refusals: []Refusal{{Field: "spec.volumes[0].persistentVolumeClaim", Detail: "Forbidden: a | b"}}},
		{Spec: Spec{Name: "hooks", Source: "https://example.com/hooks", Production: "ingress"}, Outcome: RefusedOther,
			Refusals: []Refusal{{Field: "spec.containers[0].lifecycle", Detail: "Forbidden"}, {Field: "spec.containers[1].lifecycle", Detail: "Forbidden"},
				{Field: "spec.volumes[0]", Detail: `Unsupported value: ""`}}},
		{Spec: Spec{Name: "slow", Source: "https://example.com/slow"}, Outcome: NotRunning, Reason: "phase Pending"},
	}
	c := Count(results)
	if c.Specs != 5 || c.Accepted != 3 || c.Ran != 2 || c.NotRunning != 1 || c.RefusedControlPlane != 1 || c.RefusedOther != 1 || c.Production != 2 || c.ProductionRan != 1 {
		t.Errorf("counts %+v", c)
	}
	if c.ByField["lifecycle"] != 1 || c.ByField["persistentVolumeClaim"] != 1 {
		t.Errorf("a field counts once per spec naming it: %v", c.ByField)
	}
	var md bytes.Buffer
	if err := Markdown(&md, results); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"5 specs: 3 accepted, 2 running (or succeeded), 1 accepted but not running; refused: 1 need a control plane, 0 need a plugin, 1 other; production workloads running: 1 of 2.",
		"Refused fields, by the number of specs naming them: lifecycle 1, persistentVolumeClaim 1.",
		"| [pvc](https://example.com/pvc) |  | refused-control-plane | spec.volumes[0].persistentVolumeClaim: Forbidden: a \\| b |",
		"| [slow](https://example.com/slow) |  | not-running | phase Pending |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md.String())
		}
	}
	var csv bytes.Buffer
	if err := CSV(&csv, results); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 6 || lines[0] != "spec,source,production,outcome,why" ||
		lines[4] != `hooks,https://example.com/hooks,ingress,refused-other,"spec.containers[0].lifecycle: Forbidden; spec.containers[1].lifecycle: Forbidden; spec.volumes[0]: Unsupported value: """""` {
		t.Errorf("CSV:\n%s", csv.String())
	}
}
