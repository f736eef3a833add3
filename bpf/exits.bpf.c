// SPDX-License-Identifier: GPL-2.0
/*
 * How the target processes ended: the wait status of each tracked process (signal in the low 7 bits,
 * 0x80 when it dumped core, else the exit code << 8), so a target killed during a run is reported with
 * its signal even when whyslow is not its parent. One map update per exiting thread of a tracked process.
 * And which tracked processes the kernel's OOM killer chose (oom:mark_victim), whose SIGKILL alone does
 * not say why it came.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#define WS_OWN_EXIT
#include "track.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u32);
} exits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u32);
} oom_victims SEC(".maps");

/* The classic tracepoint (its pid field is the same on every kernel; the raw one changed its arguments in
 * 6.8). Both the global and a cgroup's OOM killer choose among processes (thread-group leaders): the pid
 * is the process's. */
SEC("tracepoint/oom/mark_victim")
int on_oom_victim(struct trace_event_raw_mark_victim *ctx)
{
	u32 tgid = ctx->pid;
	u32 one = 1;
	if (is_tracked(tgid))
		bpf_map_update_elem(&oom_victims, &tgid, &one, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	u32 tgid = p->tgid;
	if (!is_tracked(tgid))
		return 0;
	u32 status = p->exit_code;
	/* A fatal signal ends every thread with it; otherwise the leader's status is the process's. */
	if ((status & 0x7f) || p->pid == tgid)
		bpf_map_update_elem(&exits, &tgid, &status, (status & 0x7f) ? BPF_ANY : BPF_NOEXIST);
	untrack_ended(p);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
