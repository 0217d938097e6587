package netplumb

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// VerifyRequest names a pod's plumbing to check.
type VerifyRequest struct {
	// NodeNetNS is the path of the namespace holding the bridge; "" is
	// this process's own.
	NodeNetNS string
	// PodNetNS is the path of the pod's namespace (e.g. containerd's
	// <state>/netns/cni-<uuid>, or an Attachment's NetNS).
	PodNetNS string
	// IfName is the pod-side interface; "" is eth0.
	IfName string
	// Bridge is the bridge the host end must be enslaved to; "" is the
	// default bridge.
	Bridge string
	// IP is the address the runtime reported, which must be on IfName; the
	// zero value accepts IfName's first IPv4 address.
	IP netip.Addr
}

// Plumbing is what Verify found.
type Plumbing struct {
	HostVeth  string       // host end of the veth pair, in the node namespace
	HostIndex int          // its ifindex in the node namespace
	PodIndex  int          // the pod end's ifindex in the pod namespace
	IP        netip.Prefix // the pod's address on IfName
	Gateway   netip.Addr   // the default route's next hop, an address of the bridge
	// IngressRate is the rate (bits/s) of the tbf root qdisc on the host
	// veth, which shapes traffic into the pod; 0 if there is none.
	IngressRate uint64
	// EgressRate is the rate (bits/s) of the tbf root qdisc on the IFB
	// device that the host veth's ingress is redirected to (traffic out
	// of the pod); 0 if there is none.
	EgressRate uint64
	// IFB is that IFB device, "" if there is none.
	IFB string
}

// Verify checks through netlink that a pod's network is really plumbed:
// the pod-side interface exists, is a veth, is up and carries the IP; a
// default route via a gateway exists in the pod namespace, and the
// gateway is an address of the bridge; the veth's peer is in the node
// namespace (matched by ifindex and netns id, both ways), is up and is
// enslaved to the bridge, which is up. It also reads the shaping the
// bandwidth plugin installed. It only reads.
//
// An error wrapping ErrNotPlumbed names what is missing or wrong; other
// errors mean a namespace or netlink could not be read.
func Verify(ctx context.Context, r VerifyRequest) (*Plumbing, error) {
	if r.IfName == "" {
		r.IfName = DefaultIfName
	}
	if r.Bridge == "" {
		r.Bridge = DefaultBridge
	}
	if r.PodNetNS == "" {
		return nil, fmt.Errorf("netplumb: verify: no pod netns: %w", ErrInvalidConfig)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("netplumb: verify %s in %s: %s: %w", r.IfName, r.PodNetNS, fmt.Sprintf(format, args...), ErrNotPlumbed)
	}
	node, err := openNS(r.NodeNetNS)
	if err != nil {
		return nil, err
	}
	defer node.Close()
	pod, err := openNS(r.PodNetNS)
	if err != nil {
		return nil, err
	}
	defer pod.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// The pod side.
	podLink, err := pod.LinkByName(r.IfName)
	if err != nil {
		return nil, fail("no interface %s: %v", r.IfName, err)
	}
	if _, ok := podLink.(*netlink.Veth); !ok {
		return nil, fail("%s is a %s, not a veth", r.IfName, podLink.Type())
	}
	pa := podLink.Attrs()
	if pa.Flags&net.FlagUp == 0 {
		return nil, fail("%s is down", r.IfName)
	}
	p := &Plumbing{PodIndex: pa.Index}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return pod.AddrList(podLink, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("netplumb: verify: list addresses of %s in %s: %w", r.IfName, r.PodNetNS, err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		if ip = ip.Unmap(); !r.IP.IsValid() || ip == r.IP {
			p.IP = netip.PrefixFrom(ip, ones)
			break
		}
	}
	if !p.IP.IsValid() {
		if r.IP.IsValid() {
			return nil, fail("%s does not have %s (has %v)", r.IfName, r.IP, addrList(addrs))
		}
		return nil, fail("%s has no IPv4 address", r.IfName)
	}
	routes, err := retryDump(func() ([]netlink.Route, error) { return pod.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("netplumb: verify: list routes in %s: %w", r.PodNetNS, err)
	}
	for _, rt := range routes {
		if rt.Table != 0 && rt.Table != 254 { // main
			continue
		}
		if isDefault(rt) && rt.Gw != nil {
			gw, ok := netip.AddrFromSlice(rt.Gw)
			if ok && rt.LinkIndex == pa.Index {
				p.Gateway = gw.Unmap()
				break
			}
		}
	}
	if !p.Gateway.IsValid() {
		return nil, fail("no default route via a gateway on %s", r.IfName)
	}

	// The node side.
	br, err := node.LinkByName(r.Bridge)
	if err != nil {
		return nil, fail("no bridge %s in the node netns: %v", r.Bridge, err)
	}
	if _, ok := br.(*netlink.Bridge); !ok {
		return nil, fail("%s is a %s, not a bridge", r.Bridge, br.Type())
	}
	if br.Attrs().Flags&net.FlagUp == 0 {
		return nil, fail("bridge %s is down", r.Bridge)
	}
	brAddrs, err := retryDump(func() ([]netlink.Addr, error) { return node.AddrList(br, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("netplumb: verify: list addresses of %s: %w", r.Bridge, err)
	}
	if !hasAddr(brAddrs, p.Gateway) {
		return nil, fail("default route via %s, but bridge %s has %v", p.Gateway, r.Bridge, addrList(brAddrs))
	}
	host, err := hostPeer(node, pod, podLink)
	if err != nil {
		return nil, fail("%v", err)
	}
	ha := host.Attrs()
	p.HostVeth, p.HostIndex = ha.Name, ha.Index
	if ha.MasterIndex != br.Attrs().Index {
		return nil, fail("host veth %s is not enslaved to bridge %s (master index %d, bridge index %d)", ha.Name, r.Bridge, ha.MasterIndex, br.Attrs().Index)
	}
	if ha.Flags&net.FlagUp == 0 {
		return nil, fail("host veth %s is down", ha.Name)
	}
	if err := readShaping(node, host, p); err != nil {
		return nil, fmt.Errorf("netplumb: verify: read traffic shaping of %s: %w", ha.Name, err)
	}
	return p, nil
}

// hostPeer finds the node end of the pod's veth. The pod end's IFLA_LINK
// is the peer's ifindex and its IFLA_LINK_NETNSID the node namespace's id
// as the pod namespace knows it; the peer must point back the same way.
// If the index does not match (a pod end moved between namespaces), the
// node's veths are scanned.
func hostPeer(node, pod *nsHandle, podLink netlink.Link) (netlink.Link, error) {
	podID, err := node.GetNetNsIdByFd(int(pod.ns))
	if err != nil {
		return nil, fmt.Errorf("get the pod netns id in the node netns: %w", err)
	}
	nodeID, err := pod.GetNetNsIdByFd(int(node.ns))
	if err != nil {
		return nil, fmt.Errorf("get the node netns id in the pod netns: %w", err)
	}
	pa := podLink.Attrs()
	if podID < 0 || nodeID < 0 || pa.NetNsID != nodeID {
		return nil, fmt.Errorf("the peer of %s is not in the node netns (peer netns id %d, node netns id %d)", pa.Name, pa.NetNsID, nodeID)
	}
	isPeer := func(l netlink.Link) bool {
		_, veth := l.(*netlink.Veth)
		return veth && l.Attrs().ParentIndex == pa.Index && l.Attrs().NetNsID == podID
	}
	if l, err := node.LinkByIndex(pa.ParentIndex); err == nil && isPeer(l) {
		return l, nil
	}
	links, err := retryDump(node.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links in the node netns: %w", err)
	}
	for _, l := range links {
		if isPeer(l) {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no veth in the node netns is the peer of %s (index %d)", pa.Name, pa.Index)
}

// readShaping fills the rates the bandwidth plugin set: a tbf root qdisc on
// the host veth (into the pod), and an ingress qdisc on it whose filter
// redirects (mirred) to an IFB device with a tbf root qdisc (out of the
// pod).
func readShaping(node *nsHandle, host netlink.Link, p *Plumbing) error {
	qs, err := retryDump(func() ([]netlink.Qdisc, error) { return node.QdiscList(host) })
	if err != nil {
		return err
	}
	p.IngressRate = tbfRate(qs)
	hasIngress := false
	for _, q := range qs {
		_, ok := q.(*netlink.Ingress)
		hasIngress = hasIngress || ok
	}
	if !hasIngress {
		return nil
	}
	fs, err := retryDump(func() ([]netlink.Filter, error) { return node.FilterList(host, netlink.MakeHandle(0xffff, 0)) })
	if err != nil {
		return err
	}
	for _, f := range fs {
		u, ok := f.(*netlink.U32)
		if !ok {
			continue
		}
		for _, a := range u.Actions {
			m, ok := a.(*netlink.MirredAction)
			if !ok || m.MirredAction != netlink.TCA_EGRESS_REDIR {
				continue
			}
			ifb, err := node.LinkByIndex(m.Ifindex)
			if err != nil {
				return fmt.Errorf("find the redirect target (index %d): %w", m.Ifindex, err)
			}
			iqs, err := retryDump(func() ([]netlink.Qdisc, error) { return node.QdiscList(ifb) })
			if err != nil {
				return err
			}
			p.IFB, p.EgressRate = ifb.Attrs().Name, tbfRate(iqs)
			return nil
		}
	}
	return nil
}

// tbfRate returns the rate in bits/s of the root tbf qdisc in qs, 0 if
// there is none. netlink reports tbf rates in bytes/s.
func tbfRate(qs []netlink.Qdisc) uint64 {
	for _, q := range qs {
		if t, ok := q.(*netlink.Tbf); ok && t.Parent == netlink.HANDLE_ROOT {
			return t.Rate * 8
		}
	}
	return 0
}

// isDefault reports whether r is a default route (netlink reports its
// destination as nil or 0.0.0.0/0 depending on the version).
func isDefault(r netlink.Route) bool {
	if r.Dst == nil {
		return true
	}
	ones, _ := r.Dst.Mask.Size()
	return ones == 0
}

func hasAddr(addrs []netlink.Addr, ip netip.Addr) bool {
	for _, a := range addrs {
		if x, ok := netip.AddrFromSlice(a.IP); ok && x.Unmap() == ip {
			return true
		}
	}
	return false
}

func addrList(addrs []netlink.Addr) []string {
	s := make([]string, 0, len(addrs))
	for _, a := range addrs {
		s = append(s, a.IPNet.String())
	}
	return s
}
