// SPDX-License-Identifier: GPL-2.0
/*
 * whyslow stacks: every thread of one process as it is now (its user registers, user and kernel stacks,
 * Python frames, the syscall it is in and how long it has been off the CPU), without stopping it.
 *
 * A thread that is not on a CPU entered the kernel (a syscall, an interrupt, a fault) and its user
 * registers are saved at the top of its kernel stack, where they stay until it runs again: the task
 * iterator reads them (bpf_task_pt_regs) and copies its user stack (bpf_copy_from_user_task) and Python
 * frames through its memory. A thread on a CPU has no saved registers that hold still: the iterator asks
 * it for a task work, which runs in the thread itself as it next returns to user space (the kernel kicks
 * its CPU at once) and takes the same from its own registers. User space runs the iterator again for the
 * threads whose work has not run yet (they blocked in the kernel meanwhile, and are taken as blocked).
 * Each thread has one `snaps` entry; its `status` is changed atomically, so the iterator and a task work
 * never both fill it. Nothing here blocks, signals or changes the target.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "ustack.h"

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym;
extern void bpf_task_release(struct task_struct *p) __ksym;
extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw, void *map__map,
					      int (*callback)(struct bpf_map *map, void *key, void *value),
					      void *aux__prog) __ksym __weak;

struct ws_pystack;
static __always_inline struct ws_pystack *py_out_of(u32 tid);
#define WS_PY_OTHER_TASKS
#define PY_OUT(tid) py_out_of(tid)
#include "python.h"

#define KSTACK_DEPTH 64
#define PF_KTHREAD 0x00200000

/* `status` of a thread's entry. */
#define SNAP_EMPTY 0
#define SNAP_WAITING 1 /* its task work is to take it */
#define SNAP_TAKING 2
#define SNAP_TAKEN 3

/* How a thread was taken (`how`). */
#define HOW_BLOCKED 1 /* off the CPU: by the iterator */
#define HOW_RUNNING 2 /* on a CPU: by itself, in its task work */

struct ws_snap {
	u32 tid;
	u32 how;
	u64 status;	/* 64 bits: the width BPF's compare-and-swap takes here */
	u32 state;	/* __state when taken: 0 runnable, 1 sleeping, 2 uninterruptible, ... */
	u32 pad;
	u64 off_cpu_ns; /* off the CPU for this long (blocked, or waiting for a CPU) */
	u64 queued_ns;	/* runnable and waiting for a CPU for this long */
	u64 ip;
	u64 sp;
	u64 bp;
	s64 syscall; /* the syscall it is in (orig_ax), or -1 */
	u64 args[6];
	u32 kstack_bytes;
	u32 ustack_bytes;
	u64 kstack[KSTACK_DEPTH];
	struct ws_pystack py;
	u8 ustack[STACK_MAX + 2 * PAGE];
	struct bpf_task_work tw; /* last: never read by user space */
};

/* Set before load. */
const volatile u32 target = 0;			/* the process (tgid) */
const volatile u32 stack_bytes = STACK_MAX; /* at most STACK_MAX */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 32768);
	__type(key, u32);
	__type(value, struct ws_snap);
} snaps SEC(".maps");

/* A zeroed value to create `snaps` entries from (too large for the BPF stack): plain bytes, as a value
 * holding a bpf_task_work may not be the source of a map update. */
struct ws_zero {
	u8 bytes[sizeof(struct ws_snap)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ws_zero);
} zero SEC(".maps");

static __always_inline struct ws_pystack *py_out_of(u32 tid)
{
	struct ws_snap *s = bpf_map_lookup_elem(&snaps, &tid);
	return s ? &s->py : NULL;
}

/* When thread `p` last left a CPU, in the scheduler's clock: when it last arrived on one plus what it ran
 * then. The current thread's value is now (to within a tick). */
static __always_inline u64 left_cpu(struct task_struct *p)
{
	return p->sched_info.last_arrival + (p->se.sum_exec_runtime - p->se.prev_sum_exec_runtime);
}

/* Fills `s` with thread `p`: the current thread (`other` 0), or blocked thread `other` read from the
 * iterator; with its Python frames when `python` (a constant: the programs that read them are separate,
 * since their walk takes the verifier seconds, and only loaded for a CPython process). */
static __always_inline void take(struct ws_snap *s, struct task_struct *p, u32 other, bool python)
{
	struct task_struct *t = other ? p : NULL;
	s->state = p->__state;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(p);
	if (regs) {
		s->ip = regs->ip;
		s->sp = regs->sp;
		s->bp = regs->bp;
		s->syscall = (s64)regs->orig_ax;
		s->args[0] = regs->di;
		s->args[1] = regs->si;
		s->args[2] = regs->dx;
		s->args[3] = regs->r10;
		s->args[4] = regs->r8;
		s->args[5] = regs->r9;
		s->ustack_bytes = copy_user_stack(s->ustack, STACK_MAX - 1, 0, s->sp, stack_bytes, t);
	}
	if (other) {
		long k = bpf_get_task_stack(p, s->kstack, sizeof(s->kstack), 0);
		s->kstack_bytes = k > 0 ? k : 0;
		u64 now = left_cpu(bpf_get_current_task_btf());
		u64 left = left_cpu(p);
		s->off_cpu_ns = now > left ? now - left : 0;
		u64 queued = p->sched_info.last_queued;
		if (s->state == 0 && queued && now > queued)
			s->queued_ns = now - queued;
	}
	if (!python)
		return;
	u32 tgid = target;
	struct ws_py_proc *py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (py)
		py_frames(py, p, p->pid, &s->py);
}

/* A thread that was on a CPU, returning to user space (sleepable, in the thread itself). */
static __always_inline int resumed(void *value, bool python)
{
	struct ws_snap *s = value;
	if (!__sync_bool_compare_and_swap(&s->status, SNAP_WAITING, SNAP_TAKING))
		return 0;
	s->how = HOW_RUNNING;
	take(s, bpf_get_current_task_btf(), 0, python);
	s->status = SNAP_TAKEN;
	return 0;
}

static int resumed_native(struct bpf_map *map, void *key, void *value)
{
	return resumed(value, false);
}

static int resumed_python(struct bpf_map *map, void *key, void *value)
{
	return resumed(value, true);
}

static __always_inline int snapshot(struct bpf_iter__task *ctx, bool python)
{
	struct task_struct *p = ctx->task;
	if (!p || p->tgid != target || (p->flags & PF_KTHREAD))
		return 0;
	u32 tid = p->pid;
	struct ws_snap *s = bpf_map_lookup_elem(&snaps, &tid);
	if (!s) {
		u32 k = 0;
		struct ws_zero *z = bpf_map_lookup_elem(&zero, &k);
		if (!z || bpf_map_update_elem(&snaps, &tid, z, BPF_NOEXIST))
			return 0;
		s = bpf_map_lookup_elem(&snaps, &tid);
		if (!s)
			return 0;
		s->tid = tid;
	}
	u64 status = s->status;
	if (status == SNAP_TAKEN || status == SNAP_TAKING)
		return 0;
	if (p->on_cpu) {
		/* Its saved registers are stale while it runs: it takes itself (once asked). */
		if (status == SNAP_EMPTY && bpf_ksym_exists(bpf_task_work_schedule_resume_impl) &&
		    __sync_bool_compare_and_swap(&s->status, SNAP_EMPTY, SNAP_WAITING)) {
			long err = python ? bpf_task_work_schedule_resume_impl(p, &s->tw, &snaps, resumed_python, NULL)
					  : bpf_task_work_schedule_resume_impl(p, &s->tw, &snaps, resumed_native, NULL);
			if (err)
				s->status = SNAP_EMPTY;
		}
		return 0;
	}
	if (!__sync_bool_compare_and_swap(&s->status, status, SNAP_TAKING))
		return 0;
	s->how = HOW_BLOCKED;
	take(s, p, tid, python);
	s->status = SNAP_TAKEN;
	return 0;
}

/* One of the two is loaded: user space picks by whether the process runs CPython. */
SEC("iter.s/task")
int snapshot_native(struct bpf_iter__task *ctx)
{
	return snapshot(ctx, false);
}

SEC("iter.s/task")
int snapshot_python(struct bpf_iter__task *ctx)
{
	return snapshot(ctx, true);
}

char LICENSE[] SEC("license") = "GPL";
