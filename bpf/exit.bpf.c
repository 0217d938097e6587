// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * exit.bpf.c: process exits (sched/sched_process_exit) on ring_lifecycle,
 * once per process: when the last thread of a monitored thread group exits.
 * The exiting task is always current, so both variants read the same data.
 */
#include "ng_common.h"

static __always_inline int emit_exit(struct task_struct *t, __u8 flags)
{
	struct ng_task_cgroups c = {};
	struct ng_exit *e;
	int live;

	/* Cheapest test first: this hook fires for every thread on the machine. */
	live = BPF_CORE_READ(t, signal, live.counter);
	if (live != 0)
		return 0;
	task_cgroups(t, &c);
	if (!is_monitored(&c))
		return 0;
	e = bpf_ringbuf_reserve(&ring_lifecycle, sizeof(*e), 0);
	if (!e) {
		ring_count(NG_RING_LIFECYCLE, false);
		return 0;
	}
	fill_header(&e->hdr, NG_KIND_EXIT, NG_VERSION_EXIT, t, &c);
	e->hdr.flags = flags;
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), &t->comm);
	e->exit_code = BPF_CORE_READ(t, exit_code);
	e->_pad = 0;
	bpf_ringbuf_submit(e, 0);
	ring_count(NG_RING_LIFECYCLE, true);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(ng_exit_btf, struct task_struct *task)
{
	return emit_exit(task, 0);
}

SEC("tracepoint/sched/sched_process_exit")
int ng_exit_tp(void *ctx)
{
	return emit_exit(current_task(), NG_FLAG_CLASSIC_TP);
}
