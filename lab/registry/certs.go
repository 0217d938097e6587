package registry

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// certValidity is how long the test certificates are valid: longer than
// any test run, short enough that a leaked key is worthless soon.
const certValidity = 24 * time.Hour

// pemFiles are a certificate and its key, PEM-encoded.
type pemFiles struct {
	cert, key []byte
}

// makeCerts returns a self-signed CA and a server certificate it signed,
// for the IP address ip (and the name localhost).
func makeCerts(ip net.IP, now time.Time) (ca, server pemFiles, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return ca, server, fmt.Errorf("make CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "nodeguard test registry CA"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return ca, server, fmt.Errorf("make CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return ca, server, fmt.Errorf("parse CA certificate: %w", err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return ca, server, fmt.Errorf("make server key: %w", err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: ip.String()},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{ip},
		DNSNames:     []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return ca, server, fmt.Errorf("make server certificate: %w", err)
	}
	if ca, err = encode(caDER, caKey); err != nil {
		return ca, server, err
	}
	server, err = encode(srvDER, srvKey)
	return ca, server, err
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func encode(der []byte, key *ecdsa.PrivateKey) (pemFiles, error) {
	k, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return pemFiles{}, fmt.Errorf("marshal key: %w", err)
	}
	return pemFiles{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: k}),
	}, nil
}
