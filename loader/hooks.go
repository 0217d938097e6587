package loader

import (
	"github.com/cilium/ebpf"
)

// AttachPath is how a hook got attached.
type AttachPath string

// Attach paths, fastest first.
const (
	PathTPBTF      AttachPath = "tp_btf"
	PathTracepoint AttachPath = "tracepoint"
	PathOff        AttachPath = "off"
)

// Attempt is one try to load and attach a hook on one path.
type Attempt struct {
	Path AttachPath `json:"path"`
	Err  string     `json:"error"`
}

// HookStatus says how one hook ended up attached.
type HookStatus struct {
	Name     string     `json:"name"`
	Family   string     `json:"family"`
	Path     AttachPath `json:"path"`
	Failures []Attempt  `json:"failures,omitempty"`
}

// hookSpec names the programs of one hook in its family's object, in the
// order they are tried.
type hookSpec struct {
	name       string // tracepoint name, e.g. "mark_victim"
	group      string // tracepoint group, e.g. "oom"
	btfProg    string // "" when there is no tp_btf variant
	tracepoint string // classic tracepoint program
	optional   bool   // off is a normal state on a healthy node (bench)
	// args are the leading tracepoint arguments the tp_btf program reads,
	// checked against the kernel's prototype before it is loaded.
	args []string
}

// family is one BPF object.
type family struct {
	name  string
	load  func() (*ebpf.CollectionSpec, error)
	hooks []hookSpec
}

// Family names, for Options.Families.
const (
	FamilyOOM     = "oom"
	FamilyReclaim = "reclaim"
	FamilyCgroup  = "cgroup"
	FamilyExit    = "exit"
	FamilyBench   = "bench"
)

func families() []family {
	return []family{
		{name: FamilyOOM, load: loadOom, hooks: []hookSpec{
			{name: "mark_victim", group: "oom", btfProg: "ng_mark_victim_btf", tracepoint: "ng_mark_victim_tp", args: []string{"*task_struct"}},
			{name: "oom_score_adj_update", group: "oom", btfProg: "ng_oom_score_adj_btf", tracepoint: "ng_oom_score_adj_tp", args: []string{"*task_struct"}},
		}},
		{name: FamilyReclaim, load: loadReclaim, hooks: []hookSpec{
			{name: "mm_vmscan_memcg_reclaim_begin", group: "vmscan", btfProg: "ng_memcg_reclaim_begin_btf", tracepoint: "ng_memcg_reclaim_begin_tp", args: []string{"int", "gfp_t"}},
			{name: "mm_vmscan_memcg_reclaim_end", group: "vmscan", btfProg: "ng_memcg_reclaim_end_btf", tracepoint: "ng_memcg_reclaim_end_tp", args: []string{"unsigned long"}},
			{name: "mm_vmscan_direct_reclaim_begin", group: "vmscan", btfProg: "ng_direct_reclaim_begin_btf", tracepoint: "ng_direct_reclaim_begin_tp", args: []string{"int", "gfp_t"}},
			{name: "mm_vmscan_direct_reclaim_end", group: "vmscan", btfProg: "ng_direct_reclaim_end_btf", tracepoint: "ng_direct_reclaim_end_tp", args: []string{"unsigned long"}},
			{name: "mm_vmscan_kswapd_wake", group: "vmscan", btfProg: "ng_kswapd_wake_btf", tracepoint: "ng_kswapd_wake_tp", args: []string{"int", "int", "int"}},
			{name: "mm_vmscan_kswapd_sleep", group: "vmscan", btfProg: "ng_kswapd_sleep_btf", tracepoint: "ng_kswapd_sleep_tp", args: []string{"int"}},
		}},
		{name: FamilyCgroup, load: loadCgroup, hooks: []hookSpec{
			{name: "cgroup_mkdir", group: "cgroup", btfProg: "ng_cgroup_mkdir_btf", tracepoint: "ng_cgroup_mkdir_tp", args: []string{"*cgroup", "*char"}},
			{name: "cgroup_rmdir", group: "cgroup", btfProg: "ng_cgroup_rmdir_btf", tracepoint: "ng_cgroup_rmdir_tp", args: []string{"*cgroup", "*char"}},
		}},
		{name: FamilyExit, load: loadExit, hooks: []hookSpec{
			{name: "sched_process_exit", group: "sched", btfProg: "ng_exit_btf", tracepoint: "ng_exit_tp", args: []string{"*task_struct"}},
		}},
		{name: FamilyBench, load: loadBench, hooks: []hookSpec{
			{name: "sys_enter", group: "raw_syscalls", tracepoint: "ng_bench_sys_enter", optional: true},
		}},
	}
}
