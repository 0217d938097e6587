package podspec

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const minimal = "apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  containers: [{name: app, image: busybox:1.35}]\n"

func pod(name string) string { return strings.Replace(minimal, "%s", name, 1) }

func parse(t *testing.T, text string) []*corev1.Pod {
	t.Helper()
	pods, err := Parse(strings.NewReader(text), "test.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return pods
}

func names(pods []*corev1.Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name)
	}
	return strings.Join(n, ",")
}

func TestParseDocuments(t *testing.T) {
	tests := []struct {
		name string
		text string
		want string
	}{
		{"a single YAML pod parses", pod("a"), "a"},
		{"documents separated by --- parse in order", pod("a") + "---\n" + pod("b") + "--- # third\n" + pod("c"), "a,b,c"},
		{"a leading separator and empty documents are skipped", "---\n# only a comment\n---\n" + pod("a") + "---\n", "a"},
		{"an empty source gives no pods", "", ""},
		{"a JSON pod parses", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"app","image":"busybox"}]}}`, "j"},
		{"a v1 List of pods parses", "apiVersion: v1\nkind: List\nitems:\n- " + strings.ReplaceAll(pod("a"), "\n", "\n  ") + "\n- " + strings.ReplaceAll(pod("b"), "\n", "\n  "), "a,b"},
		{"a PodList whose items omit apiVersion and kind parses", "apiVersion: v1\nkind: PodList\nmetadata: {resourceVersion: \"1\"}\nitems:\n- metadata: {name: x}\n  spec: {containers: [{name: app, image: busybox}]}\n", "x"},
		{"windows line endings parse", strings.ReplaceAll(pod("a")+"---\n"+pod("b"), "\n", "\r\n"), "a,b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(parse(t, tt.text)); got != tt.want {
				t.Fatalf("pods = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseIsAllOrNothing(t *testing.T) {
	_, err := Parse(strings.NewReader(pod("a")+"---\nkind: Pod\napiVersion: v1\nspec: {bogus: 1}\n---\n"+pod("c")+"---\n[1]\n"), "many.yaml")
	var de *DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("err = %v, want a *DecodeError", err)
	}
	want := "many.yaml: document 2: spec.bogus: unknown field\nmany.yaml: document 4: a manifest document must be an object, got a list"
	if err.Error() != want {
		t.Fatalf("err =\n%s\nwant\n%s", err, want)
	}
	var unknown *UnknownFieldError
	if !errors.As(err, &unknown) || unknown.Field != "spec.bogus" {
		t.Fatalf("errors.As UnknownFieldError = %v", unknown)
	}
}

func TestParseRefusesAnOversizedSource(t *testing.T) {
	big := strings.NewReader(pod("a") + "#" + strings.Repeat("x", MaxManifestBytes))
	if _, err := Parse(big, "big.yaml"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestDefaults(t *testing.T) {
	p := parse(t, `apiVersion: v1
kind: Pod
metadata: {name: d}
spec:
  hostNetwork: true
  containers:
  - name: a
    image: busybox
    ports: [{containerPort: 80}]
    resources: {limits: {cpu: "1", memory: 1Gi}, requests: {cpu: 500m}}
    env: [{name: NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
  - {name: b, image: "busybox:1.36"}
  - {name: c, image: "busybox:latest"}
  - {name: d, image: "localhost:5000/busybox"}
  - {name: e, image: "busybox@sha256:abc"}
  volumes:
  - {name: h, hostPath: {path: /tmp}}
  - {name: s, secret: {secretName: s}}
`)[0]
	s := p.Spec
	c := s.Containers[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"the namespace defaults to default", p.Namespace, "default"},
		{"the restart policy defaults to Always", s.RestartPolicy, corev1.RestartPolicyAlways},
		{"the DNS policy defaults to ClusterFirst", s.DNSPolicy, corev1.DNSClusterFirst},
		{"the grace period defaults to 30 seconds", *s.TerminationGracePeriodSeconds, int64(30)},
		{"an explicit request is kept", c.Resources.Requests.Cpu().String(), "500m"},
		{"a missing request defaults to the limit", c.Resources.Requests.Memory().String(), "1Gi"},
		{"the port protocol defaults to TCP", c.Ports[0].Protocol, corev1.ProtocolTCP},
		{"with hostNetwork the host port defaults to the container port", c.Ports[0].HostPort, int32(80)},
		{"the fieldRef apiVersion defaults to v1", c.Env[0].ValueFrom.FieldRef.APIVersion, "v1"},
		{"an untagged image is pulled Always", c.ImagePullPolicy, corev1.PullAlways},
		{"a tagged image is pulled IfNotPresent", s.Containers[1].ImagePullPolicy, corev1.PullIfNotPresent},
		{"a latest image is pulled Always", s.Containers[2].ImagePullPolicy, corev1.PullAlways},
		{"a registry port is not a tag", s.Containers[3].ImagePullPolicy, corev1.PullAlways},
		{"a digest without a tag is pulled IfNotPresent", s.Containers[4].ImagePullPolicy, corev1.PullIfNotPresent},
		{"the termination message path defaults", c.TerminationMessagePath, DefaultTerminationMessagePath},
		{"the hostPath type defaults to unset", *s.Volumes[0].HostPath.Type, corev1.HostPathUnset},
		{"the secret mode defaults to 0644", *s.Volumes[1].Secret.DefaultMode, int32(0o644)},
	}
	for _, ck := range checks {
		t.Run(ck.name, func(t *testing.T) {
			if ck.got != ck.want {
				t.Fatalf("got %v, want %v", ck.got, ck.want)
			}
		})
	}
	t.Run("a defaulted pod validates", func(t *testing.T) {
		if _, errs := Validate(p, Options{ImagePull: true, AllowPrivileged: true}); len(errs) > 0 {
			t.Fatal(errs)
		}
	})
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestUIDs(t *testing.T) {
	uid := func(text, source string) string {
		pods, err := Parse(strings.NewReader(text), source)
		if err != nil {
			t.Fatal(err)
		}
		return string(pods[0].UID)
	}
	a := uid(pod("a"), "/etc/nodeguard/pods/a.yaml")
	tests := []struct {
		name string
		ok   bool
	}{
		{"a generated UID is a version-8 UUID", uuidRE.MatchString(a)},
		{"the same manifest in the same file gets the same UID", uid(pod("a"), "/etc/nodeguard/pods/a.yaml") == a},
		{"the same manifest in another file gets another UID", uid(pod("a"), "/etc/nodeguard/pods/b.yaml") != a},
		{"an edited manifest gets another UID", uid(strings.Replace(pod("a"), "busybox", "busybox:1.36", 1), "/etc/nodeguard/pods/a.yaml") != a},
		{"reformatting the manifest keeps the UID", uid("# comment\n"+strings.Replace(pod("a"), "{name: a}", "\n  name: a", 1), "/etc/nodeguard/pods/a.yaml") == a},
		{"an explicit UID is kept", uid(strings.Replace(pod("a"), "{name: a}", "{name: a, uid: 0b5c-77}", 1), "x") == "0b5c-77"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !tt.ok {
				t.Fatalf("failed (base UID %s)", a)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", pod("b"))
	write("a.yml", pod("a"))
	write("c.json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c"},"spec":{"containers":[{"name":"x","image":"busybox"}]}}`)
	write("README.md", "not a manifest")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("a directory loads its manifests in lexical order and skips the rest", func(t *testing.T) {
		pods, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(pods); got != "a,b,c" {
			t.Fatalf("pods = %q", got)
		}
	})
	t.Run("a single file loads", func(t *testing.T) {
		pods, err := Load(filepath.Join(dir, "b.yaml"))
		if err != nil || names(pods) != "b" {
			t.Fatalf("pods = %v, err = %v", names(pods), err)
		}
	})
	t.Run("an error names the broken file and no pods are returned", func(t *testing.T) {
		write("d.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {nam: d}\n")
		defer os.Remove(filepath.Join(dir, "d.yaml"))
		pods, err := Load(dir)
		if err == nil || pods != nil {
			t.Fatalf("pods = %v, err = %v", names(pods), err)
		}
		if want := filepath.Join(dir, "d.yaml") + ": document 1: metadata.nam: unknown field"; err.Error() != want {
			t.Fatalf("err = %q, want %q", err, want)
		}
	})
	t.Run("a missing path is an error", func(t *testing.T) {
		if _, err := Load(filepath.Join(dir, "nope")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestQuantitiesSurviveDecoding(t *testing.T) {
	p := parse(t, strings.Replace(pod("q"), "image: busybox:1.35}", "image: busybox:1.35, resources: {limits: {memory: 1.5Gi, cpu: 0.5}}}", 1))[0]
	if got := p.Spec.Containers[0].Resources.Limits.Memory().Value(); got != 1536<<20 {
		t.Fatalf("memory = %d", got)
	}
	if got := p.Spec.Containers[0].Resources.Limits.Cpu().Cmp(resource.MustParse("500m")); got != 0 {
		t.Fatalf("cpu = %v", p.Spec.Containers[0].Resources.Limits.Cpu())
	}
}

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and every
// pod it returns must survive Validate.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil && !strings.HasSuffix(file, ".err") {
				f.Add(data)
			}
		}
	}
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Add([]byte("{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"spec\":{\"containers\":[{}]}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		pods, err := Parse(strings.NewReader(string(data)), "fuzz.yaml")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error text")
			}
			return
		}
		for _, p := range pods {
			if p.UID == "" || p.Namespace == "" {
				t.Fatalf("pod %q was not defaulted", p.Name)
			}
			Validate(p, Options{})
		}
	})
}
