/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * nodeguard.h: the event ABI shared by the BPF programs (bpf/<family>.bpf.c) and the
 * Go decoder (loader/event). Every record written to a ring buffer starts with
 * struct ng_header. All fields are little-endian, naturally aligned, and the
 * record sizes below are checked by loader/event's golden tests: change a
 * layout only together with NG_VERSION_* of that kind.
 */
#ifndef __NODEGUARD_H
#define __NODEGUARD_H

/* Record kinds (ng_header.kind). Never reuse a number. */
enum ng_kind {
	NG_KIND_OOM_KILL = 1,
	NG_KIND_RECLAIM = 2,
	NG_KIND_CGROUP_MKDIR = 3,
	NG_KIND_CGROUP_RMDIR = 4,
	NG_KIND_OOM_SCORE_ADJ = 5,
	NG_KIND_EXIT = 6,
	NG_KIND_BENCH = 7,
};

/* Layout versions (ng_header.version), one per kind. */
#define NG_VERSION_OOM_KILL 1
#define NG_VERSION_RECLAIM 1
#define NG_VERSION_CGROUP 1
#define NG_VERSION_OOM_SCORE_ADJ 1
#define NG_VERSION_EXIT 1
#define NG_VERSION_BENCH 1

/* ng_header.flags */
/* The cgroup ids are those of the current task, not of the subject task
 * (classic-tracepoint fallbacks that only know the subject's pid). */
#define NG_FLAG_CGROUP_OF_CURRENT 0x01
/* A string field filled its whole buffer and may have been cut. */
#define NG_FLAG_TRUNCATED 0x02
/* The record came from a classic tracepoint, not from tp_btf. */
#define NG_FLAG_CLASSIC_TP 0x04
/* The kind's task details (comm, rss, oom_score_adj) were not available on
 * this kernel and are zero; zero is then "unknown", not a measurement. */
#define NG_FLAG_NO_TASK_DETAILS 0x08

#define NG_COMM_LEN 16
#define NG_PATH_LEN 256

/* 40 bytes. memcg_id is the id (kernfs node id, equal to the directory's
 * inode number) of the cgroup that holds the task's memory controller: a v1
 * memory cgroup on hybrid/v1 hosts, the cgroup2 cgroup on pure v2 hosts.
 * cgroup_id is the cgroup2 (unified) id, as bpf_get_current_cgroup_id().
 * A host has one memory hierarchy, so memcg_id needs no hierarchy id of its
 * own: it is the memory controller's hierarchy (0 on pure cgroup2). Page
 * counts assume 4 KiB pages (x86_64, the only target built). */
struct ng_header {
	__u16 kind;
	__u8 version;
	__u8 flags;
	__u32 cpu;
	__u32 pid; /* thread-group id: what userspace calls the pid */
	__u32 tid;
	__u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 memcg_id;
	__u64 cgroup_id;
};

/* NG_KIND_OOM_KILL from oom/mark_victim. The header describes the victim. */
struct ng_oom_kill {
	struct ng_header hdr;
	char comm[NG_COMM_LEN];
	__s32 oom_score_adj;
	__u32 trigger_pid; /* the task whose allocation invoked the OOM killer */
	__u64 total_vm_pages;
	__u64 anon_rss_pages;
	__u64 file_rss_pages;
	__u64 shmem_rss_pages;
	__u32 memcg_level; /* depth of the victim's memcg in its hierarchy */
	__u32 memcg_hierarchy; /* hierarchy id of that memcg; 0 is cgroup2 */
};

/* Reclaim flavours (ng_reclaim.type, and the reclaim_stats key). */
enum ng_reclaim_type {
	NG_RECLAIM_MEMCG = 1,  /* mm_vmscan_memcg_reclaim_begin/end */
	NG_RECLAIM_DIRECT = 2, /* mm_vmscan_direct_reclaim_begin/end */
	NG_RECLAIM_KSWAPD = 3, /* mm_vmscan_kswapd_wake/sleep, per NUMA node */
};

/* NG_KIND_RECLAIM: one reclaim episode longer than the configured minimum.
 * The header describes the stalled task (for kswapd: the kswapd thread, with
 * memcg_id/cgroup_id 0). */
struct ng_reclaim {
	struct ng_header hdr;
	__u32 type;
	__s32 order;
	__u32 gfp_flags;
	__u32 nid; /* NUMA node, kswapd only */
	__u64 duration_ns;
	__u64 nr_reclaimed;
};

/* NG_KIND_CGROUP_MKDIR / NG_KIND_CGROUP_RMDIR. The header describes the task
 * that made or removed the directory. */
struct ng_cgroup {
	struct ng_header hdr;
	__u64 id;
	__u64 parent_id; /* 0 when unknown (classic tracepoint) */
	__u32 hierarchy_id; /* 0 is the unified (cgroup2) hierarchy */
	__u32 level;
	char path[NG_PATH_LEN]; /* within the hierarchy, starting with '/', NUL-terminated */
};

/* NG_KIND_OOM_SCORE_ADJ from oom/oom_score_adj_update. The header describes
 * the task whose value changed. */
struct ng_oom_score_adj {
	struct ng_header hdr;
	char comm[NG_COMM_LEN];
	__s32 oom_score_adj;
	__u32 writer_pid;
};

/* NG_KIND_EXIT from sched/sched_process_exit, once per process (when the
 * last thread of the thread group exits). exit_code is the kernel's raw
 * wait status: signal in bits 0-6, core dump in bit 7, exit status in 8-15. */
struct ng_exit {
	struct ng_header hdr;
	char comm[NG_COMM_LEN];
	__u32 exit_code;
	__u32 _pad;
};

/* NG_KIND_BENCH: synthetic records for the pipeline benchmark and the ring
 * overflow test (bpf/bench.bpf.c). */
struct ng_bench {
	struct ng_header hdr;
	__u64 seq;
	__u64 batch;
};

/* Keys of the shared maps. */

/* monitored_cgroups: the cgroups whose tasks are reported. Ids are unique only
 * within one hierarchy, so the key carries the hierarchy id (0 = cgroup2). */
struct ng_cgroup_key {
	__u64 id;
	__u32 hierarchy_id;
	__u32 _pad;
};

/* reclaim_stats: aggregates per (cgroup, type), readable at any time. For
 * memcg and direct reclaim the cgroup is the stalled task's memcg; for kswapd
 * id is the NUMA node and hierarchy_id is 0. */
struct ng_reclaim_key {
	__u64 id;
	__u32 hierarchy_id;
	__u32 type;
};

struct ng_reclaim_value {
	__u64 episodes;
	__u64 total_ns;
	__u64 max_ns;
	__u64 nr_reclaimed;
	__u64 emitted; /* episodes longer than the minimum, sent as events */
};

/* ring_stats: per-CPU counters, one slot per ring (enum ng_ring). */
enum ng_ring {
	NG_RING_OOM = 0,     /* oom_kill, oom_score_adj: rare and never drowned */
	NG_RING_RECLAIM = 1, /* reclaim episodes */
	NG_RING_LIFECYCLE = 2, /* cgroup mkdir/rmdir, process exit */
	NG_RING_BENCH = 3,
	NG_RING_MAX = 4,
};

struct ng_ring_counters {
	__u64 submitted;   /* records committed to the ring */
	__u64 reserve_failed; /* bpf_ringbuf_reserve returned NULL: record lost */
};


/* ng_settings: one shared ARRAY entry written by the loader. (vmlinux.h
 * defines a type named "config", hence the prefix.) */
struct ng_settings {
	__u32 monitor_all; /* 1: report every cgroup on the machine */
	__u32 bench_tgid;  /* bench.bpf.c answers only this process */
	__u64 min_episode_ns; /* reclaim episodes shorter than this are only aggregated */
};

/* monitored_prefixes: for the classic-tracepoint cgroup_mkdir fallback, which
 * cannot see the parent's id: a new cgroup is monitored when its path lies
 * beneath one of these hierarchy-relative paths. */
#define NG_MAX_PREFIXES 4
struct ng_prefix {
	__u32 hierarchy_id;
	__u32 len; /* 0: slot unused */
	char path[NG_PATH_LEN];
};

#endif /* __NODEGUARD_H */
