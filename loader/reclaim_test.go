package loader_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
)

// TestReclaimStatsSurviveCgroupChurn makes, one after the other, three
// times as many real memory cgroups as reclaim_stats holds, each meeting
// its memory limit (and so reclaiming), and removes each before making the
// next. The janitor
// frees removed cgroups' entries only after a while, and only for the
// rmdir events it read (a full ring loses them): the map must still make
// room for every new cgroup's aggregate, by evicting the oldest.
func TestReclaimStatsSurviveCgroupChurn(t *testing.T) {
	cgtest.RequirePrivileged(t)
	const entries = 16
	p := open(t, loader.WithMapEntries(loader.Options{
		Families: []string{loader.FamilyReclaim, loader.FamilyCgroup},
		// Aggregates only: no episode is long enough to be sent.
		MinReclaimEpisode: time.Hour,
	}, map[string]uint32{"reclaim_stats": entries}))
	for _, h := range p.Hooks() {
		if h.Name == "mm_vmscan_memcg_reclaim_begin" || h.Name == "mm_vmscan_memcg_reclaim_end" || h.Name == "cgroup_mkdir" {
			if h.Path == loader.PathOff {
				t.Fatalf("hook %s not attached: %v", h.Name, h.Failures)
			}
		}
	}
	parent := cgtest.New(t)
	monitor(t, p, parent)

	const churn, limit = 3 * entries, 16 << 20
	for i := range churn {
		c := parent.Child(t, fmt.Sprintf("churn-%d", i))
		if err := c.SetMemoryLimit(limit); err != nil {
			t.Fatal(err)
		}
		id := sandboxIDs(t, c).memcg
		// dd's 32 MiB buffer meets the limit: memcg reclaim, then (no
		// swap) the OOM killer. Anonymous memory, because page cache is
		// not reclaimable where the temp dir is in RAM (the VM lane).
		cmd := exec.Command("dd", "if=/dev/zero", "of=/dev/null", "bs=32M", "count=1")
		if err := c.Start(t, cmd); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait() // killed, or done if the kernel found the room
		if peak := peakUsage(t, c); peak < limit {
			t.Fatalf("cgroup %d: usage peaked at %d bytes, never at the %d limit", i, peak, limit)
		}
		stats, err := p.ReclaimStats()
		if err != nil {
			t.Fatal(err)
		}
		var episodes uint64
		for _, s := range stats {
			if s.Cgroup == id && s.Type == uint32(event.ReclaimMemcg) {
				episodes = s.Episodes
			}
		}
		if episodes == 0 {
			t.Fatalf("cgroup %d of %d (memcg %d) reclaimed at its limit but has no aggregate; the map holds %d entries, %d of them now: full of removed cgroups",
				i+1, churn, id.ID, entries, len(stats))
		}
		if err := c.Remove(); err != nil {
			t.Fatal(err)
		}
	}
}

// peakUsage is the highest memory usage the kernel recorded for the
// cgroup: memory.max_usage_in_bytes on v1, memory.peak on cgroup2.
func peakUsage(t *testing.T, c *cgtest.Sandbox) uint64 {
	t.Helper()
	file := "memory.max_usage_in_bytes"
	if c.Layout().Memory.V2() {
		file = "memory.peak"
	}
	b, err := os.ReadFile(filepath.Join(c.MemoryDir(), file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return n
}
