/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Go programs' stacks. Go's runtime.systemstack (and the vDSO and cgo calls) run a function on the
 * thread's system stack and leave the frame pointer of the switching function's frame, which is on the
 * goroutine's stack, in the chain: a thread stopped there has its goroutine's frames elsewhere than the
 * stack copied from its stack pointer. The programs that copy user stacks follow the frame pointers of a
 * Go process's thread through that copy and, where they leave it, copy the goroutine's stack from there
 * on too. Go's other switches (mcall, morestack) and a thread's first frame clear the frame pointer: the
 * chain ends in the copy. Under mcall (a goroutine that parks, exits, yields or waits for a P) the
 * off-CPU program finds the goroutine switched away from and copies its stack. User space puts the Go
 * processes into `go_procs`.
 */
#ifndef WHYSLOW_GO_H
#define WHYSLOW_GO_H

#define GO_STACK_MAX 8192 /* bytes of a goroutine's stack copied at most from where the chain leads */
/* Bytes copied below it too: a switching function without a frame of its own (systemstack and mcall
 * before Go 1.21, morestack) leaves its caller's frame pointer in the chain, and the return address into
 * that caller lies below that frame (GO_SWITCH_BELOW in crates/unwind). */
#define GO_BELOW 1024
#define GO_FRAMES 64      /* frame pointers followed at most to where they leave the copied stack */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u8);
} go_procs SEC(".maps");

static __always_inline bool runs_go(u32 tgid)
{
	return bpf_map_lookup_elem(&go_procs, &tgid) != 0;
}

/* The registers goroutine `g` saved in g.sched (where mcall and morestack leave its context), from `w`, its
 * first 14 words (g.stack.lo, g.stack.hi, ..., g.sched from word 7): taken when it holds itself in
 * g.sched.g and its saved stack pointer and frame pointer lie in its stack. gobuf is sp, pc, g, ctxt, lr, bp
 * since Go 1.25; sp, pc, g, ctxt, ret, lr, bp before (lr is 0 on amd64, and a Go frame pointer never is). */
static __always_inline bool go_saved_regs(const u64 *w, u64 g, u64 *sp, u64 *pc, u64 *bp)
{
	u64 lo = w[0], hi = w[1];
	*sp = w[7];
	*pc = w[8];
	*bp = w[12] ? w[12] : w[13];
	return w[9] == g && *pc && *sp >= lo && *sp < hi && *bp >= *sp && *bp < hi;
}

/* At a thread's exit: a Go process leaves `go_procs` with its last thread (track.h's process_ended, so
 * include this file after track.h), not with its main thread, which may end while the others go on. */
static __always_inline void forget_go_ended(struct task_struct *p)
{
	u32 tgid = p->tgid;
	if (process_ended(p))
		bpf_map_delete_elem(&go_procs, &tgid);
}

#endif
