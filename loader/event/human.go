package event

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Human returns ev as one human-readable line of key=value pairs, for
// `nodeguard events` without --json, for example
//
//	oom_kill pid=123 comm=hog memcg=4567 cgroup=/x/y adj=0 rss=64.0MiB trigger_pid=120
//
// cgroupPath is the path of the event's cgroup as resolved by the caller;
// when it is "" the line shows cgroup_id= instead. Values that contain
// spaces, '=', quotes or bytes that are not printable UTF-8 are quoted, so a
// line never spans two lines whatever the comm or path.
func Human(ev Event, cgroupPath string) string {
	h := ev.Hdr()
	b := make([]byte, 0, 128)
	b = append(b, h.Kind.String()...)
	b = appendUint(b, "pid", uint64(h.PID))
	switch e := ev.(type) {
	case *OOMKill:
		b = appendStr(b, "comm", e.Comm)
	case *OOMScoreAdj:
		b = appendStr(b, "comm", e.Comm)
	case *Exit:
		b = appendStr(b, "comm", e.Comm)
	}
	b = appendUint(b, "memcg", h.MemcgID)
	if cgroupPath != "" {
		b = appendStr(b, "cgroup", cgroupPath)
	} else {
		b = appendUint(b, "cgroup_id", h.CgroupID)
	}

	switch e := ev.(type) {
	case *OOMKill:
		b = appendInt(b, "adj", int64(e.OOMScoreAdj))
		b = append(b, " rss="...)
		b = appendBytesIEC(b, e.RSSBytes())
		b = appendUint(b, "trigger_pid", uint64(e.TriggerPID))
	case *Reclaim:
		b = append(b, " type="...)
		b = append(b, e.Type.String()...)
		b = append(b, " dur="...)
		b = append(b, durationString(e.DurationNS)...)
		b = appendUint(b, "nr_reclaimed", e.NrReclaimed)
		b = appendInt(b, "order", int64(e.Order))
		b = append(b, " gfp=0x"...)
		b = strconv.AppendUint(b, uint64(e.GFPFlags), 16)
		if e.Type == ReclaimKswapd {
			b = appendUint(b, "nid", uint64(e.NID))
		}
	case *Cgroup:
		b = appendUint(b, "id", e.ID)
		b = appendUint(b, "parent_id", e.ParentID)
		b = appendUint(b, "hierarchy", uint64(e.HierarchyID))
		b = appendUint(b, "level", uint64(e.Level))
		b = appendStr(b, "path", e.Path)
	case *OOMScoreAdj:
		b = appendInt(b, "adj", int64(e.OOMScoreAdj))
		b = appendUint(b, "writer_pid", uint64(e.WriterPID))
	case *Exit:
		if sig := e.Signal(); sig != 0 {
			b = appendUint(b, "signal", uint64(sig))
			if e.CoreDumped() {
				b = append(b, " core_dumped=true"...)
			}
		} else {
			b = appendUint(b, "status", uint64(e.Status()))
		}
	case *Bench:
		b = appendUint(b, "seq", e.Seq)
		b = appendUint(b, "batch", e.Batch)
		b = appendUint(b, "cpu", uint64(h.CPU))
	}
	if names := h.Flags.Names(); names != nil {
		b = append(b, " flags="...)
		b = append(b, strings.Join(names, ",")...)
	}
	return string(b)
}

func appendUint(b []byte, key string, v uint64) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendUint(b, v, 10)
}

func appendInt(b []byte, key string, v int64) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, '=')
	return strconv.AppendInt(b, v, 10)
}

func appendStr(b []byte, key, v string) []byte {
	b = append(b, ' ')
	b = append(b, key...)
	b = append(b, '=')
	if needsQuote(v) {
		return strconv.AppendQuote(b, v)
	}
	return append(b, v...)
}

// needsQuote reports whether s must be quoted to stay one unambiguous
// key=value token: it is empty, or holds a space, '=', a quote, a
// backslash, a non-printable rune or invalid UTF-8.
func needsQuote(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f {
				return true
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || !strconv.IsPrint(r) {
			return true
		}
		i += n
	}
	return false
}

// appendBytesIEC appends n bytes with a binary unit and one decimal:
// 512B, 1.5KiB, 64.0MiB, 2.0GiB.
func appendBytesIEC(b []byte, n uint64) []byte {
	if n < 1024 {
		b = strconv.AppendUint(b, n, 10)
		return append(b, 'B')
	}
	const units = "KMGTPE"
	v := float64(n) / 1024
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	b = strconv.AppendFloat(b, v, 'f', 1, 64)
	return append(b, units[i], 'i', 'B')
}

// durationString formats ns like time.Duration, or as plain nanoseconds when
// the value does not fit a Duration.
func durationString(ns uint64) string {
	if ns > 1<<63-1 {
		return strconv.FormatUint(ns, 10) + "ns"
	}
	return time.Duration(ns).String()
}
