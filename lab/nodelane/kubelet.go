package nodelane

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The real kubelet on the lane's node (kubelet_test.go): its
// configuration, rendered here, and what the check reads back of it.

// KubeletEvictionHard is the kubelet's own default evictionHard
// (pkg/kubelet/eviction/defaults_linux.go), written out in full: a
// configuration that names some signals gets no default for the others
// unless mergeDefaultEvictionSettings is set.
var KubeletEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// KubeletValues are the node-specific values of the kubelet's
// configuration.
type KubeletValues struct {
	// RuntimeEndpoint is containerd's CRI socket (unix://...).
	RuntimeEndpoint string
	// StaticPodPath is the kubelet's static pod directory (empty).
	StaticPodPath string
	// Port is the kubelet's HTTPS port: the node endpoint's port, which
	// qemu forwards from the host's loopback.
	Port int
	// ServingCert and ServingKey are its serving certificate (for
	// 127.0.0.1 and the node's name, of the cluster's CA); ClientCA
	// verifies the API server's client certificate.
	ServingCert, ServingKey, ClientCA string
}

// ErrKubeletValues reports a value KubeletConfig cannot use.
var ErrKubeletValues = errors.New("bad kubelet values")

// KubeletConfiguration is the part of the kubelet's configuration file
// (kubelet.config.k8s.io/v1beta1, as k8s.io/kubelet/config/v1beta1 names
// its fields) that the lane sets and reads back from /configz. Its own
// type, not k8s.io/kubelet's: that package pulls in component-base, which
// nothing else of the module needs.
type KubeletConfiguration struct {
	APIVersion               string            `json:"apiVersion,omitempty"`
	Kind                     string            `json:"kind,omitempty"`
	ContainerRuntimeEndpoint string            `json:"containerRuntimeEndpoint"`
	CgroupDriver             string            `json:"cgroupDriver"`
	CgroupRoot               string            `json:"cgroupRoot"`
	CgroupsPerQOS            *bool             `json:"cgroupsPerQOS,omitempty"`
	EnforceNodeAllocatable   []string          `json:"enforceNodeAllocatable,omitempty"`
	StaticPodPath            string            `json:"staticPodPath"`
	RegisterNode             *bool             `json:"registerNode,omitempty"`
	FailSwapOn               *bool             `json:"failSwapOn,omitempty"`
	EvictionHard             map[string]string `json:"evictionHard"`
	Port                     int               `json:"port"`
	ReadOnlyPort             int               `json:"readOnlyPort"`
	HealthzBindAddress       string            `json:"healthzBindAddress,omitempty"`
	TLSCertFile              string            `json:"tlsCertFile"`
	TLSPrivateKeyFile        string            `json:"tlsPrivateKeyFile"`
	ResolvConf               *string           `json:"resolvConf,omitempty"`
	Authentication           struct {
		X509 struct {
			ClientCAFile string `json:"clientCAFile"`
		} `json:"x509"`
		Webhook struct {
			Enabled *bool `json:"enabled,omitempty"`
		} `json:"webhook"`
		Anonymous struct {
			Enabled *bool `json:"enabled,omitempty"`
		} `json:"anonymous"`
	} `json:"authentication"`
	Authorization struct {
		Mode string `json:"mode"`
	} `json:"authorization"`
}

// KubeletAuthorizationMode is the mode of the kubelet's server the lane
// sets.
const KubeletAuthorizationMode = "Webhook"

// KubeletConfig renders the kubelet's configuration file for v:
// the production layout of a systemd node (cgroupDriver systemd,
// cgroupRoot "/", so pods go beneath /kubepods.slice, as containerd's
// SystemdCgroup = true places their containers), the kubelet's default
// eviction thresholds written out, a static pod directory, registerNode,
// and its server authenticated and authorized as on a kubeadm node: x509
// client certificates of the cluster's CA and bearer tokens through a
// TokenReview, no anonymous requests, and every request authorized by the
// API server (Webhook: a SubjectAccessReview, which the Node authorizer
// allows the node to create). AlwaysAllow would let anyone who reaches the
// forwarded port run exec in every pod; Webhook costs one
// SubjectAccessReview per new request, cached for 5 minutes.
// resolvConf is empty: the guest has no name server, so pods get no DNS
// configuration from the node rather than a resolver that cannot answer.
// failSwapOn stays the default (true): the guest has no swap.
func KubeletConfig(v KubeletValues) ([]byte, error) {
	if v.RuntimeEndpoint == "" || v.StaticPodPath == "" || v.ServingCert == "" || v.ServingKey == "" || v.ClientCA == "" {
		return nil, fmt.Errorf("kubelet config %+v: %w: every path is required", v, ErrKubeletValues)
	}
	if v.Port <= 0 || v.Port > 65535 {
		return nil, fmt.Errorf("kubelet config: port %d: %w", v.Port, ErrKubeletValues)
	}
	yes, no, empty := true, false, ""
	c := KubeletConfiguration{
		APIVersion:               "kubelet.config.k8s.io/v1beta1",
		Kind:                     "KubeletConfiguration",
		ContainerRuntimeEndpoint: v.RuntimeEndpoint,
		CgroupDriver:             CgroupDriver,
		CgroupRoot:               CgroupRoot,
		CgroupsPerQOS:            &yes,
		EnforceNodeAllocatable:   []string{"pods"},
		StaticPodPath:            v.StaticPodPath,
		RegisterNode:             &yes,
		EvictionHard:             maps.Clone(KubeletEvictionHard),
		Port:                     v.Port,
		ReadOnlyPort:             0,
		HealthzBindAddress:       "127.0.0.1",
		TLSCertFile:              v.ServingCert,
		TLSPrivateKeyFile:        v.ServingKey,
		ResolvConf:               &empty,
	}
	c.Authentication.X509.ClientCAFile = v.ClientCA
	c.Authentication.Webhook.Enabled = &yes
	c.Authentication.Anonymous.Enabled = &no
	c.Authorization.Mode = KubeletAuthorizationMode
	b, err := yaml.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("kubelet config: %w", err)
	}
	return b, nil
}

// KubeletArgs are the kubelet's flags: config the file KubeletConfig
// wrote, kubeconfig the node's (system:node:<name>), and
// --cloud-provider=external. The kubelet refuses a loopback node IP, yet
// 127.0.0.1 is the only address at which the API server on the host may
// reach it (qemu forwards the host's 127.0.0.1:<port>; any other address
// would be dialled through the host's default route). With an external
// cloud provider and no --node-ip, the kubelet registers the Node with its
// Hostname address only and leaves the addresses to the cloud controller,
// which the check plays: it sets InternalIP 127.0.0.1 and removes the
// uninitialized taint.
func KubeletArgs(config, kubeconfig, nodeName string) []string {
	return []string{"--config=" + config, "--kubeconfig=" + kubeconfig, "--hostname-override=" + nodeName,
		"--cloud-provider=external", "--v=1"}
}

// TaintUninitialized is the taint an external cloud provider's kubelet
// registers its Node with.
const TaintUninitialized = "node.cloudprovider.kubernetes.io/uninitialized"

// ParseConfigz parses the kubelet's /configz answer ({"kubeletconfig":
// {...}}, the configuration in effect, as JSON of v1beta1).
func ParseConfigz(b []byte) (*KubeletConfiguration, error) {
	var v struct {
		KubeletConfig *KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("parse /configz: %w: %w", ErrMalformed, err)
	}
	if v.KubeletConfig == nil {
		return nil, fmt.Errorf("parse /configz: no kubeletconfig: %w", ErrMalformed)
	}
	return v.KubeletConfig, nil
}

// ConfigzMismatches compares the kubelet's configuration in effect with
// the settings the check gave it and returns one line per difference.
func ConfigzMismatches(got *KubeletConfiguration, v KubeletValues) []string {
	var out []string
	diff := func(name string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			out = append(out, fmt.Sprintf("%s %v, want %v", name, got, want))
		}
	}
	diff("cgroupDriver", got.CgroupDriver, CgroupDriver)
	diff("cgroupRoot", got.CgroupRoot, CgroupRoot)
	diff("containerRuntimeEndpoint", got.ContainerRuntimeEndpoint, v.RuntimeEndpoint)
	diff("staticPodPath", got.StaticPodPath, v.StaticPodPath)
	diff("port", got.Port, v.Port)
	diff("authorization.mode", got.Authorization.Mode, KubeletAuthorizationMode)
	diff("authentication.anonymous.enabled", deref(got.Authentication.Anonymous.Enabled), false)
	diff("registerNode", deref(got.RegisterNode), true)
	for _, k := range slices.Sorted(maps.Keys(KubeletEvictionHard)) {
		diff("evictionHard "+k, got.EvictionHard[k], KubeletEvictionHard[k])
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return "<unset>"
	}
	return *p
}

// CheckNodeAddresses returns an error unless every address of addrs that
// the API server may dial (an IP: InternalIP or ExternalIP) is on the
// loopback: the node's endpoint is reachable only through qemu's forward
// from the host's loopback, and an API server that dialled any other
// address would send packets out of the host. It also requires an
// InternalIP (the API server's --kubelet-preferred-address-types).
func CheckNodeAddresses(addrs []corev1.NodeAddress) error {
	internal := false
	for _, a := range addrs {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			return fmt.Errorf("node address %s %q: %w", a.Type, a.Address, ErrMalformed)
		}
		if !ip.IsLoopback() {
			return fmt.Errorf("node address %s %s is not on the loopback: the API server would dial it from the host", a.Type, a.Address)
		}
		internal = internal || a.Type == corev1.NodeInternalIP
	}
	if !internal {
		return fmt.Errorf("no InternalIP among the node's addresses %v", addrs)
	}
	return nil
}

// GuestAddresses are the Node's addresses the check sets as the cloud
// controller would: InternalIP 127.0.0.1 (where the API server reaches
// the kubelet's port) and the node's name as its Hostname.
func GuestAddresses(nodeName string) []corev1.NodeAddress {
	return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: nodeName}}
}

// AddressesPatch is the merge patch of a Node's status that sets addrs.
func AddressesPatch(addrs []corev1.NodeAddress) (string, error) {
	b, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": addrs}})
	return string(b), err
}
