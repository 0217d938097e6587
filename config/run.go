package config

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/internal/logging"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/imagegc"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/netplumb"
)

// DefaultPath is the configuration `nodeguard run` reads when --config is
// not given and the file exists (the systemd unit names it explicitly).
const DefaultPath = "/etc/nodeguard/config.yaml"

// DefaultAPISocket is where the local API listens.
const DefaultAPISocket = api.DefaultSocket

// DefaultMetricsAddr is loopback only: a node agent's metrics are scraped
// by a local or sidecar Prometheus unless the operator opens them up.
const DefaultMetricsAddr = "127.0.0.1:9847"

// Run is the configuration file of `nodeguard run` (YAML); its flags
// override it.
type Run struct {
	// RuntimeEndpoint is the CRI socket of the container runtime, e.g.
	// unix:///run/containerd/containerd.sock. Required (no default), or
	// --private-runtime.
	// Kubelet: containerRuntimeEndpoint.
	RuntimeEndpoint string `json:"runtimeEndpoint"`
	// RootDir is nodeguard's state directory: pod logs, API pods, volumes,
	// the state store. Absolute.
	// Kubelet: --root-dir.
	RootDir string `json:"rootDir"`
	// CgroupDriver is how pod cgroups are made and named: "cgroupfs"
	// (directories nodeguard makes) or "systemd" (slices systemd makes
	// over D-Bus). Empty (the default) is the runtime's, as it reports it
	// through CRI RuntimeConfig (containerd 2.0 and later; containerd's
	// SystemdCgroup), else cgroupfs; a driver set here must be the
	// runtime's, and a runtime that reports another is refused at start.
	// Kubelet: cgroupDriver.
	CgroupDriver string `json:"cgroupDriver"`
	// CgroupRoot is where kubepods goes beneath. Absolute on a node ("/");
	// relative (beneath nodeguard's own cgroup) only for the private test
	// runtime.
	// Kubelet: cgroupRoot.
	CgroupRoot string `json:"cgroupRoot"`
	// PodManifestPath is a directory of static pod manifests, watched.
	// Empty: none.
	// Kubelet: staticPodPath.
	PodManifestPath string `json:"podManifestPath"`
	// APISocket is the local API's Unix socket (root only): nodeguard pod,
	// nodeguard events.
	// Kubelet: none.
	APISocket string `json:"apiSocket"`
	// MetricsAddr is where /metrics is served (Prometheus text format).
	// Empty: off.
	// Kubelet: none (the kubelet serves /metrics on its HTTPS port).
	MetricsAddr string `json:"metricsAddr"`
	// EnableProfiling serves Go's /debug/pprof/ beside /metrics; off by
	// default.
	// Kubelet: enableProfilingHandler.
	EnableProfiling bool `json:"enableProfiling"`
	// PriorityClasses maps priorityClassName to priority, for the pods
	// that name a class (system-node-critical and system-cluster-critical
	// are built in).
	// Kubelet: none (the API server's PriorityClass objects).
	PriorityClasses map[string]int32 `json:"priorityClasses"`
	// AllowPrivileged admits privileged containers; off, a pod asking for
	// one is refused at admission.
	// Kubelet: none (the removed --allow-privileged).
	AllowPrivileged bool `json:"allowPrivileged"`
	// AllowedUnsafeSysctls lets pods set sysctls beyond the kubelet's
	// safe set: names or prefixes ending in '*' ("net.core.*"). Only
	// namespaced sysctls can be allowed.
	// Kubelet: allowedUnsafeSysctls.
	AllowedUnsafeSysctls []string `json:"allowedUnsafeSysctls"`
	// ClusterDomain gives a pod with a hostname and a subdomain its FQDN,
	// <hostname>.<subdomain>.<namespace>.svc.<clusterDomain>, in its
	// /etc/hosts. Empty: no FQDN, as a kubelet without one.
	// Kubelet: clusterDomain.
	ClusterDomain string `json:"clusterDomain"`
	// NodeLabels are added to the labels a standalone kubelet gives its
	// node (hostname, os and arch, which they may override): a pod whose
	// nodeSelector they do not match is rejected (NodeAffinity).
	// Kubelet: --node-labels.
	NodeLabels map[string]string `json:"nodeLabels"`
	// Kubeconfig joins a Kubernetes cluster as its node agent (node
	// mode): the Node is registered and its status and Lease kept.
	// Empty: standalone.
	// Kubelet: --kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// NodeName overrides the node's name (the lower-cased hostname).
	// Kubelet: --hostname-override.
	NodeName string `json:"nodeName"`
	// NodeIP is the node's address, or two (IPv4 and IPv6) separated by a
	// comma: status.hostIP(s), and the Node's InternalIP. Empty: found
	// from the hostname and interfaces.
	// Kubelet: --node-ip.
	NodeIP string `json:"nodeIP"`
	// RegisterWithTaints are the taints the Node is registered with, each
	// {key, value, effect}.
	// Kubelet: registerWithTaints.
	RegisterWithTaints []corev1.Taint `json:"registerWithTaints"`
	// Address is where the node's HTTPS endpoint listens in node mode,
	// the API server's way to logs, exec, attach and port-forward. Empty:
	// every address (the kubelet's 0.0.0.0, IPv6 too).
	// Kubelet: address.
	Address string `json:"address"`
	// Port is the node's HTTPS endpoint's port, advertised in the Node's
	// daemonEndpoints. 0: 10250.
	// Kubelet: port.
	Port int32 `json:"port"`
	// TLSCertFile is the HTTPS endpoint's serving certificate (with
	// tlsPrivateKeyFile). Empty: a self-signed one made in <rootDir>/pki,
	// which an API server that verifies kubelets' certificates
	// (--kubelet-certificate-authority) refuses.
	// Kubelet: tlsCertFile.
	TLSCertFile string `json:"tlsCertFile"`
	// TLSPrivateKeyFile is the key of tlsCertFile.
	// Kubelet: tlsPrivateKeyFile.
	TLSPrivateKeyFile string `json:"tlsPrivateKeyFile"`
	// ServerTLSBootstrap asks the API server for the endpoint's serving
	// certificate instead: a CertificateSigningRequest of the
	// kubernetes.io/kubelet-serving signer, which someone must approve
	// (kubectl certificate approve); the issued pair is kept in
	// <rootDir>/pki and renewed before it expires. Excludes tlsCertFile.
	// Kubelet: serverTLSBootstrap.
	ServerTLSBootstrap bool `json:"serverTLSBootstrap"`
	// Authentication is how the HTTPS endpoint's callers are known: by
	// client certificates of authentication.x509.clientCAFile (the API
	// server's --kubelet-client-certificate); each user is then authorized
	// by the API server (SubjectAccessReview of nodes/proxy).
	Authentication Authentication `json:"authentication"`
	// SystemReserved (e.g. {memory: 512Mi, cpu: 500m}; memory, cpu and pid)
	// is taken off the node's capacity; the rest, node allocatable, is
	// enforced on kubepods as the kubelet's enforceNodeAllocatable=pods.
	// Kubelet: systemReserved.
	SystemReserved corev1.ResourceList `json:"systemReserved"`
	// KubeReserved is taken off the node's capacity as systemReserved is.
	// Kubelet: kubeReserved.
	KubeReserved corev1.ResourceList `json:"kubeReserved"`
	// ImagePull lets the runtime pull images as each container's
	// imagePullPolicy says: on by default, the kubelet's behaviour. Off,
	// nothing is pulled, a missing image fails its container clearly
	// (ErrImagePull), and imagePullPolicy Always is refused at admission:
	// for a node without a registry (the demo and the tests, whose images
	// are built locally, turn it off).
	// Kubelet: none (the kubelet always pulls).
	ImagePull bool `json:"imagePull"`
	// ImageCredentialsFile is the node's own registry credentials, a
	// docker config.json ({"auths": {...}}) or legacy .dockercfg, as the
	// kubelet's config.json lookup reads: used for the images that no
	// imagePullSecret of the pod has credentials for, after the pod's.
	// Read at each pull. None when empty.
	// Kubelet: none (the kubelet's config.json in its root directory).
	ImageCredentialsFile string `json:"imageCredentialsFile"`
	// ContainerLogMaxSize bounds each container's log file: containerd
	// never rotates; nodeguard renames the live file when it reaches this
	// size.
	// Kubelet: containerLogMaxSize.
	ContainerLogMaxSize resource.Quantity `json:"containerLogMaxSize"`
	// ContainerLogMaxFiles is how many files of a container's log are
	// kept, the live one included (at least 2).
	// Kubelet: containerLogMaxFiles.
	ContainerLogMaxFiles int `json:"containerLogMaxFiles"`
	// BackoffInitial is the first container restart back-off, doubled at
	// each crash up to backoffMax.
	// Kubelet: none (the kubelet's fixed 10s).
	BackoffInitial metav1.Duration `json:"backoffInitial"`
	// BackoffMax caps the container restart back-off.
	// Kubelet: crashLoopBackOff.maxContainerRestartPeriod.
	BackoffMax metav1.Duration `json:"backoffMax"`
	// ImageGCHighThresholdPercent: at or above this percentage of image
	// filesystem usage, unused images are removed (least recently used
	// first) down to imageGCLowThresholdPercent. 100 turns the periodic
	// collection off; disk evictions still remove unused images first.
	// Kubelet: imageGCHighThresholdPercent.
	ImageGCHighThresholdPercent int32 `json:"imageGCHighThresholdPercent"`
	// ImageGCLowThresholdPercent is the usage image collection frees down
	// to.
	// Kubelet: imageGCLowThresholdPercent.
	ImageGCLowThresholdPercent int32 `json:"imageGCLowThresholdPercent"`
	// ImageMinimumGCAge: images seen for less than this are kept.
	// Kubelet: imageMinimumGCAge.
	ImageMinimumGCAge metav1.Duration `json:"imageMinimumGCAge"`
	// Network is the pod network whose CNI configuration nodeguard
	// writes for the runtime and checks every sandbox against.
	Network Network `json:"network"`
	// Volumes configures pod volumes.
	Volumes Volumes `json:"volumes"`
	// Eviction configures the eviction manager: the kubelet's eviction
	// fields plus PSI rules and nodeguard's own knobs. SIGHUP applies the
	// thresholds, PSI rules, periods and cool-down.
	Eviction Eviction `json:"eviction"`
	// Logging is the log level and format (the --log-level and
	// --log-format flags override them); SIGHUP applies it.
	Logging Logging `json:"logging"`
	// Kernel is the eBPF event pipeline.
	Kernel Kernel `json:"kernel"`
}

// Authentication is the authentication section, its x509 part.
type Authentication struct {
	// X509 authenticates callers by client certificate.
	X509 X509 `json:"x509"`
}

// X509 is authentication.x509.
type X509 struct {
	// ClientCAFile is the CA bundle client certificates are verified
	// against. Empty: every request to the HTTPS endpoint is refused.
	// Kubelet: authentication.x509.clientCAFile.
	ClientCAFile string `json:"clientCAFile"`
}

// Kernel is the kernel section: the eBPF pipeline's sizes. Loss is
// counted, never silent (nodeguard_bpf_ring_lost_total); decisions come
// from snapshots and tripwires, so a ring that overflows costs attribution
// and wake-ups, not evictions.
type Kernel struct {
	// BPF loads the eBPF programs; off, nodeguard senses from PSI and
	// cgroup statistics only.
	// Kubelet: none.
	BPF bool `json:"bpf"`
	// RingSizeBytes is the size of each ring buffer (oom, reclaim,
	// lifecycle): a power of two, at least one page.
	// Kubelet: none.
	RingSizeBytes int `json:"ringSizeBytes"`
	// QueueSize bounds the decoded events waiting for the Go core; an
	// event that finds it full is dropped and counted.
	// Kubelet: none.
	QueueSize int `json:"queueSize"`
}

// Logging is the logging section; SIGHUP applies it.
type Logging struct {
	// Level is debug, info, warn or error.
	// Kubelet: logging.verbosity.
	Level string `json:"level"`
	// Format is text or json.
	// Kubelet: logging.format.
	Format string `json:"format"`
}

// Network is the pod network section.
type Network struct {
	// Manage: nodeguard writes the conflist into cniConfDir at start-up
	// (validated with libcni first), verifies every sandbox's veth, IP and
	// route through netlink, and collects leaked IPs, veths and netns.
	// Kubelet: none (the runtime's CNI configuration is the operator's).
	Manage bool `json:"manage"`
	// Name is the CNI network's name in the conflist.
	// Kubelet: none.
	Name string `json:"name"`
	// Bridge is the Linux bridge pods are attached to (at most 15 bytes).
	// Kubelet: none.
	Bridge string `json:"bridge"`
	// Subnet is the pods' IPv4 range. Empty: sized for maxPods.
	// Kubelet: podCIDR.
	Subnet string `json:"subnet"`
	// MaxPods is how many pods the node runs at most, advertised as its
	// pods capacity.
	// Kubelet: maxPods.
	MaxPods int `json:"maxPods"`
	// CNIBinDirs are where the CNI plugins are looked up, in order.
	// Kubelet: none (the runtime's bin_dir).
	CNIBinDirs []string `json:"cniBinDirs"`
	// CNIConfDir is where the runtime reads the conflist.
	// Kubelet: none (the runtime's conf_dir).
	CNIConfDir string `json:"cniConfDir"`
	// IPAMDir is the host-local IPAM's state. Empty: <rootDir>/cni/networks.
	// Kubelet: none.
	IPAMDir string `json:"ipamDir"`
	// NodeNetNS is the network namespace the runtime plumbs pods from.
	// Empty: nodeguard's own.
	// Kubelet: none.
	NodeNetNS string `json:"nodeNetNS"`
	// NetNSDirs are where the runtime keeps pod network namespace files,
	// collected when leaked.
	// Kubelet: none.
	NetNSDirs []string `json:"netnsDirs"`
}

// Volumes is the volumes section.
type Volumes struct {
	// HostPathAllow lists the absolute path prefixes hostPath volumes may
	// name; empty refuses every hostPath volume.
	// Kubelet: none (admission's business on a cluster).
	HostPathAllow []string `json:"hostPathAllow"`
	// SourceDir holds configMaps and secrets:
	// <sourceDir>/configmaps/<namespace>/<name>/<key> and
	// <sourceDir>/secrets/<namespace>/<name>/<key>.
	// Kubelet: none (the API server's objects).
	SourceDir string `json:"sourceDir"`
}

// Default is the configuration without a file: every default is written
// out, except those that depend on other fields or keep the kubelet's
// meaning of "not set": network.subnet (empty: sized for maxPods),
// network.ipamDir (empty: <rootDir>/cni/networks), and
// eviction.evictionHard (nil: the kubelet's defaults, see Effective; a map
// given in a file replaces them rather than merging, as in the kubelet).
func Default() Run {
	nd := netplumb.DefaultConfig()
	return Run{
		RootDir: "/var/lib/nodeguard",
		// The kubelet's defaults: /kubepods with cgroupfs,
		// /kubepods.slice with systemd. Absolute, so that the containers
		// land where nodeguard limits and watches whatever cgroup the
		// runtime runs in.
		CgroupDriver:   "",
		CgroupRoot:     "/",
		APISocket:      DefaultAPISocket,
		MetricsAddr:    DefaultMetricsAddr,
		BackoffInitial: metav1.Duration{Duration: lifecycle.DefaultBackoffInitial},
		BackoffMax:     metav1.Duration{Duration: lifecycle.DefaultBackoffMax},
		// The kubelet's defaults.
		ContainerLogMaxSize:  *resource.NewQuantity(logs.DefaultMaxSize, resource.BinarySI),
		ContainerLogMaxFiles: logs.DefaultMaxFiles,
		ImagePull:            true,

		ImageGCHighThresholdPercent: imagegc.DefaultHighThresholdPercent,
		ImageGCLowThresholdPercent:  imagegc.DefaultLowThresholdPercent,
		ImageMinimumGCAge:           metav1.Duration{Duration: imagegc.DefaultMinimumAge},
		Network: Network{Manage: true, Name: nd.Name, Bridge: nd.Bridge, MaxPods: nd.MaxPods,
			CNIBinDirs: slices.Clone(nd.BinDirs), CNIConfDir: nd.ConfDir, NetNSDirs: []string{"/var/run/netns"}},
		Volumes: Volumes{SourceDir: "/etc/nodeguard/sources"},
		Eviction: Eviction{
			EnforceNodeAllocatable:           []string{"pods"},
			EvictionPressureTransitionPeriod: metav1.Duration{Duration: eviction.DefaultPressureTransitionPeriod},
			Tick:                             metav1.Duration{Duration: eviction.DefaultTick},
		},
		Logging: Logging{Level: "info", Format: "text"},
		Kernel:  Kernel{BPF: true, RingSizeBytes: loader.DefaultRingSize, QueueSize: loader.DefaultQueueSize},
	}
}

// Effective is c with the defaults that stay implicit in the struct
// written out: what `nodeguard config defaults` prints.
func (c Run) Effective() Run {
	if c.Eviction.EvictionHard == nil {
		c.Eviction.EvictionHard = eviction.DefaultEvictionHard()
	}
	return c
}

// ImageGCPolicy is the image collector's policy from the kubelet's keys.
func (c Run) ImageGCPolicy() imagegc.Policy {
	return imagegc.Policy{
		HighThresholdPercent: int(c.ImageGCHighThresholdPercent),
		LowThresholdPercent:  int(c.ImageGCLowThresholdPercent),
		MinAge:               c.ImageMinimumGCAge.Duration,
	}
}

// ContainerLogPolicy is the log rotation of containerLogMaxSize and
// containerLogMaxFiles.
func (c Run) ContainerLogPolicy() logs.Policy {
	return logs.Policy{MaxSize: c.ContainerLogMaxSize.Value(), MaxFiles: c.ContainerLogMaxFiles}
}

// Labels are the node's labels: the standalone kubelet's of this machine
// with nodeLabels over them; nil (lifecycle's default, the same standalone
// labels) when none are configured.
func (c Run) Labels() (map[string]string, error) {
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

// Netplumb turns the network section into the netplumb package's
// configuration; rootDir places the IPAM state and the CNI cache.
func (n Network) Netplumb(rootDir string) (netplumb.Config, error) {
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
func (c Run) Validate() error {
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
	if err := c.ContainerLogPolicy().Validate(); err != nil {
		return err
	}
	d, err := kubepods.DriverFor(c.CgroupDriver, "")
	if err != nil {
		return fmt.Errorf("cgroupDriver: %q: %w: want %q or %q", c.CgroupDriver, kubepods.ErrUnknownDriver, kubepods.Cgroupfs, kubepods.Systemd)
	}
	if d == kubepods.Systemd && !filepath.IsAbs(c.CgroupRoot) {
		return fmt.Errorf("cgroupRoot: %q: the systemd driver needs an absolute root (/ on a node): slices are absolute", c.CgroupRoot)
	}
	if _, err := kubepods.Name(d, c.CgroupRoot); err != nil {
		return fmt.Errorf("cgroupRoot: %q: %w", c.CgroupRoot, err)
	}
	if _, err := c.Network.Netplumb(c.RootDir); err != nil {
		return err
	}
	if err := c.ImageGCPolicy().Validate(); err != nil {
		return err
	}
	if _, err := c.Eviction.Policy(); err != nil {
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
