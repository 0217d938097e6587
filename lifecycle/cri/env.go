package cri

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// EnvSources reads the ConfigMaps and Secrets a container's env refers to
// (mounts.Volumes reads them from the same SourceDir as the volumes).
// found is false, with a nil error, for an object that does not exist.
type EnvSources interface {
	ConfigMap(namespace, name string) (data map[string][]byte, found bool, err error)
	Secret(namespace, name string) (data map[string][]byte, found bool, err error)
}

// NodeInfo is what the downward API tells a container about its node.
type NodeInfo struct {
	// Name is spec.nodeName: the node running the pod (the kubelet sets a
	// static pod's nodeName to its own, and nodeguard runs every pod it is
	// given, so this wins over the pod's field).
	Name string
	// HostIPs are status.hostIP(s), the node's addresses, primary first.
	HostIPs []string
	// Allocatable stands in for an unset cpu, memory or ephemeral-storage
	// limit in a resourceFieldRef, as the kubelet's
	// defaultPodLimitsForDownwardAPI does.
	Allocatable corev1.ResourceList
}

// The kubelet's reason for a container whose env cannot be resolved.
const (
	// ReasonCreateContainerConfigError is the container's waiting reason
	// when its config (its env) cannot be made.
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
)

// ConfigError is a container whose config cannot be made: a ConfigMap,
// Secret or key its env needs is missing, or a reference cannot be
// resolved. Err's text is the kubelet's message for the same failure, the
// container's waiting message under ReasonCreateContainerConfigError.
type ConfigError struct {
	Container string
	Err       error
}

func (e *ConfigError) Error() string { return "container " + e.Container + " config: " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// envBuilder keeps variables in the order they are first defined; a later
// definition of a name replaces the value in its place.
type envBuilder struct {
	out   []*runtimeapi.KeyValue
	index map[string]int
	vars  map[string]string
}

func (b *envBuilder) set(k, v string) {
	b.vars[k] = v
	if j, ok := b.index[k]; ok {
		b.out[j].Value = []byte(v)
		return
	}
	b.index[k] = len(b.out)
	b.out = append(b.out, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
}

// containerEnv is the kubelet's makeEnvironmentVariables without service
// links (nodeguard has no Services):
//
//   - envFrom first, in order: every key of the ConfigMap or Secret, with
//     the prefix, in key order (the kubelet's order is a map's); a missing
//     object is an error unless optional; envFrom values are not expanded;
//   - then env, in order: a value is expanded against the variables defined
//     before it; valueFrom resolves a fieldRef, resourceFieldRef,
//     configMapKeyRef or secretKeyRef, unexpanded; a missing object or key
//     is an error unless optional, in which case the variable is not set.
//
// Each object is read once, so that all references to it see one version.
// Errors carry the kubelet's messages.
func containerEnv(pod *corev1.Pod, c *corev1.Container, opts ContainerOptions) ([]*runtimeapi.KeyValue, error) {
	b := &envBuilder{index: map[string]int{}, vars: map[string]string{}}
	src := &sourceCache{src: opts.EnvSources, namespace: pod.Namespace, read: map[string]map[string][]byte{}}
	for _, ef := range c.EnvFrom {
		var ref objectRef
		switch {
		case ef.ConfigMapRef != nil:
			ref = objectRef{kind: "ConfigMap", name: ef.ConfigMapRef.Name, optional: isTrue(ef.ConfigMapRef.Optional)}
		case ef.SecretRef != nil:
			ref = objectRef{kind: "Secret", name: ef.SecretRef.Name, optional: isTrue(ef.SecretRef.Optional)}
		default:
			return nil, fmt.Errorf("envFrom: %w: neither configMapRef nor secretRef", ErrUnsupportedField)
		}
		data, err := src.get(ref)
		if errors.Is(err, errOptionalMissing) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// Every key, as today's kubelet sets them: a ConfigMap key is a
		// valid (relaxed) variable name, and the API server checked the
		// prefix. (Kubelets before relaxed names skipped keys that were
		// not C identifiers, with an InvalidEnvironmentVariableNames event.)
		for _, k := range slices.Sorted(maps.Keys(data)) {
			b.set(ef.Prefix+k, string(data[k]))
		}
	}
	for _, e := range c.Env {
		v := e.Value
		var err error
		switch vf := e.ValueFrom; {
		case v != "":
			v = expand(v, b.vars)
		case vf == nil:
		case vf.FieldRef != nil:
			v, err = fieldRefValue(pod, vf.FieldRef.FieldPath, opts)
		case vf.ResourceFieldRef != nil:
			v, err = resourceFieldValue(pod, c, vf.ResourceFieldRef, opts.Node.Allocatable)
		case vf.ConfigMapKeyRef != nil:
			r := vf.ConfigMapKeyRef
			v, err = src.key(objectRef{kind: "ConfigMap", name: r.Name, optional: isTrue(r.Optional)}, r.Key)
		case vf.SecretKeyRef != nil:
			r := vf.SecretKeyRef
			v, err = src.key(objectRef{kind: "Secret", name: r.Name, optional: isTrue(r.Optional)}, r.Key)
		default:
			err = fmt.Errorf("env %s: %w: unknown valueFrom source", e.Name, ErrUnsupportedField)
		}
		if errors.Is(err, errOptionalMissing) {
			continue
		}
		if err != nil {
			return nil, err
		}
		b.set(e.Name, v)
	}
	return b.out, nil
}

// objectRef names a ConfigMap or Secret of the pod's namespace.
type objectRef struct {
	kind     string // "ConfigMap" or "Secret", as the kubelet's messages spell it
	name     string
	optional bool
}

// errOptionalMissing is an optional object or key that is missing: the
// variable is not set.
var errOptionalMissing = errors.New("optional source missing")

// sourceCache reads each object of one container's env once.
type sourceCache struct {
	src       EnvSources
	namespace string
	read      map[string]map[string][]byte // kind/name -> data; nil data: missing
}

// get returns ref's data: errOptionalMissing for a missing optional
// object, the kubelet's "configmap \"x\" not found" for another.
func (s *sourceCache) get(ref objectRef) (map[string][]byte, error) {
	id := ref.kind + "/" + ref.name
	data, seen := s.read[id]
	if !seen {
		var found bool
		var err error
		switch {
		case s.src == nil: // nothing exists, as with no SourceDir
		case ref.kind == "Secret":
			data, found, err = s.src.Secret(s.namespace, ref.name)
		default:
			data, found, err = s.src.ConfigMap(s.namespace, ref.name)
		}
		if err != nil {
			return nil, err
		}
		if !found {
			data = nil
		} else if data == nil {
			data = map[string][]byte{}
		}
		s.read[id] = data
	}
	switch {
	case data != nil:
		return data, nil
	case ref.optional:
		return nil, errOptionalMissing
	}
	return nil, fmt.Errorf("%s %q not found", strings.ToLower(ref.kind), ref.name)
}

// key returns one key of ref: errOptionalMissing when it or its object is
// missing and optional, the kubelet's "couldn't find key" otherwise.
func (s *sourceCache) key(ref objectRef, key string) (string, error) {
	data, err := s.get(ref)
	if err != nil {
		return "", err
	}
	v, ok := data[key]
	switch {
	case ok:
		return string(v), nil
	case ref.optional:
		return "", errOptionalMissing
	}
	return "", fmt.Errorf("couldn't find key %s in %s %s/%s", key, ref.kind, s.namespace, ref.name)
}

func isTrue(b *bool) bool { return b != nil && *b }

// fieldRefValue resolves a downward-API field path as the kubelet's
// podFieldSelectorRuntimeValue and fieldpath.ExtractFieldPathAsString.
func fieldRefValue(pod *corev1.Pod, path string, opts ContainerOptions) (string, error) {
	var podIPs []string
	if opts.PodIP != "" {
		podIPs = []string{opts.PodIP}
	}
	if len(podIPs) == 0 && pod.Spec.HostNetwork {
		// The kubelet takes a host-network pod's IPs from its API status,
		// which gives the node's addresses.
		podIPs = opts.Node.HostIPs
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		if opts.Node.Name != "" {
			return opts.Node.Name, nil
		}
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return first(opts.Node.HostIPs), nil
	case "status.hostIPs":
		return strings.Join(opts.Node.HostIPs, ","), nil
	case "status.podIP":
		return first(podIPs), nil
	case "status.podIPs":
		return strings.Join(podIPs, ","), nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok {
			if key, ok := strings.CutSuffix(rest, "']"); ok {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("fieldRef %q: %w", path, ErrUnsupportedField)
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// resourceFieldValue is podspec.ResourceFieldValue; an unknown
// allocatable is what nodeguard cannot resolve (ErrUnsupportedField).
func resourceFieldValue(pod *corev1.Pod, c *corev1.Container, fs *corev1.ResourceFieldSelector, allocatable corev1.ResourceList) (string, error) {
	v, err := podspec.ResourceFieldValue(pod, c, fs, allocatable)
	if errors.Is(err, podspec.ErrAllocatableUnknown) {
		return "", fmt.Errorf("%w: %w", ErrUnsupportedField, err)
	}
	return v, err
}
