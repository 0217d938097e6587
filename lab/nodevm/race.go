package nodevm

import (
	"fmt"
	"time"
)

// The OOM race in the node lane (the last check of lab/nodelane):
// `nodeguard bench eviction` against the guest's containerd with the
// systemd driver, in one of these modes, chosen on the host with EnvRace
// (the guest gets the same variable). The mode also sets how long the lane
// may take: RaceAllowance is added to the guest's and the test binary's
// bounds.
const (
	// RaceQuick is the default: two rates, one trial each.
	RaceQuick = "quick"
	// RaceFull is docs/benchmarks.md's set, for its figures.
	RaceFull = "full"
	// RaceOff skips the race check.
	RaceOff = "off"
	// DefaultRace is the mode when EnvRace is empty.
	DefaultRace = RaceQuick
)

// RaceSet is one mode's scenario and bound.
type RaceSet struct {
	// Rates and Trials are bench eviction's --rates and --trials.
	Rates  string
	Trials int
	// Bound stops the race (SIGTERM, then its own cleanup) when it takes
	// longer; the lane's bounds are raised by as much (RaceAllowance).
	Bound time.Duration
}

// The race's fixed setting in every mode: node allocatable (the pod root's
// hard limit) of 256 MiB, no more than half of what the 2 GiB guest has
// available after the other checks (the race refuses more), and the
// kubelet's hard threshold of 10% of it.
const (
	RaceBudget    = "256Mi"
	RaceThreshold = "10%"
)

// raceSets are the modes' scenarios, all four v2 strategies (nodeguard,
// kubelet, poll1s, psi) in each. Measured under single-threaded TCG, a
// trial costs ~25 s (a hog pod's sandbox, its ramp, the release, the
// settle between trials; each nodeguard trial and the baselines after it
// also restart the agent, 4-5 s), so two rates and two trials (16 trials)
// took 6m50s: quick runs one trial per rate, to stay within ~4 minutes.
// A Bound is about twice what its set is expected to take.
var raceSets = map[string]RaceSet{
	RaceQuick: {Rates: "200Mi/s,1Gi/s", Trials: 1, Bound: 10 * time.Minute},
	RaceFull:  {Rates: "50Mi/s,200Mi/s,1Gi/s", Trials: 3, Bound: 35 * time.Minute},
}

// DefaultRaceFor is the race mode when EnvRace is empty on a run with
// containerd (ParseContainerd's): DefaultRace on the root filesystem's,
// off on containerd 2.x, whose run is there for the runtime's checks (the
// race measures nodeguard's eviction, the same on either runtime, and
// costs ~4 minutes); EnvRace=quick or full runs it there too.
func DefaultRaceFor(containerd string) string {
	if containerd == ContainerdDebian {
		return DefaultRace
	}
	return RaceOff
}

// ParseRace returns the mode named by v ("" is DefaultRace).
func ParseRace(v string) (string, error) {
	switch v {
	case "":
		return DefaultRace, nil
	case RaceQuick, RaceFull, RaceOff:
		return v, nil
	}
	return "", fmt.Errorf("%s=%q: want %s, %s or %s", EnvRace, v, RaceQuick, RaceFull, RaceOff)
}

// Race returns the scenario of mode; ok is false for RaceOff and unknown
// modes.
func Race(mode string) (RaceSet, bool) {
	s, ok := raceSets[mode]
	return s, ok
}

// RaceAllowance is what mode adds to the lane's bounds: its race's Bound,
// and nothing when it is off.
func RaceAllowance(mode string) time.Duration {
	s, _ := Race(mode)
	return s.Bound
}
