package kubenode

import (
	"context"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Mirror pods are the API server's view of the node's static pods (those
// of its manifest directory), as the kubelet's mirror client keeps them:
// one pod object per static pod, named "<name>-<node>", bound to the
// node, annotated kubernetes.io/config.mirror with the static pod's UID
// and owned by the Node, which NodeRestriction requires of the only pods
// a node may create. The static pod's status is written to its mirror. A
// mirror deleted by someone, or left from a static pod's older content,
// is created anew; one whose static pod is gone is deleted. A mirror is
// never run: the manifest is what runs.
const (
	annotationConfigSource = "kubernetes.io/config.source"
	annotationConfigHash   = "kubernetes.io/config.hash"
	// filePrefix starts the lifecycle source of a pod from a manifest
	// file (filesource.Prefix).
	filePrefix = "file:"
)

// isMirror reports whether p is a mirror pod.
func isMirror(p *corev1.Pod) bool {
	_, ok := p.Annotations[corev1.MirrorPodAnnotationKey]
	return ok
}

// isStatic reports whether p, a pod on the node, came from a manifest.
func isStatic(p *corev1.Pod) bool {
	return strings.HasPrefix(p.Annotations[annotationSource], filePrefix)
}

// mirrorName is the API name of static pod p's mirror.
func (s *PodSource) mirrorName(p *corev1.Pod) string { return p.Name + "-" + s.cfg.NodeName }

// mirrorOf is the mirror pod to create for static pod p.
func (s *PodSource) mirrorOf(p *corev1.Pod, node types.UID) *corev1.Pod {
	ann := maps.Clone(p.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	delete(ann, annotationSource)
	ann[corev1.MirrorPodAnnotationKey] = string(p.UID)
	ann[annotationConfigHash] = string(p.UID)
	ann[annotationConfigSource] = "file"
	controller, block := true, false
	m := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: s.mirrorName(p), Namespace: p.Namespace, Labels: maps.Clone(p.Labels), Annotations: ann,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: s.cfg.NodeName, UID: node,
				Controller: &controller, BlockOwnerDeletion: &block}},
		},
		Spec: *p.Spec.DeepCopy(),
	}
	m.Spec.NodeName = s.cfg.NodeName
	// The API server's Priority admission resolves spec.priority from
	// priorityClassName (or the cluster's globalDefault) and refuses a
	// pod that states another; the kubelet's file source never sets it.
	m.Spec.Priority = nil
	return m
}

// nodeUID is the Node's UID, read once it exists and again after a
// create was forbidden (a Node recreated has another UID, which
// NodeRestriction checks the owner reference against). No mirror is
// created while the Node is being deleted, as by the kubelet.
func (s *PodSource) nodeUID(ctx context.Context) (types.UID, error) {
	s.mu.Lock()
	uid := s.node
	s.mu.Unlock()
	if uid != "" {
		return uid, nil
	}
	n, err := s.cfg.Client.CoreV1().Nodes().Get(ctx, s.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read the node for its UID: %w", err)
	}
	if n.DeletionTimestamp != nil {
		return "", fmt.Errorf("the node %s is being deleted", n.Name)
	}
	s.mu.Lock()
	s.node = n.UID
	s.mu.Unlock()
	return n.UID, nil
}

// syncMirrors makes the mirror pods match the static pods. api holds the
// node's pods as the informer has them, local those of the lifecycle.
func (s *PodSource) syncMirrors(ctx context.Context, api, local []*corev1.Pod) {
	// A static pod replaced (its manifest edited) or removed is
	// terminating beside its successor for up to its grace period: only
	// the live ones want a mirror, and a mirror of a terminating one is
	// left until it has stopped, unless a live one takes the name.
	want := map[string]*corev1.Pod{} // namespace/name of the mirror -> static pod
	terminating := map[string]bool{} // UIDs of static pods stopping
	statics := map[types.UID]bool{}
	for _, p := range local {
		if !isStatic(p) {
			continue
		}
		statics[p.UID] = true
		if p.DeletionTimestamp != nil {
			terminating[string(p.UID)] = true
			continue
		}
		want[p.Namespace+"/"+s.mirrorName(p)] = p
	}
	s.mu.Lock()
	for uid := range s.mirrorErr {
		if !statics[uid] {
			delete(s.mirrorErr, uid)
		}
	}
	s.mu.Unlock()
	have := map[string]*corev1.Pod{}
	for _, p := range api {
		key := p.Namespace + "/" + p.Name
		if !isMirror(p) {
			if sp, ok := want[key]; ok {
				s.mirrorProblem(sp, fmt.Errorf("the API server has a pod %s that is not a mirror pod", key))
				delete(want, key)
			}
			continue
		}
		sp, ok := want[key]
		switch {
		case !ok && terminating[p.Annotations[corev1.MirrorPodAnnotationKey]]:
			continue // its static pod is stopping: the mirror goes after it
		case !ok:
			// Its static pod is gone (or not this agent's any more).
		case p.Annotations[corev1.MirrorPodAnnotationKey] != string(sp.UID):
			// Left from the manifest's older content: replaced.
		case p.DeletionTimestamp != nil:
			// Deleted by someone: gone at once (nothing runs from it),
			// created again at the next sync.
		default:
			have[key] = p
			continue
		}
		s.deleteNow(ctx, p)
		s.forget(p.UID)
	}
	for key, sp := range want {
		if _, ok := have[key]; ok {
			continue
		}
		uid, err := s.nodeUID(ctx)
		if err != nil {
			s.mirrorProblem(sp, err)
			continue
		}
		_, err = s.cfg.Client.CoreV1().Pods(sp.Namespace).Create(ctx, s.mirrorOf(sp, uid), metav1.CreateOptions{})
		switch {
		case err == nil:
			s.cfg.Log.Info("mirror pod created", "pod", key, "static", sp.Namespace+"/"+sp.Name)
			s.mirrorProblem(sp, nil)
		case apierrors.IsAlreadyExists(err):
			// The informer has not seen it yet, or an old one is being
			// deleted: the next sync looks again.
		default:
			if apierrors.IsForbidden(err) {
				s.mu.Lock()
				s.node = "" // read again: the Node may have been recreated
				s.mu.Unlock()
			}
			s.mirrorProblem(sp, fmt.Errorf("create mirror pod %s: %w", key, err))
		}
	}
}

// mirrorProblem logs why static pod p has no mirror, once per distinct
// reason; nil clears it.
func (s *PodSource) mirrorProblem(p *corev1.Pod, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.mirrorErr, p.UID)
		return
	}
	if s.mirrorErr[p.UID] == err.Error() {
		return
	}
	s.mirrorErr[p.UID] = err.Error()
	s.cfg.Log.Warn("static pod without a mirror pod", "pod", p.Namespace+"/"+p.Name, "err", err)
}

// mirrorFor is the mirror pod, as the informer has it, of static pod p:
// the object its status is written to.
func (s *PodSource) mirrorFor(p *corev1.Pod) (*corev1.Pod, bool) {
	m, err := s.lister.Pods(p.Namespace).Get(s.mirrorName(p))
	if err != nil || !isMirror(m) || m.Annotations[corev1.MirrorPodAnnotationKey] != string(p.UID) || m.DeletionTimestamp != nil {
		return nil, false
	}
	return m, true
}
