package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/lifecycle/prober"
	"github.com/nodeguard/nodeguard/mounts"
)

// Errors callers tell apart.
var (
	ErrNotFound = errors.New("pod not found")
	// ErrContainerNotFound is wrapped for a container the pod does not
	// have; it is ErrNotFound too.
	ErrContainerNotFound error = containerNotFound{}
	ErrInvalid                 = errors.New("invalid pod")
	// ErrRejected: admission refused the pod (node pressure).
	ErrRejected = errors.New("pod rejected")
)

// Labels and annotations nodeguard adds to what it creates.
const (
	// AnnotationCgroupParent records the pod cgroup on its sandbox, so that
	// a sandbox found after a restart can be removed with its cgroups.
	AnnotationCgroupParent = "nodeguard.io/cgroup-parent"
	// AnnotationSource says where the pod came from (file or api).
	AnnotationSource = "nodeguard.io/source"
)

// Defaults, each with its reason.
const (
	// DefaultBackoffInitial and DefaultBackoffMax are the kubelet's
	// container restart back-off (pkg/kubelet/kubelet.go: 10 s doubling,
	// capped at 5 min).
	DefaultBackoffInitial = 10 * time.Second
	DefaultBackoffMax     = 5 * time.Minute
	// DefaultResync: how often every pod is compared with the runtime
	// when nothing asked for it sooner.
	DefaultResync = time.Second
	// DefaultSteadyResync: how often a pod whose containers all run is
	// synced (and up to half as long again, jittered), the kubelet's
	// syncFrequency; the relist catches its containers' and sandbox's
	// changes in between.
	DefaultSteadyResync = time.Minute
	// callTimeout bounds one CRI call: the kubelet's runtimeRequestTimeout
	// default (2 min). Not shorter: under a heavy load a RunPodSandbox
	// can outrun a tight bound, and every attempt undone at the bound
	// leaves the next one "name is reserved" until the runtime has
	// finished undoing it, for good.
	callTimeout = 2 * time.Minute
	// sandboxTimeout bounds RunPodSandbox: twice callTimeout, as the
	// kubelet's remote runtime service (it pulls the pause image, makes
	// the netns and runs the CNI plugins).
	sandboxTimeout = 2 * callTimeout
	// orphanGrace stops a container of a pod nobody wants any more.
	orphanGrace = 2 * time.Second
	// DefaultStateSubdir is where New opens the state store beneath the
	// root dir when Config.State is nil: where the agent opens it.
	DefaultStateSubdir = "state"
)

// Config wires a Manager.
type Config struct {
	Runtime Runtime
	// OnRemoved, when set, is told of every pod removed (deleted,
	// forgotten, replaced) once its containers are stopped and its
	// sandbox and volumes are gone, with its final status: the phase
	// terminal (Succeeded when every container exited 0, else Failed, as
	// the kubelet ends a deleted pod) and each container's terminated
	// state as the runtime last reported it. Node mode writes it to the
	// API server before deleting the pod there.
	OnRemoved func(*corev1.Pod)
	Cgroups   *kubepods.Cgroups
	// RootDir holds per-pod state: logs under RootDir/logs.
	RootDir string
	// MemoryCapacity of the node in bytes, for Burstable oom_score_adj.
	MemoryCapacity int64
	// DNS is the node's resolver config handed to sandboxes.
	DNS *runtimeapi.DNSConfig
	// PodOptions validate manifests (priority classes, privileged).
	PodOptions podspec.Options
	// ClusterDomain, when set, gives a pod with a subdomain its FQDN in
	// its /etc/hosts (the kubelet's clusterDomain); none standalone.
	ClusterDomain string
	// NodeHostsFile is the node's hosts file, the base of host-network
	// pods' (NodeHostsFile when empty).
	NodeHostsFile string
	// NodeLabels are the node's labels, which a pod's nodeSelector must
	// match to be admitted; StandaloneNodeLabels of this machine when nil.
	NodeLabels map[string]string
	// CgroupV2 tells container configs to ask for memory.oom.group.
	CgroupV2                   bool
	BackoffInitial, BackoffMax time.Duration
	// Resync: see DefaultResync; the relist runs every Resync too.
	Resync time.Duration
	// SteadyResync: see DefaultSteadyResync.
	SteadyResync time.Duration
	// Workers bounds how many pods are synced at once (default 8: CRI
	// calls of different pods overlap, as the kubelet's per-pod workers).
	Workers int
	// Stops bounds the containers waiting out their grace period at once
	// (DefaultStops when zero); they hold no Workers slot.
	Stops  int
	Logger *slog.Logger
	Now    func() time.Time
	// HasCapSysResource and MinOOMScoreAdj: without CAP_SYS_RESOURCE
	// oom_score_adj cannot go below the runtime's own minimum.
	HasCapSysResource bool
	MinOOMScoreAdj    int
	// Volumes mounts pod volumes; nil refuses every pod with volumes. Its
	// SourceDir also gives the ConfigMaps and Secrets of containers' env,
	// and the pods' imagePullSecrets.
	Volumes *mounts.Volumes
	// ImageCredentialsFile is the node's own registry credentials (a
	// docker config.json or .dockercfg), tried after a pod's
	// imagePullSecrets; read at each pull, so a changed file needs no
	// restart. None when empty.
	ImageCredentialsFile string
	// Node is the downward API's node (spec.nodeName, status.hostIP(s),
	// allocatable standing in for unset limits in resourceFieldRefs).
	Node cri.NodeInfo
	// Network verifies each sandbox's plumbing and collects what dead
	// sandboxes left; nil trusts the runtime's word.
	Network *Network
	// ProbeNetNS, with a nil Network, is the path of the network
	// namespace that TCP, HTTP and gRPC probes dial pod IPs from
	// (probes.go); "" with a nil Network: those probes are not made.
	ProbeNetNS string
	// GCInterval: how often volumes and the network are collected
	// (DefaultGCInterval when zero).
	GCInterval time.Duration
	// Admit, when set, may refuse a new pod (the eviction manager refuses
	// BestEffort pods while the node is under memory pressure). A pod
	// already desired is never refused again.
	Admit func(pod *corev1.Pod) error
	// LocalStorage enforces ephemeral-storage limits and emptyDir
	// sizeLimits (localstorage.go); the zero value does.
	LocalStorage LocalStorageConfig
	// ContainerLogs bounds each container's log files (the kubelet's
	// containerLogMaxSize and containerLogMaxFiles; their defaults where
	// zero), checked every ContainerLogMonitorInterval
	// (logs.DefaultInterval when zero).
	ContainerLogs               logs.Policy
	ContainerLogMonitorInterval time.Duration
	// Events, when set, gets the kubelet's pod events (events.go): a
	// failed probe's Warning Unhealthy, the Killing of a container that
	// failed its liveness or startup probe, failed lifecycle hooks, a
	// pod rejected at its re-admission after a restart. They are logged
	// all the same.
	Events EventRecorder
	// State is the agent's state store: the local API's pods
	// (KindAPIPod) and eviction records (KindEviction) live there. When
	// nil, New opens the store at RootDir/state (the agent's own place
	// for it).
	State *statestore.Store
}

// Manager runs pods. Its methods are safe for concurrent use.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	kick chan struct{}
	// pullProgress is how often a pull in flight is logged
	// (pullProgressInterval when zero; tests shorten it).
	pullProgress time.Duration

	// sourcesReady: every pod source has been read once. Until then a
	// sandbox without a desired pod may just not be loaded yet, so it is
	// not removed (a restarted nodeguard must adopt, not kill).
	sourcesReady atomic.Bool

	mu   sync.Mutex
	pods map[types.UID]*podState
	// orphans: the pod UIDs whose orphaned sandboxes a worker is tearing
	// down (orphans.go).
	orphans map[types.UID]bool
	// slots bounds the CRI calls in flight (slots.go).
	slots *slots
	// clampedOnce: the oom_score_adj clamp is logged once.
	clampedOnce sync.Once

	// createMu: sandboxes are created under its read lock and the
	// network collected under its write lock.
	createMu sync.RWMutex
	// gcRunning: one collection at a time; lastGC: when it last started.
	gcRunning atomic.Bool
	lastGC    time.Time
	// beat: the Run loop's last pass, unix nanoseconds (heartbeat.go).
	beat atomic.Int64
	// relisted: the containers' and sandboxes' states at the last
	// relist (Run's goroutine only).
	relisted map[relistKey]relistEntry
	// orphanScan asks the next Run pass to list the sandboxes for orphans
	// (orphans.go); orphanPasses counts the passes since the last listing
	// (Run's goroutine only).
	orphanScan   atomic.Bool
	orphanPasses int
	// ephemeral: each pod's ephemeral storage at the last Storage sample.
	ephemeral atomic.Pointer[map[types.UID]storageUse]
	// qosErr: the last error setting the QoS cgroups, logged once (Run's
	// goroutine only).
	qosErr string
	// ls: the local-storage passes (localstorage.go).
	ls *localStorage
	// rotator rotates the containers' logs (containerlogs.go).
	rotator *logs.Rotator
	// probes runs the containers' probes (probes.go); closeProbes lets
	// go of what their dials hold (the node's network namespace).
	probes      *prober.Manager
	closeProbes func() error
	// hookHTTP sends httpGet lifecycle hooks, dialled as the httpGet
	// probes are (hooks.go).
	hookHTTP prober.Handlers
	// events filters the pod events of Config.Events (events.go).
	events eventFilter
	// dial reaches the node's network namespace: the probes' dial, and
	// the one to the runtime's streaming server (exec.go).
	dial prober.DialFunc

	// state is Config.State, or the store New opened.
	state *statestore.Store
	// persistMu serialises the writes of KindAPIPod and KindStaticPods
	// records; apiRecords is, per record key, the UID of the pod its
	// record holds (persist.go); staticRecords, per manifest source, the
	// checksum of the pods its record holds (staticpods.go).
	persistMu     sync.Mutex
	apiRecords    map[string]types.UID
	staticRecords map[string]uint32
	// loadedSources: the static sources applied once this run (mu).
	loadedSources map[string]bool
	// legacyEvictions: eviction records of an older agent that could
	// not be moved into the store (migrate.go; guarded by mu).
	legacyEvictions map[types.UID]*evictionRecord
	// unavailable: the sources that could not be loaded, and the API
	// pods (by record key) and pod UIDs whose records could not be read,
	// each with why: their sandboxes are not orphans (sources.go;
	// guarded by mu).
	unavailable unavailable
}

type podState struct {
	pod      *corev1.Pod
	source   string
	deleting bool
	// graceOverride, when set, is the grace period the deletion gives
	// (an API deletion's deletionGracePeriodSeconds) instead of the
	// spec's.
	graceOverride *time.Duration
	// final is the status made once the containers were stopped for the
	// removal (OnRemoved).
	final      *corev1.PodStatus
	sandboxID  string
	sandboxCfg *runtimeapi.PodSandboxConfig
	parent     string
	ip         string
	created    time.Time
	backoff    map[string]*backoff
	pulls      map[string]*pullBackoff // image pull back-off (images.go)
	// imageVolumes: per image volume, the ID of the image it was last
	// resolved to (imagevolumes.go; guarded by Manager.mu).
	imageVolumes map[string]string
	// ctrErrs: each container's error at the last sync, "reason: message"
	// (the pod's worker only), so that a container that keeps failing
	// to start is logged once.
	ctrErrs map[string]string
	// hookFailed: per container, the attempt killed for its failed
	// postStart hook (hooks.go; the pod's worker only).
	hookFailed map[string]hookFailure
	// lastTerm: per container, its previous attempt's terminated state,
	// read once (an exited container's status never changes) for its
	// lastState (status.go; the pod's worker only).
	lastTerm map[string]lastTermination
	status   corev1.PodStatus
	lastErr  string
	kick     chan struct{} // wakes the pod's worker
	volumes  *mounts.PodVolumes
	evicted  *evictionRecord // set once the eviction manager ended it
	working  bool            // a worker runs for this pod (guarded by Manager.mu)
}

func (st *podState) poke() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// New returns a Manager; Run starts it.
func New(cfg Config) (*Manager, error) {
	if cfg.Runtime == nil || cfg.Cgroups == nil || cfg.RootDir == "" {
		return nil, errors.New("new pod manager: runtime, cgroups and root dir are required")
	}
	if cfg.MemoryCapacity <= 0 {
		return nil, fmt.Errorf("new pod manager: memory capacity %d: want the node's memory in bytes", cfg.MemoryCapacity)
	}
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = DefaultBackoffInitial
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.SteadyResync <= 0 {
		cfg.SteadyResync = DefaultSteadyResync
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Stops <= 0 {
		cfg.Stops = DefaultStops
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NodeHostsFile == "" {
		cfg.NodeHostsFile = NodeHostsFile
	}
	if cfg.NodeLabels == nil {
		labels, err := defaultNodeLabels()
		if err != nil {
			return nil, fmt.Errorf("new pod manager: %w", err)
		}
		cfg.NodeLabels = labels
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rotator, err := newRotator(cfg, log)
	if err != nil {
		return nil, fmt.Errorf("new pod manager: %w", err)
	}
	state := cfg.State
	if state == nil {
		if state, err = statestore.Open(filepath.Join(cfg.RootDir, DefaultStateSubdir), statestore.Options{Log: log, Now: cfg.Now}); err != nil {
			return nil, fmt.Errorf("new pod manager: %w", err)
		}
	}
	m := &Manager{cfg: cfg, log: log, now: cfg.Now, kick: make(chan struct{}, 1), pods: map[types.UID]*podState{},
		orphans: map[types.UID]bool{}, slots: newSlots(cfg.Workers, cfg.Stops), ls: newLocalStorage(cfg.LocalStorage), rotator: rotator,
		state: state, apiRecords: map[string]types.UID{}, staticRecords: map[string]uint32{}, loadedSources: map[string]bool{}, legacyEvictions: map[types.UID]*evictionRecord{}, unavailable: newUnavailable()}
	dial, closeDial, err := probeDialer(cfg.Network, cfg.ProbeNetNS)
	if err != nil {
		return nil, fmt.Errorf("new pod manager: %w", err)
	}
	m.probes = prober.NewManager(prober.Config{
		Prober: prober.Handlers{Exec: cfg.Runtime, Dial: dial}, OnUpdate: m.onProbe, OnEvent: m.onProbeEvent,
		Logger: log, Now: cfg.Now,
	})
	m.closeProbes, m.dial = closeDial, dial
	m.hookHTTP = prober.Handlers{Dial: dial}
	// Nothing found here stops the agent: an older agent's files are
	// moved into the store, and each persisted pod is admitted again on
	// its own (a rejected one is kept, Failed; an unreadable record's
	// sandboxes are kept as they are).
	m.migrateLegacy()
	m.loadPersisted()
	// The first eviction's record is staged through a file made now,
	// not on the kill's path.
	m.state.Prepare(KindEviction)
	return m, nil
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, callTimeout)
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// podGrace is the grace period st's removal gives its containers.
func podGrace(st *podState) time.Duration {
	if st.graceOverride != nil {
		return *st.graceOverride
	}
	return grace(st.pod)
}

func grace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}
