// SPDX-License-Identifier: GPL-2.0
/*
 * whyslow syscalls: counts every system call of the tracked processes in the kernel, per (process,
 * thread, syscall): calls, errors, total and max time and a log2 latency histogram, plus errors by errno.
 * Selected syscalls are also sent one by one (arguments, paths, result, duration) through a bounded ring
 * buffer. Only the tracked processes pay for more than one hash lookup per syscall; nothing here may
 * block or change the traced program. Drops are counted, never silent.
 *
 * User space may attach the two syscall programs in slices (a budgeted run samples the syscall stream
 * that way once its exact window is spent): it bumps `slice` before each attach, and a syscall is
 * counted only when its entry and its exit were seen in the same slice.
 *
 * The entry program also sends the user registers and a copy of the user stack of every
 * `stack_period`th syscall of each tracked thread (user space sets it, and clears it to stop), to be
 * unwound there: which code issues the syscalls. A perf event on raw_syscalls:sys_enter did that before,
 * one per thread and CPU, and such events cost their thread at each of its context switches: a pipe
 * ping-pong pinned to one CPU took 4.6 us of CPU per switch-out with them (every 17th syscall's stack),
 * 3.6 us with this program, 3.3 us with the counters alone, 2.5 us unwatched.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* The successful exec of a launched command is its first syscall (as strace -c counts it): it entered
 * while the command was still armed, so its entry is recorded here, at the exec, and its exit counts. */
static __always_inline void execve_entered(struct task_struct *task);
#define WS_ON_ARMED_EXEC(task) execve_entered(task)
#include "track.h"
#include "rings.h"
#include "ustack.h"

#define HIST_BUCKETS 40 /* bucket i: durations in [2^i, 2^(i+1)) ns; the last one takes everything above */
#define MAX_SYSCALL 1024
#define PATH_LEN 256
#define NR_EXIT 60
#define NR_EXIT_GROUP 231

/* Counters in the `drops` per-CPU array. */
#define DROP_TRACE 0 /* trace events lost because the ring buffer was full */
#define DROP_STATS 1 /* calls not counted because a map was full */
#define DROP_STACK 2 /* stack samples the `stacks` ring had no room for */
#define DROP_SLOTS 3
#include "drops.h"

struct ws_key {
	u32 tgid;
	u32 tid;
	u32 nr;
	u32 err; /* 0 in `stats`; the errno in `errnos` */
};

struct ws_stat {
	u64 calls;
	u64 errors;
	u64 total_ns;
	u64 max_ns;
	u64 hist[HIST_BUCKETS];
	u64 bytes; /* sum of positive results of the data-moving syscalls (bytes read or written) */
};

struct ws_inflight {
	u64 ts; /* 0: no syscall entered while tracked */
	u32 nr;
	u16 traced;
	u16 slice; /* `slice` at the entry */
	u32 since_stack; /* syscalls since the thread's last stack sample */
	u32 pad;
	u64 args[6];
};

struct ws_trace_cfg {
	u8 on;
	s8 str_a; /* argument index holding a user string (path), or -1 */
	s8 str_b;
	u8 pad;
};

struct ws_event {
	u64 ts;
	u64 dur_ns;
	u32 tgid;
	u32 tid;
	u32 nr;
	u32 pad;
	s64 ret;
	u64 args[6];
	char str_a[PATH_LEN];
	char str_b[PATH_LEN];
};
/* Never used: puts struct ws_event into the skeleton's generated types, whose layout the reader uses. */
struct ws_event *ws_event_layout __attribute__((unused));

/* Never used: puts struct ws_sample (bpf/ustack.h) into the skeleton's generated types. */
struct ws_sample *ws_sample_layout __attribute__((unused));

/* Set before load: whether any syscall is traced one by one (skips a lookup per call when not). */
const volatile bool tracing = false;

/* Set before load: the bytes of user stack a stack sample copies at most (<= STACK_MAX). */
const volatile u32 stack_bytes = STACK_MAX;

/* The current slice of attachment (see the top of the file); user space bumps it before attaching. */
u16 slice = 0;
/* Send the stack of every Nth syscall of each tracked thread; 0: none (set and cleared by user space). */
u64 stack_period = 0;

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ws_inflight);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* allocated as keys appear: no 20 MB zeroed at load */
	__uint(max_entries, 65536);
	__type(key, struct ws_key);
	__type(value, struct ws_stat);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct ws_key);
	__type(value, u64);
} errnos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_SYSCALL);
	__type(key, u32);
	__type(value, struct ws_trace_cfg);
} trace_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* resized by user space before load when stacks are sampled */
} stacks SEC(".maps");

/* Syscalls seen so far, per CPU: what the counters cost is weighed against a budget. Slot 0: the tracked
 * processes' (counted); slot 1: every other process's, entered while the programs were attached. Those
 * pay too: an attached sys_enter program puts every syscall of the machine on the traced path, which
 * cost an untracked process ~0.2 us per syscall here (the bare tracepoints and empty programs ~0.13 us). */
#define SEEN_COUNTED 0
#define SEEN_OTHERS 1
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, u64);
} counted SEC(".maps");

static __always_inline u32 log2_bucket(u64 v)
{
	u32 b = 0;
#pragma unroll
	for (int s = 32; s > 0; s >>= 1) {
		if (v >= (1ULL << s)) {
			v >>= s;
			b += s;
		}
	}
	return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

/* read, write, pread64, pwrite64, readv, writev, sendfile, sendto, recvfrom, sendmsg, recvmsg, preadv,
 * pwritev, preadv2, pwritev2 (x86_64 numbers): their result is a byte count. */
static __always_inline int moves_bytes(u32 nr)
{
	switch (nr) {
	case 0: case 1: case 17: case 18: case 19: case 20: case 40: case 44: case 45: case 46: case 47:
	case 295: case 296: case 327: case 328:
		return 1;
	}
	return 0;
}

static __always_inline void count(u32 tgid, u32 tid, u32 nr, u64 dur, s64 ret)
{
	struct ws_key k = { .tgid = tgid, .tid = tid, .nr = nr };
	struct ws_stat *s = bpf_map_lookup_elem(&stats, &k);
	if (!s) {
		struct ws_stat zero = {};
		bpf_map_update_elem(&stats, &k, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&stats, &k);
		if (!s) {
			drop(DROP_STATS);
			return;
		}
	}
	u32 slot = SEEN_COUNTED;
	u64 *n = bpf_map_lookup_elem(&counted, &slot);
	if (n)
		*n += 1;
	/* One thread updates its own entry at a time (the key holds the tid): plain adds are exact. */
	s->calls += 1;
	s->total_ns += dur;
	if (dur > s->max_ns)
		s->max_ns = dur;
	s->hist[log2_bucket(dur)] += 1;
	if (ret > 0 && moves_bytes(nr))
		s->bytes += ret;
	if (ret < 0 && ret >= -4095) {
		s->errors += 1;
		k.err = (u32)-ret;
		u64 *e = bpf_map_lookup_elem(&errnos, &k);
		if (e) {
			*e += 1;
		} else {
			u64 one = 1;
			if (bpf_map_update_elem(&errnos, &k, &one, BPF_NOEXIST))
				drop(DROP_STATS);
		}
	}
}

static __always_inline void execve_entered(struct task_struct *task)
{
	struct ws_inflight *f = bpf_task_storage_get(&inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!f)
		return;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	f->nr = (u32)BPF_CORE_READ(regs, orig_ax); /* execve or execveat */
	f->traced = 0;
	f->slice = slice;
	f->ts = bpf_ktime_get_ns();
}

/* Sends the user registers and stack of the current thread, entering syscall `nr`. */
static __always_inline void send_stack(struct pt_regs *regs, u32 tgid, u32 tid, u32 nr)
{
	struct ws_sample *s = bpf_ringbuf_reserve(&stacks, sizeof(*s), 0);
	if (!s) {
		drop(DROP_STACK);
		return;
	}
	s->time = bpf_ktime_get_ns();
	s->tgid = tgid;
	s->tid = tid;
	s->probe = 0;
	s->ip = BPF_CORE_READ(regs, ip);
	s->sp = BPF_CORE_READ(regs, sp);
	s->bp = BPF_CORE_READ(regs, bp);
	s->ax = s->di = s->si = s->dx = 0;
	s->ret = nr;
	s->stack = s->weight = 0;
	s->ustack_bytes = copy_user_stack(s->ustack, STACK_MAX - 1, 0, s->sp, stack_bytes, NULL);
	bpf_ringbuf_submit(s, DRAINED_ON_ITS_CLOCK);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter, struct pt_regs *regs, long id)
{
	struct task_struct *task = bpf_get_current_task_btf();
	/* A task with storage is tracked: one cheap lookup on the hot path. Others are looked up by tgid
	 * once and get storage when tracked. */
	struct ws_inflight *f = bpf_task_storage_get(&inflight, task, 0, 0);
	if (!f) {
		if (!is_tracked(bpf_get_current_pid_tgid() >> 32)) {
			u32 slot = SEEN_OTHERS;
			u64 *n = bpf_map_lookup_elem(&counted, &slot);
			if (n)
				*n += 1;
			return 0;
		}
		f = bpf_task_storage_get(&inflight, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!f)
			return 0;
	}
	u32 nr = (u32)id;
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u64 period = stack_period;
	if (period && ++f->since_stack >= period) {
		f->since_stack = 0;
		send_stack(regs, pid_tgid >> 32, (u32)pid_tgid, nr);
	}
	if (nr == NR_EXIT || nr == NR_EXIT_GROUP) {
		/* They never return: count them here. */
		count(pid_tgid >> 32, (u32)pid_tgid, nr, 0, 0);
		return 0;
	}
	f->nr = nr;
	f->slice = slice;
	struct ws_trace_cfg *c = tracing ? bpf_map_lookup_elem(&trace_cfg, &nr) : NULL;
	f->traced = c && c->on;
	if (f->traced) {
		f->args[0] = BPF_CORE_READ(regs, di);
		f->args[1] = BPF_CORE_READ(regs, si);
		f->args[2] = BPF_CORE_READ(regs, dx);
		f->args[3] = BPF_CORE_READ(regs, r10);
		f->args[4] = BPF_CORE_READ(regs, r8);
		f->args[5] = BPF_CORE_READ(regs, r9);
	}
	f->ts = bpf_ktime_get_ns();
	return 0;
}

static __always_inline void read_str(char *dst, s8 idx, u64 *args)
{
	if (idx < 0 || idx > 5)
		return;
	const char *p = (const char *)args[idx & 7];
	if (bpf_probe_read_user_str(dst, PATH_LEN, p) < 0)
		dst[0] = 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit, struct pt_regs *regs, long ret)
{
	struct ws_inflight *f = bpf_task_storage_get(&inflight, bpf_get_current_task_btf(), 0, 0);
	if (!f || !f->ts)
		return 0;
	if (f->slice != slice) {
		/* Entered in an earlier slice, while the exit was not watched. */
		f->ts = 0;
		return 0;
	}
	u64 now = bpf_ktime_get_ns();
	u64 dur = now - f->ts;
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32, tid = (u32)pid_tgid, nr = f->nr;
	f->ts = 0;
	count(tgid, tid, nr, dur, ret);
	if (!f->traced)
		return 0;
	struct ws_trace_cfg *c = bpf_map_lookup_elem(&trace_cfg, &nr);
	struct ws_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		drop(DROP_TRACE);
		return 0;
	}
	e->ts = now;
	e->dur_ns = dur;
	e->tgid = tgid;
	e->tid = tid;
	e->nr = nr;
	e->pad = 0;
	e->ret = ret;
	__builtin_memcpy(e->args, f->args, sizeof(e->args));
	e->str_a[0] = 0;
	e->str_b[0] = 0;
	if (c) {
		read_str(e->str_a, c->str_a, e->args);
		read_str(e->str_b, c->str_b, e->args);
	}
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
