package staticpods

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// manifestExt is the extension of the files the Client writes: one both
// agents read.
const manifestExt = ".yaml"

// defaultProbePeriod is a probe's periodSeconds when the manifest leaves
// it out (the Kubernetes default).
const defaultProbePeriod = 10 * time.Second

// key names a pod by the manifest's namespace and name.
type key struct{ namespace, name string }

func (k key) String() string { return k.namespace + "/" + k.name }

// fileName is the manifest file of k: "<namespace>_<name>.yaml". Neither
// a namespace (a DNS label) nor a name (a DNS subdomain) holds "_", so
// the first "_" splits it back.
func (k key) fileName() string { return k.namespace + "_" + k.name + manifestExt }

// keyOfFile is the pod of a file name written by fileName; ok is false
// for any other name (temporary files included).
func keyOfFile(base string) (key, bool) {
	if strings.HasPrefix(base, ".") {
		return key{}, false
	}
	stem, found := strings.CutSuffix(base, manifestExt)
	if !found {
		return key{}, false
	}
	ns, name, found := strings.Cut(stem, "_")
	if !found || checkKey(key{ns, name}) != nil {
		return key{}, false
	}
	return key{ns, name}, true
}

// checkKey refuses names that are not valid Kubernetes names: they would
// not make a file name that parses back, and no agent would run them.
func checkKey(k key) error {
	if errs := validation.IsDNS1123Label(k.namespace); len(errs) > 0 {
		return fmt.Errorf("%w: namespace %q: %s", api.ErrInvalid, k.namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(k.name); len(errs) > 0 {
		return fmt.Errorf("%w: name %q: %s", api.ErrInvalid, k.name, strings.Join(errs, "; "))
	}
	return nil
}

// manifest is what the Client needs of a pod's manifest to judge its
// runtime state. It does not change once made.
type manifest struct {
	restart    corev1.RestartPolicy
	containers []wantContainer // the regular containers, in order
	// err: the file did not parse (one the Client did not write); its pod
	// stays Pending with this as its message.
	err error
}

// wantContainer is one container of a manifest.
type wantContainer struct {
	name, image string
	// readyAfter is how long it must have run before it counts as ready:
	// 0 without a readiness or startup probe.
	readyAfter time.Duration
}

// parseManifest parses exactly one Pod from b (path names it in errors)
// with nodeguard's strict parser, which applies the Kubernetes defaults.
// The UID it derives is cleared: each agent gives the pod its own, read
// back from the runtime.
func parseManifest(b []byte, path string) (*corev1.Pod, error) {
	pods, err := podspec.Parse(bytes.NewReader(b), path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", api.ErrInvalid, err)
	}
	if len(pods) != 1 {
		return nil, fmt.Errorf("%w: %s: %d pods, want exactly one (a static pod file holds one)", api.ErrInvalid, path, len(pods))
	}
	p := pods[0]
	p.UID = ""
	p.Status = corev1.PodStatus{}
	return p, nil
}

// manifestOf is what the Client keeps of a parsed pod.
func manifestOf(p *corev1.Pod) *manifest {
	m := &manifest{restart: p.Spec.RestartPolicy}
	for _, c := range p.Spec.Containers {
		m.containers = append(m.containers, wantContainer{name: c.Name, image: c.Image, readyAfter: readyAfter(c)})
	}
	return m
}

// readyAfter is how long a container runs before the agent has surely
// probed it once: the longer of its readiness and startup probes'
// initialDelaySeconds + periodSeconds (the readiness probe's delay counts
// from the container's start, as the startup probe's does).
func readyAfter(c corev1.Container) time.Duration {
	var d time.Duration
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		period := time.Duration(p.PeriodSeconds) * time.Second
		if period <= 0 {
			period = defaultProbePeriod
		}
		d = max(d, time.Duration(p.InitialDelaySeconds)*time.Second+period)
	}
	return d
}

// loadManifest reads the manifest file at path. A file that does not parse
// gives a manifest holding the error, not an error: the file is there, and
// its pod is reported Pending with why.
func loadManifest(path string) (*manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	p, err := parseManifest(b, path)
	if err != nil {
		return &manifest{err: err}, nil
	}
	return manifestOf(p), nil
}

// tempPattern is the os.CreateTemp pattern of a temporary file for the
// manifest file base: a dot first (the kubelet reads no such name), ".tmp"
// last (nodeguard reads only .yaml, .yml and .json).
func tempPattern(base string) string { return "." + base + ".*.tmp" }

// writeAtomic writes b as path through a temporary file in the same
// directory (named by tempPattern), renamed over path.
func writeAtomic(path string, b []byte) (retErr error) {
	f, err := os.CreateTemp(filepath.Dir(path), tempPattern(filepath.Base(path)))
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("write manifest %s: %w", f.Name(), err)
	}
	// CreateTemp makes it 0600; the agents run as root, a reader who is
	// not (crictl's user, a person) may look.
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("write manifest %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write manifest %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// removeManifest removes path; existed is false when there was none.
func removeManifest(path string) (existed bool, err error) {
	err = os.Remove(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("remove manifest: %w", err)
}
