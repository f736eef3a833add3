// SPDX-License-Identifier: GPL-2.0
/*
 * How the target processes ended: the wait status of each tracked process (signal in the low 7 bits,
 * 0x80 when it dumped core, else the exit code << 8), so a target killed during a run is reported with
 * its signal even when whyslow is not its parent. One map update per exiting thread of a tracked process.
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
