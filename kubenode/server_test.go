package kubenode

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// testCA issues client certificates for the tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) client(t *testing.T, user string, groups ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: user, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// The endpoint lets through only verified client certificates whose user
// the API server authorizes on nodes/proxy (nodes/healthz, then proxy,
// for /healthz), caches the answers, and makes a self-signed serving
// certificate once when it has none.
func TestServerAuthenticatesAndAuthorizes(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	var mu sync.Mutex
	var reviews []authorizationv1.SubjectAccessReviewSpec
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		mu.Lock()
		reviews = append(reviews, sar.Spec)
		mu.Unlock()
		ra := sar.Spec.ResourceAttributes
		allowed := false
		for _, g := range sar.Spec.Groups {
			allowed = allowed || g == "system:masters"
		}
		// The monitor may read nodes/healthz only; the reader may get
		// nodes/proxy.
		if sar.Spec.User == "monitor" && ra.Subresource == "healthz" {
			allowed = true
		}
		if sar.Spec.User == "reader" && ra.Subresource == "proxy" && ra.Verb == "get" {
			allowed = true
		}
		sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: "test policy"}
		return true, sar, nil
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		u, _ := api.UserFrom(r.Context())
		io.WriteString(w, "hello "+u)
	})
	s, err := NewServer(ServerConfig{Client: cs, NodeName: "node-a", Addresses: []string{"127.0.0.1"}, Port: freeLoopbackPort(t),
		CertDir: filepath.Join(dir, "pki"), ClientCAFile: caFile, Handler: mux})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	if _, err := os.Stat(filepath.Join(dir, "pki", "nodeguard.crt")); err != nil {
		t.Fatalf("no self-signed certificate: %v", err)
	}

	addr := s.Addrs()[0].String()
	call := func(cert *tls.Certificate, path string) (int, string) {
		t.Helper()
		tc := &tls.Config{InsecureSkipVerify: true} // the self-signed serving certificate
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	admin := ca.client(t, "apiserver", "system:masters")
	node := ca.client(t, "system:node:node-a", "system:nodes")
	monitor := ca.client(t, "monitor")
	stranger := newTestCA(t).client(t, "apiserver", "system:masters")

	if code, _ := call(nil, "/containerLogs/a/b/c"); code != http.StatusUnauthorized {
		t.Errorf("no certificate: %d, want 401", code)
	}
	// A certificate of another CA fails the handshake or is 401: never let in.
	{
		tc := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{stranger}}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		if resp, err := hc.Get("https://" + addr + "/x"); err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("another CA's certificate: %d, want 401 or a failed handshake", resp.StatusCode)
			}
		}
	}
	if code, body := call(&admin, "/containerLogs/a/b/c"); code != 200 || body != "hello apiserver" {
		t.Errorf("system:masters: %d %q", code, body)
	}
	if code, _ := call(&node, "/exec/a/b/c"); code != http.StatusForbidden {
		t.Errorf("the node itself: %d, want 403", code)
	}
	if code, _ := call(&monitor, "/healthz"); code != 200 {
		t.Errorf("monitor on /healthz (nodes/healthz): %d, want 200", code)
	}
	if code, _ := call(&monitor, "/containerLogs/a/b/c"); code != http.StatusForbidden {
		t.Errorf("monitor on logs (nodes/proxy): %d, want 403", code)
	}
	reader := ca.client(t, "reader")
	if code, _ := call(&reader, "/containerLogs/a/b/c"); code != 200 {
		t.Errorf("reader (get nodes/proxy) on logs: %d, want 200", code)
	}
	if code, _ := call(&reader, "/exec/a/b/c?command=sh"); code != http.StatusForbidden {
		t.Errorf("reader (get nodes/proxy) on a GET exec: %d, want 403: a session is create", code)
	}
	nameless := ca.client(t, "", "system:masters")
	if code, _ := call(&nameless, "/healthz"); code != http.StatusUnauthorized {
		t.Errorf("a certificate without a common name: %d, want 401", code)
	}
	{
		tc := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{admin}}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		req, _ := http.NewRequest(http.MethodPut, "https://"+addr+"/healthz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("PUT: %d, want 405 before any review", resp.StatusCode)
		}
	}
	// Cached: the same user, verb and subresource again asks nothing.
	mu.Lock()
	n := len(reviews)
	mu.Unlock()
	for range 3 {
		call(&admin, "/containerLogs/a/b/c")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reviews) != n {
		t.Errorf("%d more reviews for answers in the cache", len(reviews)-n)
	}
	first := reviews[0]
	if !slices.Contains(first.Groups, "system:authenticated") || !slices.Contains(first.Groups, "system:masters") {
		t.Errorf("review groups %v, want the certificate's and system:authenticated", first.Groups)
	}
	for _, r := range reviews {
		if r.ResourceAttributes.Verb == "put" {
			t.Errorf("a PUT was reviewed: %+v", r.ResourceAttributes)
		}
	}
	if ra := first.ResourceAttributes; first.User != "apiserver" || ra.Resource != "nodes" || ra.Subresource != "proxy" || ra.Name != "node-a" || ra.Verb != "get" {
		t.Errorf("review %+v %+v", first, first.ResourceAttributes)
	}
}

func TestServerRefusesBadConfig(t *testing.T) {
	cs := fake.NewClientset()
	h := http.NotFoundHandler()
	dir := t.TempDir()
	for name, cfg := range map[string]ServerConfig{
		"a cert without its key": {Client: cs, NodeName: "n", Addresses: []string{"127.0.0.1"}, Handler: h, CertFile: "/x.crt"},
		"a missing client CA":    {Client: cs, NodeName: "n", Addresses: []string{"127.0.0.1"}, Handler: h, CertDir: dir, ClientCAFile: filepath.Join(dir, "none.crt")},
		"no address":             {Client: cs, NodeName: "n", Handler: h, CertDir: dir},
		"bootstrap and a cert file": {Client: cs, NodeName: "n", Addresses: []string{"127.0.0.1"}, Handler: h, CertDir: dir,
			Bootstrap: true, CertFile: "/x.crt", KeyFile: "/x.key"},
		"bootstrap without an IP": {Client: cs, NodeName: "n", Addresses: []string{""}, Handler: h, CertDir: dir, Bootstrap: true},
	} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func freeLoopbackPort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n)
}

// A rotated client CA takes effect at the next handshake, without a
// restart; a CA file that stops parsing keeps the CAs read before.
func TestServerReloadsTheClientCA(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := newTestCA(t), newTestCA(t)
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, oldCA.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	s, err := NewServer(ServerConfig{Client: cs, NodeName: "node-a", Addresses: []string{"127.0.0.1"}, Port: freeLoopbackPort(t),
		CertDir: filepath.Join(dir, "pki"), ClientCAFile: caFile, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	addr := s.Addrs()[0].String()
	status := func(c tls.Certificate) int {
		t.Helper()
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{c}}}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + addr + "/healthz")
		if err != nil {
			return 0 // a failed handshake
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	oldUser, newUser := oldCA.client(t, "a"), newCA.client(t, "b")
	if got := status(oldUser); got != 200 {
		t.Fatalf("the first CA's user: %d", got)
	}
	if got := status(newUser); got == 200 {
		t.Fatalf("the second CA's user let in before the rotation")
	}
	if err := os.WriteFile(caFile, newCA.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute)
	os.Chtimes(caFile, future, future)
	if got := status(newUser); got != 200 {
		t.Errorf("the second CA's user after the rotation: %d, want 200", got)
	}
	if got := status(oldUser); got == 200 {
		t.Errorf("the first CA's user still let in after the rotation")
	}
	if err := os.WriteFile(caFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := future.Add(time.Minute)
	os.Chtimes(caFile, later, later)
	if got := status(newUser); got != 200 {
		t.Errorf("after the CA file broke: %d, want 200 (the CAs read before kept)", got)
	}
}

// serverTLSBootstrap: the endpoint asks for its serving certificate with a
// kubernetes.io/kubelet-serving CSR for system:node:<name> in system:nodes,
// naming the node's IPs and name, with the serving usages; until it is
// issued, handshakes fail.
func TestServerBootstrapsItsServingCertificate(t *testing.T) {
	cs := fake.NewClientset()
	port := freeLoopbackPort(t)
	s, err := NewServer(ServerConfig{Client: cs, NodeName: "node-a", Addresses: []string{"127.0.0.1"}, CertIPs: []string{"10.0.0.7"},
		Port: port, CertDir: t.TempDir(), Bootstrap: true, Handler: http.NotFoundHandler()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() { cancel(); <-done }()

	var csr *certificatesv1.CertificateSigningRequest
	deadline := time.Now().Add(20 * time.Second)
	for csr == nil {
		l, err := cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Items) > 0 {
			csr = &l.Items[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no CertificateSigningRequest in 20 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Errorf("signer %q, want %q", csr.Spec.SignerName, certificatesv1.KubeletServingSignerName)
	}
	for _, u := range []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth} {
		if !slices.Contains(csr.Spec.Usages, u) {
			t.Errorf("usages %v lack %s", csr.Spec.Usages, u)
		}
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil {
		t.Fatalf("the request is not PEM: %q", csr.Spec.Request)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if req.Subject.CommonName != "system:node:node-a" || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		t.Errorf("subject %v", req.Subject)
	}
	var ips []string
	for _, ip := range req.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Equal(ips, []string{"127.0.0.1", "10.0.0.7"}) || !slices.Equal(req.DNSNames, []string{"node-a"}) {
		t.Errorf("SANs: IPs %v DNS %v", ips, req.DNSNames)
	}
	// Not issued: the handshake fails, naming why.
	_, err = tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test's own
	if err == nil {
		t.Error("a handshake succeeded before the certificate was issued")
	}
}
