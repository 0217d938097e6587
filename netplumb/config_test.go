package netplumb

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestDeriveSubnet(t *testing.T) {
	for _, tc := range []struct {
		maxPods int
		want    string // "" = no subnet
	}{
		{1, "10.88.0.0/30"},
		{2, "10.88.0.0/29"},
		{5, "10.88.0.0/29"},
		{6, "10.88.0.0/28"},
		{110, "10.88.0.0/25"},
		{125, "10.88.0.0/25"},
		{126, "10.88.0.0/24"},
		{250, "10.88.0.0/24"},
		{253, "10.88.0.0/24"},
		{254, "10.88.0.0/23"},
		{1000, "10.88.0.0/22"},
		{65533, "10.88.0.0/16"},
		{65534, ""},
		{0, ""},
		{-1, ""},
	} {
		got, ok := DeriveSubnet(DefaultSubnetBase, tc.maxPods)
		switch {
		case tc.want == "" && ok:
			t.Errorf("DeriveSubnet(%d) = %s, want none", tc.maxPods, got)
		case tc.want != "" && (!ok || got.String() != tc.want):
			t.Errorf("DeriveSubnet(%d) = %s, %v, want %s", tc.maxPods, got, ok, tc.want)
		case ok && Capacity(got) < tc.maxPods:
			t.Errorf("DeriveSubnet(%d) = %s holds only %d pods", tc.maxPods, got, Capacity(got))
		}
	}
}

func TestDefaultConfigIsValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Subnet.IsValid() {
		t.Errorf("DefaultConfig fixed the subnet %s; it must stay derived from MaxPods", c.Subnet)
	}
	c.MaxPods = 250
	if got := c.WithDefaults().Subnet.String(); got != "10.88.0.0/24" {
		t.Errorf("subnet for 250 pods = %s, want 10.88.0.0/24", got)
	}
	c = c.WithDefaults()
	if c.Subnet.String() != "10.88.0.0/24" || !c.Bandwidth || !c.PortMap || c.Bridge != "ng0" || c.Name != "nodeguard" {
		t.Errorf("DefaultConfig() = %+v", c)
	}
	if got, want := ConfFile(c), "/etc/cni/net.d/10-nodeguard.conflist"; got != want {
		t.Errorf("ConfFile = %s, want %s", got, want)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mod         func(*Config)
		field       string
		unsupported bool
		msg         string
	}{
		{"a /31 has no room", func(c *Config) { c.Subnet = netip.MustParsePrefix("10.0.0.0/31") }, "subnet", false, "netplumb: subnet 10.0.0.0/31: no room"},
		{"host bits are refused", func(c *Config) { c.Subnet = netip.MustParsePrefix("10.88.0.1/24") }, "subnet", false, "did you mean 10.88.0.0/24"},
		{"a subnet too small for maxPods is refused", func(c *Config) { c.Subnet = netip.MustParsePrefix("10.88.0.0/28") }, "subnet", false, "room for 13 pods, maxPods is 110"},
		{"IPv6 is unsupported, not malformed", func(c *Config) { c.Subnet = netip.MustParsePrefix("fd00::/64") }, "subnet", true, "only an IPv4"},
		{"a long bridge name is refused", func(c *Config) { c.Bridge = "nodeguard-bridge0" }, "bridge", false, "at most 15 bytes"},
		{"a bridge name with a slash is refused", func(c *Config) { c.Bridge = "ng/0" }, "bridge", false, `may not contain '/'`},
		{"a network name with a space is refused", func(c *Config) { c.Name = "my net" }, "name", false, `netplumb: name "my net"`},
		{"negative maxPods is refused", func(c *Config) { c.MaxPods = -3 }, "maxPods", false, "must be positive"},
		{"a relative bin dir is refused", func(c *Config) { c.BinDirs = []string{"cni/bin"} }, "binDirs", false, "absolute"},
		{"a relative conf dir is refused", func(c *Config) { c.ConfDir = "net.d" }, "confDir", false, "absolute"},
		{"a relative ipam dir is refused", func(c *Config) { c.IPAMDir = "ipam" }, "ipamDir", false, "absolute"},
		{"an unknown CNI version is refused", func(c *Config) { c.CNIVersion = "2.0.0" }, "cniVersion", false, "not a CNI specification version"},
		{"a CNI version without CHECK is unsupported", func(c *Config) { c.CNIVersion = "0.3.1" }, "cniVersion", true, "0.4.0 or later"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("Validate() = %v, want a *ConfigError", err)
			}
			if ce.Field != tc.field {
				t.Errorf("field = %q, want %q (%v)", ce.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
			if got := errors.Is(err, ErrUnsupported); got != tc.unsupported {
				t.Errorf("errors.Is(ErrUnsupported) = %v, want %v", got, tc.unsupported)
			}
			if got := errors.Is(err, ErrInvalidConfig); got == tc.unsupported {
				t.Errorf("errors.Is(ErrInvalidConfig) = %v, want %v", got, !tc.unsupported)
			}
		})
	}
}

func TestWithDefaultsLeavesAnImpossibleMaxPodsToValidate(t *testing.T) {
	c := Config{MaxPods: 100000}.WithDefaults()
	if c.Subnet.IsValid() {
		t.Fatalf("derived %s for 100000 pods", c.Subnet)
	}
	err := c.Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "maxPods" || !strings.Contains(err.Error(), "set subnet explicitly") {
		t.Fatalf("Validate() = %v", err)
	}
}

func TestWithDefaultsKeepsExplicitValues(t *testing.T) {
	sub := netip.MustParsePrefix("172.30.0.0/20")
	c := Config{Name: "x", Bridge: "br9", Subnet: sub, MaxPods: 7, BinDirs: []string{"/b"}, ConfDir: "/c", IPAMDir: "/i", CacheDir: "/k", CNIVersion: "0.4.0"}
	if got := c.WithDefaults(); got.Name != "x" || got.Bridge != "br9" || got.Subnet != sub || got.MaxPods != 7 ||
		got.BinDirs[0] != "/b" || got.ConfDir != "/c" || got.IPAMDir != "/i" || got.CacheDir != "/k" || got.CNIVersion != "0.4.0" || got.Bandwidth || got.PortMap {
		t.Fatalf("WithDefaults() = %+v", got)
	}
}
