package cri

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// statusRuntime answers Status with features, nil as containerd 1.6 does
// (it predates the field).
type statusRuntime struct {
	*fakeRuntime
	features *runtimeapi.RuntimeFeatures
}

func (s statusRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	return &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{}, Features: s.features}, nil
}

func TestFeaturesAreWhatTheRuntimeReports(t *testing.T) {
	for _, tt := range []struct {
		name     string
		reported *runtimeapi.RuntimeFeatures
		want     bool
	}{
		{name: "a runtime without the features field (containerd 1.6)", reported: nil, want: false},
		{name: "a runtime that reports the feature off", reported: &runtimeapi.RuntimeFeatures{}, want: false},
		{name: "a runtime that reports the feature (containerd 2)", reported: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true}, want: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeRuntime{}
			sock := serve(t, func(s *grpc.Server) {
				rt := statusRuntime{fakeRuntime: f, features: tt.reported}
				runtimeapi.RegisterRuntimeServiceServer(s, rt)
				runtimeapi.RegisterImageServiceServer(s, f)
			})
			c, err := Dial(t.Context(), "unix://"+sock, dialTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got, err := c.Features(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if got.GetSupplementalGroupsPolicy() != tt.want {
				t.Errorf("supplemental_groups_policy = %v, want %v", got.GetSupplementalGroupsPolicy(), tt.want)
			}
		})
	}
}

func TestSupplementalGroupsPolicyReachesTheRuntime(t *testing.T) {
	strict, merge := corev1.SupplementalGroupsPolicyStrict, corev1.SupplementalGroupsPolicyMerge
	for _, tt := range []struct {
		name   string
		policy *corev1.SupplementalGroupsPolicy
		want   runtimeapi.SupplementalGroupsPolicy
	}{
		{name: "unset is Merge", want: runtimeapi.SupplementalGroupsPolicy_Merge},
		{name: "Merge", policy: &merge, want: runtimeapi.SupplementalGroupsPolicy_Merge},
		{name: "Strict", policy: &strict, want: runtimeapi.SupplementalGroupsPolicy_Strict},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := testPod()
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr(int64(1000)), SupplementalGroups: []int64{4000}, SupplementalGroupsPolicy: tt.policy}
			sb := SandboxConfig(p, SandboxOptions{CgroupParent: "x"}).Linux.SecurityContext
			if got := sb.GetSupplementalGroupsPolicy(); got != tt.want {
				t.Errorf("sandbox policy = %v, want %v", got, tt.want)
			}
			cfg, err := ContainerConfig(p, &p.Spec.Containers[0], ContainerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sc := cfg.GetLinux().GetSecurityContext()
			if got := sc.GetSupplementalGroupsPolicy(); got != tt.want {
				t.Errorf("container policy = %v, want %v", got, tt.want)
			}
			if !reflect.DeepEqual(sc.GetSupplementalGroups(), []int64{4000}) {
				t.Errorf("container groups = %v, want [4000]", sc.GetSupplementalGroups())
			}
		})
	}
}

func TestContainerUserIsWhatTheRuntimeReports(t *testing.T) {
	if u := ContainerUser(&runtimeapi.ContainerStatus{}); u != nil {
		t.Errorf("no user reported (containerd 1.6): user = %v, want nil", u)
	}
	got := ContainerUser(&runtimeapi.ContainerStatus{User: &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{
		Uid: 1000, Gid: 3000, SupplementalGroups: []int64{3000, 4000},
	}}})
	want := &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1000, GID: 3000, SupplementalGroups: []int64{3000, 4000}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("user = %+v, want %+v", got.Linux, want.Linux)
	}
}

func TestImageVolumesFollowTheRuntimesVersion(t *testing.T) {
	for _, tt := range []struct {
		info RuntimeInfo
		want ImageVolumes
	}{
		// Debian 12's, the host harness's and the debian node lane's.
		{RuntimeInfo{Name: "containerd", Version: "1.6.20~ds1"}, ImageVolumes{Runtime: "containerd 1.6.20~ds1"}},
		{RuntimeInfo{Name: "containerd", Version: "v1.7.27"}, ImageVolumes{Runtime: "containerd v1.7.27"}},
		{RuntimeInfo{Name: "containerd", Version: "v2.0.5"}, ImageVolumes{Runtime: "containerd v2.0.5"}},
		{RuntimeInfo{Name: "containerd", Version: "v2.1.0"}, ImageVolumes{Mount: true, Runtime: "containerd v2.1.0"}},
		{RuntimeInfo{Name: "containerd", Version: "v2.1.0-rc.1"}, ImageVolumes{Mount: true, Runtime: "containerd v2.1.0-rc.1"}},
		{RuntimeInfo{Name: "containerd", Version: "v2.2.0"}, ImageVolumes{Mount: true, SubPath: true, Runtime: "containerd v2.2.0"}},
		// The 2.x node lane's.
		{RuntimeInfo{Name: "containerd", Version: "v2.4.2"}, ImageVolumes{Mount: true, SubPath: true, Runtime: "containerd v2.4.2"}},
		{RuntimeInfo{Name: "containerd", Version: "3.0.0"}, ImageVolumes{Mount: true, SubPath: true, Runtime: "containerd 3.0.0"}},
		// Unknown: refused rather than mounted empty.
		{RuntimeInfo{Name: "containerd", Version: "main"}, ImageVolumes{Runtime: "containerd main"}},
		{RuntimeInfo{Name: "cri-o", Version: "1.33.0"}, ImageVolumes{Runtime: "cri-o 1.33.0"}},
		{RuntimeInfo{}, ImageVolumes{}},
	} {
		if got := ImageVolumesOf(tt.info); got != tt.want {
			t.Errorf("ImageVolumesOf(%+v) = %+v, want %+v", tt.info, got, tt.want)
		}
	}
}
