// Where the agent itself runs, checked at start: its cgroup root and its
// placement beside the runtime.

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// refuseRelativeRootInService refuses a relative cgroup root beneath a
// systemd service's cgroup on cgroup v2: nodeguard would enable
// controllers in the service's cgroup (after moving itself into a leaf),
// and then systemd could not start the next agent there after a restart
// or crash (the kernel refuses to put a process into a cgroup whose
// controllers are enabled for its children), so the unit would fail to
// start for good while the pods live on.
func refuseRelativeRootInService(h *cgroups.Hierarchy, root string) error {
	if h == nil || !strings.HasSuffix(path.Base(h.Own), ".service") {
		return nil
	}
	return fmt.Errorf("cgroupRoot %q is relative, beneath the systemd service's cgroup %s: on cgroup v2 systemd could not start the agent there again after a restart once pod cgroups hang from it; use cgroupRoot: / (the default)", root, h.Own)
}

// cgroupDriver is the driver the agent makes pod cgroups with: the
// configured one, else the runtime's as it reports it, else cgroupfs
// (kubepods.DriverFor). A configured driver is checked against the
// runtime's later (checkPlacement).
func cgroupDriver(ctx context.Context, cfg config.Run, client *cri.Client, log *slog.Logger) (kubepods.Driver, error) {
	if cfg.CgroupDriver != "" {
		return kubepods.ParseDriver(cfg.CgroupDriver)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	reported, ok, err := client.CgroupDriver(cctx)
	d, derr := kubepods.DriverFor("", reported)
	switch {
	case derr != nil:
		return "", fmt.Errorf("the runtime's cgroup driver: %w", derr)
	case err != nil || !ok:
		log.Warn("cgroupDriver is not set and the runtime does not report its own (CRI RuntimeConfig needs containerd 2.0 or later): using cgroupfs, the kubelet's default; set cgroupDriver if the runtime uses systemd",
			"err", err)
	default:
		log.Info("cgroup driver: the runtime's", "cgroup_driver", d)
	}
	if d == kubepods.Systemd && !path.IsAbs(cfg.CgroupRoot) {
		return "", fmt.Errorf("cgroupRoot %q: the runtime's driver is systemd, which needs an absolute root (/ on a node)", cfg.CgroupRoot)
	}
	return d, nil
}

// checkPlacement makes sure the runtime will put containers into the
// cgroups nodeguard makes, before any pod runs: the runtime's cgroup
// driver, where it says (CRI RuntimeConfig), must be nodeguard's; and a
// runtime handed relative cgroup parents must share nodeguard's cgroup.
// Every sandbox is checked again once it runs (kubepods.CheckSandbox).
func checkPlacement(ctx context.Context, client *cri.Client, cgm *kubepods.Cgroups, log *slog.Logger) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, ok, err := client.CgroupDriver(cctx)
	switch {
	case err != nil:
		log.Warn("the runtime's cgroup driver is unknown; every sandbox's placement is checked instead", "err", err)
	case !ok:
		log.Info("the runtime does not report its cgroup driver (CRI RuntimeConfig); every sandbox's placement is checked instead",
			"cgroup_driver", cgm.Driver())
	default:
		if err := cgm.CheckRuntimeDriver(d); err != nil {
			return err
		}
		log.Info("cgroup driver matches the runtime's", "cgroup_driver", d)
	}
	switch pid := client.RuntimePID(); {
	case cgm.AbsoluteParents():
	case pid == 0:
		log.Warn("the runtime's pid is unknown (no SO_PEERCRED): cannot check that it shares nodeguard's cgroup, as a relative cgroup root needs; every sandbox's placement is checked instead")
	case pid == 1:
		log.Warn("the CRI socket is served by pid 1 (socket activation): cannot check the runtime's cgroup; every sandbox's placement is checked instead")
	default:
		return cgm.CheckRuntimeCgroup(pid)
	}
	return nil
}
