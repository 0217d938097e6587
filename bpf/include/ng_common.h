/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ng_common.h: maps and helpers shared by every nodeguard BPF object. Each
 * object carries its own definition of the shared maps; the loader creates
 * each of them once and hands the same map to every object, so
 * monitored_cgroups, ng_settings, ring_stats and the rings are one set.
 */
#ifndef __NG_COMMON_H
#define __NG_COMMON_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_tracing.h>
#include "nodeguard.h"

/* Sizes below are defaults; the loader overrides max_entries at load time. */
#define NG_MONITORED_MAX 65536

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, NG_MONITORED_MAX);
	__type(key, struct ng_cgroup_key);
	__type(value, __u8);
} monitored_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ng_settings);
} ng_settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NG_MAX_PREFIXES);
	__type(key, __u32);
	__type(value, struct ng_prefix);
} monitored_prefixes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, NG_RING_MAX);
	__type(key, __u32);
	__type(value, struct ng_ring_counters);
} ring_stats SEC(".maps");


/* One ring per traffic class, so that a flood of process exits can never
 * crowd out an OOM kill. Sizes are set by the loader. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} ring_oom SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} ring_reclaim SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} ring_lifecycle SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} ring_bench SEC(".maps");

static __always_inline struct ng_settings *settings(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&ng_settings, &zero);
}

/* ring_reserved/ring_failed keep the per-CPU accounting that lets userspace
 * prove sent = received + dropped. */
static __always_inline void ring_count(__u32 ring, bool ok)
{
	struct ng_ring_counters *c = bpf_map_lookup_elem(&ring_stats, &ring);

	if (!c)
		return;
	if (ok)
		c->submitted++;
	else
		c->reserve_failed++;
}

/* The cgroup that holds the task's memory controller: a v1 memory cgroup on
 * hybrid hosts, the task's cgroup2 cgroup on pure v2 hosts. CO-RE: the
 * subsystem index is relocated against the running kernel. */
static __always_inline struct cgroup *task_memcg(struct task_struct *t)
{
	int mid = bpf_core_enum_value(enum cgroup_subsys_id, memory_cgrp_id);
	struct css_set *cset = BPF_CORE_READ(t, cgroups);
	struct cgroup_subsys_state *css = NULL;

	if (!cset || mid < 0 || mid >= CGROUP_SUBSYS_COUNT)
		return NULL;
	bpf_core_read(&css, sizeof(css), &cset->subsys[mid]);
	if (!css)
		return NULL;
	return BPF_CORE_READ(css, cgroup);
}

static __always_inline __u64 cgroup_kn_id(struct cgroup *cg)
{
	if (!cg)
		return 0;
	return BPF_CORE_READ(cg, kn, id);
}

struct ng_task_cgroups {
	__u64 memcg_id;
	__u64 cgroup_id; /* cgroup2 */
	__u32 memcg_hierarchy;
	__u32 memcg_level;
};

static __always_inline void task_cgroups(struct task_struct *t, struct ng_task_cgroups *out)
{
	struct cgroup *mem = task_memcg(t);

	out->memcg_id = cgroup_kn_id(mem);
	out->memcg_hierarchy = mem ? BPF_CORE_READ(mem, root, hierarchy_id) : 0;
	out->memcg_level = mem ? BPF_CORE_READ(mem, level) : 0;
	out->cgroup_id = cgroup_kn_id(BPF_CORE_READ(t, cgroups, dfl_cgrp));
}

/* is_monitored: filter in the kernel before reserving ring space. A task is
 * reported when its memory cgroup or its cgroup2 cgroup is in the monitored
 * set (the Go side seeds the set with the subtree; cgroup_mkdir extends it). */
static __always_inline bool is_monitored(const struct ng_task_cgroups *c)
{
	struct ng_settings *s = settings();
	struct ng_cgroup_key k = {};

	if (s && s->monitor_all)
		return true;
	k.id = c->memcg_id;
	k.hierarchy_id = c->memcg_hierarchy;
	if (k.id && bpf_map_lookup_elem(&monitored_cgroups, &k))
		return true;
	k.id = c->cgroup_id;
	k.hierarchy_id = 0;
	if (k.id && bpf_map_lookup_elem(&monitored_cgroups, &k))
		return true;
	return false;
}

static __always_inline void fill_header(struct ng_header *h, __u16 kind, __u8 version,
					struct task_struct *t, const struct ng_task_cgroups *c)
{
	h->kind = kind;
	h->version = version;
	h->flags = 0;
	h->cpu = bpf_get_smp_processor_id();
	h->pid = t ? BPF_CORE_READ(t, tgid) : 0;
	h->tid = t ? BPF_CORE_READ(t, pid) : 0;
	h->ts_ns = bpf_ktime_get_ns();
	h->memcg_id = c ? c->memcg_id : 0;
	h->cgroup_id = c ? c->cgroup_id : 0;
}

static __always_inline struct task_struct *current_task(void)
{
	return (struct task_struct *)bpf_get_current_task();
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#endif /* __NG_COMMON_H */
