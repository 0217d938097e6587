package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// Record is the JSON form of an event, one object per line in
// `nodeguard events --json`. It marshals as one flat object: the common
// fields below in this order, then the kind's own Fields in their order.
type Record struct {
	Kind        string    `json:"kind"`
	Time        time.Time `json:"time"` // wall clock, RFC 3339 with nanoseconds
	TimestampNS uint64    `json:"ts_ns"`
	PID         uint32    `json:"pid"`
	TID         uint32    `json:"tid"`
	CPU         uint32    `json:"cpu"`
	MemcgID     uint64    `json:"memcg_id"`
	CgroupID    uint64    `json:"cgroup_id"`
	// CgroupPath is the path of the event's cgroup as resolved by the
	// caller; omitted when unknown.
	CgroupPath string `json:"cgroup_path,omitempty"`
	// Flags are the names of the header's flags (Flags.Names); omitted when
	// none is set.
	Flags []string `json:"flags,omitempty"`
	// Fields are the kind's own fields, with snake_case keys that differ
	// from the common ones and from each other.
	Fields []Field `json:"-"`
}

// Field is one kind-specific key and value of a Record.
type Field struct {
	Key   string
	Value any
}

// ToRecord returns the JSON form of ev. wall is the event's wall-clock time
// and cgroupPath the path of its cgroup, both worked out by the caller (the
// record has only a monotonic timestamp and ids); pass "" for an unknown
// path.
func ToRecord(ev Event, wall time.Time, cgroupPath string) Record {
	h := ev.Hdr()
	r := Record{
		Kind:        h.Kind.String(),
		Time:        wall,
		TimestampNS: h.TimestampNS,
		PID:         h.PID,
		TID:         h.TID,
		CPU:         h.CPU,
		MemcgID:     h.MemcgID,
		CgroupID:    h.CgroupID,
		CgroupPath:  cgroupPath,
		Flags:       h.Flags.Names(),
	}
	switch e := ev.(type) {
	case *OOMKill:
		r.Fields = []Field{
			{"comm", e.Comm},
			{"oom_score_adj", e.OOMScoreAdj},
			{"trigger_pid", e.TriggerPID},
			{"total_vm_pages", e.TotalVMPages},
			{"anon_rss_pages", e.AnonRSSPages},
			{"file_rss_pages", e.FileRSSPages},
			{"shmem_rss_pages", e.ShmemRSSPages},
			{"rss_bytes", e.RSSBytes()},
			{"memcg_level", e.MemcgLevel},
			{"memcg_hierarchy", e.MemcgHierarchy},
		}
	case *Reclaim:
		r.Fields = []Field{
			{"type", e.Type.String()},
			{"order", e.Order},
			{"gfp_flags", e.GFPFlags},
			{"nid", e.NID},
			{"duration_ns", e.DurationNS},
			{"nr_reclaimed", e.NrReclaimed},
		}
	case *Cgroup:
		r.Fields = []Field{
			{"id", e.ID},
			{"parent_id", e.ParentID},
			{"hierarchy_id", e.HierarchyID},
			{"level", e.Level},
			{"path", e.Path},
		}
	case *OOMScoreAdj:
		r.Fields = []Field{
			{"comm", e.Comm},
			{"oom_score_adj", e.OOMScoreAdj},
			{"writer_pid", e.WriterPID},
		}
	case *Exit:
		r.Fields = []Field{
			{"comm", e.Comm},
			{"exit_code", e.ExitCode},
			{"exit_status", e.Status()},
			{"signal", e.Signal()},
			{"core_dumped", e.CoreDumped()},
		}
	case *Bench:
		r.Fields = []Field{
			{"seq", e.Seq},
			{"batch", e.Batch},
		}
	}
	return r
}

// MarshalJSON writes r as one flat JSON object. It fails when a Field's key
// repeats a common key or another Field's, or when a value does not marshal.
func (r Record) MarshalJSON() ([]byte, error) {
	type common Record // without this method
	b, err := json.Marshal(common(r))
	if err != nil {
		return nil, fmt.Errorf("marshal %s record: %w", r.Kind, err)
	}
	if len(r.Fields) == 0 {
		return b, nil
	}
	b = bytes.TrimSuffix(b, []byte("}"))
	for i, f := range r.Fields {
		if isCommonKey(f.Key) || hasKey(r.Fields[:i], f.Key) {
			return nil, fmt.Errorf("marshal %s record: duplicate key %q", r.Kind, f.Key)
		}
		k, err := json.Marshal(f.Key)
		if err != nil {
			return nil, fmt.Errorf("marshal %s record key %q: %w", r.Kind, f.Key, err)
		}
		v, err := json.Marshal(f.Value)
		if err != nil {
			return nil, fmt.Errorf("marshal %s record field %s: %w", r.Kind, f.Key, err)
		}
		b = append(b, ',')
		b = append(b, k...)
		b = append(b, ':')
		b = append(b, v...)
	}
	return append(b, '}'), nil
}

// isCommonKey reports whether key is one of Record's own JSON keys.
func isCommonKey(key string) bool {
	switch key {
	case "kind", "time", "ts_ns", "pid", "tid", "cpu", "memcg_id", "cgroup_id", "cgroup_path", "flags":
		return true
	}
	return false
}

func hasKey(fields []Field, key string) bool {
	for _, f := range fields {
		if f.Key == key {
			return true
		}
	}
	return false
}
