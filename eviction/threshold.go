package eviction

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// resources is the order in which Evaluate decides, memory first as the
// kubelet's byEvictionPriority does.
var resources = [...]Resource{ResourceMemory, ResourceDisk, ResourcePID, ResourceCPU, ResourceIO}

// signalInfo is what the policy knows of one kubelet signal.
type signalInfo struct {
	resource  Resource
	condition Condition
	// starved is the kubelet's resourceToReclaim, as its eviction
	// message names it.
	starved string
	// binary: the signal counts bytes (BinarySI quantities in messages),
	// otherwise a count (DecimalSI).
	binary bool
	// usage is the part of a pod the signal's ranking and pending-release
	// accounting look at.
	usage func(*Pod) int64
}

func memoryUsage(p *Pod) int64    { return p.MemoryUsage }
func ephemeralUsage(p *Pod) int64 { return p.EphemeralUsage }
func inodeUsage(p *Pod) int64     { return p.Inodes }
func pidUsage(p *Pod) int64       { return p.PIDs }

// signals are the signals nodeguard evaluates, in the order thresholds are
// returned (that of nodestats.AppendObservations).
var signals = []nodestats.Signal{
	nodestats.SignalMemoryAvailable,
	nodestats.SignalAllocatableMemoryAvailable,
	nodestats.SignalNodeFsAvailable,
	nodestats.SignalNodeFsInodesFree,
	nodestats.SignalImageFsAvailable,
	nodestats.SignalImageFsInodesFree,
	nodestats.SignalPIDAvailable,
}

var signalInfos = map[nodestats.Signal]signalInfo{
	nodestats.SignalMemoryAvailable:            {ResourceMemory, MemoryPressure, "memory", true, memoryUsage},
	nodestats.SignalAllocatableMemoryAvailable: {ResourceMemory, MemoryPressure, "memory", true, memoryUsage},
	nodestats.SignalNodeFsAvailable:            {ResourceDisk, DiskPressure, "ephemeral-storage", true, ephemeralUsage},
	nodestats.SignalNodeFsInodesFree:           {ResourceDisk, DiskPressure, "inodes", false, inodeUsage},
	nodestats.SignalImageFsAvailable:           {ResourceDisk, DiskPressure, "ephemeral-storage", true, ephemeralUsage},
	nodestats.SignalImageFsInodesFree:          {ResourceDisk, DiskPressure, "inodes", false, inodeUsage},
	nodestats.SignalPIDAvailable:               {ResourcePID, PIDPressure, "pids", false, pidUsage},
}

// ThresholdValue is a threshold or minimum reclaim: a quantity, or a
// percentage of the signal's capacity. Exactly one is set.
type ThresholdValue struct {
	// Quantity in bytes (memory, filesystem space) or a count (inodes,
	// PIDs), used when Percentage is 0.
	Quantity int64
	// Percentage is a fraction of the capacity (0.1 for "10%").
	Percentage float64
	// text is the canonical configured form ("100Mi", "10%").
	text string
}

// Amount returns the value in the signal's unit for a capacity, as the
// kubelet's GetThresholdQuantity does.
func (v ThresholdValue) Amount(capacity int64) int64 {
	if v.Percentage != 0 {
		return int64(float64(capacity) * v.Percentage)
	}
	return v.Quantity
}

// String returns the value as configured, canonicalized ("100Mi", "10%").
func (v ThresholdValue) String() string {
	if v.text != "" {
		return v.text
	}
	if v.Percentage != 0 {
		return strconv.FormatFloat(v.Percentage*100, 'f', -1, 64) + "%"
	}
	return strconv.FormatInt(v.Quantity, 10)
}

// Threshold is one eviction threshold: the signal's available value below
// Value (the kubelet's only operator, LessThan) means pressure.
type Threshold struct {
	Signal nodestats.Signal
	Value  ThresholdValue
	// GracePeriod is how long a soft threshold must be met before it
	// evicts. 0 is a hard threshold, as in the kubelet
	// (isHardEvictionThreshold): a soft threshold configured with a grace
	// period of 0 is hard.
	GracePeriod time.Duration
	// MinReclaim, when set, keeps a threshold that evicted "met" until
	// the available value reaches Value + MinReclaim.
	MinReclaim *ThresholdValue
}

// Hard reports whether the threshold evicts at once, with grace 0.
func (t Threshold) Hard() bool { return t.GracePeriod == 0 }

// String returns the threshold in the kubelet's flag form,
// "memory.available<100Mi".
func (t Threshold) String() string { return string(t.Signal) + "<" + t.Value.String() }

// ThresholdConfig is the eviction part of a KubeletConfiguration, in its
// map form: {"memory.available": "100Mi", "nodefs.available": "10%"}.
type ThresholdConfig struct {
	EvictionHard            map[string]string `json:"evictionHard,omitempty"`
	EvictionSoft            map[string]string `json:"evictionSoft,omitempty"`
	EvictionSoftGracePeriod map[string]string `json:"evictionSoftGracePeriod,omitempty"`
	EvictionMinimumReclaim  map[string]string `json:"evictionMinimumReclaim,omitempty"`
	// EnforceNodeAllocatable, as the kubelet's enforceNodeAllocatable:
	// when it holds "pods", every hard memory.available threshold is
	// copied to allocatableMemory.available.
	EnforceNodeAllocatable []string `json:"enforceNodeAllocatable,omitempty"`
}

// DefaultEvictionHard returns the kubelet's Linux default evictionHard
// (pkg/kubelet/eviction/defaults_linux.go). A new map on every call.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":  "100Mi",
		"nodefs.available":  "10%",
		"nodefs.inodesFree": "5%",
		"imagefs.available": "15%",
	}
}

// nodeAllocatableEnforcementKey is the kubelet's NodeAllocatableEnforcementKey.
const nodeAllocatableEnforcementKey = "pods"

// ParseThresholds parses the eviction configuration with the kubelet's
// rules (pkg/kubelet/eviction/helpers.go ParseThresholdConfig):
//
//   - a threshold is a positive quantity ("100Mi") or a percentage of the
//     signal's capacity from 0% to 100%; "0%" and "100%" leave the
//     threshold out (the kubelet's way of disabling a default);
//   - every soft threshold needs a grace period (a non-negative
//     duration); grace periods of signals without a soft threshold are
//     accepted and unused, as in the kubelet;
//   - a minimum reclaim is a non-negative quantity or a positive
//     percentage, applied to the hard and soft thresholds of its signal;
//   - with EnforceNodeAllocatable holding "pods", hard memory.available
//     thresholds are copied to allocatableMemory.available.
//
// The result holds the hard thresholds, then the soft ones, each in signal
// order. Errors are *ConfigError values naming the field, the key and the
// value: evictionHard[memory.available]: "12Zi": invalid: ...
func ParseThresholds(c ThresholdConfig) ([]Threshold, error) {
	hard, err := parseStatements("evictionHard", c.EvictionHard)
	if err != nil {
		return nil, err
	}
	soft, err := parseStatements("evictionSoft", c.EvictionSoft)
	if err != nil {
		return nil, err
	}
	grace := make(map[nodestats.Signal]time.Duration, len(c.EvictionSoftGracePeriod))
	for _, k := range sortedKeys(c.EvictionSoftGracePeriod) {
		v := c.EvictionSoftGracePeriod[k]
		sig, err := parseSignal(k)
		if err != nil {
			return nil, &ConfigError{Field: "evictionSoftGracePeriod", Key: k, Value: v, Err: err}
		}
		d, err := parseGrace(v)
		if err != nil {
			return nil, &ConfigError{Field: "evictionSoftGracePeriod", Key: k, Value: v, Err: err}
		}
		grace[sig] = d
	}
	minReclaim := make(map[nodestats.Signal]ThresholdValue, len(c.EvictionMinimumReclaim))
	for _, k := range sortedKeys(c.EvictionMinimumReclaim) {
		v := c.EvictionMinimumReclaim[k]
		sig, err := parseSignal(k)
		if err != nil {
			return nil, &ConfigError{Field: "evictionMinimumReclaim", Key: k, Value: v, Err: err}
		}
		mr, err := parseMinReclaim(v)
		if err != nil {
			return nil, &ConfigError{Field: "evictionMinimumReclaim", Key: k, Value: v, Err: err}
		}
		minReclaim[sig] = mr
	}
	for i := range soft {
		d, ok := grace[soft[i].Signal]
		if !ok {
			return nil, &ConfigError{Field: "evictionSoft", Key: string(soft[i].Signal), Value: c.EvictionSoft[string(soft[i].Signal)],
				Err: invalidf("a soft threshold needs a grace period: evictionSoftGracePeriod[%s] is not set", soft[i].Signal)}
		}
		soft[i].GracePeriod = d
	}
	out := append(hard, soft...)
	for i := range out {
		if mr, ok := minReclaim[out[i].Signal]; ok {
			out[i].MinReclaim = &mr
		}
	}
	if slices.Contains(c.EnforceNodeAllocatable, nodeAllocatableEnforcementKey) {
		out = addAllocatableThresholds(out)
	}
	return out, nil
}

// addAllocatableThresholds copies the hard memory.available thresholds to
// allocatableMemory.available, unless the same one is configured already.
func addAllocatableThresholds(ts []Threshold) []Threshold {
	var extra []Threshold
	for _, t := range ts {
		if t.Signal != nodestats.SignalMemoryAvailable || !t.Hard() {
			continue
		}
		dup := slices.ContainsFunc(ts, func(u Threshold) bool {
			return u.Signal == nodestats.SignalAllocatableMemoryAvailable && u.Hard() && u.Value == t.Value
		})
		if !dup {
			t.Signal = nodestats.SignalAllocatableMemoryAvailable
			extra = append(extra, t)
		}
	}
	return append(ts, extra...)
}

// parseStatements parses one map of thresholds, in signal order.
func parseStatements(field string, m map[string]string) ([]Threshold, error) {
	var out []Threshold
	for _, k := range sortedKeys(m) {
		v := m[k]
		sig, err := parseSignal(k)
		if err != nil {
			return nil, &ConfigError{Field: field, Key: k, Value: v, Err: err}
		}
		val, ok, err := parseThresholdValue(v)
		if err != nil {
			return nil, &ConfigError{Field: field, Key: k, Value: v, Err: err}
		}
		if ok {
			out = append(out, Threshold{Signal: sig, Value: val})
		}
	}
	return out, nil
}

// sortedKeys returns m's keys, known signals first in signal order, then
// the others sorted (so that the first error reported is stable).
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	rank := func(k string) int {
		if i := slices.Index(signals, nodestats.Signal(k)); i >= 0 {
			return i
		}
		return len(signals)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	return keys
}

// parseSignal checks a signal name.
func parseSignal(k string) (nodestats.Signal, error) {
	sig := nodestats.Signal(k)
	if _, ok := signalInfos[sig]; !ok {
		return "", fmt.Errorf("%w %q (want one of %s)", ErrUnsupportedSignal, k, signalList())
	}
	return sig, nil
}

func signalList() string {
	names := make([]string, len(signals))
	for i, s := range signals {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// maxQuantity bounds a quantity: it must fit an int64 of bytes or counts.
var maxQuantity = resource.NewQuantity(math.MaxInt64, resource.DecimalSI)

// parseThresholdValue parses a threshold: ok is false for "0%" and
// "100%", which leave the threshold out.
func parseThresholdValue(v string) (_ ThresholdValue, ok bool, _ error) {
	if strings.HasSuffix(v, "%") {
		p, err := parsePercentage(v)
		if err != nil {
			return ThresholdValue{}, false, err
		}
		if p == 0 || p == 1 {
			return ThresholdValue{}, false, nil
		}
		return ThresholdValue{Percentage: p, text: v}, true, nil
	}
	q, err := parseQuantity(v)
	if err != nil {
		return ThresholdValue{}, false, err
	}
	if q.Sign() <= 0 {
		return ThresholdValue{}, false, invalidf("a threshold must be positive")
	}
	return ThresholdValue{Quantity: q.Value(), text: q.String()}, true, nil
}

// parseMinReclaim parses a minimum reclaim: a non-negative quantity or a
// positive percentage.
func parseMinReclaim(v string) (ThresholdValue, error) {
	if strings.HasSuffix(v, "%") {
		p, err := parsePercentage(v)
		if err != nil {
			return ThresholdValue{}, err
		}
		if p == 0 {
			return ThresholdValue{}, invalidf("a minimum reclaim percentage must be positive")
		}
		return ThresholdValue{Percentage: p, text: v}, nil
	}
	q, err := parseQuantity(v)
	if err != nil {
		return ThresholdValue{}, err
	}
	if q.Sign() < 0 {
		return ThresholdValue{}, invalidf("a minimum reclaim must not be negative")
	}
	return ThresholdValue{Quantity: q.Value(), text: q.String()}, nil
}

// parseQuantity parses a Kubernetes quantity that fits an int64.
func parseQuantity(v string) (resource.Quantity, error) {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return resource.Quantity{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if q.Cmp(*maxQuantity) > 0 {
		return resource.Quantity{}, invalidf("quantity out of range")
	}
	return q, nil
}

// parsePercentage parses "D%" into a fraction from 0 to 1.
func parsePercentage(v string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(v, "%"), 64)
	if err != nil {
		return 0, invalidf("not a percentage")
	}
	if math.IsNaN(f) || f < 0 || f > 100 {
		return 0, invalidf("a percentage must be from 0%% to 100%%")
	}
	return f / 100, nil
}

// parseGrace parses a grace period: a non-negative Go duration.
func parseGrace(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if d < 0 {
		return 0, invalidf("a grace period must not be negative")
	}
	return d, nil
}

// ParseThresholdList parses the kubelet's flag form of thresholds,
// "memory.available<100Mi,nodefs.available<10%" (--eviction-hard,
// --eviction-soft), into the map form of ThresholdConfig. Entries are
// separated by commas, blanks around keys and values are ignored, an empty
// entry is skipped. Unlike the kubelet's flag, which keeps the last of
// duplicate keys, a signal given twice is an error; every signal and value
// is checked as ParseThresholds checks it.
func ParseThresholdList(s string) (map[string]string, error) {
	return parseList(s, "<", func(_ nodestats.Signal, v string) error {
		_, _, err := parseThresholdValue(v)
		return err
	})
}

// ParseSignalMap parses the kubelet's flag form of grace periods and
// minimum reclaims, "memory.available=1m30s,nodefs.available=500Mi"
// (--eviction-soft-grace-period, --eviction-minimum-reclaim), into a map.
// It checks the signal names and the syntax; ParseThresholds checks the
// values.
func ParseSignalMap(s string) (map[string]string, error) {
	return parseList(s, "=", func(nodestats.Signal, string) error { return nil })
}

// parseList splits "k<sep>v,k<sep>v".
func parseList(s, sep string, check func(nodestats.Signal, string) error) (map[string]string, error) {
	out := map[string]string{}
	for i, entry := range strings.Split(s, ",") {
		field := fmt.Sprintf("entry %d", i+1)
		if strings.TrimSpace(entry) == "" {
			continue
		}
		k, v, ok := strings.Cut(entry, sep)
		if !ok {
			return nil, &ConfigError{Field: field, Value: entry, Err: invalidf("want signal%svalue", sep)}
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		sig, err := parseSignal(k)
		if err != nil {
			return nil, &ConfigError{Field: field, Key: k, Value: v, Err: err}
		}
		if _, dup := out[k]; dup {
			return nil, &ConfigError{Field: field, Key: k, Value: v, Err: invalidf("signal given twice")}
		}
		if err := check(sig, v); err != nil {
			return nil, &ConfigError{Field: field, Key: k, Value: v, Err: err}
		}
		out[k] = v
	}
	return out, nil
}
