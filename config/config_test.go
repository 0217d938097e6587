package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

const exampleConfig = "../deploy/config.example.yaml"

// TestBrokenConfigsAreRefusedByName checks each file of the corpus
// testdata/bad against its golden error (NAME.err beside NAME.yaml,
// without the "config FILE: " prefix): the message names the field and
// the value, and changes only on purpose (go test -run BrokenConfigs
// -update rewrites them).
func TestBrokenConfigsAreRefusedByName(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(strings.ReplaceAll(name, "-", " ")+" is refused", func(t *testing.T) {
			cerr := CheckFile(path)
			if cerr == nil {
				t.Fatal("accepted")
			}
			got := strings.TrimPrefix(cerr.Error(), "config "+path+": ")
			golden := strings.TrimSuffix(path, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run BrokenConfigs -update writes it)", err)
			}
			if got != strings.TrimSpace(string(want)) {
				t.Errorf("error\n  %s\nwant (%s)\n  %s", got, golden, strings.TrimSpace(string(want)))
			}
			if !strings.HasPrefix(cerr.Error(), "config "+path+": ") {
				t.Errorf("the error does not name the file: %v", cerr)
			}
		})
	}
}

// TestTheExampleConfigIsTheDefaults loads deploy/config.example.yaml: it
// validates, and, apart from runtimeEndpoint (which has no default), it
// is the default configuration, field for field: the file documents
// every default truthfully.
func TestTheExampleConfigIsTheDefaults(t *testing.T) {
	cfg, err := Load(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the example does not validate: %v", err)
	}
	def := Default()
	def.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	got, want := mustYAML(t, cfg.Effective()), mustYAML(t, def.Effective())
	// Empty maps and lists in the file are null in the defaults: both
	// mean none.
	norm := func(s string) string {
		return strings.NewReplacer(": {}\n", ": null\n", ": []\n", ": null\n").Replace(s)
	}
	if norm(got) != norm(want) {
		t.Errorf("the example differs from the defaults:\n%s", lineDiff(norm(got), norm(want)))
	}
	// Every key of the defaults is in the example, with a comment.
	text, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := keys(def)
	if err != nil {
		t.Fatal(err)
	}
	for k := range ks {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !bytes.Contains(text, []byte(leaf+":")) {
			t.Errorf("the example does not show %s", k)
		}
	}
}

// TestTheDefaultsRoundTrip: what `nodeguard config defaults` prints
// (Default().Effective() as YAML) loads back as the same configuration.
func TestTheDefaultsRoundTrip(t *testing.T) {
	out := mustYAML(t, Default().Effective())
	cfg, err := Parse([]byte(out), "defaults.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := mustYAML(t, cfg); got != out {
		t.Errorf("round trip:\n%s", lineDiff(got, out))
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lineDiff lists the lines only one side has.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("example:  " + l + "\n")
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("defaults: " + l + "\n")
		}
	}
	return b.String()
}

func TestConfigChangesSplitWhatAReloadApplies(t *testing.T) {
	base := Default()
	base.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	cases := []struct {
		name           string
		edit           func(c *Run)
		apply, restart []string
	}{
		{"nothing changed applies nothing", func(*Run) {}, nil, nil},
		{"a log level is applied", func(c *Run) { c.Logging.Level = "debug" }, []string{"logging"}, nil},
		{"hard thresholds are applied", func(c *Run) {
			c.Eviction.EvictionHard = map[string]string{"memory.available": "200Mi"}
		}, []string{"eviction.evictionHard"}, nil},
		{"writing out the default thresholds is no change", func(c *Run) {
			c.Eviction.EvictionHard = map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%"}
		}, nil, nil},
		{"the tick and dry run need a restart", func(c *Run) {
			c.Eviction.Tick.Duration *= 2
			c.Eviction.DryRun = true
		}, nil, []string{"eviction.dryRun", "eviction.tick"}},
		{"other sections need a restart", func(c *Run) {
			c.Network.MaxPods = 50
			c.RootDir = "/srv/nodeguard"
			c.Eviction.CoolDown.Duration = 5
		}, []string{"eviction.coolDown"}, []string{"network", "rootDir"}},
		{"every threshold field and period is applied", func(c *Run) {
			c.Eviction.EvictionSoft = map[string]string{"memory.available": "300Mi"}
			c.Eviction.EvictionSoftGracePeriod = map[string]string{"memory.available": "1m"}
			c.Eviction.EvictionMinimumReclaim = map[string]string{"memory.available": "50Mi"}
			c.Eviction.EnforceNodeAllocatable = []string{}
			c.Eviction.EvictionPressureTransitionPeriod.Duration *= 2
			c.Eviction.EvictionMaxPodGracePeriod = 30
			c.Eviction.PSIRules = []string{"memory.full.avg10>40 for 10s"}
		}, []string{"eviction.enforceNodeAllocatable", "eviction.evictionMaxPodGracePeriod", "eviction.evictionMinimumReclaim",
			"eviction.evictionPressureTransitionPeriod", "eviction.evictionSoft", "eviction.evictionSoftGracePeriod", "eviction.psiRules"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next := base
			next.Eviction.EnforceNodeAllocatable = slices.Clone(base.Eviction.EnforceNodeAllocatable)
			c.edit(&next)
			apply, restart, err := Changes(base, next)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(apply, c.apply) || !slices.Equal(restart, c.restart) {
				t.Errorf("apply %q restart %q, want %q and %q", apply, restart, c.apply, c.restart)
			}
			// After the reload, only what needs a restart still differs.
			_, still, _ := Changes(WithReloaded(base, next), next)
			if _, again, _ := Changes(base, next); !slices.Equal(still, again) {
				t.Errorf("after applying, %q differ; want only %q", still, again)
			}
			if applied, _, _ := Changes(WithReloaded(base, next), next); len(applied) != 0 {
				t.Errorf("WithReloaded left %q unapplied", applied)
			}
		})
	}
}

func TestTheDefaultConfigFileIsReadOnlyWhenItExists(t *testing.T) {
	if p, err := Path("/x/given.yaml", true, DefaultPath); err != nil || p != "/x/given.yaml" {
		t.Errorf("--config given: %q %v", p, err)
	}
	if _, err := Path("", true, DefaultPath); err == nil {
		t.Error("an empty --config was accepted")
	}
	p, err := Path(DefaultPath, false, DefaultPath)
	_, statErr := os.Stat(DefaultPath)
	switch {
	case statErr == nil && p != DefaultPath, statErr != nil && p != "":
		t.Errorf("without --config: %q %v (the default file exists: %v)", p, err, statErr == nil)
	}
	existing := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err := Path("", false, existing); err != nil || p != existing {
		t.Errorf("an existing default file: %q %v, want it read", p, err)
	}
	if p, err := Path("", false, existing+".missing"); err != nil || p != "" {
		t.Errorf("a missing default file: %q %v, want none", p, err)
	}
}

func TestRunConfigErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"an unknown key is refused by name", "runtimeEndpoint: unix:///x\nrootDirr: /x\n", "rootDirr"},
		{"a relative root dir is refused", "runtimeEndpoint: unix:///x\nrootDir: rel\n", "rootDir"},
		{"a missing runtime endpoint is named", "rootDir: /x\n", "runtimeEndpoint"},
		{"an unsupported reserved resource is named", "runtimeEndpoint: unix:///x\nsystemReserved: {gpu: 1}\n", "systemReserved.gpu"},
		{"a back-off above its maximum is refused", "runtimeEndpoint: unix:///x\nbackoffInitial: 10m\nbackoffMax: 1m\n", "backoffInitial"},
		{"a zero containerLogMaxSize is refused by name", "runtimeEndpoint: unix:///x\ncontainerLogMaxSize: 0\n", "containerLogMaxSize 0: must be positive"},
		{"a malformed containerLogMaxSize is named", "runtimeEndpoint: unix:///x\ncontainerLogMaxSize: 10Zi\n", "containerLogMaxSize"},
		{"containerLogMaxFiles below 2 is refused by name", "runtimeEndpoint: unix:///x\ncontainerLogMaxFiles: 1\n", "containerLogMaxFiles 1: must be at least 2"},
		{"a malformed quantity names the field", "runtimeEndpoint: unix:///x\nkubeReserved: {memory: 12Zi}\n", "12Zi"},
		{"a malformed pod subnet is named", "runtimeEndpoint: unix:///x\nnetwork: {subnet: 10.88.0.0/33}\n", "network.subnet"},
		{"a subnet too small for maxPods is named", "runtimeEndpoint: unix:///x\nnetwork: {subnet: 10.88.0.0/28, maxPods: 110}\n", "network: netplumb"},
		{"a bridge name over 15 bytes is named", "runtimeEndpoint: unix:///x\nnetwork: {bridge: a-bridge-name-too-long}\n", "bridge"},
		{"a relative hostPath prefix is named", "runtimeEndpoint: unix:///x\nvolumes: {hostPathAllow: [data]}\n", "volumes.hostPathAllow[0]"},
		{"a relative source dir is named", "runtimeEndpoint: unix:///x\nvolumes: {sourceDir: src}\n", "volumes.sourceDir"},
		{"an unknown key deep in a section is named by its path", "runtimeEndpoint: unix:///x\nauthentication: {x509: {clientCA: /ca}}\n", "authentication.x509.clientCA: unknown field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := Load(path)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %q", err, c.want)
			}
		})
	}
	t.Run("a valid file passes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte("runtimeEndpoint: unix:///run/containerd/containerd.sock\nsystemReserved: {memory: 512Mi, cpu: 500m}\nbackoffInitial: 5s\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.BackoffInitial.Duration.String() != "5s" || cfg.SystemReserved.Memory().String() != "512Mi" {
			t.Errorf("decoded %+v", cfg)
		}
	})
}

// TestNodeLabelsAddToTheStandaloneOnes: nodeLabels from the configuration
// are the kubelet's --node-labels, added to (and overriding) the labels a
// standalone kubelet gives its node; without any, lifecycle's default
// stands (nil).
func TestNodeLabelsAddToTheStandaloneOnes(t *testing.T) {
	none, err := Run{}.Labels()
	if err != nil || none != nil {
		t.Fatalf("without nodeLabels: %v, %v; want nil, nil", none, err)
	}
	got, err := Run{NodeLabels: map[string]string{"disktype": "ssd", "kubernetes.io/arch": "other"}}.Labels()
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"disktype": "ssd", "kubernetes.io/arch": "other",
		"kubernetes.io/hostname": strings.ToLower(host), "kubernetes.io/os": runtime.GOOS,
		"beta.kubernetes.io/os": runtime.GOOS, "beta.kubernetes.io/arch": runtime.GOARCH,
	}
	if len(got) != len(want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}
