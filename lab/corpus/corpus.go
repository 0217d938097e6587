package corpus

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The variables a spec names where the harness substitutes the machine's
// own values: the local busybox image and the directory standing in for
// the node's root in hostPath volumes.
const (
	BusyboxVar  = "BUSYBOX"
	HostRootVar = "HOSTROOT"
)

// Spec is one pod of the corpus.
type Spec struct {
	// Name is the file's name without ".yaml".
	Name string
	// Source is the URL of the manifest the pod was made from.
	Source string
	// Production names the production workload the spec is, or is "".
	Production string
	// Swaps are what the conversion changed, one line each.
	Swaps []string
	// YAML is the manifest, with BusyboxVar and HostRootVar unsubstituted.
	YAML []byte
}

// Load reads every *.yaml file of dir, sorted by name.
func Load(dir string) ([]Spec, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, fmt.Errorf("list corpus %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("list corpus %s: no *.yaml file", dir)
	}
	sort.Strings(files)
	specs := make([]Spec, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read corpus spec: %w", err)
		}
		s := Spec{Name: strings.TrimSuffix(filepath.Base(f), ".yaml"), YAML: b}
		for _, line := range strings.Split(string(b), "\n") {
			key, val, ok := strings.Cut(strings.TrimPrefix(line, "# "), ": ")
			if !strings.HasPrefix(line, "# ") || !ok {
				continue
			}
			switch key {
			case "source":
				s.Source = val
			case "production":
				s.Production = val
			case "swap":
				s.Swaps = append(s.Swaps, val)
			}
		}
		if s.Source == "" {
			return nil, fmt.Errorf("corpus spec %s: no \"# source:\" header naming where it comes from", f)
		}
		specs = append(specs, s)
	}
	return specs, nil
}

// Manifest returns the spec's YAML with BusyboxVar and HostRootVar
// substituted.
func (s Spec) Manifest(busyboxImage, hostRoot string) []byte {
	b := bytes.ReplaceAll(s.YAML, []byte(BusyboxVar), []byte(busyboxImage))
	return bytes.ReplaceAll(b, []byte(HostRootVar), []byte(hostRoot))
}

// Outcome is what nodeguard did with a spec.
type Outcome string

const (
	// Running: admitted, Running and Ready (every readiness probe passed).
	Running Outcome = "running"
	// Succeeded: admitted and ran to completion (a Job's pod).
	Succeeded Outcome = "succeeded"
	// RefusedControlPlane: refused for a field that needs a control plane.
	RefusedControlPlane Outcome = "refused-control-plane"
	// RefusedPlugin: refused for a field that needs a plugin (volume, CSI,
	// device, DRA).
	RefusedPlugin Outcome = "refused-plugin"
	// RefusedOther: refused for anything else: what nodeguard lacks.
	RefusedOther Outcome = "refused-other"
	// NotRunning: admitted, but not Running and Ready (nor Succeeded) in
	// the time the harness waits.
	NotRunning Outcome = "not-running"
)

var outcomes = []Outcome{Running, Succeeded, RefusedControlPlane, RefusedPlugin, RefusedOther, NotRunning}

func parseOutcome(s string) (Outcome, bool) {
	for _, o := range outcomes {
		if string(o) == s {
			return o, true
		}
	}
	return "", false
}

// Ran says that the outcome is the target: the pod runs.
func (o Outcome) Ran() bool { return o == Running || o == Succeeded }

// Refusal is one field error of a refused spec.
type Refusal struct {
	// Field is the field path, e.g. "spec.volumes[0].persistentVolumeClaim".
	Field string
	// Detail is the error text after the path.
	Detail string
}

// Needs sorts a refusal by what the field needs: the RefusedControlPlane
// and RefusedPlugin reasons of podspec's refusal table name a control
// plane or a plugin, every other reason is RefusedOther.
func (r Refusal) Needs() Outcome {
	d := strings.ToLower(r.Detail)
	switch {
	case strings.Contains(d, "control plane"):
		return RefusedControlPlane
	case strings.Contains(d, "plugin"), strings.Contains(d, "csi driver"), strings.Contains(d, "dra driver"):
		return RefusedPlugin
	}
	return RefusedOther
}

// Classify returns the outcome of a spec refused with these field errors:
// a spec refused for anything a control plane provides needs one whatever
// else it names, then one that needs a plugin; only a spec whose every
// refusal is something else is RefusedOther.
func Classify(refusals []Refusal) Outcome {
	out := RefusedOther
	for _, r := range refusals {
		switch r.Needs() {
		case RefusedControlPlane:
			return RefusedControlPlane
		case RefusedPlugin:
			out = RefusedPlugin
		}
	}
	return out
}

// Result is what happened to one spec.
type Result struct {
	Spec    Spec
	Outcome Outcome
	// Refusals are the field errors of a refused spec.
	Refusals []Refusal
	// Reason says why an admitted spec is not running (the containers'
	// waiting or terminated reasons, the pod's phase), or why a spec was
	// refused when no field is to blame (nodeSelector).
	Reason string
}

// Why is the reason shown in the table: the refused fields, or Reason.
func (r Result) Why() string {
	if len(r.Refusals) == 0 {
		return r.Reason
	}
	parts := make([]string, len(r.Refusals))
	for i, f := range r.Refusals {
		parts[i] = f.Field + ": " + f.Detail
	}
	return strings.Join(parts, "; ")
}

// Expectation is the expectations file's line for one spec.
type Expectation struct {
	// Outcome is what the spec does once everything it needs from
	// nodeguard is there.
	Outcome Outcome
	// Waits, when set, names the feature (a branch being merged) the spec
	// needs for Outcome; until it lands any outcome is reported, not a
	// failure.
	Waits string
	// Note says why, when the outcome is not Running.
	Note string
	line int
}

// LoadExpectations reads the expectations file: one spec a line,
// "<spec> <outcome> [waits=<feature>] [# note]"; blank lines and lines
// starting with '#' are comments.
func LoadExpectations(path string) (map[string]Expectation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read expectations: %w", err)
	}
	defer f.Close()
	exp := map[string]Expectation{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, note, _ := strings.Cut(sc.Text(), "#")
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		if len(words) < 2 || len(words) > 3 {
			return nil, fmt.Errorf("%s:%d: want \"<spec> <outcome> [waits=<feature>]\", got %q", path, n, sc.Text())
		}
		o, ok := parseOutcome(words[1])
		if !ok {
			return nil, fmt.Errorf("%s:%d: outcome %q is none of %v", path, n, words[1], outcomes)
		}
		e := Expectation{Outcome: o, Note: strings.TrimSpace(note), line: n}
		if len(words) == 3 {
			w, ok := strings.CutPrefix(words[2], "waits=")
			if !ok || w == "" {
				return nil, fmt.Errorf("%s:%d: third word %q is not waits=<feature>", path, n, words[2])
			}
			e.Waits = w
		}
		if _, dup := exp[words[0]]; dup {
			return nil, fmt.Errorf("%s:%d: spec %s listed twice", path, n, words[0])
		}
		exp[words[0]] = e
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read expectations: %w", err)
	}
	return exp, nil
}

// Check compares results with the expectations. Failures are the specs
// that did not do what is expected of them today: one without an entry, one
// whose outcome differs from an entry that waits for nothing (a regression,
// or a change to record), one expected to be refused for something other
// than a control plane or a plugin, or not to run, without saying what it
// waits for, and an entry for a spec the corpus lacks.
// Changes are the specs waiting for a feature whose outcome now is the
// expected one (flip them: drop the waits=) or still differs (what the
// feature has yet to deliver).
func Check(results []Result, exp map[string]Expectation) (failures, changes []string) {
	seen := map[string]bool{}
	for _, r := range results {
		name := r.Spec.Name
		seen[name] = true
		e, ok := exp[name]
		switch {
		case !ok:
			failures = append(failures, fmt.Sprintf("%s: %s (%s), and the expectations file has no line for it", name, r.Outcome, r.Why()))
		case e.Waits == "" && (e.Outcome == RefusedOther || e.Outcome == NotRunning):
			// The target: every spec that needs neither a control plane
			// nor a plugin runs. Short of it, the line names what it waits
			// for.
			failures = append(failures, fmt.Sprintf("%s: expected %s, which needs neither a control plane nor a plugin: the line must say what it waits for (waits=<feature>)", name, e.Outcome))
		case e.Waits == "" && r.Outcome != e.Outcome:
			failures = append(failures, fmt.Sprintf("%s: expected %s, got %s: %s", name, e.Outcome, r.Outcome, r.Why()))
		case e.Waits != "" && r.Outcome == e.Outcome:
			changes = append(changes, fmt.Sprintf("%s: now %s as expected once %s is in: drop its waits=%s", name, r.Outcome, e.Waits, e.Waits))
		case e.Waits != "":
			changes = append(changes, fmt.Sprintf("%s: still %s, expected %s once %s is in: %s", name, r.Outcome, e.Outcome, e.Waits, r.Why()))
		}
	}
	names := make([]string, 0, len(exp))
	for n := range exp {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !seen[n] {
			failures = append(failures, fmt.Sprintf("%s: in the expectations file (line %d) but not in the corpus", n, exp[n].line))
		}
	}
	return failures, changes
}

// Refusals turns field errors into refusals.
func Refusals(errs field.ErrorList) []Refusal {
	out := make([]Refusal, len(errs))
	for i, e := range errs {
		out[i] = Refusal{Field: e.Field, Detail: e.ErrorBody()}
	}
	return out
}
