package tripwire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// BenchmarkV2Mechanisms compares, on a pure cgroup v2 host (the VM lane),
// the candidate mechanisms of the pod-root tripwire side by side, with 250
// pod cgroups (a sleeping process each) beneath a "kubepods" cgroup and the
// line at the kubepods usage + 96 MiB:
//
//   - none: no tripwire (the baseline of the costs);
//   - memory.high: Arm writes memory.high at the line, inotify on
//     memory.events.local (KindMemoryHigh);
//   - psi: a PSI trigger "some 10ms per 500ms" on kubepods' memory.pressure
//     (implemented here; the tripwire package has none);
//   - working_set_poll: the adaptive working-set poll alone
//     (KindWorkingSet with NoAssist);
//   - working_set: the same with its memory.high assist (KindWorkingSet,
//     the default): memory.high kept at the line + inactive_file.
//
// For each it measures, in this order: the CPU of this process while idle
// (armed, no load); then, while a streaming reader in a Burstable pod
// cgroup (its own memory.max 160 MiB) keeps page cache holding kubepods
// above the line with the working set far below it, the time a process in
// a Guaranteed pod cgroup takes to fault in 8 MiB (p50, p99), the fires
// delivered per second, the kernel's "high" events per second and the CPU;
// then, with kubepods' memory.max at the line + 64 MiB and no cache, for a
// BestEffort hog ramping anonymous memory at 200 MiB/s and 1 GiB/s (paced;
// under TCG the achieved rate is reported), crossing-to-fire p50 and p99
// and how many trials the kernel OOM-killed before the fire (the bench
// kills the hog's cgroup on the fire, as an eviction would).
//
// Run it in the VM lane with brd.ko available (scripts/vm-modules.sh
// testdata/modules brd; `make bench-tripwire-vm` does both):
//
//	NODEGUARD_VM_MEMORY=1G NODEGUARD_VM_TIMEOUT=900s NODEGUARD_VM_KERNEL=6.12 \
//	  go test -exec bin/vmrun -run '^$' -bench V2Mechanisms -benchtime 1x ./pressure/tripwire
func BenchmarkV2Mechanisms(b *testing.B) {
	cgtest.RequireMode(b, cgroups.ModeV2)
	dev := ramDisk(b)
	logTracepoints(b)
	kube := cgtest.New(b)
	start := time.Now()
	pods := benchPods
	if n, err := strconv.Atoi(os.Getenv("NODEGUARD_TRIPWIRE_BENCH_PODS")); err == nil && n > 0 {
		pods = n // a smaller run, to try the bench out
	}
	for i := range pods {
		pod := kube.Child(b, fmt.Sprintf("pod%03d", i))
		cmd := exec.Command("sleep", "3600")
		if err := pod.Start(b, cmd); err != nil {
			b.Fatal(err)
		}
		go cmd.Wait() // killed by the sandbox's cleanup
	}
	progress("%d pods in %v", pods, time.Since(start))
	guaranteed := kube.Child(b, "guaranteed")
	if err := guaranteed.SetMemoryLimit(64 << 20); err != nil {
		b.Fatal(err)
	}
	cache := kube.Child(b, "burstable-cache")
	if err := cache.SetMemoryLimit(cacheLimit); err != nil {
		b.Fatal(err)
	}
	hogCG := kube.Child(b, "besteffort-hog")
	dir := kube.MemoryDir()
	probe := startProbe(b, guaranteed, probeMiB)
	time.Sleep(time.Second)
	base := readUint(b, filepath.Join(dir, fileCurrent))
	line := base + 96<<20
	b.Logf("%d pod cgroups with a sleeping process each, set up in %v; kubepods usage %d MiB, line %d MiB; guest load %s",
		pods, time.Since(start).Round(time.Millisecond), base>>20, line>>20, loadavg())

	// What one memory.stat read of kubepods costs here (the working-set
	// poll reads it at or above the line).
	var st []time.Duration
	for range 20 {
		t0 := time.Now()
		readCounter(b, filepath.Join(dir, fileStat), "inactive_file")
		st = append(st, time.Since(t0))
		time.Sleep(10 * time.Millisecond)
	}
	slices.Sort(st)
	b.Logf("a read of kubepods' memory.stat (open, read, parse): p50 %.0f µs, max %.0f µs (20 reads, idle)", pct(st, 0.5), pct(st, 1))
	env := &mechEnv{dir: dir, line: line, dev: dev, cache: cache, hog: hogCG, probe: probe, clock: newMonoClock()}
	mechs := []string{"none", KindMemoryHigh, "psi", kindWorkingSetPoll, KindWorkingSet}
	if v := os.Getenv("NODEGUARD_TRIPWIRE_BENCH_MECHS"); v != "" {
		mechs = strings.Split(v, ",") // a subset, to try the bench out
	}
	for _, m := range mechs {
		b.Run("mechanism="+m, func(b *testing.B) {
			env.run(b, m)
		})
	}
}

// kindWorkingSetPoll names the working-set poll without its memory.high
// assist (Options.NoAssist) in BenchmarkV2Mechanisms.
const kindWorkingSetPoll = "working_set_poll"

// Shape of BenchmarkV2Mechanisms.
const (
	benchPods  = 250
	cacheLimit = 160 << 20
	probeMiB   = 8
	// probeSamples and probeFor bound the allocation samples: whichever
	// comes first (a throttled probe can take seconds per sample).
	probeSamples = 200
	probeFor     = 20 * time.Second
	rampTrials   = 10
	idleFor      = 5 * time.Second
	rampMargin   = 64 << 20 // kubepods memory.max - line
)

type mechEnv struct {
	dir, dev   string
	line       uint64
	cache, hog *cgtest.Sandbox
	probe      *probe
	clock      monoClock
}

// benchWire is what the bench needs of a mechanism; Tripwire has it.
type benchWire interface {
	Arm(threshold uint64) error
	C() <-chan Fire
	Close() error
}

func (e *mechEnv) open(b *testing.B, m string) benchWire {
	switch m {
	case "none":
		return nil
	case "psi":
		w, err := newPSIWire(e.dir)
		if err != nil {
			b.Fatal(err)
		}
		return w
	}
	opts := Options{Mechanism: m}
	if m == kindWorkingSetPoll {
		opts = Options{Mechanism: KindWorkingSet, NoAssist: true}
	}
	w, err := New(e.dir, true, opts)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// progress goes to stderr at once (a benchmark's log comes at its end),
// so a slow guest shows where it is.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (e *mechEnv) run(b *testing.B, m string) {
	progress("%s: idle", m)
	w := e.open(b, m)
	if w != nil {
		b.Cleanup(func() { w.Close() })
	}
	arm := func(at uint64) {
		if w != nil {
			if err := w.Arm(at); err != nil {
				b.Fatal(err)
			}
		}
	}
	highFile := filepath.Join(e.dir, fileEventsLocal)

	// Idle: armed 1 GiB above usage (an idle node), nothing moving.
	arm(e.line - 96<<20 + 1<<30)
	time.Sleep(500 * time.Millisecond)
	drain(w)
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(idleFor)
	idleCPU := float64(cpuTime()-cpu0) / float64(time.Since(t0))
	idleFires := drain(w)
	arm(e.line)

	// Page cache above the line.
	progress("%s: cache state", m)
	// The reader on CPU 1, the probe on CPU 0 (a Guaranteed pod with the
	// static CPU manager has its cores to itself): the probe measures the
	// memory path, not CPU contention with dd.
	reader := exec.Command("sh", "-c", "while :; do dd if="+e.dev+" of=/dev/null bs=1M 2>/dev/null; done")
	if ts, err := exec.LookPath("taskset"); err == nil {
		reader = exec.Command(ts, "2", "sh", "-c", "while :; do dd if="+e.dev+" of=/dev/null bs=1M 2>/dev/null; done")
	}
	if err := e.cache.Start(b, reader); err != nil {
		b.Fatal(err)
	}
	readerDone := make(chan struct{})
	go func() { reader.Wait(); close(readerDone) }()
	time.Sleep(3 * time.Second)
	drain(w)
	// The consumer: takes every fire as it comes, as the manager does.
	stop, counted := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		var c <-chan Fire
		if w != nil {
			c = w.C()
		}
		for {
			select {
			case <-c:
				n++
			case <-stop:
				counted <- n
				return
			}
		}
	}()
	var sampled samples
	stopSampling := sampled.run(b, e.dir)
	h0 := readCounter(b, highFile, "high")
	cpu0, t0 = cpuTime(), time.Now()
	var lats []time.Duration
	for len(lats) < probeSamples && time.Since(t0) < probeFor {
		lats = append(lats, e.probe.fault(b))
		time.Sleep(5 * time.Millisecond)
	}
	window := time.Since(t0)
	cacheCPU := float64(cpuTime()-cpu0) / float64(window)
	close(stop)
	wakes := float64(<-counted) / window.Seconds()
	highs := float64(readCounter(b, highFile, "high")-h0) / window.Seconds()
	stopSampling()
	b.Logf("%s: cache state: kubepods usage %s MiB, working set %s MiB (min/mean/max of %d samples), line %d MiB; memory.high %s",
		m, sampled.usage, sampled.ws, sampled.n, e.line>>20, readString(b, filepath.Join(e.dir, fileHigh)))
	progress("%s: stopping the reader", m)
	if err := os.WriteFile(filepath.Join(e.cache.MemoryDir(), "cgroup.kill"), []byte("1"), 0o644); err != nil {
		b.Fatal(err)
	}
	select {
	case <-readerDone:
	case <-time.After(10 * time.Second):
		b.Fatal("reader alive 10 s after cgroup.kill")
	}
	progress("%s: reader stopped", m)
	dropCache(b, e.dev)
	progress("%s: reader stopped, cache at %d MiB", m, readUint(b, filepath.Join(e.cache.MemoryDir(), fileCurrent))>>20)
	slices.Sort(lats)

	b.ReportMetric(pct(lats, 0.50), "alloc-p50-µs")
	b.ReportMetric(pct(lats, 0.99), "alloc-p99-µs")
	b.ReportMetric(wakes, "wakeups/s")
	b.ReportMetric(highs, "kernel-high/s")
	b.ReportMetric(idleCPU*100, "idle-cpu-%")
	b.ReportMetric(cacheCPU*100, "cache-cpu-%")
	b.ReportMetric(0, "ns/op")
	b.Logf("%s: fault-in %d MiB in the Guaranteed cgroup: n %d p50 %.0f µs p99 %.0f µs; %.1f wake-ups/s (%d while idle), %.1f kernel high events/s; CPU idle (line 1 GiB away) %.3f%%, in the cache state %.3f%%; guest load %s",
		m, probeMiB, len(lats), pct(lats, 0.5), pct(lats, 0.99), wakes, idleFires, highs, idleCPU*100, cacheCPU*100, loadavg())

	if w == nil {
		return
	}
	// Ramps to the limit.
	progress("%s: ramps (kubepods inactive_file %d MiB)", m, readCounter(b, filepath.Join(e.dir, fileStat), "inactive_file")>>20)
	maxFile := filepath.Join(e.dir, "memory.max")
	if err := os.WriteFile(maxFile, []byte(strconv.FormatUint(e.line+rampMargin, 10)), 0o644); err != nil {
		b.Fatal(err)
	}
	defer os.WriteFile(maxFile, []byte("max"), 0o644)
	if tw, ok := w.(Tripwire); ok {
		defer func() { b.Logf("%s: tripwire stats after the ramps %+v", m, tw.Stats()) }()
	}
	for _, rate := range []struct {
		name string
		bps  uint64
	}{{"200MiB/s", 200 << 20}, {"1GiB/s", 1 << 30}} {
		var lats, uppers []time.Duration
		ooms, missed, early := 0, 0, 0
		var achieved float64
		for i := range rampTrials {
			high0 := readString(b, filepath.Join(e.dir, fileHigh))
			r := e.ramp(b, w, rate.bps)
			progress("%s: ramp %s trial %d (memory.high %s before): %+v", m, rate.name, i, high0, r)
			switch {
			case r.oom:
				ooms++
			case !r.fired:
				missed++
			case r.early:
				early++
			default:
				lats = append(lats, r.lat)
				if r.belowAgo != 0 {
					uppers = append(uppers, r.belowAgo)
				}
			}
			if r.rate > 0 {
				achieved = max(achieved, r.rate)
			}
		}
		slices.Sort(lats)
		slices.Sort(uppers)
		key := strings.TrimSuffix(rate.name, "/s")
		b.ReportMetric(pct(uppers, 0.99), key+"-p99-bound-µs")
		b.ReportMetric(pct(lats, 0.5), key+"-p50-µs")
		b.ReportMetric(pct(lats, 0.99), key+"-p99-µs")
		b.ReportMetric(float64(ooms), key+"-oom-first")
		b.ReportMetric(float64(early), key+"-early")
		b.Logf("%s: ramp %s (achieved up to %.0f MiB/s): %d trials, crossing to fire p50 %.0f µs p99 %.0f µs (%v; from the hog's last read below the line: p99 %.0f µs), fired before the hog read a usage near the line %d, kernel OOM kill first %d, no fire %d; guest load %s",
			m, rate.name, achieved, rampTrials, pct(lats, 0.5), pct(lats, 0.99), lats, pct(uppers, 0.99), early, ooms, missed, loadavg())
	}
}

type rampResult struct {
	fired, oom bool
	early      bool // fired before the hog read a usage near the line
	lat        time.Duration
	// For the log: the hog's last read below the line, before the fire,
	// and how far below it was.
	belowAgo  time.Duration
	belowLeft uint64
	rate      float64 // MiB/s the hog achieved up to the crossing
}

// ramp runs one hog trial: start, wait for a fire, kill the hog's cgroup,
// and tell whether the kernel OOM-killed first.
func (e *mechEnv) ramp(b *testing.B, w benchWire, bps uint64) rampResult {
	hogDir := e.hog.MemoryDir()
	oom0 := readCounter(b, filepath.Join(hogDir, fileEvents), "oom_kill")
	drain(w)
	if err := w.Arm(e.line); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rampEnv+"="+fmt.Sprintf("%s %d %d %d", filepath.Join(e.dir, fileCurrent), e.line, bps, (e.line+rampMargin)>>20+64))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := e.hog.Start(b, cmd); err != nil {
		b.Fatal(err)
	}
	// Every line is read before Wait, which closes the pipe: the hog's
	// output ends (EOF) when it dies.
	var lines []string
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		close(exited)
	}()
	defer cmd.Wait()

	var res rampResult
	var fire Fire
	timeout := time.After(30 * time.Second)
	select {
	case f, ok := <-w.C():
		if !ok {
			b.Fatal("wire closed")
		}
		fire, res.fired = f, true
	case <-exited:
	case <-timeout:
	}
	_ = os.WriteFile(filepath.Join(hogDir, "cgroup.kill"), []byte("1"), 0o644)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		b.Fatal("hog alive 10 s after cgroup.kill")
	}
	if !res.fired {
		// The hog died (OOM) or timed out: a late fire still counts as
		// none.
		select {
		case f := <-w.C():
			fire, res.fired = f, true
		case <-time.After(100 * time.Millisecond):
		}
	}
	// The crossing: the hog's last read below the line plus the time its
	// pace needs for the rest, or its first read at the line if sooner
	// (a hog throttled by memory.high reads late).
	var cross, below int64
	var belowUsage uint64
	pace := float64(bps)
	for _, l := range lines {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "cross":
			cross, _ = strconv.ParseInt(f[1], 10, 64)
			res.rate, _ = strconv.ParseFloat(f[2], 64)
		case len(f) == 4 && f[0] == "below":
			below, _ = strconv.ParseInt(f[1], 10, 64)
			belowUsage, _ = strconv.ParseUint(f[2], 10, 64)
			if r, err := strconv.ParseFloat(f[3], 64); err == nil && r > 0 {
				pace = min(float64(bps), r) // what it achieves under TCG
			}
		}
	}
	if below != 0 {
		est := below + int64(float64(e.line-belowUsage)/pace*1e9)
		if cross == 0 || est < cross {
			cross = est
		}
	}
	res.oom = readCounter(b, filepath.Join(hogDir, fileEvents), "oom_kill") > oom0
	if res.fired && below != 0 {
		res.belowAgo, res.belowLeft = time.Duration(e.clock.of(fire.At)-below), e.line-belowUsage
	}
	if res.fired && cross != 0 {
		res.lat = time.Duration(e.clock.of(fire.At) - cross)
	} else if res.fired {
		res.early = true // killed before it read a usage near the line
	}
	if res.oom {
		res.fired = false
	}
	// Let usage fall back and the wire see it (the working-set poll
	// re-arms below the line minus its hysteresis).
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if readUint(b, filepath.Join(e.dir, fileCurrent)) < e.line-16<<20 {
			break
		}
	}
	time.Sleep(150 * time.Millisecond)
	return res
}

// rampEnv makes the test binary a ramping hog: "USAGEFILE THRESHOLD BPS
// MIB": it maps MIB MiB and touches it 256 KiB at a time, paced at BPS
// bytes a second (as fast as it can when it cannot keep up), reading
// USAGEFILE after each step; within 16 MiB below THRESHOLD it prints
// "below <CLOCK_MONOTONIC ns> <usage> <bytes/s so far>" after each read, at the first usage
// >= THRESHOLD "cross <ns> <MiB/s so far>", and goes on until the
// mapping is used up or it is killed; then it waits (at most hogHold).
const rampEnv = "NODEGUARD_TRIPWIRE_RAMP"

func runRamp(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "ramp: bad %s=%q\n", rampEnv, spec)
		return 2
	}
	threshold, _ := strconv.ParseUint(f[1], 10, 64)
	bps, _ := strconv.ParseFloat(f[2], 64)
	mib, _ := strconv.Atoi(f[3])
	mem, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ramp: mmap: %v\n", err)
		return 1
	}
	// 4 KiB pages, so that usage grows by the hog's steps and not in
	// 2 MiB leaps between two of its reads.
	_ = unix.Madvise(mem, unix.MADV_NOHUGEPAGE)
	ufd, err := unix.Open(f[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ramp: %v\n", err)
		return 1
	}
	var buf [64]byte
	page, step := os.Getpagesize(), 256<<10
	begin := monotonicNow()
	crossed := false
	for off := 0; off < len(mem); off += step {
		for i := off; i < min(off+step, len(mem)); i += page {
			mem[i] = 1
		}
		if !crossed {
			raw, err := pread(ufd, buf[:])
			if err == nil {
				u, err := cgstat.ParseValue(raw, f[0])
				now := monotonicNow()
				switch {
				case err != nil:
				case u >= threshold:
					crossed = true
					fmt.Printf("cross %d %.0f\n", now, float64(off+step)/(1<<20)/(float64(now-begin)/1e9))
				case u+16<<20 >= threshold:
					fmt.Printf("below %d %d %.0f\n", now, u, float64(off+step)/(float64(now-begin)/1e9))
				}
			}
		}
		if due := begin + int64(float64(off+step)/bps*1e9); due > monotonicNow() {
			time.Sleep(time.Duration(due - monotonicNow()))
		}
	}
	time.Sleep(hogHold)
	return 0
}

// probe is the Guaranteed pod's allocator: the test binary with probeEnv.
type probe struct {
	in io.Writer
	rd *bufio.Reader
}

// probeEnv makes the test binary a probe of MIB MiB: on each "fault" line
// it drops its mapping (MADV_DONTNEED), touches every page again, and
// prints the ns that took.
const probeEnv = "NODEGUARD_TRIPWIRE_PROBE"

func runProbe(spec string) int {
	mib, err := strconv.Atoi(spec)
	if err != nil || mib <= 0 {
		fmt.Fprintf(os.Stderr, "probe: bad %s=%q\n", probeEnv, spec)
		return 2
	}
	go func() { time.Sleep(10 * hogHold); os.Exit(3) }()
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	_ = unix.SchedSetaffinity(0, &cpu0) // best effort, see the reader
	mem, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe: mmap: %v\n", err)
		return 1
	}
	page := os.Getpagesize()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if err := unix.Madvise(mem, unix.MADV_DONTNEED); err != nil {
			fmt.Fprintf(os.Stderr, "probe: madvise: %v\n", err)
			return 1
		}
		t0 := monotonicNow()
		for i := 0; i < len(mem); i += page {
			mem[i] = 1
		}
		fmt.Println(monotonicNow() - t0)
	}
	return 0
}

func startProbe(b *testing.B, sb *cgtest.Sandbox, mib int) *probe {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), probeEnv+"="+strconv.Itoa(mib))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := sb.Start(b, cmd); err != nil {
		b.Fatal(err)
	}
	go cmd.Wait()
	b.Cleanup(func() { in.Close() })
	return &probe{in: in, rd: bufio.NewReader(out)}
}

func (p *probe) fault(b *testing.B) time.Duration {
	if _, err := io.WriteString(p.in, "fault\n"); err != nil {
		b.Fatal(err)
	}
	l, err := p.rd.ReadString('\n')
	if err != nil {
		b.Fatalf("probe: %v", err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(l), 10, 64)
	if err != nil {
		b.Fatalf("probe: %q", l)
	}
	return time.Duration(ns)
}

// psiWire is the PSI candidate: a trigger on memory.pressure, polled for
// POLLPRI by a goroutine.
type psiWire struct {
	fd, stop int // the trigger, and an eventfd that stops the poller
	c        chan Fire
	done     chan struct{}
}

// psiTrigger: 10 ms of "some" stall within 500 ms, the shortest window
// the kernel takes (with CAP_SYS_RESOURCE; without it, multiples of 2 s).
const psiTrigger = "some 10000 500000"

func newPSIWire(dir string) (*psiWire, error) {
	name := filepath.Join(dir, "memory.pressure")
	fd, err := unix.Open(name, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	if _, err := unix.Write(fd, []byte(psiTrigger+"\x00")); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("write %q to %s: %w", psiTrigger, name, err)
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := &psiWire{fd: fd, stop: stop, c: make(chan Fire, DefaultBuffer), done: make(chan struct{})}
	go w.run(dir)
	return w, nil
}

func (w *psiWire) run(dir string) {
	defer close(w.done)
	for {
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLPRI}, {Fd: int32(w.stop), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if fds[1].Revents != 0 || fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
		if fds[0].Revents&unix.POLLPRI != 0 {
			select {
			case w.c <- Fire{At: time.Now(), Dir: dir, Kind: "psi"}:
			default:
			}
		}
	}
}

func (w *psiWire) Arm(uint64) error { return nil } // a PSI trigger has no line
func (w *psiWire) C() <-chan Fire   { return w.c }
func (w *psiWire) Close() error {
	var one = [8]byte{1}
	unix.Write(w.stop, one[:])
	<-w.done
	unix.Close(w.stop)
	return unix.Close(w.fd)
}

// ramDisk loads brd (a 1 GiB RAM block device whose unwritten sectors read
// as zeros without allocating) from testdata/modules/<release>/brd.ko,
// unless /dev/ram0 exists, and returns /dev/ram0. Buffered reads of it give
// the bench reclaimable page cache in a guest that has no disk.
func ramDisk(b *testing.B) string {
	const dev = "/dev/ram0"
	if _, err := os.Stat(dev); err == nil {
		return dev
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		b.Fatal(err)
	}
	ko := filepath.Join("testdata", "modules", unix.ByteSliceToString(u.Release[:]), "brd.ko")
	f, err := os.Open(ko)
	if err != nil {
		cgtest.Need(b, false, fmt.Sprintf("no %s for page cache (run scripts/vm-modules.sh testdata/modules brd): %v", dev, err))
	}
	defer f.Close()
	if err := unix.FinitModule(int(f.Fd()), "rd_nr=1 rd_size=1048576", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		b.Fatalf("load %s: %v", ko, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(dev); err == nil {
			return dev
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s did not appear after loading %s", dev, ko)
		}
	}
}

// logTracepoints logs the memcg-related tracepoints this kernel has: the
// BPF candidate can only hook these.
func logTracepoints(b *testing.B) {
	var found []string
	for _, sys := range []string{"vmscan", "memcg"} {
		ents, err := os.ReadDir(filepath.Join("/sys/kernel/tracing/events", sys))
		if err != nil {
			found = append(found, sys+": none")
			continue
		}
		for _, e := range ents {
			if e.IsDir() && (sys == "memcg" || strings.Contains(e.Name(), "memcg")) {
				found = append(found, sys+"/"+e.Name())
			}
		}
	}
	var u unix.Utsname
	unix.Uname(&u)
	b.Logf("kernel %s: memcg tracepoints: %s", unix.ByteSliceToString(u.Release[:]), strings.Join(found, ", "))
}

// samples are kubepods' usage and working set, read every 250 ms.
type samples struct {
	n         int
	usage, ws string // "min/mean/max" in MiB
}

func (s *samples) run(b *testing.B, dir string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var us, ws []uint64
		for {
			raw, err1 := os.ReadFile(filepath.Join(dir, fileCurrent))
			st, err2 := os.ReadFile(filepath.Join(dir, fileStat))
			if err1 == nil && err2 == nil {
				u, e1 := cgstat.ParseValue(raw, fileCurrent)
				in, e2 := cgstat.ParseCounter(st, "inactive_file", fileStat)
				if e1 == nil && e2 == nil {
					us, ws = append(us, u), append(ws, u-min(u, in))
				}
			}
			select {
			case <-quit:
				s.n, s.usage, s.ws = len(us), mmm(us), mmm(ws)
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() { close(quit); <-done }
}

func mmm(v []uint64) string {
	if len(v) == 0 {
		return "-"
	}
	var sum uint64
	for _, x := range v {
		sum += x
	}
	return fmt.Sprintf("%d/%d/%d", slices.Min(v)>>20, (sum/uint64(len(v)))>>20, slices.Max(v)>>20)
}

func drain(w benchWire) int {
	if w == nil {
		return 0
	}
	n := 0
	for {
		select {
		case <-w.C():
			n++
		default:
			return n
		}
	}
}

func cpuTime() time.Duration {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return -1
	}
	// nearest rank
	i := int(float64(len(d))*p+0.999999) - 1
	return float64(d[max(0, min(i, len(d)-1))]) / float64(time.Microsecond)
}

func readString(b *testing.B, name string) string {
	raw, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(string(raw))
}

func readUint(b *testing.B, name string) uint64 {
	raw, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	v, err := cgstat.ParseValue(raw, name)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func readCounter(b *testing.B, name, key string) uint64 {
	raw, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	v, err := cgstat.ParseCounter(raw, key, name)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// dropCache drops the page cache of the RAM disk (POSIX_FADV_DONTNEED on
// the block device), so the next phase starts without it.
func dropCache(b *testing.B, dev string) {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatalf("drop the page cache of %s: %v", dev, err)
	}
}

func loadavg() string {
	raw, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(raw))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
