package cri

import (
	"context"
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

// PullImage pulls ref for the sandbox sandboxCfg, with auth (nil:
// anonymously), and returns the image's reference (ID) as the runtime
// reports it. On a client dialed without WithImagePull it returns
// ErrPullDisabled and contacts nothing.
func (c *Client) PullImage(ctx context.Context, ref string, auth *runtimeapi.AuthConfig, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	if !c.opts.pull {
		return "", fmt.Errorf("pull image %s: %w", ref, ErrPullDisabled)
	}
	resp, err := c.img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}, Auth: auth, SandboxConfig: sandboxCfg})
	if err != nil {
		return "", opError(ctx, "pull image", ref, err)
	}
	return resp.GetImageRef(), nil
}

// EnsureImage returns the ID of image ref to create a container from, as
// its pull policy says (ResolveImage), pulling it anonymously when the
// policy wants a pull. A pull the runtime fails is an error wrapping
// ErrImagePull with the runtime's reason. The Manager resolves and pulls
// in two steps instead, to pull with the pod's credentials and log the
// pull's progress.
func (c *Client) EnsureImage(ctx context.Context, ref string, policy corev1.PullPolicy, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	id, pull, err := c.ResolveImage(ctx, ref, policy)
	if err != nil || !pull {
		return id, err
	}
	if id, err = c.PullImage(ctx, ref, nil, sandboxCfg); err != nil {
		return "", fmt.Errorf("%w: %w", ErrImagePull, err)
	}
	return id, nil
}

// ResolveImage decides, as the kubelet's shouldPullImage, whether image
// ref must be pulled for a container with pull policy policy: pull is true
// when it must, else id is the present image's ID.
//
//   - Always must pull at every call, the image present or not, and fails
//     with ErrPullDisabled on a client that may not pull;
//   - IfNotPresent must pull only a missing image; on a client that may not
//     pull, a missing image is an error wrapping ErrImageNotPresent;
//   - Never pulls nothing: a missing image is an error wrapping
//     ErrImageNeverPull.
//
// Every error names ref. Another policy is ErrInvalidOption (podspec
// validation defaults and checks it earlier).
func (c *Client) ResolveImage(ctx context.Context, ref string, policy corev1.PullPolicy) (id string, pull bool, err error) {
	switch policy {
	case corev1.PullAlways:
		if !c.opts.pull {
			return "", false, fmt.Errorf("pull image %s: %w (pull policy %s needs imagePull: true)", ref, ErrPullDisabled, policy)
		}
		return "", true, nil
	case corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return "", false, fmt.Errorf("ensure image %s: %w: pull policy %q (want %s, %s or %s)", ref, ErrInvalidOption, policy,
			corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever)
	}
	img, err := c.ImageStatus(ctx, ref)
	if err == nil {
		return img.GetId(), false, nil
	}
	if !isNotPresent(err) {
		return "", false, err
	}
	if policy == corev1.PullNever {
		return "", false, fmt.Errorf("container image %q is not present with pull policy of Never: %w", ref, ErrImageNeverPull)
	}
	if !c.opts.pull {
		return "", false, fmt.Errorf("%w; nodeguard does not pull (imagePull: false): import it into the runtime (ctr -n k8s.io images import) or set imagePull: true", err)
	}
	return "", true, nil
}
