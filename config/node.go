package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeguard/nodeguard/kubenode"
)

// validateNode checks the node-mode keys: kubeconfig, nodeName, nodeIP,
// registerWithTaints, and nodeLabels against NodeRestriction when a
// kubeconfig joins a cluster.
func (c Run) validateNode() error {
	if c.Kubeconfig != "" && !filepath.IsAbs(c.Kubeconfig) {
		return fmt.Errorf("kubeconfig: %q: want an absolute path", c.Kubeconfig)
	}
	if c.NodeName != "" {
		if errs := validation.IsDNS1123Subdomain(c.NodeName); len(errs) > 0 {
			return fmt.Errorf("nodeName: %q: %s", c.NodeName, strings.Join(errs, "; "))
		}
	}
	if _, err := ParseNodeIPs(c.NodeIP); err != nil {
		return err
	}
	for i, t := range c.RegisterWithTaints {
		if err := ValidateTaint(t); err != nil {
			return fmt.Errorf("registerWithTaints[%d]: %w", i, err)
		}
	}
	if c.Kubeconfig != "" {
		if err := kubenode.CheckLabels(c.NodeLabels); err != nil {
			return fmt.Errorf("nodeLabels: %w", err)
		}
	}
	if c.Address != "" {
		if ip := net.ParseIP(c.Address); ip == nil {
			return fmt.Errorf("address: %q is not an IP address", c.Address)
		}
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("port: %d: want 1-65535 (0: %d)", c.Port, kubenode.DefaultPort)
	}
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		return errors.New("tlsCertFile and tlsPrivateKeyFile: give both or neither")
	}
	if c.ServerTLSBootstrap && c.TLSCertFile != "" {
		return errors.New("serverTLSBootstrap and tlsCertFile: one or the other (the bootstrapped certificate replaces the file)")
	}
	for key, p := range map[string]string{"tlsCertFile": c.TLSCertFile, "tlsPrivateKeyFile": c.TLSPrivateKeyFile,
		"authentication.x509.clientCAFile": c.Authentication.X509.ClientCAFile} {
		if p != "" && !filepath.IsAbs(p) {
			return fmt.Errorf("%s: %q: want an absolute path", key, p)
		}
	}
	return nil
}

// ParseNodeIPs reads nodeIP: one address, or an IPv4 and an IPv6 one
// separated by a comma, as the kubelet's --node-ip. Empty: none.
func ParseNodeIPs(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > 2 {
		return nil, fmt.Errorf("nodeIP: %q: at most two addresses (IPv4,IPv6)", s)
	}
	var out []string
	var fams []bool
	for _, p := range parts {
		ip := net.ParseIP(strings.TrimSpace(p))
		if ip == nil {
			return nil, fmt.Errorf("nodeIP: %q: %q is not an IP address", s, p)
		}
		if ip.IsUnspecified() {
			return nil, fmt.Errorf("nodeIP: %q: %s is unspecified", s, ip)
		}
		fams = append(fams, ip.To4() != nil)
		out = append(out, ip.String())
	}
	if len(fams) == 2 && fams[0] == fams[1] {
		return nil, fmt.Errorf("nodeIP: %q: two addresses must be one IPv4 and one IPv6", s)
	}
	return out, nil
}

// ValidateTaint checks a taint of registerWithTaints (or
// --register-with-taints) as the API server checks a Node's.
func ValidateTaint(t corev1.Taint) error {
	if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
		return fmt.Errorf("key %q: %s", t.Key, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
		return fmt.Errorf("value %q: %s", t.Value, strings.Join(errs, "; "))
	}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return nil
	}
	return fmt.Errorf("effect %q: want NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
}
