package cri

import (
	"context"

	corev1 "k8s.io/api/core/v1"
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
