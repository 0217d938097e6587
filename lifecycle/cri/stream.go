// Exec, Attach and PortForward: the CRI's streaming calls. The runtime
// answers each with the URL of its streaming server where one session of
// that kind waits, behind a single-use token; the caller proxies or dials
// it (lifecycle/api).

package cri

import (
	"context"
	"fmt"
	"net/url"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecURL asks the runtime to prepare an exec of req.Cmd in
// req.ContainerId and returns the streaming URL that serves it.
func (c *Client) ExecURL(ctx context.Context, req *runtimeapi.ExecRequest) (*url.URL, error) {
	resp, err := c.rt.Exec(ctx, req)
	if err != nil {
		return nil, opError(ctx, "exec in container", fmt.Sprintf("%s %q", req.GetContainerId(), req.GetCmd()), err)
	}
	return streamURL("exec in container "+req.GetContainerId(), resp.GetUrl())
}

// AttachURL asks the runtime to prepare an attach to req.ContainerId's
// main process and returns the streaming URL that serves it.
func (c *Client) AttachURL(ctx context.Context, req *runtimeapi.AttachRequest) (*url.URL, error) {
	resp, err := c.rt.Attach(ctx, req)
	if err != nil {
		return nil, opError(ctx, "attach to container", req.GetContainerId(), err)
	}
	return streamURL("attach to container "+req.GetContainerId(), resp.GetUrl())
}

// PortForwardURL asks the runtime to prepare a port forward into
// req.PodSandboxId's network namespace and returns the streaming URL that
// serves it.
func (c *Client) PortForwardURL(ctx context.Context, req *runtimeapi.PortForwardRequest) (*url.URL, error) {
	resp, err := c.rt.PortForward(ctx, req)
	if err != nil {
		return nil, opError(ctx, "port-forward to sandbox", fmt.Sprintf("%s %v", req.GetPodSandboxId(), req.GetPort()), err)
	}
	return streamURL("port-forward to sandbox "+req.GetPodSandboxId(), resp.GetUrl())
}

// streamURL parses a runtime's streaming URL. Only http and https are
// streaming servers; anything else (an empty answer) would be dialled
// blindly.
func streamURL(op, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: the runtime's streaming URL %q: %w", op, raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: the runtime's streaming URL %q is not an http(s) URL with a host", op, raw)
	}
	return u, nil
}

// RuntimeNetNS returns the network namespace of the process that serves
// the CRI socket now, /proc/<pid>/ns/net: where the runtime's streaming
// server listens (its URLs name the runtime's loopback or node address).
// The pid is read afresh (SO_PEERCRED of a new connection), so a runtime
// restarted since Dial is found. "" with a nil error when the kernel does
// not name the peer.
func (c *Client) RuntimeNetNS(ctx context.Context) (string, error) {
	path, err := socketPath(c.endpoint)
	if err != nil {
		return "", err
	}
	pid, err := probeSocket(ctx, c.endpoint, path)
	if err != nil || pid == 0 {
		return "", err
	}
	return fmt.Sprintf("/proc/%d/ns/net", pid), nil
}
