package tripwire

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/internal/statestore"
)

// The hog is this test binary re-executed with hogEnv set to the usage
// file of its cgroup (memory.usage_in_bytes or memory.current). It maps
// hogMiBEnv MiB of anonymous memory and obeys one command per stdin line:
//
//	up TARGET THRESHOLD STEP  touch STEP more bytes at a time, re-reading
//	                          usage after each step, until usage >= TARGET
//	                          or the mapping is used up; answer
//	                          "up CROSS USAGE BELOW_B BELOW_NS ABOVE_B ABOVE_NS":
//	                          CROSS is the CLOCK_MONOTONIC ns when it first
//	                          read usage >= THRESHOLD (0: never), and the
//	                          bytes touched and ns spent below and above it
//	down                      madvise(MADV_DONTNEED) the mapping; answer
//	                          "down USAGE"
//
// It exits when stdin closes, or after hogHold in any case.
const (
	hogEnv    = "NODEGUARD_TRIPWIRE_HOG_USAGE"
	hogMiBEnv = "NODEGUARD_TRIPWIRE_HOG_MIB"
)

const (
	// hogHold bounds a hog's life if the test never closes its stdin.
	hogHold = 120 * time.Second
	// hogAnswer bounds one command. Touching 200 MiB takes ~100 ms on
	// the host; the v2 tests throttle the hog above memory.high, and the
	// VM lane runs under TCG, 10-50 times slower.
	hogAnswer = 60 * time.Second
)

func TestMain(m *testing.M) {
	if usage := os.Getenv(hogEnv); usage != "" {
		os.Exit(runHog(usage, os.Getenv(hogMiBEnv)))
	}
	if spec := os.Getenv(armerEnv); spec != "" {
		os.Exit(runArmer(spec))
	}
	if spec := os.Getenv(rampEnv); spec != "" {
		os.Exit(runRamp(spec))
	}
	if spec := os.Getenv(probeEnv); spec != "" {
		os.Exit(runProbe(spec))
	}
	os.Exit(m.Run())
}

// armerEnv makes the test binary an armer: "DIR STOREDIR THRESHOLD": it
// arms a v2 Tripwire on DIR with the state store at STOREDIR, prints
// "armed", and waits (at most hogHold) for the test to SIGKILL it, the
// crash that TestV2OriginalMemoryHighSurvivesASIGKILL recovers from.
const armerEnv = "NODEGUARD_TRIPWIRE_ARMER"

func runArmer(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "armer: bad %s=%q\n", armerEnv, spec)
		return 2
	}
	th, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "armer: %v\n", err)
		return 2
	}
	store, err := statestore.Open(f[1], statestore.Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "armer: %v\n", err)
		return 1
	}
	tw, err := New(f[0], true, Options{Mechanism: KindMemoryHigh, Store: store})
	if err == nil {
		err = tw.Arm(th)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "armer: %v\n", err)
		return 1
	}
	fmt.Println("armed")
	time.Sleep(hogHold)
	return 3
}

func monotonicNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func runHog(usageFile, mibSpec string) int {
	go func() {
		time.Sleep(hogHold)
		fmt.Fprintln(os.Stderr, "hog: lived too long, exiting")
		os.Exit(3)
	}()
	mib, err := strconv.Atoi(mibSpec)
	if err != nil || mib <= 0 || mib > 512 {
		fmt.Fprintf(os.Stderr, "hog: bad %s=%q\n", hogMiBEnv, mibSpec)
		return 2
	}
	mem, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hog: mmap: %v\n", err)
		return 1
	}
	ufd, err := unix.Open(usageFile, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hog: %v\n", err)
		return 1
	}
	var buf [64]byte
	usage := func() uint64 {
		raw, err := pread(ufd, buf[:])
		if err != nil {
			fmt.Fprintf(os.Stderr, "hog: read %s: %v\n", usageFile, err)
			os.Exit(1)
		}
		v, err := cgstat.ParseValue(raw, usageFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "hog: %v\n", err)
			os.Exit(1)
		}
		return v
	}
	page := os.Getpagesize()
	off := 0
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 4 && f[0] == "up":
			target, _ := strconv.ParseUint(f[1], 10, 64)
			threshold, _ := strconv.ParseUint(f[2], 10, 64)
			step, _ := strconv.Atoi(f[3])
			if step < page {
				step = page
			}
			var cross, belowB, belowNS, aboveB, aboveNS int64
			u := usage()
			for u < target && off < len(mem) {
				start := monotonicNow()
				end := min(off+step, len(mem))
				for i := off; i < end; i += page {
					mem[i] = 1
				}
				u = usage()
				now := monotonicNow()
				if cross == 0 {
					belowB, belowNS = belowB+int64(end-off), belowNS+now-start
					if u >= threshold {
						cross = now
					}
				} else {
					aboveB, aboveNS = aboveB+int64(end-off), aboveNS+now-start
				}
				off = end
			}
			fmt.Printf("up %d %d %d %d %d %d\n", cross, u, belowB, belowNS, aboveB, aboveNS)
		case len(f) == 1 && f[0] == "down":
			if err := unix.Madvise(mem, unix.MADV_DONTNEED); err != nil {
				fmt.Fprintf(os.Stderr, "hog: madvise: %v\n", err)
				return 1
			}
			off = 0
			fmt.Printf("down %d\n", usage())
		default:
			fmt.Fprintf(os.Stderr, "hog: bad command %q\n", sc.Text())
			return 2
		}
	}
	return 0
}

// hog is a running hog.
type hog struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *os.File
	rd   *bufio.Reader
	done chan error
}

// upResult is a hog's answer to "up".
type upResult struct {
	Cross                  int64 // CLOCK_MONOTONIC ns of the first read of usage >= threshold; 0: never
	Usage                  uint64
	BelowBytes, BelowNanos int64
	AboveBytes, AboveNanos int64
}

// rates returns the hog's touching speed below and above the threshold in
// MiB/s (0 when it touched nothing there).
func (r upResult) rates() (below, above float64) {
	rate := func(b, ns int64) float64 {
		if ns <= 0 {
			return 0
		}
		return float64(b) / (1 << 20) / (float64(ns) / 1e9)
	}
	return rate(r.BelowBytes, r.BelowNanos), rate(r.AboveBytes, r.AboveNanos)
}

// startHog starts a hog of mib MiB in sb reading usageFile.
func startHog(t testing.TB, sb *cgtest.Sandbox, usageFile string, mib int) *hog {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hogEnv+"="+usageFile, hogMiBEnv+"="+strconv.Itoa(mib))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	err = sb.Start(t, cmd)
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	h := &hog{cmd: cmd, in: in, out: r, rd: bufio.NewReader(r), done: make(chan error, 1)}
	go func() { h.done <- cmd.Wait() }()
	t.Cleanup(func() {
		h.in.Close()
		select {
		case <-h.done:
		case <-time.After(hogAnswer):
			// The sandbox's cleanup kills it.
			t.Errorf("hog %d did not exit within %v", cmd.Process.Pid, hogAnswer)
		}
		h.out.Close()
	})
	return h
}

func (h *hog) ask(t testing.TB, cmd string) []string {
	t.Helper()
	if _, err := io.WriteString(h.in, cmd+"\n"); err != nil {
		t.Fatalf("hog: send %q: %v", cmd, err)
	}
	if err := h.out.SetReadDeadline(time.Now().Add(hogAnswer)); err != nil {
		t.Fatal(err)
	}
	line, err := h.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("hog: answer to %q: %v", cmd, err)
	}
	return strings.Fields(line)
}

// up asks the hog to touch memory in steps of step bytes until its
// cgroup's usage reaches target.
func (h *hog) up(t testing.TB, target, threshold uint64, step int) upResult {
	t.Helper()
	f := h.ask(t, fmt.Sprintf("up %d %d %d", target, threshold, step))
	var v [6]int64
	if len(f) != 7 || f[0] != "up" {
		t.Fatalf("hog: bad answer %q", f)
	}
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			t.Fatalf("hog: bad answer %q: %v", f, err)
		}
		v[i] = n
	}
	return upResult{Cross: v[0], Usage: uint64(v[1]), BelowBytes: v[2], BelowNanos: v[3], AboveBytes: v[4], AboveNanos: v[5]}
}

// down asks the hog to release its memory and returns the usage after.
func (h *hog) down(t testing.TB) uint64 {
	t.Helper()
	f := h.ask(t, "down")
	if len(f) != 2 || f[0] != "down" {
		t.Fatalf("hog: bad answer %q", f)
	}
	u, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		t.Fatalf("hog: bad answer %q", f)
	}
	return u
}

// monoClock converts time.Time values of this process to CLOCK_MONOTONIC
// ns, the hog's clock: one pair of readings taken together, then Go's
// monotonic differences.
type monoClock struct {
	t0 time.Time
	m0 int64
}

func newMonoClock() monoClock { return monoClock{t0: time.Now(), m0: monotonicNow()} }

func (c monoClock) of(t time.Time) int64 { return c.m0 + int64(t.Sub(c.t0)) }
