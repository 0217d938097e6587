package staticpods

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// DefaultCallTimeout bounds each runtime call when the caller's context
// does not end sooner: the benchmarks' wait loops run on contexts without
// a deadline, and a runtime that stopped answering must end them with an
// error rather than hang them.
const DefaultCallTimeout = 30 * time.Second

// Client applies pods as static pod manifests in one directory and reads
// them back from the container runtime. It is safe for concurrent use.
type Client struct {
	dir         string
	rt          runtimeapi.RuntimeServiceClient
	suffix      string // "-<nodeName>", the kubelet's static pod suffix
	callTimeout time.Duration
	now         func() time.Time

	// style is how the agent names its pods in the runtime (a style),
	// learned from the first name matched.
	style atomic.Int32

	mu sync.Mutex
	// known: the manifests applied through the Client or found in dir,
	// kept after their file is removed until their pod is gone, so that
	// the agent's name for a terminating pod still maps back.
	known map[key]entry
	seq   uint64 // the last entry's seq
	// statuses: ContainerStatus answers by container id, read once per
	// state a container reaches (running, exited); dropped once the
	// container is no longer listed.
	statuses map[string]cachedStatus
}

// entry is one known manifest.
type entry struct {
	m *manifest
	// seq orders entries by when their file was written or found: an
	// entry made after a listing of the directory began may have a file
	// that listing did not see.
	seq uint64
	// deleted is when the file was removed or seen gone; zero while it is
	// there.
	deleted time.Time
}

// cachedStatus is a container's status as last read, and its pod.
type cachedStatus struct {
	pod    key
	status *runtimeapi.ContainerStatus
}

// Option changes a Client's defaults.
type Option func(*Client)

// WithNodeName is the node name the kubelet appends to a static pod's
// name ("<name>-<nodeName>", lower-cased as the kubelet does). The default
// is the host name, the kubelet's own default; give the kubelet's
// hostnameOverride when it has one. "" matches exact names only.
func WithNodeName(name string) Option {
	return func(c *Client) {
		c.suffix = ""
		if name = strings.ToLower(strings.TrimSpace(name)); name != "" {
			c.suffix = "-" + name
		}
	}
}

// WithCallTimeout bounds each runtime call (default DefaultCallTimeout).
func WithCallTimeout(d time.Duration) Option {
	return func(c *Client) { c.callTimeout = d }
}

// WithClock replaces time.Now: the time a deletion is stamped with and
// the readiness of probed containers are judged by it.
func WithClock(now func() time.Time) Option {
	return func(c *Client) { c.now = now }
}

// New returns a Client that writes manifests into dir (which must exist:
// it is the agent's static pod path) and reads pods from rt.
func New(dir string, rt runtimeapi.RuntimeServiceClient, opts ...Option) (*Client, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("static pod directory: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("static pod directory %s: not a directory", dir)
	}
	if rt == nil {
		return nil, errors.New("static pods: no runtime client")
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("static pods: the node name (the host name) for the kubelet's pod names: %w", err)
	}
	c := &Client{dir: dir, rt: rt, callTimeout: DefaultCallTimeout, now: time.Now,
		known: map[key]entry{}, statuses: map[string]cachedStatus{}}
	WithNodeName(host)(c)
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Dir is the manifest directory.
func (c *Client) Dir() string { return c.dir }

func (c *Client) path(k key) string { return filepath.Join(c.dir, k.fileName()) }

// Apply writes the one Pod in manifest as its file, replacing the file of
// a pod of the same namespace and name, and returns the pod as parsed
// (defaults applied, no UID, no status). source names the manifest in
// errors; the agent's source is the file. A manifest that does not parse,
// holds other than one pod or names it invalidly is an error wrapping
// api.ErrInvalid.
func (c *Client) Apply(ctx context.Context, manifest []byte, source string) (*corev1.PodList, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := parseManifest(manifest, source)
	if err != nil {
		return nil, err
	}
	k := key{p.Namespace, p.Name}
	if err := checkKey(k); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if err := writeAtomic(c.path(k), manifest); err != nil {
		return nil, err
	}
	// Known after the file is written: an entry is never newer than its
	// file (see entry.seq).
	c.mu.Lock()
	c.seq++
	c.known[k] = entry{m: manifestOf(p), seq: c.seq}
	c.mu.Unlock()
	return &corev1.PodList{Items: []corev1.Pod{*p}}, nil
}

// Delete removes the pod's file. A pod with no file is not an error while
// it still runs (it is being removed), and an error wrapping
// api.ErrNotFound once it is gone, as the agent's API answers.
func (c *Client) Delete(ctx context.Context, namespace, name string) error {
	k := key{namespace, name}
	if checkKey(k) != nil {
		return notFound(k)
	}
	// Known before the file goes, so that the agent's name for the
	// terminating pod maps back to k.
	if err := c.adoptFile(k); err != nil {
		return err
	}
	existed, err := removeManifest(c.path(k))
	if err != nil {
		return err
	}
	if existed {
		c.mu.Lock()
		if e, ok := c.known[k]; ok && e.deleted.IsZero() {
			e.deleted = c.now()
			c.known[k] = e
		}
		c.mu.Unlock()
		return nil
	}
	_, err = c.Get(ctx, namespace, name)
	return err
}

// adoptFile makes k known from its file if it is not known yet; no file
// is not an error.
func (c *Client) adoptFile(k key) error {
	c.mu.Lock()
	_, ok := c.known[k]
	c.mu.Unlock()
	if ok {
		return nil
	}
	m, err := loadManifest(c.path(k))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.known[k]; !ok {
		c.seq++
		c.known[k] = entry{m: m, seq: c.seq}
	}
	return nil
}

func notFound(k key) error { return fmt.Errorf("pod %s: %w", k, api.ErrNotFound) }

// Get returns the pod as the runtime shows it, or an error wrapping
// api.ErrNotFound when it is gone (see the package documentation). It
// asks the runtime for that pod's sandboxes and containers only, once
// the agent's naming is known.
func (c *Client) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	k := key{namespace, name}
	if checkKey(k) != nil {
		return nil, notFound(k)
	}
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	file := true
	if _, err := os.Stat(c.path(k)); errors.Is(err, os.ErrNotExist) {
		file = false
	} else if err != nil {
		return nil, fmt.Errorf("stat manifest: %w", err)
	}
	if file {
		if err := c.adoptFile(k); err != nil {
			return nil, err
		}
	}
	labels := map[string]string{cri.PodNamespaceLabel: namespace}
	c.mu.Lock()
	_, known := c.known[k]
	c.mu.Unlock()
	switch s := style(c.style.Load()); {
	case !known:
		labels[cri.PodNameLabel] = name // names are mapped for known manifests only
	case s != styleUnknown:
		labels[cri.PodNameLabel] = runtimeName(k, s, c.suffix)
	}
	sbs, ctrs, err := c.listRuntime(ctx, labels)
	if err != nil {
		return nil, err
	}
	files := map[key]bool{}
	if file {
		files[k] = true
	}
	views := c.views(seq, files, groupRuntime(sbs, ctrs), &k)
	if len(views) == 0 {
		return nil, notFound(k)
	}
	pods, err := c.build(ctx, views, ctrs, &k)
	if err != nil {
		return nil, err
	}
	return pods[0], nil
}

// List returns every pod present (see the package documentation): those
// with a file, and those the runtime still runs, ordered by namespace and
// name. It makes one ListPodSandbox and one ListContainers call.
func (c *Client) List(ctx context.Context) (*corev1.PodList, error) {
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	files, err := c.readDir()
	if err != nil {
		return nil, err
	}
	sbs, ctrs, err := c.listRuntime(ctx, nil)
	if err != nil {
		return nil, err
	}
	views := c.views(seq, files, groupRuntime(sbs, ctrs), nil)
	pods, err := c.build(ctx, views, ctrs, nil)
	if err != nil {
		return nil, err
	}
	l := &corev1.PodList{Items: make([]corev1.Pod, len(pods))}
	for i, p := range pods {
		l.Items[i] = *p
	}
	return l, nil
}

// readDir lists the manifest files in dir, and makes those not known yet
// known.
func (c *Client) readDir() (map[key]bool, error) {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return nil, fmt.Errorf("read static pod directory: %w", err)
	}
	files := map[key]bool{}
	for _, de := range des {
		k, ok := keyOfFile(de.Name())
		if !ok || de.IsDir() {
			continue
		}
		files[k] = true
		if err := c.adoptFile(k); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// listRuntime lists the sandboxes and containers that carry labels (nil:
// all), one call each, each bounded by the call timeout.
func (c *Client) listRuntime(ctx context.Context, labels map[string]string) ([]*runtimeapi.PodSandbox, []*runtimeapi.Container, error) {
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	sreq := &runtimeapi.ListPodSandboxRequest{}
	creq := &runtimeapi.ListContainersRequest{}
	if labels != nil {
		sreq.Filter = &runtimeapi.PodSandboxFilter{LabelSelector: labels}
		creq.Filter = &runtimeapi.ContainerFilter{LabelSelector: labels}
	}
	sr, err := c.rt.ListPodSandbox(cctx, sreq)
	if err != nil {
		return nil, nil, fmt.Errorf("list pod sandboxes: %w", err)
	}
	cr, err := c.rt.ListContainers(cctx, creq)
	if err != nil {
		return nil, nil, fmt.Errorf("list containers: %w", err)
	}
	return sr.GetItems(), cr.GetContainers(), nil
}

// views maps the runtime's pods to known manifests and returns the views
// of the pods present (only's alone when only is set). files are the
// manifest files seen by a directory read (or stat) begun after seq was
// the last entry's: an entry made since may have a file it did not see,
// and counts as having one. A known manifest whose file is gone is
// stamped deleted, and forgotten once its pod is gone too.
func (c *Client) views(seq uint64, files map[key]bool, groups map[key]*runtimePod, only *key) []*podView {
	c.mu.Lock()
	defer c.mu.Unlock()
	known := func(k key) bool { _, ok := c.known[k]; return ok }
	byKey := map[key]*podView{}
	view := func(k key) *podView {
		v := byKey[k]
		if v == nil {
			v = &podView{key: k}
			byKey[k] = v
		}
		return v
	}
	for rk, rp := range groups {
		k, s := resolve(rk, c.suffix, known)
		if s != styleUnknown {
			c.style.Store(int32(s))
		}
		if only != nil && k != *only {
			continue
		}
		v := view(k)
		v.rt.sandboxes = append(v.rt.sandboxes, rp.sandboxes...)
		v.rt.containers = append(v.rt.containers, rp.containers...)
	}
	for k := range files {
		view(k).file = true
	}
	if only != nil {
		view(*only)
	} else {
		for k := range c.known {
			view(k)
		}
	}
	now := c.now()
	var out []*podView
	for k, v := range byKey {
		e, ok := c.known[k]
		if ok {
			v.m = e.m
			if e.seq > seq {
				v.file = true
			}
			if !v.file && e.deleted.IsZero() {
				e.deleted = now
				c.known[k] = e
			}
			v.deleted = e.deleted
		}
		if !v.present() {
			if ok {
				delete(c.known, k)
			}
			continue
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b *podView) int {
		return strings.Compare(a.key.namespace+"/"+a.key.name, b.key.namespace+"/"+b.key.name)
	})
	return out
}

// build makes the pods of views, reading the ContainerStatus of each
// running or exited container whose status in that state is not kept yet.
// listed are the containers the runtime listed: kept statuses of others
// (only's alone when only is set) are dropped.
func (c *Client) build(ctx context.Context, views []*podView, listed []*runtimeapi.Container, only *key) ([]*corev1.Pod, error) {
	have := map[string]*runtimeapi.ContainerStatus{}
	var need []*runtimeapi.Container
	var needPod []key
	c.mu.Lock()
	ids := make(map[string]bool, len(listed))
	for _, ct := range listed {
		ids[ct.GetId()] = true
	}
	for id, cs := range c.statuses {
		if !ids[id] && (only == nil || cs.pod == *only) {
			delete(c.statuses, id)
		}
	}
	for _, v := range views {
		for _, s := range v.slots(v.sandbox()) {
			if s.c == nil || !needsStatus(s.c) {
				continue
			}
			if cs, ok := c.statuses[s.c.GetId()]; ok && cs.status.GetState() == s.c.GetState() {
				have[s.c.GetId()] = cs.status
				continue
			}
			need = append(need, s.c)
			needPod = append(needPod, v.key)
		}
	}
	c.mu.Unlock()
	for i, ct := range need {
		st, err := c.containerStatus(ctx, ct.GetId())
		if err != nil {
			return nil, err
		}
		if st == nil {
			continue
		}
		have[ct.GetId()] = st
		c.mu.Lock()
		c.statuses[ct.GetId()] = cachedStatus{pod: needPod[i], status: st}
		c.mu.Unlock()
	}
	now := c.now()
	status := func(id string) *runtimeapi.ContainerStatus { return have[id] }
	pods := make([]*corev1.Pod, len(views))
	for i, v := range views {
		pods[i] = v.build(status, now)
	}
	return pods, nil
}

// containerStatus reads one container's status; nil when the container
// is gone (removed since it was listed).
func (c *Client) containerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	cctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	r, err := c.rt.ContainerStatus(cctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if status.Code(err) == codes.NotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("container status of %s: %w", id, err)
	}
	return r.GetStatus(), nil
}
