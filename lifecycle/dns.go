package lifecycle

import (
	"os"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ResolvConf is where the node's resolver config is.
const ResolvConf = "/etc/resolv.conf"

// NodeDNS is the node's resolver config from the resolv.conf at path,
// handed to sandboxes (dnsPolicy Default and ClusterFirst); nil when the
// file cannot be read.
func NodeDNS(path string) *runtimeapi.DNSConfig {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var d runtimeapi.DNSConfig
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			d.Servers = append(d.Servers, f[1])
		case "search":
			d.Searches = append(d.Searches, f[1:]...)
		case "options":
			d.Options = append(d.Options, f[1:]...)
		}
	}
	return &d
}
