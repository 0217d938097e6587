package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"4096", 4096, true},
		{"1Mi", 1 << 20, true},
		{"2Gi", 2 << 30, true},
		{"100M", 100e6, true},
		{"", 0, false},
		{"1.5Gi", 0, false},
		{"-1Mi", 0, false},
		{"99999999999Ti", 0, false},
	} {
		t.Run("parses "+strconv.Quote(tc.in), func(t *testing.T) {
			got, err := parseBytes(tc.in)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("parseBytes(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseOptions(t *testing.T) {
	o, err := parseOptions([]string{"--rate", "200Mi/s", "--max", "1Gi", "--delay", "1s"})
	if err != nil || o.rate != 200<<20 || o.step != 1<<20 || o.max != 1<<30 || o.delay != time.Second {
		t.Errorf("ramp options %+v, %v", o, err)
	}
	o, err = parseOptions([]string{"--steady", "32Mi"})
	if err != nil || o.steady != 32<<20 {
		t.Errorf("steady options %+v, %v", o, err)
	}
	for _, bad := range [][]string{
		{"--max", "1Gi"},
		{"--rate", "1Mi"},
		{"--rate", "0", "--max", "1Gi"},
		{"--steady", "1Mi", "--rate", "1Mi"},
		{"--rate", "1Mi", "--max", "1Gi", "extra"},
	} {
		if _, err := parseOptions(bad); err == nil {
			t.Errorf("parseOptions(%q) accepted", bad)
		}
	}
}

func TestDueAtFollowsTheRate(t *testing.T) {
	start := time.Unix(100, 0)
	if got := dueAt(start, 100<<20, 200<<20); !got.Equal(start.Add(500 * time.Millisecond)) {
		t.Errorf("100 MiB at 200 MiB/s due at %v, want +500ms", got.Sub(start))
	}
}

// TestRampReportsEveryStep runs the program as a child (this test binary
// with HOG_CHILD=1) and checks the contract of package lab/hog.
func TestRampReportsEveryStep(t *testing.T) {
	if os.Getenv("HOG_CHILD") == "1" {
		if err := run(strings.Fields(os.Getenv("HOG_ARGS"))); err != nil {
			os.Exit(2)
		}
		return
	}
	// The hog holds its memory until killed: read the nine lines, then
	// kill it (our own child, by its pid), bounded by a context either way.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRampReportsEveryStep$")
	cmd.Env = append(os.Environ(), "HOG_CHILD=1", "HOG_ARGS=--rate 64Mi --step 1Mi --max 8Mi")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	for len(lines) < 9 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(lines) != 9 {
		t.Fatalf("%d lines, want 9 (start + 8 steps): %q", len(lines), lines)
	}
	var prev int64
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("line %d %q: want two fields", i, l)
		}
		ns, err1 := strconv.ParseInt(f[0], 10, 64)
		n, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 != nil || err2 != nil || n != uint64(i)<<20 || ns < prev {
			t.Errorf("line %d %q: want %d bytes at a time not before %d", i, l, uint64(i)<<20, prev)
		}
		prev = ns
	}
	first, _ := strconv.ParseInt(strings.Fields(lines[1])[0], 10, 64)
	last, _ := strconv.ParseInt(strings.Fields(lines[8])[0], 10, 64)
	// 7 MiB between the first and the last step at 64 MiB/s: ~109 ms.
	if d := time.Duration(last - first); d < 90*time.Millisecond || d > 2*time.Second {
		t.Errorf("steps 1..8 took %v, want ~109ms at 64 MiB/s", d)
	}
}
