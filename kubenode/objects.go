package kubenode

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The kinds Objects serves (mounts.SourceConfigMaps, mounts.SourceSecrets).
const (
	kindConfigMaps = "configmaps"
	kindSecrets    = "secrets"
)

const (
	// objectIdle: a watch no pod asked for this long is stopped (pods'
	// volumes are set up again every steady sync, every few seconds).
	objectIdle = 3 * time.Minute
	// objectSync bounds the wait for a new watch's first list.
	objectSync = 10 * time.Second
	// tokenMaxAge: a token is renewed at 80% of its life or after a day,
	// as the kubelet's token manager.
	tokenMaxAge = 24 * time.Hour
)

// Objects serves the ConfigMaps and Secrets the node's pods reference,
// and their service account tokens, from the API server, as the kubelet's
// watch-based manager and token manager: each object referenced is
// watched on its own (a list and watch on its name, which the Node
// authorizer allows for objects a pod bound to the node references), so a
// change reaches its volumes at their next sync; tokens come from
// TokenRequest, bound to the pod, and are cached until 80% of their life.
type Objects struct {
	client kubernetes.Interface
	log    *slog.Logger
	now    func() time.Time

	mu      sync.Mutex
	watches map[objectKey]*objectWatch
	tokens  map[tokenKey]*tokenEntry
}

type objectKey struct{ kind, namespace, name string }

type objectWatch struct {
	store    cache.Store
	synced   func() bool
	cancel   context.CancelFunc
	lastUsed time.Time
}

type tokenKey struct {
	namespace, serviceAccount string
	pod                       types.UID
	audience                  string
	expiration                int64
}

type tokenEntry struct {
	token           []byte
	issued, expires time.Time
}

// NewObjects returns the API server's objects for the node's pods; Run
// stops the watches no pod uses any more.
func NewObjects(client kubernetes.Interface, log *slog.Logger) *Objects {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Objects{client: client, log: log, now: time.Now, watches: map[objectKey]*objectWatch{}, tokens: map[tokenKey]*tokenEntry{}}
}

// Run stops idle watches and drops expired tokens until ctx ends, then
// stops every watch.
func (o *Objects) Run(ctx context.Context) error {
	t := time.NewTicker(objectIdle / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			o.mu.Lock()
			for k, w := range o.watches {
				w.cancel()
				delete(o.watches, k)
			}
			o.mu.Unlock()
			return nil
		case <-t.C:
		}
		now := o.now()
		o.mu.Lock()
		for k, w := range o.watches {
			if now.Sub(w.lastUsed) > objectIdle {
				w.cancel()
				delete(o.watches, k)
			}
		}
		for k, e := range o.tokens {
			if now.After(e.expires) {
				delete(o.tokens, k)
			}
		}
		o.mu.Unlock()
	}
}

// Object is mounts.Objects' Object: the data of a ConfigMap (its data and
// binaryData) or a Secret.
func (o *Objects) Object(kind, namespace, name string) (map[string][]byte, bool, error) {
	w, err := o.watch(kind, namespace, name)
	if err != nil {
		return nil, false, err
	}
	deadline := time.Now().Add(objectSync)
	for !w.synced() {
		if time.Now().After(deadline) {
			return nil, false, fmt.Errorf("%s %s/%s: not read from the API server within %v", kind, namespace, name, objectSync)
		}
		time.Sleep(20 * time.Millisecond)
	}
	item, ok, err := w.store.GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil, false, err
	}
	switch v := item.(type) {
	case *corev1.ConfigMap:
		data := make(map[string][]byte, len(v.Data)+len(v.BinaryData))
		for k, s := range v.Data {
			data[k] = []byte(s)
		}
		for k, b := range v.BinaryData {
			data[k] = b
		}
		return data, true, nil
	case *corev1.Secret:
		return v.Data, true, nil
	}
	return nil, false, fmt.Errorf("%s %s/%s: unexpected %T in the watch", kind, namespace, name, item)
}

// watch returns the watch of one object, starting it on first use.
func (o *Objects) watch(kind, namespace, name string) (*objectWatch, error) {
	k := objectKey{kind, namespace, name}
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.watches[k]; ok {
		w.lastUsed = o.now()
		return w, nil
	}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	var (
		list    func(context.Context, metav1.ListOptions) (runtime.Object, error)
		watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)
		obj     runtime.Object
	)
	switch kind {
	case kindConfigMaps:
		c := o.client.CoreV1().ConfigMaps(namespace)
		obj = &corev1.ConfigMap{}
		list = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, opts) }
		watchFn = c.Watch
	case kindSecrets:
		c := o.client.CoreV1().Secrets(namespace)
		obj = &corev1.Secret{}
		list = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, opts) }
		watchFn = c.Watch
	default:
		return nil, fmt.Errorf("objects: unknown kind %q", kind)
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = sel
			return list(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = sel
			return watchFn(ctx, opts)
		},
	}
	store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: obj, Handler: cache.ResourceEventHandlerFuncs{}})
	ctx, cancel := context.WithCancel(context.Background())
	go ctrl.RunWithContext(ctx)
	w := &objectWatch{store: store, synced: ctrl.HasSynced, cancel: cancel, lastUsed: o.now()}
	o.watches[k] = w
	return w, nil
}

// Token is mounts.Objects' Token: a TokenRequest for the pod's service
// account, bound to the pod, reused until 80% of its life has passed.
func (o *Objects) Token(pod *corev1.Pod, audience string, expirationSeconds int64) ([]byte, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	k := tokenKey{namespace: pod.Namespace, serviceAccount: sa, pod: pod.UID, audience: audience, expiration: expirationSeconds}
	now := o.now()
	o.mu.Lock()
	e := o.tokens[k]
	o.mu.Unlock()
	if e != nil && now.Before(e.issued.Add(min(e.expires.Sub(e.issued)*8/10, tokenMaxAge))) {
		return e.token, nil
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &expirationSeconds,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}
	if audience != "" {
		req.Spec.Audiences = []string{audience}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := o.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
	if err != nil {
		if e != nil && now.Before(e.expires) {
			// The old token is still valid: keep it, try again at the
			// next sync.
			o.log.Warn("renew a service account token", "pod", pod.Namespace+"/"+pod.Name, "err", err)
			return e.token, nil
		}
		return nil, fmt.Errorf("token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	exp := got.Status.ExpirationTimestamp.Time
	if exp.IsZero() {
		exp = now.Add(time.Duration(expirationSeconds) * time.Second)
	}
	e = &tokenEntry{token: []byte(got.Status.Token), issued: now, expires: exp}
	o.mu.Lock()
	o.tokens[k] = e
	o.mu.Unlock()
	return e.token, nil
}
