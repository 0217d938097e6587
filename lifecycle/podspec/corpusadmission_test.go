package podspec

import (
	"bytes"
	"testing"

	"github.com/nodeguard/nodeguard/lab/corpus"
)

// TestCorpusAdmission validates every spec of the corpus of real pod
// specs (testdata/corpus, see its README.md) as the corpus node of
// lifecycle's TestCorpus does, without a runtime: a spec expected to be
// refused is refused for what its expectation says (a control plane, a
// plugin), and every other is accepted. Specs waiting for a feature are
// only reported. lifecycle's TestCorpus runs them for real.
func TestCorpusAdmission(t *testing.T) {
	specs, err := corpus.Load("testdata/corpus")
	if err != nil {
		t.Fatal(err)
	}
	exp, err := corpus.LoadExpectations("testdata/corpus/expectations.txt")
	if err != nil {
		t.Fatal(err)
	}
	// The corpus node (lifecycle's corpusNode): it runs node agents
	// (allowPrivileged) and pulls images (from the test registry there,
	// for the containers whose imagePullPolicy is Always). AppArmor is off here whatever the machine has: the specs
	// that need it are the ones the expectations say wait for it.
	// Its runtime is Debian's containerd, which mounts no image volume.
	opts := Options{AllowPrivileged: true, ImagePull: true, Runtime: "containerd 1.6.20~ds1"}
	for _, s := range specs {
		e, ok := exp[s.Name]
		if !ok {
			t.Errorf("%s: no line in the expectations file", s.Name)
			continue
		}
		t.Run(s.Name, func(t *testing.T) {
			pods, err := Parse(bytes.NewReader(s.Manifest("registry.local/busybox:corpus", "/corpus-host")), s.Name+".yaml")
			if err != nil {
				t.Fatalf("does not parse: %v", err)
			}
			if len(pods) != 1 {
				t.Fatalf("%d pods, want one", len(pods))
			}
			p := pods[0]
			Default(p, "api")
			_, errs := Validate(p, opts)
			refusals := corpus.Refusals(errs)
			got := corpus.Running
			if len(refusals) > 0 {
				got = corpus.Classify(refusals)
			}
			wantRefused := e.Outcome == corpus.RefusedControlPlane || e.Outcome == corpus.RefusedPlugin || e.Outcome == corpus.RefusedOther
			switch {
			case e.Waits != "":
				t.Logf("waits for %s: admission today: %s %v", e.Waits, got, refusals)
			case wantRefused && got != e.Outcome:
				t.Errorf("expected %s, admission says %s: %v", e.Outcome, got, refusals)
			case !wantRefused && len(refusals) > 0:
				t.Errorf("expected %s, but admission refuses it (%s): %v", e.Outcome, got, refusals)
			}
		})
	}
}
