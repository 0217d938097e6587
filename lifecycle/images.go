package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// Container waiting reasons of image resolution, the kubelet's
// (pkg/kubelet/images/types.go).
const (
	// ReasonErrImagePull: the image could not be pulled, or is missing
	// on a node that does not pull.
	ReasonErrImagePull = "ErrImagePull"
	// ReasonImagePullBackOff: the last pull failed and the next waits.
	ReasonImagePullBackOff = "ImagePullBackOff"
	// ReasonErrImageNeverPull: the image is missing and its pull policy
	// is Never.
	ReasonErrImageNeverPull = "ErrImageNeverPull"
	// ReasonCreateContainerConfigError: the container's config cannot be
	// made for its image, as runAsNonRoot with an image that runs as root
	// (the kubelet's ErrCreateContainerConfig).
	ReasonCreateContainerConfigError = "CreateContainerConfigError"
)

// imageError is a container that cannot start for its image (reason one
// of the Reason* constants above) or its config
// (cri.ReasonCreateContainerConfigError); it unwraps to the cause.
type imageError struct {
	container string
	reason    string
	err       error
}

func (e *imageError) Error() string {
	return fmt.Sprintf("container %s: %s: %v", e.container, e.reason, e.err)
}

func (e *imageError) Unwrap() error { return e.err }

// ensureImage resolves c's image by its pull policy (cri.Client.EnsureImage
// does what the policy says). A failed pull is retried after a back-off
// that doubles from BackoffInitial to BackoffMax, as the kubelet's image
// manager backs off pulls: a registry that refuses is not asked at every
// sync. A missing image that was not pulled (Never, or a node that does
// not pull) has no back-off: ImageStatus is cheap, and an image imported
// meanwhile is used at the next sync.
//
// It is called from the pod's worker only, which owns st.pulls.
func (m *Manager) ensureImage(ctx context.Context, st *podState, c *corev1.Container) (string, error) {
	now := m.now()
	b := st.pulls[c.Name]
	if b != nil && now.Before(b.until) {
		return "", &imageError{container: c.Name, reason: ReasonImagePullBackOff,
			err: fmt.Errorf("back-off %s pulling image %q: %w", b.delay, c.Image, b.err)}
	}
	id, err := m.cfg.Runtime.EnsureImage(ctx, c.Image, c.ImagePullPolicy, st.sandboxCfg)
	switch {
	case err == nil:
		delete(st.pulls, c.Name)
		return id, nil
	case errors.Is(err, cri.ErrImageNeverPull):
		return "", &imageError{container: c.Name, reason: ReasonErrImageNeverPull, err: err}
	case errors.Is(err, cri.ErrImageNotPresent), errors.Is(err, cri.ErrPullDisabled):
		return "", &imageError{container: c.Name, reason: ReasonErrImagePull, err: err}
	case errors.Is(err, cri.ErrImagePull):
		if st.pulls == nil {
			st.pulls = map[string]*pullBackoff{}
		}
		if b == nil {
			b = &pullBackoff{}
			st.pulls[c.Name] = b
		}
		b.delay = min(max(2*b.delay, m.cfg.BackoffInitial), m.cfg.BackoffMax)
		b.until, b.err = now.Add(b.delay), err
		m.log.Warn("image pull failed", "pod", key(st.pod), "container", c.Name, "image", c.Image,
			"pull_policy", c.ImagePullPolicy, "back_off", b.delay, "err", err)
		return "", &imageError{container: c.Name, reason: ReasonErrImagePull, err: err}
	}
	return "", err
}

// pullBackoff is the back-off of one container's image pulls.
type pullBackoff struct {
	until time.Time
	delay time.Duration
	err   error // the failed pull's, for the ImagePullBackOff message
}

// setImageError records a container that cannot start for its image: the
// pod's reason and message, and the container's waiting state, as the
// kubelet shows ErrImagePull, ImagePullBackOff and ErrImageNeverPull.
func (m *Manager) setImageError(st *podState, ie *imageError) {
	m.setError(st, ie.reason, ie)
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.evicted != nil {
		return
	}
	if st.status.Phase == "" {
		st.status.Phase = corev1.PodPending
	}
	waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: ie.reason, Message: ie.err.Error()}}
	statuses := &st.status.ContainerStatuses
	for _, c := range st.pod.Spec.InitContainers {
		if c.Name == ie.container {
			statuses = &st.status.InitContainerStatuses
		}
	}
	for i := range *statuses {
		if (*statuses)[i].Name == ie.container {
			(*statuses)[i].State = waiting
			return
		}
	}
	*statuses = append(*statuses, corev1.ContainerStatus{Name: ie.container, Image: imageOf(st.pod, ie.container), State: waiting})
}

// imageOf is the image of the pod's container name.
func imageOf(p *corev1.Pod, name string) string {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range cs {
			if c.Name == name {
				return c.Image
			}
		}
	}
	return ""
}
