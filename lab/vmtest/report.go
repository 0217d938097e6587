package vmtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// testEvent is one line of `go test -json` (cmd/test2json's TestEvent).
type testEvent struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// Skip is a skipped test and the reason it gave.
type Skip struct {
	Package, Test, Reason string
}

// PackageResult is what one `go test -json` run of one package reported.
// Tests and subtests are counted alike, as each reports its own result.
type PackageResult struct {
	Package string
	// Action is the package's final action: "pass", "fail", or "skip"
	// (no test files); "fail" when the stream ended without one.
	Action                  string
	Passed, Failed, Skipped int
	Skips                   []Skip
	// FailedTests names the failed tests, including those that never
	// finished (the binary crashed or the guest was killed).
	FailedTests []string
}

// fileLine matches the "file_test.go:12: " prefix of t.Log and t.Skip lines.
var fileLine = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// ReadTestJSON reads a `go test -json` stream and writes it to out as go test
// would print it without -v: a package's own lines when it ends, a test's
// own output only when it fails (or every line at once, when verbose). It returns the
// results of each package, in the order they ended.
func ReadTestJSON(r io.Reader, out io.Writer, verbose bool) ([]PackageResult, error) {
	type testState struct {
		output []string
		done   bool
	}
	type pkgState struct {
		res    PackageResult
		tests  map[string]*testState
		order  []string
		output []string // the package's own lines, printed at its end
	}
	pkgs := map[string]*pkgState{}
	var ended []PackageResult
	get := func(name string) *pkgState {
		p, ok := pkgs[name]
		if !ok {
			p = &pkgState{res: PackageResult{Package: name}, tests: map[string]*testState{}}
			pkgs[name] = p
		}
		return p
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e testEvent
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// go test prints some errors (a package that does not
			// exist) as plain text.
			fmt.Fprintln(out, string(line))
			continue
		}
		if e.Action == "build-output" {
			// Compiler errors, keyed by ImportPath; the package's
			// own "fail" event follows.
			io.WriteString(out, e.Output)
			continue
		}
		if e.Package == "" {
			continue
		}
		p := get(e.Package)
		if e.Test == "" {
			switch e.Action {
			case "output":
				if verbose {
					io.WriteString(out, e.Output)
				} else {
					p.output = append(p.output, e.Output)
				}
			case "pass", "fail", "skip":
				p.res.Action = e.Action
				// Tests that never finished failed with the binary.
				for _, name := range p.order {
					if t := p.tests[name]; !t.done {
						p.res.Failed++
						p.res.FailedTests = append(p.res.FailedTests, name+" (did not finish)")
						if !verbose {
							io.WriteString(out, strings.Join(t.output, ""))
						}
					}
				}
				io.WriteString(out, strings.Join(p.output, ""))
				ended = append(ended, p.res)
				delete(pkgs, e.Package)
			}
			continue
		}
		t, ok := p.tests[e.Test]
		if !ok {
			t = &testState{}
			p.tests[e.Test] = t
			p.order = append(p.order, e.Test)
		}
		switch e.Action {
		case "output":
			if verbose {
				io.WriteString(out, e.Output)
			}
			if !isFraming(e.Output) {
				t.output = append(t.output, e.Output)
			}
		case "pass":
			t.done = true
			p.res.Passed++
		case "skip":
			t.done = true
			p.res.Skipped++
			p.res.Skips = append(p.res.Skips, Skip{Package: e.Package, Test: e.Test, Reason: skipReason(t.output)})
		case "fail":
			t.done = true
			p.res.Failed++
			p.res.FailedTests = append(p.res.FailedTests, e.Test)
			if !verbose {
				io.WriteString(out, strings.Join(t.output, ""))
			}
		}
	}
	if err := sc.Err(); err != nil {
		return ended, fmt.Errorf("read go test -json output: %w", err)
	}
	// Packages whose stream ended without a result failed.
	names := make([]string, 0, len(pkgs))
	for n := range pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := pkgs[n]
		io.WriteString(out, strings.Join(p.output, ""))
		p.res.Action = "fail"
		ended = append(ended, p.res)
	}
	return ended, nil
}

// isFraming reports the "=== RUN", "=== PAUSE", "=== CONT" and "=== NAME"
// lines that -json's implied -v adds; go test without -v has none.
func isFraming(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// skipReason returns the message a skipped test gave: its last output line
// that is not test framing, without the file:line prefix.
func skipReason(output []string) string {
	lines := strings.Split(strings.Join(output, ""), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		return strings.TrimSpace(fileLine.ReplaceAllString(lines[i], ""))
	}
	return "no reason given"
}

// KernelSummary adds up the package results of one kernel.
type KernelSummary struct {
	Release                           string
	Packages, Passed, Failed, Skipped int
	FailedPackages                    []string
	Skips                             []Skip
}

// Add counts r.
func (s *KernelSummary) Add(r PackageResult) {
	s.Packages++
	s.Passed += r.Passed
	s.Failed += r.Failed
	s.Skipped += r.Skipped
	s.Skips = append(s.Skips, r.Skips...)
	if r.Action == "fail" {
		s.FailedPackages = append(s.FailedPackages, r.Package)
	}
}

// String returns the summary line, e.g.
// "vm 6.1.0-57-amd64: packages 4, passed 80, failed 0, skipped 1 (loader
// TestX: needs ...)", and the failed packages when there are any.
func (s *KernelSummary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "vm %s: packages %d, passed %d, failed %d, skipped %d", s.Release, s.Packages, s.Passed, s.Failed, s.Skipped)
	if len(s.Skips) > 0 {
		reasons := make([]string, len(s.Skips))
		for i, k := range s.Skips {
			reasons[i] = shortPackage(k.Package) + " " + k.Test + ": " + k.Reason
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(reasons, "; "))
	}
	if len(s.FailedPackages) > 0 {
		fmt.Fprintf(&b, "; FAILED packages: %s", strings.Join(s.FailedPackages, " "))
	}
	return b.String()
}

// shortPackage drops the module path.
func shortPackage(p string) string {
	return strings.TrimPrefix(p, "github.com/nodeguard/nodeguard/")
}
