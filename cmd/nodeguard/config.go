package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/internal/logging"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/netplumb"
	"github.com/nodeguard/nodeguard/oom"
)

// DefaultConfigPath is the configuration `nodeguard run` reads when
// --config is not given and the file exists (the systemd unit names it
// explicitly).
const DefaultConfigPath = "/etc/nodeguard/config.yaml"

// runConfig is the daemon's configuration file (YAML); flags override it.
type runConfig struct {
	RuntimeEndpoint string `json:"runtimeEndpoint"`
	RootDir         string `json:"rootDir"`
	// CgroupDriver is how pod cgroups are made and named, the kubelet's
	// key and values: "cgroupfs" (directories nodeguard makes) or
	// "systemd" (slices systemd makes over D-Bus). It must be the
	// runtime's (containerd's SystemdCgroup).
	CgroupDriver string `json:"cgroupDriver"`
	// CgroupRoot is the kubelet's cgroupRoot: kubepods goes beneath it.
	// Absolute on a node ("/"); relative (beneath nodeguard's own cgroup)
	// only for the private test runtime.
	CgroupRoot      string `json:"cgroupRoot"`
	PodManifestPath string `json:"podManifestPath"`
	APISocket       string `json:"apiSocket"`
	MetricsAddr     string `json:"metricsAddr"`
	// EnableProfiling serves Go's /debug/pprof/ beside /metrics (the
	// kubelet's enableProfilingHandler); off by default.
	EnableProfiling bool `json:"enableProfiling"`
	// PriorityClasses maps priorityClassName to priority.
	PriorityClasses map[string]int32 `json:"priorityClasses"`
	AllowPrivileged bool             `json:"allowPrivileged"`
	// AllowedUnsafeSysctls lets pods set sysctls beyond the kubelet's
	// safe set: names or prefixes ending in '*' ("net.core.*"), the
	// kubelet's key. Only namespaced sysctls can be allowed.
	AllowedUnsafeSysctls []string `json:"allowedUnsafeSysctls"`
	// ClusterDomain is the kubelet's clusterDomain: a pod with a hostname
	// and a subdomain gets its FQDN,
	// <hostname>.<subdomain>.<namespace>.svc.<clusterDomain>, in its
	// /etc/hosts. Empty: no FQDN, as a kubelet without one.
	ClusterDomain string `json:"clusterDomain"`
	// NodeLabels are added to the labels a standalone kubelet gives its
	// node (hostname, os and arch, which they may override), the
	// kubelet's --node-labels: a pod whose nodeSelector they do not match
	// is rejected (NodeAffinity).
	NodeLabels map[string]string `json:"nodeLabels"`
	// Kubeconfig joins a Kubernetes cluster as its node agent (node
	// mode; the kubelet's --kubeconfig): the Node is registered and its
	// status and Lease kept. Empty: standalone.
	Kubeconfig string `json:"kubeconfig"`
	// NodeName overrides the node's name (the lower-cased hostname), the
	// kubelet's --hostname-override / --node-name.
	NodeName string `json:"nodeName"`
	// NodeIP is the node's address, or two (IPv4 and IPv6) separated by
	// a comma (the kubelet's --node-ip): status.hostIP(s), and the Node's
	// InternalIP. Empty: found from the hostname and interfaces.
	NodeIP string `json:"nodeIP"`
	// RegisterWithTaints are the taints the Node is registered with (the
	// kubelet's key).
	RegisterWithTaints []corev1.Taint `json:"registerWithTaints"`
	// Address and Port are where the node's HTTPS endpoint listens in node
	// mode (the kubelet's keys), the API server's way to logs, exec,
	// attach and port-forward. Address empty: every address (the
	// kubelet's 0.0.0.0, IPv6 too); Port 0: 10250, advertised in the
	// Node's daemonEndpoints.
	Address string `json:"address"`
	Port    int32  `json:"port"`
	// TLSCertFile and TLSPrivateKeyFile are the endpoint's serving
	// certificate (the kubelet's keys). Empty: a self-signed one made in
	// <rootDir>/pki, which an API server that verifies kubelets'
	// certificates (--kubelet-certificate-authority) refuses.
	TLSCertFile       string `json:"tlsCertFile"`
	TLSPrivateKeyFile string `json:"tlsPrivateKeyFile"`
	// ServerTLSBootstrap (the kubelet's key) asks the API server for the
	// endpoint's serving certificate instead: a CertificateSigningRequest
	// of the kubernetes.io/kubelet-serving signer, which someone must
	// approve (kubectl certificate approve); the issued pair is kept in
	// <rootDir>/pki and renewed before it expires. Excludes tlsCertFile.
	ServerTLSBootstrap bool `json:"serverTLSBootstrap"`
	// Authentication of the endpoint's callers, the kubelet's
	// authentication.x509.clientCAFile: client certificates of these CAs
	// (the API server's --kubelet-client-certificate); each user is then
	// authorized by the API server (SubjectAccessReview of nodes/proxy).
	// No CA: every request is refused.
	Authentication nodeAuthentication `json:"authentication"`
	// SystemReserved and KubeReserved (e.g. {memory: 512Mi, cpu: 500m})
	// are taken off the node's capacity; the rest, node allocatable, is
	// enforced on kubepods as the kubelet's enforceNodeAllocatable=pods.
	SystemReserved corev1.ResourceList `json:"systemReserved"`
	KubeReserved   corev1.ResourceList `json:"kubeReserved"`
	// ImagePull lets the runtime pull images (a registry is configured),
	// as each container's imagePullPolicy says; off, nothing is pulled, a
	// missing image fails its container clearly (ErrImagePull), and
	// imagePullPolicy Always is refused at admission.
	ImagePull bool `json:"imagePull"`
	// ImageCredentialsFile is the node's own registry credentials, a
	// docker config.json ({"auths": {...}}) or legacy .dockercfg, as the
	// kubelet's config.json lookup reads: used for the images that no
	// imagePullSecret of the pod has credentials for, after the pod's.
	// Read at each pull. None when empty.
	ImageCredentialsFile string `json:"imageCredentialsFile"`
	// ContainerLogMaxSize and ContainerLogMaxFiles bound each container's
	// log, as the kubelet's keys (defaults 10Mi and 5): containerd never
	// rotates; nodeguard renames the live file when it reaches the size
	// and keeps at most that many files, the live one included.
	ContainerLogMaxSize  resource.Quantity `json:"containerLogMaxSize"`
	ContainerLogMaxFiles int               `json:"containerLogMaxFiles"`
	// Container restart back-off (defaults: the kubelet's 10 s and 5 min).
	BackoffInitial metav1.Duration `json:"backoffInitial"`
	BackoffMax     metav1.Duration `json:"backoffMax"`
	// Image garbage collection, the kubelet's keys and defaults (85, 80,
	// 2m): at or above the high percentage of image filesystem usage,
	// unused images are removed (least recently used first) down to the
	// low one; images seen for less than the minimum age are kept. 100
	// turns the periodic collection off; disk evictions still remove
	// unused images first.
	ImageGCHighThresholdPercent int32           `json:"imageGCHighThresholdPercent"`
	ImageGCLowThresholdPercent  int32           `json:"imageGCLowThresholdPercent"`
	ImageMinimumGCAge           metav1.Duration `json:"imageMinimumGCAge"`
	// Network is the pod network whose CNI configuration nodeguard
	// writes for the runtime and checks every sandbox against.
	Network networkConfig `json:"network"`
	// Volumes configures pod volumes.
	Volumes volumesConfig `json:"volumes"`
	// Eviction configures the eviction manager: the kubelet's eviction
	// fields (evictionHard, evictionSoft, ...) plus PSI rules.
	Eviction evictionConfig `json:"eviction"`
	// Logging: level and format (the --log-level and --log-format flags
	// override them).
	Logging loggingConfig `json:"logging"`
	// Kernel: the eBPF event pipeline.
	Kernel kernelConfig `json:"kernel"`
}

// kernelConfig is the kernel section: the eBPF pipeline's sizes. Loss is
// counted, never silent (nodeguard_bpf_ring_lost_total); decisions come
// from snapshots and tripwires, so a ring that overflows costs attribution
// and wake-ups, not evictions.
// nodeAuthentication is the kubelet's authentication key, its x509 part.
type nodeAuthentication struct {
	X509 nodeX509 `json:"x509"`
}

type nodeX509 struct {
	ClientCAFile string `json:"clientCAFile"`
}

type kernelConfig struct {
	// BPF off senses from PSI and cgroup statistics only.
	BPF bool `json:"bpf"`
	// RingSizeBytes per ring (oom, reclaim, lifecycle): a power of two,
	// at least one page.
	RingSizeBytes int `json:"ringSizeBytes"`
	// QueueSize bounds the decoded events waiting for the Go core.
	QueueSize int `json:"queueSize"`
}

// loggingConfig is the logging section; SIGHUP applies it.
type loggingConfig struct {
	Level  string `json:"level"`  // debug, info, warn, error
	Format string `json:"format"` // text or json
}

// networkConfig is the pod network section.
type networkConfig struct {
	// Manage: nodeguard writes the conflist into cniConfDir at start-up
	// (validated with libcni first), verifies every sandbox's veth, IP and
	// route through netlink, and collects leaked IPs, veths and netns.
	Manage     bool     `json:"manage"`
	Name       string   `json:"name"`
	Bridge     string   `json:"bridge"`
	Subnet     string   `json:"subnet"` // empty: sized for maxPods
	MaxPods    int      `json:"maxPods"`
	CNIBinDirs []string `json:"cniBinDirs"`
	CNIConfDir string   `json:"cniConfDir"`
	IPAMDir    string   `json:"ipamDir"`
	// NodeNetNS is the network namespace the runtime plumbs pods from
	// (empty: nodeguard's own); NetNSDirs where it keeps pod netns files.
	NodeNetNS string   `json:"nodeNetNS"`
	NetNSDirs []string `json:"netnsDirs"`
}

// volumesConfig is the volumes section.
type volumesConfig struct {
	// HostPathAllow lists the absolute path prefixes hostPath volumes may
	// name; empty refuses every hostPath volume.
	HostPathAllow []string `json:"hostPathAllow"`
	// SourceDir holds configMaps and secrets: SourceDir/configmaps/<ns>/<name>/<key>
	// and SourceDir/secrets/<ns>/<name>/<key>.
	SourceDir string `json:"sourceDir"`
}

// defaultRunConfig is the configuration without a file: every default is
// written out, except two that depend on other fields or keep the
// kubelet's meaning of "not set": network.subnet (empty: sized for
// maxPods) and network.ipamDir (empty: <rootDir>/cni/networks), and
// eviction.evictionHard (nil: the kubelet's defaults, see effective; a map
// given in a file replaces them rather than merging, as in the kubelet).
func defaultRunConfig() runConfig {
	nd := netplumb.DefaultConfig()
	return runConfig{
		RootDir: "/var/lib/nodeguard",
		// The kubelet's defaults: /kubepods with cgroupfs,
		// /kubepods.slice with systemd. Absolute, so that the containers
		// land where nodeguard limits and watches whatever cgroup the
		// runtime runs in.
		CgroupDriver:   string(kubepods.Cgroupfs),
		CgroupRoot:     "/",
		APISocket:      DefaultAPISocket,
		MetricsAddr:    DefaultMetricsAddr,
		BackoffInitial: metav1.Duration{Duration: lifecycle.DefaultBackoffInitial},
		BackoffMax:     metav1.Duration{Duration: lifecycle.DefaultBackoffMax},
		// The kubelet's defaults.
		ContainerLogMaxSize:  *resource.NewQuantity(logs.DefaultMaxSize, resource.BinarySI),
		ContainerLogMaxFiles: logs.DefaultMaxFiles,

		ImageGCHighThresholdPercent: lifecycle.DefaultImageGCHighThresholdPercent,
		ImageGCLowThresholdPercent:  lifecycle.DefaultImageGCLowThresholdPercent,
		ImageMinimumGCAge:           metav1.Duration{Duration: lifecycle.DefaultImageMinimumGCAge},
		Network: networkConfig{Manage: true, Name: nd.Name, Bridge: nd.Bridge, MaxPods: nd.MaxPods,
			CNIBinDirs: slices.Clone(nd.BinDirs), CNIConfDir: nd.ConfDir, NetNSDirs: []string{"/var/run/netns"}},
		Volumes: volumesConfig{SourceDir: "/etc/nodeguard/sources"},
		Eviction: evictionConfig{
			ThresholdConfig:                  oom.ThresholdConfig{EnforceNodeAllocatable: []string{"pods"}},
			EvictionPressureTransitionPeriod: metav1.Duration{Duration: oom.DefaultPressureTransitionPeriod},
			Tick:                             metav1.Duration{Duration: oom.DefaultTick},
		},
		Logging: loggingConfig{Level: "info", Format: "text"},
		Kernel:  kernelConfig{BPF: true, RingSizeBytes: loader.DefaultRingSize, QueueSize: loader.DefaultQueueSize},
	}
}

// effective is c with the defaults that stay implicit in the struct
// written out: what `nodeguard config defaults` prints.
func (c runConfig) effective() runConfig {
	if c.Eviction.EvictionHard == nil {
		c.Eviction.EvictionHard = oom.DefaultEvictionHard()
	}
	return c
}

// imageGCPolicy is the image collector's policy from the kubelet's keys.
func (c runConfig) imageGCPolicy() lifecycle.ImageGCPolicy {
	return lifecycle.ImageGCPolicy{
		HighThresholdPercent: int(c.ImageGCHighThresholdPercent),
		LowThresholdPercent:  int(c.ImageGCLowThresholdPercent),
		MinAge:               c.ImageMinimumGCAge.Duration,
	}
}

// netplumb turns the network section into the package's configuration.
func (n networkConfig) netplumb(rootDir string) (netplumb.Config, error) {
	c := netplumb.DefaultConfig()
	if n.Name != "" {
		c.Name = n.Name
	}
	if n.Bridge != "" {
		c.Bridge = n.Bridge
	}
	if n.Subnet != "" {
		p, err := netip.ParsePrefix(n.Subnet)
		if err != nil {
			return c, fmt.Errorf("network.subnet: %q: %w", n.Subnet, err)
		}
		c.Subnet = p
	}
	if n.MaxPods != 0 {
		c.MaxPods = n.MaxPods
	}
	if len(n.CNIBinDirs) > 0 {
		c.BinDirs = n.CNIBinDirs
	}
	if n.CNIConfDir != "" {
		c.ConfDir = n.CNIConfDir
	}
	c.IPAMDir = filepath.Join(rootDir, "cni", "networks")
	if n.IPAMDir != "" {
		c.IPAMDir = n.IPAMDir
	}
	c.CacheDir = filepath.Join(rootDir, "cni", "cache")
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("network: %w", err)
	}
	return c, nil
}

// Validate names the first bad field.
func (c runConfig) Validate() error {
	if r := c.Kernel.RingSizeBytes; r < os.Getpagesize() || r&(r-1) != 0 {
		return fmt.Errorf("kernel.ringSizeBytes: %d: want a power of two of at least %d (one page)", r, os.Getpagesize())
	}
	if c.Kernel.QueueSize < 1 {
		return fmt.Errorf("kernel.queueSize: %d: want at least 1", c.Kernel.QueueSize)
	}
	switch {
	case c.RootDir == "" || !filepath.IsAbs(c.RootDir):
		return fmt.Errorf("rootDir: %q: want an absolute path", c.RootDir)
	case c.CgroupRoot == "":
		return errors.New("cgroupRoot: required (/ on a node)")
	case c.APISocket == "" || !filepath.IsAbs(c.APISocket):
		return fmt.Errorf("apiSocket: %q: want an absolute path", c.APISocket)
	case c.EnableProfiling && c.MetricsAddr == "":
		return errors.New("enableProfiling: true needs metricsAddr: profiles are served beside /metrics")
	case c.PodManifestPath != "" && !filepath.IsAbs(c.PodManifestPath):
		return fmt.Errorf("podManifestPath: %q: want an absolute path", c.PodManifestPath)
	case c.BackoffInitial.Duration < 0 || c.BackoffMax.Duration < 0:
		return fmt.Errorf("backoffInitial/backoffMax: negative durations %v/%v", c.BackoffInitial.Duration, c.BackoffMax.Duration)
	case c.BackoffMax.Duration > 0 && c.BackoffInitial.Duration > c.BackoffMax.Duration:
		return fmt.Errorf("backoffInitial: %v is above backoffMax %v", c.BackoffInitial.Duration, c.BackoffMax.Duration)
	}
	if c.ClusterDomain != "" {
		if errs := validation.IsDNS1123Subdomain(c.ClusterDomain); len(errs) > 0 {
			return fmt.Errorf("clusterDomain: %q: %s", c.ClusterDomain, strings.Join(errs, "; "))
		}
	}
	if err := c.validateNode(); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(c.NodeLabels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("nodeLabels: key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(c.NodeLabels[k]); len(errs) > 0 {
			return fmt.Errorf("nodeLabels[%s]: %q: %s", k, c.NodeLabels[k], strings.Join(errs, "; "))
		}
	}
	for i, p := range c.AllowedUnsafeSysctls {
		if err := podspec.CheckUnsafeSysctlPattern(p); err != nil {
			return fmt.Errorf("allowedUnsafeSysctls[%d]: %w", i, err)
		}
	}
	if err := c.containerLogPolicy().Validate(); err != nil {
		return err
	}
	d, err := kubepods.ParseDriver(c.CgroupDriver)
	if err != nil {
		return fmt.Errorf("cgroupDriver: %q: %w: want %q or %q", c.CgroupDriver, kubepods.ErrUnknownDriver, kubepods.Cgroupfs, kubepods.Systemd)
	}
	if d == kubepods.Systemd && !filepath.IsAbs(c.CgroupRoot) {
		return fmt.Errorf("cgroupRoot: %q: the systemd driver needs an absolute root (/ on a node): slices are absolute", c.CgroupRoot)
	}
	if _, err := kubepods.Name(d, c.CgroupRoot); err != nil {
		return fmt.Errorf("cgroupRoot: %q: %w", c.CgroupRoot, err)
	}
	if _, err := c.Network.netplumb(c.RootDir); err != nil {
		return err
	}
	if err := c.imageGCPolicy().Validate(); err != nil {
		return err
	}
	if _, err := c.Eviction.policy(); err != nil {
		return err
	}
	for i, d := range c.Network.NetNSDirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("network.netnsDirs[%d]: %q: want an absolute path", i, d)
		}
	}
	if c.Network.NodeNetNS != "" && !filepath.IsAbs(c.Network.NodeNetNS) {
		return fmt.Errorf("network.nodeNetNS: %q: want an absolute path", c.Network.NodeNetNS)
	}
	for i, d := range c.Volumes.HostPathAllow {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d {
			return fmt.Errorf("volumes.hostPathAllow[%d]: %q: want a clean absolute path", i, d)
		}
	}
	if c.ImageCredentialsFile != "" && !filepath.IsAbs(c.ImageCredentialsFile) {
		return fmt.Errorf("imageCredentialsFile: %q: want an absolute path", c.ImageCredentialsFile)
	}
	if c.Volumes.SourceDir != "" && !filepath.IsAbs(c.Volumes.SourceDir) {
		return fmt.Errorf("volumes.sourceDir: %q: want an absolute path", c.Volumes.SourceDir)
	}
	if _, err := logging.ParseLevel(c.Logging.Level); err != nil {
		return fmt.Errorf("logging.%w", err)
	}
	if _, err := logging.ParseFormat(c.Logging.Format); err != nil {
		return fmt.Errorf("logging.%w", err)
	}
	if c.Eviction.Tick.Duration < 0 {
		return fmt.Errorf("eviction.tick: %v is negative", c.Eviction.Tick.Duration)
	}
	for _, name := range []string{"systemReserved", "kubeReserved"} {
		l := map[string]corev1.ResourceList{"systemReserved": c.SystemReserved, "kubeReserved": c.KubeReserved}[name]
		for _, r := range slices.Sorted(maps.Keys(l)) {
			q := l[r]
			if r != corev1.ResourceMemory && r != corev1.ResourceCPU && r != "pid" {
				return fmt.Errorf("%s.%s: unsupported resource (memory, cpu, pid)", name, r)
			}
			if q.Sign() < 0 {
				return fmt.Errorf("%s.%s: %s is negative", name, r, q.String())
			}
		}
	}
	// Last: a file meant for --private-runtime (or with the endpoint on
	// the command line) has none, and a bad value elsewhere in it must
	// still be named.
	if c.RuntimeEndpoint == "" {
		return errors.New("runtimeEndpoint: required (the CRI socket, e.g. unix:///run/containerd/containerd.sock), or --private-runtime")
	}
	return nil
}

// containerLogPolicy is the log rotation of containerLogMaxSize and
// containerLogMaxFiles.
func (c runConfig) containerLogPolicy() logs.Policy {
	return logs.Policy{MaxSize: c.ContainerLogMaxSize.Value(), MaxFiles: c.ContainerLogMaxFiles}
}

// loadRunConfig reads the file at path over the defaults (no path: the
// defaults). Keys it does not know and values that do not parse are
// errors that name them; Validate checks the rest.
func loadRunConfig(path string) (runConfig, error) {
	cfg := defaultRunConfig()
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	return parseRunConfig(b, path)
}

// parseRunConfig decodes the configuration file b over the defaults; path
// names the file in errors. It reads nothing else: FuzzConfig runs it.
func parseRunConfig(b []byte, path string) (runConfig, error) {
	cfg := defaultRunConfig()
	// Quantities first, so that a bad one is named with its field (the
	// decoder's own error names neither).
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	for _, key := range []string{"systemReserved", "kubeReserved"} {
		m, ok := raw[key].(map[string]any)
		if !ok {
			continue
		}
		for _, r := range slices.Sorted(maps.Keys(m)) {
			v := m[r]
			if _, err := resource.ParseQuantity(fmt.Sprint(v)); err != nil {
				return cfg, fmt.Errorf("config %s: %s.%s: invalid quantity %q: %w", path, key, r, fmt.Sprint(v), err)
			}
		}
	}
	// Then every key and value against its field, so that an unknown key
	// or a bad value is named with its full path (the decoder names
	// neither a nested key's section nor a duration's field).
	if err := checkFields(raw, reflect.TypeFor[runConfig](), ""); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// checkFields checks the decoded YAML raw against the struct type t: every
// key must name a field (by its json tag, embedded structs' fields
// included), a section must be a mapping, and every other value must
// decode into its field's type. Keys are visited in sorted order, so the
// error is the same every time.
func checkFields(raw map[string]any, t reflect.Type, prefix string) error {
	fields := map[string]reflect.StructField{}
	jsonFields(t, fields)
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		path := prefix + k
		f, ok := fields[k]
		if !ok {
			return fmt.Errorf("%s: unknown field", path)
		}
		v := raw[k]
		if v == nil {
			continue // null: the zero value
		}
		if isSection(f.Type) {
			m, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: want a mapping of its fields, got %s", path, describeYAML(v))
			}
			if err := checkFields(m, f.Type, path+"."); err != nil {
				return err
			}
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := json.Unmarshal(b, reflect.New(f.Type).Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return fmt.Errorf("%s: invalid value %s: want %s", path, b, describeType(f.Type))
			}
			return fmt.Errorf("%s: invalid value %s: %w", path, b, err)
		}
	}
	return nil
}

// jsonFields collects t's fields by JSON name, promoting those of embedded
// structs without a name (as encoding/json does).
func jsonFields(t reflect.Type, out map[string]reflect.StructField) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			jsonFields(f.Type, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f
	}
}

// isSection: a struct decoded field by field (not a value type with its
// own decoder, such as metav1.Duration).
func isSection(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]())
}

// describeYAML names the kind of a decoded YAML value.
func describeYAML(v any) string {
	switch v.(type) {
	case []any:
		return "a list"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}

// describeType names what a field takes, in YAML's words.
func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(describeType(t.Elem()), "a ")
	case reflect.Map:
		return "a mapping"
	}
	return t.String()
}

// configPath is the file `run` reads: --config when given, else
// DefaultConfigPath when it exists, else none (the defaults and flags).
func configPath(flag string, given bool) (string, error) {
	return configPathFor(flag, given, DefaultConfigPath)
}

// configPathFor is configPath with def as the default file (nodeguard
// guard's is DefaultGuardConfigPath).
func configPathFor(flag string, given bool, def string) (string, error) {
	if given {
		if flag == "" {
			return "", errors.New("--config: empty path")
		}
		return flag, nil
	}
	if _, err := os.Stat(def); err == nil {
		return def, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("default config %s: %w", def, err)
	}
	return "", nil
}

// nodeLabels are the node's labels: the standalone kubelet's of this
// machine with NodeLabels over them; nil (lifecycle's default, the same
// standalone labels) when none are configured.
func (c runConfig) nodeLabels() (map[string]string, error) {
	if len(c.NodeLabels) == 0 {
		return nil, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("nodeLabels: %w", err)
	}
	labels := lifecycle.StandaloneNodeLabels(h)
	maps.Copy(labels, c.NodeLabels)
	return labels, nil
}

// reloadable lists what SIGHUP applies: the logging section and the
// eviction policy. The eviction manager's own knobs (tick, dryRun, exempt,
// disabled) and every other section are read once, at start-up.
var reloadable = map[string]bool{
	"logging":                                   true,
	"eviction.evictionHard":                     true,
	"eviction.evictionSoft":                     true,
	"eviction.evictionSoftGracePeriod":          true,
	"eviction.evictionMinimumReclaim":           true,
	"eviction.enforceNodeAllocatable":           true,
	"eviction.evictionPressureTransitionPeriod": true,
	"eviction.evictionMaxPodGracePeriod":        true,
	"eviction.psiRules":                         true,
	"eviction.coolDown":                         true,
}

// configChanges compares two configurations field by field, as their
// YAML keys: top-level keys, and eviction.<key> within the eviction
// section. It returns the changed keys, sorted, split into those SIGHUP
// applies and those that need a restart. A key unknown to reloadable
// needs a restart, so a field added later is never silently ignored.
func configChanges(old, cur runConfig) (apply, restart []string, err error) {
	a, err := configKeys(old)
	if err != nil {
		return nil, nil, err
	}
	b, err := configKeys(cur)
	if err != nil {
		return nil, nil, err
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if reflect.DeepEqual(a[k], b[k]) {
			continue
		}
		if reloadable[k] {
			apply = append(apply, k)
		} else {
			restart = append(restart, k)
		}
	}
	return apply, restart, nil
}

// configKeys flattens c into its top-level keys and eviction.<key>.
func configKeys(c runConfig) (map[string]any, error) {
	b, err := yaml.Marshal(c.effective())
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if ev, ok := m["eviction"].(map[string]any); ok {
		delete(m, "eviction")
		for k, v := range ev {
			m["eviction."+k] = v
		}
	}
	return m, nil
}

// withReloaded is old with what SIGHUP applies taken from cur: the
// configuration in force after a reload.
func withReloaded(old, cur runConfig) runConfig {
	out := old
	out.Logging = cur.Logging
	e := &out.Eviction
	e.ThresholdConfig = cur.Eviction.ThresholdConfig
	e.EvictionPressureTransitionPeriod = cur.Eviction.EvictionPressureTransitionPeriod
	e.EvictionMaxPodGracePeriod = cur.Eviction.EvictionMaxPodGracePeriod
	e.PSIRules = cur.Eviction.PSIRules
	e.CoolDown = cur.Eviction.CoolDown
	return out
}

// newConfigCmd is `nodeguard config`: check a file, print the defaults.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Check a configuration file, or print the default configuration",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Load and validate FILE as `nodeguard run --config FILE` would; print ok or the first bad field",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkConfigFile(args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}, &cobra.Command{
		Use:   "defaults",
		Short: "Print the default configuration as YAML",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := yaml.Marshal(defaultRunConfig().effective())
			if err != nil {
				return fmt.Errorf("encode defaults: %w", err)
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	})
	return cmd
}

// checkConfigFile loads and validates path: the error names the field and
// its value.
func checkConfigFile(path string) error {
	cfg, err := loadRunConfig(path)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// describeThresholds renders a policy's thresholds and rules for one log
// line: "memory.available<100Mi,nodefs.available<10%".
func describeThresholds(p oom.PolicyConfig) (thresholds, rules string) {
	var ts, rs []string
	for _, t := range p.Thresholds {
		kind := ""
		if !t.Hard() {
			kind = "(soft " + t.GracePeriod.String() + ")"
		}
		ts = append(ts, t.String()+kind)
	}
	for _, r := range p.PSIRules {
		rs = append(rs, r.String())
	}
	return strings.Join(ts, ","), strings.Join(rs, ",")
}
