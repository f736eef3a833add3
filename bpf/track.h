/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The processes a program observes: user space puts the target's tgids into `tracked`; children forked
 * by a tracked process are added from their first instruction. A launched command is put in ARMED while
 * it is still whyslow's forked child (its calls before exec are whyslow's own, e.g. execvp's PATH search)
 * and becomes TRACKED at its exec. A process leaves the map when its last thread ends. Shared by the
 * programs of bpf/.
 */
#ifndef WHYSLOW_TRACK_H
#define WHYSLOW_TRACK_H

#define WS_TRACKED 1
#define WS_ARMED 2

/* Allocated as processes are added (a preallocated map zeroes all its entries at load), except for
 * perf_event programs, which may only use preallocated hash maps (bpf/clock.bpf.c defines
 * WS_TRACKED_PREALLOC). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
#ifndef WS_TRACKED_PREALLOC
	__uint(map_flags, BPF_F_NO_PREALLOC);
#endif
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, u8);
} tracked SEC(".maps");

static __always_inline bool is_tracked(u32 tgid)
{
	u8 *v = bpf_map_lookup_elem(&tracked, &tgid);
	return v && *v == WS_TRACKED;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid != ctgid && is_tracked(ptgid)) {
		u8 one = WS_TRACKED;
		bpf_map_update_elem(&tracked, &ctgid, &one, BPF_ANY);
	}
	return 0;
}

/* A process whose last thread ends leaves `tracked`: its pid is handed to another process sooner or later
 * (pids wrap around: an agent with a process every second sees it within hours), which would be observed
 * in its stead, and the map would fill. Each thread's exit has already taken it off the group's `live`
 * count when the tracepoint fires, so the last one reads 0 (process_ended). A program with an exit
 * handler of its own defines WS_OWN_EXIT and calls untrack_ended at its end (after it looked the process
 * up); others get on_process_exit below. */
static __always_inline bool process_ended(struct task_struct *p)
{
	return p->signal->live.counter == 0;
}

static __always_inline void untrack_ended(struct task_struct *p)
{
	u32 tgid = p->tgid;
	if (process_ended(p))
		bpf_map_delete_elem(&tracked, &tgid);
}

#ifndef WS_OWN_EXIT
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_process_exit, struct task_struct *p)
{
	untrack_ended(p);
	return 0;
}
#endif

/* A program that wants to act when an armed command's exec succeeds defines WS_ON_ARMED_EXEC(task)
 * before including this file. */
#ifndef WS_ON_ARMED_EXEC
#define WS_ON_ARMED_EXEC(task)
#endif

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p)
{
	u32 tgid = p->tgid;
	u8 *v = bpf_map_lookup_elem(&tracked, &tgid);
	if (v && *v == WS_ARMED) {
		*v = WS_TRACKED;
		WS_ON_ARMED_EXEC(p);
	}
	return 0;
}

#endif
