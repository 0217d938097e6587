package tripwire

import (
	"errors"
	"strings"
	"testing"
)

func TestParseEventCounter(t *testing.T) {
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
		{name: "a file without a final newline parses", in: "high 5", key: "high", want: 5},
		{name: "a missing key is malformed", in: "low 0\n", key: "high", wantErr: `no "high" line`},
		{name: "a non-number is malformed", in: "low 0\nhigh x\n", key: "high", wantErr: "line 2"},
		{name: "a negative number is malformed", in: "high -1\n", key: "high", wantErr: "line 1"},
		{name: "a line without a value is malformed", in: "low 0\nhigh\n", key: "high", wantErr: "line 2"},
		{name: "an empty file is malformed", in: "", key: "high", wantErr: "no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEventCounter([]byte(tt.in), tt.key, "/x/memory.events.local")
			if tt.wantErr != "" {
				if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "/x/memory.events.local") {
					t.Errorf("err = %v, want ErrMalformed naming the file and %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("= %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestParseUint(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want uint64
		ok   bool
	}{
		{"a byte count with a newline parses", "67108864\n", 67108864, true},
		{"zero parses", "0\n", 0, true},
		{"max is not a byte count", "max\n", 0, false},
		{"an empty file is malformed", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseUint([]byte(tt.in), "f")
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("= %d, %v", got, err)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("err %v does not match ErrMalformed", err)
			}
		})
	}
}
