package registry

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
)

const (
	// readyTimeout bounds the wait for the registry's first answer; it
	// answers within 100 ms of its start on the development machines.
	readyTimeout = 20 * time.Second
	// stopTimeout bounds the wait for the registry to exit after TERM,
	// and again after KILL.
	stopTimeout = 5 * time.Second
	// pushTimeout bounds one ctr push of a local image (a few MiB).
	pushTimeout = 2 * time.Minute
)

// listenIP is where the registry listens, inside its namespace.
var listenIP = net.IPv4(127, 0, 0, 1)

// Options configure Start.
type Options struct {
	// NetNS is the network namespace file to serve in: crienv's NetNS().
	// Required: the registry never listens in the host's namespace.
	NetNS string
	// HostsDir, when set, is containerd's registry hosts directory
	// (crienv's RegistryHostsDir) to write the registry's hosts.toml in.
	HostsDir string
	// Username and Password are the htpasswd login; "nodeguard" and a
	// random password when empty.
	Username, Password string
	// BaseDir is the parent of the registry's temporary directory;
	// os.TempDir() when empty.
	BaseDir string
	// Log receives progress lines; nil discards them.
	Log *slog.Logger
}

// Registry is a running docker-registry. Close removes everything it
// made.
type Registry struct {
	log      *slog.Logger
	dir      string
	netns    string
	host     string // 127.0.0.1:<port>
	user     string
	password string
	hostsDir string // the hosts.toml directory written, "" if none
	client   *http.Client

	cmd     *exec.Cmd
	exited  <-chan struct{}
	waitErr error
	logFile *os.File

	closeOnce sync.Once
	closeErr  error
}

// Start makes and starts a registry in opts.NetNS; on error everything
// made so far is removed. ctx bounds Start only.
func Start(ctx context.Context, opts Options) (_ *Registry, retErr error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.NetNS == "" {
		return nil, errors.New("start registry: Options.NetNS is empty: the registry serves only in a namespace of its caller's")
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("start registry: %w: needs root to enter %s, running as euid %d", crienv.ErrUnsupported, opts.NetNS, os.Geteuid())
	}
	// The lock directory is the one crienv.Start passes: one apt at a time.
	if err := crienv.EnsurePackages(ctx, log, images.DefaultCacheDir); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	bin, err := lookPath("docker-registry")
	if err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	port, err := freePort(opts.NetNS)
	if err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	dir, err := os.MkdirTemp(opts.BaseDir, "nodeguard-registry-")
	if err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	r := &Registry{
		log: log, dir: dir, netns: opts.NetNS,
		host: net.JoinHostPort(listenIP.String(), strconv.Itoa(port)),
		user: opts.Username, password: opts.Password,
	}
	if r.user == "" {
		r.user = "nodeguard"
	}
	if r.password == "" {
		r.password = randHex(12)
	}
	defer func() {
		if retErr != nil {
			if err := r.Close(); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("clean up after failed start: %w", err))
			}
		}
	}()
	if err := r.writeFiles(); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	// Its own hosts directory is for Push: without one, ctr speaks plain
	// HTTP to a registry on 127.0.0.1.
	if _, err := writeHostsTOML(r.ownHostsDir(), r.host, r.caFile()); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	if opts.HostsDir != "" {
		if r.hostsDir, err = writeHostsTOML(opts.HostsDir, r.host, r.caFile()); err != nil {
			return nil, fmt.Errorf("start registry: %w", err)
		}
	}
	if r.client, err = r.newClient(); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	t0 := time.Now()
	if err := r.start(ctx, bin); err != nil {
		return nil, fmt.Errorf("start registry: %w", err)
	}
	log.Info("registry: serving", "host", r.host, "netns", r.netns, "dir", dir, "ready_seconds", time.Since(t0).Round(time.Millisecond).Seconds())
	return r, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// lookPath finds a tool in crienv's search path (docker-registry is in
// /usr/bin, nsenter in /usr/bin, ctr in /usr/bin).
func lookPath(name string) (string, error) {
	for _, dir := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// freePort returns a TCP port free on 127.0.0.1 in the namespace netnsPath:
// the namespace is its owner's, so nothing else takes it before the
// registry binds it.
func freePort(netnsPath string) (int, error) {
	var port int
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		l, err := net.Listen("tcp", net.JoinHostPort(listenIP.String(), "0"))
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("find a free port in %s: %w", netnsPath, err)
	}
	return port, nil
}

// Files of the registry's directory.
func (r *Registry) caFile() string      { return filepath.Join(r.dir, "ca.crt") }
func (r *Registry) configFile() string  { return filepath.Join(r.dir, "config.yml") }
func (r *Registry) ownHostsDir() string { return filepath.Join(r.dir, "hosts") }

// LogFile is the registry's output (its access log included).
func (r *Registry) LogFile() string { return filepath.Join(r.dir, "registry.log") }

func (r *Registry) writeFiles() error {
	ca, srv, err := makeCerts(listenIP, time.Now())
	if err != nil {
		return err
	}
	htpasswd, err := htpasswdLine(r.user, r.password)
	if err != nil {
		return err
	}
	cfg := renderConfig(configParams{
		Addr:         r.host,
		StorageDir:   filepath.Join(r.dir, "storage"),
		CertFile:     filepath.Join(r.dir, "server.crt"),
		KeyFile:      filepath.Join(r.dir, "server.key"),
		HtpasswdFile: filepath.Join(r.dir, "htpasswd"),
	})
	if err := os.MkdirAll(filepath.Join(r.dir, "storage"), 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"ca.crt": ca.cert, "server.crt": srv.cert, "server.key": srv.key,
		"htpasswd": []byte(htpasswd), "config.yml": []byte(cfg),
	} {
		if err := os.WriteFile(filepath.Join(r.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeHostsTOML writes <hostsDir>/<host>/hosts.toml for containerd and
// ctr, and returns the directory it made.
func writeHostsTOML(hostsDir, host, ca string) (string, error) {
	d := filepath.Join(hostsDir, host)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", fmt.Errorf("write hosts.toml: %w", err)
	}
	if err := os.WriteFile(filepath.Join(d, "hosts.toml"), []byte(renderHostsTOML(host, ca)), 0o644); err != nil {
		return d, fmt.Errorf("write hosts.toml: %w", err)
	}
	return d, nil
}

// newClient is an HTTPS client that trusts the CA and dials inside the
// registry's namespace: each connection's socket is made there (a socket
// stays in the namespace it was created in), on a locked thread.
func (r *Registry) newClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	b, err := os.ReadFile(r.caFile())
	if err != nil {
		return nil, err
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("parse %s: no certificate", r.caFile())
	}
	netnsPath := r.netns
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
			var err error
			c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:     dial,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		},
	}, nil
}

// start starts docker-registry in the namespace and waits until it
// answers.
func (r *Registry) start(ctx context.Context, bin string) error {
	nsenter, err := lookPath("nsenter")
	if err != nil {
		return err
	}
	lf, err := os.OpenFile(r.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	r.logFile = lf
	// nsenter execs docker-registry in place: the pid is the registry's.
	cmd := exec.Command(nsenter, "--net="+r.netns, "--", bin, "serve", r.configFile())
	cmd.Stdout, cmd.Stderr, cmd.Dir = lf, lf, r.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	// As crienv's containerd: started and reaped from a locked thread,
	// so that the death signal means this process's end.
	exited, err := crienv.StartLocked(cmd, &r.waitErr)
	if err != nil {
		return fmt.Errorf("start docker-registry: %w", err)
	}
	r.exited = exited
	r.cmd = cmd

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		code, err := r.get(ctx, "/v2/", false)
		if err == nil && code == http.StatusUnauthorized {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("GET /v2/ without credentials: status %d, want 401", code)
		}
		select {
		case <-r.exited:
			return fmt.Errorf("docker-registry exited before it was ready: %v; log: %s", r.waitErr, r.logTail())
		case <-ctx.Done():
			return fmt.Errorf("wait for docker-registry at %s: %w (last: %v); log: %s", r.host, ctx.Err(), last, r.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// get GETs path from the registry, with the login when auth, and returns
// the status code.
func (r *Registry) get(ctx context.Context, path string, auth bool) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+r.host+path, nil)
	if err != nil {
		return 0, err
	}
	if auth {
		req.SetBasicAuth(r.user, r.password)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Get is get for tests: GET path (e.g. "/v2/_catalog") over TLS inside the
// namespace, with the login when auth.
func (r *Registry) Get(ctx context.Context, path string, auth bool) (int, error) {
	return r.get(ctx, path, auth)
}

func (r *Registry) logTail() string {
	b, err := os.ReadFile(r.LogFile())
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return strings.Join(lines, "\n")
}

// Host is the registry's host:port ("127.0.0.1:<port>"), the first
// component of the images it serves.
func (r *Registry) Host() string { return r.host }

// CAFile is the CA certificate that signed the registry's.
func (r *Registry) CAFile() string { return r.caFile() }

// Username and Password are the registry's login.
func (r *Registry) Username() string { return r.user }
func (r *Registry) Password() string { return r.password }

// Push copies image local from the containerd at address (its socket;
// namespace k8s.io) to remote (a reference on this registry) with ctr,
// run inside the registry's namespace, logged in and trusting the CA
// through the registry's own hosts.toml.
func (r *Registry) Push(ctx context.Context, address, local, remote string) error {
	if !strings.HasPrefix(remote, r.host+"/") {
		return fmt.Errorf("push %s: not a reference on this registry (%s)", remote, r.host)
	}
	nsenter, err := lookPath("nsenter")
	if err != nil {
		return fmt.Errorf("push %s: %w", remote, err)
	}
	ctr, err := lookPath("ctr")
	if err != nil {
		return fmt.Errorf("push %s: %w", remote, err)
	}
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, nsenter, "--net="+r.netns, "--", ctr, "--address", address, "--namespace", "k8s.io",
		"images", "push", "--user", r.user+":"+r.password, "--hosts-dir", r.ownHostsDir(), remote, local)
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("push %s as %s: ctr: %w: %s; registry log: %s", local, remote, err, lastLine(out), r.logTail())
	}
	return nil
}

// Stop stops the registry and waits for it to exit (TERM, then KILL),
// keeping its files: a test shows that present images need no registry.
// Stopping a stopped registry is not an error.
func (r *Registry) Stop() error {
	if r.cmd == nil {
		return nil
	}
	select {
	case <-r.exited:
		return nil
	default:
	}
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop registry (pid %d): %w", r.cmd.Process.Pid, err)
	}
	select {
	case <-r.exited:
		return nil
	case <-time.After(stopTimeout):
	}
	if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill registry (pid %d): %w", r.cmd.Process.Pid, err)
	}
	select {
	case <-r.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("registry (pid %d) did not exit %s after SIGKILL", r.cmd.Process.Pid, stopTimeout)
	}
}

// Close stops the registry and removes its directory and hosts.toml. It
// is safe to call more than once (a test's Close and its Cleanup's).
func (r *Registry) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.close() })
	return r.closeErr
}

func (r *Registry) close() error {
	errs := []error{r.Stop()}
	if r.logFile != nil {
		errs = append(errs, r.logFile.Close())
	}
	if r.hostsDir != "" {
		if err := os.RemoveAll(r.hostsDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(r.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close registry %s: %w", r.host, err)
	}
	return nil
}

// lastLine is ctr's last output line: its error, after the progress bars.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
