// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
//go:build ignore

/*
 * bench.bpf.c: a synthetic event source for the pipeline benchmark and the
 * ring-overflow test. The process named in ng_settings.bench_tgid calls
 * getpgid(-N); this program then writes N records to ring_bench in one go,
 * each stamped with bpf_ktime_get_ns() when it is reserved. Every other
 * syscall on the machine costs one pid comparison.
 */
#include "ng_common.h"

#define NG_NR_GETPGID 121 /* x86_64 */
#define NG_BENCH_MAX_BATCH (1 << 20)

struct bench_ctx {
	__u64 batch;
	__u32 tgid;
};

/* seq numbers are global so that userspace can detect gaps. */
__u64 bench_seq = 0;

static long emit_one(__u32 i, struct bench_ctx *bc)
{
	struct ng_bench *e = bpf_ringbuf_reserve(&ring_bench, sizeof(*e), 0);

	if (!e) {
		ring_count(NG_RING_BENCH, false);
		return 0;
	}
	fill_header(&e->hdr, NG_KIND_BENCH, NG_VERSION_BENCH, NULL, NULL);
	e->hdr.pid = bc->tgid;
	e->hdr.tid = bc->tgid;
	e->seq = __sync_fetch_and_add(&bench_seq, 1);
	e->batch = bc->batch;
	bpf_ringbuf_submit(e, 0);
	ring_count(NG_RING_BENCH, true);
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_enter")
int ng_bench_sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	struct ng_settings *s = settings();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct bench_ctx bc = { .tgid = tgid };
	long n;

	if (!s || s->bench_tgid == 0 || s->bench_tgid != tgid)
		return 0;
	if (ctx->id != NG_NR_GETPGID)
		return 0;
	n = -(long)ctx->args[0];
	if (n <= 0 || n > NG_BENCH_MAX_BATCH)
		return 0;
	bc.batch = n;
	bpf_loop(n, emit_one, &bc, 0);
	return 0;
}
