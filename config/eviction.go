package config

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/eviction"
)

// Eviction is the eviction section: the kubelet's eviction fields with
// their names and syntax, plus PSI rules and nodeguard's own knobs.
type Eviction struct {
	// EvictionHard maps a signal to the threshold below which pods are
	// evicted at once, e.g. {memory.available: 100Mi, nodefs.available:
	// 10%}. Unset: the kubelet's defaults; a map replaces them rather
	// than merging, and "0%" leaves a signal out.
	// Kubelet: evictionHard.
	EvictionHard map[string]string `json:"evictionHard,omitempty"`
	// EvictionSoft maps a signal to a threshold that evicts only after
	// it has held for the signal's evictionSoftGracePeriod, honouring the
	// pods' termination grace (capped by evictionMaxPodGracePeriod).
	// Kubelet: evictionSoft.
	EvictionSoft map[string]string `json:"evictionSoft,omitempty"`
	// EvictionSoftGracePeriod maps a signal to how long its soft
	// threshold must hold ("1m30s"); every soft threshold needs one.
	// Kubelet: evictionSoftGracePeriod.
	EvictionSoftGracePeriod map[string]string `json:"evictionSoftGracePeriod,omitempty"`
	// EvictionMinimumReclaim maps a signal to how far beyond its
	// threshold an eviction reclaims, so that the node does not sit at
	// the threshold.
	// Kubelet: evictionMinimumReclaim.
	EvictionMinimumReclaim map[string]string `json:"evictionMinimumReclaim,omitempty"`
	// EnforceNodeAllocatable: when it holds "pods", every hard
	// memory.available threshold is copied to allocatableMemory.available.
	// Kubelet: enforceNodeAllocatable.
	EnforceNodeAllocatable []string `json:"enforceNodeAllocatable,omitempty"`
	// EvictionPressureTransitionPeriod is how long a node condition
	// stays after its last threshold stopped being met.
	// Kubelet: evictionPressureTransitionPeriod.
	EvictionPressureTransitionPeriod metav1.Duration `json:"evictionPressureTransitionPeriod"`
	// EvictionMaxPodGracePeriod caps soft evictions' grace, in seconds;
	// 0 leaves the pod's own.
	// Kubelet: evictionMaxPodGracePeriod.
	EvictionMaxPodGracePeriod int32 `json:"evictionMaxPodGracePeriod"`
	// PSIRules evict on pressure stall information, e.g.
	// "memory.full.avg10>40 for 10s" (the node) or
	// "pod:memory.some.avg10>60 for 5s" (each pod cgroup).
	// Kubelet: none.
	PSIRules []string `json:"psiRules"`
	// DryRun decides and reports but neither evicts nor touches
	// oom_score_adj.
	// Kubelet: none.
	DryRun bool `json:"dryRun"`
	// Tick is the safety tick: an evaluation even when no tripwire,
	// trigger or kernel event woke the manager.
	// Kubelet: none (the kubelet's fixed 10s monitoring period).
	Tick metav1.Duration `json:"tick"`
	// CoolDown is a pause after each eviction; 0: pending-release
	// accounting alone prevents over-eviction.
	// Kubelet: none.
	CoolDown metav1.Duration `json:"coolDown"`
	// Exempt pods ("namespace/name") are never evicted.
	// Kubelet: none.
	Exempt []string `json:"exempt"`
	// Disabled turns the eviction manager off (sensing and metrics stay).
	// Kubelet: none.
	Disabled bool `json:"disabled"`
}

// Thresholds is the section's kubelet threshold fields, as the eviction
// package parses them.
func (c Eviction) Thresholds() eviction.ThresholdConfig {
	return eviction.ThresholdConfig{
		EvictionHard:            c.EvictionHard,
		EvictionSoft:            c.EvictionSoft,
		EvictionSoftGracePeriod: c.EvictionSoftGracePeriod,
		EvictionMinimumReclaim:  c.EvictionMinimumReclaim,
		EnforceNodeAllocatable:  c.EnforceNodeAllocatable,
	}
}

// Policy parses the section into the eviction package's configuration.
func (c Eviction) Policy() (eviction.PolicyConfig, error) {
	tc := c.Thresholds()
	if tc.EvictionHard == nil {
		tc.EvictionHard = eviction.DefaultEvictionHard()
	}
	if tc.EnforceNodeAllocatable == nil {
		// nodeguard enforces node allocatable on kubepods, as the
		// kubelet's enforceNodeAllocatable=[pods].
		tc.EnforceNodeAllocatable = []string{"pods"}
	}
	th, err := eviction.ParseThresholds(tc)
	if err != nil {
		return eviction.PolicyConfig{}, fmt.Errorf("eviction: %w", err)
	}
	pc := eviction.PolicyConfig{
		Thresholds:                       th,
		EvictionPressureTransitionPeriod: c.EvictionPressureTransitionPeriod.Duration,
		EvictionMaxPodGracePeriod:        time.Duration(c.EvictionMaxPodGracePeriod) * time.Second,
		CoolDown:                         c.CoolDown.Duration,
		DryRun:                           c.DryRun,
	}
	for i, s := range c.PSIRules {
		r, err := eviction.ParsePSIRule(s)
		if err != nil {
			return pc, fmt.Errorf("eviction.psiRules[%d]: %w", i, err)
		}
		pc.PSIRules = append(pc.PSIRules, r)
	}
	if c.EvictionMaxPodGracePeriod < 0 {
		return pc, fmt.Errorf("eviction.evictionMaxPodGracePeriod: %d is negative", c.EvictionMaxPodGracePeriod)
	}
	if err := pc.Validate(); err != nil {
		return pc, fmt.Errorf("eviction: %w", err)
	}
	return pc, nil
}
