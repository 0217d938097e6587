package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/eviction/admission"
	"github.com/nodeguard/nodeguard/internal/group"
	"github.com/nodeguard/nodeguard/kubenode"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// nodeEndpointAddresses are the IPs the node's HTTPS endpoint listens on:
// address when set, else every address (the kubelet's 0.0.0.0, IPv6 too):
// the API server may dial the node by any of its addresses
// (--kubelet-preferred-address-types), its Hostname first by default.
func nodeEndpointAddresses(cfg config.Run) []string {
	if cfg.Address != "" {
		return []string{cfg.Address}
	}
	return []string{""}
}

// nodeSystemInfo is status.nodeInfo: the machine's identity and versions.
func nodeSystemInfo(version, runtimeName, runtimeVersion, kernel string) corev1.NodeSystemInfo {
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	return corev1.NodeSystemInfo{
		MachineID:               read("/etc/machine-id"),
		SystemUUID:              strings.ToLower(read("/sys/class/dmi/id/product_uuid")),
		BootID:                  read("/proc/sys/kernel/random/boot_id"),
		KernelVersion:           kernel,
		OSImage:                 osImage(),
		ContainerRuntimeVersion: runtimeName + "://" + runtimeVersion,
		KubeletVersion:          kubeletVersion(version),
		OperatingSystem:         "linux",
		Architecture:            goarch,
	}
}

// osImage is /etc/os-release's PRETTY_NAME, as the kubelet's (cadvisor's).
func osImage() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return "Linux"
}

// kubeletVersion is status.nodeInfo.kubeletVersion: the Kubernetes
// release whose node contract nodeguard keeps, marked as nodeguard's.
func kubeletVersion(version string) string { return "v1.37.2+nodeguard." + version }

const goarch = runtime.GOARCH

// nodeMode is what joining a cluster needs from the rest of the agent.
type nodeMode struct {
	version     string // nodeguard's, in kubeletVersion
	cfg         config.Run
	node        cri.NodeInfo
	capacity    corev1.ResourceList
	allocatable corev1.ResourceList
	runtime     *cri.Client
	// conditions are the eviction manager's (nil: none runs).
	conditions func() map[eviction.Condition]bool
	// heartbeat is when the pod lifecycle last made a pass.
	heartbeat func() time.Time
	// endpoint serves the node's HTTPS endpoint (the local API's server,
	// whose kubelet routes it has); nil: none.
	endpoint *api.Server
	log      *slog.Logger
}

// plegThreshold: a pod lifecycle that made no pass for this long makes
// the node NotReady, as the kubelet's PLEG health check.
const plegThreshold = 3 * time.Minute

// startNodeMode registers the node with the cluster of nm.cfg.Kubeconfig
// and keeps its status and Lease, in g.
func startNodeMode(g *group.Group, cs kubernetes.Interface, nm nodeMode) (*kubenode.Agent, error) {
	var addrs []corev1.NodeAddress
	for _, ip := range nm.node.HostIPs {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: nm.node.Name})
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	info := nm.runtime.Runtime()
	agent, err := kubenode.New(kubenode.Config{
		Client: cs, Name: nm.node.Name, Labels: nm.cfg.NodeLabels, Taints: nm.cfg.RegisterWithTaints,
		Addresses: addrs, Capacity: nm.capacity, Allocatable: nm.allocatable, Port: nm.cfg.Port,
		Info: nodeSystemInfo(nm.version, info.Name, info.Version, unix.ByteSliceToString(uts.Release[:])),
		Log:  nm.log.With("component", "node"),
		Health: func(ctx context.Context) kubenode.Health {
			var h kubenode.Health
			if nm.conditions != nil {
				c := nm.conditions()
				h.MemoryPressure, h.DiskPressure, h.PIDPressure = c[eviction.MemoryPressure], c[eviction.DiskPressure], c[eviction.PIDPressure]
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := nm.runtime.Ready(cctx); err != nil {
				h.NotReady = append(h.NotReady, err.Error())
			}
			if last := nm.heartbeat(); time.Since(last) > plegThreshold {
				h.NotReady = append(h.NotReady, fmt.Sprintf("PLEG is not healthy: pleg was last seen active %v ago; threshold is %v",
					time.Since(last).Round(time.Second), plegThreshold))
			}
			return h
		},
	})
	if err != nil {
		return nil, err
	}
	if nm.endpoint != nil {
		ns, err := kubenode.NewServer(kubenode.ServerConfig{
			Client: cs, NodeName: nm.node.Name, Addresses: nodeEndpointAddresses(nm.cfg), CertIPs: nm.node.HostIPs, Port: nm.cfg.Port,
			CertFile: nm.cfg.TLSCertFile, KeyFile: nm.cfg.TLSPrivateKeyFile, CertDir: filepath.Join(nm.cfg.RootDir, "pki"),
			Bootstrap:    nm.cfg.ServerTLSBootstrap,
			ClientCAFile: nm.cfg.Authentication.X509.ClientCAFile,
			Handler:      nm.endpoint.KubeletHandler(), OnStop: nm.endpoint.CloseSessions,
			Log: nm.log.With("component", "node-endpoint"),
		})
		if err != nil {
			return nil, err
		}
		g.Go("node endpoint", ns.Serve)
	}
	g.Go("node status", func(ctx context.Context) error {
		if err := agent.Register(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		return agent.Run(ctx)
	})
	return agent, nil
}

// nodeResources are the Node's capacity and allocatable, as the kubelet
// reports them: cpu, memory, ephemeral-storage (the filesystem of the
// root dir), pods (maxPods) and the huge page sizes (none pre-allocated
// here); allocatable is capacity less the reservations, and memory less
// the hard eviction threshold on memory.available too.
func nodeResources(capacity corev1.ResourceList, node cri.NodeInfo, maxPods int, cfg config.Run, thresholds []eviction.Threshold) (cap, alloc corev1.ResourceList) {
	cap = capacity.DeepCopy()
	if eph, ok := node.Allocatable[corev1.ResourceEphemeralStorage]; ok {
		cap[corev1.ResourceEphemeralStorage] = eph
	}
	if maxPods <= 0 {
		maxPods = 110
	}
	cap[corev1.ResourcePods] = *resource.NewQuantity(int64(maxPods), resource.DecimalSI)
	cap["hugepages-2Mi"] = *resource.NewQuantity(0, resource.BinarySI)
	cap["hugepages-1Gi"] = *resource.NewQuantity(0, resource.BinarySI)
	alloc = cap.DeepCopy()
	for _, res := range []corev1.ResourceList{cfg.SystemReserved, cfg.KubeReserved} {
		for name, q := range res {
			if v, ok := alloc[name]; ok {
				v.Sub(q)
				alloc[name] = v
			}
		}
	}
	{
		mem := cap[corev1.ResourceMemory]
		for _, t := range thresholds {
			if t.Signal == nodestats.SignalMemoryAvailable && t.Hard() {
				v := alloc[corev1.ResourceMemory]
				v.Sub(*resource.NewQuantity(t.Value.Amount(mem.Value()), resource.BinarySI))
				alloc[corev1.ResourceMemory] = v
			}
		}
	}
	for name, v := range alloc {
		if v.Sign() < 0 {
			alloc[name] = *resource.NewQuantity(0, v.Format)
		}
	}
	return cap, alloc
}

// rejectReason is the pod status reason and message of a pod Apply
// refused, as the kubelet's admission results name them: admission's
// refusals (admission.Reason), then the lifecycle's.
func rejectReason(err error) (string, string) {
	if reason, msg, ok := admission.Reason(err); ok {
		return reason, msg
	}
	switch {
	case strings.Contains(err.Error(), lifecycle.ReasonNodeAffinity+": "):
		return lifecycle.ReasonNodeAffinity, lifecycle.MessageNodeAffinity
	case errors.Is(err, lifecycle.ErrInvalid):
		return "UnsupportedPodSpec", err.Error()
	}
	return "UnexpectedAdmissionError", err.Error()
}

// kubeEvents tees pod events to the API server: those of the pods bound
// through it, as the kubelet's recorder (source component "kubelet", so
// that `kubectl describe` shows them as a node's).
type kubeEvents struct {
	local    lifecycle.EventRecorder
	recorder record.EventRecorder
}

func (k *kubeEvents) Append(at time.Time, kind string, obj any) {
	k.local.Append(at, kind, obj)
	e, ok := obj.(lifecycle.PodEvent)
	if !ok || kind != lifecycle.PodEventKind || e.UID == "" {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: e.Namespace, Name: e.Pod, UID: e.UID, FieldPath: e.FieldPath}
	k.recorder.Event(ref, e.Type, e.Reason, e.Message)
}

// The client's rate limit toward the API server, the kubelet's defaults.
const (
	kubeAPIQPS   = 50
	kubeAPIBurst = 100
)

// kubeClient is the clientset of a kubeconfig, with an event recorder
// that writes as the node's agent.
func kubeClient(path, nodeName, version string) (kubernetes.Interface, record.EventBroadcaster, record.EventRecorder, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	rc.UserAgent = "nodeguard/" + version
	// The kubelet's defaults (kubeAPIQPS, kubeAPIBurst, kubeAPIContentType):
	// at client-go's own 5 requests a second, the status patches of 50
	// pods started together queued for 30 s.
	rc.QPS, rc.Burst = kubeAPIQPS, kubeAPIBurst
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: nodeName})
	return cs, b, rec, nil
}

// nodeName is the node's name: nodeName, else the lower-cased hostname
// (the kubelet's).
func nodeName(cfg config.Run) (string, error) {
	if cfg.NodeName != "" {
		return cfg.NodeName, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node name: %w", err)
	}
	return strings.ToLower(h), nil
}
