package cri

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageStatus returns the runtime's record of the image ref (a name or an
// ID), or an error wrapping ErrImageNotPresent when the runtime has none.
func (c *Client) ImageStatus(ctx context.Context, ref string) (*runtimeapi.Image, error) {
	resp, err := c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return nil, opError(ctx, "image status", ref, err)
	}
	if resp.GetImage() == nil {
		return nil, fmt.Errorf("image status %s: %w", ref, ErrImageNotPresent)
	}
	return resp.GetImage(), nil
}

// PullImage pulls ref for the sandbox sandboxCfg and returns the image's
// reference (ID) as the runtime reports it. On a client dialed without
// WithImagePull it returns ErrPullDisabled and contacts nothing.
func (c *Client) PullImage(ctx context.Context, ref string, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	if !c.opts.pull {
		return "", fmt.Errorf("pull image %s: %w", ref, ErrPullDisabled)
	}
	resp, err := c.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, SandboxConfig: sandboxCfg})
	if err != nil {
		return "", opError(ctx, "pull image", ref, err)
	}
	return resp.GetImageRef(), nil
}

// EnsureImage returns the ID of image ref to create a container from, as
// its pull policy says (the kubelet's shouldPullImage):
//
//   - Always pulls at every call, the image present or not, and fails with
//     ErrPullDisabled on a client that may not pull;
//   - IfNotPresent pulls only a missing image; on a client that may not
//     pull, a missing image is an error wrapping ErrImageNotPresent;
//   - Never pulls nothing: a missing image is an error wrapping
//     ErrImageNeverPull.
//
// A pull the runtime fails is an error wrapping ErrImagePull with the
// runtime's reason; every error names ref. Another policy is
// ErrInvalidOption (podspec validation defaults and checks it earlier).
func (c *Client) EnsureImage(ctx context.Context, ref string, policy corev1.PullPolicy, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	switch policy {
	case corev1.PullAlways:
		return c.pullForPolicy(ctx, ref, policy, sandboxCfg)
	case corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return "", fmt.Errorf("ensure image %s: %w: pull policy %q (want %s, %s or %s)", ref, ErrInvalidOption, policy,
			corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)
	}
	img, err := c.ImageStatus(ctx, ref)
	if err == nil {
		return img.GetId(), nil
	}
	if !isNotPresent(err) {
		return "", err
	}
	if policy == corev1.PullNever {
		return "", fmt.Errorf("container image %q is not present with pull policy of Never: %w", ref, ErrImageNeverPull)
	}
	if !c.opts.pull {
		return "", fmt.Errorf("%w; nodeguard does not pull (imagePull: false): import it into the runtime (ctr -n k8s.io images import) or set imagePull: true", err)
	}
	return c.pullForPolicy(ctx, ref, policy, sandboxCfg)
}

// pullForPolicy pulls ref for EnsureImage; a runtime's failure wraps
// ErrImagePull.
func (c *Client) pullForPolicy(ctx context.Context, ref string, policy corev1.PullPolicy, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	id, err := c.PullImage(ctx, ref, sandboxCfg)
	switch {
	case errors.Is(err, ErrPullDisabled):
		return "", fmt.Errorf("%w (pull policy %s needs imagePull: true)", err, policy)
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrImagePull, err)
	}
	return id, nil
}
