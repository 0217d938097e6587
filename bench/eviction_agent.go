package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// The race runs every strategy on the agent as it ships: `nodeguard run`,
// a child process with the configuration a user gets, running the trial's
// pods itself. The nodeguard strategy is that agent's own eviction
// manager (its tripwire, sensor, eBPF pipeline, policy and pod manager),
// followed through its event log; the baselines run on the same binary
// with its eviction manager off and evict through the agent's API.

// AgentEvents is the agent's event log (lifecycle/api Client.Events): the
// events after since, waiting up to wait for the first.
type AgentEvents interface {
	Events(ctx context.Context, since uint64, wait time.Duration) ([]api.Event, error)
}

// EvictionAgent is the node agent the race's pods run on.
type EvictionAgent interface {
	AgentEvents
	// Restart stops the running agent, if any (its pods keep running),
	// and starts it again with its eviction manager on (evicting) or off
	// (eviction.disabled), returning once its API answers. The pods are
	// adopted, not recreated.
	Restart(ctx context.Context, evicting bool) error
}

// EventKindEviction is the agent's event of an eviction decision (its
// kill sent, or its failure).
const EventKindEviction = "eviction"

// AgentEviction is one eviction the agent decided and carried out, as its
// event log reports it.
type AgentEviction struct {
	Victim    string    // "namespace/name"
	UID       types.UID //
	Signal    string    // e.g. allocatableMemory.available
	Threshold string    // as configured, e.g. allocatableMemory.available<107374182
	Observed  float64   // the signal's value on the snapshot
	// ObservedAt is the time of the fresh snapshot the decision was
	// confirmed on: the observation that crossed. Crossed is the earliest
	// wake-up evidence the evaluation served (the tripwire's fire), and
	// KillSent when the eviction's kill had been sent.
	ObservedAt, Crossed, KillSent time.Time
	// Detect, Decide and Kill are the agent's stage latencies.
	Detect, Decide, Kill time.Duration
	DryRun               bool
	// Err is why the eviction failed (the agent decides again).
	Err string
	// Actor is who evicted ("" is nodeguard): the race through the API
	// server also follows the kubelet and nodeguard guard.
	Actor string
}

// Reason is the eviction's reason as the trial records it.
func (e AgentEviction) Reason() string {
	actor := e.Actor
	if actor == "" {
		actor = StrategyNodeguard
	}
	if e.Observed == 0 {
		return fmt.Sprintf("%s: %s", actor, e.Threshold)
	}
	return fmt.Sprintf("%s: %s (observed %.0f)", actor, e.Threshold, e.Observed)
}

// agentDecision is the JSON of an "eviction" event, the fields the race
// reads (agent's decisionEvent writes them).
type agentDecision struct {
	Signal     string    `json:"signal"`
	Threshold  string    `json:"threshold"`
	Observed   float64   `json:"observed"`
	Victim     string    `json:"victim"`
	UID        string    `json:"uid"`
	DryRun     bool      `json:"dry_run"`
	Crossed    time.Time `json:"crossed"`
	ObservedAt time.Time `json:"observed_at"`
	KillSent   time.Time `json:"kill_sent"`
	DetectUS   int64     `json:"detect_us"`
	DecideUS   int64     `json:"decide_us"`
	KillUS     int64     `json:"kill_us"`
	Error      string    `json:"error"`
}

// ErrMalformedEvent: an agent event that does not carry what its kind
// promises.
var ErrMalformedEvent = errors.New("malformed agent event")

// ParseAgentEviction decodes an "eviction" event. A successful eviction
// without its observation time, its kill time or its victim is malformed:
// the race could not time it.
func ParseAgentEviction(e api.Event) (AgentEviction, error) {
	if e.Kind != EventKindEviction {
		return AgentEviction{}, fmt.Errorf("event %d: kind %q, want %q: %w", e.Seq, e.Kind, EventKindEviction, ErrMalformedEvent)
	}
	var d agentDecision
	if err := json.Unmarshal(e.Object, &d); err != nil {
		return AgentEviction{}, fmt.Errorf("event %d: %w: %v", e.Seq, ErrMalformedEvent, err)
	}
	ev := AgentEviction{
		Victim: d.Victim, UID: types.UID(d.UID), Signal: d.Signal, Threshold: d.Threshold, Observed: d.Observed,
		ObservedAt: d.ObservedAt, Crossed: d.Crossed, KillSent: d.KillSent,
		Detect: time.Duration(d.DetectUS) * time.Microsecond, Decide: time.Duration(d.DecideUS) * time.Microsecond,
		Kill: time.Duration(d.KillUS) * time.Microsecond, DryRun: d.DryRun, Err: d.Error,
	}
	if ev.Err != "" || ev.DryRun {
		return ev, nil
	}
	var missing []string
	for name, ok := range map[string]bool{"victim": ev.Victim != "", "observed_at": !ev.ObservedAt.IsZero(), "kill_sent": !ev.KillSent.IsZero()} {
		if !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return ev, fmt.Errorf("event %d: eviction without %s: %w", e.Seq, strings.Join(missing, ", "), ErrMalformedEvent)
	}
	return ev, nil
}

// agentEventWait is one long poll of the agent's event log; the server
// answers at once when an event arrives.
const agentEventWait = 5 * time.Second

// AgentStrategy is nodeguard as it ships: the agent's own eviction manager,
// which detects, decides and kills on its own. The strategy only follows
// the agent's event log and reports each eviction: detection at the
// observation its decision was confirmed on, the kill when the agent had
// sent it.
type AgentStrategy struct{}

// NewAgentStrategy returns the nodeguard strategy.
func NewAgentStrategy() *AgentStrategy { return &AgentStrategy{} }

// Name implements EvictionStrategy.
func (*AgentStrategy) Name() string { return StrategyNodeguard }

// EvictsThroughAgent implements agentEvictor.
func (*AgentStrategy) EvictsThroughAgent() bool { return true }

// Run implements EvictionStrategy.
func (*AgentStrategy) Run(ctx context.Context, env *TrialEnv) error {
	if env.Agent == nil || env.AgentEvicted == nil {
		return errors.New("nodeguard strategy: the pods do not run on an agent (EvictionRuntime.Agent)")
	}
	// What the agent decided before this trial is not this trial's.
	old, err := env.Agent.Events(ctx, 0, 0)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("nodeguard strategy: read the agent's events: %w", err)
	}
	var since uint64
	if n := len(old); n > 0 {
		since = old[n-1].Seq
	}
	for {
		evs, err := env.Agent.Events(ctx, since, agentEventWait)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("nodeguard strategy: follow the agent's events: %w", err)
		}
		for _, e := range evs {
			since = max(since, e.Seq)
			if e.Kind != EventKindEviction {
				continue
			}
			ev, err := ParseAgentEviction(e)
			if err != nil {
				return fmt.Errorf("nodeguard strategy: %w", err)
			}
			if ev.Err != "" || ev.DryRun {
				env.Log.Warn("agent eviction not carried out", "victim", ev.Victim, "dry_run", ev.DryRun, "err", ev.Err)
				continue
			}
			env.Detected(ev.ObservedAt)
			env.AgentEvicted(ev)
		}
	}
}

// APIPods is the agent's pod API as RunEviction drives it (EvictionPods).
// Client is asked at every call: a restarted agent comes with a new
// client.
type APIPods struct {
	Client func() PodClient
	// Poll is how often Wait asks for the pod (default 50 ms).
	Poll time.Duration
}

// Apply implements EvictionPods: the pods go as one YAML manifest.
func (a APIPods) Apply(ctx context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	var buf bytes.Buffer
	for i, p := range pods {
		b, err := podManifest(p)
		if err != nil {
			return nil, fmt.Errorf("apply %s/%s: %w", p.Namespace, p.Name, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	l, err := a.Client().Apply(ctx, buf.Bytes(), source)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

// podManifest is p as a manifest a user would write: without status and
// without the server-set fields a marshalled Pod carries
// (metadata.creationTimestamp: null), which the agent warns about.
func podManifest(p *corev1.Pod) ([]byte, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return yaml.Marshal(m)
}

// Delete implements EvictionPods.
func (a APIPods) Delete(ctx context.Context, namespace, name string) error {
	return a.Client().Delete(ctx, namespace, name)
}

// List implements EvictionPods.
func (a APIPods) List(ctx context.Context) ([]*corev1.Pod, error) {
	l, err := a.Client().List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out, nil
}

// Wait implements EvictionPods: it polls the pod until pred holds (ok is
// false while the pod does not exist).
func (a APIPods) Wait(ctx context.Context, namespace, name string, pred func(*corev1.Pod, bool) bool) error {
	poll := a.Poll
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	for {
		p, err := a.Client().Get(ctx, namespace, name)
		switch {
		case errors.Is(err, api.ErrNotFound):
			if pred(nil, false) {
				return nil
			}
		case err != nil:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		case pred(p, true):
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
