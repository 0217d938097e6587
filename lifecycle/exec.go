// Exec in a pod's container, attach to it and forward ports to the pod,
// through the CRI.

package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

// defaultContainerAnnotation names the container kubectl exec, attach and
// logs pick when none is given.
const defaultContainerAnnotation = "kubectl.kubernetes.io/default-container"

// Streamer is the part of the CRI that prepares interactive sessions: the
// runtime answers with the URL of its streaming server. *cri.Client is
// one; a Runtime without it has no exec -i/-t, attach or port-forward.
type Streamer interface {
	ExecURL(ctx context.Context, req *runtimeapi.ExecRequest) (*url.URL, error)
	AttachURL(ctx context.Context, req *runtimeapi.AttachRequest) (*url.URL, error)
	PortForwardURL(ctx context.Context, req *runtimeapi.PortForwardRequest) (*url.URL, error)
}

var _ Streamer = (*cri.Client)(nil)

// ErrNoStreaming: the Runtime the Manager was given cannot prepare
// streaming sessions (it is not a Streamer).
var ErrNoStreaming = errors.New("the runtime client has no streaming calls (CRI Exec, Attach, PortForward)")

// podSandbox returns the sandbox of a desired pod and the container a
// request names, or the pod's default one: the
// kubectl.kubernetes.io/default-container annotation when it names one of
// the pod's containers, else the first, as kubectl chooses.
func (m *Manager) podSandbox(namespace, name, container string) (sandboxID, ctr string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var pod *corev1.Pod
	for _, s := range m.pods {
		if s.pod.Namespace == namespace && s.pod.Name == name {
			pod, sandboxID = s.pod, s.sandboxID
		}
	}
	if pod == nil {
		return "", "", fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, name)
	}
	if sandboxID == "" {
		return "", "", fmt.Errorf("%w: pod %s/%s has no sandbox yet", ErrNotFound, namespace, name)
	}
	if container == "" {
		container = defaultContainer(pod)
	}
	return sandboxID, container, nil
}

func defaultContainer(pod *corev1.Pod) string {
	if want := pod.Annotations[defaultContainerAnnotation]; want != "" {
		for _, c := range pod.Spec.Containers {
			if c.Name == want {
				return want
			}
		}
	}
	return pod.Spec.Containers[0].Name
}

// containerID finds the newest instance of a pod's container.
func (m *Manager) containerID(ctx context.Context, namespace, name, container string) (string, error) {
	sandboxID, container, err := m.podSandbox(namespace, name, container)
	if err != nil {
		return "", err
	}
	cctx, cancel := call(ctx)
	defer cancel()
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, sandboxID, nil)
	if err != nil {
		return "", err
	}
	c, ok := latest(ctrs)[container]
	if !ok {
		return "", fmt.Errorf("%w: %q in pod %s/%s", ErrContainerNotFound, container, namespace, name)
	}
	return c.Id, nil
}

// Exec runs cmd in a container and waits for it.
func (m *Manager) Exec(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (cri.ExecResult, error) {
	id, err := m.containerID(ctx, namespace, name, container)
	if err != nil {
		return cri.ExecResult{}, err
	}
	return m.cfg.Runtime.ExecSync(ctx, id, cmd, timeout)
}

// Stream prepares an exec, attach or port-forward session with the
// runtime and returns where its streaming server serves it, with the dial
// that reaches it: from the node's network namespace (Network.NodeNetNS),
// where the runtime's streaming server listens (on the host's loopback in
// production; in the tests' runtime namespace), the dial the probes use.
// The session itself goes through the runtime: an exec or attach enters
// the container, a port-forward the pod's network namespace, as for
// kubectl through the kubelet.
func (m *Manager) Stream(ctx context.Context, namespace, name string, req api.StreamRequest) (api.StreamTarget, error) {
	st, ok := m.cfg.Runtime.(Streamer)
	if !ok {
		return api.StreamTarget{}, fmt.Errorf("%s of pod %s/%s: %w", req.Kind, namespace, name, ErrNoStreaming)
	}
	var u *url.URL
	switch req.Kind {
	case api.StreamExec, api.StreamAttach:
		id, err := m.containerID(ctx, namespace, name, req.Container)
		if err != nil {
			return api.StreamTarget{}, err
		}
		cctx, cancel := call(ctx)
		defer cancel()
		if req.Kind == api.StreamExec {
			u, err = st.ExecURL(cctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: req.Command,
				Tty: req.TTY, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
		} else {
			u, err = st.AttachURL(cctx, &runtimeapi.AttachRequest{ContainerId: id,
				Tty: req.TTY, Stdin: req.Stdin, Stdout: req.Stdout, Stderr: req.Stderr})
		}
		if err != nil {
			return api.StreamTarget{}, err
		}
	case api.StreamPortForward:
		sandboxID, _, err := m.podSandbox(namespace, name, "")
		if err != nil {
			return api.StreamTarget{}, err
		}
		cctx, cancel := call(ctx)
		defer cancel()
		if u, err = st.PortForwardURL(cctx, &runtimeapi.PortForwardRequest{PodSandboxId: sandboxID, Port: req.Ports}); err != nil {
			return api.StreamTarget{}, err
		}
	default:
		return api.StreamTarget{}, fmt.Errorf("stream to pod %s/%s: unknown session kind %q", namespace, name, req.Kind)
	}
	dial, err := m.streamDial(ctx, st)
	if err != nil {
		return api.StreamTarget{}, fmt.Errorf("%s of pod %s/%s: %w", req.Kind, namespace, name, err)
	}
	return api.StreamTarget{URL: u, Dial: dial}, nil
}

// runtimeNetNS is a runtime client that can say which network namespace
// its runtime runs in; *cri.Client is one.
type runtimeNetNS interface {
	RuntimeNetNS(ctx context.Context) (string, error)
}

// streamDial is how the agent reaches the runtime's streaming server: from
// the runtime's own network namespace, where the server listens (the
// host's in production; the tests' private containerd has its own). A
// runtime that does not say is reached from the node's network namespace
// (Network.NodeNetNS), as the probes reach pods.
func (m *Manager) streamDial(ctx context.Context, st Streamer) (api.DialFunc, error) {
	rn, ok := st.(runtimeNetNS)
	if !ok {
		return api.DialFunc(m.dial), nil
	}
	cctx, cancel := call(ctx)
	defer cancel()
	path, err := rn.RuntimeNetNS(cctx)
	if err != nil {
		return nil, fmt.Errorf("find the runtime's network namespace: %w", err)
	}
	if path == "" {
		return api.DialFunc(m.dial), nil
	}
	if same, err := sameNetNS(path, "/proc/self/ns/net"); err != nil {
		return nil, err
	} else if same {
		return nil, nil // ours: a plain dial, which needs no CAP_SYS_ADMIN
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		// Opened per dial, and let go after it: the connection keeps its
		// namespace, and a session is seldom.
		dial, closeNS, err := prober.NetNSDialer(path)
		if err != nil {
			return nil, err
		}
		defer closeNS()
		return dial(ctx, network, addr)
	}, nil
}

// sameNetNS says whether two namespace files name one namespace.
func sameNetNS(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, fmt.Errorf("the runtime's network namespace: %w", err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, fmt.Errorf("this process's network namespace: %w", err)
	}
	return os.SameFile(fa, fb), nil
}
