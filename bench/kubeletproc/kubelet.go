package kubeletproc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
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

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// Bounds on the kubelet process. Each says why it has its value.
const (
	// healthyTimeout bounds Start -> healthz answers "ok": measured a few
	// seconds here (cAdvisor's first housekeeping, the runtime's status);
	// the rest is room for a loaded two-core machine.
	healthyTimeout = 90 * time.Second
	// healthzEvery is how often Start asks.
	healthzEvery = 100 * time.Millisecond
	// stopTimeout bounds SIGTERM -> exit, after which it is killed: the
	// kubelet leaves its pods and exits at once on SIGTERM.
	stopTimeout = 30 * time.Second
	// killWait bounds SIGKILL -> reaped.
	killWait = 10 * time.Second
	// removePodsTimeout bounds Close's removal of the pods the kubelet
	// left: 170-295 ms each here, removeWorkers at a time, 500 pods at
	// most.
	removePodsTimeout = 5 * time.Minute
	// logTailLines is how much of the kubelet's log an error quotes.
	logTailLines = 25
)

// ErrUnsupported reports that the kubelet cannot run here as this
// package runs it (not root: no mount namespace, no cgroups).
var ErrUnsupported = errors.New("standalone kubelet unsupported here")

// Kubelet is one running kubelet (Start), until Close.
type Kubelet struct {
	opts    Options
	ports   ports
	baseCtx context.Context // Start's context without its cancellation
	layout  *cgroups.Layout
	// rootDirs are the cgroup root's directories, one per hierarchy, and
	// before the cgroups beneath them when Start ran (normally none): the
	// others are the kubelet's, for Close to remove.
	rootDirs []string
	before   map[string]bool
	hostDirs hostDirs
	log      *os.File
	http     *http.Client

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  <-chan struct{}
	waitErr error

	closeOnce sync.Once
	closeErr  error
}

// Start runs the kubelet of o and waits until its healthz answers "ok"
// (its sync loop runs; its first relist of the runtime may still be under
// way, and static pods are admitted from then on): it
// checks that the cgroup root exists in every hierarchy, picks free
// loopback ports, writes the KubeletConfiguration and the mount
// namespace's wrapper beneath o.Dir, and starts
//
//	unshare --mount --propagation private -- /bin/sh <wrapper> <kubelet flags>
//
// whose shell makes the mounts and execs the kubelet (see the package
// documentation). On error, everything it made is removed again and the
// error carries the end of the kubelet's log. ctx bounds Start only; the
// kubelet runs until Stop or Close.
func Start(ctx context.Context, o Options) (_ *Kubelet, retErr error) {
	o, err := o.validate()
	if err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("start the kubelet: %w: needs root for its mount namespace and cgroups, running as euid %d", ErrUnsupported, os.Geteuid())
	}
	if o.NodeName == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("start the kubelet: node name: %w", err)
		}
		o.NodeName = strings.ToLower(h)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("start the kubelet: %w: %w", ErrUnsupported, err)
	}
	sock, _ := socketPath(o.RuntimeEndpoint)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("start the kubelet: %w: the runtime's socket %s is not there (%v)", ErrOptions, sock, err)
	}
	if fi, err := os.Stat(o.StaticPodDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("start the kubelet: %w: StaticPodDir %s is not a directory (%v)", ErrOptions, o.StaticPodDir, err)
	}
	k := &Kubelet{opts: o, baseCtx: context.WithoutCancel(ctx), http: insecureClient()}
	if err := k.findCgroupRoot(); err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}
	if k.ports, err = freePorts(); err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}
	if k.log, err = os.OpenFile(o.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		return nil, fmt.Errorf("start the kubelet: open its log: %w", err)
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, k.Close())
		}
	}()
	if err := k.writeFiles(sock); err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}
	if k.hostDirs, err = ensureHostDirs(); err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}

	flags := args(o)
	fmt.Fprintf(k.log, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), o.Bin, strings.Join(flags, " "))
	cmd := exec.Command(unshare, append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", filepath.Join(o.Dir, wrapperName)}, flags...)...)
	cmd.Stdout, cmd.Stderr = k.log, k.log
	cmd.Dir = o.Dir
	// The kubelet never outlives this process: SIGKILL when it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	k.mu.Lock()
	k.exited, err = crienv.StartLocked(cmd, &k.waitErr)
	if err == nil {
		k.cmd = cmd
	}
	k.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}
	if err := k.waitHealthy(ctx); err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}
	if err := k.checkExe(); err != nil {
		return nil, fmt.Errorf("start the kubelet: %w", err)
	}
	return k, nil
}

// findCgroupRoot checks that the cgroup root exists in every hierarchy
// and notes what is beneath it already.
func (k *Kubelet) findCgroupRoot() error {
	l, err := cgroups.Discover()
	if err != nil {
		return err
	}
	dirs, err := rootDirs(l, k.opts.CgroupRoot)
	if err != nil {
		return fmt.Errorf("cgroup root %s: %w", k.opts.CgroupRoot, err)
	}
	k.layout, k.rootDirs, k.before = l, dirs, map[string]bool{}
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			return fmt.Errorf("cgroup root %s: %w: the kubelet needs it in every hierarchy (NewCgroupRoot makes it): %w", k.opts.CgroupRoot, ErrOptions, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				k.before[filepath.Join(d, e.Name())] = true
			}
		}
	}
	return nil
}

// writeFiles writes the configuration, the wrapper and the sysctl values,
// and makes the kubelet's directories beneath Dir.
func (k *Kubelet) writeFiles(sock string) error {
	o := k.opts
	for _, d := range []string{rootName, pkiName, podLogsName, varLibName} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o755); err != nil {
			return err
		}
	}
	if err := writeSysctls(o.Dir); err != nil {
		return fmt.Errorf("write the sysctl values: %w", err)
	}
	conf, err := renderConfig(o, k.ports)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, configName), conf, 0o600); err != nil {
		return fmt.Errorf("write the kubelet's configuration: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.Dir, wrapperName), []byte(wrapperScript(o, sock)), 0o755); err != nil {
		return fmt.Errorf("write the kubelet's wrapper: %w", err)
	}
	return nil
}

// waitHealthy polls healthz until it answers "ok", the kubelet exits,
// ctx ends or healthyTimeout passes.
func (k *Kubelet) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, healthyTimeout)
	defer cancel()
	url := "http://127.0.0.1:" + strconv.Itoa(k.ports.healthz) + "/healthz"
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, time.Second)
		body, err := k.get(rctx, url)
		rcancel()
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		last = err
		select {
		case <-k.exited:
			return fmt.Errorf("the kubelet exited before it was healthy (%v); log %s:\n%s", k.waitErr, k.opts.LogPath, k.LogTail())
		case <-ctx.Done():
			return fmt.Errorf("the kubelet was not healthy within %v (%w; last answer: %v); log %s:\n%s", healthyTimeout, ctx.Err(), last, k.opts.LogPath, k.LogTail())
		case <-time.After(healthzEvery):
		}
	}
}

// checkExe makes sure the pid is the kubelet's own: the wrapper exec'd it.
func (k *Kubelet) checkExe() error {
	exe, err := os.Stat("/proc/" + strconv.Itoa(k.PID()) + "/exe")
	if err != nil {
		return fmt.Errorf("the kubelet's executable: %w", err)
	}
	bin, err := os.Stat(k.opts.Bin)
	if err != nil {
		return fmt.Errorf("the kubelet's executable: %w", err)
	}
	if !os.SameFile(exe, bin) {
		return fmt.Errorf("pid %d is not %s: the wrapper did not exec the kubelet", k.PID(), k.opts.Bin)
	}
	return nil
}

// PID is the kubelet's own process id (0 once it has stopped).
func (k *Kubelet) PID() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return 0
	}
	return k.cmd.Process.Pid
}

// LogPath is the file the kubelet's output goes to.
func (k *Kubelet) LogPath() string { return k.opts.LogPath }

// NodeName is the node's name: static pods are named <name>-<NodeName>.
func (k *Kubelet) NodeName() string { return k.opts.NodeName }

// Port is the kubelet's HTTPS port on 127.0.0.1.
func (k *Kubelet) Port() int { return k.ports.server }

// HealthzPort is its plain HTTP healthz port on 127.0.0.1.
func (k *Kubelet) HealthzPort() int { return k.ports.healthz }

// URL is https://127.0.0.1:<Port()><path>, e.g. path /pods.
func (k *Kubelet) URL(path string) string {
	return "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(k.ports.server)) + path
}

// MetricsURL is the kubelet's own metrics; /metrics/probes,
// /metrics/cadvisor and /metrics/resource are beside it.
func (k *Kubelet) MetricsURL() string { return k.URL("/metrics") }

// Get reads path from the kubelet's HTTPS server, anonymously and without
// verifying its self-signed certificate.
func (k *Kubelet) Get(ctx context.Context, path string) ([]byte, error) {
	return k.get(ctx, k.URL(path))
}

func (k *Kubelet) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %s: %.200s", url, resp.Status, body)
	}
	return body, nil
}

// insecureClient is the client of the kubelet's server: its certificate
// is self-signed (made in --cert-dir), and it listens on the loopback.
func insecureClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}}
}

// Stop ends the kubelet by its pid: SIGTERM, then SIGKILL after
// stopTimeout or when ctx ends. Its pods keep running (the kubelet leaves
// them); Close removes them. Stopping a stopped kubelet does nothing.
func (k *Kubelet) Stop(ctx context.Context) error {
	k.mu.Lock()
	cmd, exited := k.cmd, k.exited
	k.cmd = nil
	k.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopTimeout)
	defer t.Stop()
	var why string
	select {
	case <-exited:
		return nil
	case <-t.C:
		why = fmt.Sprintf("it did not stop within %v of SIGTERM", stopTimeout)
	case <-ctx.Done():
		why = "stop cancelled: " + ctx.Err().Error()
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
		return fmt.Errorf("stop the kubelet: %s; killed (log %s)", why, k.opts.LogPath)
	case <-time.After(killWait):
		return fmt.Errorf("stop the kubelet: %s, and pid %d is still there %v after SIGKILL", why, cmd.Process.Pid, killWait)
	}
}

// Close stops the kubelet and removes what Start made: the pods the
// kubelet left on the runtime (those whose cgroup is beneath the cgroup
// root), the cgroups the kubelet made beneath the root in every hierarchy
// (the root itself is CgroupRoot's), the mount points Start had to create
// on the host, and its files beneath Dir except the log. It is
// idempotent; later calls return the first result.
func (k *Kubelet) Close() error {
	k.closeOnce.Do(func() { k.closeErr = k.close() })
	return k.closeErr
}

func (k *Kubelet) close() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	add(k.Stop(k.baseCtx))
	if k.layout != nil {
		ctx, cancel := context.WithTimeout(k.baseCtx, removePodsTimeout)
		_, err := removePods(ctx, k.opts.RuntimeEndpoint, k.opts.CgroupRoot)
		cancel()
		add(err)
		add(k.removeCgroups())
	}
	add(k.hostDirs.remove())
	for _, name := range []string{configName, wrapperName, rootName, pkiName, podLogsName, varLibName, sysctlName} {
		add(os.RemoveAll(filepath.Join(k.opts.Dir, name)))
	}
	if k.log != nil {
		add(k.log.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close the kubelet: %w", err)
	}
	return nil
}

// removeCgroups removes the cgroups the kubelet made beneath the root
// (kubepods and its QoS and pod cgroups), children first, in every
// hierarchy.
func (k *Kubelet) removeCgroups() error {
	var errs []error
	for _, d := range k.rootDirs {
		entries, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			p := filepath.Join(d, e.Name())
			if !e.IsDir() || k.before[p] {
				continue
			}
			if err := removeTree(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// LogTail is the last lines of the kubelet's log.
func (k *Kubelet) LogTail() string {
	b, err := os.ReadFile(k.opts.LogPath)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// freePorts are two distinct loopback ports free a moment ago, held open
// together so that they differ.
func freePorts() (ports, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return ports{}, fmt.Errorf("find a free loopback port: %w", err)
		}
		ls = append(ls, l)
	}
	return ports{server: ls[0].Addr().(*net.TCPAddr).Port, healthz: ls[1].Addr().(*net.TCPAddr).Port}, nil
}
