package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/netplumb"
)

// Network is the pod network nodeguard owns, as the Manager uses it: the
// plumbing of every new sandbox is verified, and what dead sandboxes left
// behind is collected.
type Network struct {
	// Config is the network whose conflist the runtime uses.
	Config netplumb.Config
	// NodeNetNS is the network namespace that holds the bridge (the
	// runtime's); "" for nodeguard's own.
	NodeNetNS string
	// NetNSDirs are where the runtime keeps pod network namespace files
	// (containerd: /var/run/netns, or <state>/netns with
	// netns_mounts_under_state_dir).
	NetNSDirs []string
	// GCMinAge leaves leases and netns files younger than this alone:
	// sandboxes that another client of the runtime is creating are not
	// listed yet. nodeguard's own creations are held off during a
	// collection, so 0 is safe when nodeguard is the only client.
	GCMinAge time.Duration
}

// DefaultGCInterval is how often volumes and the network are collected
// after the first pass (which runs once every source is loaded).
const DefaultGCInterval = time.Minute

// verifyNetwork checks a new or adopted sandbox's plumbing through
// netlink. Host-network pods have none to check.
func (m *Manager) verifyNetwork(ctx context.Context, pod *corev1.Pod, s *cri.SandboxStatus) error {
	n := m.cfg.Network
	if n == nil || pod.Spec.HostNetwork {
		return nil
	}
	if s.NetNS == "" {
		return fmt.Errorf("verify pod network: the runtime did not report the sandbox's network namespace")
	}
	ip, err := netip.ParseAddr(s.IP)
	if err != nil {
		return fmt.Errorf("verify pod network: the runtime reported pod IP %q: %w", s.IP, err)
	}
	p, err := netplumb.Verify(ctx, netplumb.VerifyRequest{
		NodeNetNS: n.NodeNetNS, PodNetNS: s.NetNS, IfName: "eth0", Bridge: n.Config.WithDefaults().Bridge, IP: ip,
	})
	if err != nil {
		return err
	}
	m.log.Debug("pod network verified", "pod", key(pod), "veth", p.HostVeth, "ip", p.IP, "gateway", p.Gateway,
		"ingress_bps", p.IngressRate, "egress_bps", p.EgressRate)
	return nil
}

// gcNetwork releases IPs, veths and netns files of sandboxes that no
// longer exist; of the netns files only those named as the runtime names
// its sandboxes' (netplumb.RuntimeNetNSName), never another program's in
// the same directory. Sandbox creation is held off meanwhile (createMu), so a
// sandbox whose CNI ADD has run but which the runtime does not list yet
// cannot lose its address.
func (m *Manager) gcNetwork(ctx context.Context) error {
	n := m.cfg.Network
	if n == nil {
		return nil
	}
	m.createMu.Lock()
	defer m.createMu.Unlock()
	cctx, cancel := call(ctx)
	defer cancel()
	sbs, err := m.cfg.Runtime.ListAllPodSandboxes(cctx)
	if err != nil {
		return fmt.Errorf("network gc: %w", err)
	}
	live := make([]netplumb.Live, 0, len(sbs))
	for _, sb := range sbs {
		s, err := m.cfg.Runtime.PodSandboxStatus(cctx, sb.Id)
		if err != nil {
			// Unknown state: keep everything it might own.
			return fmt.Errorf("network gc: %w", err)
		}
		live = append(live, netplumb.Live{ID: sb.Id, NetNS: s.NetNS})
	}
	rep, err := netplumb.GC(ctx, netplumb.GCConfig{Config: n.Config, NodeNetNS: n.NodeNetNS, NetNSDirs: n.NetNSDirs,
		Owned: netplumb.RuntimeNetNSName, MinAge: n.GCMinAge, Logger: m.log}, live)
	if err != nil {
		return fmt.Errorf("network gc: %w", err)
	}
	if rep.IPsReleased+rep.VethsRemoved+rep.NetNSRemoved > 0 || len(rep.Errors) > 0 {
		m.log.Info("network gc", "ips_released", rep.IPsReleased, "veths_removed", rep.VethsRemoved,
			"netns_removed", rep.NetNSRemoved, "errors", len(rep.Errors))
	}
	for _, e := range rep.Errors {
		m.log.Warn("network gc", "err", e)
	}
	return nil
}
