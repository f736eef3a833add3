/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Copies of a thread's user stack, for user space to unwind (bpf/offcpu.bpf.c, bpf/calls.bpf.c,
 * bpf/syscalls.bpf.c).
 */
#ifndef WHYSLOW_USTACK_H
#define WHYSLOW_USTACK_H

#define STACK_MAX 16384 /* bytes of user stack copied at most (a power of two) */
#define PAGE 4096

/* A user-stack sample as the call and syscall programs send it; the ring record is the whole struct, the
 * stack's first ustack_bytes valid. One layout, one decoder in user space (crates/record/src/bpf/mod.rs). */
struct ws_sample {
	u64 time;
	u32 tgid;
	u32 tid;
	/* The call probe's index (0 for a syscall). */
	u32 probe;
	u32 ustack_bytes;
	u64 ip;
	u64 sp;
	u64 bp;
	u64 ax;
	u64 di;
	u64 si;
	u64 dx;
	/* Calls with keyed stacks: the key the stack is a sample of (return address and stack id), and the
	 * hits of that key it stands for. Syscalls: the syscall's number in `ret`. */
	u64 ret;
	u64 stack;
	u64 weight;
	u8 ustack[STACK_MAX + 2 * PAGE];
};

/* Reads `len` bytes of user memory at `src`: the calling thread's when `task` is NULL, otherwise `task`'s
 * (a sleepable program only; the branch is gone where `task` is a literal NULL). */
static __always_inline long read_user(void *dst, u32 len, u64 src, struct task_struct *task)
{
	if (task)
		return bpf_copy_from_user_task(dst, len, (void *)src, task, 0);
	return bpf_probe_read_user(dst, len, (void *)src);
}

/* Copies up to `max` (<= STACK_MAX) bytes of user stack from `from` to buf[at...], page by page, stopping
 * at the first page that cannot be read (the end of the stack mapping, or a page not resident): returns
 * the bytes copied. `off_mask` (a constant: 2^k - 1 at least at + STACK_MAX - 1) bounds where a page goes
 * for the verifier; buf holds off_mask + 2 * PAGE bytes. The stack is `task`'s (see read_user). */
static __always_inline u32 copy_user_stack(u8 *buf, u32 off_mask, u32 at, u64 from, u32 max,
					   struct task_struct *task)
{
	u32 n = 0;
	for (int i = 0; i < STACK_MAX / PAGE + 1; i++) {
		if (n >= max || n >= STACK_MAX)
			break;
		u32 len = PAGE - ((from + n) & (PAGE - 1));
		if (len > max - n)
			len = max - n;
		/* The masks change nothing (off <= off_mask, len <= PAGE) but give the verifier its bounds; the
		 * barriers keep the compiler from dropping them as redundant. */
		u32 off = at + n;
		barrier_var(off);
		barrier_var(len);
		off &= off_mask;
		len &= 2 * PAGE - 1;
		if (read_user(&buf[off], len, from + n, task))
			break;
		n += len;
	}
	return n;
}

#endif
