package netplumb

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDirectPlumbsPodsThatTalk(t *testing.T) {
	n := newTestNode(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	bw, err := BandwidthFromAnnotations(map[string]string{AnnotationIngressBandwidth: "1M", AnnotationEgressBandwidth: "2M"})
	if err != nil {
		t.Fatal(err)
	}
	opts := []AddOptions{
		{PodName: "web", PodNamespace: "default", PodUID: "uid-0", PortMappings: []PortMapping{{HostPort: 18080, ContainerPort: 8080}}},
		{PodName: "client", PodNamespace: "default", PodUID: "uid-1"},
		{PodName: "shaped", PodNamespace: "default", PodUID: "uid-2", Bandwidth: bw},
	}
	pods := make([]*Attachment, len(opts))
	for i, o := range opts {
		a, err := n.d.Add(ctx, fmt.Sprintf("pod%d", i), o)
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = a
	}
	gw := pods[0].Gateway

	t.Run("each pod has a veth on the bridge, its IP and a default route", func(t *testing.T) {
		subnet := n.d.Config().Subnet
		seen := map[netip.Addr]bool{}
		for _, a := range pods {
			p, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: a.NetNS, Bridge: "ng0", IP: a.IP.Addr()})
			if err != nil {
				t.Fatal(err)
			}
			if p.IP != a.IP || !subnet.Contains(p.IP.Addr()) || p.IP.Bits() != subnet.Bits() {
				t.Errorf("%s: IP %s, attachment says %s, subnet %s", a.ID, p.IP, a.IP, subnet)
			}
			if seen[p.IP.Addr()] {
				t.Errorf("%s: IP %s given twice", a.ID, p.IP)
			}
			seen[p.IP.Addr()] = true
			if p.Gateway != gw || gw != subnet.Addr().Next() {
				t.Errorf("%s: gateway %s, want %s", a.ID, p.Gateway, subnet.Addr().Next())
			}
			if p.HostVeth == "" || p.HostIndex == 0 || p.PodIndex == 0 {
				t.Errorf("%s: plumbing %+v", a.ID, p)
			}
		}
		if got := n.vethsOnBridge(t); len(got) != 3 {
			t.Errorf("veths on the bridge: %v", got)
		}
	})

	t.Run("CHECK passes for every pod", func(t *testing.T) {
		for _, a := range pods {
			if err := n.d.Check(ctx, a); err != nil {
				t.Error(err)
			}
		}
	})

	serve(t, pods[0].NetNS, "0.0.0.0:8080", "hello from pod0")

	t.Run("a pod reaches another pod's address over TCP", func(t *testing.T) {
		got, err := dial(ctx, pods[1].NetNS, netip.AddrPortFrom(pods[0].IP.Addr(), 8080).String())
		if err != nil || got != "hello from pod0" {
			t.Fatalf("dial from pod1 = %q, %v", got, err)
		}
	})

	t.Run("the node reaches a hostPort at the bridge's address", func(t *testing.T) {
		got, err := dial(ctx, n.nodeNS, netip.AddrPortFrom(gw, 18080).String())
		if err != nil || got != "hello from pod0" {
			t.Fatalf("dial %s:18080 from the node netns = %q, %v", gw, got, err)
		}
	})

	t.Run("the node reaches a hostPort at 127.0.0.1", func(t *testing.T) {
		got, err := dial(ctx, n.nodeNS, "127.0.0.1:18080")
		if err != nil || got != "hello from pod0" {
			t.Fatalf("dial 127.0.0.1:18080 from the node netns = %q, %v", got, err)
		}
	})

	t.Run("a pod reaches a hostPort at the bridge's address", func(t *testing.T) {
		got, err := dial(ctx, pods[1].NetNS, netip.AddrPortFrom(gw, 18080).String())
		if err != nil || got != "hello from pod0" {
			t.Fatalf("dial %s:18080 from pod1 = %q, %v", gw, got, err)
		}
	})

	t.Run("a pod reaches itself through its own hostPort (hairpin)", func(t *testing.T) {
		got, err := dial(ctx, pods[0].NetNS, netip.AddrPortFrom(gw, 18080).String())
		if err != nil || got != "hello from pod0" {
			t.Fatalf("dial %s:18080 from pod0 = %q, %v", gw, got, err)
		}
	})

	var shapedIFB string
	t.Run("bandwidth annotations become tbf rates on the host veth and the IFB", func(t *testing.T) {
		p, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: pods[2].NetNS, IP: pods[2].IP.Addr()})
		if err != nil {
			t.Fatal(err)
		}
		if p.IngressRate != 1_000_000 || p.EgressRate != 2_000_000 || p.IFB == "" {
			t.Fatalf("shaping: ingress %d bit/s, egress %d bit/s via %q; want 1000000, 2000000 via an IFB", p.IngressRate, p.EgressRate, p.IFB)
		}
		shapedIFB = p.IFB
		q, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: pods[1].NetNS})
		if err != nil {
			t.Fatal(err)
		}
		if q.IngressRate != 0 || q.EgressRate != 0 || q.IFB != "" {
			t.Errorf("an unshaped pod reports shaping: %+v", q)
		}
	})

	t.Run("Verify names what is wrong", func(t *testing.T) {
		_, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: pods[1].NetNS, IP: netip.MustParseAddr("10.99.0.9")})
		if !errors.Is(err, ErrNotPlumbed) || !strings.Contains(err.Error(), "does not have 10.99.0.9") {
			t.Errorf("wrong IP: %v", err)
		}
		_, err = Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: pods[1].NetNS, Bridge: "nosuchbr"})
		if !errors.Is(err, ErrNotPlumbed) || !strings.Contains(err.Error(), "no bridge nosuchbr") {
			t.Errorf("wrong bridge: %v", err)
		}
		p, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: pods[1].NetNS})
		if err != nil {
			t.Fatal(err)
		}
		h, err := openNS(n.nodeNS)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		hv, err := h.LinkByName(p.HostVeth)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetNoMaster(hv); err != nil {
			t.Fatal(err)
		}
		_, err = Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: pods[1].NetNS})
		if !errors.Is(err, ErrNotPlumbed) || !strings.Contains(err.Error(), "is not enslaved to bridge ng0") {
			t.Errorf("veth off the bridge: %v", err)
		}
		if err := n.d.Check(ctx, pods[1]); err == nil {
			t.Errorf("CHECK passed for a veth off the bridge")
		}
		br, err := h.LinkByName("ng0")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetMaster(hv, br); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: pods[1].NetNS}); err != nil {
			t.Errorf("after repair: %v", err)
		}
	})

	t.Run("DEL leaves no veth, IFB, lease, cache entry or netns", func(t *testing.T) {
		for _, a := range pods {
			if err := n.d.Del(ctx, a); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(a.NetNS); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: netns file still there: %v", a.ID, err)
			}
		}
		if got := n.vethsOnBridge(t); len(got) != 0 {
			t.Errorf("veths left on the bridge: %v", got)
		}
		if links := n.links(t); shapedIFB == "" || slices.Contains(links, shapedIFB) || len(links) != 2 {
			t.Errorf("links left in the node netns: %v (IFB was %q; want only lo and ng0)", links, shapedIFB)
		}
		if got := n.leases(t); len(got) != 0 {
			t.Errorf("leases left: %v", got)
		}
		if ents, _ := os.ReadDir(filepath.Join(n.d.cfg.CacheDir, "results")); len(ents) != 0 {
			t.Errorf("%d libcni cache entries left", len(ents))
		}
		if err := n.d.Del(ctx, pods[0]); err != nil {
			t.Errorf("a second Del: %v", err)
		}
	})
}

func TestDirectAddUndoesAFailedAdd(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxPods = 1 }) // a derived /30: one pod address
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	a, err := n.d.Add(ctx, "first", AddOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.d.Add(ctx, "second", AddOptions{}); err == nil {
		t.Fatal("a second pod got an address in a /30")
	}
	if _, err := os.Stat(filepath.Join(n.netnsDir, "second")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed pod's netns is left: %v", err)
	}
	if got := n.vethsOnBridge(t); len(got) != 1 {
		t.Errorf("veths on the bridge after a failed ADD: %v", got)
	}
	if err := n.d.Del(ctx, a); err != nil {
		t.Fatal(err)
	}
}

func TestDirectRefusesBadOptions(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.Bandwidth = false })
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		id   string
		opts AddOptions
		want error
	}{
		{"an id with a slash is refused", "../x", AddOptions{}, ErrInvalidConfig},
		{"port 0 is refused", "p", AddOptions{PortMappings: []PortMapping{{HostPort: 0, ContainerPort: 80}}}, ErrInvalidConfig},
		{"an unknown protocol is refused", "p", AddOptions{PortMappings: []PortMapping{{HostPort: 80, ContainerPort: 80, Protocol: "icmp"}}}, ErrInvalidConfig},
		{"a burst without a rate is refused", "p", AddOptions{Bandwidth: &Bandwidth{IngressBurst: 8000}}, ErrInvalidConfig},
		{"shaping without the bandwidth plugin is unsupported", "p", AddOptions{Bandwidth: &Bandwidth{IngressRate: 1e6, IngressBurst: 1e6}}, ErrUnsupported},
		{"a long interface name is refused", "p", AddOptions{IfName: "eth0123456789abcdef"}, ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := n.d.Add(ctx, tc.id, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Add() = %v, want %v", err, tc.want)
			}
		})
	}
	if ents, _ := os.ReadDir(n.netnsDir); len(ents) != 0 {
		t.Errorf("refused adds left %d netns files", len(ents))
	}
}
