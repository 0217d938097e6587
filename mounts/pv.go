// PersistentVolumeClaims standalone: a claim and the PersistentVolume it is
// bound to are read from SourceDir, checked as the PV controller checks a
// binding, and the volume's source is handed to the mounter of its type.

package mounts

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// Directories of SourceDir that hold the storage objects, one manifest a
// file: persistentvolumeclaims/<namespace>/<name>.yaml and
// persistentvolumes/<name>.yaml.
const (
	sourceClaims  = "persistentvolumeclaims"
	sourceVolumes = "persistentvolumes"
	manifestExt   = ".yaml"
)

// PluginLocalVolume is the kubelet's directory name of the local volume
// plugin, used for PersistentVolumes of type local.
const PluginLocalVolume = "kubernetes.io~local-volume"

// PersistentVolumeMounter mounts the source of one type of PersistentVolume
// (local, nfs, ...) in a pod's volume directory. Setup picks it by the
// volume's source (Volumes.pvMounter) once the claim is bound and checked.
// Teardown needs nothing from it: it unmounts whatever is mounted beneath
// the pod's directory (mountinfo), whoever mounted it.
type PersistentVolumeMounter interface {
	// Plugin is the kubelet's plugin directory name of the source, such as
	// PluginLocalVolume: the volume is mounted at
	// RootDir/pods/<uid>/volumes/<Plugin>/<persistent volume name>.
	Plugin() string
	// MountPV mounts req.PV's source on req.Dir. It is called on every
	// sync of the pod and must leave a source already mounted there as it
	// is.
	MountPV(ctx context.Context, req PVMount) error
}

// PVMount is one PersistentVolume to mount for a pod.
type PVMount struct {
	// PV is the bound volume; its source is the mounter's type. Its
	// spec.mountOptions are the mount's options.
	PV *corev1.PersistentVolume
	// Dir is the mount point, an existing directory beneath the pod's.
	Dir string
	// ReadOnly: the pod's persistentVolumeClaim.readOnly; the mount must
	// be read-only.
	ReadOnly bool
}

// ClaimError is why a pod's PersistentVolumeClaim cannot be used yet: the
// claim is missing, or no PersistentVolume is bound to it. The pod waits
// (Pending) until the objects appear in SourceDir. Its message is the one
// a scheduler gives for the same pod.
type ClaimError struct {
	Namespace, Claim string
	// Unbound is false for a missing claim.
	Unbound bool
	// Detail says what is missing for a claim that is Unbound.
	Detail string
}

func (e *ClaimError) Error() string {
	if !e.Unbound {
		return fmt.Sprintf("persistentvolumeclaim %q not found", e.Claim)
	}
	return fmt.Sprintf("pod has unbound immediate PersistentVolumeClaims: persistentvolumeclaim %q: %s", e.Claim, e.Detail)
}

// Is matches ErrClaimNotFound or ErrClaimUnbound.
func (e *ClaimError) Is(target error) bool {
	return target == ErrClaimNotFound && !e.Unbound || target == ErrClaimUnbound && e.Unbound
}

var (
	// ErrClaimNotFound matches a ClaimError for a missing claim.
	ErrClaimNotFound = errors.New("persistentvolumeclaim not found")
	// ErrClaimUnbound matches a ClaimError for a claim no volume is bound
	// to.
	ErrClaimUnbound = errors.New("persistentvolumeclaim unbound")
	// ErrVolumeMismatch is wrapped when the PersistentVolume bound to a
	// claim does not satisfy it (access modes, volume mode, capacity,
	// storage class, selector): the PV controller would not bind them.
	ErrVolumeMismatch = errors.New("persistentvolume does not satisfy its claim")
	// ErrBadObject is wrapped for a PersistentVolume or
	// PersistentVolumeClaim manifest in SourceDir that cannot be used as
	// it is written.
	ErrBadObject = errors.New("bad storage object")
)

// Claim reads PersistentVolumeClaim namespace/name from SourceDir and
// returns it with the PersistentVolume bound to it. The binding is the one
// the claim or the volume names (the PV controller's pre-binding):
// spec.volumeName of the claim, or else the one volume whose spec.claimRef
// is the claim (namespace and name, and uid when both carry one). The pair
// is then checked as checkVolumeSatisfyClaim and findMatchingVolume check
// it (Satisfies). A missing claim or an unbound one is a *ClaimError.
func (m *Volumes) Claim(namespace, name string) (*corev1.PersistentVolume, *corev1.PersistentVolumeClaim, error) {
	if !validComponent(namespace) || !validComponent(name) {
		return nil, nil, fmt.Errorf("read persistentvolumeclaim %s/%s: %w: not a single path component", namespace, name, ErrUnsafePath)
	}
	var pvc corev1.PersistentVolumeClaim
	found, err := m.readObject(filepath.Join(sourceClaims, namespace, name+manifestExt), "PersistentVolumeClaim", &pvc)
	if err != nil {
		return nil, nil, err
	}
	if !found {
		return nil, nil, &ClaimError{Namespace: namespace, Claim: name}
	}
	if pvc.Name != name || pvc.Namespace != "" && pvc.Namespace != namespace {
		return nil, nil, fmt.Errorf("read persistentvolumeclaim %s/%s: %w: the manifest is of %s/%s", namespace, name, ErrBadObject, pvc.Namespace, pvc.Name)
	}
	pvc.Namespace = namespace

	pv, err := m.boundVolume(&pvc)
	if err != nil {
		return nil, nil, err
	}
	if err := Satisfies(pv, &pvc); err != nil {
		return nil, nil, err
	}
	return pv, &pvc, nil
}

func (m *Volumes) boundVolume(pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	if n := pvc.Spec.VolumeName; n != "" {
		if !validComponent(n) {
			return nil, fmt.Errorf("persistentvolumeclaim %s/%s: spec.volumeName %q: %w: not a single path component", pvc.Namespace, pvc.Name, n, ErrUnsafePath)
		}
		pv, found, err := m.readVolume(n)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, &ClaimError{Namespace: pvc.Namespace, Claim: pvc.Name, Unbound: true,
				Detail: fmt.Sprintf("its spec.volumeName %q names no persistentvolume", n)}
		}
		if ref := pv.Spec.ClaimRef; ref != nil && !claimRefIs(ref, pvc) {
			return nil, fmt.Errorf("persistentvolume %q: %w: its spec.claimRef is %s/%s, not the claim %s/%s that names it",
				n, ErrVolumeMismatch, ref.Namespace, ref.Name, pvc.Namespace, pvc.Name)
		}
		return pv, nil
	}
	pvs, err := m.listVolumes()
	if err != nil {
		return nil, err
	}
	var bound []*corev1.PersistentVolume
	for _, pv := range pvs {
		if ref := pv.Spec.ClaimRef; ref != nil && claimRefIs(ref, pvc) {
			bound = append(bound, pv)
		}
	}
	switch len(bound) {
	case 0:
		return nil, &ClaimError{Namespace: pvc.Namespace, Claim: pvc.Name, Unbound: true,
			Detail: "it has no spec.volumeName and no persistentvolume's spec.claimRef names it"}
	case 1:
		return bound[0], nil
	}
	names := make([]string, len(bound))
	for i, pv := range bound {
		names[i] = pv.Name
	}
	return nil, fmt.Errorf("persistentvolumeclaim %s/%s: %w: the spec.claimRef of %d volumes names it (%s); set spec.volumeName",
		pvc.Namespace, pvc.Name, ErrVolumeMismatch, len(bound), strings.Join(names, ", "))
}

// claimRefIs reports whether ref names pvc, as the PV controller's
// IsVolumeBoundToClaim: namespace and name, and the uid when both have one.
func claimRefIs(ref *corev1.ObjectReference, pvc *corev1.PersistentVolumeClaim) bool {
	if ref.Namespace != pvc.Namespace || ref.Name != pvc.Name {
		return false
	}
	return ref.UID == "" || pvc.UID == "" || ref.UID == pvc.UID
}

// Satisfies checks that pv can serve pvc, as the PV controller does before
// it binds them (checkVolumeSatisfyClaim, CheckAccessModes, the claim's
// selector): the same storage class ("" when unset, on both), the same
// volume mode (Filesystem when unset), every access mode of the claim
// among the volume's, a capacity of at least the claim's storage request,
// and the volume's labels matching the claim's selector. Errors wrap
// ErrVolumeMismatch and name the field.
func Satisfies(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("persistentvolume %q for persistentvolumeclaim %s/%s: %w: %s",
			pv.Name, pvc.Namespace, pvc.Name, ErrVolumeMismatch, fmt.Sprintf(format, args...))
	}
	if c, v := claimClass(pvc), pv.Spec.StorageClassName; c != v {
		return fail("spec.storageClassName %q of the claim differs from the volume's %q", c, v)
	}
	if c, v := volumeMode(pvc.Spec.VolumeMode), volumeMode(pv.Spec.VolumeMode); c != v {
		return fail("spec.volumeMode %s of the claim differs from the volume's %s", c, v)
	}
	for _, am := range pvc.Spec.AccessModes {
		if !slices.Contains(pv.Spec.AccessModes, am) {
			return fail("spec.accessModes: the claim asks for %s, the volume offers %v", am, pv.Spec.AccessModes)
		}
	}
	req, ok := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	if !ok {
		return fail("the claim has no spec.resources.requests.storage")
	}
	capacity := pv.Spec.Capacity[corev1.ResourceStorage]
	if capacity.Cmp(req) < 0 {
		return fail("spec.capacity.storage %s of the volume is less than the claim's request %s", capacity.String(), req.String())
	}
	if pvc.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(pvc.Spec.Selector)
		if err != nil {
			return fmt.Errorf("persistentvolumeclaim %s/%s: %w: spec.selector: %w", pvc.Namespace, pvc.Name, ErrBadObject, err)
		}
		if !sel.Matches(labels.Set(pv.Labels)) {
			return fail("the volume's labels %v do not match the claim's spec.selector %s", pv.Labels, sel.String())
		}
	}
	return nil
}

// claimClass is the claim's storage class: the beta annotation (still
// honoured by the PV controller) or spec.storageClassName, "" when unset.
func claimClass(pvc *corev1.PersistentVolumeClaim) string {
	if c, ok := pvc.Annotations[corev1.BetaStorageClassAnnotation]; ok {
		return c
	}
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return ""
}

func volumeMode(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
	if m == nil {
		return corev1.PersistentVolumeFilesystem
	}
	return *m
}

func (m *Volumes) readVolume(name string) (*corev1.PersistentVolume, bool, error) {
	var pv corev1.PersistentVolume
	found, err := m.readObject(filepath.Join(sourceVolumes, name+manifestExt), "PersistentVolume", &pv)
	if err != nil || !found {
		return nil, found, err
	}
	if pv.Name != name {
		return nil, false, fmt.Errorf("read persistentvolume %s: %w: the manifest is of %q", name, ErrBadObject, pv.Name)
	}
	return &pv, true, nil
}

// listVolumes reads every PersistentVolume in SourceDir, sorted by name.
func (m *Volumes) listVolumes() ([]*corev1.PersistentVolume, error) {
	if m.sourceDir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(filepath.Join(m.sourceDir, sourceVolumes))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list persistentvolumes: %w", err)
	}
	var pvs []*corev1.PersistentVolume
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), manifestExt)
		if !ok || !validComponent(name) || e.IsDir() {
			continue
		}
		pv, found, err := m.readVolume(name)
		if err != nil {
			return nil, err
		}
		if found {
			pvs = append(pvs, pv)
		}
	}
	return pvs, nil
}

// readObject decodes the manifest at rel beneath SourceDir into obj, a
// kind object of apiVersion v1. found is false, with a nil error, when
// there is no such file (or no SourceDir). Unknown fields are errors: a
// misspelt field of a volume must not be dropped.
func (m *Volumes) readObject(rel, kind string, obj any) (found bool, err error) {
	if m.sourceDir == "" {
		return false, nil
	}
	p := filepath.Join(m.sourceDir, rel)
	b, err := readRegular(p, maxSourceBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(b, &tm); err != nil {
		return false, fmt.Errorf("read %s: %w: %w", p, ErrBadObject, err)
	}
	if tm.APIVersion != "v1" || tm.Kind != kind {
		return false, fmt.Errorf("read %s: %w: apiVersion %q kind %q, want v1 %s", p, ErrBadObject, tm.APIVersion, tm.Kind, kind)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		return false, fmt.Errorf("read %s: %w: %w", p, ErrBadObject, err)
	}
	return true, nil
}

// pvMounter returns the mounter of pv's source, or an error wrapping
// ErrUnsupported naming the source. hostPath volumes have none: they are
// used in place (setupClaim).
func (m *Volumes) pvMounter(pv *corev1.PersistentVolume) (PersistentVolumeMounter, error) {
	s := &pv.Spec.PersistentVolumeSource
	switch {
	case s.Local != nil:
		return m.local, nil
	case s.NFS != nil:
		return m.nfs, nil
	}
	return nil, fmt.Errorf("persistentvolume %q: %w: its source (%s) has no mounter in nodeguard, which mounts local, nfs and hostPath volumes",
		pv.Name, ErrUnsupported, pvSourceName(s))
}

// pvSourceName is the JSON name of the source set in s, for errors.
func pvSourceName(s *corev1.PersistentVolumeSource) string {
	b, err := yaml.Marshal(s)
	if err != nil {
		return "unknown"
	}
	name, _, _ := strings.Cut(string(b), ":")
	if name == "{}\n" || name == "" {
		return "none"
	}
	return name
}
