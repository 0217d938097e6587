package event

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// realistic returns one event of each kind with plausible values, for the
// JSON and human forms.
func realistic() map[string]Event {
	h := func(k Kind, f Flags) Header {
		return Header{Kind: k, Version: 1, Flags: f, CPU: 1, PID: 123, TID: 124,
			TimestampNS: 5_000_000_123, MemcgID: 4567, CgroupID: 8910}
	}
	return map[string]Event{
		"oom_kill": &OOMKill{Header: h(KindOOMKill, 0), Comm: "hog", OOMScoreAdj: 0, TriggerPID: 120,
			TotalVMPages: 20000, AnonRSSPages: 16000, FileRSSPages: 300, ShmemRSSPages: 84,
			MemcgLevel: 3, MemcgHierarchy: 0},
		"reclaim": &Reclaim{Header: h(KindReclaim, 0), Type: ReclaimMemcg, Order: 0, GFPFlags: 0xcc0,
			NID: 0, DurationNS: 1_500_000, NrReclaimed: 32},
		"kswapd": &Reclaim{Header: Header{Kind: KindReclaim, Version: 1, PID: 80, TID: 80},
			Type: ReclaimKswapd, Order: 2, GFPFlags: 0, NID: 1, DurationNS: 250_000_000, NrReclaimed: 70000},
		"cgroup_mkdir": &Cgroup{Header: h(KindCgroupMkdir, FlagClassicTP), ID: 777, ParentID: 776,
			HierarchyID: 0, Level: 2, Path: "/kubepods/pod a"},
		"cgroup_rmdir": &Cgroup{Header: h(KindCgroupRmdir, 0), ID: 777, ParentID: 776, HierarchyID: 5,
			Level: 2, Path: "/kubepods/poda"},
		"oom_score_adj": &OOMScoreAdj{Header: h(KindOOMScoreAdj, FlagCgroupOfCurrent|FlagClassicTP),
			Comm: "runc:[2:INIT]", OOMScoreAdj: -998, WriterPID: 99},
		"exit":        &Exit{Header: h(KindExit, 0), Comm: "sh", ExitCode: 0x8b},
		"exit_status": &Exit{Header: h(KindExit, 0), Comm: "sh", ExitCode: 0x0200},
		"bench":       &Bench{Header: h(KindBench, 0), Seq: 42, Batch: 7},
	}
}

func TestToRecordJSON(t *testing.T) {
	common := []string{"kind", "time", "ts_ns", "pid", "tid", "cpu", "memcg_id", "cgroup_id", "cgroup_path"}
	wall := time.Date(2025, 11, 29, 21, 34, 5, 123456789, time.UTC)
	cases := []struct {
		name  string
		event string
		path  string
		keys  []string // after the common ones, in order
		want  map[string]string
	}{
		{"an oom_kill record has the victim's memory and rss in bytes", "oom_kill", "/x/y",
			[]string{"comm", "oom_score_adj", "trigger_pid", "total_vm_pages", "anon_rss_pages", "file_rss_pages",
				"shmem_rss_pages", "rss_bytes", "memcg_level", "memcg_hierarchy"},
			map[string]string{"kind": `"oom_kill"`, "comm": `"hog"`, "rss_bytes": "67108864", "cgroup_path": `"/x/y"`,
				"time": `"2025-11-29T21:34:05.123456789Z"`, "ts_ns": "5000000123", "memcg_id": "4567", "cgroup_id": "8910"}},
		{"a reclaim record names its type", "reclaim", "/x",
			[]string{"type", "order", "gfp_flags", "nid", "duration_ns", "nr_reclaimed"},
			map[string]string{"kind": `"reclaim"`, "type": `"memcg"`, "gfp_flags": "3264", "duration_ns": "1500000"}},
		{"a cgroup_mkdir record has the new cgroup and the flags", "cgroup_mkdir", "/",
			[]string{"flags", "id", "parent_id", "hierarchy_id", "level", "path"},
			map[string]string{"kind": `"cgroup_mkdir"`, "flags": `["classic_tp"]`, "path": `"/kubepods/pod a"`, "id": "777"}},
		{"a cgroup_rmdir record has the same fields", "cgroup_rmdir", "/",
			[]string{"id", "parent_id", "hierarchy_id", "level", "path"},
			map[string]string{"kind": `"cgroup_rmdir"`, "hierarchy_id": "5"}},
		{"an oom_score_adj record has the writer", "oom_score_adj", "/x",
			[]string{"flags", "comm", "oom_score_adj", "writer_pid"},
			map[string]string{"oom_score_adj": "-998", "writer_pid": "99", "flags": `["cgroup_of_current","classic_tp"]`}},
		{"an exit record splits the wait status", "exit", "/x",
			[]string{"comm", "exit_code", "exit_status", "signal", "core_dumped"},
			map[string]string{"exit_code": "139", "signal": "11", "exit_status": "0", "core_dumped": "true"}},
		{"a bench record has seq and batch", "bench", "/x",
			[]string{"seq", "batch"},
			map[string]string{"seq": "42", "batch": "7"}},
		{"an unknown cgroup path is omitted", "bench", "",
			[]string{"seq", "batch"},
			map[string]string{"seq": "42"}},
	}
	events := realistic()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(ToRecord(events[c.event], wall, c.path))
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if bytes.IndexByte(b, '\n') >= 0 {
				t.Errorf("JSON spans lines: %s", b)
			}
			keys, values := jsonObject(t, b)
			wantKeys := common
			if c.path == "" {
				wantKeys = common[:len(common)-1]
			}
			wantKeys = append(append([]string(nil), wantKeys...), c.keys...)
			if strings.Join(keys, " ") != strings.Join(wantKeys, " ") {
				t.Errorf("keys:\n got %v\nwant %v\nin %s", keys, wantKeys, b)
			}
			for k, v := range c.want {
				if values[k] != v {
					t.Errorf("%s = %s, want %s", k, values[k], v)
				}
			}
		})
	}
}

// jsonObject returns the keys of the flat JSON object b in order, and each
// key's raw value.
func jsonObject(t *testing.T, b []byte) ([]string, map[string]string) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %s", b)
	}
	var keys []string
	values := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%v in %s", err, b)
		}
		k := tok.(string)
		if _, dup := values[k]; dup {
			t.Errorf("duplicate key %q in %s", k, b)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("%v in %s", err, b)
		}
		keys = append(keys, k)
		values[k] = string(raw)
	}
	return keys, values
}

func TestRecordRejectsDuplicateKeys(t *testing.T) {
	for _, c := range []struct {
		name   string
		fields []Field
	}{
		{"a field named like a common key is rejected", []Field{{"pid", 1}}},
		{"a field named twice is rejected", []Field{{"a", 1}, {"a", 2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := Record{Kind: "x", Fields: c.fields}
			if b, err := json.Marshal(r); err == nil {
				t.Errorf("Marshal = %s, want an error", b)
			}
		})
	}
}

func TestHuman(t *testing.T) {
	events := realistic()
	cases := []struct {
		name  string
		event string
		path  string
		want  string
	}{
		{"an oom_kill line has the victim and its rss", "oom_kill", "/x/y",
			"oom_kill pid=123 comm=hog memcg=4567 cgroup=/x/y adj=0 rss=64.0MiB trigger_pid=120"},
		{"a reclaim line has the type and the duration", "reclaim", "/x/y",
			"reclaim pid=123 memcg=4567 cgroup=/x/y type=memcg dur=1.5ms nr_reclaimed=32 order=0 gfp=0xcc0"},
		{"a kswapd line has the node and no cgroup path", "kswapd", "",
			"reclaim pid=80 memcg=0 cgroup_id=0 type=kswapd dur=250ms nr_reclaimed=70000 order=2 gfp=0x0 nid=1"},
		{"a cgroup_mkdir line quotes a path with a space and shows flags", "cgroup_mkdir", "/system.slice",
			`cgroup_mkdir pid=123 memcg=4567 cgroup=/system.slice id=777 parent_id=776 hierarchy=0 level=2 path="/kubepods/pod a" flags=classic_tp`},
		{"an oom_score_adj line has the new value and the writer", "oom_score_adj", "/x",
			"oom_score_adj pid=123 comm=runc:[2:INIT] memcg=4567 cgroup=/x adj=-998 writer_pid=99 flags=cgroup_of_current,classic_tp"},
		{"an exit line by signal shows the core dump", "exit", "/x",
			"exit pid=123 comm=sh memcg=4567 cgroup=/x signal=11 core_dumped=true"},
		{"an exit line by exit() shows the status", "exit_status", "/x",
			"exit pid=123 comm=sh memcg=4567 cgroup=/x status=2"},
		{"a bench line has seq, batch and cpu", "bench", "/x",
			"bench pid=123 memcg=4567 cgroup=/x seq=42 batch=7 cpu=1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Human(events[c.event], c.path); got != c.want {
				t.Errorf("Human:\n got %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestHumanQuoting(t *testing.T) {
	cases := []struct {
		name string
		comm string
		want string
	}{
		{"a plain comm is bare", "nginx", "comm=nginx "},
		{"an empty comm is quoted", "", `comm="" `},
		{"a newline cannot split the line", "a\nb", `comm="a\nb" `},
		{"an equals sign is quoted", "a=b", `comm="a=b" `},
		{"invalid UTF-8 is escaped", "\xff", `comm="\xff" `},
		{"printable UTF-8 is bare", "naïve", "comm=naïve "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Human(&Exit{Header: Header{Kind: KindExit}, Comm: c.comm}, "/")
			if !strings.Contains(got, " "+c.want) || strings.ContainsAny(got, "\n\r") {
				t.Errorf("Human = %q, want it to contain %q", got, c.want)
			}
		})
	}
}

func TestAppendBytesIEC(t *testing.T) {
	for n, want := range map[uint64]string{
		0:          "0B",
		1023:       "1023B",
		1024:       "1.0KiB",
		1536:       "1.5KiB",
		64 << 20:   "64.0MiB",
		3 << 30:    "3.0GiB",
		^uint64(0): "16.0EiB",
	} {
		if got := string(appendBytesIEC(nil, n)); got != want {
			t.Errorf("appendBytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}
