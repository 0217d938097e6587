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
//   - working_set: the adaptive working-set poll (KindWorkingSet).
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
//	  go test -exec bin/vmrun -run '^$' -bench V2Mechanisms -benchtime 1x ./oom/tripwire
func BenchmarkV2Mechanisms(b *testing.B) {
	cgtest.RequireMode(b, cgroups.ModeV2)
	dev := ramDisk(b)
	logTracepoints(b)
	kube := cgtest.New(b)
	start := time.Now()
	for i := range benchPods {
		pod := kube.Child(b, fmt.Sprintf("pod%03d", i))
		cmd := exec.Command("sleep", "3600")
		if err := pod.Start(b, cmd); err != nil {
			b.Fatal(err)
		}
		go cmd.Wait() // killed by the sandbox's cleanup
	}
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
		benchPods, time.Since(start).Round(time.Millisecond), base>>20, line>>20, loadavg())

	env := &mechEnv{dir: dir, line: line, dev: dev, cache: cache, hog: hogCG, probe: probe, clock: newMonoClock()}
	for _, m := range []string{"none", KindMemoryHigh, "psi", KindWorkingSet} {
		b.Run("mechanism="+m, func(b *testing.B) {
			env.run(b, m)
		})
	}
}

// Shape of BenchmarkV2Mechanisms.
const (
	benchPods  = 250
	cacheLimit = 160 << 20
	probeMiB   = 8
	// probeSamples and probeFor bound the allocation samples: whichever
	// comes first (a throttled probe can take seconds per sample).
	probeSamples = 200
	probeFor     = 20 * time.Second
	rampTrials   = 5
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
	w, err := New(e.dir, true, Options{Mechanism: m})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

func (e *mechEnv) run(b *testing.B, m string) {
	w := e.open(b, m)
	if w != nil {
		b.Cleanup(func() { w.Close() })
		if err := w.Arm(e.line); err != nil {
			b.Fatal(err)
		}
	}
	fires := func() int { return drain(w) }
	highFile := filepath.Join(e.dir, fileEventsLocal)

	// Idle: armed, nothing moving.
	time.Sleep(500 * time.Millisecond)
	fires()
	cpu0, t0 := cpuTime(), time.Now()
	time.Sleep(3 * time.Second)
	idleCPU := float64(cpuTime()-cpu0) / float64(time.Since(t0))
	idleFires := fires()

	// Page cache above the line.
	reader := exec.Command("sh", "-c", "while :; do dd if="+e.dev+" of=/dev/null bs=1M 2>/dev/null; done")
	if err := e.cache.Start(b, reader); err != nil {
		b.Fatal(err)
	}
	readerDone := make(chan struct{})
	go func() { reader.Wait(); close(readerDone) }()
	time.Sleep(3 * time.Second)
	fires()
	h0 := readCounter(b, highFile, "high")
	cpu0, t0 = cpuTime(), time.Now()
	var lats []time.Duration
	for len(lats) < probeSamples && time.Since(t0) < probeFor {
		lats = append(lats, e.probe.fault(b))
		time.Sleep(5 * time.Millisecond)
	}
	window := time.Since(t0)
	cacheCPU := float64(cpuTime()-cpu0) / float64(window)
	wakes := float64(fires()) / window.Seconds()
	highs := float64(readCounter(b, highFile, "high")-h0) / window.Seconds()
	usage := readUint(b, filepath.Join(e.dir, fileCurrent))
	inactive := readCounter(b, filepath.Join(e.dir, fileStat), "inactive_file")
	b.Logf("%s: cache state: kubepods usage %d MiB, working set %d MiB, line %d MiB; memory.high %s",
		m, usage>>20, (usage-min(usage, inactive))>>20, e.line>>20, readString(b, filepath.Join(e.dir, fileHigh)))
	if err := e.cache.Kill(); err != nil {
		b.Fatal(err)
	}
	<-readerDone
	reclaim(e.cache.MemoryDir())
	slices.Sort(lats)

	b.ReportMetric(pct(lats, 0.50), "alloc-p50-µs")
	b.ReportMetric(pct(lats, 0.99), "alloc-p99-µs")
	b.ReportMetric(wakes, "wakeups/s")
	b.ReportMetric(highs, "kernel-high/s")
	b.ReportMetric(idleCPU*100, "idle-cpu-%")
	b.ReportMetric(cacheCPU*100, "cache-cpu-%")
	b.ReportMetric(0, "ns/op")
	b.Logf("%s: fault-in %d MiB in the Guaranteed cgroup: n %d p50 %.0f µs p99 %.0f µs; %.1f wake-ups/s (%d while idle), %.1f kernel high events/s; CPU idle %.3f%%, in the cache state %.3f%%; guest load %s",
		m, probeMiB, len(lats), pct(lats, 0.5), pct(lats, 0.99), wakes, idleFires, highs, idleCPU*100, cacheCPU*100, loadavg())

	if w == nil {
		return
	}
	// Ramps to the limit.
	maxFile := filepath.Join(e.dir, "memory.max")
	if err := os.WriteFile(maxFile, []byte(strconv.FormatUint(e.line+rampMargin, 10)), 0o644); err != nil {
		b.Fatal(err)
	}
	defer os.WriteFile(maxFile, []byte("max"), 0o644)
	for _, rate := range []struct {
		name string
		bps  uint64
	}{{"200MiB/s", 200 << 20}, {"1GiB/s", 1 << 30}} {
		var lats []time.Duration
		ooms, missed := 0, 0
		var achieved float64
		for range rampTrials {
			r := e.ramp(b, w, rate.bps)
			achieved += r.rate / rampTrials
			switch {
			case r.oom:
				ooms++
			case !r.fired:
				missed++
			default:
				lats = append(lats, r.lat)
			}
		}
		slices.Sort(lats)
		key := strings.TrimSuffix(rate.name, "/s")
		b.ReportMetric(pct(lats, 0.5), key+"-p50-µs")
		b.ReportMetric(pct(lats, 0.99), key+"-p99-µs")
		b.ReportMetric(float64(ooms), key+"-oom-first")
		b.Logf("%s: ramp %s (achieved %.0f MiB/s): %d trials, crossing to fire p50 %.0f µs p99 %.0f µs (all %v), kernel OOM kill first %d, no fire %d; guest load %s",
			m, rate.name, achieved, rampTrials, pct(lats, 0.5), pct(lats, 0.99), lats, ooms, missed, loadavg())
	}
}

type rampResult struct {
	fired, oom bool
	lat        time.Duration
	rate       float64 // MiB/s the hog achieved up to the crossing
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
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()

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
	var cross int64
	for l := range lines {
		f := strings.Fields(l)
		if len(f) == 3 && f[0] == "cross" {
			cross, _ = strconv.ParseInt(f[1], 10, 64)
			res.rate, _ = strconv.ParseFloat(f[2], 64)
		}
	}
	res.oom = readCounter(b, filepath.Join(hogDir, fileEvents), "oom_kill") > oom0
	if res.fired && cross != 0 {
		res.lat = time.Duration(e.clock.of(fire.At) - cross)
	} else if res.fired {
		res.lat = 0 // fired before the hog read a usage at the line
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
// USAGEFILE after each step; at the first usage >= THRESHOLD it prints
// "cross <CLOCK_MONOTONIC ns> <MiB/s so far>" and goes on until the
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
				if u, err := ParseUint(raw, f[0]); err == nil && u >= threshold {
					now := monotonicNow()
					crossed = true
					fmt.Printf("cross %d %.0f\n", now, float64(off+step)/(1<<20)/(float64(now-begin)/1e9))
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
	fd   int
	c    chan Fire
	stop chan struct{}
	done chan struct{}
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
	w := &psiWire{fd: fd, c: make(chan Fire, DefaultBuffer), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(dir)
	return w, nil
}

func (w *psiWire) run(dir string) {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLPRI}}
		n, err := unix.Poll(fds, 50)
		if err != nil || n == 0 {
			continue
		}
		if fds[0].Revents&unix.POLLPRI != 0 {
			select {
			case w.c <- Fire{At: time.Now(), Dir: dir, Kind: "psi"}:
			default:
			}
		}
		if fds[0].Revents&(unix.POLLERR|unix.POLLNVAL) != 0 {
			return
		}
	}
}

func (w *psiWire) Arm(uint64) error { return nil } // a PSI trigger has no line
func (w *psiWire) C() <-chan Fire   { return w.c }
func (w *psiWire) Close() error {
	close(w.stop)
	<-w.done
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
	v, err := ParseUint([]byte(readString(b, name)), name)
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
	v, err := ParseEventCounter(raw, key, name)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// reclaim drops what a cgroup holds (memory.reclaim, 5.19+), so the next
// phase starts without the cache.
func reclaim(dir string) {
	for range 8 {
		if err := os.WriteFile(filepath.Join(dir, "memory.reclaim"), []byte("1G"), 0o644); err == nil {
			return
		}
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
