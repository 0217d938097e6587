package registry

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

func TestMakeCertsChainsToTheCA(t *testing.T) {
	now := time.Now()
	ca, srv, err := makeCerts(listenIP, now)
	if err != nil {
		t.Fatal(err)
	}
	parse := func(b []byte) *x509.Certificate {
		t.Helper()
		blk, _ := pem.Decode(b)
		if blk == nil {
			t.Fatalf("no PEM block in %q", b)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pool := x509.NewCertPool()
	pool.AddCert(parse(ca.cert))
	leaf := parse(srv.cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the server certificate does not verify against the CA: %v", err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("the server certificate is not for 127.0.0.1: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: x509.NewCertPool(), CurrentTime: now}); err == nil {
		t.Error("the server certificate verifies without the CA")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now.Add(certValidity + time.Hour)}); err == nil {
		t.Error("the server certificate is still valid after certValidity")
	}
}

func TestHtpasswdLineIsBcrypt(t *testing.T) {
	line, err := htpasswdLine("u", "secret")
	if err != nil {
		t.Fatal(err)
	}
	user, hash, ok := strings.Cut(strings.TrimSuffix(line, "\n"), ":")
	if !ok || user != "u" {
		t.Fatalf("line %q: want u:<hash>", line)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("secret")); err != nil {
		t.Errorf("the hash does not match the password: %v", err)
	}
	if err := bcrypt.CompareHashAndPassword([]byte(hash), []byte("wrong")); err == nil {
		t.Error("the hash matches a wrong password")
	}
	for _, bad := range []string{"", "a:b", "a\nb"} {
		if _, err := htpasswdLine(bad, "x"); err == nil {
			t.Errorf("htpasswdLine(%q) accepted the name", bad)
		}
	}
}

func TestRenderConfigAndHostsTOML(t *testing.T) {
	cfg := renderConfig(configParams{Addr: "127.0.0.1:5001", StorageDir: "/d/storage", CertFile: "/d/server.crt", KeyFile: "/d/server.key", HtpasswdFile: "/d/htpasswd"})
	for _, want := range []string{
		"version: 0.1\n",
		`    rootdirectory: "/d/storage"` + "\n",
		`  addr: "127.0.0.1:5001"` + "\n",
		`    certificate: "/d/server.crt"` + "\n",
		`    key: "/d/server.key"` + "\n",
		"  htpasswd:\n",
		`    path: "/d/htpasswd"` + "\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config.yml lacks %q:\n%s", want, cfg)
		}
	}
	hosts := renderHostsTOML("127.0.0.1:5001", "/d/ca.crt")
	for _, want := range []string{
		`server = "https://127.0.0.1:5001"` + "\n",
		`[host."https://127.0.0.1:5001"]` + "\n",
		`  ca = "/d/ca.crt"` + "\n",
	} {
		if !strings.Contains(hosts, want) {
			t.Errorf("hosts.toml lacks %q:\n%s", want, hosts)
		}
	}
	if net.ParseIP(listenIP.String()).IsLoopback() == false {
		t.Errorf("the registry listens on %s, not loopback", listenIP)
	}
}
