package netplumb

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// The conflist's shape. Structs rather than maps keep the key order, and so
// the rendered bytes, stable.
type (
	confList struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		Plugins    []any  `json:"plugins"`
	}
	bridgeConf struct {
		Type        string   `json:"type"`
		Bridge      string   `json:"bridge"`
		IsGateway   bool     `json:"isGateway"`
		IPMasq      bool     `json:"ipMasq"`
		HairpinMode bool     `json:"hairpinMode"`
		IPAM        ipamConf `json:"ipam"`
	}
	ipamConf struct {
		Type    string          `json:"type"`
		Ranges  [][]ipamRange   `json:"ranges"`
		Routes  []ipamRouteConf `json:"routes"`
		DataDir string          `json:"dataDir"`
	}
	ipamRange struct {
		Subnet string `json:"subnet"`
	}
	ipamRouteConf struct {
		Dst string `json:"dst"`
	}
	portMapConf struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities"`
		SNAT         bool            `json:"snat"`
	}
	bandwidthConf struct {
		Type         string          `json:"type"`
		Capabilities map[string]bool `json:"capabilities"`
	}
)

// Render returns the network configuration list for c (after WithDefaults;
// an invalid c is refused with Validate's error):
//
//   - bridge: the bridge Config.Bridge with the gateway address on it
//     (isGateway), hairpinMode so that a pod reaches itself through its own
//     hostPort, ipMasq false (nodeguard does not NAT pod egress; masquerade
//     is the node's routing policy, not the pod network's). IPAM is
//     host-local with one range, the pod subnet, a default route through
//     the gateway, and its leases in Config.IPAMDir.
//   - portmap (if Config.PortMap), with the portMappings capability and
//     snat, which masquerades hairpin and localhost hostPort traffic.
//   - bandwidth (if Config.Bandwidth), with the bandwidth capability.
//
// loopback is deliberately not chained: CNI plugins in a list all act on
// the same interface (CNI_IFNAME, eth0), while containerd and CRI-O bring
// up lo themselves with a separate built-in loopback network (go-cni's
// WithLoNetwork), and Direct's NewNetNS sets lo up when it creates the
// namespace. Chaining it would run it twice per pod for nothing.
func Render(c Config) ([]byte, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	plugins := []any{bridgeConf{
		Type:        "bridge",
		Bridge:      c.Bridge,
		IsGateway:   true,
		IPMasq:      false,
		HairpinMode: true,
		IPAM: ipamConf{
			Type:    "host-local",
			Ranges:  [][]ipamRange{{{Subnet: c.Subnet.String()}}},
			Routes:  []ipamRouteConf{{Dst: "0.0.0.0/0"}},
			DataDir: c.IPAMDir,
		},
	}}
	if c.PortMap {
		plugins = append(plugins, portMapConf{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}, SNAT: true})
	}
	if c.Bandwidth {
		plugins = append(plugins, bandwidthConf{Type: "bandwidth", Capabilities: map[string]bool{"bandwidth": true}})
	}
	b, err := json.MarshalIndent(confList{CNIVersion: c.CNIVersion, Name: c.Name, Plugins: plugins}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("netplumb: render %s: %w", c.Name, err)
	}
	return append(b, '\n'), nil
}

// ConfFile is where Install writes c's conflist: ConfDir/10-<Name>.conflist.
// The "10-" prefix is the runtimes' convention for the primary network
// (containerd ships 10-containerd-net.conflist).
func ConfFile(c Config) string {
	return filepath.Join(c.ConfDir, "10-"+c.Name+".conflist")
}

// pluginTypes lists the plugin binaries c's conflist needs, in chain order.
func pluginTypes(c Config) []string {
	t := []string{"bridge", "host-local"}
	if c.PortMap {
		t = append(t, "portmap")
	}
	if c.Bandwidth {
		t = append(t, "bandwidth")
	}
	return t
}
