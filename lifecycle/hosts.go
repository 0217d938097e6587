package lifecycle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// NodeHostsFile is the node's hosts file, the base of a host-network
// pod's.
const NodeHostsFile = "/etc/hosts"

// The kubelet's headers of the hosts files it manages
// (pkg/kubelet/kubelet_pods.go), so that a container can tell who wrote its
// /etc/hosts.
const (
	managedHostsHeader                = "# Kubernetes-managed hosts file.\n"
	managedHostsHeaderWithHostNetwork = "# Kubernetes-managed hosts file (host network).\n"
	etcHostsPath                      = "/etc/hosts"
)

// managedHostsFile is the kubelet's managedHostsFileContent: the /etc/hosts
// of a pod with its own network: localhost, the IPv6 names, the pod's IPs
// under its hostname (and its FQDN when it has a domain), then its
// hostAliases.
func managedHostsFile(podIPs []string, hostname, domain string, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeader)
	b.WriteString("127.0.0.1\tlocalhost\n")
	b.WriteString("::1\tlocalhost ip6-localhost ip6-loopback\n")
	b.WriteString("fe00::0\tip6-localnet\n")
	b.WriteString("fe00::0\tip6-mcastprefix\n")
	b.WriteString("fe00::1\tip6-allnodes\n")
	b.WriteString("fe00::2\tip6-allrouters\n")
	for _, ip := range podIPs {
		if domain != "" {
			fmt.Fprintf(&b, "%s\t%s.%s\t%s\n", ip, hostname, domain, hostname)
		} else {
			fmt.Fprintf(&b, "%s\t%s\n", ip, hostname)
		}
	}
	b.Write(hostAliasEntries(aliases))
	return b.Bytes()
}

// nodeHostsFile is the kubelet's nodeHostsFileContent: a host-network
// pod's /etc/hosts is the node's, with its hostAliases appended.
func nodeHostsFile(node []byte, aliases []corev1.HostAlias) []byte {
	var b bytes.Buffer
	b.WriteString(managedHostsHeaderWithHostNetwork)
	b.Write(node)
	b.Write(hostAliasEntries(aliases))
	return b.Bytes()
}

// hostAliasEntries is hostsEntriesFromHostAliases: one line per IP and
// hostname, after a comment.
func hostAliasEntries(aliases []corev1.HostAlias) []byte {
	if len(aliases) == 0 {
		return nil
	}
	var b bytes.Buffer
	b.WriteString("\n# Entries added by HostAliases.\n")
	for _, a := range aliases {
		for _, h := range a.Hostnames {
			fmt.Fprintf(&b, "%s\t%s\n", a.IP, h)
		}
	}
	return b.Bytes()
}

// podDomain is the domain of GeneratePodHostNameAndDomain: with a
// subdomain and a cluster domain, "<subdomain>.<namespace>.svc.<cluster
// domain>"; otherwise none (standalone there is no cluster domain unless
// configured).
func podDomain(pod *corev1.Pod, clusterDomain string) string {
	if pod.Spec.Subdomain == "" || clusterDomain == "" {
		return ""
	}
	return fmt.Sprintf("%s.%s.svc.%s", pod.Spec.Subdomain, pod.Namespace, clusterDomain)
}

func (m *Manager) hostsPath(uid types.UID) string {
	return filepath.Join(m.cfg.RootDir, "hosts", string(uid))
}

// hostsMount writes the pod's hosts file, as the kubelet's makeHostsMount,
// and returns its mount at /etc/hosts for container c. It returns nil where
// the kubelet mounts none: a pod with its own network but no IP yet (the
// runtime's file stays), and a container that mounts a volume at
// /etc/hosts itself. The file is replaced, not rewritten: a running
// container keeps the one it started with.
func (m *Manager) hostsMount(st *podState, c *corev1.Container) (*runtimeapi.Mount, error) {
	pod := st.pod
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == etcHostsPath {
			return nil, nil
		}
	}
	var content []byte
	if pod.Spec.HostNetwork {
		node, err := os.ReadFile(m.cfg.NodeHostsFile)
		if err != nil {
			return nil, fmt.Errorf("hosts file of a host-network pod: %w", err)
		}
		content = nodeHostsFile(node, pod.Spec.HostAliases)
	} else {
		if st.ip == "" {
			return nil, nil
		}
		content = managedHostsFile([]string{st.ip}, cri.PodHostname(pod), podDomain(pod, m.cfg.ClusterDomain), pod.Spec.HostAliases)
	}
	p := m.hostsPath(pod.UID)
	if err := writeReplacing(p, content, 0o644); err != nil {
		return nil, fmt.Errorf("write the pod's hosts file: %w", err)
	}
	return &runtimeapi.Mount{ContainerPath: etcHostsPath, HostPath: p, SelinuxRelabel: true}, nil
}

// writeReplacing writes data to a new file beside p and renames it over p.
func writeReplacing(p string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is none
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// removeStaleHostsFiles removes the hosts files of pods that are gone: not
// desired, with no sandbox left and no teardown under way (a pod deleted
// while nodeguard was down, its sandbox removed by hand or by the
// runtime's own collection). The files of pods with a sandbox are the
// orphan teardown's, which removes them with the sandbox.
func (m *Manager) removeStaleHostsFiles(sandboxes []*runtimeapi.PodSandbox) {
	dir := filepath.Join(m.cfg.RootDir, "hosts")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("list hosts files", "dir", dir, "err", err)
		}
		return
	}
	live := make(map[types.UID]bool, len(sandboxes))
	for _, sb := range sandboxes {
		live[types.UID(sb.GetMetadata().GetUid())] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		uid := types.UID(e.Name())
		if _, desired := m.pods[uid]; desired || live[uid] || m.orphans[uid] {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("remove a stale hosts file", "uid", uid, "err", err)
		}
	}
}
