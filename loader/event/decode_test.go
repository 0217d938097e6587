package event

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// record returns a zeroed record of kind k, version v and n bytes, with the
// header's kind and version set (n may be shorter than the header).
func record(k Kind, v uint8, n int) []byte {
	b := make([]byte, n)
	if n >= 2 {
		b[0], b[1] = byte(k), byte(k>>8)
	}
	if n >= 3 {
		b[2] = v
	}
	return b
}

var allKinds = []Kind{KindOOMKill, KindReclaim, KindCgroupMkdir, KindCgroupRmdir, KindOOMScoreAdj, KindExit, KindBench}

func TestDecodeMalformed(t *testing.T) {
	type tc struct {
		name string
		in   []byte
		// check asserts the concrete error with errors.As.
		check func(t *testing.T, err error)
		msg   string // the whole error message
	}
	short := func(k Kind, need, got int) func(*testing.T, error) {
		return func(t *testing.T, err error) {
			var se *ShortError
			if !errors.As(err, &se) {
				t.Fatalf("error %v (%T) is not a *ShortError", err, err)
			}
			if *se != (ShortError{Kind: k, Need: need, Got: got}) {
				t.Errorf("ShortError = %+v, want {Kind:%v Need:%d Got:%d}", *se, k, need, got)
			}
			if errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("a short record matches errors.ErrUnsupported; it is damaged, not unsupported")
			}
		}
	}
	unknown := func(k Kind) func(*testing.T, error) {
		return func(t *testing.T, err error) {
			var ue *UnknownKindError
			if !errors.As(err, &ue) || ue.Kind != k {
				t.Fatalf("error %v (%T) is not an *UnknownKindError for kind %d", err, err, k)
			}
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("an unknown kind does not match errors.ErrUnsupported")
			}
		}
	}
	version := func(k Kind, got, want uint8) func(*testing.T, error) {
		return func(t *testing.T, err error) {
			var ve *VersionError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v (%T) is not a *VersionError", err, err)
			}
			if *ve != (VersionError{Kind: k, Got: got, Want: want}) {
				t.Errorf("VersionError = %+v, want {Kind:%v Got:%d Want:%d}", *ve, k, got, want)
			}
			if !errors.Is(err, errors.ErrUnsupported) {
				t.Errorf("a version mismatch does not match errors.ErrUnsupported")
			}
		}
	}

	cases := []tc{
		{"an empty record is short of a header", nil, short(0, 40, 0), "decode record header: 0 bytes, need 40"},
		{"a record of one byte is short of a header", []byte{1}, short(0, 40, 1), "decode record header: 1 bytes, need 40"},
		{"a record one byte shorter than the header is short of a header", record(KindReclaim, 1, 39), short(0, 40, 39), "decode record header: 39 bytes, need 40"},
		{"kind 0 is unknown", record(0, 1, 104), unknown(0), "decode record: unknown kind 0"},
		{"kind 8, the first unused number, is unknown", record(8, 1, 320), unknown(8), "decode record: unknown kind 8"},
		{"kind 0xffff is unknown", record(0xffff, 1, 320), unknown(0xffff), "decode record: unknown kind 65535"},
		{"an unknown kind is reported before a short body", record(9, 1, 40), unknown(9), "decode record: unknown kind 9"},
		{"a wrong version is reported before a short body", record(KindOOMKill, 2, 40), version(KindOOMKill, 2, 1), "decode oom_kill record: version 2, want 1"},
	}
	for _, k := range allKinds {
		size, _ := k.Size()
		cases = append(cases,
			tc{"a " + k.String() + " record of only the header is short", record(k, 1, 40),
				short(k, size, 40), "decode " + k.String() + " record: 40 bytes, need " + strconv.Itoa(size)},
			tc{"a " + k.String() + " record one byte short is short", record(k, 1, size-1),
				short(k, size, size-1), "decode " + k.String() + " record: " + strconv.Itoa(size-1) + " bytes, need " + strconv.Itoa(size)},
			tc{"a " + k.String() + " record of version 0 is the wrong version", record(k, 0, size),
				version(k, 0, 1), "decode " + k.String() + " record: version 0, want 1"},
			tc{"a " + k.String() + " record of version 2 is the wrong version", record(k, 2, size),
				version(k, 2, 1), "decode " + k.String() + " record: version 2, want 1"},
		)
	}

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev, err := Decode(c.in)
			if err == nil {
				t.Fatalf("Decode = %#v, nil; want an error", ev)
			}
			if ev != nil {
				t.Errorf("Decode returned the event %#v with its error", ev)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("errors.Is(%v, ErrMalformed) = false", err)
			}
			if err.Error() != c.msg {
				t.Errorf("message %q, want %q", err.Error(), c.msg)
			}
			c.check(t, err)
		})
	}
}

func TestDecodeHeaderShort(t *testing.T) {
	for _, n := range []int{0, 1, 39} {
		_, err := DecodeHeader(make([]byte, n))
		var se *ShortError
		if !errors.As(err, &se) || se.Need != 40 || se.Got != n || se.Kind != 0 || !errors.Is(err, ErrMalformed) {
			t.Errorf("DecodeHeader(%d bytes) error = %v, want a ShortError{Need: 40, Got: %d}", n, err, n)
		}
	}
	// DecodeHeader checks only the length: an unknown kind or a wrong version
	// is Decode's business.
	h, err := DecodeHeader(record(0x1234, 9, 40))
	if err != nil || h.Kind != 0x1234 || h.Version != 9 {
		t.Errorf("DecodeHeader(kind 0x1234, version 9) = %+v, %v", h, err)
	}
}

func TestDecodeStrings(t *testing.T) {
	full256 := strings.Repeat("abcdefgh", 32)
	cases := []struct {
		name string
		kind Kind
		off  int
		buf  string // the bytes of the string buffer; the rest of the record is zero
		want string
	}{
		{"a comm with no NUL uses the whole 16 bytes", KindOOMKill, 40, "abcdefghijklmnop", "abcdefghijklmnop"},
		{"a comm is cut at its first NUL, ignoring what follows", KindOOMKill, 40, "sh\x00garbage", "sh"},
		{"an all-NUL comm is empty", KindOOMScoreAdj, 40, "", ""},
		{"a comm that is not UTF-8 is kept byte for byte", KindExit, 40, "\xff\xfe\n", "\xff\xfe\n"},
		{"a path with no NUL uses the whole 256 bytes", KindCgroupMkdir, 64, full256, full256},
		{"a path is cut at its first NUL", KindCgroupRmdir, 64, "/a/b\x00/c", "/a/b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size, _ := c.kind.Size()
			b := record(c.kind, 1, size)
			copy(b[c.off:], c.buf)
			ev, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			var got string
			switch e := ev.(type) {
			case *OOMKill:
				got = e.Comm
			case *OOMScoreAdj:
				got = e.Comm
			case *Exit:
				got = e.Comm
			case *Cgroup:
				got = e.Path
			default:
				t.Fatalf("Decode returned %T", ev)
			}
			if got != c.want {
				t.Errorf("string = %q, want %q", got, c.want)
			}
			// The string must not alias the input buffer.
			for i := range b {
				b[i] = 'X'
			}
			if got != c.want {
				t.Errorf("string changed to %q after the buffer was overwritten", got)
			}
		})
	}
}

func TestDecodeBodyFieldsAreNotChecked(t *testing.T) {
	// Unknown reclaim types and unknown flag bits are not malformed: they
	// decode, and print as numbers.
	b := record(KindReclaim, 1, 72)
	b[3] = 0x80
	b[40] = 9
	ev, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	r := ev.(*Reclaim)
	if r.Type.String() != "reclaim_type(9)" || r.Flags != 0x80 {
		t.Errorf("Decode = %+v", r)
	}
}

func TestDecodeAllocations(t *testing.T) {
	for _, tc := range goldenCases(t) {
		b := tc.build.bytes()
		want := 1.0 // the event
		switch tc.want.(type) {
		case *OOMKill, *Cgroup, *OOMScoreAdj, *Exit:
			want = 2 // and its one string
		}
		got := testing.AllocsPerRun(100, func() {
			if _, err := Decode(b); err != nil {
				t.Fatal(err)
			}
		})
		if got > want {
			t.Errorf("Decode(%s) allocates %v times, want %v", tc.name, got, want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{
		KindOOMKill:     "oom_kill",
		KindReclaim:     "reclaim",
		KindCgroupMkdir: "cgroup_mkdir",
		KindCgroupRmdir: "cgroup_rmdir",
		KindOOMScoreAdj: "oom_score_adj",
		KindExit:        "exit",
		KindBench:       "bench",
		0:               "kind(0)",
		8:               "kind(8)",
		0xffff:          "kind(65535)",
	} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", uint16(k), got, want)
		}
	}
}

func TestReclaimTypeString(t *testing.T) {
	for ty, want := range map[ReclaimType]string{
		ReclaimMemcg:  "memcg",
		ReclaimDirect: "direct",
		ReclaimKswapd: "kswapd",
		0:             "reclaim_type(0)",
		4:             "reclaim_type(4)",
	} {
		if got := ty.String(); got != want {
			t.Errorf("ReclaimType(%d).String() = %q, want %q", uint32(ty), got, want)
		}
	}
}

func TestFlags(t *testing.T) {
	cases := []struct {
		name  string
		flags Flags
		want  string
	}{
		{"no flag has no names", 0, ""},
		{"cgroup_of_current alone", FlagCgroupOfCurrent, "cgroup_of_current"},
		{"truncated alone", FlagTruncated, "truncated"},
		{"classic_tp alone", FlagClassicTP, "classic_tp"},
		{"all known flags come lowest bit first", FlagClassicTP | FlagTruncated | FlagCgroupOfCurrent, "cgroup_of_current,truncated,classic_tp"},
		{"unknown bits are named in hex", FlagTruncated | 0x10 | 0x80, "truncated,0x10,0x80"},
		{"missing task details are named", FlagClassicTP | FlagNoTaskDetails, "classic_tp,no_task_details"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			names := c.flags.Names()
			if got := strings.Join(names, ","); got != c.want {
				t.Errorf("Names() = %q, want %q", got, c.want)
			}
			if c.flags == 0 && names != nil {
				t.Errorf("Names() = %#v, want nil", names)
			}
		})
	}
	f := FlagCgroupOfCurrent | FlagClassicTP
	if !f.Has(FlagClassicTP) || !f.Has(FlagCgroupOfCurrent|FlagClassicTP) || f.Has(FlagTruncated) {
		t.Errorf("Has is wrong for %#x", uint8(f))
	}
}

func TestExitCode(t *testing.T) {
	cases := []struct {
		name   string
		code   uint32
		signal uint32
		status uint32
		core   bool
	}{
		{"exit(0) is status 0 without a signal", 0x0000, 0, 0, false},
		{"exit(1) is status 1", 0x0100, 0, 1, false},
		{"exit(255) is status 255", 0xff00, 0, 255, false},
		{"SIGKILL is signal 9", 0x0009, 9, 0, false},
		{"SIGSEGV with a core dump", 0x008b, 11, 0, true},
		{"bits above 15 are ignored", 0xffff0100, 0, 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &Exit{ExitCode: c.code}
			if e.Signal() != c.signal || e.Status() != c.status || e.CoreDumped() != c.core {
				t.Errorf("Signal, Status, CoreDumped = %d, %d, %v; want %d, %d, %v",
					e.Signal(), e.Status(), e.CoreDumped(), c.signal, c.status, c.core)
			}
		})
	}
}

func TestOOMKillRSS(t *testing.T) {
	cases := []struct {
		name                string
		anon, file, shmem   uint64
		wantPages, wantByte uint64
	}{
		{"pages add up and count 4 KiB each", 16384, 100, 10, 16494, 16494 * 4096},
		{"an overflowing sum saturates", ^uint64(0) - 1, 5, 0, ^uint64(0), ^uint64(0)},
		{"an overflowing product saturates", 1 << 60, 0, 0, 1 << 60, ^uint64(0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &OOMKill{AnonRSSPages: c.anon, FileRSSPages: c.file, ShmemRSSPages: c.shmem}
			if e.RSSPages() != c.wantPages || e.RSSBytes() != c.wantByte {
				t.Errorf("RSSPages, RSSBytes = %d, %d; want %d, %d", e.RSSPages(), e.RSSBytes(), c.wantPages, c.wantByte)
			}
		})
	}
}

// Every concrete type is an Event.
var _ = []Event{&OOMKill{}, &Reclaim{}, &Cgroup{}, &OOMScoreAdj{}, &Exit{}, &Bench{}}
