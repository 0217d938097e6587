package podspec

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.err from the current output")

// corpusOptions is the node policy the corpus is checked against: a node
// that pulls, since most manifests use untagged images (imagePullPolicy
// Always by default), on containerd 2.1, which mounts image volumes but
// not a subPath of one.
var corpusOptions = Options{PriorityClasses: map[string]int32{"high": 1000}, ImagePull: true,
	ImageVolumes: true, Runtime: "containerd v2.1.5"}

// corpusErrors parses and validates one manifest and renders what is wrong
// with it: the decode error, or one line per validation error.
func corpusErrors(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pods, err := Parse(f, filepath.Base(path))
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, p := range pods {
		_, errs := Validate(p, corpusOptions)
		for _, e := range errs {
			lines = append(lines, e.Error())
		}
	}
	return strings.Join(lines, "\n")
}

// TestBadManifests checks every manifest in testdata/bad against the exact
// error text in the .err file beside it. Run with -update to rewrite the
// .err files after an intended change, and review the diff.
func TestBadManifests(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run("the "+strings.ReplaceAll(name, "-", " ")+" manifest is refused with the recorded errors", func(t *testing.T) {
			got := corpusErrors(t, path)
			if got == "" {
				t.Fatal("the manifest was accepted")
			}
			errPath := strings.TrimSuffix(path, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(errPath, []byte(got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(errPath)
			if err != nil {
				t.Fatalf("read expected errors: %v", err)
			}
			if got != strings.TrimRight(string(want), "\n") {
				t.Fatalf("errors differ\n--- got\n%s\n--- want\n%s", got, want)
			}
		})
	}
}

// TestGoodManifests checks that the manifests in testdata/good parse and
// validate cleanly.
func TestGoodManifests(t *testing.T) {
	files, _ := filepath.Glob("testdata/good/*")
	for _, path := range files {
		t.Run("the "+filepath.Base(path)+" manifest is accepted", func(t *testing.T) {
			if got := corpusErrors(t, path); got != "" {
				t.Fatalf("unexpected errors:\n%s", got)
			}
		})
	}
}
