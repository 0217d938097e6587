package crienv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/netplumb"
)

// Bounds. Each says why it has its value.
const (
	// readyTimeout bounds the wait for containerd to answer CRI Version:
	// it is ready in ~0.3 s here; the rest is room for a loaded CI machine.
	readyTimeout = 20 * time.Second
	// importTimeout bounds one `ctr images import` (~0.1-0.3 s each).
	importTimeout = 60 * time.Second
	// closeTimeout bounds the CRI part of Close: StopPodSandbox and
	// RemovePodSandbox take 170-295 ms per pod here.
	closeTimeout = 60 * time.Second
	// stopWait is how long Close waits for containerd to exit after
	// SIGTERM before SIGKILL.
	stopWait = 10 * time.Second
	// runcTimeout bounds one runc call in Close's fallback.
	runcTimeout = 10 * time.Second
)

// Paths outside the environment that containerd 1.6 and libcni write to no
// matter the config; Close removes the entries of this environment.
const (
	// shimSocketDir holds the shims' sockets, named by a hash of the
	// containerd address, namespace and shim id.
	shimSocketDir = "/run/containerd/s"
	// cniResultsDir is libcni's cache of ADD results,
	// <network>-<sandbox id>-<ifname>.
	cniResultsDir = "/var/lib/cni/results"
	// cniNetworksDir is host-local's default data dir; the env's network
	// sets its own dataDir, so this only catches a regression.
	cniNetworksDir = "/var/lib/cni/networks"
)

// containerd listens on its gRPC address and on that address plus
// ttrpcSuffix, and refuses unix socket paths longer than maxSocketPath
// bytes.
const (
	ttrpcSuffix   = ".ttrpc"
	maxSocketPath = 104
)

// DefaultSubnet is the pod subnet of an environment. It exists only inside
// the environment's network namespace, so every environment can use it.
const DefaultSubnet = "10.88.0.0/16"

// Options configure Start. The zero value is valid.
type Options struct {
	// Log receives progress lines; nil discards them.
	Log *slog.Logger
	// ImageCache is where the images are built and kept across runs;
	// images.CacheDir() when empty ($NODEGUARD_IMAGE_CACHE, or
	// images.DefaultCacheDir).
	ImageCache string
	// BaseDir is the parent of the environment's temporary directory;
	// os.TempDir() when empty. It must be on a filesystem that can be an
	// overlayfs upper directory (not overlayfs itself).
	BaseDir string
	// Subnet is the pod network; DefaultSubnet when invalid (zero).
	Subnet netip.Prefix
}

// Env is a private containerd with the CRI plugin, running in a network
// namespace of its own, with the pause and busybox images imported. Close
// removes everything it made.
type Env struct {
	log      *slog.Logger
	baseCtx  context.Context // Start's context without its cancellation
	layout   *cgroups.Layout
	dir      string
	sock     string
	netns    string
	cniConf  string
	netName  string
	bridge   string
	subnet   netip.Prefix
	cgParent string
	runcRoot string
	images   images.Set

	cmd     *exec.Cmd
	exited  <-chan struct{} // closed when cmd.Wait returns
	waitErr error           // cmd.Wait's result, set before exited closes
	logFile *os.File
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	img     runtimeapi.ImageServiceClient

	mu  sync.Mutex
	ids map[string]bool // sandbox and container ids ever seen, for Close

	closeOnce sync.Once
	closeErr  error
}

// randHex returns n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Start makes the environment: it installs missing packages through apt
// (see EnsurePackages), builds or reuses the cached images, creates
// <BaseDir>/nodeguard-crienv-*/ with root/, state/, config.toml and a CNI
// config, creates a network namespace with lo up, starts containerd in it
// with `nsenter --net=<netns> containerd --config ...` (its output goes to
// containerd.log), waits until it answers CRI Version, and imports the
// images with ctr. On error everything made so far is removed. ctx bounds
// Start only; the environment lives until Close.
func Start(ctx context.Context, opts Options) (_ *Env, retErr error) {
	start := time.Now()
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cache := opts.ImageCache
	if cache == "" {
		cache = images.CacheDir()
	}
	subnet := opts.Subnet
	if !subnet.IsValid() {
		subnet = netip.MustParsePrefix(DefaultSubnet)
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("start CRI environment: %w: needs root, running as euid %d", ErrUnsupported, os.Geteuid())
	}
	layout, err := cgroups.Discover()
	if err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	if err := EnsurePackages(ctx, log, cache); err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	runc, err := lookTool("runc")
	if err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	set, err := images.Cached(ctx, cache, log)
	if err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}

	if err := SweepStale(ctx, opts.BaseDir, log); err != nil {
		log.Warn("crienv: could not remove every stale environment", "err", err)
	}

	dir, err := os.MkdirTemp(opts.BaseDir, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	suffix := randHex(4)
	e := &Env{
		log:      log,
		baseCtx:  context.WithoutCancel(ctx),
		layout:   layout,
		dir:      dir,
		sock:     filepath.Join(dir, "containerd.sock"),
		netns:    filepath.Join(dir, "netns"),
		cniConf:  filepath.Join(dir, "cni", "net.d"),
		netName:  dirPrefix + suffix,
		bridge:   "ngbr" + suffix,
		subnet:   subnet,
		cgParent: fmt.Sprintf("%s%d-%s", dirPrefix, os.Getpid(), suffix),
		runcRoot: filepath.Join(dir, "runc"),
		images:   set,
		ids:      map[string]bool{},
	}
	defer func() {
		if retErr != nil {
			if err := e.Close(); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("clean up after failed start: %w", err))
			}
		}
	}()
	if n := len(e.sock + ttrpcSuffix); n > maxSocketPath {
		return nil, fmt.Errorf("start CRI environment: %w: socket path %s%s is %d bytes, containerd takes at most %d: use a shorter BaseDir",
			ErrInvalidConfig, e.sock, ttrpcSuffix, n, maxSocketPath)
	}
	if err := e.writeRecord(); err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	if err := e.writeConfigs(runc); err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	if err := newNetNS(e.netns); err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	t0 := time.Now()
	if err := e.startContainerd(ctx); err != nil {
		return nil, fmt.Errorf("start CRI environment: %w", err)
	}
	ready := time.Since(t0)
	t1 := time.Now()
	for _, im := range []images.Image{set.Pause, set.Busybox} {
		if err := e.importImage(ctx, im); err != nil {
			return nil, fmt.Errorf("start CRI environment: %w", err)
		}
	}
	log.Info("crienv: containerd ready", "dir", dir, "containerd_ready_seconds", round(ready),
		"import_seconds", round(time.Since(t1)), "total_seconds", round(time.Since(start)),
		"images_built", set.Built)
	return e, nil
}

// writeConfigs writes config.toml and the CNI conflist, and makes the
// directories they name.
func (e *Env) writeConfigs(runc string) error {
	for _, d := range []string{"root", "state", "tmp", "opt", "pods", "certs.d", e.runcRoot, e.cniConf, filepath.Join(e.dir, "cni", "ipam")} {
		if !filepath.IsAbs(d) {
			d = filepath.Join(e.dir, d)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cfg, err := renderConfig(configParams{
		Root:         filepath.Join(e.dir, "root"),
		State:        filepath.Join(e.dir, "state"),
		Temp:         filepath.Join(e.dir, "tmp"),
		Socket:       e.sock,
		OptDir:       filepath.Join(e.dir, "opt"),
		RuncBinary:   runc,
		RuncRoot:     e.runcRoot,
		SandboxImage: e.images.Pause.Name,
		CNIBinDir:    cniBinDir,
		CNIConfDir:   e.cniConf,
		HostsDir:     e.RegistryHostsDir(),
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(e.configFile(), []byte(cfg), 0o644); err != nil {
		return err
	}
	cni, err := netplumb.Render(e.NetworkConfig())
	if err != nil {
		return err
	}
	return os.WriteFile(netplumb.ConfFile(e.NetworkConfig()), cni, 0o644)
}

func (e *Env) configFile() string { return filepath.Join(e.dir, "config.toml") }

// RegistryHostsDir is containerd's registry hosts directory (its
// config_path): a registry in the env's network namespace writes
// <host:port>/hosts.toml there for containerd to trust its CA
// (lab/registry does).
func (e *Env) RegistryHostsDir() string { return filepath.Join(e.dir, "certs.d") }

// LogFile returns the path of containerd's log.
func (e *Env) LogFile() string { return filepath.Join(e.dir, "containerd.log") }

// startContainerd starts containerd in the env's network namespace and
// waits until it answers CRI Version.
func (e *Env) startContainerd(ctx context.Context) error {
	nsenter, err := lookTool("nsenter")
	if err != nil {
		return err
	}
	containerd, err := lookTool("containerd")
	if err != nil {
		return err
	}
	lf, err := os.OpenFile(e.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	e.logFile = lf
	// nsenter enters the network namespace and execs containerd (no
	// --fork needed for a network namespace), so the pid is containerd's.
	// Not `ip netns exec`: it remounts /sys and hides the cgroup trees.
	cmd := exec.Command(nsenter, "--net="+e.netns, "--", containerd, "--config", e.configFile())
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "PATH="+searchPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// If this process dies without Close, containerd shuts down
		// rather than run on unowned (SweepStale removes the rest).
		Pdeathsig: syscall.SIGTERM,
	}
	exited, err := StartLocked(cmd, &e.waitErr)
	if err != nil {
		return fmt.Errorf("start containerd: %w", err)
	}
	e.exited = exited
	e.cmd = cmd

	conn, err := grpc.NewClient("unix://"+e.sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("connect to containerd: %w", err)
	}
	e.conn = conn
	e.rt = runtimeapi.NewRuntimeServiceClient(conn)
	e.img = runtimeapi.NewImageServiceClient(conn)

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	for {
		if _, err := os.Stat(e.sock); err == nil {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			_, err := e.rt.Version(cctx, &runtimeapi.VersionRequest{})
			ccancel()
			if err == nil {
				return nil
			}
			last = err
		}
		select {
		case <-e.exited:
			return fmt.Errorf("containerd exited before it was ready: %v; log: %s", e.waitErr, e.logTail())
		case <-ctx.Done():
			return fmt.Errorf("wait for containerd CRI: %w (last error: %v); log: %s", ctx.Err(), last, e.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of containerd's log, for errors.
func (e *Env) logTail() string {
	b, err := os.ReadFile(e.LogFile())
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// importImage imports im with ctr into the CRI namespace and waits until
// the CRI plugin reports it (its image store follows containerd's events).
func (e *Env) importImage(ctx context.Context, im images.Image) error {
	ctr, err := lookTool("ctr")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, importTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, ctr, "--address", e.sock, "--namespace", criNamespace,
		"images", "import", im.Archive)
	cmd.Env = append(os.Environ(), "PATH="+searchPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("import %s: ctr: %w: %s", im.Name, err, bytes.TrimSpace(out))
	}
	for {
		st, err := e.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: im.Name}})
		if err == nil && st.GetImage() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("import %s: CRI does not list it: %w (last error: %v)", im.Name, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Dir returns the environment's temporary directory.
func (e *Env) Dir() string { return e.dir }

// Socket returns the path of containerd's unix socket.
func (e *Env) Socket() string { return e.sock }

// Endpoint returns the CRI endpoint, "unix://" + Socket().
func (e *Env) Endpoint() string { return "unix://" + e.sock }

// NetNS returns the path of the network namespace containerd runs in (a
// bind mount of the namespace). Pod networks exist only inside it.
func (e *Env) NetNS() string { return e.netns }

// PauseImage returns the name of the imported pause image, containerd's
// sandbox_image.
func (e *Env) PauseImage() string { return e.images.Pause.Name }

// BusyboxImage returns the name of the imported busybox image.
func (e *Env) BusyboxImage() string { return e.images.Busybox.Name }

// CNIConfDir returns the directory of the CNI config containerd uses.
func (e *Env) CNIConfDir() string { return e.cniConf }

// NetworkConfig is the env's pod network, rendered by netplumb into the
// conflist its containerd reads: bridge, host-local, portmap, bandwidth.
func (e *Env) NetworkConfig() netplumb.Config {
	c := netplumb.DefaultConfig()
	c.Name, c.Bridge, c.Subnet = e.netName, e.bridge, e.subnet
	c.BinDirs = []string{cniBinDir}
	c.ConfDir = e.cniConf
	c.IPAMDir = filepath.Join(e.dir, "cni", "ipam")
	c.CacheDir = filepath.Join(e.dir, "cni", "cache")
	return c.WithDefaults()
}

// NetNSDir is where the env's containerd keeps pod network namespace
// files (netns_mounts_under_state_dir: the CRI plugin's state dir).
func (e *Env) NetNSDir() string {
	return filepath.Join(e.dir, "state", "io.containerd.grpc.v1.cri", "netns")
}

// NetworkName returns the name of the CNI network, unique to the env.
func (e *Env) NetworkName() string { return e.netName }

// Bridge returns the name of the pods' bridge in NetNS.
func (e *Env) Bridge() string { return e.bridge }

// PodsDir returns a directory beneath Dir for pod log directories and
// volumes, removed by Close.
func (e *Env) PodsDir() string { return filepath.Join(e.dir, "pods") }

// CgroupParent returns a cgroup path relative to this process's own cgroups
// (nodeguard-crienv-<pid>-<random>) for the env's pods: give pods a
// cgroup_parent beneath it, e.g. CgroupParent()+"/pod"+uid. runc resolves a
// relative parent against its own cgroup in each hierarchy, which is this
// process's. Close removes the tree in every hierarchy.
func (e *Env) CgroupParent() string { return e.cgParent }

// RuntimeClient returns a CRI runtime client connected to Socket().
func (e *Env) RuntimeClient() runtimeapi.RuntimeServiceClient { return e.rt }

// ImageClient returns a CRI image client connected to Socket().
func (e *Env) ImageClient() runtimeapi.ImageServiceClient { return e.img }

// RemoveCgroup removes the cgroup rel (relative to this process's own
// cgroups, and beneath CgroupParent()) and everything beneath it, in every
// hierarchy: CRI removes only a container's leaf cgroup, the pod's parent
// is the caller's. Processes still inside are killed first.
func (e *Env) RemoveCgroup(rel string) error {
	if rel != e.cgParent && !strings.HasPrefix(rel, e.cgParent+"/") {
		return fmt.Errorf("remove cgroup %q: %w: not beneath the env's cgroup parent %s", rel, cgroups.ErrInvalidPath, e.cgParent)
	}
	dirs, err := cgroupDirs(e.layout, rel)
	if err != nil {
		return fmt.Errorf("remove cgroup %q: %w", rel, err)
	}
	var errs []error
	for _, d := range dirs {
		if err := removeCgroupTree(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CgroupDirs returns rel's directory in every cgroup hierarchy, whether it
// exists or not; rel is relative to this process's own cgroups.
func (e *Env) CgroupDirs(rel string) ([]string, error) { return cgroupDirs(e.layout, rel) }

// remember records ids of sandboxes and containers, so that Close can find
// their traces outside the environment's directory.
func (e *Env) remember(ids ...string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, id := range ids {
		if id != "" {
			e.ids[id] = true
		}
	}
}

func (e *Env) knownIDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]string, 0, len(e.ids))
	for id := range e.ids {
		out = append(out, id)
	}
	return out
}

// KillContainerd SIGKILLs the env's containerd, as a crash would, and
// waits for it to be gone. Shims and pods keep running; sandboxes whose
// network was being set up are left half done. Restart brings it back.
func (e *Env) KillContainerd() error {
	if !e.running() {
		return errors.New("kill containerd: not running")
	}
	if err := e.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill containerd: %w", err)
	}
	select {
	case <-e.exited:
	case <-time.After(killWait):
		return fmt.Errorf("kill containerd: still running %v after SIGKILL", killWait)
	}
	if e.conn != nil {
		e.conn.Close()
		e.conn = nil
	}
	if e.logFile != nil {
		e.logFile.Close()
		e.logFile = nil
	}
	return nil
}

// Restart starts containerd again after KillContainerd, with the same
// config and state, and waits until its CRI answers.
func (e *Env) Restart(ctx context.Context) error {
	if e.running() {
		return errors.New("restart containerd: still running")
	}
	return e.startContainerd(ctx)
}

// StartLocked starts cmd, whose SysProcAttr.Pdeathsig ties the child to
// this process, and reaps it. The death signal fires when the parent
// THREAD exits, and the Go runtime ends a thread whenever a goroutine
// exits while locked to it (code that changes a thread's namespaces does
// that), so the child is started and waited for from a thread locked for
// its whole life. The returned channel is closed once cmd.Wait has
// returned, *waitErr set to its result before; an error means cmd did not
// start.
func StartLocked(cmd *exec.Cmd, waitErr *error) (exited <-chan struct{}, err error) {
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(done)
			return
		}
		started <- nil
		*waitErr = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return done, nil
}
