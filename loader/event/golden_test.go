package event

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.hex from the hand-built records")

// goldenCase is one record laid out by hand and the event it must decode to.
// The values give every byte of a field a different value, so that a field
// read at the wrong offset, with the wrong width or the wrong byte order
// decodes to something else.
type goldenCase struct {
	name  string // also the golden file's name: testdata/<name>.hex
	build *builder
	want  Event
}

// The header of every golden record but its kind and flags.
func goldenHeader(k Kind, f Flags) Header {
	return Header{
		Kind:        k,
		Version:     1,
		Flags:       f,
		CPU:         0x13121110,
		PID:         0x23222120,
		TID:         0x33323130,
		TimestampNS: 0x4746454443424140,
		MemcgID:     0x5756555453525150,
		CgroupID:    0x6766656463626160,
	}
}

func goldenCases(t testing.TB) []goldenCase {
	oom := &OOMKill{
		Header:         goldenHeader(KindOOMKill, 0),
		Comm:           "hog",
		OOMScoreAdj:    -998,
		TriggerPID:     0x73727170,
		TotalVMPages:   0x8786858483828180,
		AnonRSSPages:   0x9796959493929190,
		FileRSSPages:   0xa7a6a5a4a3a2a1a0,
		ShmemRSSPages:  0xb7b6b5b4b3b2b1b0,
		MemcgLevel:     0xc3c2c1c0,
		MemcgHierarchy: 0xd3d2d1d0,
	}
	rec := &Reclaim{
		Header:      goldenHeader(KindReclaim, 0),
		Type:        ReclaimDirect,
		Order:       -3,
		GFPFlags:    0x00140cca,
		NID:         0x83828180,
		DurationNS:  0x9796959493929190,
		NrReclaimed: 0xa7a6a5a4a3a2a1a0,
	}
	mkdir := &Cgroup{
		Header:      goldenHeader(KindCgroupMkdir, FlagClassicTP),
		ID:          0x7776757473727170,
		ParentID:    0x8786858483828180,
		HierarchyID: 0x93929190,
		Level:       0xa3a2a1a0,
		Path:        "/kubepods/burstable/pod0c6e5f8a",
	}
	rmdir := &Cgroup{
		Header:      goldenHeader(KindCgroupRmdir, FlagCgroupOfCurrent|FlagClassicTP),
		ID:          0x0000000000001234,
		ParentID:    0,
		HierarchyID: 0,
		Level:       1,
		Path:        "/kubepods",
	}
	adj := &OOMScoreAdj{
		Header:      goldenHeader(KindOOMScoreAdj, 0),
		Comm:        "runc:[2:INIT]",
		OOMScoreAdj: 1000,
		WriterPID:   0x73727170,
	}
	exit := &Exit{
		Header:   goldenHeader(KindExit, FlagTruncated),
		Comm:     "abcdefghijklmno", // 15 bytes: the longest comm with its NUL
		ExitCode: 0x0000018b,        // status 1 in 8-15, core dump, SIGSEGV
	}
	bench := &Bench{
		Header: goldenHeader(KindBench, 0),
		Seq:    0x7776757473727170,
		Batch:  0x8786858483828180,
	}

	return []goldenCase{
		{"oom_kill", newBuilder(t, 104, "struct ng_oom_kill, version 1, 104 bytes").header(oom.Header).
			str(40, 16, "comm", oom.Comm).
			s32(56, "oom_score_adj", oom.OOMScoreAdj).
			u32(60, "trigger_pid", oom.TriggerPID).
			u64(64, "total_vm_pages", oom.TotalVMPages).
			u64(72, "anon_rss_pages", oom.AnonRSSPages).
			u64(80, "file_rss_pages", oom.FileRSSPages).
			u64(88, "shmem_rss_pages", oom.ShmemRSSPages).
			u32(96, "memcg_level", oom.MemcgLevel).
			u32(100, "memcg_hierarchy", oom.MemcgHierarchy), oom},
		{"reclaim", newBuilder(t, 72, "struct ng_reclaim, version 1, 72 bytes").header(rec.Header).
			u32(40, "type", uint32(rec.Type)).
			s32(44, "order", rec.Order).
			u32(48, "gfp_flags", rec.GFPFlags).
			u32(52, "nid", rec.NID).
			u64(56, "duration_ns", rec.DurationNS).
			u64(64, "nr_reclaimed", rec.NrReclaimed), rec},
		{"cgroup_mkdir", newBuilder(t, 320, "struct ng_cgroup (mkdir), version 1, 320 bytes").header(mkdir.Header).
			u64(40, "id", mkdir.ID).
			u64(48, "parent_id", mkdir.ParentID).
			u32(56, "hierarchy_id", mkdir.HierarchyID).
			u32(60, "level", mkdir.Level).
			str(64, 256, "path", mkdir.Path), mkdir},
		{"cgroup_rmdir", newBuilder(t, 320, "struct ng_cgroup (rmdir), version 1, 320 bytes").header(rmdir.Header).
			u64(40, "id", rmdir.ID).
			u64(48, "parent_id", rmdir.ParentID).
			u32(56, "hierarchy_id", rmdir.HierarchyID).
			u32(60, "level", rmdir.Level).
			str(64, 256, "path", rmdir.Path), rmdir},
		{"oom_score_adj", newBuilder(t, 64, "struct ng_oom_score_adj, version 1, 64 bytes").header(adj.Header).
			str(40, 16, "comm", adj.Comm).
			s32(56, "oom_score_adj", adj.OOMScoreAdj).
			u32(60, "writer_pid", adj.WriterPID), adj},
		{"exit", newBuilder(t, 64, "struct ng_exit, version 1, 64 bytes").header(exit.Header).
			str(40, 16, "comm", exit.Comm).
			u32(56, "exit_code", exit.ExitCode).
			u32(60, "_pad", 0), exit},
		{"bench", newBuilder(t, 56, "struct ng_bench, version 1, 56 bytes").header(bench.Header).
			u64(40, "seq", bench.Seq).
			u64(48, "batch", bench.Batch), bench},
	}
}

// sameEvent reports whether a and b are the same concrete type with equal
// fields.
func sameEvent(a, b Event) bool {
	switch a := a.(type) {
	case *OOMKill:
		b, ok := b.(*OOMKill)
		return ok && *a == *b
	case *Reclaim:
		b, ok := b.(*Reclaim)
		return ok && *a == *b
	case *Cgroup:
		b, ok := b.(*Cgroup)
		return ok && *a == *b
	case *OOMScoreAdj:
		b, ok := b.(*OOMScoreAdj)
		return ok && *a == *b
	case *Exit:
		b, ok := b.(*Exit)
		return ok && *a == *b
	case *Bench:
		b, ok := b.(*Bench)
		return ok && *a == *b
	}
	return false
}

// readGolden returns the bytes of testdata/<name>.hex, rewriting the file
// from built first under -update, and checks that the file and the hand
// layout agree.
func readGolden(t *testing.T, name string, l *builder) []byte {
	t.Helper()
	path := filepath.Join("testdata", name+".hex")
	if *update {
		if err := os.WriteFile(path, []byte(l.golden()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	b, err := parseGolden(string(text))
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	if built := l.bytes(); !bytes.Equal(b, built) {
		t.Fatalf("%s differs from the hand-built record (run go test -update if the layout changed on purpose)\nfile:  % x\nbuilt: % x", path, b, built)
	}
	return b
}

// TestRecordSizes pins the sizes of nodeguard.h's structs, computed by hand
// from its field list (every field naturally aligned, no implicit padding).
func TestRecordSizes(t *testing.T) {
	if HeaderSize != 40 {
		t.Errorf("HeaderSize = %d, want 40", HeaderSize)
	}
	if commLen != 16 || pathLen != 256 {
		t.Errorf("commLen, pathLen = %d, %d, want 16, 256", commLen, pathLen)
	}
	for _, tc := range []struct {
		kind Kind
		size int
	}{
		{KindOOMKill, 104},     // hdr 40 + comm 16 + 2*4 + 4*8 + 2*4
		{KindReclaim, 72},      // hdr 40 + 4*4 + 2*8
		{KindCgroupMkdir, 320}, // hdr 40 + 2*8 + 2*4 + path 256
		{KindCgroupRmdir, 320},
		{KindOOMScoreAdj, 64}, // hdr 40 + comm 16 + 2*4
		{KindExit, 64},        // hdr 40 + comm 16 + exit_code 4 + _pad 4
		{KindBench, 56},       // hdr 40 + 2*8
	} {
		t.Run(tc.kind.String()+" records are "+strconv.Itoa(tc.size)+" bytes", func(t *testing.T) {
			got, ok := tc.kind.Size()
			if !ok || got != tc.size {
				t.Errorf("%v.Size() = %d, %v, want %d, true", tc.kind, got, ok, tc.size)
			}
			if tc.size%8 != 0 {
				t.Errorf("size %d is not a multiple of 8: the C struct would have tail padding", tc.size)
			}
		})
	}
	if n, ok := Kind(0).Size(); ok || n != 0 {
		t.Errorf("Kind(0).Size() = %d, %v, want 0, false", n, ok)
	}
}

func TestDecodeGolden(t *testing.T) {
	for _, tc := range goldenCases(t) {
		t.Run("the "+tc.name+" golden record decodes field by field", func(t *testing.T) {
			b := readGolden(t, tc.name, tc.build)
			size, _ := tc.want.Hdr().Kind.Size()
			if len(b) != size {
				t.Fatalf("golden record is %d bytes, want %d", len(b), size)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !sameEvent(got, tc.want) {
				t.Errorf("Decode:\n got %#v\nwant %#v", got, tc.want)
			}

			h, err := DecodeHeader(b)
			if err != nil || h != *tc.want.Hdr() {
				t.Errorf("DecodeHeader = %#v, %v, want %#v", h, err, *tc.want.Hdr())
			}

			// Ring buffer records are padded to 8 bytes; trailing bytes are
			// ignored, whatever they hold.
			padded := append(append([]byte(nil), b...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
			got, err = Decode(padded)
			if err != nil || !sameEvent(got, tc.want) {
				t.Errorf("Decode of the record with 8 trailing bytes = %#v, %v", got, err)
			}
		})
	}
}
