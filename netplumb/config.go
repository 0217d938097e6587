package netplumb

import (
	"fmt"
	"math/bits"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"

	"github.com/containernetworking/cni/pkg/version"
)

// Defaults of Config. The pod subnet base 10.88.0.0 is the one containerd
// and Podman use for their bridge networks.
const (
	DefaultName       = "nodeguard"
	DefaultBridge     = "ng0"
	DefaultMaxPods    = 110 // the kubelet's --max-pods default
	DefaultConfDir    = "/etc/cni/net.d"
	DefaultIPAMDir    = "/var/lib/nodeguard/cni/networks"
	DefaultCacheDir   = "/var/lib/nodeguard/cni/cache"
	DefaultCNIVersion = "1.0.0"
	DefaultIfName     = "eth0"
)

// DefaultSubnetBase is where a derived pod subnet starts.
var DefaultSubnetBase = netip.MustParseAddr("10.88.0.0")

// DefaultBinDirs are searched for plugin binaries in order: the upstream
// install location first, then Debian's containernetworking-plugins.
var DefaultBinDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}

// reservedPerSubnet counts the addresses of a subnet that host-local never
// hands to a pod: the network address, the gateway (the bridge's own
// address, network+1) and the broadcast address.
const reservedPerSubnet = 3

// minDerivedBits is the widest prefix Subnet derivation produces (a /16
// holds 65533 pods, far beyond any node), so that a typo in MaxPods does
// not claim a /8 of address space.
const minDerivedBits = 16

// Config is the pod network nodeguard owns: one bridge with host-local
// IPAM, chained with portmap (hostPort) and bandwidth (the kubelet's
// ingress/egress bandwidth annotations).
type Config struct {
	// Name is the CNI network name; it also names the lease directory
	// IPAMDir/<Name> and the conflist ConfDir/10-<Name>.conflist.
	Name string
	// Bridge is the bridge device in the node namespace (at most 15 bytes,
	// the kernel's IFNAMSIZ-1).
	Bridge string
	// Subnet is the IPv4 pod subnet. The zero value derives it: the
	// smallest prefix at DefaultSubnetBase with room for MaxPods addresses
	// plus network, gateway and broadcast, but never wider than a /16
	// (MaxPods 110 gives 10.88.0.0/25, 250 a /24, 1000 a /22). An explicit
	// subnet must be masked (no host bits) and have that room too.
	Subnet netip.Prefix
	// MaxPods is the most pods the node runs at once.
	MaxPods int
	// BinDirs are searched, in order, for the plugin binaries.
	BinDirs []string
	// ConfDir is where the runtime reads its network configuration.
	ConfDir string
	// IPAMDir is host-local's dataDir.
	IPAMDir string
	// CacheDir is libcni's result cache (libcni's own default is
	// /var/lib/cni, shared with every other CNI user on the node).
	CacheDir string
	// CNIVersion is the configuration's cniVersion; at least 0.4.0, the
	// first with CHECK and cached results on DEL.
	CNIVersion string
	// Bandwidth chains the bandwidth plugin (traffic shaping from the
	// kubernetes.io/{ingress,egress}-bandwidth annotations).
	Bandwidth bool
	// PortMap chains the portmap plugin (hostPort).
	PortMap bool
}

// DefaultConfig returns the defaults, with both chained plugins on. Subnet
// is left zero, meaning "derived from MaxPods" wherever the Config is used,
// so that a MaxPods set later still derives a subnet that fits it.
func DefaultConfig() Config {
	c := Config{Bandwidth: true, PortMap: true}.WithDefaults()
	c.Subnet = netip.Prefix{}
	return c
}

// WithDefaults returns c with every zero field set to its default and the
// subnet derived if it is zero. Bandwidth and PortMap are left as they are
// (false is a choice); start from DefaultConfig to get them on. A MaxPods
// too large for a derived subnet leaves Subnet zero, for Validate to
// report.
func (c Config) WithDefaults() Config {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Bridge == "" {
		c.Bridge = DefaultBridge
	}
	if c.MaxPods == 0 {
		c.MaxPods = DefaultMaxPods
	}
	if len(c.BinDirs) == 0 {
		c.BinDirs = slices.Clone(DefaultBinDirs)
	}
	if c.ConfDir == "" {
		c.ConfDir = DefaultConfDir
	}
	if c.IPAMDir == "" {
		c.IPAMDir = DefaultIPAMDir
	}
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	if c.CNIVersion == "" {
		c.CNIVersion = DefaultCNIVersion
	}
	if !c.Subnet.IsValid() {
		if p, ok := DeriveSubnet(DefaultSubnetBase, c.MaxPods); ok {
			c.Subnet = p
		}
	}
	return c
}

// DeriveSubnet returns the smallest IPv4 prefix at base (masked to it) that
// holds maxPods pod addresses besides network, gateway and broadcast. It
// reports false when maxPods is not positive or needs more than a /16.
func DeriveSubnet(base netip.Addr, maxPods int) (netip.Prefix, bool) {
	if maxPods <= 0 || !base.Is4() {
		return netip.Prefix{}, false
	}
	need := uint64(maxPods) + reservedPerSubnet
	hostBits := bits.Len64(need - 1) // smallest h with 2^h >= need
	if 32-hostBits < minDerivedBits {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(base, 32-hostBits).Masked(), true
}

// Capacity returns how many pod addresses p holds under host-local: its
// size less network, gateway and broadcast (0 for a /31 or /32).
func Capacity(p netip.Prefix) int {
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits >= 31 {
		return 1<<31 - 1
	}
	n := 1<<hostBits - reservedPerSubnet
	if n < 0 {
		return 0
	}
	return n
}

// cniName is the CNI specification's pattern for network names and
// container ids.
var cniName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// Validate checks every field and returns the first problem as a
// *ConfigError naming the field and its value. A zero Subnet is valid if
// one can be derived from MaxPods; any other empty field is an error, so
// call it on the result of WithDefaults.
func (c Config) Validate() error {
	if !cniName.MatchString(c.Name) {
		return invalid("name", c.Name, "a CNI network name is letters, digits, '_', '.' and '-', starting with a letter or digit")
	}
	if err := validIfName(c.Bridge); err != nil {
		return invalid("bridge", c.Bridge, "%v", err)
	}
	if c.MaxPods <= 0 {
		return invalid("maxPods", strconv.Itoa(c.MaxPods), "must be positive")
	}
	if !c.Subnet.IsValid() {
		p, ok := DeriveSubnet(DefaultSubnetBase, c.MaxPods)
		if !ok {
			return invalid("maxPods", strconv.Itoa(c.MaxPods), "needs a subnet wider than /%d; set subnet explicitly", minDerivedBits)
		}
		c.Subnet = p
	}
	s := c.Subnet.String()
	switch {
	case !c.Subnet.Addr().Is4():
		return unsupported("subnet", s, "only an IPv4 pod subnet is supported")
	case c.Subnet.Masked() != c.Subnet:
		return invalid("subnet", s, "has host bits set (did you mean %s?)", c.Subnet.Masked())
	case c.Subnet.Bits() > 30:
		return invalid("subnet", s, "no room for network, gateway, broadcast and one pod (at most /30)")
	case Capacity(c.Subnet) < c.MaxPods:
		return invalid("subnet", s, "room for %d pods, maxPods is %d", Capacity(c.Subnet), c.MaxPods)
	}
	if len(c.BinDirs) == 0 {
		return invalid("binDirs", "[]", "at least one directory is needed")
	}
	for _, d := range c.BinDirs {
		if !filepath.IsAbs(d) {
			return invalid("binDirs", d, "must be an absolute path")
		}
	}
	for _, f := range []struct{ field, dir string }{{"confDir", c.ConfDir}, {"ipamDir", c.IPAMDir}, {"cacheDir", c.CacheDir}} {
		if !filepath.IsAbs(f.dir) {
			return invalid(f.field, f.dir, "must be an absolute path")
		}
	}
	known := false
	for _, v := range version.All.SupportedVersions() {
		known = known || v == c.CNIVersion
	}
	if !known {
		return invalid("cniVersion", c.CNIVersion, "not a CNI specification version (known: %v)", version.All.SupportedVersions())
	}
	if ok, err := version.GreaterThanOrEqualTo(c.CNIVersion, "0.4.0"); err != nil || !ok {
		return unsupported("cniVersion", c.CNIVersion, "CHECK and cached results need 0.4.0 or later")
	}
	return nil
}

// validIfName applies the kernel's dev_valid_name rules.
func validIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty interface name")
	case len(name) > 15:
		return fmt.Errorf("interface names are at most 15 bytes, this is %d", len(name))
	case name == "." || name == "..":
		return fmt.Errorf("not an interface name")
	}
	for _, r := range name {
		if r == '/' || r == ':' || r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f' {
			return fmt.Errorf("interface names may not contain %q", r)
		}
	}
	return nil
}
