package kubeletproc

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrOptions reports Options that Start cannot run a kubelet with.
var ErrOptions = errors.New("bad kubelet options")

// DefaultMaxPods is the kubelet's own default maxPods.
const DefaultMaxPods = 110

// Options configure Start.
type Options struct {
	// Bin is the kubelet binary (FindBinary).
	Bin string
	// Dir is a directory the caller made for this run; the configuration,
	// the wrapper script, the kubelet's root directory (root/), its
	// certificates (pki/), pod logs (pod-logs/) and, by default, its log
	// go beneath it. Close removes what Start put there except the log.
	Dir string
	// RuntimeEndpoint is the CRI endpoint of a private containerd
	// (crienv.Env.Endpoint: unix:///path/to/containerd.sock). Nothing else
	// may run pods on it while the kubelet runs.
	RuntimeEndpoint string
	// StaticPodDir is the kubelet's staticPodPath, the caller's manifest
	// directory; it must exist.
	StaticPodDir string
	// CgroupRoot is the kubelet's cgroupRoot: an absolute cgroupfs path
	// that exists in every hierarchy (NewCgroupRoot makes one).
	CgroupRoot string
	// NodeName is the node's name (--hostname-override); static pods are
	// named <name>-<NodeName>. Empty is the host name in lower case, as
	// the kubelet would take it.
	NodeName string
	// MaxPods is the kubelet's maxPods; 0 is DefaultMaxPods.
	MaxPods int
	// LogPath is the file the kubelet's output is appended to; empty is
	// Dir/kubelet.log.
	LogPath string
	// ExtraConfig are further top-level fields of the
	// KubeletConfiguration (kubelet.config.k8s.io/v1beta1), e.g.
	// evictionHard or kernelMemcgNotification. A field that Start itself
	// sets is refused: those are what this host needs (see the package
	// documentation) or what Start reads back (ports).
	ExtraConfig map[string]any
}

// ports are the loopback ports of one run.
type ports struct {
	// server is the kubelet's HTTPS port (its default 10250).
	server int
	// healthz is its plain HTTP healthz port (its default 10248).
	healthz int
}

// Paths beneath Options.Dir.
const (
	configName  = "kubelet-config.yaml"
	wrapperName = "kubelet-ns.sh"
	rootName    = "root"
	pkiName     = "pki"
	podLogsName = "pod-logs"
	// varLibName is the directory shown to the kubelet at
	// /var/lib/kubelet in its mount namespace.
	varLibName = "var-lib-kubelet"
	// sysctlName holds one file per sysctl value shown to the kubelet.
	sysctlName = "sysctl"
	logName    = "kubelet.log"
)

// validate checks o and fills in its defaults.
func (o Options) validate() (Options, error) {
	for _, f := range []struct{ name, v string }{
		{"Bin", o.Bin}, {"Dir", o.Dir}, {"StaticPodDir", o.StaticPodDir}, {"CgroupRoot", o.CgroupRoot},
	} {
		if f.v == "" {
			return o, fmt.Errorf("%w: %s is empty", ErrOptions, f.name)
		}
	}
	for _, f := range []struct{ name, v string }{{"Dir", o.Dir}, {"StaticPodDir", o.StaticPodDir}, {"CgroupRoot", o.CgroupRoot}} {
		if !filepath.IsAbs(f.v) || filepath.Clean(f.v) != f.v {
			return o, fmt.Errorf("%w: %s %q is not a clean absolute path", ErrOptions, f.name, f.v)
		}
	}
	if o.CgroupRoot == "/" {
		return o, fmt.Errorf("%w: CgroupRoot / is the hierarchies' root, outside this process's memory cgroup", ErrOptions)
	}
	if _, err := socketPath(o.RuntimeEndpoint); err != nil {
		return o, err
	}
	if o.MaxPods < 0 {
		return o, fmt.Errorf("%w: MaxPods %d", ErrOptions, o.MaxPods)
	}
	if o.MaxPods == 0 {
		o.MaxPods = DefaultMaxPods
	}
	if o.LogPath == "" {
		o.LogPath = filepath.Join(o.Dir, logName)
	}
	return o, nil
}

// socketPath is the socket of a unix:// CRI endpoint.
func socketPath(endpoint string) (string, error) {
	p, ok := strings.CutPrefix(endpoint, "unix://")
	if !ok || !filepath.IsAbs(p) {
		return "", fmt.Errorf("%w: RuntimeEndpoint %q is not unix:///<absolute path>", ErrOptions, endpoint)
	}
	return p, nil
}

// baseConfig is the KubeletConfiguration Start writes for o (validated)
// and ps, before ExtraConfig. Everything else keeps the kubelet's
// defaults (10 s housekeeping, PLEG, cAdvisor, eviction thresholds).
func baseConfig(o Options, ps ports) map[string]any {
	return map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"staticPodPath":            o.StaticPodDir,
		"containerRuntimeEndpoint": o.RuntimeEndpoint,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               o.CgroupRoot,
		// Memory is on v1 here; the kubelet refuses v1 unless told not to.
		"failCgroupV1": false,
		"failSwapOn":   false,
		"maxPods":      o.MaxPods,
		"podLogsDir":   filepath.Join(o.Dir, podLogsName),
		// Else it adds KUBE-* chains to the host's iptables.
		"makeIPTablesUtilChains": false,
		// Else it rewrites host sysctls; the wrapper shows it the values.
		"protectKernelDefaults": true,
		"address":               "127.0.0.1",
		"port":                  ps.server,
		"readOnlyPort":          0,
		"healthzBindAddress":    "127.0.0.1",
		"healthzPort":           ps.healthz,
		// No API server to review tokens or access: anonymous requests,
		// all allowed, on the loopback only.
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization": map[string]any{"mode": "AlwaysAllow"},
	}
}

// renderConfig is the configuration file for o (validated) and ps.
func renderConfig(o Options, ps ports) ([]byte, error) {
	c := baseConfig(o, ps)
	for _, k := range slices.Sorted(maps.Keys(o.ExtraConfig)) {
		if _, ok := c[k]; ok {
			return nil, fmt.Errorf("%w: ExtraConfig sets %q, which Start sets itself", ErrOptions, k)
		}
		c[k] = o.ExtraConfig[k]
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode the kubelet's configuration: %w", err)
	}
	return b, nil
}

// args are the kubelet's flags: no kubeconfig, so it runs standalone.
func args(o Options) []string {
	return []string{
		"--config=" + filepath.Join(o.Dir, configName),
		"--root-dir=" + filepath.Join(o.Dir, rootName),
		"--cert-dir=" + filepath.Join(o.Dir, pkiName),
		"--hostname-override=" + o.NodeName,
	}
}
