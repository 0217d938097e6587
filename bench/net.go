package bench

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nodeguard/nodeguard/netplumb"
)

// NetConfig chooses the pod network benchmark's scenario.
type NetConfig struct {
	Pods     int       // pods attached, then detached; default 50
	Parallel int       // ADDs (and DELs) in flight at once; default 1
	Out      string    // directory for net.csv, net-add.png and net-del.png; "" writes none
	BinDirs  []string  // CNI plugin directories; nil is netplumb's default
	Progress io.Writer // progress lines; nil is silent
}

// NetReport is what RunNet measured.
type NetReport struct {
	Pods, Parallel int
	Subnet         netip.Prefix
	Add, Del       Summary         // per-pod latency of Direct.Add and Direct.Del
	AddSamples     []time.Duration // indexed by pod
	DelSamples     []time.Duration
	AddElapsed     time.Duration // wall time of the whole ADD phase
	DelElapsed     time.Duration
	Verified       int      // pods whose plumbing netplumb.Verify confirmed after ADD
	Files          []string // what was written to Out
}

// RunNet times the pod network's ADD and DEL: it creates a node network
// namespace of its own under a temporary directory (the bridge, veths,
// IFB devices and iptables rules of portmap live only there), attaches
// cfg.Pods pods with netplumb.Direct (bridge + host-local + portmap +
// bandwidth, the chain nodeguard installs), verifies each through
// netlink (untimed), and detaches them. Each sample is one Add or Del
// call: netns creation, the three plugins, and netns removal. Everything
// is removed before it returns, on error too.
func RunNet(ctx context.Context, cfg NetConfig) (rep NetReport, retErr error) {
	if cfg.Pods == 0 {
		cfg.Pods = 50
	}
	if cfg.Parallel == 0 {
		cfg.Parallel = 1
	}
	if cfg.Pods < 0 || cfg.Parallel < 0 {
		return rep, fmt.Errorf("bench net: pods (%d) and parallel (%d) must be positive", cfg.Pods, cfg.Parallel)
	}
	rep.Pods, rep.Parallel = cfg.Pods, cfg.Parallel

	root, err := os.MkdirTemp("", "nodeguard-bench-net-")
	if err != nil {
		return rep, fmt.Errorf("bench net: %w", err)
	}
	defer func() { retErr = errors.Join(retErr, os.RemoveAll(root)) }()
	nodeNS := filepath.Join(root, "node")
	if err := netplumb.NewNetNS(nodeNS); err != nil {
		return rep, fmt.Errorf("bench net: %w", err)
	}
	defer func() { retErr = errors.Join(retErr, netplumb.RemoveNetNS(nodeNS)) }()
	nc := netplumb.DefaultConfig()
	nc.Name, nc.Bridge, nc.MaxPods, nc.BinDirs = "ngbench", "ngbench0", cfg.Pods, cfg.BinDirs
	nc.ConfDir, nc.IPAMDir, nc.CacheDir = filepath.Join(root, "net.d"), filepath.Join(root, "ipam"), filepath.Join(root, "cache")
	netnsDir := filepath.Join(root, "netns")
	d, err := netplumb.NewDirect(ctx, nc, nodeNS, netnsDir)
	if err != nil {
		return rep, fmt.Errorf("bench net: %w", err)
	}
	rep.Subnet = d.Config().Subnet

	pods := make([]*netplumb.Attachment, cfg.Pods)
	defer func() {
		// Undo what a failed or cancelled run left: DEL under a fresh
		// bounded context, then any netns file still there.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, a := range pods {
			if a != nil {
				retErr = errors.Join(retErr, d.Del(cctx, a))
			}
		}
		ents, _ := os.ReadDir(netnsDir)
		for _, e := range ents {
			retErr = errors.Join(retErr, netplumb.RemoveNetNS(filepath.Join(netnsDir, e.Name())))
		}
	}()

	progressf(cfg.Progress, "net: ADD %d pods, %d at a time, subnet %s, node netns %s", cfg.Pods, cfg.Parallel, rep.Subnet, nodeNS)
	t0 := time.Now()
	rep.AddSamples, err = parallel(ctx, cfg.Pods, cfg.Parallel, func(ctx context.Context, i int) error {
		a, err := d.Add(ctx, fmt.Sprintf("bench-%05d", i), netplumb.AddOptions{PodName: fmt.Sprintf("net-%d", i), PodNamespace: "bench"})
		pods[i] = a
		return err
	})
	rep.AddElapsed = time.Since(t0)
	if err != nil {
		return rep, fmt.Errorf("bench net: %w", err)
	}
	for _, a := range pods {
		if _, err := d.Verify(ctx, a); err != nil {
			return rep, fmt.Errorf("bench net: %w", err)
		}
		rep.Verified++
	}
	progressf(cfg.Progress, "net: %d pods attached and verified in %s; DEL", cfg.Pods, rep.AddElapsed.Round(time.Millisecond))
	t0 = time.Now()
	rep.DelSamples, err = parallel(ctx, cfg.Pods, cfg.Parallel, func(ctx context.Context, i int) error {
		if err := d.Del(ctx, pods[i]); err != nil {
			return err
		}
		pods[i] = nil
		return nil
	})
	rep.DelElapsed = time.Since(t0)
	if err != nil {
		return rep, fmt.Errorf("bench net: %w", err)
	}
	rep.Add, rep.Del = Summarize(rep.AddSamples), Summarize(rep.DelSamples)
	progressf(cfg.Progress, "net: %d pods detached in %s", cfg.Pods, rep.DelElapsed.Round(time.Millisecond))
	if cfg.Out != "" {
		rep.Files, err = writeNetFiles(cfg.Out, rep)
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// writeNetFiles writes net.csv (one row per pod) and one latency histogram
// per operation.
func writeNetFiles(dir string, rep NetReport) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench net: create %s: %w", dir, err)
	}
	path := filepath.Join(dir, "net.csv")
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench net: %w", err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"pod", "add_ns", "del_ns"})
	for i := range rep.AddSamples {
		_ = w.Write([]string{strconv.Itoa(i), strconv.FormatInt(int64(rep.AddSamples[i]), 10), strconv.FormatInt(int64(rep.DelSamples[i]), 10)})
	}
	w.Flush()
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return nil, fmt.Errorf("bench net: write %s: %w", path, err)
	}
	files := []string{path}
	for _, p := range []struct {
		name, title string
		samples     []time.Duration
	}{
		{"net-add.png", "netplumb.Direct.Add: netns + bridge + host-local + portmap + bandwidth", rep.AddSamples},
		{"net-del.png", "netplumb.Direct.Del: DEL of the chain + netns removal", rep.DelSamples},
	} {
		out := filepath.Join(dir, p.name)
		title := fmt.Sprintf("%s\n%d pods, %d in parallel", p.title, rep.Pods, rep.Parallel)
		if err := LatencyHistogramPNG(out, title, p.samples); err != nil {
			return files, fmt.Errorf("bench net: %w", err)
		}
		files = append(files, out)
	}
	return files, nil
}

// WriteNetTable prints the ADD and DEL distributions.
func WriteNetTable(w io.Writer, rep NetReport) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	fmt.Fprintf(w, "%d pods, %d in parallel, subnet %s, %d verified\n", rep.Pods, rep.Parallel, rep.Subnet, rep.Verified)
	fmt.Fprintf(w, "%-4s %6s %10s %10s %10s %10s %10s %10s\n", "op", "n", "p50", "p90", "p99", "max", "mean", "pods/s")
	for _, r := range []struct {
		op      string
		s       Summary
		elapsed time.Duration
	}{{"ADD", rep.Add, rep.AddElapsed}, {"DEL", rep.Del, rep.DelElapsed}} {
		fmt.Fprintf(w, "%-4s %6d %10s %10s %10s %10s %10s %10.1f\n", r.op, r.s.N, ms(r.s.P50), ms(r.s.P90), ms(r.s.P99), ms(r.s.Max), ms(r.s.Mean),
			float64(r.s.N)/r.elapsed.Seconds())
	}
}
