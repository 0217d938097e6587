package mounts

import (
	"errors"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var (
	supportedMedia        = []string{string(corev1.StorageMediumDefault), string(corev1.StorageMediumMemory)}
	supportedPropagations = []string{string(corev1.MountPropagationNone), string(corev1.MountPropagationHostToContainer), string(corev1.MountPropagationBidirectional)}
	supportedVolumeKinds  = []string{"configMap", "downwardAPI", "emptyDir", "hostPath", "image", "nfs", "persistentVolumeClaim", "projected", "secret"}
)

// Validate checks what only the node can check about pod's volumes, before
// anything runs, and returns every problem with its field path:
//
//   - metadata.uid, metadata.namespace and configMap/secret names must be
//     single path components (they name directories);
//   - volume names: DNS labels, unique; exactly one supported source each;
//   - hostPath: absolute, no "..", beneath a Config.HostPathAllow prefix
//     without a symlink leading out of it, and of the volume's type when it
//     exists (Directory, File, Socket, CharDevice and BlockDevice must
//     exist; the OrCreate types must not exist as another type);
//   - nfs: a server and an absolute export path;
//   - items[].path and downwardAPI paths: ValidatePayloadPath, no two files
//     at one path or at a path that is another's directory;
//   - downwardAPI fields: the ones Setup can fill in;
//   - persistentVolumeClaim: the claim's name only; the claim and its
//     volume are read at Setup, and until they exist the pod waits;
//   - image: a reference (the runtime mounts it);
//   - volumeMounts of init and app containers: an existing volume, a
//     subPath that passes ValidateSubPath, a known mountPropagation, and
//     Bidirectional only in privileged containers.
//
// It reads the host file system for hostPath checks and nothing else.
func (m *Volumes) Validate(pod *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	if !validComponent(string(pod.UID)) {
		errs = append(errs, field.Invalid(meta.Child("uid"), pod.UID, "must be a single path component"))
	}
	if pod.Namespace != "" && !validComponent(pod.Namespace) {
		errs = append(errs, field.Invalid(meta.Child("namespace"), pod.Namespace, "must be a single path component"))
	}

	spec := field.NewPath("spec")
	names := map[string]bool{}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		ip := spec.Child("volumes").Index(i)
		np := ip.Child("name")
		switch msgs := validation.IsDNS1123Label(v.Name); {
		case v.Name == "":
			errs = append(errs, field.Required(np, ""))
		case len(msgs) > 0:
			for _, msg := range msgs {
				errs = append(errs, field.Invalid(np, v.Name, msg))
			}
		case names[v.Name]:
			errs = append(errs, field.Duplicate(np, v.Name))
		default:
			names[v.Name] = true
		}
		errs = append(errs, m.validateSource(pod, &v.VolumeSource, ip)...)
	}

	for i := range pod.Spec.InitContainers {
		errs = append(errs, validateMounts(&pod.Spec.InitContainers[i], names, spec.Child("initContainers").Index(i))...)
	}
	for i := range pod.Spec.Containers {
		errs = append(errs, validateMounts(&pod.Spec.Containers[i], names, spec.Child("containers").Index(i))...)
	}
	return errs
}

func (m *Volumes) validateSource(pod *corev1.Pod, s *corev1.VolumeSource, ip *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	if e := s.EmptyDir; e != nil {
		n++
		ep := ip.Child("emptyDir")
		if e.Medium != corev1.StorageMediumDefault && e.Medium != corev1.StorageMediumMemory {
			errs = append(errs, field.NotSupported(ep.Child("medium"), e.Medium, supportedMedia))
		}
		if e.SizeLimit != nil && e.SizeLimit.Sign() < 0 {
			errs = append(errs, field.Invalid(ep.Child("sizeLimit"), e.SizeLimit.String(), "must not be negative"))
		}
	}
	if h := s.HostPath; h != nil {
		n++
		errs = append(errs, m.validateHostPath(h, ip.Child("hostPath"))...)
	}
	if nfs := s.NFS; nfs != nil {
		n++
		errs = append(errs, validateNFS(nfs, ip.Child("nfs"))...)
	}
	if im := s.Image; im != nil {
		n++
		// The reference and the pull policy are podspec's to check,
		// and the runtime's to mount: nothing here is on the node.
		if im.Reference == "" {
			errs = append(errs, field.Required(ip.Child("image", "reference"), ""))
		}
	}
	if c := s.PersistentVolumeClaim; c != nil {
		n++
		// Only the name: the claim itself may appear in SourceDir later,
		// and until it does the pod waits (setupClaim), as a kubelet's
		// pod waits for its claim to be bound.
		errs = append(errs, objectName(c.ClaimName, ip.Child("persistentVolumeClaim", "claimName"))...)
	}
	if c := s.ConfigMap; c != nil {
		n++
		cp := ip.Child("configMap")
		errs = append(errs, objectName(c.Name, cp.Child("name"))...)
		errs = append(errs, validateMode(c.DefaultMode, cp.Child("defaultMode"))...)
		errs = append(errs, validateItems(c.Items, cp.Child("items"), newPathSet())...)
	}
	if c := s.Secret; c != nil {
		n++
		cp := ip.Child("secret")
		errs = append(errs, objectName(c.SecretName, cp.Child("secretName"))...)
		errs = append(errs, validateMode(c.DefaultMode, cp.Child("defaultMode"))...)
		errs = append(errs, validateItems(c.Items, cp.Child("items"), newPathSet())...)
	}
	if d := s.DownwardAPI; d != nil {
		n++
		dp := ip.Child("downwardAPI")
		errs = append(errs, validateMode(d.DefaultMode, dp.Child("defaultMode"))...)
		errs = append(errs, validateDownward(pod, d.Items, dp.Child("items"), newPathSet())...)
	}
	if p := s.Projected; p != nil {
		n++
		pp := ip.Child("projected")
		errs = append(errs, validateMode(p.DefaultMode, pp.Child("defaultMode"))...)
		paths := newPathSet()
		for i, src := range p.Sources {
			sp := pp.Child("sources").Index(i)
			k := 0
			if c := src.ConfigMap; c != nil {
				k++
				errs = append(errs, objectName(c.Name, sp.Child("configMap", "name"))...)
				errs = append(errs, validateItems(c.Items, sp.Child("configMap", "items"), paths)...)
			}
			if c := src.Secret; c != nil {
				k++
				errs = append(errs, objectName(c.Name, sp.Child("secret", "name"))...)
				errs = append(errs, validateItems(c.Items, sp.Child("secret", "items"), paths)...)
			}
			if d := src.DownwardAPI; d != nil {
				k++
				errs = append(errs, validateDownward(pod, d.Items, sp.Child("downwardAPI", "items"), paths)...)
			}
			if t := src.ServiceAccountToken; t != nil {
				k++
				tp := sp.Child("serviceAccountToken")
				switch {
				case m.objects == nil:
					errs = append(errs, field.Forbidden(tp, "service account tokens are issued by a control plane, and there is none"))
				case t.Path == "":
					errs = append(errs, field.Required(tp.Child("path"), ""))
				case t.ExpirationSeconds != nil && *t.ExpirationSeconds < 600:
					errs = append(errs, field.Invalid(tp.Child("expirationSeconds"), *t.ExpirationSeconds, "may not be less than 10 minutes"))
				default:
					errs = append(errs, payloadPath(t.Path, tp.Child("path"), paths)...)
				}
			}
			switch {
			case k == 0:
				errs = append(errs, field.NotSupported(sp, "", []string{"configMap", "downwardAPI", "secret"}))
			case k > 1:
				errs = append(errs, field.Forbidden(sp, "may not specify more than 1 volume type per source"))
			}
		}
	}
	switch {
	case n == 0:
		errs = append(errs, field.NotSupported(ip, "", supportedVolumeKinds))
	case n > 1:
		errs = append(errs, field.Forbidden(ip, "may not specify more than 1 volume type"))
	}
	return errs
}

func (m *Volumes) validateHostPath(h *corev1.HostPathVolumeSource, hp *field.Path) field.ErrorList {
	pp := hp.Child("path")
	switch {
	case h.Path == "":
		return field.ErrorList{field.Required(pp, "")}
	case !path.IsAbs(h.Path):
		return field.ErrorList{field.Invalid(pp, h.Path, "must be an absolute path")}
	}
	typ := corev1.HostPathUnset
	if h.Type != nil {
		typ = *h.Type
	}
	if !knownHostPathType(typ) {
		return field.ErrorList{field.NotSupported(hp.Child("type"), typ, []string{
			"", string(corev1.HostPathBlockDev), string(corev1.HostPathCharDev), string(corev1.HostPathDirectory),
			string(corev1.HostPathDirectoryOrCreate), string(corev1.HostPathFile), string(corev1.HostPathFileOrCreate),
			string(corev1.HostPathSocket)})}
	}
	err := m.checkHostPath(h.Path, typ, false)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrHostPathNotAllowed):
		return field.ErrorList{field.Forbidden(pp, fmt.Sprintf("%s is not beneath an allowed prefix of this node (volumes.hostPathAllow: %v)", h.Path, m.allow))}
	case errors.Is(err, ErrHostPathType):
		return field.ErrorList{field.Invalid(hp.Child("type"), typ, err.Error())}
	default:
		return field.ErrorList{field.Invalid(pp, h.Path, err.Error())}
	}
}

func validateMounts(c *corev1.Container, volumes map[string]bool, cp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, vm := range c.VolumeMounts {
		ip := cp.Child("volumeMounts").Index(i)
		if !volumes[vm.Name] {
			errs = append(errs, field.NotFound(ip.Child("name"), vm.Name))
		}
		if err := ValidateSubPath(vm.SubPath); err != nil {
			errs = append(errs, field.Invalid(ip.Child("subPath"), vm.SubPath, err.Error()))
		}
		if _, err := propagation(c, vm.MountPropagation); err != nil {
			mp := ip.Child("mountPropagation")
			if errors.Is(err, ErrPropagation) {
				errs = append(errs, field.Forbidden(mp, "Bidirectional mount propagation is available only to privileged containers"))
			} else {
				errs = append(errs, field.NotSupported(mp, *vm.MountPropagation, supportedPropagations))
			}
		}
	}
	return errs
}

// pathSet collects the payload paths of one volume to find collisions.
type pathSet map[string]bool

func newPathSet() pathSet { return pathSet{} }

// add records p and returns a reason when it collides with a path already
// recorded: the same path, or one being the other's directory.
func (s pathSet) add(p string) string {
	p = path.Clean(p)
	if s[p] {
		return "conflicting duplicate paths"
	}
	for q := range s {
		if strings.HasPrefix(q, p+"/") || strings.HasPrefix(p, q+"/") {
			return fmt.Sprintf("conflicts with %q: one would be the other's directory", q)
		}
	}
	s[p] = true
	return ""
}

func validateItems(items []corev1.KeyToPath, ip *field.Path, paths pathSet) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		p := ip.Index(i)
		if it.Key == "" {
			errs = append(errs, field.Required(p.Child("key"), ""))
		}
		for _, msg := range validation.IsConfigMapKey(it.Key) {
			if it.Key != "" {
				errs = append(errs, field.Invalid(p.Child("key"), it.Key, msg))
			}
		}
		errs = append(errs, payloadPath(it.Path, p.Child("path"), paths)...)
		errs = append(errs, validateMode(it.Mode, p.Child("mode"))...)
	}
	return errs
}

func validateDownward(pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, ip *field.Path, paths pathSet) field.ErrorList {
	var errs field.ErrorList
	for i, it := range items {
		p := ip.Index(i)
		errs = append(errs, payloadPath(it.Path, p.Child("path"), paths)...)
		errs = append(errs, validateMode(it.Mode, p.Child("mode"))...)
		switch {
		case it.ResourceFieldRef != nil:
			if name := it.ResourceFieldRef.ContainerName; !hasContainer(pod, name) {
				errs = append(errs, field.Invalid(p.Child("resourceFieldRef", "containerName"), name, "no container of the pod has this name"))
			}
		case it.FieldRef == nil:
			errs = append(errs, field.Required(p.Child("fieldRef"), ""))
		default:
			if _, err := downwardValue(pod, it.FieldRef.FieldPath); err != nil {
				errs = append(errs, field.NotSupported(p.Child("fieldRef", "fieldPath"), it.FieldRef.FieldPath, []string{
					"metadata.annotations", "metadata.annotations['<key>']", "metadata.labels", "metadata.labels['<key>']",
					"metadata.name", "metadata.namespace", "metadata.uid"}))
			}
		}
	}
	return errs
}

func payloadPath(p string, fp *field.Path, paths pathSet) field.ErrorList {
	if err := ValidatePayloadPath(p); err != nil {
		return field.ErrorList{field.Invalid(fp, p, err.Error())}
	}
	if reason := paths.add(p); reason != "" {
		return field.ErrorList{field.Invalid(fp, p, reason)}
	}
	return nil
}

func validateMode(mode *int32, mp *field.Path) field.ErrorList {
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		return field.ErrorList{field.Invalid(mp, *mode, "must be a number between 0 and 0777 (octal), both inclusive")}
	}
	return nil
}

// objectName checks a configMap or secret name: a DNS subdomain, which is
// also a single path component.
func objectName(name string, np *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(np, "")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(np, name, msg))
	}
	return errs
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == name {
				return true
			}
		}
	}
	return false
}
