package cgstat

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/psi"
)

// ownV1 is the memory cgroup of the machine the v1 fixtures were copied
// from, beneath testdata/hybrid/memory.
const ownV1 = "process_api/7d3cf0fc62f4b1d28547abffe889b217"

func readFixture(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantParseError checks that err is a *ParseError at line matching
// ErrMalformed whose message contains msg.
func wantParseError(t *testing.T, err error, line int, msg string) {
	t.Helper()
	var pe *ParseError
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v, want a *ParseError", err)
	}
	if !errors.Is(err, ErrMalformed) {
		t.Errorf("error %v does not match ErrMalformed", err)
	}
	if pe.Line != line || !strings.Contains(pe.Msg, msg) {
		t.Errorf("error = %v, want line %d and a message containing %q", err, line, msg)
	}
}

const allStatFields = FieldShmem | FieldWorkingsetRefaultAnon | FieldWorkingsetRefaultFile | FieldWorkingsetActivate | FieldWorkingsetRestore

func TestParseMemoryStat(t *testing.T) {
	tests := []struct {
		name    string
		v1      bool
		content []byte
		want    Memory
		errLine int    // > 0: want a ParseError at this line
		errMsg  string // part of its message
	}{
		{
			name:    "a 6.x cgroup2 memory.stat gives every figure and sums the anon and file workingset counters",
			content: readFixture(t, "v2/pod/memory.stat"),
			want: Memory{
				Anon: 73400320, File: 31457280, ActiveFile: 10485760, InactiveFile: 20971520, Shmem: 1048576,
				WorkingsetRefaultAnon: 12, WorkingsetRefaultFile: 3401, WorkingsetActivate: 1203, WorkingsetRestore: 481,
				Fields: allStatFields,
			},
		},
		{
			name:    "a 5.8 cgroup2 memory.stat reports its unsplit refaults as file refaults and no anon refaults",
			content: readFixture(t, "v2-5.8/pod/memory.stat"),
			want: Memory{
				Anon: 73400320, File: 31457280, ActiveFile: 10485760, InactiveFile: 20971520, Shmem: 1048576,
				WorkingsetRefaultFile: 3401, WorkingsetActivate: 1200, WorkingsetRestore: 480,
				Fields: FieldShmem | FieldWorkingsetRefaultFile | FieldWorkingsetActivate | FieldWorkingsetRestore,
			},
		},
		{
			name:    "a real v1 memory.stat uses the hierarchical total_ keys and has no activate or restore",
			v1:      true,
			content: readFixture(t, "hybrid/memory/"+ownV1+"/memory.stat"),
			want: Memory{
				Anon: 2166784, File: 11825152, ActiveFile: 7618560, InactiveFile: 4202496,
				WorkingsetRefaultFile: 2894,
				Fields:                FieldShmem | FieldWorkingsetRefaultAnon | FieldWorkingsetRefaultFile,
			},
		},
		{
			name:    "a v1 memory.stat with only the cgroup's own keys lacks the hierarchical ones",
			v1:      true,
			content: []byte("cache 1\nrss 2\nactive_file 3\ninactive_file 4\n"),
			errLine: 5, errMsg: `no "total_rss" line`,
		},
		{
			name:    "a value that is not a number is malformed and names its line",
			content: []byte("anon 1\nfile 12x\nactive_file 0\ninactive_file 0\n"),
			errLine: 2, errMsg: `value of "file" is not an unsigned integer: "12x"`,
		},
		{
			name:    "a negative value is malformed",
			content: []byte("anon -1\n"),
			errLine: 1, errMsg: "not an unsigned integer",
		},
		{
			name:    "a value beyond 64 bits is malformed",
			content: []byte("anon 18446744073709551616\n"),
			errLine: 1, errMsg: "not an unsigned integer",
		},
		{
			name:    "a key without a value is malformed",
			content: []byte("anon 1\nfile\n"),
			errLine: 2, errMsg: `want "key value"`,
		},
		{
			name:    "a key with an empty value is malformed",
			content: []byte("anon \n"),
			errLine: 1, errMsg: `want "key value"`,
		},
		{
			name:    "a last line without its newline is a truncated read",
			content: []byte("anon 1\nfile 2\nactive_file 3\ninactive_file 4"),
			errLine: 4, errMsg: "truncated",
		},
		{
			name:    "a file without inactive_file misses a required key",
			content: []byte("anon 1\nfile 2\nactive_file 3\n"),
			errLine: 4, errMsg: `no "inactive_file" line`,
		},
		{
			name:    "an empty file misses the first required key",
			content: []byte{},
			errLine: 1, errMsg: `no "anon" line`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Memory
			var err error
			if tc.v1 {
				err = parseMemoryStatV1(tc.content, "memory.stat", &m)
			} else {
				err = parseMemoryStatV2(tc.content, "memory.stat", &m)
			}
			if tc.errLine > 0 {
				wantParseError(t, err, tc.errLine, tc.errMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m != tc.want {
				t.Errorf("got  %+v\nwant %+v", m, tc.want)
			}
		})
	}
}

func TestParseSingle(t *testing.T) {
	tests := []struct {
		name     string
		content  string
		allowMax bool
		want     uint64
		errMsg   string
	}{
		{name: "a number is read", content: "33554432\n", want: 33554432},
		{name: "zero is a value, not a missing one", content: "0\n", want: 0},
		{name: "max is Unlimited where a limit may be max", content: "max\n", allowMax: true, want: Unlimited},
		{name: "max is malformed where only numbers belong", content: "max\n", errMsg: `not an unsigned integer: "max"`},
		{name: "an empty file is malformed", content: "", errMsg: "empty"},
		{name: "a number without its newline is a truncated read", content: "4096", errMsg: "truncated"},
		{name: "a negative number is malformed", content: "-1\n", errMsg: "not an unsigned integer"},
		{name: "leading blanks are malformed", content: " 1\n", errMsg: "not an unsigned integer"},
		{name: "two lines are malformed", content: "1\n2\n", errMsg: "not an unsigned integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSingle([]byte(tc.content), "memory.max", tc.allowMax)
			if tc.errMsg != "" {
				wantParseError(t, err, 1, tc.errMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

func TestV1Limit(t *testing.T) {
	tests := []struct {
		name string
		in   uint64
		want uint64
	}{
		{name: "no limit with 4 KiB pages is Unlimited", in: 9223372036854771712, want: Unlimited},
		{name: "no limit with 64 KiB pages is Unlimited", in: 9223372036854710272, want: Unlimited},
		{name: "a real limit is kept", in: 32 << 20, want: 32 << 20},
		{name: "a limit of 1 TiB is kept", in: 1 << 40, want: 1 << 40},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := v1Limit(tc.in); got != tc.want {
				t.Errorf("v1Limit(%d) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseMemoryEvents(t *testing.T) {
	tests := []struct {
		name    string
		content []byte
		want    MemoryEvents
		fields  Fields
		errLine int
		errMsg  string
	}{
		{
			name:    "a pod after an OOM kill counts high, max, oom and oom_kill",
			content: readFixture(t, "v2/limited/memory.events"),
			want:    MemoryEvents{High: 1532, Max: 74, OOM: 1, OOMKill: 1},
			fields:  FieldEventsLow | FieldEventsHigh | FieldEventsOOM | FieldEventsOOMGroupKill,
		},
		{
			name:    "a kernel before 5.17 has no oom_group_kill and does not report it",
			content: readFixture(t, "v2-5.8/pod/memory.events"),
			fields:  FieldEventsLow | FieldEventsHigh | FieldEventsOOM,
		},
		{
			name:    "a file without oom_kill misses a required key",
			content: []byte("low 0\nhigh 0\nmax 0\noom 0\n"),
			errLine: 5, errMsg: `no "oom_kill" line`,
		},
		{
			name:    "a non-number count is malformed",
			content: []byte("low 0\nhigh x\n"),
			errLine: 2, errMsg: `value of "high"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Memory
			err := parseMemoryEventsV2(tc.content, "memory.events", &m)
			if tc.errLine > 0 {
				wantParseError(t, err, tc.errLine, tc.errMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Events != tc.want || m.Fields != tc.fields {
				t.Errorf("got %+v fields %b, want %+v fields %b", m.Events, m.Fields, tc.want, tc.fields)
			}
		})
	}
}

func TestParseOOMControl(t *testing.T) {
	tests := []struct {
		name     string
		content  []byte
		wantKill uint64
		wantOOM  bool
		errLine  int
		errMsg   string
	}{
		{
			name:     "a real sandbox after two OOM kills counts them",
			content:  readFixture(t, "hybrid/memory/"+ownV1+"/pod/memory.oom_control"),
			wantKill: 2,
		},
		{
			name:    "a cgroup in OOM with the killer disabled is under_oom",
			content: []byte("oom_kill_disable 1\nunder_oom 1\noom_kill 0\n"),
			wantOOM: true,
		},
		{
			name:    "under_oom other than 0 or 1 is malformed",
			content: []byte("oom_kill_disable 0\nunder_oom 2\noom_kill 0\n"),
			errLine: 2, errMsg: "neither 0 nor 1",
		},
		{
			name:    "a kernel before 4.13 has no oom_kill, which is required",
			content: []byte("oom_kill_disable 0\nunder_oom 0\n"),
			errLine: 3, errMsg: `no "oom_kill" line`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m Memory
			err := parseOOMControlV1(tc.content, "memory.oom_control", &m)
			if tc.errLine > 0 {
				wantParseError(t, err, tc.errLine, tc.errMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Events.OOMKill != tc.wantKill || m.UnderOOM != tc.wantOOM || !m.Fields.Has(FieldUnderOOM) {
				t.Errorf("got oom_kill %d under_oom %v fields %b", m.Events.OOMKill, m.UnderOOM, m.Fields)
			}
		})
	}
}

func TestWorkingSet(t *testing.T) {
	tests := []struct {
		name string
		m    Memory
		want uint64
	}{
		{name: "working set is usage less the inactive page cache", m: Memory{Usage: 100 << 20, InactiveFile: 30 << 20, ActiveFile: 10 << 20}, want: 70 << 20},
		{name: "an inactive page cache above usage floors the working set at zero", m: Memory{Usage: 10, InactiveFile: 11}, want: 0},
		{name: "no page cache leaves the whole usage", m: Memory{Usage: 4096}, want: 4096},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.WorkingSet(); got != tc.want {
				t.Errorf("WorkingSet() = %d, want %d", got, tc.want)
			}
		})
	}
}

// psiStats is the psi.Stats of a file with both lines.
func psiStats(some, full psi.Line) psi.Stats {
	return psi.Stats{Some: some, Full: full, HasSome: true, HasFull: true}
}

func TestParseCounter(t *testing.T) {
	// As Linux 6.1 writes memory.events.local.
	const real = "low 0\nhigh 1234\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n"
	tests := []struct {
		name    string
		in      string
		key     string
		want    uint64
		wantErr string
	}{
		{name: "the high counter is read", in: real, key: "high", want: 1234},
		{name: "the last key is read", in: real, key: "oom_group_kill", want: 0},
		{name: "a key is read before a later malformed line", in: "high 5\nbad\n", key: "high", want: 5},
		{name: "a file without a final newline is a short read", in: "high 5", key: "high", wantErr: "line 1: truncated"},
		{name: "a missing key is malformed", in: "low 0\n", key: "high", wantErr: `line 2: no "high" line`},
		{name: "a non-number is malformed", in: "low 0\nhigh x\n", key: "high", wantErr: "line 2"},
		{name: "a negative number is malformed", in: "high -1\n", key: "high", wantErr: "line 1"},
		{name: "a line without a value is malformed", in: "low 0\nhigh\n", key: "high", wantErr: "line 2"},
		{name: "an empty file is malformed", in: "", key: "high", wantErr: `no "high" line`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCounter([]byte(tt.in), tt.key, "/x/memory.events.local")
			if tt.wantErr != "" {
				var pe *ParseError
				if !errors.Is(err, ErrMalformed) || !errors.As(err, &pe) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "/x/memory.events.local") {
					t.Errorf("err = %v, want a *ParseError matching ErrMalformed naming the file and %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("= %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want uint64
		ok   bool
	}{
		{"a byte count with a newline parses", "67108864\n", 67108864, true},
		{"zero parses", "0\n", 0, true},
		{"max is not a byte count", "max\n", 0, false},
		{"a short read without the newline is malformed", "6710\n"[:4], 0, false},
		{"an empty file is malformed", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseValue([]byte(tt.in), "f")
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("= %d, %v", got, err)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("err %v does not match ErrMalformed", err)
			}
		})
	}
}
