package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/credentials"
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

// pullTimeout bounds one image pull, longer than callTimeout: a pull
// moves layers over the network, and containerd 1.6's CRI reports no
// progress to cut a stalled one earlier (containerd 1.7 cuts a pull
// without progress for 5 min, its image_pull_progress_timeout).
const pullTimeout = 5 * time.Minute

// pullProgressInterval is how often a pull still in flight is logged:
// containerd's CRI streams no progress, so the log says how long it has
// been running.
const pullProgressInterval = 10 * time.Second

// Kubernetes event types and the kubelet's image event reasons
// (pkg/kubelet/events).
const (
	eventNormal  = "Normal"
	eventWarning = "Warning"

	eventPulling     = "Pulling"
	eventPulled      = "Pulled"
	eventFailed      = "Failed"
	eventBackOff     = "BackOff"
	eventNeverPulled = "ErrImageNeverPull"
	// eventPullSecret: an imagePullSecret that is missing or malformed.
	eventPullSecret = "FailedToRetrieveImagePullSecret"
)

// imageWant is an image a container needs before it is created: its own
// (ensureImage) or that of an image volume it mounts
// (ensureImageVolumes). Both go the same way, as the kubelet's image
// manager serves containers and image volumes alike: pull policy, the
// pod's credentials, events and back-off.
type imageWant struct {
	// container is the one whose status and events report the image.
	container string
	image     string
	policy    corev1.PullPolicy
	// key is the want's back-off in st.pulls: the container's name, or
	// the volume's for an image volume (volumePullKey), whichever
	// container asks.
	key string
}

// ensureImage resolves c's image by its pull policy (ensure).
func (m *Manager) ensureImage(ctx context.Context, st *podState, c *corev1.Container) (string, error) {
	return m.ensure(ctx, st, imageWant{container: c.Name, image: c.Image, policy: c.ImagePullPolicy, key: c.Name})
}

// ensure resolves w's image by its pull policy
// (cri.Client.ResolveImage decides as the kubelet's shouldPullImage) and
// pulls it when the policy says so, with the pod's imagePullSecrets and
// then the node's credentials (pullImage). A failed pull is retried after
// a back-off that doubles from BackoffInitial to BackoffMax, as the
// kubelet's image manager backs off pulls: a registry that refuses is not
// asked at every sync. A missing image that was not pulled (Never, or a
// node that does not pull) has no back-off: ImageStatus is cheap, and an
// image imported meanwhile is used at the next sync.
//
// It records the kubelet's events (Pulling, Pulled, Failed, BackOff,
// ErrImageNeverPull) in the pod events of events.go. It is called from the pod's worker only, which owns st.pulls.
func (m *Manager) ensure(ctx context.Context, st *podState, w imageWant) (string, error) {
	now := m.now()
	b := st.pulls[w.key]
	if b != nil && now.Before(b.until) {
		if !b.reported { // once per back-off, not at every sync
			b.reported = true
			m.imageEvent(st, w.container, eventNormal, eventBackOff, fmt.Sprintf("Back-off pulling image %q", w.image))
		}
		return "", &imageError{container: w.container, reason: ReasonImagePullBackOff,
			err: fmt.Errorf("back-off %s pulling image %q: %w", b.delay, w.image, b.err)}
	}
	rctx, cancel := call(ctx)
	id, pull, err := m.cfg.Runtime.ResolveImage(rctx, w.image, w.policy)
	cancel()
	if err == nil && !pull {
		delete(st.pulls, w.key)
		m.imageEvent(st, w.container, eventNormal, eventPulled, fmt.Sprintf("Container image %q already present on machine", w.image))
		return id, nil
	}
	if err == nil {
		id, err = m.pullImage(ctx, st, w)
	}
	switch {
	case err == nil:
		delete(st.pulls, w.key)
		return id, nil
	case errors.Is(err, cri.ErrImageNeverPull):
		// No back-off (until stays zero), but one event, not one a sync.
		if b == nil {
			if st.pulls == nil {
				st.pulls = map[string]*pullBackoff{}
			}
			b = &pullBackoff{}
			st.pulls[w.key] = b
		}
		if !b.reported {
			b.reported = true
			m.imageEvent(st, w.container, eventWarning, eventNeverPulled, err.Error())
		}
		return "", &imageError{container: w.container, reason: ReasonErrImageNeverPull, err: err}
	case errors.Is(err, cri.ErrImageNotPresent), errors.Is(err, cri.ErrPullDisabled):
		return "", &imageError{container: w.container, reason: ReasonErrImagePull, err: err}
	case errors.Is(err, cri.ErrImagePull):
		if st.pulls == nil {
			st.pulls = map[string]*pullBackoff{}
		}
		if b == nil {
			b = &pullBackoff{}
			st.pulls[w.key] = b
		}
		b.delay = min(max(2*b.delay, m.cfg.BackoffInitial), m.cfg.BackoffMax)
		b.until, b.err, b.reported = now.Add(b.delay), err, false
		m.log.Warn("image pull failed", "pod", key(st.pod), "container", w.container, "image", w.image,
			"pull_policy", w.policy, "back_off", b.delay, "err", err)
		m.imageEvent(st, w.container, eventWarning, eventFailed, fmt.Sprintf("Failed to pull image %q: %v", w.image, err))
		return "", &imageError{container: w.container, reason: ReasonErrImagePull, err: err}
	}
	return "", err
}

// pullImage pulls w's image as the kubelet's puller: with each credential
// the keyring matches to the image, the pod's imagePullSecrets in their
// order first and the node's file after (credentials.Lookup), until one
// succeeds; anonymously when none matches. While the pull is in flight
// the log says so every pullProgressInterval; when it is done, how long it
// took and the image's size. A failure wraps cri.ErrImagePull with every
// attempt's error.
func (m *Manager) pullImage(ctx context.Context, st *podState, w imageWant) (string, error) {
	creds := credentials.Lookup(w.image, m.pullKeyrings(st, w.container)...)
	m.imageEvent(st, w.container, eventNormal, eventPulling, fmt.Sprintf("Pulling image %q", w.image))
	start := m.now()
	log := m.log.With("pod", key(st.pod), "container", w.container, "image", w.image)
	log.Info("pulling image", "pull_policy", w.policy, "credentials", len(creds))

	stop := m.logPullProgress(log, start)
	id, took, err := m.pullWith(ctx, st, w.image, creds)
	stop()
	if err != nil {
		return "", err
	}
	m.pulled(ctx, st, w, log, id, took)
	return id, nil
}

// logPullProgress logs, every pullProgress, that the pull begun at start
// is still in flight, until the returned stop is called; stop returns
// when the logger has ended, so no line follows the pull's end.
func (m *Manager) logPullProgress(log *slog.Logger, start time.Time) (stop func()) {
	every := m.pullProgress
	if every <= 0 {
		every = pullProgressInterval
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				log.Info("image pull in progress", "elapsed_seconds", m.now().Sub(start).Round(time.Second).Seconds())
			}
		}
	}()
	return func() { close(done); <-exited }
}

// pullWith pulls image with each of creds in turn until one succeeds,
// or anonymously when there are none, within pullTimeout, and returns the
// image's ID and how long the pull took.
func (m *Manager) pullWith(ctx context.Context, st *podState, image string, creds []credentials.Credential) (string, time.Duration, error) {
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	start := m.now()
	attempts := []*runtimeapi.AuthConfig{nil} // anonymous, when no credential matches
	if len(creds) > 0 {
		attempts = attempts[:0]
		for _, cr := range creds {
			attempts = append(attempts, cr.AuthConfig())
		}
	}
	var errs []error
	for i, auth := range attempts {
		id, err := m.cfg.Runtime.PullImage(pctx, image, auth, st.sandboxCfg)
		if err == nil {
			return id, m.now().Sub(start), nil
		}
		if errors.Is(err, cri.ErrPullDisabled) {
			return "", 0, err
		}
		if len(creds) > 0 {
			err = fmt.Errorf("with credentials for %s from %s: %w", creds[i].Key, creds[i].Source, err)
		}
		errs = append(errs, err)
	}
	return "", 0, fmt.Errorf("%w: %w", cri.ErrImagePull, errors.Join(errs...))
}

// pulled logs and records a successful pull, with the image's size from
// the runtime (an image status that fails only loses the size).
func (m *Manager) pulled(ctx context.Context, st *podState, w imageWant, log *slog.Logger, id string, took time.Duration) {
	sctx, cancel := call(ctx)
	defer cancel()
	var size uint64
	if img, err := m.cfg.Runtime.ImageStatus(sctx, id); err == nil {
		size = img.GetSize()
	} else {
		log.Warn("pulled image has no status", "image_id", id, "err", err)
	}
	log.Info("pulled image", "image_id", id, "size_bytes", size, "duration_seconds", took.Seconds())
	m.imageEvent(st, w.container, eventNormal, eventPulled, fmt.Sprintf("Successfully pulled image %q in %s. Image size: %d bytes.",
		w.image, took.Round(time.Millisecond), size))
}

// pullKeyrings are the keyrings of st's pulls: one per imagePullSecret,
// in the pod's order, then the node's file. A Secret that is missing or
// does not parse is logged and skipped, and so is an unreadable node
// file, as the kubelet goes on without them: the pull may still succeed
// (a public image), and fails with the registry's reason if not.
func (m *Manager) pullKeyrings(st *podState, container string) []*credentials.Keyring {
	var rings []*credentials.Keyring
	var skipped []string
	ns := st.pod.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	for _, ref := range st.pod.Spec.ImagePullSecrets {
		if m.cfg.Volumes == nil {
			m.log.Warn("image pull secret not read: no source directory", "pod", key(st.pod), "secret", ref.Name)
			skipped = append(skipped, ref.Name)
			continue
		}
		data, found, err := m.cfg.Volumes.Secret(ns, ref.Name)
		if err == nil && !found {
			err = fmt.Errorf("secret %s/%s not found in the source directory", ns, ref.Name)
		}
		var k *credentials.Keyring
		if err == nil {
			k, err = credentials.FromSecret("secret "+ns+"/"+ref.Name, data)
		}
		if err != nil {
			m.log.Warn("image pull secret skipped", "pod", key(st.pod), "secret", ref.Name, "err", err)
			skipped = append(skipped, ref.Name)
			continue
		}
		rings = append(rings, k)
	}
	if len(skipped) > 0 {
		m.imageEvent(st, container, eventWarning, eventPullSecret, fmt.Sprintf(
			"Unable to retrieve some image pull secrets (%s); attempting to pull the image may not succeed.", strings.Join(skipped, ", ")))
	}
	if f := m.cfg.ImageCredentialsFile; f != "" {
		k, err := credentials.ReadFile(f)
		if err != nil {
			m.log.Warn("node image credentials skipped", "file", f, "err", err)
		} else {
			rings = append(rings, k)
		}
	}
	return rings
}

// imageEvent records one of the kubelet's image events for container
// (events.go).
func (m *Manager) imageEvent(st *podState, container, typ, reason, message string) {
	m.event(st.pod, container, typ, reason, message)
}

// pullBackoff is the back-off of one container's image pulls, or one
// image volume's.
type pullBackoff struct {
	until time.Time
	delay time.Duration
	err   error // the failed pull's, for the ImagePullBackOff message
	// reported: this back-off's BackOff event is logged (or, for an
	// image missing under Never, its ErrImageNeverPull event).
	reported bool
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
