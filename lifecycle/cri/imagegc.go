package cri

import (
	"context"
	"encoding/json"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// This file holds the calls image and container garbage collection and
// the imagefs observation need: they see the whole runtime, not only
// nodeguard's objects, because an image is in use whoever's container
// uses it.

// ListImages returns every image in the runtime's store.
func (c *Client) ListImages(ctx context.Context) ([]*runtimeapi.Image, error) {
	resp, err := c.img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
	if err != nil {
		return nil, opError(ctx, "list images", "all", err)
	}
	return resp.GetImages(), nil
}

// RemoveImage removes the image id (or name) from the runtime's store.
// Removing an image the runtime does not have is not an error (the CRI
// says so: RemoveImage is idempotent).
func (c *Client) RemoveImage(ctx context.Context, id string) error {
	if _, err := c.img.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: id}}); err != nil {
		return opError(ctx, "remove image", id, err)
	}
	return nil
}

// ImageFsInfo returns the runtime's image filesystems: the mountpoint of
// each (containerd: its snapshotter's root) with the bytes and inodes the
// images use there.
func (c *Client) ImageFsInfo(ctx context.Context) ([]*runtimeapi.FilesystemUsage, error) {
	resp, err := c.img.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		return nil, opError(ctx, "image fs info", "all", err)
	}
	return resp.GetImageFilesystems(), nil
}

// ListAllContainers returns every container the runtime has, nodeguard's
// or not: the image collector must see every user of an image.
func (c *Client) ListAllContainers(ctx context.Context) ([]*runtimeapi.Container, error) {
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, opError(ctx, "list containers", "all", err)
	}
	return resp.GetContainers(), nil
}

// SandboxImage returns the image the runtime makes sandboxes from, as its
// verbose Status reports it (containerd 1.x: info["config"].sandboxImage),
// and false when it does not say. containerd 2 pins that image instead
// (Image.Pinned), so there the answer is usually false.
func (c *Client) SandboxImage(ctx context.Context) (string, bool, error) {
	resp, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return "", false, opError(ctx, "runtime status", "verbose", err)
	}
	ref, ok, err := sandboxImageOf(resp.GetInfo())
	if err != nil {
		return "", false, fmt.Errorf("runtime status: %w", err)
	}
	return ref, ok, nil
}

// sandboxImageOf reads sandboxImage from a verbose Status info map.
func sandboxImageOf(info map[string]string) (string, bool, error) {
	raw, ok := info["config"]
	if !ok {
		return "", false, nil
	}
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return "", false, fmt.Errorf("info[config]: %w", err)
	}
	return cfg.SandboxImage, cfg.SandboxImage != "", nil
}
