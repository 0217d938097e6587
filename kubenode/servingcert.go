package kubenode

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"slices"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/certificate"
)

// servingPairPrefix names the files of the serving certificate the API
// server issued (CertDir/nodeguard-server-current.pem), as the kubelet's
// kubelet-server-current.pem.
const servingPairPrefix = "nodeguard-server"

// errNoServingCert fails the TLS handshakes of a bootstrapping endpoint
// until its certificate is issued.
var errNoServingCert = errors.New("no serving certificate yet: the node's kubernetes.io/kubelet-serving CertificateSigningRequest is not approved and issued")

// newServingCertManager is the kubelet's serverTLSBootstrap: client-go's
// certificate manager asks for a serving certificate with a
// CertificateSigningRequest of the kubernetes.io/kubelet-serving signer
// (subject system:node:<name> in system:nodes, the node's IPs and name),
// keeps the issued pair in cfg.CertDir, and asks again before it
// expires. Someone (a cluster admin, an approver controller) must approve
// each request: the signer only signs approved ones.
func newServingCertManager(cfg ServerConfig) (certificate.Manager, error) {
	if cfg.CertDir == "" {
		return nil, errors.New("node endpoint: serverTLSBootstrap needs a certificate directory")
	}
	var ips []net.IP
	for _, a := range append(slices.Clone(cfg.Addresses), cfg.CertIPs...) {
		if ip := net.ParseIP(a); ip != nil && !ip.IsUnspecified() && !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	if len(ips) == 0 {
		return nil, errors.New("node endpoint: serverTLSBootstrap needs the node's IPs for its certificate")
	}
	store, err := certificate.NewFileStore(servingPairPrefix, cfg.CertDir, cfg.CertDir, "", "")
	if err != nil {
		return nil, fmt.Errorf("node endpoint: the serving certificate's store: %w", err)
	}
	client := cfg.Client
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn: func(*tls.Certificate) (kubernetes.Interface, error) { return client, nil },
		GetTemplate: func() *x509.CertificateRequest {
			return &x509.CertificateRequest{
				Subject:     pkix.Name{CommonName: "system:node:" + cfg.NodeName, Organization: []string{"system:nodes"}},
				DNSNames:    []string{cfg.NodeName},
				IPAddresses: ips,
			}
		},
		SignerName:       certificatesv1.KubeletServingSignerName,
		GetUsages:        certificate.DefaultKubeletServingGetUsages,
		CertificateStore: store,
		Name:             "node-endpoint",
	})
	if err != nil {
		return nil, fmt.Errorf("node endpoint: the serving certificate's manager: %w", err)
	}
	return m, nil
}
