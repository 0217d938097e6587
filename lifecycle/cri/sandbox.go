package cri

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// SandboxStatus is a sandbox's status reduced to what nodeguard uses.
type SandboxStatus struct {
	ID        string
	Ready     bool      // SANDBOX_READY: its network and pause process are up
	IP        string    // the primary pod IP; "" for host-network pods
	IPs       []string  // every pod IP, the primary first
	CreatedAt time.Time // zero when the runtime did not say
	// NetNS is the path of the sandbox's network namespace, from the
	// runtime's verbose info (containerd: runtimeSpec.linux.namespaces);
	// "" for host-network sandboxes or a runtime that does not say.
	NetNS string
	// Raw is the runtime's full answer.
	Raw *runtimeapi.PodSandboxStatus
}

// RunPodSandbox creates and starts a sandbox (the pause container and its
// network) and returns its ID. It refuses, before calling the runtime, a
// config whose cgroup parent is empty or contains ".." (ErrBadCgroupParent).
// Whether a parent is relative or absolute is the cgroups/kubepods
// Manager's decision: it hands out absolute parents on a node, and on pure
// cgroup v2 even for a relative root, spelled beneath this process's own
// cgroup.
func (c *Client) RunPodSandbox(ctx context.Context, cfg *runtimeapi.PodSandboxConfig) (string, error) {
	what := sandboxName(cfg)
	if err := c.checkCgroupParent(cfg.GetLinux().GetCgroupParent()); err != nil {
		return "", fmt.Errorf("run pod sandbox %s: %w", what, err)
	}
	resp, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		return "", opError(ctx, "run pod sandbox", what, err)
	}
	return resp.GetPodSandboxId(), nil
}

func (c *Client) checkCgroupParent(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: empty (runc would create /k8s.io/<id> at the root of every hierarchy)", ErrBadCgroupParent)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Errorf("%w: %q climbs out with \"..\"", ErrBadCgroupParent, p)
	}
	return nil
}

func sandboxName(cfg *runtimeapi.PodSandboxConfig) string {
	m := cfg.GetMetadata()
	return m.GetNamespace() + "/" + m.GetName()
}

// StopPodSandbox stops every container of the sandbox and the sandbox
// itself, and tears its network down. The runtime kills without a grace
// period: stop the containers with StopContainer first.
func (c *Client) StopPodSandbox(ctx context.Context, id string) error {
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return opError(ctx, "stop pod sandbox", id, err)
	}
	return nil
}

// RemovePodSandbox removes a stopped sandbox and its containers. The pod's
// cgroup parent stays: it is the caller's to remove.
func (c *Client) RemovePodSandbox(ctx context.Context, id string) error {
	if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return opError(ctx, "remove pod sandbox", id, err)
	}
	return nil
}

// PodSandboxStatus returns the sandbox's status and IPs.
func (c *Client) PodSandboxStatus(ctx context.Context, id string) (*SandboxStatus, error) {
	resp, err := c.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return nil, opError(ctx, "pod sandbox status", id, err)
	}
	st := resp.GetStatus()
	if st == nil {
		return nil, fmt.Errorf("pod sandbox status %s: the runtime returned no status", id)
	}
	out := &SandboxStatus{
		ID:        st.GetId(),
		Ready:     st.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY,
		IP:        st.GetNetwork().GetIp(),
		CreatedAt: unixNano(st.GetCreatedAt()),
		Raw:       st,
	}
	if info, ok := resp.GetInfo()["info"]; ok {
		ns, err := netNSFromInfo([]byte(info))
		if err != nil {
			return nil, fmt.Errorf("pod sandbox status %s: %w", id, err)
		}
		out.NetNS = ns
	}
	if out.IP != "" {
		out.IPs = append(out.IPs, out.IP)
	}
	for _, ip := range st.GetNetwork().GetAdditionalIps() {
		out.IPs = append(out.IPs, ip.GetIp())
	}
	return out, nil
}

// netNSFromInfo reads the network namespace path out of containerd's
// verbose sandbox info: the OCI spec of the pause container lists it.
func netNSFromInfo(info []byte) (string, error) {
	var v struct {
		RuntimeSpec *struct {
			Linux *struct {
				Namespaces []struct {
					Type string `json:"type"`
					Path string `json:"path"`
				} `json:"namespaces"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal(info, &v); err != nil {
		return "", fmt.Errorf("verbose sandbox info is not JSON: %w", err)
	}
	if v.RuntimeSpec == nil || v.RuntimeSpec.Linux == nil {
		return "", nil
	}
	for _, ns := range v.RuntimeSpec.Linux.Namespaces {
		if ns.Type == "network" {
			return ns.Path, nil
		}
	}
	return "", nil
}

// ListAllPodSandboxes returns every sandbox of the runtime, nodeguard's or
// not: the network garbage collector must not take what another client's
// sandbox still uses.
func (c *Client) ListAllPodSandboxes(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, opError(ctx, "list pod sandboxes", "all", err)
	}
	return resp.GetItems(), nil
}

// ListPodSandbox returns nodeguard's sandboxes (ManagedLabel=true) that also
// carry every label in labels (nil for all of them).
func (c *Client) ListPodSandbox(ctx context.Context, labels map[string]string) ([]*runtimeapi.PodSandbox, error) {
	sel := managedSelector(labels)
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{LabelSelector: sel},
	})
	if err != nil {
		return nil, opError(ctx, "list pod sandboxes", selectorString(sel), err)
	}
	return resp.GetItems(), nil
}

func managedSelector(labels map[string]string) map[string]string {
	sel := maps.Clone(labels)
	if sel == nil {
		sel = map[string]string{}
	}
	sel[ManagedLabel] = "true"
	return sel
}

func selectorString(sel map[string]string) string {
	parts := make([]string, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		parts = append(parts, k+"="+sel[k])
	}
	return strings.Join(parts, ",")
}
