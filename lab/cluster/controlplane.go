// Package cluster runs a real Kubernetes control plane on 127.0.0.1 for the
// cluster lane: etcd, kube-apiserver, kube-scheduler and
// kube-controller-manager from the binaries scripts/controlplane.sh builds,
// with a CA of the run's own, token authentication for the components and
// the admin, client certificates signed by that CA for nodes,
// --authorization-mode=Node,RBAC and NodeRestriction, as a cluster's
// control plane is set up for its kubelets. Nothing listens beyond
// loopback; Stop ends every process it started, by pid.
package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nodeguard/nodeguard/lab/crienv"
)

// Options say where the binaries are and where the run keeps its state.
type Options struct {
	// Bin is the directory of etcd, kube-apiserver, kube-scheduler,
	// kube-controller-manager and kubectl (scripts/controlplane.sh prints it).
	Bin string
	// Dir holds the run's data, certificates, kubeconfigs and logs.
	Dir string
	// Progress, when set, gets a line per step.
	Progress io.Writer
	// ReadyTimeout bounds the wait for /readyz (default 90 s).
	ReadyTimeout time.Duration
	// NodeMonitorGracePeriod is how long the node controller waits for a
	// node's Lease or status before marking it NotReady (0: the
	// controller's default, 50 s).
	NodeMonitorGracePeriod time.Duration
}

// ControlPlane is a running control plane. Its methods are for one
// goroutine at a time.
type ControlPlane struct {
	opts Options
	// Server is the API server's URL (https://127.0.0.1:<port>).
	Server string
	// AdminKubeconfig is a kubeconfig with system:masters rights.
	AdminKubeconfig string
	// CACert and CAKey are the paths of the run's CA (which signs the
	// API server's serving certificate and the nodes' client ones).
	CACert, CAKey string
	ca            *x509.Certificate
	caKey         *rsa.PrivateKey
	procs         []*proc
}

type proc struct {
	name    string
	cmd     *exec.Cmd
	exited  <-chan struct{} // closed once Wait returned, waitErr set
	waitErr error
	log     string
}

// Start launches etcd, the API server, the scheduler and the controller
// manager, and returns once the API server's /readyz says ready. On error
// everything already started is stopped. The loopback ports are picked
// free and released before the components bind them; when one was taken
// meanwhile ("address already in use") Start tries again with others, up
// to three times, each attempt in a directory of its own beneath Dir.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 90 * time.Second
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		o := opts
		if o.Dir, err = os.MkdirTemp(opts.Dir, "cp-"); err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
		var cp *ControlPlane
		if cp, err = start(ctx, o); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return cp, err
		}
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "control plane: attempt %d: a port was taken meanwhile; again with others\n", attempt)
		}
	}
	return nil, err
}

func start(ctx context.Context, opts Options) (_ *ControlPlane, retErr error) {
	for _, b := range []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl"} {
		if fi, err := os.Stat(filepath.Join(opts.Bin, b)); err != nil || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("control plane: no %s in %s (run scripts/controlplane.sh)", b, opts.Bin)
		}
	}
	cp := &ControlPlane{opts: opts}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, cp.Stop())
		}
	}()
	ports, err := freePorts(4)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	etcdClient, etcdPeer, etcdMetrics, apiPort := ports[0], ports[1], ports[2], ports[3]
	cp.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)

	if err := cp.makeCA(); err != nil {
		return nil, err
	}
	pki := filepath.Join(opts.Dir, "pki")
	serving, servingKey, err := cp.issue(pki, "apiserver", pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)})
	if err != nil {
		return nil, err
	}
	// What the API server presents to kubelets (logs, exec, port-forward).
	kubeletClient, kubeletClientKey, err := cp.IssueClientCert("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return nil, err
	}
	saKey := filepath.Join(pki, "sa.key")
	if err := writeKey(saKey, nil); err != nil {
		return nil, err
	}
	tokens := map[string]string{"admin": "", "system:kube-scheduler": "", "system:kube-controller-manager": ""}
	var tokFile strings.Builder
	for user := range tokens {
		tokens[user] = randomHex(16)
		groups := ""
		if user == "admin" {
			groups = ",\"system:masters\""
		}
		fmt.Fprintf(&tokFile, "%s,%s,%s%s\n", tokens[user], user, user, groups)
	}
	tokPath := filepath.Join(pki, "tokens.csv")
	if err := os.WriteFile(tokPath, []byte(tokFile.String()), 0o600); err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	kubeconfig := func(name, token string) (string, error) {
		p := filepath.Join(opts.Dir, name+".kubeconfig")
		return p, WriteKubeconfig(p, cp.Server, cp.CACert, KubeconfigAuth{Token: token})
	}
	if cp.AdminKubeconfig, err = kubeconfig("admin", tokens["admin"]); err != nil {
		return nil, err
	}
	schedKC, err := kubeconfig("scheduler", tokens["system:kube-scheduler"])
	if err != nil {
		return nil, err
	}
	cmKC, err := kubeconfig("controller-manager", tokens["system:kube-controller-manager"])
	if err != nil {
		return nil, err
	}

	loop := func(p int) string { return "http://127.0.0.1:" + strconv.Itoa(p) }
	cp.say("starting etcd on %s", loop(etcdClient))
	if err := cp.run(ctx, "etcd", "--name", "default", "--data-dir", filepath.Join(opts.Dir, "etcd"),
		"--listen-client-urls", loop(etcdClient), "--advertise-client-urls", loop(etcdClient),
		"--listen-peer-urls", loop(etcdPeer), "--initial-advertise-peer-urls", loop(etcdPeer),
		"--initial-cluster", "default="+loop(etcdPeer), "--listen-metrics-urls", loop(etcdMetrics)); err != nil {
		return nil, err
	}
	cp.say("starting kube-apiserver on %s", cp.Server)
	if err := cp.run(ctx, "kube-apiserver", "--etcd-servers", loop(etcdClient),
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1", "--secure-port", strconv.Itoa(apiPort),
		"--tls-cert-file", serving, "--tls-private-key-file", servingKey, "--client-ca-file", cp.CACert,
		"--token-auth-file", tokPath, "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", "NodeRestriction",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", saKey,
		"--service-account-signing-key-file", saKey, "--service-cluster-ip-range", "10.96.0.0/24",
		"--endpoint-reconciler-type", "none", "--kubelet-certificate-authority", cp.CACert,
		"--kubelet-client-certificate", kubeletClient, "--kubelet-client-key", kubeletClientKey,
		// A node is reached at its InternalIP only (127.0.0.1 in the
		// tests), never at a hostname that may resolve off the machine.
		"--kubelet-preferred-address-types", "InternalIP",
		"--allow-privileged=true"); err != nil {
		return nil, err
	}
	if err := cp.waitReady(ctx); err != nil {
		return nil, err
	}
	cp.say("starting kube-scheduler and kube-controller-manager")
	if err := cp.run(ctx, "kube-scheduler", "--kubeconfig", schedKC, "--authentication-kubeconfig", schedKC,
		"--authorization-kubeconfig", schedKC, "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false"); err != nil {
		return nil, err
	}
	cmArgs := []string{"--kubeconfig", cmKC, "--authentication-kubeconfig", cmKC,
		"--authorization-kubeconfig", cmKC, "--bind-address", "127.0.0.1", "--secure-port", "0", "--leader-elect=false",
		"--service-account-private-key-file", saKey, "--root-ca-file", cp.CACert, "--use-service-account-credentials",
		"--cluster-signing-cert-file", cp.CACert, "--cluster-signing-key-file", cp.CAKey}
	if opts.NodeMonitorGracePeriod > 0 {
		cmArgs = append(cmArgs, "--node-monitor-grace-period", opts.NodeMonitorGracePeriod.String())
	}
	if err := cp.run(ctx, "kube-controller-manager", cmArgs...); err != nil {
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) say(format string, args ...any) {
	if cp.opts.Progress != nil {
		fmt.Fprintf(cp.opts.Progress, "control plane: "+format+"\n", args...)
	}
}

// run starts one component with its output in <Dir>/<name>.log.
func (cp *ControlPlane) run(ctx context.Context, name string, args ...string) error {
	logPath := filepath.Join(cp.opts.Dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	defer f.Close()
	cmd := exec.Command(filepath.Join(cp.opts.Bin, name), args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group, and killed with the test binary should that
	// die first: started and reaped from a thread locked for the child's
	// whole life, since the death signal follows the starting thread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{name: name, cmd: cmd, log: logPath}
	exited, err := crienv.StartLocked(cmd, &p.waitErr)
	if err != nil {
		return fmt.Errorf("control plane: start %s: %w", name, err)
	}
	p.exited = exited
	cp.procs = append(cp.procs, p)
	return ctx.Err()
}

// Died reports the first component that has exited, with its log's tail.
func (cp *ControlPlane) Died() error {
	for _, p := range cp.procs {
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited (%v); its log ends:\n%s", p.name, p.waitErr, tail(p.log, 20))
		default:
		}
	}
	return nil
}

func (cp *ControlPlane) waitReady(ctx context.Context) error {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cp.pool()}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	deadline := time.Now().Add(cp.opts.ReadyTimeout)
	start := time.Now()
	var last string
	for time.Now().Before(deadline) {
		if err := cp.Died(); err != nil {
			return fmt.Errorf("control plane: %w", err)
		}
		// /readyz is open to anyone (system:public-info-viewer).
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cp.Server+"/readyz", nil)
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				cp.say("kube-apiserver ready after %.1f s", time.Since(start).Seconds())
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("control plane: kube-apiserver not ready after %v (last: %s); its log ends:\n%s",
		cp.opts.ReadyTimeout, last, tail(filepath.Join(cp.opts.Dir, "kube-apiserver.log"), 20))
}

// Kubectl runs kubectl as the admin.
func (cp *ControlPlane) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(cp.opts.Bin, "kubectl"), append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// KubectlCommand is kubectl with the admin kubeconfig, for a caller that
// drives its streams (logs -f, exec -it, port-forward); the caller starts
// it and ends it by its pid.
func (cp *ControlPlane) KubectlCommand(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, filepath.Join(cp.opts.Bin, "kubectl"), append([]string{"--kubeconfig", cp.AdminKubeconfig}, args...)...)
}

// Pids are the processes the control plane runs, by component.
func (cp *ControlPlane) Pids() map[string]int {
	m := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		m[p.name] = p.cmd.Process.Pid
	}
	return m
}

// Stop ends every component, the last started first: SIGTERM, then
// SIGKILL after 10 s. Each is ended by its own pid. It reports a component
// that had exited before it was asked to, and one that SIGTERM did not
// end. The exit status after SIGTERM is not judged: kube-scheduler without
// leader election ends with status 1 ("finished without leader elect").
func (cp *ControlPlane) Stop() error {
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		select {
		case <-p.exited:
			errs = append(errs, fmt.Errorf("stop %s: it had exited already (%v); its log ends:\n%s", p.name, p.waitErr, tail(p.log, 20)))
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
			errs = append(errs, fmt.Errorf("stop %s: still running 10 s after SIGTERM, killed", p.name))
		}
	}
	cp.procs = nil
	return errors.Join(errs...)
}

// makeCA writes the run's CA certificate and key under Dir/pki.
func (cp *ControlPlane) makeCA() error {
	pki := filepath.Join(cp.opts.Dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("control plane: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "nodeguard-cluster-lane-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("control plane: CA: %w", err)
	}
	if cp.ca, err = x509.ParseCertificate(der); err != nil {
		return fmt.Errorf("control plane: CA: %w", err)
	}
	cp.caKey = key
	cp.CACert, cp.CAKey = filepath.Join(pki, "ca.crt"), filepath.Join(pki, "ca.key")
	if err := writeCert(cp.CACert, der); err != nil {
		return err
	}
	return writeKey(cp.CAKey, key)
}

// IssueClientCert writes a client certificate and key signed by the run's
// CA for user in groups (a node: "system:node:<name>" in "system:nodes"),
// as <Dir>/pki/<name>.crt and .key, and returns their paths.
func (cp *ControlPlane) IssueClientCert(name, user string, groups ...string) (cert, key string, err error) {
	return cp.issue(filepath.Join(cp.opts.Dir, "pki"), name, pkix.Name{CommonName: user, Organization: groups}, x509.ExtKeyUsageClientAuth, nil, nil)
}

// IssueServingCert issues a serving certificate of the cluster's CA for
// the given IPs and DNS names: a node endpoint's, which the API server
// verifies (--kubelet-certificate-authority).
func (cp *ControlPlane) IssueServingCert(name, commonName string, ips []net.IP, dns ...string) (cert, key string, err error) {
	return cp.issue(filepath.Join(cp.opts.Dir, "pki"), name, pkix.Name{CommonName: commonName}, x509.ExtKeyUsageServerAuth, dns, ips)
}

func (cp *ControlPlane) issue(dir, name string, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (string, string, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", fmt.Errorf("control plane: %s key: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, cp.ca, &key.PublicKey, cp.caKey)
	if err != nil {
		return "", "", fmt.Errorf("control plane: %s certificate: %w", name, err)
	}
	cert, keyPath := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writeCert(cert, der); err != nil {
		return "", "", err
	}
	return cert, keyPath, writeKey(keyPath, key)
}

func (cp *ControlPlane) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(cp.ca)
	return p
}

func writeCert(path string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	return nil
}

// writeKey writes key (a new one when nil) as PKCS#1 PEM.
func writeKey(path string, key *rsa.PrivateKey) error {
	if key == nil {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return fmt.Errorf("control plane: %w", err)
		}
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago (held open together, so the kernel gives n different ones).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
