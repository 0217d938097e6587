package agent

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// nodeInfo is the downward API's view of this node, as the kubelet fills
// it without flags: the lower-cased hostname as the node's name; as host
// IPs, the hostname's addresses when they resolve to something other than
// loopback, else the global unicast addresses of the interfaces that are
// up (the kubelet's fallback is the default route's interface); as
// allocatable (no reservations), the CPUs, memTotal and the size of the
// filesystem holding rootDir.
func nodeInfo(rootDir string, memTotal int64) (cri.NodeInfo, error) {
	host, err := os.Hostname()
	if err != nil {
		return cri.NodeInfo{}, fmt.Errorf("node name: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(rootDir, &st); err != nil {
		return cri.NodeInfo{}, fmt.Errorf("statfs %s: %w", rootDir, err)
	}
	return cri.NodeInfo{
		Name:    strings.ToLower(host),
		HostIPs: hostIPs(host),
		Allocatable: corev1.ResourceList{
			corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
			corev1.ResourceMemory:           *resource.NewQuantity(memTotal, resource.BinarySI),
			corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(st.Blocks)*st.Bsize, resource.BinarySI),
		},
	}, nil
}

// hostIPs returns the node's addresses, IPv4 first (status.hostIP is the
// first); nil when it has none.
func hostIPs(host string) []string {
	var ips []net.IP
	if addrs, err := net.LookupIP(host); err == nil {
		for _, ip := range addrs {
			if !ip.IsLoopback() {
				ips = append(ips, ip)
			}
		}
	}
	if len(ips) == 0 {
		ifaces, _ := net.Interfaces()
		for _, ifc := range ifaces {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.IsGlobalUnicast() {
					ips = append(ips, n.IP)
				}
			}
		}
	}
	var v4, v6 []string
	for _, ip := range ips {
		if ip.To4() != nil {
			v4 = append(v4, ip.String())
		} else {
			v6 = append(v6, ip.String())
		}
	}
	return append(v4, v6...)
}
