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
#include "rings.h"
#include "go.h"
#include "python.h"

#define PAGE 4096

/* Set before load: the bytes of user stack each sample copies; whether every process's samples are kept
 * (a whole-host recording, which takes this program for the Python frames). */
const volatile u64 stack_bytes = 0;
const volatile bool keep_all = false;
/* Set before load: whether any process may get goroutine or Python stacks. Off, the verifier drops that
 * code (most of what it checks: a third of a launched C program's start under load). */
const volatile bool go_on = true;
const volatile bool python_on = true;

#define GO_COPY (GO_BELOW + GO_STACK_MAX) /* bytes of a goroutine's stack sent at most */
/* Bytes of a thread's own stack sent at most past what the sample copies (see stack_tail). */
#define TAIL_MAX (64 * 1024)
#define COPY_MASK 65535 /* 2^k - 1 >= GO_COPY, TAIL_MAX: bounds offsets for the verifier */
/* A thread whose stack top is farther than this from its stack pointer has no top we know (a coroutine's
 * stack, a thread's own allocation): no tail. */
#define MAX_SPAN (64ULL << 20)

/* A stack sent beside a sample: a goroutine's (Go), or the rest of the sampled thread's own (a tail). */
struct ws_goroutine {
	u64 time;
	u32 tid;
	u32 bytes;
	/* The address the bytes were copied from: for a goroutine, GO_BELOW below the frame pointer, or it;
	 * for a tail, the end of the sample's own copy (its stack pointer + stack_bytes). */
	u64 bp;
	/* The goroutine's saved pc and frame pointer where the chain ended in the copy (0: it left the copy,
	 * and `bp` is where it led); its saved stack pointer is then `bp`. */
	u64 pc;
	u64 parked_bp;
	u32 tail; /* 1: a tail, not a goroutine's stack */
	u32 pad;
	/* Slack past the mask keeps the verifier's bound on each page-sized read simple. */
	u8 stack[COPY_MASK + 1 + 2 * PAGE];
};

/* One stack being sent per CPU (a program on a clock event runs with preemption off), in an array rather
 * than a per-CPU one, whose values are at most 32 KB. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* the CPUs' count, set by user space before load */
	__type(key, u32);
	__type(value, struct ws_goroutine);
} scratch SEC(".maps");

/* This CPU's stack being sent. */
static __always_inline struct ws_goroutine *scratch_stack(void)
{
	u32 cpu = bpf_get_smp_processor_id();
	return bpf_map_lookup_elem(&scratch, &cpu);
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18); /* resized by user space before load */
} goroutines SEC(".maps");

/* Copies up to `max` (at most TAIL_MAX) bytes of a stack from `from` into g->stack, page by page (`pages`
 * reads at most: max / PAGE + 2), stopping at the first page that cannot be read: returns the bytes
 * copied. */
static __always_inline u32 copy_stack(struct ws_goroutine *g, u64 from, u32 max, const int pages)
{
	u32 n = 0;
	for (int k = 0; k < pages; k++) {
		if (n >= max)
			break;
		u32 len = PAGE - ((from + n) & (PAGE - 1));
		if (len > max - n)
			len = max - n;
		u32 off = n;
		barrier_var(off);
		barrier_var(len);
		off &= COPY_MASK;
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
	bpf_ringbuf_output(&pystacks, s, size, wake_flags(&pystacks));
}

/* Sends stack `g` (copied from `from`, `n` bytes; a goroutine's, or a `tail`) for the current thread's
 * sample. */
static __always_inline void send_stack(struct ws_goroutine *g, u64 from, u32 n, u32 tail)
{
	g->time = bpf_ktime_get_ns();
	g->tail = tail;
	g->tid = (u32)bpf_get_current_pid_tgid();
	g->bytes = n;
	g->bp = from;
	u64 size = __builtin_offsetof(struct ws_goroutine, stack) + (u64)n;
	if (size > sizeof(*g))
		size = sizeof(*g);
	barrier_var(size);
	bpf_ringbuf_output(&goroutines, g, size, wake_flags(&goroutines));
}

/* Where Go's structures keep what is read of them (amd64, Go 1.17 on): g.m, g.sched (after g.stack, the
 * stack guards, _panic and _defer), m.g0 (its first word), and m.curg: at 184 from Go 1.25 (its gobuf lost
 * `ret`, and caughtsig, 0 but in a signal, follows it), at 192 before (after mstartfn, at 184). */
#define G_M 48
#define G_SCHED 56
#define M_CURG 184

/* Whether `gp` is a g of `m`: it names `m` as its m and itself in g.sched.g. */
static __always_inline bool g_of(u64 m, u64 gp)
{
	u64 w[3];
	if (!gp || (gp & 7))
		return false;
	if (bpf_probe_read_user(&w[0], sizeof(w[0]), (void *)(gp + G_M)) || w[0] != m)
		return false;
	return !bpf_probe_read_user(w, sizeof(w), (void *)(gp + G_SCHED)) && w[2] == gp;
}

/* For a thread whose frame-pointer chain ends in the copied stack (morestack and mcall clear the frame
 * pointer from Go 1.21 and 1.25 on; a thread's start ends it too), running on its system stack (its g, at
 * -8 off the fs base where a Go program without cgo keeps it, is its m's g0): the goroutine it runs for
 * (m.curg), its stack copied from the registers morestack or mcall saved in g.sched, sent with them; or,
 * where m.curg is nil (the goroutine was descheduled, as a preempted one is in newstack), a stack of no
 * bytes. User space uses them only for a walk that ends in morestack or mcall. */
static __always_inline void switched_goroutine(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	u64 fs = t->thread.fsbase, g0, m, m_g0, curg[2];
	if (!fs || bpf_probe_read_user(&g0, sizeof(g0), (void *)(fs - 8)) || !g0 || (g0 & 7))
		return;
	if (bpf_probe_read_user(&m, sizeof(m), (void *)(g0 + G_M)) || !m || (m & 7))
		return;
	if (bpf_probe_read_user(&m_g0, sizeof(m_g0), (void *)m) || m_g0 != g0)
		return;
	if (bpf_probe_read_user(curg, sizeof(curg), (void *)(m + M_CURG)))
		return;
	struct ws_goroutine *g = scratch_stack();
	if (!g)
		return;
	g->pc = 0;
	g->parked_bp = 0;
	u64 gp = g_of(m, curg[1]) ? curg[1] : g_of(m, curg[0]) ? curg[0] : 0;
	/* Neither word is a g, and the one past m.curg before Go 1.25 (caughtsig from it) is 0: m.curg is nil. */
	if (!gp) {
		if (!curg[1])
			send_stack(g, 0, 0, 0);
		return;
	}
	u64 w[14], sp, pc, bp;
	if (bpf_probe_read_user(w, sizeof(w), (void *)gp) || !go_saved_regs(w, gp, &sp, &pc, &bp))
		return;
	u32 n = copy_stack(g, sp, GO_COPY, GO_COPY / PAGE + 2);
	if (!n)
		return;
	g->pc = pc;
	g->parked_bp = bp;
	send_stack(g, sp, n, 0);
}

/* Sends the goroutine stack of a sample (go.h): the frame pointers are followed in the target's memory
 * through the part of the stack the sample copies. */
static __always_inline void goroutine_stack(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	u64 sp = regs->sp, bp = regs->bp;
	int i;
	for (i = 0; i < GO_FRAMES; i++) {
		if (!bp) {
			if (i)
				switched_goroutine();
			return;
		}
		if (bp & 7)
			return;
		if (bp < sp || bp + 16 > sp + stack_bytes)
			break;
		if (bpf_probe_read_user(&bp, sizeof(bp), (void *)bp))
			return;
	}
	if (i == GO_FRAMES)
		return;
	struct ws_goroutine *g = scratch_stack();
	if (!g)
		return;
	/* From GO_BELOW below the frame pointer, or from it where that page cannot be read. */
	u64 from = bp - GO_BELOW;
	u32 n = copy_stack(g, from, GO_COPY, GO_COPY / PAGE + 2);
	if (n <= GO_BELOW) {
		from = bp;
		n = copy_stack(g, from, GO_COPY, GO_COPY / PAGE + 2);
	}
	if (!n)
		return;
	g->pc = 0;
	g->parked_bp = 0;
	send_stack(g, from, n, 0);
}

/* Sends the rest of a stack deeper than the sample's copy (stack_bytes from the stack pointer), up to
 * TAIL_MAX more: a Rust or C++ program's large frames, a deep recursion. Its top is where the thread's
 * frames end: the process's initial stack pointer for its main thread (mm->start_stack, argc's address,
 * above _start's frame), the thread pointer for others (glibc and musl put the thread's control block at
 * the top of its stack's mapping, its static TLS right below, and its frames below that). A thread whose
 * stack is elsewhere (a coroutine's, a stack of its own, Go's) has no top above its stack pointer within
 * MAX_SPAN, or one the sample's copy already reaches: nothing is sent. */
static __always_inline void stack_tail(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	u64 sp = regs->sp;
	u64 top = t->pid == t->tgid ? t->mm->start_stack : t->thread.fsbase;
	u64 from = sp + stack_bytes;
	if (!sp || top <= from || top - sp > MAX_SPAN)
		return;
	struct ws_goroutine *g = scratch_stack();
	if (!g)
		return;
	u64 want = top - from;
	u32 n = copy_stack(g, from, want < TAIL_MAX ? want : TAIL_MAX, TAIL_MAX / PAGE + 2);
	if (!n)
		return;
	g->pc = 0;
	g->parked_bp = 0;
	send_stack(g, from, n, 1);
}

SEC("perf_event")
int keep(void *ctx)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!keep_all && !is_tracked(tgid))
		return 0;
	if (go_on && runs_go(tgid))
		goroutine_stack();
	else if (stack_bytes)
		stack_tail();
	if (!python_on)
		return 1;
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
