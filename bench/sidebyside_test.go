package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sideRows makes one turn's rows of agent at pods: the agent, containerd
// and the shims, idle and under churn.
func sideRows(agent string, run, pods int, cores float64, rss uint64, containerd float64, startP99 time.Duration) []SideRow {
	series := GroupSeries{Cores: []float64{cores, cores}, RSS: []uint64{rss, rss, rss}, Procs: []int{1, 1, 1}}
	var rows []SideRow
	for _, phase := range []string{"idle", "churn"} {
		r := []OverheadRow{
			{Pods: pods, Phase: phase, Process: ProcAgent, MeanCores: cores, MaxRSS: rss, Procs: 1, Series: series},
			{Pods: pods, Phase: phase, Process: ProcContainerd, MeanCores: containerd, MaxRSS: 50 << 20, Procs: 1, Series: series},
			{Pods: pods, Phase: phase, Process: ProcShims, MeanCores: 0.01, MaxRSS: 900 << 20, Procs: pods, Series: series},
		}
		if phase == "churn" {
			for i := range r {
				r[i].Churned = 40
				r[i].Start = Summary{N: 40, P50: startP99 / 2, P99: startP99}
				r[i].Delete = Summary{N: 40, P50: 300 * time.Millisecond, P99: time.Second}
			}
		}
		for _, x := range r {
			rows = append(rows, SideRow{Agent: agent, Run: run, OverheadRow: x})
		}
	}
	return rows
}

var sideCompetitors = []Competitor{{Name: "nodeguard"}, {Name: "kubelet"}}

func TestSideBySideTableRatiosAndGrowth(t *testing.T) {
	var rows []SideRow
	// Two runs of nodeguard at 110 pods (0.010 and 0.014 cores: mean
	// 0.012), one of the kubelet; at 500 pods one each.
	rows = append(rows, sideRows("nodeguard", 1, 110, 0.010, 70<<20, 0.015, 800*time.Millisecond)...)
	rows = append(rows, sideRows("nodeguard", 2, 110, 0.014, 72<<20, 0.015, 800*time.Millisecond)...)
	rows = append(rows, sideRows("kubelet", 1, 110, 0.060, 120<<20, 0.012, 1600*time.Millisecond)...)
	rows = append(rows, sideRows("nodeguard", 1, 500, 0.030, 90<<20, 0.040, 900*time.Millisecond)...)
	rows = append(rows, sideRows("kubelet", 1, 500, 0.260, 200<<20, 0.050, 2000*time.Millisecond)...)
	var b bytes.Buffer
	WriteSideBySideTable(&b, rows, OverheadConfig{Window: time.Minute, Interval: time.Second, Parallel: 4}, sideCompetitors)
	out := b.String()
	for _, want := range []string{
		// The mean of two runs with their range.
		"0.0120 (0.0100-0.0140)",
		// 0.012 / 0.060 = 0.20: above the 0.10 target.
		"110 pods: idle CPU 0.20x (<= 0.10 MISSED)",
		// 71 MiB / 120 MiB.
		"RSS 0.59x (<= 0.50 MISSED)",
		// 0.015 / 0.012.
		"containerd CPU 1.25x (<= 1.00 MISSED)",
		"start p99 0.50x (<= 0.75 MET)",
		"500 pods: idle CPU 0.12x (<= 0.10 MISSED); RSS 0.45x (<= 0.50 MET); containerd CPU 0.80x (<= 1.00 MET)",
		// (0.030-0.012)/390 = 0.046 millicores; (0.260-0.060)/390 = 0.51.
		"growth, idle CPU per added pod from 110 to 500: nodeguard 0.05 millicores, kubelet 0.51 millicores: 0.09x (<= 0.10 MET)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// Sorted by pods, then phase (idle first), then the competitors' order.
	i110n := strings.Index(out, "nodeguard    110 idle")
	i110k := strings.Index(out, "kubelet      110 idle")
	i110c := strings.Index(out, "nodeguard    110 churn")
	i500 := strings.Index(out, "nodeguard    500 idle")
	if i110n < 0 || !(i110n < i110k && i110k < i110c && i110c < i500) {
		t.Errorf("rows out of order (%d %d %d %d):\n%s", i110n, i110k, i110c, i500, out)
	}
}

func TestSideBySideFiles(t *testing.T) {
	dir := t.TempDir()
	var rows []SideRow
	rows = append(rows, sideRows("nodeguard", 1, 110, 0.012, 70<<20, 0.015, 800*time.Millisecond)...)
	rows = append(rows, sideRows("kubelet", 1, 110, 0.060, 120<<20, 0.012, 1600*time.Millisecond)...)
	rows = append(rows, sideRows("nodeguard", 1, 250, 0.020, 80<<20, 0.030, 900*time.Millisecond)...)
	rows = append(rows, sideRows("kubelet", 1, 250, 0.130, 160<<20, 0.025, 1900*time.Millisecond)...)
	files, err := WriteSideBySideFiles(dir, rows, sideCompetitors, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("files %v, want the two CSVs and the PNG", files)
	}
	f, err := os.Open(filepath.Join(dir, "sidebyside.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+len(rows) {
		t.Fatalf("sidebyside.csv has %d records, want a header and %d rows", len(recs), len(rows))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	var found bool
	for _, r := range recs[1:] {
		if r[col["agent"]] == "kubelet" && r[col["pods"]] == "250" && r[col["phase"]] == "churn" && r[col["process"]] == ProcAgent {
			found = true
			if r[col["start_p99_ms"]] != "1900.0" || r[col["mean_cores"]] != "0.1300" {
				t.Errorf("kubelet 250 churn row %v", r)
			}
		}
	}
	if !found {
		t.Errorf("no kubelet 250-pod churn row of the agent in %v", recs)
	}
	pf, err := os.Open(filepath.Join(dir, "sidebyside.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	img, err := png.Decode(pf)
	if err != nil {
		t.Fatalf("sidebyside.png: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 400 {
		t.Errorf("sidebyside.png is %v", b)
	}
}

// A competitor in this machine's network namespace gets no network
// probes: they would dial pod addresses out of the default route.
func TestSideBySideRefusesNetworkProbesForAHostNetworkAgent(t *testing.T) {
	started := false
	c := Competitor{Name: "kubelet", HostNetwork: true, Start: func(context.Context, Setup) (Contender, error) {
		started = true
		return nil, nil
	}}
	for _, probes := range [][]string{{"http"}, {"exec", "tcp"}, {"grpc"}} {
		_, err := SideBySide(t.Context(), SideBySideOptions{Config: OverheadConfig{Pods: []int{1}, Probes: probes}, Competitors: []Competitor{c},
			Report: io.Discard, Progress: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "only exec probes") {
			t.Errorf("probes %v: err %v, want a refusal", probes, err)
		}
	}
	if started {
		t.Error("the competitor was started")
	}
}
