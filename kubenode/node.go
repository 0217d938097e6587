package kubenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/apimachinery/lease"
	nodeutil "k8s.io/component-helpers/node/util"
	kubeletapis "k8s.io/kubelet/pkg/apis"
	"k8s.io/utils/clock"
)

// The kubelet's defaults for what this package does.
const (
	// DefaultUpdateEvery is how often the status is computed
	// (nodeStatusUpdateFrequency); it is patched only when it changed...
	DefaultUpdateEvery = 10 * time.Second
	// DefaultReportEvery ...or when this long has passed since the last
	// patch (nodeStatusReportFrequency).
	DefaultReportEvery = 5 * time.Minute
	// DefaultLeaseDuration is the Lease's leaseDurationSeconds
	// (nodeLeaseDurationSeconds); it is renewed every quarter of it, as
	// the kubelet's NodeLeaseRenewIntervalFraction 0.25.
	DefaultLeaseDuration = 40 * time.Second
	// LeaseNamespace holds the nodes' Leases.
	LeaseNamespace = corev1.NamespaceNodeLease
	// DefaultPort is the node's HTTPS port (daemonEndpoints).
	DefaultPort = 10250
	// statusRetries is how many times one update tries to patch
	// (nodeStatusUpdateRetry).
	statusRetries = 5
)

// Health is what the node's conditions are made of.
type Health struct {
	// MemoryPressure, DiskPressure and PIDPressure are the eviction
	// manager's conditions, its transition period applied.
	MemoryPressure, DiskPressure, PIDPressure bool
	// NotReady holds why the node is not ready (the runtime is down, its
	// network is not ready); empty when it is.
	NotReady []string
}

// Config is the node as it registers and reports itself.
type Config struct {
	Client kubernetes.Interface
	// Name is the Node's name (--node-name; the lower-cased hostname).
	Name string
	// Labels are added to the labels the kubelet gives every node
	// (kubernetes.io/hostname, os, arch and their beta forms); they must
	// pass CheckLabels.
	Labels map[string]string
	// Taints are registered with the Node (--register-with-taints); a
	// Node that exists keeps its own.
	Taints []corev1.Taint
	// Addresses are status.addresses (InternalIP first, then Hostname).
	Addresses []corev1.NodeAddress
	// Capacity and Allocatable are status.capacity and .allocatable.
	Capacity, Allocatable corev1.ResourceList
	// Info is status.nodeInfo.
	Info corev1.NodeSystemInfo
	// Port is daemonEndpoints.kubeletEndpoint.port (0: DefaultPort).
	Port int32
	// Health is asked at every update.
	Health func(ctx context.Context) Health
	Log    *slog.Logger
	Clock  clock.WithTicker
	// UpdateEvery, ReportEvery and LeaseDuration: 0 for the defaults.
	UpdateEvery, ReportEvery, LeaseDuration time.Duration
}

// Agent keeps the node registered, its status reported and its Lease
// renewed.
type Agent struct {
	cfg  Config
	kick chan struct{}

	mu sync.Mutex
	// last is the status last patched, and when.
	last       *corev1.NodeStatus
	lastReport time.Time
	// registered: Register succeeded; node is the Node it left.
	registered bool
	node       *corev1.Node
}

// New checks cfg and returns its Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubenode: no client")
	}
	if cfg.Name == "" {
		return nil, errors.New("kubenode: no node name")
	}
	if err := CheckLabels(cfg.Labels); err != nil {
		return nil, err
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Health == nil {
		cfg.Health = func(context.Context) Health { return Health{} }
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.UpdateEvery <= 0 {
		cfg.UpdateEvery = DefaultUpdateEvery
	}
	if cfg.ReportEvery <= 0 {
		cfg.ReportEvery = DefaultReportEvery
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	return &Agent{cfg: cfg, kick: make(chan struct{}, 1)}, nil
}

// CheckLabels refuses the labels NodeRestriction would refuse a node
// (the kubelet's --node-labels check): a label in the kubernetes.io or
// k8s.io namespaces that is not one of the kubelet's own.
func CheckLabels(labels map[string]string) error {
	var bad []string
	for k := range labels {
		ns := k
		if i := strings.IndexByte(k, '/'); i >= 0 {
			ns = k[:i]
		} else {
			continue // no prefix: not in a reserved namespace
		}
		reserved := ns == "kubernetes.io" || strings.HasSuffix(ns, ".kubernetes.io") ||
			ns == "k8s.io" || strings.HasSuffix(ns, ".k8s.io")
		if reserved && !kubeletapis.IsKubeletLabel(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return fmt.Errorf("node labels %s: unknown 'kubernetes.io' or 'k8s.io' labels, which NodeRestriction would refuse the node (allowed: %s, and the namespaces %s)",
			strings.Join(bad, ", "), strings.Join(kubeletapis.KubeletLabels(), ", "), strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "))
	}
	return nil
}

// Labels returns the labels the node registers with: the kubelet's
// default ones for name, with cfg's over them.
func (a *Agent) Labels() map[string]string {
	l := map[string]string{
		corev1.LabelHostname:      a.cfg.Name,
		corev1.LabelOSStable:      runtime.GOOS,
		corev1.LabelArchStable:    runtime.GOARCH,
		"beta.kubernetes.io/os":   runtime.GOOS,
		"beta.kubernetes.io/arch": runtime.GOARCH,
	}
	maps.Copy(l, a.cfg.Labels)
	return l
}

// initialNode is the Node as the kubelet first creates it.
func (a *Agent) initialNode(now time.Time) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   a.cfg.Name,
			Labels: a.Labels(),
			// The kubelet's default: attach and detach are the
			// controller's.
			Annotations: map[string]string{"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
		},
		Spec: corev1.NodeSpec{Taints: slices.Clone(a.cfg.Taints)},
	}
	n.Status = a.status(now, a.cfg.Health(context.Background()), nil)
	return n
}

// Register creates the Node, or reconciles the one that exists (its
// default labels), retrying with the kubelet's back-off (100 ms doubling
// to 7 s) until it succeeds or ctx ends.
func (a *Agent) Register(ctx context.Context) error {
	b := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Cap: 7 * time.Second, Steps: 1 << 30}
	var last error
	for {
		n, err := a.tryRegister(ctx)
		if err == nil {
			a.mu.Lock()
			a.registered, a.node = true, n
			a.mu.Unlock()
			return nil
		}
		if last == nil || err.Error() != last.Error() {
			a.cfg.Log.Warn("register the node with the API server", "node", a.cfg.Name, "err", err)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("register node %s: %w (last error: %w)", a.cfg.Name, ctx.Err(), last)
		case <-a.cfg.Clock.After(b.Step()):
		}
	}
}

func (a *Agent) tryRegister(ctx context.Context) (*corev1.Node, error) {
	nodes := a.cfg.Client.CoreV1().Nodes()
	want := a.initialNode(a.cfg.Clock.Now())
	created, err := nodes.Create(ctx, want, metav1.CreateOptions{})
	if err == nil {
		a.cfg.Log.Info("node registered", "node", a.cfg.Name)
		a.noteReported(&created.Status)
		return created, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create node: %w", err)
	}
	existing, err := nodes.Get(ctx, a.cfg.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get the existing node: %w", err)
	}
	// As the kubelet's reconcile of an existing Node: the default labels
	// it owns are put right; everything else on the Node is the cluster's.
	updated := existing.DeepCopy()
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	for _, k := range []string{corev1.LabelHostname, corev1.LabelOSStable, corev1.LabelArchStable, "beta.kubernetes.io/os", "beta.kubernetes.io/arch"} {
		updated.Labels[k] = want.Labels[k]
	}
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	maps.Copy(updated.Annotations, want.Annotations)
	updated.Status = a.status(a.cfg.Clock.Now(), a.cfg.Health(ctx), &existing.Status)
	if apiequality.Semantic.DeepEqual(existing, updated) {
		a.cfg.Log.Info("node already registered", "node", a.cfg.Name)
		return existing, nil
	}
	got, _, err := nodeutil.PatchNodeStatus(a.cfg.Client.CoreV1(), types.NodeName(a.cfg.Name), existing, updated)
	if err != nil {
		return nil, fmt.Errorf("reconcile the existing node: %w", err)
	}
	a.cfg.Log.Info("node already registered; reconciled", "node", a.cfg.Name)
	a.noteReported(&got.Status)
	return got, nil
}

func (a *Agent) noteReported(st *corev1.NodeStatus) {
	a.mu.Lock()
	a.last, a.lastReport = st.DeepCopy(), a.cfg.Clock.Now()
	a.mu.Unlock()
}

// Kick asks for a status update now (a condition changed).
func (a *Agent) Kick() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Run renews the Lease and updates the status until ctx ends. Register
// must have succeeded.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	ok := a.registered
	a.mu.Unlock()
	if !ok {
		return errors.New("kubenode: Run before Register")
	}
	secs := int32(a.cfg.LeaseDuration / time.Second)
	lc := lease.NewController(a.cfg.Clock, a.cfg.Client, a.cfg.Name, secs, func() {
		a.cfg.Log.Warn("node lease: renewals keep failing", "node", a.cfg.Name)
	}, a.cfg.LeaseDuration/4, a.cfg.Name, LeaseNamespace, a.setLeaseOwner)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lc.Run(ctx)
	}()
	t := a.cfg.Clock.NewTicker(a.cfg.UpdateEvery)
	defer t.Stop()
	for {
		if err := a.update(ctx); err != nil && ctx.Err() == nil {
			a.cfg.Log.Warn("node status", "node", a.cfg.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			<-done
			return nil
		case <-t.C():
		case <-a.kick:
		}
	}
}

// setLeaseOwner makes the Node the Lease's owner, as the kubelet's, so
// that the Lease goes with the Node.
func (a *Agent) setLeaseOwner(l *coordinationv1.Lease) error {
	if len(l.OwnerReferences) > 0 {
		return nil
	}
	a.mu.Lock()
	n := a.node
	a.mu.Unlock()
	if n == nil || n.UID == "" {
		return errors.New("the node's UID is not known yet")
	}
	l.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
	return nil
}

// update computes the status and patches it when it changed or when
// ReportEvery has passed since the last patch, as the kubelet's
// updateNodeStatus (five tries; the first reads the API server's cache).
func (a *Agent) update(ctx context.Context) error {
	h := a.cfg.Health(ctx)
	var err error
	for i := range statusRetries {
		if err = a.tryUpdate(ctx, h, i); err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
	}
	return fmt.Errorf("update node status (%d tries): %w", statusRetries, err)
}

func (a *Agent) tryUpdate(ctx context.Context, h Health, try int) error {
	opts := metav1.GetOptions{}
	if try == 0 {
		opts.ResourceVersion = "0"
	}
	old, err := a.cfg.Client.CoreV1().Nodes().Get(ctx, a.cfg.Name, opts)
	if err != nil {
		return fmt.Errorf("get node %s: %w", a.cfg.Name, err)
	}
	now := a.cfg.Clock.Now()
	st := a.status(now, h, &old.Status)
	a.mu.Lock()
	due := now.Sub(a.lastReport) >= a.cfg.ReportEvery
	a.mu.Unlock()
	if !due && !statusChanged(&old.Status, &st) {
		a.mu.Lock()
		a.node = old
		a.mu.Unlock()
		return nil
	}
	updated := old.DeepCopy()
	updated.Status = st
	got, _, err := nodeutil.PatchNodeStatus(a.cfg.Client.CoreV1(), types.NodeName(a.cfg.Name), old, updated)
	if err != nil {
		return err
	}
	a.noteReported(&got.Status)
	a.mu.Lock()
	a.node = got
	a.mu.Unlock()
	return nil
}

// Node returns the Node as last read or written (nil before Register).
func (a *Agent) Node() *corev1.Node {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.node == nil {
		return nil
	}
	return a.node.DeepCopy()
}

// statusChanged compares two statuses as the kubelet's
// nodeStatusHasChanged: the conditions' heartbeat times do not count.
func statusChanged(old, cur *corev1.NodeStatus) bool {
	strip := func(s *corev1.NodeStatus) *corev1.NodeStatus {
		s = s.DeepCopy()
		for i := range s.Conditions {
			s.Conditions[i].LastHeartbeatTime = metav1.Time{}
		}
		return s
	}
	return !apiequality.Semantic.DeepEqual(strip(old), strip(cur))
}

// The kubelet's condition reasons and messages (pkg/kubelet/nodestatus).
var conditionWords = map[corev1.NodeConditionType]struct {
	trueReason, trueMsg, falseReason, falseMsg string
}{
	corev1.NodeMemoryPressure: {"KubeletHasInsufficientMemory", "kubelet has insufficient memory available", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
	corev1.NodeDiskPressure:   {"KubeletHasDiskPressure", "kubelet has disk pressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
	corev1.NodePIDPressure:    {"KubeletHasInsufficientPID", "kubelet has insufficient PID available", "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
}

// status is the node's status at now from h, carrying old's conditions'
// transition times (and every condition others own, such as
// NetworkUnavailable) over.
func (a *Agent) status(now time.Time, h Health, old *corev1.NodeStatus) corev1.NodeStatus {
	st := corev1.NodeStatus{}
	if old != nil {
		st = *old.DeepCopy()
	}
	st.Capacity = a.cfg.Capacity.DeepCopy()
	st.Allocatable = a.cfg.Allocatable.DeepCopy()
	st.Addresses = slices.Clone(a.cfg.Addresses)
	st.NodeInfo = a.cfg.Info
	st.DaemonEndpoints = corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: a.cfg.Port}}
	mt := metav1.NewTime(now)
	set := func(typ corev1.NodeConditionType, on bool, reason, msg string) {
		status := corev1.ConditionFalse
		if on {
			status = corev1.ConditionTrue
		}
		for i := range st.Conditions {
			c := &st.Conditions[i]
			if c.Type != typ {
				continue
			}
			if c.Status != status {
				c.LastTransitionTime = mt
			}
			c.Status, c.Reason, c.Message, c.LastHeartbeatTime = status, reason, msg, mt
			return
		}
		st.Conditions = append(st.Conditions, corev1.NodeCondition{Type: typ, Status: status, Reason: reason, Message: msg,
			LastHeartbeatTime: mt, LastTransitionTime: mt})
	}
	for _, c := range []struct {
		typ corev1.NodeConditionType
		on  bool
	}{{corev1.NodeMemoryPressure, h.MemoryPressure}, {corev1.NodeDiskPressure, h.DiskPressure}, {corev1.NodePIDPressure, h.PIDPressure}} {
		w := conditionWords[c.typ]
		if c.on {
			set(c.typ, true, w.trueReason, w.trueMsg)
		} else {
			set(c.typ, false, w.falseReason, w.falseMsg)
		}
	}
	if len(h.NotReady) == 0 {
		set(corev1.NodeReady, true, "KubeletReady", "kubelet is posting ready status")
	} else {
		set(corev1.NodeReady, false, "KubeletNotReady", strings.Join(h.NotReady, ", "))
	}
	return st
}
