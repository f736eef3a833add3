/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The processes a program observes: user space puts the target's tgids into `tracked`; children forked
 * by a tracked process are added from their first instruction. Shared by the programs of bpf/.
 */
#ifndef WHYSLOW_TRACK_H
#define WHYSLOW_TRACK_H

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u8);
} tracked SEC(".maps");

static __always_inline bool is_tracked(u32 tgid)
{
	return bpf_map_lookup_elem(&tracked, &tgid) != NULL;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid != ctgid && is_tracked(ptgid)) {
		u8 one = 1;
		bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY);
	}
	return 0;
}

#endif
