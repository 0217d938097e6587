// Command hog is the memory hog of `nodeguard bench eviction`: it charges
// anonymous memory to its cgroup at a set rate and reports its progress
// on stdout, one line per step, "<unix-nanos> <allocated-bytes>".
//
//	hog --rate 200Mi --step 1Mi --max 1Gi [--delay 1s]   ramp, never frees
//	hog --steady 32Mi [--period 20ms]                     hold and rewrite
//
// lab/images builds it statically (CGO_ENABLED=0, -trimpath, no
// build id) from this file, embedded in package lab/hog, into the image
// registry.local/nodeguard/hog:1. It uses only the standard library, so
// that build needs no module proxy. See package lab/hog for the output
// contract.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hog:", err)
		os.Exit(2)
	}
}

type options struct {
	rate, step, max, steady uint64
	delay, period           time.Duration
	thp                     bool
}

func parseOptions(args []string) (options, error) {
	var o options
	var rate, step, max, steady string
	fs := flag.NewFlagSet("hog", flag.ContinueOnError)
	fs.StringVar(&rate, "rate", "", "allocation rate in bytes per second (suffixes Ki, Mi, Gi; \"/s\" allowed)")
	fs.StringVar(&step, "step", "1Mi", "bytes allocated (and reported) per step")
	fs.StringVar(&max, "max", "", "stop allocating at this many bytes")
	fs.StringVar(&steady, "steady", "", "steady mode: hold this many bytes and rewrite them")
	fs.DurationVar(&o.delay, "delay", 0, "ramp mode: wait this long after the first line before allocating")
	fs.DurationVar(&o.period, "period", 20*time.Millisecond, "steady mode: rewrite every page this often")
	fs.BoolVar(&o.thp, "thp", false, "ask for transparent huge pages (madvise MADV_HUGEPAGE); measured slower here (0.6-0.9 GiB/s against 1.7-2 GiB/s on 4 KiB pages)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if steady != "" {
		if rate != "" || max != "" {
			return o, errors.New("--steady excludes --rate and --max")
		}
		if o.steady, err = parseBytes(steady); err != nil || o.steady == 0 {
			return o, fmt.Errorf("--steady %q: want a positive size", steady)
		}
		if o.period <= 0 {
			return o, fmt.Errorf("--period %v: want a positive duration", o.period)
		}
		return o, nil
	}
	if o.rate, err = parseBytes(strings.TrimSuffix(rate, "/s")); err != nil || o.rate == 0 {
		return o, fmt.Errorf("--rate %q: want a positive rate, e.g. 200Mi", rate)
	}
	if o.step, err = parseBytes(step); err != nil || o.step == 0 {
		return o, fmt.Errorf("--step %q: want a positive size", step)
	}
	if o.max, err = parseBytes(max); err != nil || o.max == 0 {
		return o, fmt.Errorf("--max %q: want a positive size", max)
	}
	if o.delay < 0 {
		return o, fmt.Errorf("--delay %v: want a duration >= 0", o.delay)
	}
	return o, nil
}

// parseBytes reads a byte count: digits with an optional binary (Ki, Mi,
// Gi, Ti) or decimal (k, M, G, T) suffix.
func parseBytes(s string) (uint64, error) {
	mult := uint64(1)
	for _, u := range []struct {
		suffix string
		mult   uint64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, err
	}
	if n > ^uint64(0)/mult {
		return 0, strconv.ErrRange
	}
	return n * mult, nil
}

func run(args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	if o.steady > 0 {
		return steady(o)
	}
	return ramp(o)
}

// mmap maps n bytes of private anonymous memory, reserving no swap: pages
// are charged to the cgroup only when written.
func mmap(n uint64, thp bool) ([]byte, error) {
	if n > uint64(^uint(0)>>1) {
		return nil, fmt.Errorf("mmap %d bytes: too large", n)
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	if thp {
		// Best effort: with THP "never" (or a kernel without it) the hog
		// still runs, on 4 KiB pages.
		_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	}
	return b, nil
}

// report writes "<unix-nanos> <bytes>\n" in one write(2). A failed write
// is ignored: the harness learns of lost lines by their absence, and a hog
// that stopped over its stdout would no longer be a hog.
func report(buf []byte, at time.Time, n uint64) []byte {
	buf = strconv.AppendInt(buf[:0], at.UnixNano(), 10)
	buf = append(buf, ' ')
	buf = strconv.AppendUint(buf, n, 10)
	buf = append(buf, '\n')
	_, _ = os.Stdout.Write(buf)
	return buf
}

// touch writes one byte in every page of b, which faults each page in and
// charges it.
func touch(b []byte, page int, v byte) {
	for i := 0; i < len(b); i += page {
		b[i] = v
	}
}

// dueAt is when the allocated total may reach n bytes at rate bytes/s.
func dueAt(start time.Time, n, rate uint64) time.Time {
	return start.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
}

func ramp(o options) error {
	mem, err := mmap(o.max, o.thp)
	if err != nil {
		return err
	}
	page := os.Getpagesize()
	buf := make([]byte, 0, 48)
	buf = report(buf, time.Now(), 0)
	time.Sleep(o.delay)
	start := time.Now()
	var done uint64
	for done < o.max {
		n := min(o.step, o.max-done)
		// Sleep until this step is due; when behind, catch up without
		// sleeping, so the achieved rate is the lower of --rate and what
		// the machine can fault in.
		if wait := time.Until(dueAt(start, done+n, o.rate)); wait > 0 {
			time.Sleep(wait)
		}
		touch(mem[done:done+n], page, 1)
		done += n
		buf = report(buf, time.Now(), done)
	}
	for { // hold the memory until killed
		time.Sleep(time.Hour)
	}
}

func steady(o options) error {
	mem, err := mmap(o.steady, o.thp)
	if err != nil {
		return err
	}
	page := os.Getpagesize()
	touch(mem, page, 1)
	report(make([]byte, 0, 48), time.Now(), o.steady)
	for v := byte(2); ; v++ {
		time.Sleep(o.period)
		touch(mem, page, v)
	}
}
