// SPDX-License-Identifier: GPL-2.0
/*
 * Which clock samples to keep. The CPU clock is sampled by one event per CPU, not one per thread of the
 * target: a per-thread timer is stopped and started at every context switch of that thread (a few
 * microseconds each in a VM, where each reprograms the timer), which cost a server that switches often
 * more than the samples themselves. The per-CPU events see every process; this program, run by the kernel
 * at each sample before anything is copied, keeps those of the tracked processes (and their children,
 * from track.h) and drops the rest (return 0).
 *
 * A kept sample of a Go program's thread running on the runtime's system stack has its goroutine's frames
 * on another stack than the one the sample copies: this program sends a copy of that one (see
 * goroutine_stack), which user space joins to the sample by thread and time. A kept sample of a CPython
 * process's thread has its Python frames sent the same way (python.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
/* A perf_event program: its hash maps must be preallocated. */
#define WS_TRACKED_PREALLOC
#define WS_OWN_EXIT
#include "track.h"
#include "go.h"
#include "python.h"

#define PAGE 4096

/* Set before load: the bytes of user stack each sample copies. */
const volatile u64 stack_bytes = 0;

#define GO_COPY (GO_BELOW + GO_STACK_MAX) /* bytes of a goroutine's stack sent at most */
#define GO_COPY_MASK 16383		  /* 2^k - 1 >= GO_COPY: bounds offsets for the verifier */

struct ws_goroutine {
	u64 time;
	u32 tid;
	u32 bytes;
	u64 bp; /* the address the bytes were copied from: GO_BELOW below the frame pointer, or it */
	/* Slack past the mask keeps the verifier's bound on each page-sized read simple. */
	u8 stack[GO_COPY_MASK + 1 + 2 * PAGE];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ws_goroutine);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18); /* resized by user space before load */
} goroutines SEC(".maps");

/* Copies up to GO_COPY bytes of the goroutine stack from `from` into g->stack, page by page, stopping at
 * the first page that cannot be read: returns the bytes copied. */
static __always_inline u32 copy_goroutine(struct ws_goroutine *g, u64 from)
{
	u32 n = 0;
	for (int k = 0; k < GO_COPY / PAGE + 2; k++) {
		if (n >= GO_COPY)
			break;
		u32 len = PAGE - ((from + n) & (PAGE - 1));
		if (len > GO_COPY - n)
			len = GO_COPY - n;
		u32 off = n;
		barrier_var(off);
		barrier_var(len);
		off &= GO_COPY_MASK;
		len &= PAGE * 2 - 1;
		if (bpf_probe_read_user(&g->stack[off], len, (void *)(from + n)))
			break;
		n += len;
	}
	return n;
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 12); /* resized by user space before load */
} pystacks SEC(".maps");

/* Sends the Python frames of a sample of a CPython process (python.h); only the frames read. */
static __always_inline void python_stack(struct ws_py_proc *py)
{
	u32 zero = 0;
	struct ws_pystack *s = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!s || !py_frames(py, bpf_get_current_task_btf(), 0, s))
		return;
	s->time = bpf_ktime_get_ns();
	u64 size = __builtin_offsetof(struct ws_pystack, frame) + (u64)s->frames * sizeof(struct ws_py_frame);
	if (size > sizeof(*s))
		size = sizeof(*s);
	barrier_var(size);
	bpf_ringbuf_output(&pystacks, s, size, 0);
}

/* Sends the goroutine stack of a sample (go.h): the frame pointers are followed in the target's memory
 * through the part of the stack the sample copies. */
static __always_inline void goroutine_stack(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	u64 sp = regs->sp, bp = regs->bp;
	int i;
	for (i = 0; i < GO_FRAMES; i++) {
		if (!bp || (bp & 7))
			return;
		if (bp < sp || bp + 16 > sp + stack_bytes)
			break;
		if (bpf_probe_read_user(&bp, sizeof(bp), (void *)bp))
			return;
	}
	if (i == GO_FRAMES)
		return;
	u32 zero = 0;
	struct ws_goroutine *g = bpf_map_lookup_elem(&scratch, &zero);
	if (!g)
		return;
	/* From GO_BELOW below the frame pointer, or from it where that page cannot be read. */
	u64 from = bp - GO_BELOW;
	u32 n = copy_goroutine(g, from);
	if (n <= GO_BELOW) {
		from = bp;
		n = copy_goroutine(g, from);
	}
	if (!n)
		return;
	g->time = bpf_ktime_get_ns();
	g->tid = (u32)bpf_get_current_pid_tgid();
	g->bytes = n;
	g->bp = from;
	u64 size = __builtin_offsetof(struct ws_goroutine, stack) + (u64)n;
	if (size > sizeof(*g))
		size = sizeof(*g);
	barrier_var(size);
	bpf_ringbuf_output(&goroutines, g, size, 0);
}

SEC("perf_event")
int keep(void *ctx)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!is_tracked(tgid))
		return 0;
	if (runs_go(tgid))
		goroutine_stack();
	struct ws_py_proc *py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (py)
		python_stack(py);
	return 1;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(py_on_fork, struct task_struct *parent, struct task_struct *child)
{
	if (parent->tgid != child->tgid)
		py_forked(parent->tgid, child->tgid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(py_on_exec, struct task_struct *p)
{
	u32 tgid = p->tgid;
	bpf_map_delete_elem(&py_procs, &tgid);
	return 0;
}

/* A process that ends leaves the maps: its pid goes to another process sooner or later. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_process_exit, struct task_struct *p)
{
	forget_go_ended(p);
	if (process_ended(p)) {
		u32 tgid = p->tgid;
		bpf_map_delete_elem(&py_procs, &tgid);
	}
	untrack_ended(p);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
