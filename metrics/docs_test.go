package metrics_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/psi"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/metrics.md from the exporter's registry")

// metricsDoc is the generated list of every series, kept in sync by
// TestMetricsDocIsCurrent.
const metricsDoc = "../docs/metrics.md"

// registration is one source of metrics.AgentSources, which the agents
// (package agent) register through Exporter.RegisterAgent after
// metrics.New, with the commands that give it. TestDocsKnowEveryRegistration
// fails when AgentSources gains a source this list does not place, or the
// exporter a registering method RegisterAgent does not call.
type registration struct {
	// what is the AgentSources field, or "Options.<field>" for a source of
	// metrics.New that only some commands give.
	what  string
	where string
	// register registers the source on e through RegisterAgent and feeds
	// it a value for each of its series, so that a vector without children
	// still shows in Gather.
	register func(t *testing.T, e *metrics.Exporter)
}

// optional are the sources of metrics.Options that docsExporter leaves
// out unless a registration names them.
var optional = []string{"Options.Kernel", "Options.Storage"}

var registrations = []registration{
	{"Options.Kernel", "all, unless kernel.bpf is off (--no-bpf)", nil},
	{"Options.Storage", "run", nil},
	{"LogDropped", "run, guard", func(t *testing.T, e *metrics.Exporter) {
		registerAgent(t, e, metrics.AgentSources{LogDropped: func() uint64 { return 3 }})
	}},
	{"State", "run, guard", func(t *testing.T, e *metrics.Exporter) {
		store, err := statestore.Open(t.TempDir(), statestore.Options{Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(store.Close)
		k := statestore.Kind{Name: "pods", Version: 1}
		if err := store.Put(k, "a", map[string]string{}); err != nil {
			t.Fatal(err)
		}
		_ = store.Reject(k, "a", errors.New("unreadable")) // counted; the error is the one it was given
		registerAgent(t, e, metrics.AgentSources{State: store.Collector()})
	}},
	{"EventsDropped", "run, guard", func(t *testing.T, e *metrics.Exporter) {
		registerAgent(t, e, metrics.AgentSources{EventKinds: []event.Kind{event.KindOOMKill}, EventsDropped: func(event.Kind) uint64 { return 1 }})
	}},
	{"Eviction", "run, guard; not with eviction disabled", func(t *testing.T, e *metrics.Exporter) {
		v := registerAgent(t, e, metrics.AgentSources{Eviction: true}).Eviction
		v.Evicted("memory.available", false, map[string]time.Duration{metrics.StageRelease: time.Millisecond})
		v.Evicted("memory.available", true, nil)
		v.Released(time.Millisecond, 2*time.Millisecond)
		v.Staleness(time.Second)
		v.Condition("MemoryPressure", true)
		v.OOMKill("default", "web")
	}},
	{"Probes", "run", func(t *testing.T, e *metrics.Exporter) {
		registerAgent(t, e, metrics.AgentSources{Probes: func() []metrics.ProbeSeries {
			return []metrics.ProbeSeries{{ProbeType: "Liveness", Result: "successful", Container: "app", Pod: "web", Namespace: "default", Value: 1}}
		}})
	}},
	{"GC", "run", func(t *testing.T, e *metrics.Exporter) {
		v := registerAgent(t, e, metrics.AgentSources{GC: true}).GC
		v.ImageRemoved(1 << 20)
		v.ContainersRemoved(1, 1)
		v.Reclaimed("nodefs.available")
	}},
	{"Guard", "guard", func(t *testing.T, e *metrics.Exporter) {
		registerAgent(t, e, metrics.AgentSources{Guard: func() metrics.GuardCounts { return metrics.GuardCounts{Pods: 1, Kills: 1} }})
	}},
}

// registerAgent registers s on e as the agents do.
func registerAgent(t *testing.T, e *metrics.Exporter, s metrics.AgentSources) metrics.AgentMetrics {
	t.Helper()
	m, err := e.RegisterAgent(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// notRegistering are the exporter's methods that register nothing (or,
// WithRuntimeCollectors, only the client library's go_* and process_*).
var notRegistering = []string{"Registry", "ObserveEvent", "ObserveSnapshot", "ObserveWakeup", "WithRuntimeCollectors"}

// throughRegisterAgent are the exporter's registering methods that
// RegisterAgent calls, one per source of AgentSources.
var throughRegisterAgent = []string{"RegisterAgent", "LogDropped", "EvictionEventsDropped", "Eviction", "ProbeResults", "GC", "Guard"}

// family is one row of the document.
type family struct {
	name, typ, help string
	labels          []string
	where           string
}

// docsExporter is newSensingExporter over a snapshot with every pressure
// line (the golden fixture leaves some out to test their absence),
// without the optional sources but keep.
func docsExporter(keep string) *metrics.Exporter {
	snap := fixture()
	cpu := snap.Node.PSI[psi.CPU]
	cpu.Full, cpu.HasFull = psi.Line{Total: time.Second}, true
	snap.Node.PSI[psi.CPU] = cpu
	cg := &snap.Cgroups[0]
	cg.IO, cg.HasIO = psi.Stats{Some: psi.Line{Total: time.Second}, Full: psi.Line{Total: time.Second}, HasSome: true, HasFull: true}, true
	return newSensingExporterFor(snap, func(o *metrics.Options) {
		if keep != "Options.Kernel" {
			o.Kernel = nil
		}
		if keep != "Options.Storage" {
			o.Storage = nil
		}
	})
}

// gather returns the families e's registry serves, by name.
func gather(t *testing.T, e *metrics.Exporter) map[string]family {
	t.Helper()
	mfs, err := e.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		f := family{name: mf.GetName(), typ: strings.ToLower(mf.GetType().String()), help: mf.GetHelp()}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(f.labels, l.GetName()) {
					f.labels = append(f.labels, l.GetName())
				}
			}
		}
		slices.Sort(f.labels)
		out[f.name] = f
	}
	return out
}

// documentedFamilies builds the exporter as `nodeguard metrics` does (New:
// the series every command serves), then once per registration, and
// places each family where the first registration that adds it is made.
func documentedFamilies(t *testing.T) []family {
	t.Helper()
	base := gather(t, docsExporter(""))
	all := map[string]family{}
	for name, f := range base {
		f.where = "all"
		all[name] = f
	}
	for _, r := range registrations {
		e := docsExporter(r.what)
		if r.register != nil {
			r.register(t, e)
		}
		added := 0
		for name, f := range gather(t, e) {
			if _, ok := base[name]; ok {
				continue
			}
			added++
			if prev, ok := all[name]; ok && prev.where != r.where {
				t.Fatalf("%s is registered by two calls (%s, %s)", name, prev.where, r.where)
			}
			f.where = r.where
			all[name] = f
		}
		if added == 0 {
			t.Fatalf("%s added no series: the generator does not feed it", r.what)
		}
	}
	out := make([]family, 0, len(all))
	for _, f := range all {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b family) int { return strings.Compare(a.name, b.name) })
	return out
}

func writeMetricsDoc(w *bytes.Buffer, fams []family) {
	w.WriteString("# Metrics\n\n")
	w.WriteString("Generated from the exporter's registry (metrics/, and the state store's collector) by\n")
	w.WriteString("`go test ./metrics -run TestMetricsDocIsCurrent -update-docs`; do not edit.\n\n")
	w.WriteString("Every series nodeguard serves on `/metrics` (`metricsAddr`, default `127.0.0.1:9847`),\n")
	w.WriteString("with its type, its labels and its help text. **where** says which commands serve it:\n")
	w.WriteString("`all` is every command that serves metrics (`nodeguard metrics`, `run` and `guard`);\n")
	w.WriteString("`run` is `nodeguard run`, standalone and node mode alike (node mode, `run --kubeconfig`,\n")
	w.WriteString("adds no series of its own); `guard` is `nodeguard guard` beside a kubelet.\n")
	w.WriteString("Names already known to dashboards keep their owners' names: node_exporter's\n")
	w.WriteString("`node_pressure_*`, cAdvisor's `container_*`, the kubelet's `prober_probe_total`.\n")
	w.WriteString("Cgroup series carry `id` (the cgroup's path) and, once the cgroup is known to belong\n")
	w.WriteString("to a pod, `namespace`, `pod`, `uid`, `container` and `qos`.\n")
	w.WriteString("The client library's Go runtime and process series (`go_*`, `process_*`) are served\n")
	w.WriteString("too and are not listed.\n\n")
	w.WriteString("| series | type | labels | where | help |\n|---|---|---|---|---|\n")
	for _, f := range fams {
		labels := make([]string, len(f.labels))
		for i, l := range f.labels {
			labels[i] = "`" + l + "`"
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", f.name, f.typ, strings.Join(labels, ", "), f.where,
			strings.ReplaceAll(f.help, "|", `\|`))
	}
}

// TestMetricsDocIsCurrent checks that docs/metrics.md is what the
// registry renders: a series added, renamed or re-labelled changes the
// document in the same commit (run with -update-docs).
func TestMetricsDocIsCurrent(t *testing.T) {
	var b bytes.Buffer
	writeMetricsDoc(&b, documentedFamilies(t))
	if *updateDocs {
		if err := os.WriteFile(metricsDoc, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatalf("read the metrics document: %v (write it with -update-docs)", err)
	}
	if !bytes.Equal(got, b.Bytes()) {
		t.Fatalf("%s is not what the registry renders: run go test ./metrics -run TestMetricsDocIsCurrent -update-docs and review the diff", metricsDoc)
	}
}

// TestDocsKnowEveryRegistration fails when the exporter gains a method
// the generator does not place: a new registration goes through
// RegisterAgent (a source of AgentSources, its method in
// throughRegisterAgent) and is added to registrations with the commands
// that give it, or, if it registers nothing, to notRegistering.
func TestDocsKnowEveryRegistration(t *testing.T) {
	known := slices.Concat(notRegistering, throughRegisterAgent)
	typ := reflect.TypeFor[*metrics.Exporter]()
	for i := range typ.NumMethod() {
		if m := typ.Method(i).Name; !slices.Contains(known, m) {
			t.Errorf("Exporter.%s is neither called by RegisterAgent (throughRegisterAgent) nor in notRegistering: the agents register through RegisterAgent", m)
		}
	}
	sources := reflect.TypeFor[metrics.AgentSources]()
	for i := range sources.NumField() {
		f := sources.Field(i).Name
		if f == "EventKinds" { // EventsDropped's kinds
			continue
		}
		if !slices.ContainsFunc(registrations, func(r registration) bool { return r.what == f }) {
			t.Errorf("AgentSources.%s is not placed in docs_test.go's registrations", f)
		}
	}
	// Every source of Options either feeds the series of every command
	// or is optional and placed.
	always := []string{"Snapshots", "Full", "Resolver", "Now", "Version"}
	opts := reflect.TypeFor[metrics.Options]()
	for i := range opts.NumField() {
		f := opts.Field(i).Name
		if !slices.Contains(always, f) && !slices.Contains(optional, "Options."+f) {
			t.Errorf("Options.%s is not placed in docs_test.go (always given, or optional with a registration)", f)
		}
	}
	for _, o := range optional {
		if !slices.ContainsFunc(registrations, func(r registration) bool { return r.what == o }) {
			t.Errorf("%s is optional but has no registration", o)
		}
	}
}

// TestDocsListEveryNamedSeries reads every non-test Go file of the module
// for the series names given to client_golang (prometheus.NewDesc and the
// Name of a *Opts literal) and checks that the document lists each one: a
// series the generator's fixtures never produce, or one registered
// outside the exporter, is caught here.
func TestDocsListEveryNamedSeries(t *testing.T) {
	var b bytes.Buffer
	writeMetricsDoc(&b, documentedFamilies(t))
	doc := b.String()
	names := map[string]string{} // name -> where it is declared
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); n == "testdata" || n == "vendor" || (strings.HasPrefix(n, ".") && n != "..") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			var lit ast.Expr
			switch n := n.(type) {
			case *ast.CallExpr:
				if isPrometheus(n.Fun, "NewDesc") && len(n.Args) > 0 {
					lit = n.Args[0]
				}
			case *ast.CompositeLit:
				if isPrometheus(n.Type, "CounterOpts", "GaugeOpts", "HistogramOpts", "SummaryOpts") {
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
								lit = kv.Value
							}
						}
					}
				}
			}
			if bl, ok := lit.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				if s, err := strconv.Unquote(bl.Value); err == nil {
					names[s] = fset.Position(bl.Pos()).String()
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d series names in the module: the scan is broken", len(names))
	}
	for name, pos := range names {
		if !strings.Contains(doc, "| `"+name+"` |") {
			t.Errorf("%s (%s) is not in docs/metrics.md: give the generator a fixture that produces it", name, pos)
		}
	}
}

// isPrometheus says whether e is prometheus.<one of names>.
func isPrometheus(e ast.Expr, names ...string) bool {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "prometheus" && slices.Contains(names, sel.Sel.Name)
}
