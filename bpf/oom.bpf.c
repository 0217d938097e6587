// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * oom.bpf.c: OOM kills (oom/mark_victim) and oom_score_adj changes
 * (oom/oom_score_adj_update), both on ring_oom.
 *
 * Each hook comes twice: tp_btf (typed arguments, the victim's own cgroups)
 * and a classic tracepoint fallback that reads the trace record; the loader
 * attaches the first one the kernel accepts.
 */
#include "ng_common.h"

/* mm counters: the kernel's anonymous enum, stable since 2.6.34. */
#define NG_MM_FILEPAGES 0
#define NG_MM_ANONPAGES 1
#define NG_MM_SHMEMPAGES 3

/* Before 6.2 rss_stat was a struct mm_rss_stat of atomics; from 6.2 on it is
 * an array of percpu_counters and struct mm_rss_stat no longer exists. The
 * generated vmlinux.h (6.18) lacks it, so it is declared here for CO-RE. */
struct mm_rss_stat {
	atomic_long_t count[4];
} __attribute__((preserve_access_index));

struct mm_struct___old {
	struct mm_rss_stat rss_stat;
} __attribute__((preserve_access_index));

static __always_inline __u64 mm_counter(struct mm_struct *mm, int member)
{
	long v = 0;

	if (!mm)
		return 0;
	if (bpf_core_type_exists(struct mm_rss_stat)) {
		struct mm_struct___old *old = (void *)mm;

		bpf_core_read(&v, sizeof(v), &old->rss_stat.count[member].counter);
	} else {
		/* The summed counter without the per-CPU deltas: off by at
		 * most the batch size per CPU. */
		bpf_core_read(&v, sizeof(v), &mm->rss_stat[member].count);
	}
	return v < 0 ? 0 : v;
}

/* The kernel fires mark_victim once per marked thread, not once per kill:
 * every thread of a killed process that then fails a charge marks itself a
 * victim again (out_of_memory's task_will_free_mem(current) shortcut), and
 * memory.events' oom_kill does not count those. oom_marked remembers the
 * processes already reported so that one kill is one event. The leader's
 * start time tells a reused pid from the same process; where the victim's
 * task is out of reach (classic tracepoint, victim not in current's process)
 * it is 0 and a mark within NG_OOM_MARK_WINDOW_NS counts as the same kill. */
#define NG_OOM_MARK_WINDOW_NS (60ULL * 1000 * 1000 * 1000)

struct ng_oom_mark {
	__u64 leader_start_ns;
	__u64 marked_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct ng_oom_mark);
} oom_marked SEC(".maps");

/* first_mark claims tgid's kill and says whether this mark is its first.
 * The kernel marks victims under oom_lock, one at a time; the NOEXIST insert
 * keeps the claim atomic without relying on that. A mark with a leader start
 * time after the stored mark's time is a new process on a reused pid, also
 * when the stored mark's process was unknown (0). */
static __always_inline bool first_mark(__u32 tgid, __u64 leader_start_ns)
{
	struct ng_oom_mark m = { .leader_start_ns = leader_start_ns, .marked_ns = bpf_ktime_get_ns() };
	struct ng_oom_mark *old;

	if (!tgid)
		return true;
	if (bpf_map_update_elem(&oom_marked, &tgid, &m, BPF_NOEXIST) == 0)
		return true;
	old = bpf_map_lookup_elem(&oom_marked, &tgid);
	if (!old)
		return bpf_map_update_elem(&oom_marked, &tgid, &m, BPF_NOEXIST) == 0;
	if (old->leader_start_ns && leader_start_ns) {
		if (old->leader_start_ns == leader_start_ns)
			return false;
	} else if (leader_start_ns > old->marked_ns) {
		/* Started after the stored mark: not the process marked then. */
	} else if (m.marked_ns - old->marked_ns < NG_OOM_MARK_WINDOW_NS) {
		return false;
	}
	/* A reused pid: a new process, a new kill. */
	bpf_map_update_elem(&oom_marked, &tgid, &m, BPF_ANY);
	return true;
}

static __always_inline __u64 leader_start(struct task_struct *t)
{
	return BPF_CORE_READ(t, group_leader, start_time);
}

static __always_inline int emit_oom_kill_task(struct task_struct *victim, __u8 flags)
{
	struct ng_task_cgroups c = {};
	struct task_struct *cur = current_task();
	struct ng_oom_kill *e;
	struct mm_struct *mm;

	task_cgroups(victim, &c);
	if (!is_monitored(&c))
		return 0;
	/* Reserved before the claim: a kill that finds the ring full stays
	 * unclaimed, so a later mark of the same process can still report it. */
	e = bpf_ringbuf_reserve(&ring_oom, sizeof(*e), 0);
	if (!e) {
		ring_count(NG_RING_OOM, false);
		return 0;
	}
	if (!first_mark(BPF_CORE_READ(victim, tgid), leader_start(victim))) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	fill_header(&e->hdr, NG_KIND_OOM_KILL, NG_VERSION_OOM_KILL, victim, &c);
	e->hdr.flags = flags;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), &victim->comm);
	e->oom_score_adj = BPF_CORE_READ(victim, signal, oom_score_adj);
	e->trigger_pid = BPF_CORE_READ(cur, tgid);
	mm = BPF_CORE_READ(victim, mm);
	e->total_vm_pages = mm ? BPF_CORE_READ(mm, total_vm) : 0;
	e->anon_rss_pages = mm_counter(mm, NG_MM_ANONPAGES);
	e->file_rss_pages = mm_counter(mm, NG_MM_FILEPAGES);
	e->shmem_rss_pages = mm_counter(mm, NG_MM_SHMEMPAGES);
	e->memcg_level = c.memcg_level;
	e->memcg_hierarchy = c.memcg_hierarchy;
	bpf_ringbuf_submit(e, 0);
	ring_count(NG_RING_OOM, true);
	return 0;
}

/* 6.8+: mark_victim(struct task_struct *task, uid_t uid). Older kernels pass
 * an int pid, which the verifier rejects here, so the fallback is taken. */
SEC("tp_btf/mark_victim")
int BPF_PROG(ng_mark_victim_btf, struct task_struct *task)
{
	return emit_oom_kill_task(task, 0);
}

/* Classic tracepoint: the record carries the victim's thread id and, from
 * 6.8 on, its comm, rss (in kB) and oom_score_adj. A memory cgroup OOM is
 * mostly raised by the victim's own process: then the victim is a thread of
 * current's process, its task is current's and the event is as full as on
 * tp_btf. Otherwise the victim's task_struct is out of reach without kfuncs,
 * so the cgroups are the current task's (the task whose charge failed, in the
 * OOM-ing memory cgroup's subtree) and the pid is the thread id the kernel
 * gives (the leader's, unless the leader has already exited). */
SEC("tracepoint/oom/mark_victim")
int ng_mark_victim_tp(struct trace_event_raw_mark_victim *ctx)
{
	struct task_struct *cur = current_task();
	struct ng_task_cgroups c = {};
	struct ng_oom_kill *e;
	__u32 victim = ctx->pid;

	if (victim == BPF_CORE_READ(cur, pid) || victim == BPF_CORE_READ(cur, tgid))
		return emit_oom_kill_task(cur, NG_FLAG_CLASSIC_TP);

	task_cgroups(cur, &c);
	if (!is_monitored(&c))
		return 0;
	e = bpf_ringbuf_reserve(&ring_oom, sizeof(*e), 0);
	if (!e) {
		ring_count(NG_RING_OOM, false);
		return 0;
	}
	if (!first_mark(victim, 0)) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	fill_header(&e->hdr, NG_KIND_OOM_KILL, NG_VERSION_OOM_KILL, NULL, &c);
	e->hdr.flags = NG_FLAG_CGROUP_OF_CURRENT | NG_FLAG_CLASSIC_TP;
	e->hdr.pid = victim;
	e->hdr.tid = victim;
	e->trigger_pid = BPF_CORE_READ(cur, tgid);
	e->comm[0] = 0;
	e->oom_score_adj = 0;
	e->total_vm_pages = 0;
	e->anon_rss_pages = 0;
	e->file_rss_pages = 0;
	e->shmem_rss_pages = 0;
	if (!bpf_core_field_exists(ctx->anon_rss) || !bpf_core_field_exists(ctx->oom_score_adj))
		e->hdr.flags |= NG_FLAG_NO_TASK_DETAILS;
	if (bpf_core_field_exists(ctx->anon_rss)) {
		__u32 loc = BPF_CORE_READ(ctx, __data_loc_comm);

		bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), (void *)ctx + (loc & 0xffff));
		e->total_vm_pages = BPF_CORE_READ(ctx, total_vm) >> 2;
		e->anon_rss_pages = BPF_CORE_READ(ctx, anon_rss) >> 2;
		e->file_rss_pages = BPF_CORE_READ(ctx, file_rss) >> 2;
		e->shmem_rss_pages = BPF_CORE_READ(ctx, shmem_rss) >> 2;
	}
	if (bpf_core_field_exists(ctx->oom_score_adj))
		e->oom_score_adj = BPF_CORE_READ(ctx, oom_score_adj);
	e->memcg_level = c.memcg_level;
	e->memcg_hierarchy = c.memcg_hierarchy;
	bpf_ringbuf_submit(e, 0);
	ring_count(NG_RING_OOM, true);
	return 0;
}

static __always_inline int emit_adj(struct task_struct *task, struct ng_task_cgroups *c, __u32 pid,
				    const char *comm, __s32 adj, __u8 flags)
{
	struct ng_oom_score_adj *e;

	if (!is_monitored(c))
		return 0;
	e = bpf_ringbuf_reserve(&ring_oom, sizeof(*e), 0);
	if (!e) {
		ring_count(NG_RING_OOM, false);
		return 0;
	}
	fill_header(&e->hdr, NG_KIND_OOM_SCORE_ADJ, NG_VERSION_OOM_SCORE_ADJ, task, c);
	e->hdr.flags = flags;
	if (!task) {
		e->hdr.pid = pid;
		e->hdr.tid = pid;
	}
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), comm);
	e->oom_score_adj = adj;
	e->writer_pid = bpf_get_current_pid_tgid() >> 32;
	bpf_ringbuf_submit(e, 0);
	ring_count(NG_RING_OOM, true);
	return 0;
}

SEC("tp_btf/oom_score_adj_update")
int BPF_PROG(ng_oom_score_adj_btf, struct task_struct *task)
{
	struct ng_task_cgroups c = {};

	task_cgroups(task, &c);
	return emit_adj(task, &c, 0, task->comm, BPF_CORE_READ(task, signal, oom_score_adj), 0);
}

SEC("tracepoint/oom/oom_score_adj_update")
int ng_oom_score_adj_tp(struct trace_event_raw_oom_score_adj_update *ctx)
{
	struct ng_task_cgroups c = {};

	task_cgroups(current_task(), &c);
	return emit_adj(NULL, &c, ctx->pid, ctx->comm, ctx->oom_score_adj,
			NG_FLAG_CGROUP_OF_CURRENT | NG_FLAG_CLASSIC_TP);
}
