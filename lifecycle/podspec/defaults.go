package podspec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Defaults applied by Default, as pkg/apis/core/v1/defaults.go sets them.
const (
	DefaultNamespace                     = "default"
	DefaultTerminationGracePeriodSeconds = int64(30)
	DefaultTerminationMessagePath        = "/dev/termination-log"
	// DefaultVolumeMode is the file mode of configMap, secret, projected and
	// downwardAPI volume files (0644).
	DefaultVolumeMode = int32(0o644)
)

// Default fills in what the API server would before validation (SetDefaults_*
// in pkg/apis/core/v1/defaults.go), so that nodeguard computes the same QoS,
// ports and modes as a cluster would for the same manifest:
//
//   - metadata.namespace "default";
//   - for every container that sets a limit but no request, the limit as
//     the request;
//   - restartPolicy Always, dnsPolicy ClusterFirst,
//     terminationGracePeriodSeconds 30, an empty pod securityContext,
//     enableServiceLinks true;
//   - per container: terminationMessagePath /dev/termination-log,
//     terminationMessagePolicy File, imagePullPolicy Always for a ":latest"
//     or untagged image and IfNotPresent otherwise; port protocol TCP, and
//     with hostNetwork a hostPort equal to the containerPort;
//   - hostPath type "" (no check), mode 0644 for configMap, secret,
//     projected and downwardAPI volumes, fieldRef apiVersion v1, an image
//     volume's pullPolicy as a container's imagePullPolicy.
//
// Finally, when metadata.uid is empty, Default sets it to a UID derived from
// source and the defaulted pod: the same manifest in the same file always
// gets the same UID (so a restarted agent finds its pods again), and an
// edited manifest gets a new one, as the kubelet does for static pods
// (applyDefaults in pkg/kubelet/config/common.go hashes the pod and its
// source). The UID is formatted as an RFC 9562 version-8 UUID.
func Default(p *corev1.Pod, source string) {
	if p.Namespace == "" {
		p.Namespace = DefaultNamespace
	}
	s := &p.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.TerminationGracePeriodSeconds == nil {
		v := DefaultTerminationGracePeriodSeconds
		s.TerminationGracePeriodSeconds = &v
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.EnableServiceLinks == nil {
		t := true
		s.EnableServiceLinks = &t
	}
	for _, list := range [][]corev1.Container{s.InitContainers, s.Containers} {
		for i := range list {
			defaultContainer(&list[i], s.HostNetwork)
		}
	}
	for i := range s.Volumes {
		defaultVolume(&s.Volumes[i].VolumeSource)
	}
	if p.UID == "" {
		p.UID = derivedUID(p, source)
	}
}

func defaultContainer(c *corev1.Container, hostNetwork bool) {
	for name, q := range c.Resources.Limits {
		if _, ok := c.Resources.Requests[name]; ok {
			continue
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Requests[name] = q.DeepCopy()
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = DefaultTerminationMessagePath
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	if c.ImagePullPolicy == "" {
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		} else {
			c.ImagePullPolicy = corev1.PullIfNotPresent
		}
	}
	for i := range c.Ports {
		port := &c.Ports[i]
		if port.Protocol == "" {
			port.Protocol = corev1.ProtocolTCP
		}
		if hostNetwork && port.HostPort == 0 {
			port.HostPort = port.ContainerPort
		}
	}
	for i := range c.Env {
		if vf := c.Env[i].ValueFrom; vf != nil && vf.FieldRef != nil && vf.FieldRef.APIVersion == "" {
			vf.FieldRef.APIVersion = "v1"
		}
	}
}

func defaultVolume(v *corev1.VolumeSource) {
	mode := func(m **int32) {
		if *m == nil {
			d := DefaultVolumeMode
			*m = &d
		}
	}
	downward := func(items []corev1.DownwardAPIVolumeFile) {
		for i := range items {
			if f := items[i].FieldRef; f != nil && f.APIVersion == "" {
				f.APIVersion = "v1"
			}
		}
	}
	switch {
	case v.Image != nil:
		// SetDefaults_ImageVolumeSource: as a container's image.
		if v.Image.PullPolicy == "" {
			v.Image.PullPolicy = corev1.PullIfNotPresent
			if imageTag(v.Image.Reference) == "latest" {
				v.Image.PullPolicy = corev1.PullAlways
			}
		}
	case v.HostPath != nil:
		if v.HostPath.Type == nil {
			t := corev1.HostPathUnset
			v.HostPath.Type = &t
		}
	case v.ConfigMap != nil:
		mode(&v.ConfigMap.DefaultMode)
	case v.Secret != nil:
		mode(&v.Secret.DefaultMode)
	case v.DownwardAPI != nil:
		mode(&v.DownwardAPI.DefaultMode)
		downward(v.DownwardAPI.Items)
	case v.Projected != nil:
		mode(&v.Projected.DefaultMode)
		for i := range v.Projected.Sources {
			if d := v.Projected.Sources[i].DownwardAPI; d != nil {
				downward(d.Items)
			}
		}
	}
}

// imageTag returns the tag of an image reference as the kubelet's
// parsers.ParseImageName sees it: "latest" when there is neither a tag nor
// a digest, "" when there is only a digest.
func imageTag(image string) string {
	name, _, hasDigest := strings.Cut(image, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		return name[i+1:]
	}
	if hasDigest {
		return ""
	}
	return "latest"
}

// derivedUID hashes the source and the pod (without its UID) into a UUID.
func derivedUID(p *corev1.Pod, source string) types.UID {
	h := sha256.New()
	h.Write([]byte("nodeguard pod uid v1\x00"))
	h.Write([]byte(source))
	h.Write([]byte{0})
	// encoding/json sorts map keys, so equal pods encode equally.
	enc, err := json.Marshal(p)
	if err != nil {
		// A decoded pod always encodes; fall back to the identity that
		// matters for uniqueness rather than fail.
		enc = []byte(p.Namespace + "/" + p.Name)
	}
	h.Write(enc)
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = b[6]&0x0f | 0x80 // version 8: custom
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	x := hex.EncodeToString(b[:])
	return types.UID(x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32])
}
