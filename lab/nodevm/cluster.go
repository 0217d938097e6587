package nodevm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodeguard/nodeguard/lab/cluster"
)

// EnvCluster names the directory of the control plane's binaries
// (scripts/controlplane.sh prints it; make test-cluster sets it). When set,
// each guest gets a control plane of its own, started by the runner on the
// host's loopback before the guest boots and stopped after it, and the
// node-mode check runs: nodeguard on the lane's node (pure cgroup v2,
// containerd as its own service, the systemd driver) joins it.
const EnvCluster = "NODEGUARD_NODE_CLUSTER"

// The guest's view of the control plane.
const (
	// ClusterNodeName is the Node the guest's nodeguard registers (its
	// client certificate is system:node:<it>).
	ClusterNodeName = "nodelane"
	// ClusterAPIAddress is where the guest reaches the API server: qemu's
	// user-mode network forwards every connection to it (guestfwd) to
	// the API server on the host's loopback, and nothing else leaves the
	// guest (restrict=on).
	ClusterAPIAddress = "10.0.2.100:443"
	// ClusterDir is the payload's cluster/ in the guest: the node's and
	// an admin's kubeconfig, the cluster's CA, the node endpoint's
	// serving certificate, kubectl, the kubelet and the endpoint's port.
	ClusterDir = PayloadMount + "/" + payloadCluster
	// guestNet is qemu's user-mode network; the guest's address in it is
	// guestIP (qemu's first DHCP address, set by the check).
	guestNet = "10.0.2.0/24"
)

// Files of ClusterDir.
const (
	ClusterNodeKubeconfig  = "node.kubeconfig"
	ClusterAdminKubeconfig = "admin.kubeconfig"
	ClusterCA              = "ca.crt"
	ClusterServingCert     = "serving.crt"
	ClusterServingKey      = "serving.key"
	ClusterKubectl         = "kubectl"
	// ClusterKubelet is the control plane's kubelet (the same build,
	// scripts/controlplane.sh): the kubelet check runs it on the node
	// with the node's kubeconfig and serving certificate, once nodeguard
	// no longer owns the node.
	ClusterKubelet = "kubelet"
	// ClusterPort holds the node endpoint's port: the API server dials
	// the Node's InternalIP 127.0.0.1 at it, which qemu forwards
	// (hostfwd) from the host's loopback to the guest's same port.
	ClusterPort = "port"
)

const payloadCluster = "cluster"

// clusterAPIServerName is the name the guest's kubeconfigs verify the API
// server's certificate for (one of its DNS names): the guest dials it at
// ClusterAPIAddress, which the certificate does not name.
const clusterAPIServerName = "kubernetes"

// GuestNet is a guest's user-mode network: connections to
// ClusterAPIAddress go to APIServer through Relay (a command qemu spawns
// for each, with the connection on its stdin and stdout), and the host's
// 127.0.0.1:NodePort comes in at the guest's NodePort.
type GuestNet struct {
	APIServer string // host:port on the host's loopback
	NodePort  int
	Relay     string // the absolute path of a binary run as `Relay -relay ADDR`
}

// netArgs are qemu's arguments for n: a user-mode network with
// restrict=on (the guest reaches no address but the forwarded one) and no
// IPv6, on a virtio-mmio device.
func (n *GuestNet) netArgs() ([]string, error) {
	host, port, ok := strings.Cut(ClusterAPIAddress, ":")
	if !ok || n.NodePort <= 0 || n.NodePort > 65535 {
		return nil, fmt.Errorf("guest network: bad forward %s or node port %d", ClusterAPIAddress, n.NodePort)
	}
	if !isLoopbackHostPort(n.APIServer) {
		return nil, fmt.Errorf("guest network: the API server %q is not on the host's loopback", n.APIServer)
	}
	// qemu's option syntax: a comma in a value is written twice.
	if strings.ContainsAny(n.Relay, ", \t\n'\"") || !filepath.IsAbs(n.Relay) {
		return nil, fmt.Errorf("guest network: relay path %q must be absolute, without commas or spaces", n.Relay)
	}
	user := strings.Join([]string{
		"user", "id=net0", "restrict=on", "ipv6=off", "net=" + guestNet,
		"guestfwd=tcp:" + host + ":" + port + "-cmd:" + n.Relay + " -relay " + n.APIServer,
		"hostfwd=tcp:127.0.0.1:" + strconv.Itoa(n.NodePort) + "-:" + strconv.Itoa(n.NodePort),
	}, ",")
	return []string{"-netdev", user, "-device", "virtio-net-device,netdev=net0"}, nil
}

// isLoopbackHostPort reports whether hostport is a loopback IP and a
// port.
func isLoopbackHostPort(hostport string) bool {
	h, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
		return false
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// guestCluster is one guest's control plane.
type guestCluster struct {
	cp      *cluster.ControlPlane
	net     *GuestNet
	entries []Entry
}

// startCluster starts a control plane from the binaries in bin beneath
// dir and makes the guest's credentials: the node's client certificate
// (system:node:ClusterNodeName, group system:nodes: the Node authorizer
// and NodeRestriction apply to it), an admin's for the check's kubectl,
// and the node endpoint's serving certificate of the cluster's CA for
// 127.0.0.1, which the API server verifies.
func startCluster(ctx context.Context, bin, dir, relay string, progress io.Writer) (_ *guestCluster, retErr error) {
	if err := checkGuestBinaries(bin); err != nil {
		return nil, err
	}
	cp, err := cluster.Start(ctx, cluster.Options{Bin: bin, Dir: dir, Progress: progress,
		// The default 50 s, as a kubelet node's: the check waits for
		// NotReady once nodeguard stops.
		NodeMonitorGracePeriod: 40 * time.Second})
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, cp.Stop())
		}
	}()
	node := "system:node:" + ClusterNodeName
	nodeCert, nodeKey, err := cp.IssueClientCert(ClusterNodeName, node, "system:nodes")
	if err != nil {
		return nil, err
	}
	adminCert, adminKey, err := cp.IssueClientCert("guest-admin", "guest-admin", "system:masters")
	if err != nil {
		return nil, err
	}
	servingCert, servingKey, err := cp.IssueServingCert(ClusterNodeName+"-serving", node,
		[]net.IP{net.IPv4(127, 0, 0, 1)}, ClusterNodeName)
	if err != nil {
		return nil, err
	}
	port, err := freeLoopbackPort()
	if err != nil {
		return nil, err
	}
	nodeKC, err := guestKubeconfig(cp.CACert, nodeCert, nodeKey)
	if err != nil {
		return nil, err
	}
	adminKC, err := guestKubeconfig(cp.CACert, adminCert, adminKey)
	if err != nil {
		return nil, err
	}
	d := payloadCluster
	kubectl, kubelet := filepath.Join(bin, ClusterKubectl), filepath.Join(bin, ClusterKubelet)
	gc := &guestCluster{
		cp:  cp,
		net: &GuestNet{APIServer: strings.TrimPrefix(cp.Server, "https://"), NodePort: port, Relay: relay},
		entries: []Entry{
			{Path: d, Mode: fs.ModeDir | 0o755},
			{Path: d + "/" + ClusterNodeKubeconfig, Mode: 0o600, Data: nodeKC},
			{Path: d + "/" + ClusterAdminKubeconfig, Mode: 0o600, Data: adminKC},
			{Path: d + "/" + ClusterCA, Mode: 0o644, Host: cp.CACert},
			{Path: d + "/" + ClusterServingCert, Mode: 0o644, Host: servingCert},
			{Path: d + "/" + ClusterServingKey, Mode: 0o600, Host: servingKey},
			{Path: d + "/" + ClusterKubectl, Mode: 0o755, Host: kubectl},
			{Path: d + "/" + ClusterKubelet, Mode: 0o755, Host: kubelet},
			{Path: d + "/" + ClusterPort, Mode: 0o644, Data: strconv.Itoa(port) + "\n"},
		},
	}
	return gc, nil
}

// checkGuestBinaries returns an error unless bin has the binaries the
// guest gets (kubectl and the kubelet), each an executable regular file:
// before the control plane starts, not when the payload is written.
func checkGuestBinaries(bin string) error {
	for _, name := range []string{ClusterKubectl, ClusterKubelet} {
		p := filepath.Join(bin, name)
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("guest cluster: %w (scripts/controlplane.sh builds it)", err)
		}
		if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("guest cluster: %s is not an executable file (mode %s)", p, st.Mode())
		}
	}
	return nil
}

// guestKubeconfig is a kubeconfig for the guest, with everything in it
// (the payload's paths are the guest's): the API server at
// ClusterAPIAddress, verified as clusterAPIServerName against ca.
func guestKubeconfig(ca, cert, key string) (string, error) {
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("guest kubeconfig: %w", err)
		}
		return b, nil
	}
	caData, err := read(ca)
	if err != nil {
		return "", err
	}
	certData, err := read(cert)
	if err != nil {
		return "", err
	}
	keyData, err := read(key)
	if err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default"] = &clientcmdapi.Cluster{Server: "https://" + ClusterAPIAddress,
		CertificateAuthorityData: caData, TLSServerName: clusterAPIServerName}
	cfg.AuthInfos["default"] = &clientcmdapi.AuthInfo{ClientCertificateData: certData, ClientKeyData: keyData}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "default"}
	cfg.CurrentContext = "default"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return "", fmt.Errorf("guest kubeconfig: %w", err)
	}
	return string(b), nil
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 now.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("a free port for the node endpoint: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Relay copies its stdin to a TCP connection to addr and the connection to
// its stdout until either side ends: what qemu's guestfwd spawns for each
// connection the guest makes to ClusterAPIAddress. addr must be on the
// host's loopback: nothing else is ever dialled for a guest.
func Relay(addr string, stdin io.Reader, stdout io.Writer) error {
	if !isLoopbackHostPort(addr) {
		return fmt.Errorf("relay: %q is not a loopback address and port", addr)
	}
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	defer conn.Close()
	go func() {
		_, _ = io.Copy(conn, stdin)
		// The guest closed its side: tell the server, keep reading.
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	// The server's side ending ends the guest's connection: the relay
	// exits, and qemu closes it.
	_, err = io.Copy(stdout, conn)
	return err
}

// progressWriter logs each line written to it (the control plane's
// progress) at Info.
type progressWriter struct{ log *slog.Logger }

func (w progressWriter) Write(b []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if l != "" {
			w.log.Info(l)
		}
	}
	return len(b), nil
}
