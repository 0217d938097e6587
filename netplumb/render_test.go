package netplumb

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestRenderMatchesGolden(t *testing.T) {
	for _, tc := range []struct {
		name, golden string
		cfg          Config
	}{
		{"the default network chains portmap and bandwidth", "default.conflist.golden", DefaultConfig()},
		{"a network without portmap and bandwidth is the bridge alone", "bridge-only.conflist.golden",
			Config{Name: "plain", Bridge: "br1", MaxPods: 1000, IPAMDir: "/run/ipam"}.WithDefaults()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Render(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("Render() =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestRenderParsesAsTheRuntimeReadsIt reads the conflist back with libcni
// and checks the fields the runtime and the plugins act on.
func TestRenderParsesAsTheRuntimeReadsIt(t *testing.T) {
	c := DefaultConfig()
	b, err := Render(c)
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if list.Name != "nodeguard" || list.CNIVersion != "1.0.0" || len(list.Plugins) != 3 {
		t.Fatalf("list = %s %s with %d plugins", list.Name, list.CNIVersion, len(list.Plugins))
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Network.Type)
	}
	if types[0] != "bridge" || types[1] != "portmap" || types[2] != "bandwidth" {
		t.Errorf("chain = %v", types)
	}
	if !list.Plugins[1].Network.Capabilities["portMappings"] || !list.Plugins[2].Network.Capabilities["bandwidth"] {
		t.Errorf("capabilities: portmap %v, bandwidth %v", list.Plugins[1].Network.Capabilities, list.Plugins[2].Network.Capabilities)
	}
	var br struct {
		Bridge      string `json:"bridge"`
		IsGateway   bool   `json:"isGateway"`
		IPMasq      *bool  `json:"ipMasq"`
		HairpinMode bool   `json:"hairpinMode"`
		IPAM        struct {
			Type    string                `json:"type"`
			Ranges  [][]map[string]string `json:"ranges"`
			Routes  []map[string]string   `json:"routes"`
			DataDir string                `json:"dataDir"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(list.Plugins[0].Bytes, &br); err != nil {
		t.Fatal(err)
	}
	if br.Bridge != "ng0" || !br.IsGateway || br.IPMasq == nil || *br.IPMasq || !br.HairpinMode {
		t.Errorf("bridge = %+v", br)
	}
	if br.IPAM.Type != "host-local" || br.IPAM.Ranges[0][0]["subnet"] != "10.88.0.0/25" ||
		br.IPAM.Routes[0]["dst"] != "0.0.0.0/0" || br.IPAM.DataDir != DefaultIPAMDir {
		t.Errorf("ipam = %+v", br.IPAM)
	}
}

func TestRenderRefusesAnInvalidConfig(t *testing.T) {
	c := DefaultConfig()
	c.Bridge = "bad/name"
	if _, err := Render(c); err == nil {
		t.Fatal("Render accepted a bad bridge name")
	}
}
