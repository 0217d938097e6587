package eviction

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// Observations are one snapshot's view of the node, in the policy's terms.
type Observations struct {
	// Time the statistics were read (not when they are evaluated: the
	// difference is the decision's staleness).
	Time    time.Time
	Signals map[nodestats.Signal]nodestats.Observation
	// NodePSI is /proc/pressure/* (memory, cpu, io).
	NodePSI map[psi.Resource]psi.Stats
	Pods    []Pod
	// InFlight are the pods whose eviction the actor is still carrying
	// out (Evict has not returned): the policy never chooses them.
	InFlight map[types.UID]bool
}
