package agent

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lab/crienv"
)

// envConfig writes a run configuration whose network is the private
// containerd's: nodeguard checks and collects that network and never
// writes into the host's /etc/cni/net.d.
func envConfig(t *testing.T, env *crienv.Env, dir string) string {
	t.Helper()
	nc := env.NetworkConfig()
	b, err := yaml.Marshal(map[string]any{
		// The private containerd has only locally built images and no
		// registry: nothing is pulled.
		"imagePull": false,
		"network": map[string]any{
			"manage": false, "name": nc.Name, "bridge": nc.Bridge, "subnet": nc.Subnet.String(),
			"cniBinDirs": nc.BinDirs, "cniConfDir": nc.ConfDir, "ipamDir": nc.IPAMDir,
			"nodeNetNS": env.NetNS(), "netnsDirs": []string{env.NetNSDir()},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
