package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/internal/host"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/netplumb"
)

// defaultDoctorRuntimeEndpoint is the CRI socket doctor checks without
// --runtime-endpoint: containerd's, where the distributions put it.
const defaultDoctorRuntimeEndpoint = "unix:///run/containerd/containerd.sock"

// doctorRuntimeTimeout bounds the CRI handshake: a runtime that has not
// answered Version in 5 s is as good as down for the agent, and doctor must
// not hang on a wedged socket.
const doctorRuntimeTimeout = 5 * time.Second

// doctorOptions are doctor's flags.
type doctorOptions struct {
	// RuntimeEndpoint is the CRI socket to check.
	RuntimeEndpoint string
	// RuntimeRequired makes an unreachable runtime a failure (the user
	// named the endpoint); otherwise it is degraded, since nodeguard can
	// still run with --private-runtime.
	RuntimeRequired bool
	// CNIBinDirs are searched for the CNI plugins; nil is netplumb's
	// default (/opt/cni/bin, /usr/lib/cni).
	CNIBinDirs []string
	// CgroupDriver and CgroupRoot are the agent's (run's keys): where
	// the pod cgroups will be, and who makes them.
	CgroupDriver string
	CgroupRoot   string
}

// Check states, from good to bad.
const (
	stOK       = "ok"
	stDegraded = "degraded"
	stFail     = "fail"
)

type check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

type doctorReport struct {
	Kernel string `json:"kernel"`
	BTF    struct {
		Present bool   `json:"present"`
		Path    string `json:"path,omitempty"`
	} `json:"btf"`
	Hooks  []loader.HookStatus `json:"hooks"`
	Cgroup struct {
		Mode       string `json:"mode"`
		Memory     string `json:"memory_controller,omitempty"` // mount of the hierarchy with memory
		MemoryV2   bool   `json:"memory_on_cgroup2"`
		MemoryOwn  string `json:"memory_own_dir,omitempty"`
		Unified    string `json:"unified,omitempty"`
		UnifiedOwn string `json:"unified_own_dir,omitempty"`
	} `json:"cgroup"`
	PSI struct {
		System        map[string]string `json:"system"`
		Cgroup        string            `json:"cgroup"`
		TriggerWindow string            `json:"trigger_window,omitempty"`
		TriggerError  string            `json:"trigger_error,omitempty"`
	} `json:"psi"`
	Capabilities map[string]bool `json:"capabilities"`
	Runtime      struct {
		Endpoint   string `json:"endpoint"`
		Reachable  bool   `json:"reachable"`
		Name       string `json:"name,omitempty"`
		Version    string `json:"version,omitempty"`
		APIVersion string `json:"api_version,omitempty"`
		// CgroupDriver is what the runtime reports through CRI
		// RuntimeConfig; "" when it does not say.
		CgroupDriver string `json:"cgroup_driver,omitempty"`
		// Cgroup is the runtime process's cgroup (memory hierarchy).
		Cgroup string `json:"cgroup,omitempty"`
		Error  string `json:"error,omitempty"`
	} `json:"runtime"`
	PodCgroups struct {
		Driver   string `json:"driver"`
		Root     string `json:"root"`
		Kubepods string `json:"kubepods,omitempty"` // the memory hierarchy's directory
	} `json:"pod_cgroups"`
	CNIPlugins map[string]string `json:"cni_plugins"` // plugin -> path, or "" when missing
	Checks     []check           `json:"checks"`
	CanRun     bool              `json:"can_run"`
	Degraded   bool              `json:"degraded"`
	Reasons    []string          `json:"reasons,omitempty"`
}

func newDoctorCmd(g *globalFlags) *cobra.Command {
	var (
		asJSON     bool
		configFlag string
	)
	opts := doctorOptions{RuntimeEndpoint: defaultDoctorRuntimeEndpoint, CgroupRoot: "/"}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this kernel and host allow nodeguard to do",
		Long: `Loads every BPF hook for real (and unloads it), and checks BTF, the cgroup
layout, PSI and capabilities; then the runtime side: the CRI runtime at
--runtime-endpoint (name, version, cgroup driver), the CNI plugins, iptables,
and where the pod cgroups will be for --cgroup-driver and --cgroup-root (run's
keys): with systemd, that systemd answers on D-Bus; with cgroupfs and an
absolute root, that kubepods exists or can be made there (nothing is
written); with a relative root, that a cgroup can be created and removed
beneath this process's own (a uniquely named one, removed at once). Each finding that is not ok comes
with a fix. Exits 0 when nodeguard can run here, even degraded (a fallback
path, a slower PSI trigger window, no runtime at the default endpoint);
non-zero, with the reason, when it cannot, or when the runtime at an
explicitly given --runtime-endpoint does not answer.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			opts.RuntimeRequired = cmd.Flags().Changed("runtime-endpoint")
			// The agent's configuration, where there is one, says which
			// runtime, driver and root to check; flags override it.
			path, err := config.Path(configFlag, cmd.Flags().Changed("config"), config.DefaultPath)
			if err != nil {
				return err
			}
			if path != "" {
				cfg, err := config.Load(path)
				if err != nil {
					return err
				}
				set := func(flag string, dst *string, v string) {
					if !cmd.Flags().Changed(flag) && v != "" {
						*dst = v
					}
				}
				set("runtime-endpoint", &opts.RuntimeEndpoint, cfg.RuntimeEndpoint)
				set("cgroup-driver", &opts.CgroupDriver, cfg.CgroupDriver)
				set("cgroup-root", &opts.CgroupRoot, cfg.CgroupRoot)
			}
			r := runDoctor(cmd.Context(), log, opts)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				printDoctor(cmd.OutOrStdout(), r)
			}
			if !r.CanRun {
				return &exitError{code: 2, msg: "cannot run here: " + strings.Join(r.Reasons, "; ")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringVar(&opts.RuntimeEndpoint, "runtime-endpoint", opts.RuntimeEndpoint, "CRI socket to check")
	cmd.Flags().StringVar(&configFlag, "config", config.DefaultPath, "the agent's configuration (read only if it exists): its runtime endpoint, cgroup driver and root are checked")
	cmd.Flags().StringVar(&opts.CgroupDriver, "cgroup-driver", opts.CgroupDriver, "the agent's cgroup driver: cgroupfs or systemd (default: the runtime's, else cgroupfs)")
	cmd.Flags().StringVar(&opts.CgroupRoot, "cgroup-root", opts.CgroupRoot, "the agent's cgroup root")
	return cmd
}

// runDoctor makes every check and returns the report. It changes nothing
// on the host that outlives it: BPF programs are unloaded, the delegation
// probe's cgroup is removed.
func runDoctor(ctx context.Context, log *slog.Logger, opts doctorOptions) *doctorReport {
	r := &doctorReport{Capabilities: map[string]bool{}, CNIPlugins: map[string]string{}, CanRun: true}
	add := func(c check) {
		r.Checks = append(r.Checks, c)
		switch c.Status {
		case stFail:
			r.CanRun = false
			r.Reasons = append(r.Reasons, c.Name+": "+c.Detail)
		case stDegraded:
			r.Degraded = true
		}
	}

	if rel, err := host.KernelRelease(); err != nil {
		add(check{Name: "kernel", Status: stFail, Detail: err.Error()})
	} else {
		r.Kernel = rel
		add(check{Name: "kernel", Status: stOK, Detail: rel})
	}

	r.BTF.Present, r.BTF.Path = host.BTF()
	if r.BTF.Present {
		add(check{Name: "btf", Status: stOK, Detail: r.BTF.Path})
	} else {
		add(check{Name: "btf", Status: stFail, Detail: "no kernel BTF at /sys/kernel/btf/vmlinux",
			Fix: "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y (Debian's and most distributions' kernels are)"})
	}

	for _, c := range []struct {
		name string
		cap  int
	}{{"CAP_BPF", host.CapBPF}, {"CAP_PERFMON", host.CapPerfmon}, {"CAP_SYS_ADMIN", host.CapSysAdmin}, {"CAP_SYS_RESOURCE", host.CapSysResource}} {
		ok, err := host.HasCapability(c.cap)
		if err != nil {
			add(check{Name: strings.ToLower(c.name), Status: stDegraded, Detail: err.Error()})
			continue
		}
		r.Capabilities[c.name] = ok
	}
	switch {
	case !(r.Capabilities["CAP_BPF"] && r.Capabilities["CAP_PERFMON"]) && !r.Capabilities["CAP_SYS_ADMIN"]:
		add(check{Name: "capabilities", Status: stFail, Detail: "neither CAP_BPF+CAP_PERFMON nor CAP_SYS_ADMIN: BPF programs cannot be loaded",
			Fix: "run as root, or grant CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN (AmbientCapabilities= in the unit)"})
	case !r.Capabilities["CAP_SYS_RESOURCE"]:
		add(check{Name: "capabilities", Status: stDegraded, Detail: "no CAP_SYS_RESOURCE: oom_score_adj cannot go below a task's minimum, PSI triggers need 2 s windows",
			Fix: "grant CAP_SYS_RESOURCE (systemd units have it unless CapabilityBoundingSet= drops it)"})
	default:
		add(check{Name: "capabilities", Status: stOK, Detail: "CAP_BPF, CAP_PERFMON, CAP_SYS_RESOURCE"})
	}

	layout, err := cgroups.Discover()
	if err != nil {
		add(check{Name: "cgroups", Status: stFail, Detail: err.Error(), Fix: "mount cgroup2 at /sys/fs/cgroup"})
	} else {
		r.Cgroup.Mode = layout.Mode.String()
		if layout.Memory != nil {
			r.Cgroup.Memory = layout.Memory.Mount
			r.Cgroup.MemoryV2 = layout.Memory.V2()
			r.Cgroup.MemoryOwn = layout.Memory.OwnDir()
		}
		if layout.Unified != nil {
			r.Cgroup.Unified = layout.Unified.Mount
			r.Cgroup.UnifiedOwn = layout.Unified.OwnDir()
		}
		switch {
		case layout.Memory == nil:
			add(check{Name: "cgroups", Status: stFail, Detail: "mode " + r.Cgroup.Mode + ", no memory controller mounted",
				Fix: "enable the memory controller (cgroup_enable=memory, or +memory in cgroup.subtree_control)"})
		case layout.Mode == cgroups.ModeV2:
			add(check{Name: "cgroups", Status: stOK, Detail: "v2, memory controller on " + layout.Memory.Mount})
		default:
			add(check{Name: "cgroups", Status: stDegraded, Detail: "mode " + r.Cgroup.Mode + ", memory controller on v1 at " + layout.Memory.Mount + " (v1 paths: usage thresholds, no memory.high)",
				Fix: "boot with systemd.unified_cgroup_hierarchy=1 for pure cgroup v2"})
		}
	}

	r.PSI.System = map[string]string{}
	var psiBad []string
	for res, err := range host.PSISystem() {
		if err != nil {
			r.PSI.System[res] = err.Error()
			if res != "irq" { // /proc/pressure/irq needs CONFIG_IRQ_TIME_ACCOUNTING and 6.1+
				psiBad = append(psiBad, res)
			}
		} else {
			r.PSI.System[res] = stOK
		}
	}
	if len(psiBad) > 0 {
		add(check{Name: "psi", Status: stDegraded, Detail: "system PSI unavailable for " + strings.Join(psiBad, ", "), Fix: "boot with psi=1 (CONFIG_PSI)"})
	} else {
		add(check{Name: "psi", Status: stOK, Detail: "system cpu, memory, io"})
	}
	if layout != nil && layout.Unified != nil {
		if err := host.PSICgroup(layout.Unified.OwnDir()); err != nil {
			r.PSI.Cgroup = err.Error()
			add(check{Name: "psi per cgroup", Status: stDegraded, Detail: err.Error()})
		} else {
			r.PSI.Cgroup = stOK
			add(check{Name: "psi per cgroup", Status: stOK, Detail: filepath.Join(layout.Unified.OwnDir(), "memory.pressure")})
		}
	} else {
		r.PSI.Cgroup = "no cgroup2 hierarchy"
		add(check{Name: "psi per cgroup", Status: stDegraded, Detail: "no cgroup2 hierarchy mounted"})
	}
	if w, err := host.PSITriggerWindow(filepath.Join(host.PSIDir, "memory")); err != nil {
		r.PSI.TriggerError = err.Error()
		add(check{Name: "psi triggers", Status: stDegraded, Detail: err.Error(), Fix: "nodeguard polls PSI instead"})
	} else {
		r.PSI.TriggerWindow = w.String()
		st := stOK
		if w > host.FastTriggerWindow {
			st = stDegraded
		}
		add(check{Name: "psi triggers", Status: st, Detail: "smallest window " + w.String()})
	}

	// The runtime first: the pod cgroups' driver, when cgroupDriver is
	// not set, is the one it reports.
	add(checkRuntime(ctx, r, layout, opts))
	if layout != nil && layout.Memory != nil {
		add(checkPodCgroups(ctx, r, layout, opts))
	}
	add(checkCNIPlugins(r, opts.CNIBinDirs))
	add(checkIptables(ctx))

	p, err := loader.Open(loader.Options{Logger: log, NoReaders: true})
	if err != nil {
		add(check{Name: "bpf", Status: stFail, Detail: err.Error()})
		return r
	}
	r.Hooks = p.Hooks()
	if err := p.Close(); err != nil {
		add(check{Name: "bpf", Status: stDegraded, Detail: "close: " + err.Error()})
	}
	attached := 0
	for _, h := range r.Hooks {
		c := check{Name: "hook " + h.Name, Status: stOK, Detail: string(h.Path)}
		switch {
		case h.Path == loader.PathOff:
			c.Status = stDegraded
			c.Detail = "off: " + attemptsText(h.Failures)
		case len(h.Failures) > 0:
			c.Status = stDegraded
			c.Detail = string(h.Path) + " (fell back: " + attemptsText(h.Failures) + ")"
		}
		if h.Path != loader.PathOff {
			attached++
		}
		add(c)
	}
	if attached == 0 {
		add(check{Name: "bpf", Status: stFail, Detail: "no hook could be attached on any path"})
	}
	return r
}

// checkRuntime dials the CRI runtime at opts.RuntimeEndpoint with a short
// timeout and records its name and version in r.Runtime. A runtime that
// does not answer is a failure when the endpoint was given, degraded
// otherwise; either way the detail says why and the fix what to do.
func checkRuntime(ctx context.Context, r *doctorReport, layout *cgroups.Layout, opts doctorOptions) check {
	r.Runtime.Endpoint = opts.RuntimeEndpoint
	c := check{Name: "runtime"}
	client, err := cri.Dial(ctx, opts.RuntimeEndpoint, doctorRuntimeTimeout)
	if err == nil {
		defer client.Close()
		info := client.Runtime()
		r.Runtime.Reachable = true
		r.Runtime.Name, r.Runtime.Version, r.Runtime.APIVersion = info.Name, info.Version, info.APIVersion
		c.Status = stOK
		c.Detail = fmt.Sprintf("%s %s (CRI %s) at %s", info.Name, info.Version, info.APIVersion, opts.RuntimeEndpoint)
		if layout != nil && layout.Memory != nil && client.RuntimePID() > 0 {
			if cg, err := cgroups.ProcessCgroup(client.RuntimePID(), layout.Memory); err == nil {
				r.Runtime.Cgroup = cg
				c.Detail += ", in cgroup " + cg
			}
		}
		cctx, cancel := context.WithTimeout(ctx, doctorRuntimeTimeout)
		defer cancel()
		d, ok, err := client.CgroupDriver(cctx)
		switch {
		case err != nil:
			c.Detail += "; cgroup driver unknown: " + err.Error()
		case !ok:
			c.Detail += "; it does not report its cgroup driver (CRI RuntimeConfig needs containerd >= 2.0)"
			want := opts.CgroupDriver
			if want == "" {
				want = string(kubepods.Cgroupfs) + ", what nodeguard uses when cgroupDriver is not set and the runtime does not say"
			}
			c.Fix = "check it by hand: SystemdCgroup = true under the runc options of /etc/containerd/config.toml is systemd, absent or false is cgroupfs (`containerd config dump | grep SystemdCgroup`); it must equal cgroupDriver (" + want + "); nodeguard also checks every sandbox's cgroup"
		default:
			r.Runtime.CgroupDriver = d
			c.Detail += "; cgroup driver " + d
			if opts.CgroupDriver == "" {
				c.Detail += " (nodeguard follows it: cgroupDriver is not set)"
			} else if d != opts.CgroupDriver {
				c.Status = stFail
				c.Fix = "set cgroupDriver: " + d + " in nodeguard's configuration (it is " + opts.CgroupDriver + "), or change the runtime's"
			}
		}
		return c
	}
	r.Runtime.Error = err.Error()
	c.Status = stDegraded
	if opts.RuntimeRequired {
		c.Status = stFail
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.Detail = "not running: no socket at " + opts.RuntimeEndpoint
		c.Fix = "start containerd (systemctl start containerd; apt-get install containerd runc), pass --runtime-endpoint for another runtime, or run nodeguard with --private-runtime"
	case errors.Is(err, syscall.ECONNREFUSED):
		c.Detail = "not running: " + opts.RuntimeEndpoint + " refuses connections (a stale socket)"
		c.Fix = "restart containerd (systemctl restart containerd); check its log (journalctl -u containerd)"
	case errors.Is(err, cri.ErrNotSocket):
		c.Detail = opts.RuntimeEndpoint + " is not a unix socket"
		c.Fix = "point --runtime-endpoint at the runtime's CRI socket"
	case errors.Is(err, cri.ErrNotCRI):
		c.Detail = "the endpoint answered, but not as a CRI v1 runtime: " + err.Error()
		c.Fix = "enable containerd's CRI plugin (remove \"cri\" from disabled_plugins in /etc/containerd/config.toml) or use a runtime with CRI v1 (containerd >= 1.6, CRI-O)"
	case errors.Is(err, context.DeadlineExceeded):
		c.Detail = fmt.Sprintf("no CRI answer from %s within %s", opts.RuntimeEndpoint, doctorRuntimeTimeout)
		c.Fix = "the runtime is wedged or overloaded: check its log and restart it"
	default:
		c.Detail = err.Error()
		c.Fix = "pass a unix:// CRI endpoint with --runtime-endpoint"
	}
	return c
}

// checkCNIPlugins looks for the plugins of nodeguard's network chain and
// loopback where netplumb looks for them, and records each path (or "").
// It only reads: no network configuration is written or run.
func checkCNIPlugins(r *doctorReport, dirs []string) check {
	if dirs == nil {
		dirs = netplumb.DefaultBinDirs
	}
	var missing []string
	for _, name := range netplumb.RequiredPlugins(netplumb.DefaultConfig()) {
		path, err := netplumb.FindPlugin(name, dirs)
		if err != nil {
			var nf *netplumb.PluginNotFoundError
			if !errors.As(err, &nf) {
				return check{Name: "cni plugins", Status: stDegraded, Detail: err.Error(), Fix: "make the CNI plugin directories readable"}
			}
			missing = append(missing, name)
		}
		r.CNIPlugins[name] = path
	}
	if len(missing) > 0 {
		return check{Name: "cni plugins", Status: stDegraded,
			Detail: fmt.Sprintf("missing %s in %s: pods without hostNetwork cannot start", strings.Join(missing, ", "), strings.Join(dirs, ", ")),
			Fix:    "apt-get install containernetworking-plugins (Debian: /usr/lib/cni), or unpack the CNI plugins release into /opt/cni/bin"}
	}
	return check{Name: "cni plugins", Status: stOK, Detail: fmt.Sprintf("%d plugins in %s", len(r.CNIPlugins), strings.Join(dirs, ", "))}
}

// checkIptables finds iptables, which the portmap plugin runs for
// hostPorts, and asks it its version (which changes nothing).
func checkIptables(ctx context.Context) check {
	c := check{Name: "iptables", Fix: "apt-get install iptables (portmap needs it for hostPort)"}
	path, err := exec.LookPath("iptables")
	if err != nil {
		c.Status, c.Detail = stDegraded, "not found in PATH: hostPort mappings will fail"
		return c
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(vctx, path, "--version").Output()
	if err != nil {
		c.Status, c.Detail = stDegraded, fmt.Sprintf("%s --version: %v", path, err)
		return c
	}
	c.Status, c.Detail, c.Fix = stOK, strings.TrimSpace(string(out)), ""
	return c
}

// checkPodCgroups says where the agent's pod cgroups will be and whether it
// can make them there, for the driver and root it is given, without
// leaving anything behind: with systemd, that systemd answers on D-Bus;
// with cgroupfs and an absolute root, that kubepods exists or its parent
// can hold it (nothing is written: on a shared machine the hierarchy's
// root is not ours to touch); with a relative root, a uniquely named
// cgroup is made beneath this process's own and removed.
func checkPodCgroups(ctx context.Context, r *doctorReport, layout *cgroups.Layout, opts doctorOptions) check {
	c := check{Name: "pod cgroups"}
	driver, err := kubepods.DriverFor(opts.CgroupDriver, r.Runtime.CgroupDriver)
	r.PodCgroups.Driver, r.PodCgroups.Root = string(driver), opts.CgroupRoot
	if err != nil {
		c.Status, c.Detail, c.Fix = stFail, err.Error(), "pass --cgroup-driver cgroupfs or systemd"
		return c
	}
	kube, err := kubepods.Name(driver, opts.CgroupRoot)
	if err != nil {
		c.Status, c.Detail, c.Fix = stFail, err.Error(), "pass an absolute --cgroup-root (/ on a node)"
		return c
	}
	if !path.IsAbs(opts.CgroupRoot) {
		return checkDelegation(layout.Memory)
	}
	mem, err := layout.Memory.Resolve(kube)
	if err != nil {
		c.Status, c.Detail = stFail, err.Error()
		c.Fix = "run nodeguard in the host's cgroup namespace, with the cgroup hierarchies mounted"
		return c
	}
	r.PodCgroups.Kubepods = mem.Path
	if driver == kubepods.Systemd {
		m, err := kubepods.New(ctx, layout, driver, opts.CgroupRoot, kubepods.Options{})
		if err != nil {
			c.Status, c.Detail = stFail, err.Error()
			c.Fix = "run systemd as init, or use --cgroup-driver cgroupfs (and SystemdCgroup = false in containerd)"
			return c
		}
		m.Close()
		c.Status, c.Detail = stOK, "systemd answers on D-Bus; the pods' slices go in "+mem.Path
		return c
	}
	if _, err := os.Stat(mem.Path); err == nil {
		c.Status, c.Detail = stOK, "kubepods exists at "+mem.Path+" (cgroupfs driver)"
		return c
	}
	// The nearest existing cgroup above: nodeguard run makes the rest.
	parent := filepath.Dir(mem.Path)
	for parent != layout.Memory.Mount && parent != "/" {
		if _, err := os.Stat(parent); err == nil {
			break
		}
		parent = filepath.Dir(parent)
	}
	c.Status, c.Detail = stOK, "nodeguard run creates "+mem.Path+" (cgroupfs driver)"
	if layout.Memory.V2() && parent != layout.Memory.Mount {
		if pids, err := cgroups.Procs(parent); err == nil && len(pids) > 0 {
			c.Status = stFail
			c.Detail = fmt.Sprintf("%s holds processes (%v): cgroup v2 enables no controller below a cgroup with processes, so kubepods beneath it would get no memory.max", parent, pids)
			c.Fix = "pick a --cgroup-root whose cgroup holds no process (/ on a node)"
		}
	}
	return c
}

// checkDelegation is the relative root's check: it creates a uniquely
// named cgroup beneath nodeguard's own memory cgroup, checks that the
// memory controller's limit file is there, and removes it: what the agent
// does for every pod. On cgroup v2 a cgroup that holds processes cannot
// give its children controllers (the no-internal-process rule): the agent
// moves itself into <own>/agent first, which doctor reports rather than
// does.
func checkDelegation(h *cgroups.Hierarchy) check {
	c := check{Name: "pod cgroups"}
	own := h.OwnDir()
	if own == "" {
		c.Status, c.Detail = stFail, "this process's memory cgroup is not visible under "+h.Mount
		c.Fix = "run nodeguard in the host's cgroup namespace (or mount the hierarchy so that its cgroup is beneath the mount)"
		return c
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read does not fail on Linux
	dir := filepath.Join(own, fmt.Sprintf("nodeguard-doctor-%d-%s", os.Getpid(), hex.EncodeToString(rnd[:])))
	if err := os.Mkdir(dir, 0o755); err != nil {
		c.Status, c.Detail = stFail, fmt.Sprintf("cannot create a cgroup beneath %s: %v", own, err)
		c.Fix = "run nodeguard as root with its cgroup delegated to it (systemd: Delegate=yes in the unit), or use an absolute cgroup root (/)"
		return c
	}
	limit := h.MemoryLimitFile()
	_, statErr := os.Stat(filepath.Join(dir, limit))
	if err := cgroups.Rmdir(dir, time.Now().Add(time.Second)); err != nil {
		c.Status, c.Detail = stFail, fmt.Sprintf("created %s but cannot remove it: %v", dir, err)
		c.Fix = "remove it by hand (rmdir); nodeguard must be able to remove the cgroups it makes"
		return c
	}
	if statErr != nil {
		c.Status = stDegraded
		c.Detail = fmt.Sprintf("a child of %s has no %s: the memory controller is not enabled below it", own, limit)
		c.Fix = "nodeguard run enables it (cgroup.subtree_control) after moving itself into " + filepath.Join(own, cgroups.AgentLeaf) +
			" (cgroup v2 gives no controller to the children of a cgroup with processes); that needs a cgroup of its own, delegated (systemd: Delegate=yes), or use an absolute cgroup root (/)"
		if h.V2() && h.Own != "/" {
			if pids, err := cgroups.Procs(own); err == nil {
				others := 0
				for _, p := range pids {
					if p != os.Getpid() {
						others++
					}
				}
				if others > 0 {
					c.Status = stFail
					c.Detail += fmt.Sprintf("; %s also holds %d other processes, which nodeguard does not move", own, others)
				}
			}
		}
		return c
	}
	c.Status, c.Detail = stOK, "created and removed a memory cgroup beneath "+own
	return c
}

func attemptsText(as []loader.Attempt) string {
	parts := make([]string, 0, len(as))
	for _, a := range as {
		msg := a.Err
		if len(msg) > 160 {
			msg = msg[:160] + "..."
		}
		parts = append(parts, string(a.Path)+": "+msg)
	}
	return strings.Join(parts, "; ")
}

func printDoctor(w io.Writer, r *doctorReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTATUS\tDETAIL")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Name, c.Status, c.Detail)
		if c.Fix != "" && c.Status != stOK {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	tw.Flush()
	switch {
	case !r.CanRun:
		fmt.Fprintln(w, "\nverdict: nodeguard cannot run here")
	case r.Degraded:
		fmt.Fprintln(w, "\nverdict: nodeguard can run here, degraded (see the checks above)")
	default:
		fmt.Fprintln(w, "\nverdict: nodeguard can run here")
	}
}
