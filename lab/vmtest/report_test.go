package vmtest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestReadTestJSON(t *testing.T) {
	tests := []struct {
		fixture string
		verbose bool
		want    []PackageResult
		// printed must appear in the output, in order; hidden must not.
		printed, hidden []string
	}{
		{
			fixture: "go-test-fail.json",
			want: []PackageResult{{
				Package: "example.com/fix/example", Action: "fail", Passed: 2, Failed: 1, Skipped: 2,
				Skips: []Skip{
					{"example.com/fix/example", "TestPasses/a_subtest_skips", "needs cgroup mode v2; this lane is hybrid"},
					{"example.com/fix/example", "TestSkips", "needs root, running as euid 1000 (set NODEGUARD_REQUIRE_PRIVILEGED=1 to fail instead)"},
				},
				FailedTests: []string{"TestFails"},
			}},
			printed: []string{"some output", "want 1, got 2", "--- FAIL: TestFails", "FAIL\texample.com/fix/example"},
			hidden:  []string{"=== RUN", "fine", "looking", "--- SKIP"},
		},
		{
			fixture: "go-test-fail.json",
			verbose: true,
			want: []PackageResult{{
				Package: "example.com/fix/example", Action: "fail", Passed: 2, Failed: 1, Skipped: 2,
				Skips: []Skip{
					{"example.com/fix/example", "TestPasses/a_subtest_skips", "needs cgroup mode v2; this lane is hybrid"},
					{"example.com/fix/example", "TestSkips", "needs root, running as euid 1000 (set NODEGUARD_REQUIRE_PRIVILEGED=1 to fail instead)"},
				},
				FailedTests: []string{"TestFails"},
			}},
			printed: []string{"=== RUN   TestPasses", "fine", "--- FAIL: TestFails", "--- SKIP: TestSkips"},
		},
		{
			fixture: "go-test-crash.json",
			want: []PackageResult{{
				Package: "example.com/fix/example", Action: "fail", Passed: 1, Failed: 1,
				FailedTests: []string{"TestDies (did not finish)"},
			}},
			printed: []string{"vmrun: guest killed after 4m0s", "FAIL\texample.com/fix/example"},
		},
		{
			fixture: "go-test-build.json",
			want: []PackageResult{
				{Package: "example.com/fix/broken", Action: "fail"},
				{Package: "example.com/fix/notests", Action: "skip"},
			},
			printed: []string{"undefined: testing", "[build failed]", "[no test files]"},
		},
	}
	for _, tt := range tests {
		name := tt.fixture
		if tt.verbose {
			name += " verbose"
		}
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tt.fixture))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out strings.Builder
			got, err := ReadTestJSON(f, &out, tt.verbose)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("results\n got %+v\nwant %+v", got, tt.want)
			}
			rest := out.String()
			for _, p := range tt.printed {
				i := strings.Index(rest, p)
				if i < 0 {
					t.Errorf("output lacks %q (in order):\n%s", p, out.String())
					break
				}
				rest = rest[i+len(p):]
			}
			for _, h := range tt.hidden {
				if strings.Contains(out.String(), h) {
					t.Errorf("output shows %q:\n%s", h, out.String())
				}
			}
		})
	}
}

func TestReadTestJSONWithoutAnEnd(t *testing.T) {
	in := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
go: some plain error
`
	var out strings.Builder
	got, err := ReadTestJSON(strings.NewReader(in), &out, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []PackageResult{{Package: "p", Action: "fail"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if !strings.Contains(out.String(), "go: some plain error") {
		t.Errorf("plain lines are not printed: %q", out.String())
	}
}

func TestKernelSummaryString(t *testing.T) {
	s := &KernelSummary{Release: "6.1.0-57-amd64"}
	s.Add(PackageResult{Package: "github.com/nodeguard/nodeguard/loader", Action: "pass", Passed: 5})
	s.Add(PackageResult{Package: "github.com/nodeguard/nodeguard/internal/host", Action: "fail", Passed: 20, Failed: 1, Skipped: 1,
		Skips: []Skip{{"github.com/nodeguard/nodeguard/internal/host", "TestPSICgroup/v1", "the memory controller is on cgroup2 here"}}})
	want := "vm 6.1.0-57-amd64: packages 2, passed 25, failed 1, skipped 1 (internal/host TestPSICgroup/v1: the memory controller is on cgroup2 here); FAILED packages: github.com/nodeguard/nodeguard/internal/host"
	if got := s.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	clean := &KernelSummary{Release: "6.12.117+deb12-amd64", Packages: 4, Passed: 170}
	if got, want := clean.String(), "vm 6.12.117+deb12-amd64: packages 4, passed 170, failed 0, skipped 0"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
