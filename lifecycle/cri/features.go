package cri

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Features returns what the runtime says it implements (StatusResponse
// features), as the kubelet reads it into the node's status.features.
// A runtime that predates the field (containerd 1.6, 1.7) returns none:
// the result is then an empty RuntimeFeatures, every feature false.
func (c *Client) Features(ctx context.Context) (*runtimeapi.RuntimeFeatures, error) {
	resp, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return nil, opError(ctx, "runtime status", "features", err)
	}
	if f := resp.GetFeatures(); f != nil {
		return f, nil
	}
	return &runtimeapi.RuntimeFeatures{}, nil
}

// supplementalGroupsPolicy is the CRI form of the pod's policy: Strict
// asks the runtime not to add the groups the image's /etc/group gives
// the user. Validate admits Strict only where the runtime reports the
// feature, so a runtime without it never sees the value.
func supplementalGroupsPolicy(psc *corev1.PodSecurityContext) runtimeapi.SupplementalGroupsPolicy {
	if p := psc.SupplementalGroupsPolicy; p != nil && *p == corev1.SupplementalGroupsPolicyStrict {
		return runtimeapi.SupplementalGroupsPolicy_Strict
	}
	return runtimeapi.SupplementalGroupsPolicy_Merge
}

// ContainerUser is the kubelet's reading of ContainerStatus.user into
// status.containerStatuses[].user: the identity the container's first
// process started with. Nil when the runtime does not report it (runtimes
// without the supplemental_groups_policy feature).
func ContainerUser(s *runtimeapi.ContainerStatus) *corev1.ContainerUser {
	l := s.GetUser().GetLinux()
	if l == nil {
		return nil
	}
	u := &corev1.LinuxContainerUser{UID: l.GetUid(), GID: l.GetGid()}
	if g := l.GetSupplementalGroups(); len(g) > 0 {
		u.SupplementalGroups = append([]int64(nil), g...)
	}
	return &corev1.ContainerUser{Linux: u}
}

// ImageVolumes is what a runtime does with image volumes (KEP-4639): a
// CRI Mount with image set, which the runtime resolves to a local image
// and mounts read-only, and image_sub_path, a directory of that image.
// The CRI has no feature flag for either (RuntimeFeatures names none), and
// a runtime that predates the fields ignores them: the container would
// get an empty directory, not an error. So support is decided from the
// runtime's name and version (ImageVolumesOf), and a pod the runtime
// cannot mount is refused at apply.
type ImageVolumes struct {
	// Mount: the runtime mounts Mount.image.
	Mount bool
	// SubPath: the runtime mounts Mount.image_sub_path.
	SubPath bool
	// Runtime names the runtime and its version, for the refusals.
	Runtime string
}

// The first containerd releases with CRI image volumes, read in
// containerd's source: 2.1.0 mounts Mount.image (internal/cri/server
// container_image_mount.go, "Add OCI/Image Volume Source support",
// 1ec10d9ae); 2.2.0 adds Mount.image_sub_path ("support image volume sub
// path", cff8184ff). Both releases' CRI plugin unmounts the volumes when
// the sandbox stops.
var (
	containerdImageVolumes       = version.MajorMinor(2, 1)
	containerdImageVolumeSubPath = version.MajorMinor(2, 2)
)

// ImageVolumesOf says what runtime info's runtime does with image volumes.
// Only containerd is known: another runtime, or a containerd version that
// does not parse, mounts none (the pods that need one are refused, saying
// so, rather than started with an empty directory).
func ImageVolumesOf(info RuntimeInfo) ImageVolumes {
	iv := ImageVolumes{Runtime: strings.TrimSpace(info.Name + " " + info.Version)}
	if info.Name != "containerd" {
		return iv
	}
	// Debian spells its builds "1.6.20~ds1": ParseGeneric keeps the
	// numbers and ignores the rest.
	v, err := version.ParseGeneric(info.Version)
	if err != nil {
		return iv
	}
	iv.Mount = v.AtLeast(containerdImageVolumes)
	iv.SubPath = v.AtLeast(containerdImageVolumeSubPath)
	return iv
}

// Ready asks the runtime whether it is ready (CRI Status conditions
// RuntimeReady and NetworkReady) and returns nil when both are, or an
// error in the words of the kubelet's Ready condition ("container runtime
// network not ready: NetworkReady=false reason:NetworkPluginNotReady
// message:...").
func (c *Client) Ready(ctx context.Context) error {
	resp, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("container runtime is down: %w", opError(ctx, "runtime status", "ready", err))
	}
	return RuntimeReady(resp.GetStatus())
}

// RuntimeReady judges a CRI RuntimeStatus as the kubelet's runtime state
// does: a missing RuntimeReady or NetworkReady condition, or one that is
// false, makes the node not ready, and says which.
func RuntimeReady(st *runtimeapi.RuntimeStatus) error {
	var errs []string
	for _, want := range []struct{ typ, what string }{
		{runtimeapi.RuntimeReady, "container runtime not ready"},
		{runtimeapi.NetworkReady, "container runtime network not ready"},
	} {
		var found *runtimeapi.RuntimeCondition
		for _, c := range st.GetConditions() {
			if c.GetType() == want.typ {
				found = c
			}
		}
		switch {
		case found == nil:
			errs = append(errs, fmt.Sprintf("%s: %s condition missing", want.what, want.typ))
		case !found.GetStatus():
			errs = append(errs, fmt.Sprintf("%s: %s=false reason:%s message:%s", want.what, want.typ, found.GetReason(), found.GetMessage()))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, ", "))
}
