package nodeguard_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/nodeguard/nodeguard"

// floor is a storey of the house (docs/architecture.md). A package may
// import packages of its own floor or below, never above: data flows up
// from the kernel to the decision and out through the act rooms, and a
// leaf that imported a room above it would drag that room into every
// package beneath.
type floor int

const (
	// ground: leaves that know no pods, events or decisions.
	ground floor = iota
	// cgroupsFloor: the cgroup hierarchies, their statistics and the
	// kubelet's pod hierarchy.
	cgroupsFloor
	// sense: kernel events, PSI, snapshots and the tripwire.
	sense
	// vocabulary: what deciders and actors share (the eviction types),
	// beneath both so that neither drags the other in.
	vocabulary
	// decide: the policy and manager, the local-storage decision, and the
	// export of what was sensed and decided.
	decide
	// act: pods, their network and volumes, node mode's objects, guard mode.
	act
	// assemble: the configuration and the assembly of the agent.
	assemble
	// top: the commands and the benchmark harness.
	top
	// lab: the test lab and test helpers. Product code (every floor but
	// top's benchmark harness) never imports it.
	lab
)

var floorNames = map[floor]string{ground: "ground", cgroupsFloor: "cgroups", sense: "sense", vocabulary: "vocabulary", decide: "decide",
	act: "act", assemble: "assemble", top: "top", lab: "lab"}

// floors places every package by its path under the module; the longest
// prefix wins. A package that matches none fails the test: a new package
// must be given a floor here.
var floors = map[string]floor{
	"internal/logging":    ground,
	"internal/host":       ground,
	"internal/group":      ground,
	"internal/flock":      ground,
	"internal/syncbuf":    ground,
	"internal/statestore": ground,
	"internal/strictyaml": ground,
	"qos":                 ground,
	"psi":                 ground,
	"oomadj":              ground,
	"loader/event":        ground,

	"cgroups":        cgroupsFloor,
	"cgroups/cgtest": lab,

	"loader":            sense,
	"pressure":          sense,
	"pressure/tripwire": sense,

	"evictionapi": vocabulary,
	"eviction":    decide,
	"metrics":     decide,

	"lifecycle":             act,
	"lifecycle/api/apitest": lab,
	"netplumb":              act,
	"mounts":                act,
	"kubenode":              act,
	"guard":                 act,
	"deploy":                act,
	"config":                assemble,
	"agent":                 assemble,
	"cmd":                   top,
	"bench":                 top,
	"lab":                   lab,
	"lab/hog":               lab,
}

// labImporters may import the test lab besides the lab itself: the
// benchmark harness drives the private runtime and the test images.
var labImporters = []string{"bench"}

// knownLabImports are product packages that import the test lab today,
// each with why; the list only shrinks.
var knownLabImports = map[string]string{
	// run --private-runtime starts the demo's private containerd and
	// builds its images (lab/crienv); the demo is to start it itself.
	"agent -> lab/crienv": "the demo's private runtime",
	// nodeguard bench drives the private runtime and builds the test
	// images: through it the lab's crienv, images and hog are linked into
	// the shipped binary. A bench binary of its own would end this.
	"cmd/nodeguard -> bench": "the bench subcommand",
}

func isLabImporter(rel string) bool {
	return slices.ContainsFunc(labImporters, func(l string) bool { return rel == l || strings.HasPrefix(rel, l+"/") })
}

func floorOf(rel string) (floor, bool) {
	best, f, ok := -1, floor(0), false
	for prefix, fl := range floors {
		if (rel == prefix || strings.HasPrefix(rel, prefix+"/")) && len(prefix) > best {
			best, f, ok = len(prefix), fl, true
		}
	}
	return f, ok
}

// pkg is one directory's Go package: its non-test imports (of every
// build tag: a lane's files count too) and whether it has a package doc.
type pkg struct {
	rel     string
	imports map[string]bool
	doc     bool
	files   int
}

func loadPackages(t *testing.T) map[string]*pkg {
	t.Helper()
	pkgs := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			atRoot := filepath.Dir(path) == "."
			if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
				(atRoot && (name == "out" || name == "bin" || name == "vendor"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(filepath.Dir(path))
		if rel == "." {
			return nil // this test's own package
		}
		p := pkgs[rel]
		if p == nil {
			p = &pkg{rel: rel, imports: map[string]bool{}}
			pkgs[rel] = p
		}
		if strings.HasSuffix(path, "_test.go") {
			return nil // tests may use the lab and anything else
		}
		p.files++
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name) {
			p.doc = true
		}
		if f.Name.Name == "main" && f.Doc != nil {
			p.doc = true // a command's doc says what it does, not "Package main"
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if path == module || strings.HasPrefix(path, module+"/") {
				p.imports[strings.TrimPrefix(strings.TrimPrefix(path, module), "/")] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel, p := range pkgs {
		if p.files == 0 {
			delete(pkgs, rel) // tests only
		}
	}
	return pkgs
}

// TestLayering fails when a package imports one on a floor above its own,
// when product code imports the test lab, or when a package does not say
// in a doc comment what it owns.
func TestLayering(t *testing.T) {
	if _, err := os.Stat("go.mod"); err != nil {
		t.Fatalf("run from the module root: %v", err)
	}
	pkgs := loadPackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages: the walk is wrong", len(pkgs))
	}
	var names []string
	for rel := range pkgs {
		names = append(names, rel)
	}
	slices.Sort(names)
	seenKnown := map[string]bool{}
	for _, rel := range names {
		p := pkgs[rel]
		f, ok := floorOf(rel)
		if !ok {
			t.Errorf("%s: no floor; give it one in layering_test.go's floors", rel)
			continue
		}
		if !p.doc {
			t.Errorf("%s: no package doc comment saying what it owns", rel)
		}
		var imports []string
		for im := range p.imports {
			imports = append(imports, im)
		}
		slices.Sort(imports)
		for _, im := range imports {
			g, ok := floorOf(im)
			if !ok {
				continue // reported as a package of its own
			}
			edge := rel + " -> " + im
			importsLab := g == lab || (f != lab && !isLabImporter(rel) && isLabImporter(im))
			switch {
			case importsLab && f != lab:
				if _, known := knownLabImports[edge]; known {
					seenKnown[edge] = true
					continue
				}
				if !isLabImporter(rel) {
					t.Errorf("%s: product code imports the test lab (directly or through the benchmark harness)", edge)
				}
			case f == lab:
				// The lab may use any product package.
			case g > f:
				t.Errorf("%s: the %s floor imports the %s floor above it", edge, floorNames[f], floorNames[g])
			}
		}
	}
	for prefix := range floors {
		if !slices.ContainsFunc(names, func(rel string) bool { return rel == prefix || strings.HasPrefix(rel, prefix+"/") }) {
			t.Errorf("floors lists %q, which names no package: remove it", prefix)
		}
	}
	for edge, why := range knownLabImports {
		if !seenKnown[edge] {
			t.Errorf("knownLabImports lists %q (%s), which no longer happens: remove it", edge, why)
		}
	}
}
