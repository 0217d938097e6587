package netplumb

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
)

// FuzzParseLease feeds arbitrary bytes to the parser of host-local's lease
// files, which GC reads back from IPAMDir (written by a plugin, possibly
// torn or foreign). Whatever the bytes: no panic; an error wraps
// ErrInvalidConfig; a lease names a container id and an interface that
// libcni accepts, so that the cache file GC names after them is one file
// in libcni's results directory; and what host-local writes for that
// lease ("<id>\r\n<ifname>") parses back to it.
func FuzzParseLease(f *testing.F) {
	for _, s := range []string{"abc\r\nnet1", "abc\n", "", "x/../../etc/passwd\r\neth0", "abc\r\n..", " abc \r\n eth0 \r\n", "a\r\n\r\n"} {
		f.Add([]byte(s))
	}
	const path = "/var/lib/nodeguard/cni/networks/nodeguard/10.88.0.2"
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parseLease(b, path)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error does not wrap ErrInvalidConfig: %v", err)
			}
			return
		}
		if !cniName.MatchString(l.id) || validIfName(l.ifName) != nil || l.path != path {
			t.Fatalf("lease %+v of %q", l, b)
		}
		cache := filepath.Join("/var/lib/nodeguard/cni/cache", "results", fmt.Sprintf("%s-%s-%s", DefaultName, l.id, l.ifName))
		if filepath.Dir(cache) != "/var/lib/nodeguard/cni/cache/results" {
			t.Fatalf("lease %+v names the cache file %s", l, cache)
		}
		back, err := parseLease([]byte(l.id+"\r\n"+l.ifName), path)
		if err != nil || back != l {
			t.Fatalf("host-local's lease for %+v parses as %+v, %v", l, back, err)
		}
	})
}

// FuzzRender renders configurations made of arbitrary fields and parses
// the conflist back with libcni, as Install does and the runtime will:
// Validate accepts only what renders, and what renders is read back as
// the network it describes (name, version, the plugin chain and its
// IPAM), never refused by libcni.
func FuzzRender(f *testing.F) {
	f.Add("", "", "", 0, "", true, true)
	f.Add("plain", "br1", "10.1.0.0/24", 200, "0.4.0", false, true)
	f.Add("a.b-c_d", "ng0", "192.168.0.0/30", 1, "1.1.0", true, false)
	f.Add("-x", "a:b", "10.0.0.1/24", -1, "0.3.1", false, false)
	f.Add("n", "0123456789abcdef", "fd00::/64", 110, "x", true, true)
	f.Fuzz(func(t *testing.T, name, bridge, subnet string, maxPods int, version string, portMap, bandwidth bool) {
		c := Config{Name: name, Bridge: bridge, MaxPods: maxPods, CNIVersion: version, PortMap: portMap, Bandwidth: bandwidth}
		if subnet != "" {
			p, err := netip.ParsePrefix(subnet)
			if err != nil {
				return
			}
			c.Subnet = p
		}
		c = c.WithDefaults()
		verr := c.Validate()
		list, err := loadList(c)
		switch {
		case (verr == nil) != (err == nil):
			t.Fatalf("Validate says %v, rendering and parsing back %v", verr, err)
		case err != nil:
			var ce *ConfigError
			if !errors.As(err, &ce) || !(errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrUnsupported)) {
				t.Fatalf("error %v (%T) is not a *ConfigError naming a field", err, err)
			}
			return
		}
		if list.Name != c.Name || list.CNIVersion != c.CNIVersion {
			t.Fatalf("conflist of %q version %s read back as %q version %s", c.Name, c.CNIVersion, list.Name, list.CNIVersion)
		}
		var types []string
		for _, p := range list.Plugins {
			types = append(types, p.Network.Type)
		}
		want := slices.DeleteFunc(pluginTypes(c), func(s string) bool { return s == "host-local" })
		if !slices.Equal(types, want) {
			t.Fatalf("plugins %v read back, want %v", types, want)
		}
		if got := list.Plugins[0].Network.IPAM.Type; got != "host-local" {
			t.Fatalf("IPAM %q read back, want host-local", got)
		}
	})
}
