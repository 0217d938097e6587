package netplumb

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	cni100 "github.com/containernetworking/cni/pkg/types/100"
)

// undoTimeout bounds the DEL that undoes a failed ADD. It runs under a
// fresh context (the caller's may be what was cancelled) and DEL of this
// chain takes milliseconds; a plugin hanging for longer is stuck.
const undoTimeout = 30 * time.Second

// Direct runs the network list itself, for sandboxes whose network
// namespace nodeguard owns (bench net, tests, a runtime without CNI): it
// creates the namespace, runs ADD, CHECK and DEL through libcni with the
// plugins executed in the node namespace, and removes the namespace. A
// Direct is safe for concurrent use; host-local serializes allocations
// with its own lock file.
type Direct struct {
	cfg       Config
	cni       *libcni.CNIConfig
	list      *libcni.NetworkConfigList
	nodeNetNS string
	netnsDir  string
}

// PortMapping is one hostPort, portmap's portMappings entry.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`         // "tcp" (default), "udp" or "sctp"
	HostIP        string `json:"hostIP,omitempty"` // "" is every address of the node namespace
}

// AddOptions describe the pod an attachment is for.
type AddOptions struct {
	// PodName, PodNamespace and PodUID are passed to the plugins as the
	// K8S_POD_* CNI_ARGS, as the runtimes do.
	PodName, PodNamespace, PodUID string
	// IfName is the pod-side interface; "" is eth0.
	IfName string
	// PortMappings need Config.PortMap.
	PortMappings []PortMapping
	// Bandwidth needs Config.Bandwidth; nil is no shaping.
	Bandwidth *Bandwidth
}

// Attachment is one sandbox attached to the network. Check and Del
// rebuild the plugins' arguments from ID, NetNS and Options, so an
// Attachment is all a later process needs to undo it.
type Attachment struct {
	ID      string // sandbox (container) id
	NetNS   string // the pod's network namespace file
	IfName  string
	IP      netip.Prefix // the pod's address on IfName
	Gateway netip.Addr
	Options AddOptions
	Result  *cni100.Result
}

// NewDirect checks c (Validate, then every plugin present and supporting
// CNIVersion) and returns a Direct that creates pod namespaces under
// netnsDir and runs the plugins in the namespace at nodeNetNS ("" is this
// process's own, the real node's).
func NewDirect(ctx context.Context, c Config, nodeNetNS, netnsDir string) (*Direct, error) {
	c = c.WithDefaults()
	list, err := loadList(c)
	if err != nil {
		return nil, err
	}
	if err := validateList(ctx, c, list); err != nil {
		return nil, err
	}
	if netnsDir == "" || !filepath.IsAbs(netnsDir) {
		return nil, fmt.Errorf("netplumb: netns dir %q: must be an absolute path: %w", netnsDir, ErrInvalidConfig)
	}
	for _, d := range []string{netnsDir, c.IPAMDir, c.CacheDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("netplumb: create %s: %w", d, err)
		}
	}
	return &Direct{
		cfg:       c,
		cni:       newCNI(c),
		list:      list,
		nodeNetNS: nodeNetNS,
		netnsDir:  netnsDir,
	}, nil
}

// Config returns the configuration d runs, with defaults applied.
func (d *Direct) Config() Config { return d.cfg }

// Add creates the network namespace netnsDir/<id> and runs ADD for it. On
// failure everything it made is undone (DEL, then the namespace removed).
func (d *Direct) Add(ctx context.Context, id string, opts AddOptions) (_ *Attachment, retErr error) {
	if !cniName.MatchString(id) {
		return nil, fmt.Errorf("netplumb: add: sandbox id %q: letters, digits, '_', '.' and '-' only: %w", id, ErrInvalidConfig)
	}
	if err := d.checkOptions(&opts); err != nil {
		return nil, fmt.Errorf("netplumb: add %s: %w", id, err)
	}
	a := &Attachment{ID: id, NetNS: filepath.Join(d.netnsDir, id), IfName: opts.IfName, Options: opts}
	if err := NewNetNS(a.NetNS); err != nil {
		return nil, err // names the file, and so the id
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, RemoveNetNS(a.NetNS))
		}
	}()
	rt := d.runtimeConf(a)
	var res types.Result
	err := inNetNS(d.nodeNetNS, func() error {
		var err error
		res, err = d.cni.AddNetworkList(ctx, d.list, rt)
		return err
	})
	if err == nil {
		a.Result, err = cni100.NewResultFromResult(res)
		if err == nil {
			a.IP, a.Gateway, err = podAddress(a.Result, a.IfName)
		}
	}
	if err != nil {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		undo := inNetNS(d.nodeNetNS, func() error { return d.cni.DelNetworkList(uctx, d.list, rt) })
		if undo != nil {
			undo = fmt.Errorf("undo with DEL: %w", undo)
		}
		return nil, errors.Join(fmt.Errorf("netplumb: add %s: %w", id, err), undo)
	}
	return a, nil
}

// Check runs CHECK for a: every plugin confirms that what it set up is
// still there (bridge: the bridge, the veth pair on it and the address;
// host-local: the lease; portmap: its chains; bandwidth: its qdiscs).
//
// The plugins run one at a time, and portmap and bandwidth only when a has
// port mappings or shaping: with nothing to check, the fixed plugins
// return at once, while those of Debian 12 (containernetworking-plugins
// 1.1.1) fail (bandwidth dereferences its missing configuration). That
// portmap also checks for its DNAT chain in ip6tables although the pod
// has no IPv6 address ("could not check ipv6 dnat", fixed upstream by
// checking per address family); it checks IPv4 first and fails only after
// the IPv4 chain passed, so for a pod without IPv6 that error is ignored.
func (d *Direct) Check(ctx context.Context, a *Attachment) error {
	rt := d.runtimeConf(a)
	for _, p := range d.list.Plugins {
		switch p.Network.Type {
		case "portmap":
			if len(a.Options.PortMappings) == 0 {
				continue
			}
		case "bandwidth":
			if a.Options.Bandwidth == nil {
				continue
			}
		}
		one := *d.list
		one.Plugins = []*libcni.PluginConfig{p}
		err := inNetNS(d.nodeNetNS, func() error { return d.cni.CheckNetworkList(ctx, &one, rt) })
		if err != nil && p.Network.Type == "portmap" && !hasIPv6(a) && strings.Contains(err.Error(), "could not check ipv6 dnat") {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("netplumb: check %s: plugin %s: %w", a.ID, p.Network.Type, err)
		}
	}
	return nil
}

// hasIPv6 reports whether a's result gave the pod an IPv6 address.
func hasIPv6(a *Attachment) bool {
	if a.Result == nil {
		return false
	}
	for _, ipc := range a.Result.IPs {
		if ipc.Address.IP.To4() == nil {
			return true
		}
	}
	return false
}

// Del runs DEL for a and then removes its network namespace. DEL is
// idempotent, so Del may be repeated after a partial failure.
func (d *Direct) Del(ctx context.Context, a *Attachment) error {
	rt := d.runtimeConf(a)
	err := inNetNS(d.nodeNetNS, func() error { return d.cni.DelNetworkList(ctx, d.list, rt) })
	if err != nil {
		return fmt.Errorf("netplumb: del %s: %w", a.ID, err)
	}
	return RemoveNetNS(a.NetNS) // its errors name the file, and so the id
}

// checkOptions defaults and validates opts against d's chain.
func (d *Direct) checkOptions(opts *AddOptions) error {
	if opts.IfName == "" {
		opts.IfName = DefaultIfName
	}
	if err := validIfName(opts.IfName); err != nil {
		return fmt.Errorf("interface %q: %w: %w", opts.IfName, err, ErrInvalidConfig)
	}
	pms := make([]PortMapping, len(opts.PortMappings))
	for i, pm := range opts.PortMappings {
		pm.Protocol = strings.ToLower(pm.Protocol)
		if pm.Protocol == "" {
			pm.Protocol = "tcp"
		}
		switch {
		case pm.HostPort < 1 || pm.HostPort > 65535 || pm.ContainerPort < 1 || pm.ContainerPort > 65535:
			return fmt.Errorf("port mapping %d->%d: ports are 1..65535: %w", pm.HostPort, pm.ContainerPort, ErrInvalidConfig)
		case pm.Protocol != "tcp" && pm.Protocol != "udp" && pm.Protocol != "sctp":
			return fmt.Errorf("port mapping %d->%d: protocol %q: %w", pm.HostPort, pm.ContainerPort, pm.Protocol, ErrInvalidConfig)
		}
		if pm.HostIP != "" {
			if _, err := netip.ParseAddr(pm.HostIP); err != nil {
				return fmt.Errorf("port mapping %d->%d: host IP: %w: %w", pm.HostPort, pm.ContainerPort, err, ErrInvalidConfig)
			}
		}
		pms[i] = pm
	}
	opts.PortMappings = pms
	if bw := opts.Bandwidth; bw != nil {
		if (bw.IngressRate == 0) != (bw.IngressBurst == 0) || (bw.EgressRate == 0) != (bw.EgressBurst == 0) {
			return fmt.Errorf("bandwidth %+v: a rate needs a burst and a burst a rate: %w", *bw, ErrInvalidConfig)
		}
		if bw.IngressBurst/8 >= math.MaxUint32 || bw.EgressBurst/8 >= math.MaxUint32 {
			return fmt.Errorf("bandwidth %+v: bursts are below 32 Gbit: %w", *bw, ErrInvalidConfig)
		}
	}
	if len(opts.PortMappings) > 0 && !d.cfg.PortMap {
		return fmt.Errorf("port mappings need the portmap plugin, which %s does not chain: %w", d.cfg.Name, ErrUnsupported)
	}
	if opts.Bandwidth != nil && !d.cfg.Bandwidth {
		return fmt.Errorf("bandwidth needs the bandwidth plugin, which %s does not chain: %w", d.cfg.Name, ErrUnsupported)
	}
	return nil
}

// runtimeConf is what ADD, CHECK and DEL of a pass to the plugins; the
// three must agree (portmap's DEL finds its rules from the mappings).
func (d *Direct) runtimeConf(a *Attachment) *libcni.RuntimeConf {
	return runtimeConf(a.ID, a.NetNS, a.IfName, a.Options)
}

func runtimeConf(id, netnsPath, ifName string, opts AddOptions) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: id,
		NetNS:       netnsPath,
		IfName:      ifName,
		// IgnoreUnknown: plugins that do not know the K8S_POD_* keys
		// (bridge, host-local) would otherwise reject them.
		Args:           [][2]string{{"IgnoreUnknown", "1"}},
		CapabilityArgs: map[string]any{},
	}
	for _, kv := range [][2]string{
		{"K8S_POD_NAMESPACE", opts.PodNamespace},
		{"K8S_POD_NAME", opts.PodName},
		{"K8S_POD_INFRA_CONTAINER_ID", id},
		{"K8S_POD_UID", opts.PodUID},
	} {
		if kv[1] != "" {
			rt.Args = append(rt.Args, kv)
		}
	}
	if len(opts.PortMappings) > 0 {
		rt.CapabilityArgs["portMappings"] = opts.PortMappings
	}
	if opts.Bandwidth != nil {
		rt.CapabilityArgs["bandwidth"] = *opts.Bandwidth
	}
	return rt
}

// podAddress returns the first IPv4 address of res on the sandbox
// interface ifName, and its gateway.
func podAddress(res *cni100.Result, ifName string) (netip.Prefix, netip.Addr, error) {
	for _, ipc := range res.IPs {
		if ipc.Interface == nil || *ipc.Interface < 0 || *ipc.Interface >= len(res.Interfaces) {
			continue
		}
		iface := res.Interfaces[*ipc.Interface]
		if iface.Sandbox == "" || iface.Name != ifName {
			continue
		}
		addr, ok := netip.AddrFromSlice(ipc.Address.IP)
		if !ok || !addr.Unmap().Is4() {
			continue
		}
		ones, _ := ipc.Address.Mask.Size()
		gw, _ := netip.AddrFromSlice(ipc.Gateway)
		return netip.PrefixFrom(addr.Unmap(), ones), gw.Unmap(), nil
	}
	return netip.Prefix{}, netip.Addr{}, fmt.Errorf("result has no IPv4 address on sandbox interface %s: %v", ifName, res.IPs)
}

// Verify runs Verify for a in d's node namespace.
func (d *Direct) Verify(ctx context.Context, a *Attachment) (*Plumbing, error) {
	return Verify(ctx, VerifyRequest{NodeNetNS: d.nodeNetNS, PodNetNS: a.NetNS, IfName: a.IfName, Bridge: d.cfg.Bridge, IP: a.IP.Addr()})
}
