// SPDX-License-Identifier: GPL-2.0
/*
 * whyslow off-CPU: blocked time by stack, decided in the kernel. At a switch-out of a tracked thread its
 * user registers and a copy of its user stack are kept in `blocks` (one entry per thread); at its
 * switch-in the block's length is known, and only then is it sent to user space: always when it lasted
 * at least `sample_ns`, otherwise with probability length / sample_ns and valued sample_ns. Its kernel
 * stack, unchanged while it is blocked, is taken only for a block that is sent (walking it at every
 * switch-out cost more than the rest of this program), and for the blocks still in progress at the end
 * of a run by the `blocked_stacks` iterator. That is an unbiased estimate of blocked time by stack at a bounded rate (about one record per
 * sample_ns of blocked time per thread), however often the target switches; sample_ns = 0 sends every
 * block.
 *
 * Where the kernel has bpf_task_work (Linux 6.18), the user stack is not copied at every switch-out either
 * (that copy cost a server ~1.7 us per block, most of them never sent): a block chosen at its switch-in
 * asks for a task work, which runs in the thread itself as it returns to user space, where its user
 * registers and stack are still those it blocked with, and copies and sends them then. The stacks of the
 * threads still blocked at the end are read by the (sleepable) iterator. Elsewhere, and for Go programs
 * (a parked goroutine's saved state is gone once another thread runs it, often before this one resumes),
 * the copy is taken at the switch-out. Blocks shorter than `min_block_ns` are left out. Nothing here may block or change the target;
 * records the ring had no room for and blocks no entry could hold are counted, never silently dropped.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#define WS_OWN_EXIT
#include "track.h"
#include "rings.h"
#include "go.h"
#include "ustack.h"
struct ws_pystack;
static __always_inline struct ws_pystack *py_out_of(u32 tid);
#define PY_OUT(tid) py_out_of(tid)
#include "python.h"

#define KSTACK_DEPTH 64
#define PF_EXITING 0x00000004
#define PF_KTHREAD 0x00200000

/* Counters in the `drops` per-CPU array. */
#define DROP_RING 0 /* blocks the ring buffer had no room for */
#define DROP_MAP 1  /* switch-outs no `blocks` entry could hold */
#define DROP_WORK 2 /* chosen blocks whose task work could not be scheduled */
#define DROP_SLOTS 3
#include "drops.h"

extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw, void *map__map,
					      int (*callback)(struct bpf_map *map, void *key, void *value),
					      void *aux__prog) __ksym __weak;
/* Whether user stacks are taken by a task work as the thread resumes (see the top of the file). */
#define DEFERRED bpf_ksym_exists(bpf_task_work_schedule_resume_impl)

/* One thread's last block; the record sent is this struct up to ustack[ustack_bytes + go_bytes]. */
struct ws_block {
	u64 since; /* switch-out time; 0 while the thread runs */
	u64 until; /* switch-in time */
	u64 ns;    /* off-CPU time the record stands for */
	u32 tgid;
	u32 tid;
	u32 state; /* prev_state at the switch-out: 0 (TASK_RUNNING) when preempted */
	u32 kstack_bytes;
	u32 ustack_bytes;
	u32 go_bytes; /* bytes of a goroutine's stack copied after the user stack */
	u64 ip;
	u64 sp;
	u64 bp;
	u64 go_at; /* the address they were copied from: the goroutine frame the frame pointers lead to, or
		    * the stack pointer saved by the goroutine mcall switched away from */
	u64 go_pc; /* that goroutine's saved pc and frame pointer (0 for the frame-pointer case) */
	u64 go_bp;
	u32 block_state; /* prev_state of the block in progress (`state` is the record's) */
	u16 deferred;	 /* the block in progress has its user stacks taken as it resumes (see the top) */
	u16 pending;	 /* a chosen block waits for its task work to take the user stacks and send it */
	struct ws_pystack py; /* a CPython thread's Python frames as it blocked (python.h) */
	u64 kstack[KSTACK_DEPTH];
	/* Twice STACK_MAX and slack keep the verifier's bound on each page-sized read simple. */
	u8 ustack[2 * STACK_MAX + 2 * PAGE];
	struct bpf_task_work tw; /* last: never part of a record sent (the verifier refuses that) */
};

/* Set before load. */
const volatile u64 min_block_ns = 0;
const volatile u64 sample_ns = 0;
const volatile u32 stack_bytes = STACK_MAX; /* at most STACK_MAX */
const volatile bool kernel_stack = true;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, struct ws_block);
} blocks SEC(".maps");

/* A zeroed value to create `blocks` entries from (too large for the BPF stack): plain bytes, as a value
 * holding a bpf_task_work may not be the source of a map update. */
struct ws_zero {
	u8 bytes[sizeof(struct ws_block)];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ws_zero);
} zero SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by user space before load */
} events SEC(".maps");

/* Copies user stack into the block's buffer (ustack.h). */
static __always_inline u32 copy_stack(struct ws_block *b, u32 at, u64 from, u32 max, struct task_struct *t)
{
	return copy_user_stack(b->ustack, 2 * STACK_MAX - 1, at, from, max, t);
}

/* The goroutine runtime.mcall switched a Go thread's system stack away from (go.h), found in the frame
 * whose saved frame pointer is 0 (`frame`, in the copy): mcall cleared the frame pointer and pushed that
 * goroutine's g above the return address of the function it calls (park_m, goexit0, ...), two words up.
 * Taken when the g holds itself in g.sched.g and its saved stack pointer lies in its stack; user space uses
 * it only for a stack whose walk ends in runtime.mcall (morestack and a thread's start leave other data
 * there). Its stack is copied from the saved stack pointer, with the saved pc and frame pointer. (Go 1.25
 * on: before, mcall kept the goroutine's frame pointer, and the chain leaves the copy as under
 * systemstack.) */
static __always_inline void copy_parked_goroutine(struct ws_block *b, u32 frame, struct task_struct *t)
{
	if (frame + 24 > b->ustack_bytes)
		return;
	u32 off = frame + 16;
	barrier_var(off);
	off &= STACK_MAX - 1;
	u64 g = *(u64 *)&b->ustack[off];
	u64 w[14], sp, pc, bp;
	if (!g || (g & 7) || read_user(w, sizeof(w), g, t) || !go_saved_regs(w, g, &sp, &pc, &bp))
		return;
	u64 hi = w[1];
	b->go_bp = bp;
	b->go_at = sp;
	b->go_pc = pc;
	b->go_bytes = copy_stack(b, b->ustack_bytes, sp, hi - sp < GO_STACK_MAX ? hi - sp : GO_STACK_MAX, t);
}

/* Copies the goroutine stack of a Go thread that blocked (go.h) after its user stack: the frame pointers
 * are followed through the copy already taken, to where they leave it (systemstack and the like) or end in
 * it (mcall, morestack, a thread's start). */
static __always_inline void copy_goroutine_stack(struct ws_block *b, struct task_struct *t)
{
	u64 bp = b->bp, sp = b->sp;
	u32 n = b->ustack_bytes, frame = 0;
	int i;
	for (i = 0; i < GO_FRAMES; i++) {
		if (!bp) {
			if (i)
				copy_parked_goroutine(b, frame, t);
			return;
		}
		if (bp & 7)
			return;
		if (bp < sp || bp - sp + 16 > n)
			break;
		u32 off = bp - sp;
		barrier_var(off);
		off &= STACK_MAX - 1;
		frame = off;
		bp = *(u64 *)&b->ustack[off];
	}
	if (i == GO_FRAMES)
		return;
	/* From GO_BELOW below the frame pointer (go.h), or from it where that page cannot be read. */
	u64 from = bp - GO_BELOW;
	u32 got = copy_stack(b, n, from, GO_BELOW + GO_STACK_MAX, t);
	if (got <= GO_BELOW) {
		from = bp;
		got = copy_stack(b, n, from, GO_STACK_MAX, t);
	}
	b->go_at = from;
	b->go_pc = 0;
	b->go_bytes = got;
}

static __always_inline struct ws_pystack *py_out_of(u32 tid)
{
	struct ws_block *b = bpf_map_lookup_elem(&blocks, &tid);
	return b ? &b->py : NULL;
}

/* Fills `out` with the Python frames of the current thread `tid` of process `tgid` (fsbase `fs`) where
 * it runs CPython. Global, so the verifier checks it once rather than at each place stacks are taken
 * (inlined there, the switch program passed its instruction limit). */
__noinline int take_python(u32 tgid, u32 tid, u64 fs, struct ws_pystack *out)
{
	if (!out)
		return 0;
	struct ws_py_proc *py = bpf_map_lookup_elem(&py_procs, &tgid);
	return py && py_frames_of(py, tid, fs, 0, out);
}

/* Thread `p`'s user registers and stacks as it blocked: taken by `p` itself (t NULL: at its switch-out, or
 * in its task work as it resumes, where they are still those it blocked with), or by a sleepable program
 * reading blocked thread t = p. */
static __always_inline void take_user_stacks(struct ws_block *b, struct task_struct *p, struct task_struct *t)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(p);
	if (!regs) {
		b->ustack_bytes = 0;
		b->go_bytes = 0;
		return;
	}
	b->ip = regs->ip;
	b->sp = regs->sp;
	b->bp = regs->bp;
	b->ustack_bytes = copy_stack(b, 0, b->sp, stack_bytes, t);
	b->go_bytes = 0;
	if (runs_go(p->tgid))
		copy_goroutine_stack(b, t);
	/* Python frames are read through the thread's own memory: by the thread itself only. */
	b->py.frames = 0;
	if (!t)
		take_python(p->tgid, p->pid, p->thread.fsbase, &b->py);
}

static __always_inline void switched_out(struct task_struct *p, unsigned int state, u64 now)
{
	u32 tid = p->pid;
	if (!is_tracked(p->tgid) || (p->flags & (PF_EXITING | PF_KTHREAD)))
		return;
	struct ws_block *b = bpf_map_lookup_elem(&blocks, &tid);
	if (!b) {
		u32 k = 0;
		struct ws_zero *z = bpf_map_lookup_elem(&zero, &k);
		if (!z || bpf_map_update_elem(&blocks, &tid, z, BPF_NOEXIST)) {
			drop(DROP_MAP);
			return;
		}
		b = bpf_map_lookup_elem(&blocks, &tid);
		if (!b)
			return;
	}
	b->tgid = p->tgid;
	b->tid = tid;
	b->block_state = state;
	b->deferred = DEFERRED && !runs_go(p->tgid);
	if (!b->deferred) {
		b->state = state;
		take_user_stacks(b, p, NULL);
		b->kstack_bytes = 0;
	}
	b->since = now;
}

/* The kernel stack of thread `p`, blocked in __schedule: where it blocked. */
static __always_inline void blocked_at(struct task_struct *p, struct ws_block *b)
{
	long k = kernel_stack ? bpf_get_task_stack(p, b->kstack, sizeof(b->kstack), 0) : 0;
	b->kstack_bytes = k > 0 ? k : 0;
}

/* Sends block `b` (its stacks taken): the record is the struct up to its stacks' end. */
static __always_inline void send(struct ws_block *b)
{
	u64 n = (u64)b->ustack_bytes + b->go_bytes;
	if (n > STACK_MAX + GO_BELOW + GO_STACK_MAX)
		n = STACK_MAX + GO_BELOW + GO_STACK_MAX;
	barrier_var(n);
	if (bpf_ringbuf_output(&events, b, __builtin_offsetof(struct ws_block, ustack) + n,
			       DRAINED_ON_ITS_CLOCK))
		drop(DROP_RING);
}

/* DEFERRED: the chosen block's thread, returning to user space (sleepable, in the thread itself). */
static int resumed(struct bpf_map *map, void *key, void *value)
{
	struct ws_block *b = value;
	take_user_stacks(b, bpf_get_current_task_btf(), NULL);
	send(b);
	b->pending = 0;
	return 0;
}

static __always_inline void switched_in(struct task_struct *p, u64 now)
{
	u32 tid = p->pid;
	struct ws_block *b = bpf_map_lookup_elem(&blocks, &tid);
	if (!b || !b->since)
		return;
	u64 ns = now - b->since;
	b->since = 0;
	if (ns < min_block_ns)
		return;
	if (ns < sample_ns) {
		/* Kept with probability ns / sample_ns (prandom * sample_ns / 2^32 is uniform in [0, sample_ns)). */
		if ((((u64)bpf_get_prandom_u32() * sample_ns) >> 32) >= ns)
			return;
		ns = sample_ns;
	}
	/* (DEFERRED is a constant after loading: without the kfunc, the verifier never sees the call below.) */
	if (!DEFERRED || !b->deferred) {
		b->ns = ns;
		b->until = now;
		blocked_at(p, b);
		send(b);
		return;
	}
	if (b->pending) {
		/* Blocked again before it got back to user space: the same user stacks; the time adds up. */
		b->ns += ns;
		return;
	}
	b->ns = ns;
	b->until = now;
	b->state = b->block_state;
	blocked_at(p, b);
	b->pending = 1;
	if (bpf_task_work_schedule_resume_impl(p, &b->tw, &blocks, resumed, NULL)) {
		b->pending = 0;
		drop(DROP_WORK);
	}
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	u64 now = bpf_ktime_get_ns();
	switched_out(prev, preempt ? 0 : prev_state, now);
	switched_in(next, now);
	return 0;
}

/* Run by user space at the end of a run: the kernel stacks of the tracked threads still blocked. */
SEC("iter.s/task")
int blocked_stacks(struct bpf_iter__task *ctx)
{
	struct task_struct *p = ctx->task;
	if (!p)
		return 0;
	u32 tid = p->pid;
	struct ws_block *b = bpf_map_lookup_elem(&blocks, &tid);
	if (!b || !b->since)
		return 0;
	blocked_at(p, b);
	if (b->deferred) {
		/* Its user stacks were not taken at the switch-out: read them from the blocked thread. */
		b->state = b->block_state;
		take_user_stacks(b, p, p);
	}
	return 0;
}

/* A thread that ends runs first (its block was sent at that switch-in): its entry goes. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_thread_exit, struct task_struct *p)
{
	u32 tid = p->pid;
	bpf_map_delete_elem(&blocks, &tid);
	forget_go_ended(p);
	untrack_ended(p);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
