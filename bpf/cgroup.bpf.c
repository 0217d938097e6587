// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * cgroup.bpf.c: cgroup_mkdir and cgroup_rmdir on ring_lifecycle, and the
 * in-kernel upkeep of monitored_cgroups. These tracepoints fire for every
 * hierarchy and every process on the machine, so a directory is reported
 * only when its parent is monitored; reporting it also adds it to the set,
 * which is how the monitored subtree follows new pods without a round trip
 * through userspace. rmdir of a monitored directory removes it from the set.
 */
#include "ng_common.h"

static __always_inline bool monitored_id(__u64 id, __u32 hier)
{
	struct ng_settings *s = settings();
	struct ng_cgroup_key k = { .id = id, .hierarchy_id = hier };

	if (s && s->monitor_all)
		return true;
	return bpf_map_lookup_elem(&monitored_cgroups, &k) != NULL;
}

static __always_inline struct ng_cgroup *reserve_cgroup(__u16 kind)
{
	struct task_struct *cur = current_task();
	struct ng_task_cgroups c = {};
	struct ng_cgroup *e;

	e = bpf_ringbuf_reserve(&ring_lifecycle, sizeof(*e), 0);
	if (!e) {
		ring_count(NG_RING_LIFECYCLE, false);
		return NULL;
	}
	task_cgroups(cur, &c);
	fill_header(&e->hdr, kind, NG_VERSION_CGROUP, cur, &c);
	return e;
}

static __always_inline void submit_cgroup(struct ng_cgroup *e, const char *path)
{
	long n = bpf_probe_read_kernel_str(e->path, sizeof(e->path), path);

	if (n == sizeof(e->path))
		e->hdr.flags |= NG_FLAG_TRUNCATED;
	if (n < 0)
		e->path[0] = 0;
	bpf_ringbuf_submit(e, 0);
	ring_count(NG_RING_LIFECYCLE, true);
}

static __always_inline int on_cgroup(struct cgroup *cgrp, const char *path, bool mkdir)
{
	__u32 hier = BPF_CORE_READ(cgrp, root, hierarchy_id);
	__u64 id = cgroup_kn_id(cgrp);
	__u64 parent = cgroup_kn_id(BPF_CORE_READ(cgrp, self.parent, cgroup));
	struct ng_cgroup_key k = { .id = id, .hierarchy_id = hier };
	struct ng_cgroup *e;
	__u8 one = 1;

	if (mkdir) {
		if (!monitored_id(parent, hier))
			return 0;
		bpf_map_update_elem(&monitored_cgroups, &k, &one, BPF_ANY);
	} else {
		if (!monitored_id(id, hier))
			return 0;
		bpf_map_delete_elem(&monitored_cgroups, &k);
	}
	e = reserve_cgroup(mkdir ? NG_KIND_CGROUP_MKDIR : NG_KIND_CGROUP_RMDIR);
	if (!e)
		return 0;
	e->id = id;
	e->parent_id = parent;
	e->hierarchy_id = hier;
	e->level = BPF_CORE_READ(cgrp, level);
	submit_cgroup(e, path);
	return 0;
}

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(ng_cgroup_mkdir_btf, struct cgroup *cgrp, const char *path)
{
	return on_cgroup(cgrp, path, true);
}

SEC("tp_btf/cgroup_rmdir")
int BPF_PROG(ng_cgroup_rmdir_btf, struct cgroup *cgrp, const char *path)
{
	return on_cgroup(cgrp, path, false);
}

/* Classic fallback: the record has the hierarchy, level, id and path but no
 * parent, so a new directory is matched against monitored_prefixes. */

struct prefix_ctx {
	__u32 hier;
	const char *path; /* kernel string in the trace record */
	bool match;
};

static long match_prefix(__u32 i, struct prefix_ctx *pc)
{
	char buf[NG_PATH_LEN];
	struct ng_prefix *p = bpf_map_lookup_elem(&monitored_prefixes, &i);
	__u32 n;

	if (!p || p->len == 0 || p->hierarchy_id != pc->hier)
		return 0;
	n = p->len;
	if (n >= NG_PATH_LEN)
		return 0;
	if (bpf_probe_read_kernel_str(buf, sizeof(buf), pc->path) <= 0)
		return 0;
	for (__u32 j = 0; j < NG_PATH_LEN; j++) {
		if (j >= n)
			break;
		if (buf[j] != p->path[j])
			return 0;
	}
	/* "/a/b" is beneath "/a" but not beneath "/a/bc"'s sibling "/a/b". */
	if (buf[n & (NG_PATH_LEN - 1)] == '/' || (n == 1 && p->path[0] == '/')) {
		pc->match = true;
		return 1;
	}
	return 0;
}

static __always_inline int on_cgroup_tp(struct trace_event_raw_cgroup *ctx, bool mkdir)
{
	__u32 hier = ctx->root;
	__u64 id = ctx->id;
	struct ng_cgroup_key k = { .id = id, .hierarchy_id = hier };
	const char *path = (void *)ctx + (ctx->__data_loc_path & 0xffff);
	struct ng_cgroup *e;
	__u8 one = 1;

	if (mkdir) {
		struct ng_settings *s = settings();
		struct prefix_ctx pc = { .hier = hier, .path = path };

		if (!(s && s->monitor_all)) {
			bpf_loop(NG_MAX_PREFIXES, match_prefix, &pc, 0);
			if (!pc.match)
				return 0;
		}
		bpf_map_update_elem(&monitored_cgroups, &k, &one, BPF_ANY);
	} else {
		if (!monitored_id(id, hier))
			return 0;
		bpf_map_delete_elem(&monitored_cgroups, &k);
	}
	e = reserve_cgroup(mkdir ? NG_KIND_CGROUP_MKDIR : NG_KIND_CGROUP_RMDIR);
	if (!e)
		return 0;
	e->hdr.flags |= NG_FLAG_CLASSIC_TP;
	e->id = id;
	e->parent_id = 0;
	e->hierarchy_id = hier;
	e->level = ctx->level;
	submit_cgroup(e, path);
	return 0;
}

SEC("tracepoint/cgroup/cgroup_mkdir")
int ng_cgroup_mkdir_tp(struct trace_event_raw_cgroup *ctx)
{
	return on_cgroup_tp(ctx, true);
}

SEC("tracepoint/cgroup/cgroup_rmdir")
int ng_cgroup_rmdir_tp(struct trace_event_raw_cgroup *ctx)
{
	return on_cgroup_tp(ctx, false);
}
