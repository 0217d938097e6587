package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"

	"sigs.k8s.io/yaml"
)

// reloadable lists what SIGHUP applies: the logging section and the
// eviction policy. The eviction manager's own knobs (tick, dryRun, exempt,
// disabled) and every other section are read once, at start-up.
var reloadable = map[string]bool{
	"logging":                                   true,
	"eviction.evictionHard":                     true,
	"eviction.evictionSoft":                     true,
	"eviction.evictionSoftGracePeriod":          true,
	"eviction.evictionMinimumReclaim":           true,
	"eviction.enforceNodeAllocatable":           true,
	"eviction.evictionPressureTransitionPeriod": true,
	"eviction.evictionMaxPodGracePeriod":        true,
	"eviction.psiRules":                         true,
	"eviction.coolDown":                         true,
}

// Changes compares two configurations field by field, as their YAML keys:
// top-level keys, and eviction.<key> within the eviction section. It
// returns the changed keys, sorted, split into those SIGHUP applies and
// those that need a restart. A key unknown to reloadable needs a restart,
// so a field added later is never silently ignored.
func Changes(old, cur Run) (apply, restart []string, err error) {
	a, err := keys(old)
	if err != nil {
		return nil, nil, err
	}
	b, err := keys(cur)
	if err != nil {
		return nil, nil, err
	}
	all := map[string]bool{}
	for k := range a {
		all[k] = true
	}
	for k := range b {
		all[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(all)) {
		if reflect.DeepEqual(a[k], b[k]) {
			continue
		}
		if reloadable[k] {
			apply = append(apply, k)
		} else {
			restart = append(restart, k)
		}
	}
	return apply, restart, nil
}

// keys flattens c into its top-level keys and eviction.<key>.
func keys(c Run) (map[string]any, error) {
	b, err := yaml.Marshal(c.Effective())
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	if ev, ok := m["eviction"].(map[string]any); ok {
		delete(m, "eviction")
		for k, v := range ev {
			m["eviction."+k] = v
		}
	}
	return m, nil
}

// WithReloaded is old with what SIGHUP applies taken from cur: the
// configuration in force after a reload.
func WithReloaded(old, cur Run) Run {
	out := old
	out.Logging = cur.Logging
	e := &out.Eviction
	e.EvictionHard = cur.Eviction.EvictionHard
	e.EvictionSoft = cur.Eviction.EvictionSoft
	e.EvictionSoftGracePeriod = cur.Eviction.EvictionSoftGracePeriod
	e.EvictionMinimumReclaim = cur.Eviction.EvictionMinimumReclaim
	e.EnforceNodeAllocatable = cur.Eviction.EnforceNodeAllocatable
	e.EvictionPressureTransitionPeriod = cur.Eviction.EvictionPressureTransitionPeriod
	e.EvictionMaxPodGracePeriod = cur.Eviction.EvictionMaxPodGracePeriod
	e.PSIRules = cur.Eviction.PSIRules
	e.CoolDown = cur.Eviction.CoolDown
	return out
}
