package bench

// nodeguard bench overhead --kubelet: nodeguard and the real kubelet take
// turns on the same pods, each on a fresh private containerd of its own,
// driven the same way (a static pod manifest directory, read back from
// the runtime: bench/staticpods) and measured by the same ruler
// (RunOverhead). The two never run at once on one containerd: the kubelet
// kills the runtime's pods it does not know.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/nodeguard/nodeguard/bench/staticpods"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// Process names of the side-by-side rows: the agent's row is "agent"
// whichever agent it is, so that rows of the two line up.
const (
	ProcAgent      = "agent"
	ProcContainerd = "containerd"
	ProcShims      = "containerd shims"
)

// Contender is one agent running for one turn of the side-by-side
// benchmark.
type Contender interface {
	// PID is the agent's own process, whose CPU and RSS are its row.
	PID() int
	// LogPath is where its output goes.
	LogPath() string
	// ProbeTotals reads its prober_probe_total.
	ProbeTotals(ctx context.Context) (ProbeTotals, error)
	// Close stops it and removes what it made.
	Close() error
}

// Setup is what a Competitor starts on: a fresh private containerd, a
// directory of its own, the manifest directory it must read static pods
// from, and the most pods it must admit.
type Setup struct {
	Env         *crienv.Env
	Dir         string
	ManifestDir string
	MaxPods     int
	Progress    io.Writer
}

// Competitor is one agent of the side-by-side benchmark.
type Competitor struct {
	Name  string
	Start func(ctx context.Context, s Setup) (Contender, error)
	// HostNetwork: the agent runs in this machine's own network
	// namespace, not the private runtime's, so its network probes
	// (httpGet, tcpSocket, grpc) would dial pod addresses from there,
	// out of the default route. SideBySide refuses them for it.
	HostNetwork bool
}

// SideBySideOptions is one run of the side-by-side benchmark.
type SideBySideOptions struct {
	// Config is the scenario of each turn; Image, Progress, MaxPods,
	// RuntimeView and ProbeTotals are set here.
	Config OverheadConfig
	// Competitors take turns in this order in odd runs and in the
	// reverse order in even ones, so that neither always goes first.
	Competitors []Competitor
	// Runs is how many turns each competitor gets; default 1.
	Runs int
	// NewClient is the pod driver of a turn; nil is bench/staticpods:
	// static pods in manifestDir, read back from env's runtime.
	NewClient func(manifestDir string, env *crienv.Env) (PodClient, error)
	// OutDir, when set, gets sidebyside.csv, sidebyside-samples.csv,
	// sidebyside.png and each turn's agent log.
	OutDir string
	Log    *slog.Logger
	// Report gets the table and the files written; Progress a line per
	// step.
	Report, Progress io.Writer
}

// SideRow is one process's figures in one phase of one turn.
type SideRow struct {
	Agent string
	Run   int
	OverheadRow
}

// maxPodsFor is the admission limit a turn gives its agent: the largest
// count plus the churned pods in flight, plus room for a pod still going.
func maxPodsFor(cfg OverheadConfig) int {
	return slices.Max(cfg.Pods) + cfg.ChurnInFlight() + 8
}

// SideBySide runs every competitor's turns and reports them side by side.
func SideBySide(ctx context.Context, o SideBySideOptions) (rows []SideRow, retErr error) {
	if len(o.Competitors) == 0 {
		return nil, errors.New("bench side by side: no competitor")
	}
	if o.NewClient == nil {
		o.NewClient = func(dir string, env *crienv.Env) (PodClient, error) { return staticpods.New(dir, env.RuntimeClient()) }
	}
	for _, c := range o.Competitors {
		for _, k := range o.Config.Probes {
			if c.HostNetwork && k != "exec" {
				return nil, fmt.Errorf("bench side by side: %s runs in this machine's network namespace, where a %s probe would dial pod addresses out of the default route: only exec probes with it", c.Name, k)
			}
		}
	}
	runs := max(o.Runs, 1)
	cfg := o.Config.withDefaults()
	cfg.Progress = o.Progress
	cfg.RuntimeView = true
	cfg.MaxPods = maxPodsFor(cfg)
	for run := 1; run <= runs; run++ {
		order := slices.Clone(o.Competitors)
		if run%2 == 0 {
			slices.Reverse(order)
		}
		for _, c := range order {
			progressf(o.Progress, "side by side: run %d of %d: %s", run, runs, c.Name)
			got, err := sideTurn(ctx, o, c, run, cfg)
			rows = append(rows, got...)
			if err != nil {
				return rows, fmt.Errorf("%s, run %d: %w", c.Name, run, err)
			}
		}
	}
	WriteSideBySideTable(o.Report, rows, cfg, o.Competitors)
	if o.OutDir != "" {
		files, err := WriteSideBySideFiles(o.OutDir, rows, o.Competitors, cfg.Interval)
		for _, f := range files {
			fmt.Fprintf(o.Report, "wrote %s\n", f)
		}
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}

// sideTurn is one competitor's turn: a fresh containerd, the agent on it,
// RunOverhead, and everything removed again.
func sideTurn(ctx context.Context, o SideBySideOptions, c Competitor, run int, cfg OverheadConfig) (rows []SideRow, retErr error) {
	progressf(o.Progress, "side by side: %s: starting a fresh private containerd", c.Name)
	env, err := crienv.Start(ctx, crienv.Options{Log: o.Log})
	if err != nil {
		return nil, err
	}
	defer func() { retErr = errors.Join(retErr, env.Close()) }()
	cfg.Image = env.BusyboxImage()
	dir, err := os.MkdirTemp("", "ngside-"+c.Name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		return nil, err
	}
	client, err := o.NewClient(manifests, env)
	if err != nil {
		return nil, err
	}
	agent, err := c.Start(ctx, Setup{Env: env, Dir: dir, ManifestDir: manifests, MaxPods: cfg.MaxPods, Progress: o.Progress})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", c.Name, err)
	}
	defer func() {
		retErr = errors.Join(retErr, agent.Close())
		if o.OutDir != "" {
			keepLog(agent.LogPath(), filepath.Join(o.OutDir, fmt.Sprintf("%s-run%d.log", c.Name, run)))
		}
	}()
	progressf(o.Progress, "side by side: %s running (pid %d), log %s", c.Name, agent.PID(), agent.LogPath())
	cfg.ProbeTotals = agent.ProbeTotals
	pid := agent.PID()
	groups := []ProcGroup{
		{Name: ProcAgent, PIDs: func() ([]int, error) { return []int{pid}, nil }},
		{Name: ProcContainerd, PIDs: func() ([]int, error) {
			return FindProcs("/proc", func(argv []string) bool {
				return len(argv) > 0 && filepath.Base(argv[0]) == "containerd" && slices.Contains(argv, filepath.Join(env.Dir(), "config.toml"))
			})
		}},
		{Name: ProcShims, PIDs: func() ([]int, error) {
			return FindProcs("/proc", func(argv []string) bool {
				return len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") && slices.Contains(argv, env.Socket())
			})
		}},
	}
	got, err := RunOverhead(ctx, client, groups, cfg)
	for _, r := range got {
		rows = append(rows, SideRow{Agent: c.Name, Run: run, OverheadRow: r})
	}
	if err != nil {
		return rows, fmt.Errorf("%w (the agent's log: %s)", err, agent.LogPath())
	}
	return rows, nil
}

// keepLog copies an agent's log into the output directory, best effort:
// a log that cannot be kept must not fail a benchmark that ran.
func keepLog(from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		return
	}
	_ = os.MkdirAll(filepath.Dir(to), 0o755)
	_ = os.WriteFile(to, b, 0o644)
}

// sideKey is one cell of the side-by-side table: the figures of one agent
// at one pod count in one phase.
type sideKey struct {
	agent string
	pods  int
	phase string
}

// sideCell is a cell's runs averaged: each figure's mean, min and max.
type sideCell struct {
	runs                     int
	cores, rss               spread
	containerd, shims        spread
	startP50, startP99       spread
	deleteP50, deleteP99     spread
	churned, probesPerSecond spread
	skipped                  spread
}

// spread is a figure over runs.
type spread struct{ sum, min, max float64 }

func (s *spread) add(v float64, first bool) {
	if first {
		s.min, s.max = v, v
	}
	s.sum += v
	s.min, s.max = min(s.min, v), max(s.max, v)
}

func (s spread) mean(n int) float64 {
	if n == 0 {
		return 0
	}
	return s.sum / float64(n)
}

// cells averages the rows over runs.
func sideCells(rows []SideRow) map[sideKey]*sideCell {
	type turn struct {
		sideKey
		run int
	}
	byTurn := map[turn]map[string]SideRow{}
	for _, r := range rows {
		k := turn{sideKey{r.Agent, r.Pods, r.Phase}, r.Run}
		if byTurn[k] == nil {
			byTurn[k] = map[string]SideRow{}
		}
		byTurn[k][r.Process] = r
	}
	cells := map[sideKey]*sideCell{}
	for k, procs := range byTurn {
		c := cells[k.sideKey]
		if c == nil {
			c = &sideCell{}
			cells[k.sideKey] = c
		}
		first := c.runs == 0
		c.runs++
		a := procs[ProcAgent]
		c.cores.add(a.MeanCores, first)
		c.rss.add(float64(a.MaxRSS), first)
		c.containerd.add(procs[ProcContainerd].MeanCores, first)
		c.shims.add(procs[ProcShims].MeanCores, first)
		c.startP50.add(float64(a.Start.P50), first)
		c.startP99.add(float64(a.Start.P99), first)
		c.deleteP50.add(float64(a.Delete.P50), first)
		c.deleteP99.add(float64(a.Delete.P99), first)
		c.churned.add(float64(a.Churned), first)
		c.skipped.add(float64(a.ChurnSkipped), first)
		c.probesPerSecond.add(a.ProbeRate(), first)
	}
	return cells
}

// SideBySideTargets are issue 33's goals for nodeguard against the
// kubelet, as ratios nodeguard / kubelet.
var SideBySideTargets = struct {
	IdleCores, RSS, Containerd, ProbedCores, StartP99, Growth float64
}{IdleCores: 0.10, RSS: 0.50, Containerd: 1.0, ProbedCores: 0.20, StartP99: 0.75, Growth: 0.10}

// WriteSideBySideTable prints one line per agent, pod count and phase
// (means over runs, with the range when there is more than one run), the
// ratios of the first competitor to the second with their targets, and
// how each agent's idle CPU grows per pod.
func WriteSideBySideTable(w io.Writer, rows []SideRow, cfg OverheadConfig, competitors []Competitor) {
	cells := sideCells(rows)
	fmt.Fprintf(w, "\nbusybox pods through a manifest directory, read back from the runtime; %s windows sampled every %s, %d churn workers; a fresh private containerd per turn\n",
		cfg.Window, cfg.Interval, cfg.Parallel)
	fmt.Fprintf(w, "%-10s %5s %-7s %4s %19s %19s %17s %17s %9s\n",
		"agent", "pods", "phase", "runs", "agent cores", "agent RSS (MiB)", "containerd cores", "shims cores", "probes/s")
	keys := make([]sideKey, 0, len(cells))
	for k := range cells {
		keys = append(keys, k)
	}
	phaseOrder := map[string]int{"idle": 0, "probed": 1, "churn": 2}
	agentOrder := map[string]int{}
	for i, c := range competitors {
		agentOrder[c.Name] = i
	}
	slices.SortFunc(keys, func(a, b sideKey) int {
		if a.pods != b.pods {
			return a.pods - b.pods
		}
		if a.phase != b.phase {
			return phaseOrder[a.phase] - phaseOrder[b.phase]
		}
		return agentOrder[a.agent] - agentOrder[b.agent]
	})
	for _, k := range keys {
		c := cells[k]
		probes := ""
		if k.phase == "probed" {
			probes = fmt.Sprintf("%.1f", c.probesPerSecond.mean(c.runs))
		}
		fmt.Fprintf(w, "%-10s %5d %-7s %4d %19s %19s %17s %17s %9s\n", k.agent, k.pods, k.phase, c.runs,
			c.cores.show(c.runs, 1, "%.4f"), c.rss.show(c.runs, 1.0/(1<<20), "%.0f"),
			c.containerd.show(c.runs, 1, "%.4f"), c.shims.show(c.runs, 1, "%.4f"), probes)
	}
	// Churn: each pod applied, Running (the runtime's start stamp),
	// deleted and gone, by the workers over the window; CPU per pod is
	// the window's CPU over the pods churned, so an agent that churns
	// more pods is not charged for doing more.
	secs := cfg.Window.Seconds()
	how := fmt.Sprintf("%d workers", cfg.Parallel)
	if cfg.ChurnRate > 0 {
		how = fmt.Sprintf("a pod every %s (open loop, at most %d in flight)", time.Duration(float64(time.Second)/cfg.ChurnRate), cfg.ChurnInFlight())
	}
	fmt.Fprintf(w, "\nchurn, %s over %s:\n%-10s %5s %8s %10s %10s %10s %10s %14s %18s %8s\n", how, cfg.Window,
		"agent", "pods", "pods/s", "start p50", "start p99", "gone p50", "gone p99", "agent CPU/pod", "runtime CPU/pod", "skipped")
	for _, k := range keys {
		c := cells[k]
		if k.phase != "churn" {
			continue
		}
		n := c.churned.mean(c.runs)
		perPod := func(cores float64) string {
			if n == 0 {
				return ""
			}
			return fmt.Sprintf("%.0f ms", cores*secs/n*1000)
		}
		fmt.Fprintf(w, "%-10s %5d %8.2f %10s %10s %10s %10s %14s %18s %8.0f\n", k.agent, k.pods, n/secs,
			msMean(c.startP50, c.runs), msMean(c.startP99, c.runs), msMean(c.deleteP50, c.runs), msMean(c.deleteP99, c.runs),
			perPod(c.cores.mean(c.runs)), perPod(c.containerd.mean(c.runs)+c.shims.mean(c.runs)), c.skipped.mean(c.runs))
	}
	if len(competitors) < 2 {
		return
	}
	ng, kl := competitors[0].Name, competitors[1].Name
	fmt.Fprintf(w, "\n%s / %s (target in brackets):\n", ng, kl)
	pods := map[int]bool{}
	for k := range cells {
		pods[k.pods] = true
	}
	counts := make([]int, 0, len(pods))
	for p := range pods {
		counts = append(counts, p)
	}
	slices.Sort(counts)
	t := SideBySideTargets
	for _, p := range counts {
		var parts []string
		ratio := func(phase, what string, target float64, get func(*sideCell) float64) {
			a, b := cells[sideKey{ng, p, phase}], cells[sideKey{kl, p, phase}]
			if a == nil || b == nil || get(b) == 0 {
				return
			}
			r := get(a) / get(b)
			parts = append(parts, fmt.Sprintf("%s %.2fx (<= %.2f %s)", what, r, target, verdict(r <= target)))
		}
		ratio("idle", "idle CPU", t.IdleCores, func(c *sideCell) float64 { return c.cores.mean(c.runs) })
		ratio("idle", "RSS", t.RSS, func(c *sideCell) float64 { return c.rss.mean(c.runs) })
		ratio("idle", "containerd CPU", t.Containerd, func(c *sideCell) float64 { return c.containerd.mean(c.runs) })
		ratio("probed", "probed CPU", t.ProbedCores, func(c *sideCell) float64 { return c.cores.mean(c.runs) })
		ratio("churn", "start p99", t.StartP99, func(c *sideCell) float64 { return c.startP99.mean(c.runs) })
		fmt.Fprintf(w, "  %d pods: %s\n", p, strings.Join(parts, "; "))
	}
	if len(counts) < 2 {
		return
	}
	lo, hi := counts[0], counts[len(counts)-1]
	slope := func(agent string) (float64, bool) {
		a, b := cells[sideKey{agent, lo, "idle"}], cells[sideKey{agent, hi, "idle"}]
		if a == nil || b == nil {
			return 0, false
		}
		return (b.cores.mean(b.runs) - a.cores.mean(a.runs)) / float64(hi-lo), true
	}
	sn, okn := slope(ng)
	sk, okk := slope(kl)
	if okn && okk {
		line := fmt.Sprintf("  growth, idle CPU per added pod from %d to %d: %s %.2f millicores, %s %.2f millicores", lo, hi, ng, sn*1000, kl, sk*1000)
		if sk > 0 {
			r := sn / sk
			line += fmt.Sprintf(": %.2fx (<= %.2f %s)", r, t.Growth, verdict(r <= t.Growth))
		}
		fmt.Fprintln(w, line)
	}
}

// msMean renders a spread of durations' mean in milliseconds.
func msMean(s spread, runs int) string { return fmt.Sprintf("%.0f ms", s.mean(runs)/1e6) }

// show renders a spread's mean, scaled, and its range over several runs.
func (s spread) show(runs int, scale float64, f string) string {
	if runs == 0 {
		return ""
	}
	m := fmt.Sprintf(f, s.mean(runs)*scale)
	if runs == 1 {
		return m
	}
	return m + " (" + fmt.Sprintf(f, s.min*scale) + "-" + fmt.Sprintf(f, s.max*scale) + ")"
}

// WriteSideBySideFiles writes sidebyside.csv (a line per agent, run, pod
// count, phase and process), sidebyside-samples.csv (every sample) and
// sidebyside.png into dir, and returns their paths.
func WriteSideBySideFiles(dir string, rows []SideRow, competitors []Competitor, interval time.Duration) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	summary := [][]string{{"agent", "run", "pods", "phase", "process", "procs", "mean_cores", "max_rss_bytes", "churned_pods", "churn_skipped",
		"start_p50_ms", "start_p99_ms", "delete_p50_ms", "delete_p99_ms", "probes", "probes_failed", "probes_per_second"}}
	samples := [][]string{{"agent", "run", "pods", "phase", "process", "sample", "seconds", "cores", "rss_bytes", "procs"}}
	for _, r := range rows {
		summary = append(summary, []string{r.Agent, strconv.Itoa(r.Run), strconv.Itoa(r.Pods), r.Phase, r.Process, strconv.Itoa(r.Procs),
			strconv.FormatFloat(r.MeanCores, 'f', 4, 64), strconv.FormatUint(r.MaxRSS, 10), strconv.Itoa(r.Churned), strconv.Itoa(r.ChurnSkipped),
			msField(r.Start.P50), msField(r.Start.P99), msField(r.Delete.P50), msField(r.Delete.P99),
			strconv.FormatUint(r.Probes, 10), strconv.FormatUint(r.ProbesFailed, 10), strconv.FormatFloat(r.ProbeRate(), 'f', 2, 64)})
		for i, rss := range r.Series.RSS {
			cores := ""
			if i > 0 {
				cores = strconv.FormatFloat(r.Series.Cores[i-1], 'f', 4, 64)
			}
			samples = append(samples, []string{r.Agent, strconv.Itoa(r.Run), strconv.Itoa(r.Pods), r.Phase, r.Process, strconv.Itoa(i),
				strconv.FormatFloat((time.Duration(i) * interval).Seconds(), 'f', 0, 64), cores,
				strconv.FormatUint(rss, 10), strconv.Itoa(r.Series.Procs[i])})
		}
	}
	var files []string
	for _, f := range []struct {
		name string
		recs [][]string
	}{{"sidebyside.csv", summary}, {"sidebyside-samples.csv", samples}} {
		path := filepath.Join(dir, f.name)
		if err := writeCSV(path, f.recs); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	png := filepath.Join(dir, "sidebyside.png")
	if err := sideBySidePNG(png, rows, competitors); err != nil {
		return files, err
	}
	return append(files, png), nil
}

// sideBySidePNG draws four panels against the pod count, a line per
// agent: idle CPU, RSS, containerd's and the shims' idle CPU, and the
// churned pods' start p99.
func sideBySidePNG(path string, rows []SideRow, competitors []Competitor) error {
	cells := sideCells(rows)
	panels := []struct {
		title, y string
		phase    string
		get      func(*sideCell) float64
	}{
		{"agent CPU, idle", "cores", "idle", func(c *sideCell) float64 { return c.cores.mean(c.runs) }},
		{"agent RSS, idle", "MiB", "idle", func(c *sideCell) float64 { return c.rss.mean(c.runs) / (1 << 20) }},
		{"containerd + shims CPU, idle", "cores", "idle", func(c *sideCell) float64 {
			return c.containerd.mean(c.runs) + c.shims.mean(c.runs)
		}},
		{"churned pods: apply to running, p99", "ms", "churn", func(c *sideCell) float64 { return c.startP99.mean(c.runs) / 1e6 }},
	}
	plots := make([]*plot.Plot, len(panels))
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text, p.Y.Label.Text = "pods", pn.y
		p.Legend.Top, p.Legend.Left = true, true
		p.Y.Min = 0 // ratios are read off the picture: bars from zero
		var lines []any
		for _, c := range competitors {
			var xy plotter.XYs
			for k, cell := range cells {
				if k.agent == c.Name && k.phase == pn.phase {
					xy = append(xy, plotter.XY{X: float64(k.pods), Y: pn.get(cell)})
				}
			}
			slices.SortFunc(xy, func(a, b plotter.XY) int { return int(a.X - b.X) })
			if len(xy) > 0 {
				lines = append(lines, c.Name, xy)
			}
		}
		if len(lines) > 0 {
			if err := plotutil.AddLinePoints(p, lines...); err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
		}
		plots[i] = p
	}
	img := vgimg.New(11*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(14), PadY: vg.Points(14)}
	canvases := plot.Align([][]*plot.Plot{{plots[0], plots[1]}, {plots[2], plots[3]}}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i/2][i%2])
	}
	return writePNG(path, img)
}
