// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * reclaim.bpf.c: memory reclaim stalls. memcg reclaim and direct reclaim
 * fire at high rates under pressure, so every episode (begin -> end on one
 * thread) is aggregated in reclaim_stats per (memory cgroup, type), readable
 * at any time, and only episodes of at least ng_settings.min_episode_ns are
 * sent on ring_reclaim. kswapd episodes (wake -> sleep) are kept per NUMA
 * node. The tracepoints carry no memcg: the stalled task is current, and its
 * memory cgroup is the one charged.
 */
#include "ng_common.h"

struct start_key {
	__u32 tid; /* kswapd: the NUMA node */
	__u32 type;
};

struct start_val {
	__u64 ts_ns;
	__s32 order;
	__u32 gfp_flags;
};

/* LRU: an end that never comes (hook attached mid-episode, task killed)
 * must not leak an entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct start_key);
	__type(value, struct start_val);
} reclaim_start SEC(".maps");

/* LRU: the loader's janitor frees a removed cgroup's entries, but only for
 * the rmdir events it read, and a full ring loses events. With a plain hash
 * the leaked entries of removed cgroups would fill the map, and a new
 * cgroup's reclaim would no longer be counted; LRU lets a new entry take the
 * place of the least recently updated one (on a node with more live
 * cgroups than entries, a quiet cgroup's aggregate starts again from zero,
 * which Prometheus sees as a counter reset). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct ng_reclaim_key);
	__type(value, struct ng_reclaim_value);
} reclaim_stats SEC(".maps");

static __always_inline int begin(__u32 type, int order, __u32 gfp)
{
	struct ng_task_cgroups c = {};
	struct start_key k = { .tid = (__u32)bpf_get_current_pid_tgid(), .type = type };
	struct start_val v = { .ts_ns = bpf_ktime_get_ns(), .order = order, .gfp_flags = gfp };

	task_cgroups(current_task(), &c);
	if (!is_monitored(&c))
		return 0;
	bpf_map_update_elem(&reclaim_start, &k, &v, BPF_ANY);
	return 0;
}

static __always_inline void aggregate(struct ng_reclaim_key *key, __u64 dur, __u64 reclaimed, bool emit)
{
	struct ng_reclaim_value *agg = bpf_map_lookup_elem(&reclaim_stats, key);

	if (!agg) {
		struct ng_reclaim_value zero = {};

		bpf_map_update_elem(&reclaim_stats, key, &zero, BPF_NOEXIST);
		agg = bpf_map_lookup_elem(&reclaim_stats, key);
		if (!agg)
			return;
	}
	__sync_fetch_and_add(&agg->episodes, 1);
	__sync_fetch_and_add(&agg->total_ns, dur);
	__sync_fetch_and_add(&agg->nr_reclaimed, reclaimed);
	if (emit)
		__sync_fetch_and_add(&agg->emitted, 1);
	/* max is racy across CPUs by design: a lost update loses a maximum,
	 * never a count. */
	if (dur > agg->max_ns)
		agg->max_ns = dur;
}

static __always_inline __u64 min_episode(void)
{
	struct ng_settings *s = settings();

	return s ? s->min_episode_ns : 0;
}

static __always_inline int end(__u32 type, __u64 reclaimed, __u8 flags)
{
	struct task_struct *cur = current_task();
	struct start_key k = { .tid = (__u32)bpf_get_current_pid_tgid(), .type = type };
	struct ng_task_cgroups c = {};
	struct ng_reclaim_key key = {};
	struct start_val *v;
	struct ng_reclaim *e;
	__u64 now, dur;
	bool emit;

	v = bpf_map_lookup_elem(&reclaim_start, &k);
	if (!v)
		return 0;
	now = bpf_ktime_get_ns();
	dur = now - v->ts_ns;
	task_cgroups(cur, &c);
	key.id = c.memcg_id;
	key.hierarchy_id = c.memcg_hierarchy;
	key.type = type;
	emit = dur >= min_episode();
	aggregate(&key, dur, reclaimed, emit);
	if (emit) {
		e = bpf_ringbuf_reserve(&ring_reclaim, sizeof(*e), 0);
		if (!e) {
			ring_count(NG_RING_RECLAIM, false);
		} else {
			fill_header(&e->hdr, NG_KIND_RECLAIM, NG_VERSION_RECLAIM, cur, &c);
			e->hdr.flags = flags;
			e->type = type;
			e->order = v->order;
			e->gfp_flags = v->gfp_flags;
			e->nid = 0;
			e->duration_ns = dur;
			e->nr_reclaimed = reclaimed;
			bpf_ringbuf_submit(e, 0);
			ring_count(NG_RING_RECLAIM, true);
		}
	}
	bpf_map_delete_elem(&reclaim_start, &k);
	return 0;
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_begin")
int BPF_PROG(ng_memcg_reclaim_begin_btf, int order, gfp_t gfp_flags)
{
	return begin(NG_RECLAIM_MEMCG, order, gfp_flags);
}

SEC("tp_btf/mm_vmscan_memcg_reclaim_end")
int BPF_PROG(ng_memcg_reclaim_end_btf, unsigned long nr_reclaimed)
{
	return end(NG_RECLAIM_MEMCG, nr_reclaimed, 0);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(ng_direct_reclaim_begin_btf, int order, gfp_t gfp_flags)
{
	return begin(NG_RECLAIM_DIRECT, order, gfp_flags);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(ng_direct_reclaim_end_btf, unsigned long nr_reclaimed)
{
	return end(NG_RECLAIM_DIRECT, nr_reclaimed, 0);
}

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_begin")
int ng_memcg_reclaim_begin_tp(struct trace_event_raw_mm_vmscan_direct_reclaim_begin_template *ctx)
{
	return begin(NG_RECLAIM_MEMCG, ctx->order, ctx->gfp_flags);
}

SEC("tracepoint/vmscan/mm_vmscan_memcg_reclaim_end")
int ng_memcg_reclaim_end_tp(struct trace_event_raw_mm_vmscan_direct_reclaim_end_template *ctx)
{
	return end(NG_RECLAIM_MEMCG, ctx->nr_reclaimed, NG_FLAG_CLASSIC_TP);
}

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_begin")
int ng_direct_reclaim_begin_tp(struct trace_event_raw_mm_vmscan_direct_reclaim_begin_template *ctx)
{
	return begin(NG_RECLAIM_DIRECT, ctx->order, ctx->gfp_flags);
}

SEC("tracepoint/vmscan/mm_vmscan_direct_reclaim_end")
int ng_direct_reclaim_end_tp(struct trace_event_raw_mm_vmscan_direct_reclaim_end_template *ctx)
{
	return end(NG_RECLAIM_DIRECT, ctx->nr_reclaimed, NG_FLAG_CLASSIC_TP);
}

/* kswapd: node-wide background reclaim, not filtered by cgroup. A wake while
 * kswapd is already awake keeps the first timestamp (BPF_NOEXIST). */
static __always_inline int kswapd_wake(int nid, int order)
{
	struct start_key k = { .tid = (__u32)nid, .type = NG_RECLAIM_KSWAPD };
	struct start_val v = { .ts_ns = bpf_ktime_get_ns(), .order = order };

	bpf_map_update_elem(&reclaim_start, &k, &v, BPF_NOEXIST);
	return 0;
}

static __always_inline int kswapd_sleep(int nid, __u8 flags)
{
	struct start_key k = { .tid = (__u32)nid, .type = NG_RECLAIM_KSWAPD };
	struct ng_reclaim_key key = { .id = (__u32)nid, .type = NG_RECLAIM_KSWAPD };
	struct start_val *v;
	struct ng_reclaim *e;
	__u64 dur;
	bool emit;

	v = bpf_map_lookup_elem(&reclaim_start, &k);
	if (!v)
		return 0;
	dur = bpf_ktime_get_ns() - v->ts_ns;
	emit = dur >= min_episode();
	aggregate(&key, dur, 0, emit);
	if (emit) {
		e = bpf_ringbuf_reserve(&ring_reclaim, sizeof(*e), 0);
		if (!e) {
			ring_count(NG_RING_RECLAIM, false);
		} else {
			fill_header(&e->hdr, NG_KIND_RECLAIM, NG_VERSION_RECLAIM, current_task(), NULL);
			e->hdr.flags = flags;
			e->type = NG_RECLAIM_KSWAPD;
			e->order = v->order;
			e->gfp_flags = 0;
			e->nid = nid;
			e->duration_ns = dur;
			e->nr_reclaimed = 0;
			bpf_ringbuf_submit(e, 0);
			ring_count(NG_RING_RECLAIM, true);
		}
	}
	bpf_map_delete_elem(&reclaim_start, &k);
	return 0;
}

SEC("tp_btf/mm_vmscan_kswapd_wake")
int BPF_PROG(ng_kswapd_wake_btf, int nid, int zid, int order)
{
	return kswapd_wake(nid, order);
}

SEC("tp_btf/mm_vmscan_kswapd_sleep")
int BPF_PROG(ng_kswapd_sleep_btf, int nid)
{
	return kswapd_sleep(nid, 0);
}

SEC("tracepoint/vmscan/mm_vmscan_kswapd_wake")
int ng_kswapd_wake_tp(struct trace_event_raw_mm_vmscan_kswapd_wake *ctx)
{
	return kswapd_wake(ctx->nid, ctx->order);
}

SEC("tracepoint/vmscan/mm_vmscan_kswapd_sleep")
int ng_kswapd_sleep_tp(struct trace_event_raw_mm_vmscan_kswapd_sleep *ctx)
{
	return kswapd_sleep(ctx->nid, NG_FLAG_CLASSIC_TP);
}
