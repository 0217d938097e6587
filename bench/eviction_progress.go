package bench

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrMalformedProgress: the hog's log holds a line that is not what the
// hog writes.
var ErrMalformedProgress = errors.New("malformed hog progress")

// ProgressPoint is one line of the hog's progress: at At (the hog's
// CLOCK_REALTIME), Allocated bytes had been charged.
type ProgressPoint struct {
	At        time.Time
	Allocated uint64
}

// Why the CRI log: the hog's stdout goes through the runtime's shim into
// the container log, which the shim writes from outside the pod root, so
// the progress costs the budget nothing; a hostPath file would be charged
// to the hog's own memory cgroup as page cache and would need a volume. The
// shim's delay does not matter because every line carries the hog's own
// timestamp, and the pipe keeps what the hog wrote before it was killed.

// ParseCRILog returns the stdout lines of a container log in the CRI
// format ("<rfc3339nano> <stream> <P|F> <content>"), joining partial (P)
// records. A last line without "\n" is a record still being written and is
// left out; stderr lines are skipped.
func ParseCRILog(b []byte) ([]string, error) {
	var out []string
	var part []byte
	n := 0
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // still being written
		}
		line := b[:i]
		b = b[i+1:]
		n++
		ts, rest, ok1 := bytes.Cut(line, []byte{' '})
		stream, rest, ok2 := bytes.Cut(rest, []byte{' '})
		tag, content, ok3 := bytes.Cut(rest, []byte{' '})
		if !ok1 || !ok2 || (!ok3 && len(tag) == 0) {
			return out, fmt.Errorf("CRI log line %d %q: %w: want \"<time> <stream> <tag> <content>\"", n, line, ErrMalformedProgress)
		}
		if _, err := time.Parse(time.RFC3339Nano, string(ts)); err != nil {
			return out, fmt.Errorf("CRI log line %d: time %q: %w", n, ts, ErrMalformedProgress)
		}
		full := bytes.HasPrefix(tag, []byte("F"))
		if !full && !bytes.HasPrefix(tag, []byte("P")) {
			return out, fmt.Errorf("CRI log line %d: tag %q: %w", n, tag, ErrMalformedProgress)
		}
		switch string(stream) {
		case "stdout":
		case "stderr":
			continue
		default:
			return out, fmt.Errorf("CRI log line %d: stream %q: %w", n, stream, ErrMalformedProgress)
		}
		part = append(part, content...)
		if full {
			out = append(out, string(part))
			part = part[:0]
		}
	}
	return out, nil
}

// ParseProgress parses the hog's lines, "<unix-nanos> <allocated-bytes>".
// Allocations never shrink and time never goes back; a line that breaks
// either is malformed.
func ParseProgress(lines []string) ([]ProgressPoint, error) {
	out := make([]ProgressPoint, 0, len(lines))
	for i, l := range lines {
		a, b, ok := cutSpace(l)
		if !ok {
			return out, fmt.Errorf("progress line %d %q: %w: want \"<unix-nanos> <bytes>\"", i+1, l, ErrMalformedProgress)
		}
		ns, err1 := strconv.ParseInt(a, 10, 64)
		n, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil || ns <= 0 {
			return out, fmt.Errorf("progress line %d %q: %w: not two numbers", i+1, l, ErrMalformedProgress)
		}
		p := ProgressPoint{At: time.Unix(0, ns), Allocated: n}
		if len(out) > 0 {
			prev := out[len(out)-1]
			if p.At.Before(prev.At) || p.Allocated < prev.Allocated {
				return out, fmt.Errorf("progress line %d %q: %w: goes back (previous %d at %d)", i+1, l, ErrMalformedProgress, prev.Allocated, prev.At.UnixNano())
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func cutSpace(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return s[:i], s[i+1:], i > 0 && i < len(s)-1
		}
	}
	return "", "", false
}

// Crossing is the ground truth of one trial: when the pod root's working
// set reached budget - threshold, taken as the first progress point where
// baseline + allocated >= budget - threshold (baseline: the pod root's
// working set just before the hog began to allocate). ok is false when the
// hog never got there.
func Crossing(points []ProgressPoint, baseline, budget, threshold uint64) (at time.Time, ok bool) {
	if threshold >= budget {
		return time.Time{}, false
	}
	line := budget - threshold
	for _, p := range points {
		if baseline+p.Allocated >= line {
			return p.At, true
		}
	}
	return time.Time{}, false
}

// ProjectCrossing extrapolates the crossing of a hog stopped before its
// log reached budget - threshold: from its last progress point at its
// achieved rate (bytes/s). ok is false without points or rate.
func ProjectCrossing(points []ProgressPoint, baseline, budget, threshold uint64, rate float64) (time.Time, bool) {
	if len(points) == 0 || rate <= 0 || threshold >= budget {
		return time.Time{}, false
	}
	last := points[len(points)-1]
	line := budget - threshold
	have := baseline + last.Allocated
	if have >= line {
		return last.At, true
	}
	return last.At.Add(time.Duration(float64(line-have) / rate * float64(time.Second))), true
}

// AllocationStart returns the time of the first point with memory
// allocated, and the rate achieved from there to the last point (bytes/s;
// 0 with fewer than two such points).
func AllocationStart(points []ProgressPoint) (start time.Time, rate float64, ok bool) {
	first := -1
	for i, p := range points {
		if p.Allocated > 0 {
			first = i
			break
		}
	}
	if first < 0 {
		return time.Time{}, 0, false
	}
	a, z := points[first], points[len(points)-1]
	if d := z.At.Sub(a.At); d > 0 {
		rate = float64(z.Allocated-a.Allocated) / d.Seconds()
	}
	return a.At, rate, true
}
