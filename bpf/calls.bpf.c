// SPDX-License-Identifier: GPL-2.0
/*
 * whyslow calls: exact call counts of chosen functions, in the kernel, per (process, probe). The probe
 * index comes from the attach cookie, so one program serves every function. With `latency`, a return
 * probe measures each call against a per-thread stack of entry times (return probes fire in LIFO order
 * per thread). With `sample_period`, every Nth counted call of a probe (per CPU) also sends its user
 * registers and a copy of its user stack to user space, to be unwound there: the callers of a function,
 * the call sites of an allocator. Map overflow and samples the ring had no room for are counted, never
 * silent.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "track.h"
#include "rings.h"
#include "ustack.h"

/* Counters in the `drops` per-CPU array. */
#define DROP_MAP 0  /* calls or sites no counter could hold */
#define DROP_RING 1 /* stack samples the ring buffer had no room for */
#define DROP_SLOTS 2
#include "drops.h"

#define DEPTH 32

/* Set before load. */
const volatile bool latency = false;
/* Also count calls and requested bytes per call site (the return address at entry), for allocators. */
const volatile bool sites = false;
/* Sample the stack of every Nth call of each probe (0: none), copying this many bytes at most. */
const volatile u64 sample_period = 0;
const volatile u32 stack_bytes = STACK_MAX;
/* With `sites`: also count per (call site, stack id) and send a stack sample per such key, at its 1st,
 * 2nd, 4th, ... hit and at least every `sample_period`th after (see count_stack), instead of every
 * `sample_period`th call. */
const volatile bool keyed_stacks = false;

/* Never used: puts struct ws_sample into the skeleton's generated types, whose layout the reader uses. */
struct ws_sample *ws_sample_layout __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by user space before load */
} samples SEC(".maps");

/* Per probe: counted calls on this CPU, to take every `sample_period`th. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, u64);
} since_sample SEC(".maps");

/* For `sites`, per probe: where the size argument is, the bytes pushed between the function's entry and
 * the probe's site (a probe moved past a push finds the return address that far up the stack), and its
 * role in nested allocations: glibc's aligned allocators end in a tail jump to malloc for small
 * alignments, so malloc runs with their caller's return address in the same stack slot. That malloc is
 * the wrapper's allocation, counted once. Which functions these are: crates/record/src/allocators.rs. */
enum ws_size_how {
	WS_SIZE_RDI,
	WS_SIZE_RSI,
	WS_SIZE_RDX,
	WS_SIZE_RDI_TIMES_RSI, /* calloc */
	WS_SIZE_GO_RAX, /* Go's register ABI */
};
enum ws_alloc_role {
	WS_ROLE_OTHER,
	WS_ROLE_WRAPPER, /* may tail-jump to malloc */
	WS_ROLE_MALLOC,
};
struct ws_size_arg {
	enum ws_size_how how;
	u32 stack_delta;
	enum ws_alloc_role role;
	u32 pad;
};

/* Per thread: the return-address slot and value of the last wrapper entered. */
struct ws_wrapped {
	u64 slot;
	u64 ret;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ws_wrapped);
} wrapped SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct ws_size_arg);
} size_arg SEC(".maps");

struct ws_site_key {
	u32 tgid;
	u32 probe;
	u64 ret;
};

struct ws_site_val {
	u64 calls;
	u64 bytes;
	u64 stacks; /* keyed_stacks: distinct stack ids seen at this site */
	u64 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries allocated as keys appear, not all at load */
	__uint(max_entries, 65536);
	__type(key, struct ws_site_key);
	__type(value, struct ws_site_val);
} site_counts SEC(".maps");

struct ws_call_key {
	u32 tgid;
	u32 probe;
};

struct ws_call_val {
	u64 calls;
	u64 total_ns;
	u64 max_ns;
	u64 timed; /* calls whose return was seen */
};

struct ws_entries {
	u32 depth;
	u32 pad;
	u64 ts[DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries allocated as keys appear, not all at load */
	__uint(max_entries, 65536);
	__type(key, struct ws_call_key);
	__type(value, struct ws_call_val);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ws_entries);
} entries SEC(".maps");

/* keyed_stacks: the stack id of a call is a hash of the return addresses the kernel finds by walking the
 * frame pointers from the probe (bpf_get_stack). It separates the stacks of code built with frame
 * pointers; in code without them it may merge stacks (a register that holds data, not a frame) or split
 * one (a pointer that changes every call): each key is sampled, and user space splits a key's exact
 * counts over the stacks its samples unwound to. A site with more than STACKS_PER_SITE ids counts the
 * rest under STACK_OTHER; a call whose key no map could hold is counted at its site only. */
#define STACK_FRAMES 64
#define STACKS_PER_SITE 256
#define STACK_NONE 0  /* no frame-pointer walk */
#define STACK_OTHER 1 /* past STACKS_PER_SITE */

struct ws_stack_key {
	u32 tgid;
	u32 probe;
	u64 ret;
	u64 stack;
};

struct ws_stack_val {
	u64 calls;
	u64 bytes;
	u64 next; /* the hit that is sampled next */
	u64 last; /* the hit last sampled */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* entries allocated as keys appear, not all at load */
	__uint(max_entries, 65536);
	__type(key, struct ws_stack_key);
	__type(value, struct ws_stack_val);
} stack_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64[STACK_FRAMES]);
} walk SEC(".maps");

static __always_inline u64 stack_id(struct pt_regs *ctx)
{
	u32 zero = 0;
	u64 *frames = bpf_map_lookup_elem(&walk, &zero);
	if (!frames)
		return STACK_NONE;
	long n = bpf_get_stack(ctx, frames, STACK_FRAMES * sizeof(u64), BPF_F_USER_STACK);
	if (n <= 0)
		return STACK_NONE;
	/* FNV-1a over the frames past the probe's own address. */
	u64 h = 0xcbf29ce484222325ULL;
	for (int i = 1; i < STACK_FRAMES; i++) {
		if (i * 8 >= n)
			break;
		h = (h ^ frames[i]) * 0x100000001b3ULL;
	}
	return h < 2 ? h + 2 : h;
}

/* Sends this call's registers and user stack as a sample of stack key `k`, standing for `weight` hits. */
static __always_inline bool send(struct pt_regs *ctx, u64 pid_tgid, u32 probe, u64 ret, u64 stack, u64 weight)
{
	struct ws_sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		drop(DROP_RING);
		return false;
	}
	s->time = bpf_ktime_get_ns();
	s->tgid = pid_tgid >> 32;
	s->tid = (u32)pid_tgid;
	s->probe = probe;
	s->ip = PT_REGS_IP(ctx);
	s->sp = PT_REGS_SP(ctx);
	s->bp = PT_REGS_FP(ctx);
	s->ax = PT_REGS_RC(ctx);
	s->di = PT_REGS_PARM1(ctx);
	s->si = PT_REGS_PARM2(ctx);
	s->dx = PT_REGS_PARM3(ctx);
	s->ret = ret;
	s->stack = stack;
	s->weight = weight;
	s->ustack_bytes = copy_user_stack(s->ustack, STACK_MAX - 1, 0, s->sp, stack_bytes, NULL);
	bpf_ringbuf_submit(s, DRAINED_ON_ITS_CLOCK);
	return true;
}

/* Counts the call under (site, stack id) and samples the key's stack when its turn comes. */
static __always_inline void count_stack(struct pt_regs *ctx, struct ws_site_key *site, struct ws_site_val *sv,
					u64 size)
{
	struct ws_stack_key k = { .tgid = site->tgid, .probe = site->probe, .ret = site->ret };
	k.stack = stack_id(ctx);
	struct ws_stack_val *v = bpf_map_lookup_elem(&stack_counts, &k);
	if (!v) {
		if (sv->stacks >= STACKS_PER_SITE) {
			k.stack = STACK_OTHER;
			v = bpf_map_lookup_elem(&stack_counts, &k);
		}
		if (!v) {
			struct ws_stack_val zero = { .next = 1 };
			if (bpf_map_update_elem(&stack_counts, &k, &zero, BPF_NOEXIST) == 0 && k.stack != STACK_OTHER)
				__sync_fetch_and_add(&sv->stacks, 1);
			v = bpf_map_lookup_elem(&stack_counts, &k);
			if (!v)
				return; /* counted at the site; user space shows the rest as lost stacks */
		}
	}
	__sync_fetch_and_add(&v->calls, 1);
	__sync_fetch_and_add(&v->bytes, size);
	/* Races between CPUs only move when a sample is taken, never what is counted. */
	u64 n = v->calls;
	if (n < v->next)
		return;
	if (send(ctx, bpf_get_current_pid_tgid(), k.probe, k.ret, k.stack, n - v->last)) {
		u64 gap = n < sample_period ? n : sample_period;
		v->last = n;
		v->next = n + gap;
	} else {
		v->next = n + 1; /* the ring was full: try again at the next hit */
	}
}

static __always_inline struct ws_call_val *slot(u32 tgid, u32 probe)
{
	struct ws_call_key k = { .tgid = tgid, .probe = probe };
	struct ws_call_val *v = bpf_map_lookup_elem(&counts, &k);
	if (v)
		return v;
	struct ws_call_val zero = {};
	bpf_map_update_elem(&counts, &k, &zero, BPF_NOEXIST);
	v = bpf_map_lookup_elem(&counts, &k);
	if (!v)
		drop(DROP_MAP);
	return v;
}

/* Counts the call at its call site; false for a malloc that a wrapper tail-jumped to (not counted). */
static __always_inline bool count_site(struct pt_regs *ctx, u32 tgid, u32 probe)
{
	struct ws_site_key k = { .tgid = tgid, .probe = probe };
	struct ws_size_arg *arg = bpf_map_lookup_elem(&size_arg, &probe);
	u64 delta = arg ? arg->stack_delta : 0;
	u64 slot = PT_REGS_SP(ctx) + delta;
	/* At a function's first instruction the return address is on top of the stack. */
	if (bpf_probe_read_user(&k.ret, sizeof(k.ret), (void *)slot))
		return true;
	if (arg && arg->role != WS_ROLE_OTHER) {
		struct ws_wrapped *w = bpf_task_storage_get(&wrapped, bpf_get_current_task_btf(), 0,
							    BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (w) {
			bool tail = arg->role == WS_ROLE_MALLOC && w->slot == slot && w->ret == k.ret;
			w->slot = arg->role == WS_ROLE_WRAPPER ? slot : 0;
			w->ret = k.ret;
			if (tail)
				return false;
		}
	}
	u64 size = 0;
	switch (arg ? arg->how : WS_SIZE_RDI) {
	case WS_SIZE_RDI: size = PT_REGS_PARM1(ctx); break;
	case WS_SIZE_RSI: size = PT_REGS_PARM2(ctx); break;
	case WS_SIZE_RDX: size = PT_REGS_PARM3(ctx); break;
	case WS_SIZE_RDI_TIMES_RSI: size = PT_REGS_PARM1(ctx) * PT_REGS_PARM2(ctx); break;
	case WS_SIZE_GO_RAX: size = PT_REGS_RC(ctx); break;
	}
	struct ws_site_val *v = bpf_map_lookup_elem(&site_counts, &k);
	if (!v) {
		struct ws_site_val zero = {};
		bpf_map_update_elem(&site_counts, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&site_counts, &k);
		if (!v) {
			drop(DROP_MAP);
			return true;
		}
	}
	__sync_fetch_and_add(&v->calls, 1);
	__sync_fetch_and_add(&v->bytes, size);
	if (keyed_stacks)
		count_stack(ctx, &k, v, size);
	return true;
}

/* Sends this call's registers and user stack every `sample_period`th call of `probe` on this CPU. */
static __always_inline void sample(struct pt_regs *ctx, u64 pid_tgid, u32 probe)
{
	u64 *n = bpf_map_lookup_elem(&since_sample, &probe);
	if (!n || ++*n < sample_period)
		return;
	*n = 0;
	send(ctx, pid_tgid, probe, 0, 0, sample_period);
}

SEC("uprobe.multi")
int on_entry(struct pt_regs *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u32 tgid = pid_tgid >> 32;
	/* Only tracked processes count: probes attached to every process (to follow children) fire in others
	 * too, and a launched command counts from its exec, not in whyslow's forked child before it. */
	if (!is_tracked(tgid))
		return 0;
	u64 cookie = bpf_get_attach_cookie(ctx);
	u32 probe = (u32)cookie;
	struct ws_call_val *v = slot(tgid, probe);
	/* A jump from another function into the instructions before the probe's site: the site's next hit
	 * is not a call of the function, so it is taken back here. */
	if (cookie >> 63) {
		if (v)
			__sync_fetch_and_add(&v->calls, -1);
		return 0;
	}
	if (sites && !count_site(ctx, tgid, probe))
		return 0;
	if (v)
		__sync_fetch_and_add(&v->calls, 1);
	if (sample_period && !keyed_stacks)
		sample(ctx, pid_tgid, probe);
	if (latency) {
		struct ws_entries *e = bpf_task_storage_get(&entries, bpf_get_current_task_btf(), 0,
							    BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (e) {
			u32 d = e->depth;
			if (d < DEPTH)
				e->ts[d] = bpf_ktime_get_ns();
			e->depth = d + 1;
		}
	}
	return 0;
}

SEC("uretprobe.multi")
int on_return(struct pt_regs *ctx)
{
	struct ws_entries *e = bpf_task_storage_get(&entries, bpf_get_current_task_btf(), 0, 0);
	if (!e || e->depth == 0)
		return 0; /* entered before we attached */
	u32 d = e->depth - 1;
	e->depth = d;
	if (d >= DEPTH)
		return 0;
	u64 dur = bpf_ktime_get_ns() - e->ts[d & (DEPTH - 1)];
	struct ws_call_val *v = slot(bpf_get_current_pid_tgid() >> 32, (u32)bpf_get_attach_cookie(ctx));
	if (!v)
		return 0;
	__sync_fetch_and_add(&v->total_ns, dur);
	__sync_fetch_and_add(&v->timed, 1);
	if (dur > v->max_ns)
		v->max_ns = dur;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
