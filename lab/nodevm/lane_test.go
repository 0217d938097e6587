package nodevm

import (
	"strings"
	"testing"
)

// checkStream is go test -json of a run with two passing checks, one
// skipped, one failed and one that never finished, beneath one parent.
const checkStream = `{"Action":"output","Package":"p","Output":"time=... level=INFO msg=\"booting the node\"\n"}
{"Action":"run","Package":"p","Test":"TestNode"}
{"Action":"output","Package":"p","Test":"TestNode","Output":"=== RUN   TestNode\n"}
{"Action":"run","Package":"p","Test":"TestNode/a"}
{"Action":"output","Package":"p","Test":"TestNode/a","Output":"=== RUN   TestNode/a\n"}
{"Action":"output","Package":"p","Test":"TestNode/a","Output":"    node_test.go:1: a is fine\n"}
{"Action":"output","Package":"p","Test":"TestNode/a","Output":"--- PASS: TestNode/a (1.00s)\n"}
{"Action":"pass","Package":"p","Test":"TestNode/a","Elapsed":1}
{"Action":"run","Package":"p","Test":"TestNode/b"}
{"Action":"output","Package":"p","Test":"TestNode/b","Output":"    node_test.go:2: precondition: b needs a\n"}
{"Action":"output","Package":"p","Test":"TestNode/b","Output":"--- FAIL: TestNode/b (0.10s)\n"}
{"Action":"fail","Package":"p","Test":"TestNode/b","Elapsed":0.1}
{"Action":"run","Package":"p","Test":"TestNode/c"}
{"Action":"output","Package":"p","Test":"TestNode/c","Output":"    node_test.go:3: runs only inside the VM\n"}
{"Action":"output","Package":"p","Test":"TestNode/c","Output":"--- SKIP: TestNode/c (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestNode/c","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestNode/d"}
{"Action":"pass","Package":"p","Test":"TestNode/d","Elapsed":0}
{"Action":"run","Package":"p","Test":"TestNode/e"}
{"Action":"output","Package":"p","Test":"TestNode/e","Output":"    node_test.go:5: waiting...\n"}
{"Action":"fail","Package":"p","Test":"TestNode","Elapsed":2}
{"Action":"output","Package":"p","Output":"FAIL\n"}
{"Action":"fail","Package":"p","Elapsed":3}
`

func TestReadChecks(t *testing.T) {
	var out strings.Builder
	s, err := ReadChecks(strings.NewReader(checkStream), &out, false)
	if err != nil {
		t.Fatal(err)
	}
	if s.Checks != 5 || s.Passed != 2 || s.Failed != 2 || s.Skipped != 1 || !s.PackageFailed {
		t.Errorf("summary %+v: want 5 checks (the parent not counted), 2 passed, 2 failed, 1 skipped, the package failed", s)
	}
	if len(s.FailedChecks) != 2 || s.FailedChecks[0] != "TestNode/b" || s.FailedChecks[1] != "TestNode/e (did not finish)" {
		t.Errorf("failed checks %q", s.FailedChecks)
	}
	if len(s.Skips) != 1 || s.Skips[0].Reason != "runs only inside the VM" {
		t.Errorf("skips %+v", s.Skips)
	}
	got := out.String()
	for _, want := range []string{"booting the node", "a is fine", "--- PASS: TestNode/a", "--- FAIL: TestNode/b", "precondition: b needs a", "waiting...", "FAIL\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "=== RUN") {
		t.Errorf("framing printed without verbose:\n%s", got)
	}
	out.Reset()
	if _, err := ReadChecks(strings.NewReader(checkStream), &out, true); err != nil || !strings.Contains(out.String(), "=== RUN   TestNode/a") {
		t.Errorf("verbose output lacks the framing: %v\n%s", err, out.String())
	}
}

func TestReadChecksOfAStreamThatEnds(t *testing.T) {
	s, err := ReadChecks(strings.NewReader(`{"Action":"run","Package":"p","Test":"TestNode"}`+"\n"+`not json`+"\n"), &strings.Builder{}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !s.PackageFailed || s.Failed != 1 {
		t.Errorf("a stream without the package's end: %+v, want the package and its check failed", s)
	}
}

func TestSummaryString(t *testing.T) {
	s := Summary{Release: "6.12.117+deb12-amd64", Checks: 3, Passed: 1, Failed: 1, Skipped: 1,
		FailedChecks: []string{"TestNode/b"}, Skips: []Skip{{"TestNode/c", "why"}}}
	want := "node 6.12.117+deb12-amd64: checks 3, passed 1, failed 1, skipped 1 (TestNode/c: why); FAILED: TestNode/b"
	if got := s.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	s.Containerd = ContainerdV2
	want = "node 6.12.117+deb12-amd64, containerd v2.4.2: checks 3, passed 1, failed 1, skipped 1 (TestNode/c: why); FAILED: TestNode/b"
	if got := s.String(); got != want {
		t.Errorf("with the containerd named:\ngot  %q\nwant %q", got, want)
	}
}
