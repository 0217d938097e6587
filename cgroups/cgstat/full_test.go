package cgstat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/psi"
)

func TestFullReadsFixtures(t *testing.T) {
	hybrid := testdataDir(t, "hybrid")
	v2 := testdataDir(t, "v2")
	v1PodMemory := &Memory{
		Usage: 417792, Limit: 32 << 20, High: Unlimited,
		Events: MemoryEvents{OOMKill: 2},
		Fields: FieldUnderOOM,
	}
	tests := []struct {
		name string
		full func(t *testing.T) (*Full, error)
		want *Full
	}{
		{
			name: "a hybrid pod reads each v1 controller at its own path and prefers them to cgroup2",
			full: func(t *testing.T) (*Full, error) {
				l := hybridLayout(hybrid)
				return NewStater(l).Full(resolve(t, l, "pod")...)
			},
			want: &Full{
				Memory:     v1PodMemory,
				CPU:        &CPU{Usage: 1987654321, User: 1500 * time.Millisecond, System: 420 * time.Millisecond},
				Throttling: &Throttling{Periods: 1200, ThrottledPeriods: 37, ThrottledTime: 812345678},
				IO:         &IO{Devices: []IODevice{{Major: 254, Minor: 0, ReadBytes: 4194304, WriteBytes: 1048576, ReadOps: 96, WriteOps: 12}}},
				Pids:       &Pids{Current: 7, Max: Unlimited},
			},
		},
		{
			name: "a hybrid sandbox in memory and cgroup2 only takes CPU usage from cgroup2 and reports nothing else it lacks",
			full: func(t *testing.T) (*Full, error) {
				l := hybridLayout(hybrid, "memory")
				return NewStater(l).Full(resolve(t, l, "pod")...)
			},
			want: &Full{
				Memory: v1PodMemory,
				CPU:    &CPU{Usage: 32369 * time.Microsecond, System: 32369 * time.Microsecond},
			},
		},
		{
			name: "a cgroup2 pod reads every enabled controller and its memory PSI",
			full: func(t *testing.T) (*Full, error) {
				l := v2Layout(v2)
				return NewStater(l).Full(resolve(t, l, "pod")...)
			},
			want: &Full{
				Memory: &Memory{
					Usage: 106954752, Limit: Unlimited, High: Unlimited,
					Anon: 73400320, File: 31457280, ActiveFile: 10485760, InactiveFile: 20971520, Shmem: 1048576,
					PSI: psiStats(
						psi.Line{Avg10: 1.25, Avg60: 0.40, Avg300: 0.08, Total: 123456 * time.Microsecond},
						psi.Line{Avg10: 0.50, Avg60: 0.10, Avg300: 0.02, Total: 65432 * time.Microsecond},
					),
					Fields: FieldShmem | FieldEventsLow | FieldEventsHigh | FieldEventsOOM | FieldPSI,
				},
				CPU:        &CPU{Usage: 8123456 * time.Microsecond, User: 6 * time.Second, System: 2123456 * time.Microsecond},
				Throttling: &Throttling{Periods: 4000, ThrottledPeriods: 120, ThrottledTime: 3456789 * time.Microsecond},
				IO: &IO{Devices: []IODevice{
					{Major: 8, Minor: 0, ReadBytes: 4194304, WriteBytes: 1048576, ReadOps: 96, WriteOps: 12},
					{Major: 254, Minor: 16, ReadBytes: 8192, ReadOps: 2},
				}},
				Pids: &Pids{Current: 7, Max: Unlimited},
			},
		},
		{
			name: "a cgroup2 pod without the io controller has no IO section",
			full: func(t *testing.T) (*Full, error) {
				l := v2Layout(v2)
				return NewStater(l).Full(resolve(t, l, "limited")...)
			},
			want: &Full{
				Memory: &Memory{
					Usage: 33230848, Limit: 33554432, High: Unlimited,
					Anon: 73400320, File: 31457280, ActiveFile: 10485760, InactiveFile: 20971520, Shmem: 1048576,
					Events: MemoryEvents{High: 1532, Max: 74, OOM: 1, OOMKill: 1},
					PSI: psiStats(
						psi.Line{Avg10: 37.51, Avg60: 9.02, Avg300: 1.97, Total: 4512345 * time.Microsecond},
						psi.Line{Avg10: 30.10, Avg60: 7.44, Avg300: 1.61, Total: 3829011 * time.Microsecond},
					),
					Fields: FieldShmem | FieldEventsLow | FieldEventsHigh | FieldEventsOOM | FieldPSI,
				},
				CPU:        &CPU{Usage: 51234 * time.Microsecond, User: 1234 * time.Microsecond, System: 50000 * time.Microsecond},
				Throttling: &Throttling{Periods: 10, ThrottledPeriods: 2, ThrottledTime: 1500 * time.Microsecond},
				Pids:       &Pids{Current: 3, Max: 100},
			},
		},
		{
			name: "a v1 controller whose files are missing leaves only its own section nil",
			full: func(t *testing.T) (*Full, error) {
				root := copyTree(t, "hybrid")
				if err := os.Remove(filepath.Join(root, "pids/pod/pids.current")); err != nil {
					t.Fatal(err)
				}
				l := hybridLayout(root, "pids", "cpuacct")
				return NewStater(l).Full(resolve(t, l, "pod")...)
			},
			want: &Full{
				CPU: &CPU{Usage: 1987654321, User: 1500 * time.Millisecond, System: 420 * time.Millisecond},
			},
		},
		{
			name: "a v1 pids.max of 0 stays a limit of 0",
			full: func(t *testing.T) (*Full, error) {
				root := copyTree(t, "hybrid")
				if err := os.WriteFile(filepath.Join(root, "pids/pod/pids.max"), []byte("0\n"), 0o644); err != nil {
					t.Fatal(err)
				}
				l := hybridLayout(root, "pids")
				return NewStater(l).Full(resolve(t, l, "pod")...)
			},
			want: &Full{
				CPU:  &CPU{Usage: 32369 * time.Microsecond, System: 32369 * time.Microsecond},
				Pids: &Pids{Current: 7, Max: 0},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.full(t)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %s\nwant %s", dump(got), dump(tc.want))
			}
		})
	}
}

func TestFullErrors(t *testing.T) {
	t.Run("a cgroup none of whose directories exists is gone", func(t *testing.T) {
		l := hybridLayout(testdataDir(t, "hybrid"))
		_, err := NewStater(l).Full(resolve(t, l, "no-such-pod")...)
		if !errors.Is(err, ErrGone) {
			t.Errorf("error = %v, want ErrGone", err)
		}
	})
	t.Run("a malformed v1 file fails the reading", func(t *testing.T) {
		root := copyTree(t, "hybrid")
		if err := os.WriteFile(filepath.Join(root, "cpu/pod/cpu.stat"), []byte("nr_periods many\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		l := hybridLayout(root, "cpu")
		_, err := NewStater(l).Full(resolve(t, l, "pod")...)
		if err == nil || errors.Is(err, ErrGone) {
			t.Errorf("error = %v, want a parse failure", err)
		}
	})
}

func dump(f *Full) string {
	if f == nil {
		return "<nil>"
	}
	s := "{"
	add := func(name string, v any) {
		s += name + ":"
		if reflect.ValueOf(v).IsNil() {
			s += "nil "
			return
		}
		s += fmt.Sprintf("%+v ", reflect.ValueOf(v).Elem().Interface())
	}
	add("Memory", f.Memory)
	add("CPU", f.CPU)
	add("Throttling", f.Throttling)
	add("IO", f.IO)
	add("Pids", f.Pids)
	return s + "}"
}
