package cri

import (
	"context"
	"fmt"

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

// EnsureImage returns the ID of image ref, pulling it first when it is
// missing and the client may pull; otherwise a missing image is an error
// wrapping ErrImageNotPresent that names ref.
func (c *Client) EnsureImage(ctx context.Context, ref string, sandboxCfg *runtimeapi.PodSandboxConfig) (string, error) {
	img, err := c.ImageStatus(ctx, ref)
	if err == nil {
		return img.GetId(), nil
	}
	if !isNotPresent(err) {
		return "", err
	}
	if !c.opts.pull {
		return "", fmt.Errorf("%w; nodeguard does not pull (imagePull: false): import it into the runtime (ctr -n k8s.io images import) or set imagePull: true", err)
	}
	return c.PullImage(ctx, ref, sandboxCfg)
}
