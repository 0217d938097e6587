package eviction

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nodeguard/nodeguard/psi"
)

// PSIRule is a pressure stall rule: evict when a PSI average stays above
// a percentage for a duration. Node rules look at /proc/pressure and evict
// the top-ranked pod (memory ranking); pod rules ("pod:" prefix) look at
// each pod cgroup's pressure file and evict that pod. Both are soft-like:
// the victim gets min(its grace period, EvictionMaxPodGracePeriod).
type PSIRule struct {
	// Pod: the rule applies to each pod cgroup, not to the node.
	Pod bool
	// Resource is psi.Memory, psi.CPU or psi.IO.
	Resource psi.Resource
	// Full selects the "full" line, otherwise "some".
	Full bool
	// Window is the average: 10, 60 or 300 seconds.
	Window time.Duration
	// Percent is the level the average must exceed (0 to 100, exclusive
	// of 100).
	Percent float64
	// For is how long the level must be exceeded without a break; 0 acts
	// on the first reading above it.
	For time.Duration
}

// Signal returns the rule's signal, "memory.full.avg10" or
// "pod:memory.some.avg60": the Signal of its decisions and statuses.
func (r PSIRule) Signal() string {
	var b strings.Builder
	if r.Pod {
		b.WriteString("pod:")
	}
	b.WriteString(string(r.Resource))
	if r.Full {
		b.WriteString(".full.")
	} else {
		b.WriteString(".some.")
	}
	b.WriteString("avg" + strconv.Itoa(int(r.Window/time.Second)))
	return b.String()
}

// String returns the rule in canonical form, "memory.full.avg10>40 for
// 10s" ("for" left out when 0).
func (r PSIRule) String() string {
	s := r.Signal() + ">" + strconv.FormatFloat(r.Percent, 'f', -1, 64)
	if r.For > 0 {
		s += " for " + r.For.String()
	}
	return s
}

// resource returns what the rule's decisions reclaim.
func (r PSIRule) resource() Resource {
	switch r.Resource {
	case psi.CPU:
		return ResourceCPU
	case psi.IO:
		return ResourceIO
	}
	return ResourceMemory
}

// value returns the rule's average from st, and whether st has its line.
func (r PSIRule) value(st psi.Stats) (float64, bool) {
	l, ok := st.Some, st.HasSome
	if r.Full {
		l, ok = st.Full, st.HasFull
	}
	if !ok {
		return 0, false
	}
	switch r.Window {
	case 60 * time.Second:
		return l.Avg60, true
	case 300 * time.Second:
		return l.Avg300, true
	}
	return l.Avg10, true
}

// ParsePSIRule parses "[pod:]<resource>.<kind>.<window> > <percent>[%]
// [for <duration>]": resource memory, cpu or io; kind some or full; window
// avg10, avg60 or avg300; blanks around ">" are optional. Examples:
//
//	memory.full.avg10>40 for 10s
//	pod:memory.some.avg10 > 60% for 5s
//	io.some.avg60>80
//
// The system-wide cpu "full" line is undefined (the kernel prints zeros),
// so a node rule on it is refused. Errors are *ConfigError values matching
// ErrInvalid.
func ParsePSIRule(s string) (PSIRule, error) {
	r, err := parsePSIRule(s)
	if err != nil {
		return PSIRule{}, &ConfigError{Field: "psi rule", Value: s, Err: err}
	}
	return r, nil
}

func parsePSIRule(s string) (PSIRule, error) {
	var r PSIRule
	sig, rest, ok := strings.Cut(strings.TrimSpace(s), ">")
	if !ok {
		return r, invalidf("want <resource>.<some|full>.<avg10|avg60|avg300> > <percent> [for <duration>]")
	}
	sig = strings.TrimSpace(sig)
	if after, ok := strings.CutPrefix(sig, "pod:"); ok {
		r.Pod, sig = true, after
	}
	parts := strings.Split(sig, ".")
	if len(parts) != 3 {
		return r, invalidf("signal %q: want <resource>.<some|full>.<avg10|avg60|avg300>", sig)
	}
	switch psi.Resource(parts[0]) {
	case psi.Memory, psi.CPU, psi.IO:
		r.Resource = psi.Resource(parts[0])
	default:
		return r, invalidf("resource %q: want memory, cpu or io", parts[0])
	}
	switch parts[1] {
	case "some":
	case "full":
		r.Full = true
	default:
		return r, invalidf("kind %q: want some or full", parts[1])
	}
	switch parts[2] {
	case "avg10":
		r.Window = 10 * time.Second
	case "avg60":
		r.Window = 60 * time.Second
	case "avg300":
		r.Window = 300 * time.Second
	default:
		return r, invalidf("window %q: want avg10, avg60 or avg300", parts[2])
	}
	if !r.Pod && r.Resource == psi.CPU && r.Full {
		return r, invalidf("cpu.full is undefined for the whole node (the kernel reports zeros); use cpu.some or a pod: rule")
	}
	fields := strings.Fields(rest)
	if len(fields) != 1 && len(fields) != 3 {
		return r, invalidf("want a percentage, optionally followed by \"for <duration>\"")
	}
	p, err := strconv.ParseFloat(strings.TrimSuffix(fields[0], "%"), 64)
	if err != nil || math.IsNaN(p) {
		return r, invalidf("percentage %q is not a number", fields[0])
	}
	if p < 0 || p >= 100 {
		return r, invalidf("percentage %v: want at least 0 and below 100", p)
	}
	r.Percent = p
	if len(fields) == 3 {
		if fields[1] != "for" {
			return r, invalidf("want \"for\" after the percentage, not %q", fields[1])
		}
		d, err := time.ParseDuration(fields[2])
		if err != nil {
			return r, invalidf("duration %q: %w", fields[2], err)
		}
		if d < 0 {
			return r, invalidf("duration %v must not be negative", d)
		}
		r.For = d
	}
	return r, nil
}
