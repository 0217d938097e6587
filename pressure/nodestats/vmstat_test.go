package nodestats

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadVmstatFixtures(t *testing.T) {
	tests := []struct {
		name string
		file string
		want map[VmstatKey]uint64 // keys not listed must be absent
	}{
		{
			name: "this machine's 6.18 vmstat has every counter, khugepaged and anon refaults included",
			file: "vmstat",
			want: map[VmstatKey]uint64{
				VmstatOOMKill: 193, VmstatPgMajFault: 6814,
				VmstatPgscanKswapd: 0, VmstatPgscanDirect: 0, VmstatPgscanKhugepaged: 0,
				VmstatPgstealKswapd: 0, VmstatPgstealDirect: 0, VmstatPgstealKhugepaged: 0,
				VmstatWorkingsetRefaultAnon: 0, VmstatWorkingsetRefaultFile: 865148,
				VmstatAllocStall: 0,
			},
		},
		{
			name: "a 5.4 kernel's workingset_refault counts as file refaults and its four allocstall zones are summed",
			file: "vmstat-5.4",
			want: map[VmstatKey]uint64{
				VmstatOOMKill: 3, VmstatPgMajFault: 71231,
				VmstatPgscanKswapd: 5298004, VmstatPgscanDirect: 9034,
				VmstatPgstealKswapd: 4720091, VmstatPgstealDirect: 8122,
				VmstatWorkingsetRefaultFile: 3829112,
				VmstatAllocStall:            17 + 25,
			},
		},
		{
			name: "a 3.10 kernel has per-zone scan counters, which are absent, and a single allocstall",
			file: "vmstat-3.10",
			want: map[VmstatKey]uint64{
				VmstatPgMajFault: 9912, VmstatWorkingsetRefaultFile: 0, VmstatAllocStall: 7,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ReadVmstat(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			for k := range numVmstatKeys {
				want, present := tt.want[k]
				got, has := v.Get(k)
				switch {
				case has != present:
					t.Errorf("%s: present %v, want %v", k, has, present)
				case has && got != want:
					t.Errorf("%s = %d, want %d", k, got, want)
				}
			}
		})
	}
}

func TestParseVmstatRejectsMalformedFiles(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		line    int
		message string
	}{
		{"a value with letters is garbage", "vmstat-garbage-value", 97, "not a \"name value\" line"},
		{"two spaces between name and value is garbage", "vmstat-two-spaces", 125, "not a \"name value\" line"},
		{"a file without pgmajfault lacks the required counter", "vmstat-missing-pgmajfault", 0, "missing required counter pgmajfault"},
		{"workingset_refault beside workingset_refault_file is a duplicate", "vmstat-duplicate-refault", 193, "duplicate counter workingset_refault_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", tt.file)
			_, err := ReadVmstat(path)
			checkParseError(t, err, path, tt.line, tt.message)
		})
	}
}

func TestVmstatParsingEdgeCases(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		wantErr string
	}{
		{"a last line without a newline still counts", "pgmajfault 5", ""},
		{"an allocstall sum that overflows is malformed", "pgmajfault 5\nallocstall_dma 18446744073709551615\nallocstall_normal 1\n", "overflows"},
		{"a line without a value is garbage", "pgmajfault 5\noom_kill\n", "not a \"name value\" line"},
		{"a line starting with a space is garbage", "pgmajfault 5\n oom_kill 1\n", "not a \"name value\" line"},
		{"an empty file lacks pgmajfault", "", "missing required counter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ParseVmstat("fixture", []byte(tt.text))
			if tt.wantErr == "" {
				if err != nil || v.PgMajFault != 5 || v.Has(VmstatOOMKill) {
					t.Fatalf("got %+v, %v", v, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v, want ErrMalformed saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestVmstatKeyNamesMapBackToTheirKeys(t *testing.T) {
	for k := range numVmstatKeys {
		var v Vmstat
		if v.field(k) == nil {
			t.Errorf("%s has no field", k)
		}
		if k == VmstatAllocStall {
			continue // a sum, not one counter
		}
		got, ok := vmstatKeyOf([]byte(k.String()))
		if !ok || got != k {
			t.Errorf("%s parses as %v, %v", k, got, ok)
		}
	}
	if s := numVmstatKeys.String(); !strings.HasPrefix(s, "VmstatKey(") {
		t.Errorf("an unknown key prints as %q", s)
	}
}

func TestReadVmstatOfAMissingFileIsUnsupported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vmstat")
	if _, err := ReadVmstat(path); !errors.Is(err, ErrUnsupported) {
		t.Errorf("ReadVmstat: %v, want ErrUnsupported", err)
	}
	if _, err := OpenVmstat(path); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OpenVmstat: %v, want ErrUnsupported", err)
	}
}

func TestVmstatParsingDoesNotAllocate(t *testing.T) {
	b, err := os.ReadFile("testdata/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseVmstat("testdata/vmstat", b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseVmstat allocates %v times", n)
	}
	r, err := OpenVmstat("testdata/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.Read(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("VmstatReader.Read allocates %v times", n)
	}
}
