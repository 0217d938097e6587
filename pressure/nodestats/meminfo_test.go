package nodestats

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// thisMachineMeminfo is testdata/meminfo, copied from a development
// machine (Linux 6.18), in kB as the kernel wrote it.
var thisMachineMeminfo = map[MeminfoKey]uint64{
	MeminfoMemTotal:     24683652,
	MeminfoMemFree:      23818368,
	MeminfoMemAvailable: 24233996,
	MeminfoBuffers:      12328,
	MeminfoCached:       568756,
	MeminfoSwapCached:   0,
	MeminfoActive:       325700,
	MeminfoInactive:     349392,
	MeminfoActiveAnon:   1552,
	MeminfoInactiveAnon: 101412,
	MeminfoActiveFile:   324148,
	MeminfoInactiveFile: 247980,
	MeminfoUnevictable:  12856,
	MeminfoMlocked:      11776,
	MeminfoSwapTotal:    0,
	MeminfoSwapFree:     0,
	MeminfoDirty:        15140,
	MeminfoWriteback:    0,
	MeminfoAnonPages:    106976,
	MeminfoMapped:       27708,
	MeminfoShmem:        8956,
	MeminfoKReclaimable: 105432,
	MeminfoSlab:         131696,
	MeminfoSReclaimable: 105432,
	MeminfoSUnreclaim:   26264,
}

func TestReadMeminfoFixtures(t *testing.T) {
	without := func(k MeminfoKey) map[MeminfoKey]uint64 {
		m := make(map[MeminfoKey]uint64, len(thisMachineMeminfo))
		for key, v := range thisMachineMeminfo {
			if key != k {
				m[key] = v
			}
		}
		return m
	}
	tests := []struct {
		name string
		file string
		want map[MeminfoKey]uint64 // kB; keys not listed must be absent
	}{
		{
			name: "this machine's meminfo gives every recorded key in bytes",
			file: "meminfo",
			want: thisMachineMeminfo,
		},
		{
			name: "a 4.19 kernel without KReclaimable parses and reports it absent",
			file: "meminfo-4.19",
			want: without(MeminfoKReclaimable),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ReadMeminfo(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			for k := range numMeminfoKeys {
				kb, want := tt.want[k]
				got, has := m.Get(k)
				switch {
				case has != want:
					t.Errorf("%s: present %v, want %v", k, has, want)
				case has && got != kb*1024:
					t.Errorf("%s = %d bytes, want %d kB = %d bytes", k, got, kb, kb*1024)
				}
			}
			if m.MemTotal != tt.want[MeminfoMemTotal]*1024 || m.InactiveFile != tt.want[MeminfoInactiveFile]*1024 {
				t.Errorf("struct fields disagree with Get: MemTotal %d, InactiveFile %d", m.MemTotal, m.InactiveFile)
			}
		})
	}
}

func TestParseMeminfoRejectsMalformedFiles(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		line    int // 0 when no single line is to blame
		message string
	}{
		{"text after the kB unit is garbage", "meminfo-trailing-garbage", 5, "unexpected text after the value"},
		{"a negative value is garbage", "meminfo-negative-value", 4, "not an unsigned decimal"},
		{"a line without a colon is garbage", "meminfo-no-colon", 19, "no key before a colon"},
		{"a value too large for 64 bits is garbage", "meminfo-overflow", 22, "not an unsigned decimal"},
		{"a kB value too large for 64 bits in bytes is garbage", "meminfo-overflow-bytes", 23, "overflows 64 bits in bytes"},
		{"a recorded key without its kB unit is malformed", "meminfo-no-unit", 2, "MemFree has no kB unit"},
		{"a recorded key twice is malformed", "meminfo-duplicate", 55, "duplicate key MemTotal"},
		{"a file without Inactive(file) lacks a required key", "meminfo-missing-inactive-file", 0, "missing required key Inactive(file)"},
		{"a file without MemTotal lacks a required key", "meminfo-missing-memtotal", 0, "missing required key MemTotal"},
		{"an empty file lacks the required keys", "meminfo-empty", 0, "missing required key MemTotal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join("testdata", "bad", tt.file)
			_, err := ReadMeminfo(path)
			checkParseError(t, err, path, tt.line, tt.message)
		})
	}
}

// checkParseError checks that err is a *ParseError matching ErrMalformed
// that names path, line (0: none) and contains message.
func checkParseError(t *testing.T, err error, path string, line int, message string) {
	t.Helper()
	var pe *ParseError
	switch {
	case err == nil:
		t.Fatal("no error")
	case !errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnsupported):
		t.Fatalf("%v: want ErrMalformed and not ErrUnsupported", err)
	case !errors.As(err, &pe):
		t.Fatalf("%v: not a *ParseError", err)
	}
	if pe.File != path || pe.Line != line {
		t.Errorf("error names %s line %d, want %s line %d", pe.File, pe.Line, path, line)
	}
	if !strings.Contains(err.Error(), message) || !strings.Contains(err.Error(), path) {
		t.Errorf("error %q should name %s and say %q", err, path, message)
	}
}

func TestMeminfoParsingEdgeCases(t *testing.T) {
	base := "MemTotal: 4 kB\nMemFree: 3 kB\nActive(file): 2 kB\nInactive(file): 1 kB"
	tests := []struct {
		name    string
		text    string
		wantErr string // "" for success
	}{
		{"a last line without a newline still counts", base, ""},
		{"unknown keys, with or without a unit, are skipped", base + "\nHugePages_Total:       0\nFutureKey:   12 kB\n", ""},
		{"a value with no digits is garbage", base + "\nBuffers: kB\n", "not an unsigned decimal"},
		{"a key with a space is garbage", base + "\nBad Key: 1 kB\n", "space in key"},
		{"a value glued to the colon is garbage", base + "\nBuffers:1 kB\n", "no space after the colon"},
		{"an empty line is garbage", base + "\n\n", "no key before a colon"},
		{"a unit other than kB is garbage", base + "\nBuffers: 1 MB\n", "unexpected text after the value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMeminfo("fixture", []byte(tt.text))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if m.MemTotal != 4096 || m.InactiveFile != 1024 || m.Has(MeminfoBuffers) {
					t.Errorf("got %+v", m)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v, want ErrMalformed saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestMeminfoKeyNamesMapBackToTheirKeys(t *testing.T) {
	for k := range numMeminfoKeys {
		got, ok := meminfoKeyOf([]byte(k.String()))
		if !ok || got != k {
			t.Errorf("%s parses as %v, %v", k, got, ok)
		}
		var m Meminfo
		if m.field(k) == nil {
			t.Errorf("%s has no field", k)
		}
	}
	if s := numMeminfoKeys.String(); !strings.HasPrefix(s, "MeminfoKey(") {
		t.Errorf("an unknown key prints as %q", s)
	}
	var m Meminfo
	if _, ok := m.Get(numMeminfoKeys); ok || m.Has(numMeminfoKeys) {
		t.Error("an unknown key reads as present")
	}
}

func TestReadMeminfoOfAMissingFileIsUnsupported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	if _, err := ReadMeminfo(path); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadMeminfo: %v, want ErrUnsupported naming the file", err)
	}
	if _, err := OpenMeminfo(path); !errors.Is(err, ErrUnsupported) {
		t.Errorf("OpenMeminfo: %v, want ErrUnsupported", err)
	}
}

func TestMeminfoReaderSeesNewContentAndGrowsItsBuffer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("MemTotal: 4 kB\nMemFree: 3 kB\nActive(file): 2 kB\nInactive(file): 1 kB\n")
	r, err := OpenMeminfo(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m, err := r.Read()
	if err != nil || m.MemFree != 3*1024 {
		t.Fatalf("first read: %+v, %v", m, err)
	}
	// Rewrite in place (same inode, as procfs regenerates in place) with
	// more than the reader's 4 KiB first buffer of unknown keys.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	content := "MemTotal: 8 kB\nMemFree: 7 kB\n" + strings.Repeat("Padding: 0 kB\n", 1000) + "Active(file): 6 kB\nInactive(file): 5 kB\n"
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	f.Close()
	m, err = r.Read()
	if err != nil || m.MemFree != 7*1024 || m.InactiveFile != 5*1024 {
		t.Fatalf("second read: %+v, %v", m, err)
	}
}

func TestMeminfoParsingDoesNotAllocate(t *testing.T) {
	b, err := os.ReadFile("testdata/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := ParseMeminfo("testdata/meminfo", b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("ParseMeminfo allocates %v times", n)
	}
	r, err := OpenMeminfo("testdata/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.Read(); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("MeminfoReader.Read allocates %v times", n)
	}
}
