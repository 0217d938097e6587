package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/internal/cgroups"
	"github.com/nodeguard/nodeguard/internal/host"
	"github.com/nodeguard/nodeguard/loader"
)

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
	Checks       []check         `json:"checks"`
	CanRun       bool            `json:"can_run"`
	Degraded     bool            `json:"degraded"`
	Reasons      []string        `json:"reasons,omitempty"`
}

func newDoctorCmd(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check what this kernel and host allow nodeguard to do",
		Long: `Loads every BPF hook for real (and unloads it), and checks BTF, the cgroup
layout, PSI and capabilities. Exits 0 when nodeguard can run here, even
degraded (a fallback path, a slower PSI trigger window); non-zero, with the
reason, when it cannot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			r := runDoctor(log)
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
	return cmd
}

func runDoctor(log *slog.Logger) *doctorReport {
	r := &doctorReport{Capabilities: map[string]bool{}, CanRun: true}
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
