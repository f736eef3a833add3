// SPDX-License-Identifier: GPL-2.0
/*
 * whyslow record -p PID --mem: memory in use of a running process, from uprobes on its allocator (no
 * restart, no ptrace stop). The allocation functions get an entry and a return probe at one site (a site
 * where the return address is still on top of the stack, see whyslow_symbols::placement), free an entry
 * probe. Allocations are sampled by bytes here (a per-thread countdown, the intervals drawn from a table
 * of exponential quantiles user space fills: mean `sample_bytes`, or every allocation when it is 0). Only
 * the sampled allocations cross to user space: at entry their registers and a copy of the user stack, at
 * return the address they got. The kernel keeps the set of sampled live addresses (`live`), so a free is
 * one hash lookup and only the frees of sampled addresses are sent. User space pairs them and keeps the
 * in-use per stack (crates/record/src/mem_attach.rs). Which functions are probed, and how each takes its
 * size and gives its address: crates/record/src/allocators.rs.
 *
 * Nesting: an allocation function entered while the thread is inside another (glibc's aligned
 * allocators tail-jump to malloc, realloc(NULL, n) calls it) is not counted again: per thread, the depth
 * of allocation calls and the stack pointer of the outermost. Return probes are attached before entry
 * probes, so an entry counted always has its return; a stale outermost (its return never seen) is
 * recognized by a later entry at a shallower or equal stack with no chained return address.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "track.h"
#include "rings.h"
#include "ustack.h"

#define DROP_RING 0 /* records the ring had no room for */
#define DROP_LIVE 1 /* sampled allocations the live set had no room for */
#define DROP_SLOTS 2
#include "drops.h"

/* Probe hits, for their cost: counted like the drops (each CPU its own row, user space sums them). */
#define HIT_ALLOC 0  /* entries of an allocation function */
#define HIT_FREE 1   /* entries of a free */
#define HIT_RETURN 2 /* returns of an allocation function */
u64 hits[DROP_CPUS][DROP_ROW];

static __always_inline void hit(u32 slot)
{
	u32 cpu = bpf_get_smp_processor_id() & (DROP_CPUS - 1);
	__sync_fetch_and_add(&hits[cpu][slot & (DROP_ROW - 1)], 1);
}

/* Set before load. */
const volatile u64 sample_bytes = 0;
const volatile u32 stack_bytes = STACK_MAX;

/* How a probed function allocates or frees (struct ws_mem_site.how). */
enum ws_mem_how {
	WS_MEM_FREE,		/* free(p) */
	WS_MEM_SIZE_RDI,	/* malloc(n), valloc(n), pvalloc(n): the address in rax */
	WS_MEM_SIZE_RSI,	/* aligned_alloc(a, n), memalign(a, n) */
	WS_MEM_SIZE_PRODUCT,	/* calloc(n, m) */
	WS_MEM_REALLOC,		/* realloc(p, n): frees p when it returns an address (or n is 0) */
	WS_MEM_REALLOCARRAY,	/* reallocarray(p, n, m) */
	WS_MEM_POSIX_MEMALIGN,	/* posix_memalign(&p, a, n): the address in *rdi when it returns 0 */
};

struct ws_mem_site {
	enum ws_mem_how how;
	u32 entry; /* HeapEntry of crates/convert/src/heap.rs, passed through */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 256);
	__type(key, u32);
	__type(value, struct ws_mem_site);
} sites SEC(".maps");

/* Sampling intervals: quantiles of the exponential distribution of mean sample_bytes, in bytes. */
#define INTERVALS 4096
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, INTERVALS);
	__type(key, u32);
	__type(value, u64);
} intervals SEC(".maps");

struct ws_live_key {
	u32 tgid;
	u32 pad;
	u64 addr;
};

/* The sampled allocations still live. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 1 << 20);
	__type(key, struct ws_live_key);
	__type(value, u64);
} live SEC(".maps");

/* Per thread: the sampling countdown and the allocation call in progress. */
struct ws_mem_thread {
	s64 countdown;
	u32 depth;
	u32 sampled;
	u64 sp;	     /* stack pointer at the outermost allocation's entry */
	u64 ret;     /* its return address */
	u64 size;
	u64 old;     /* realloc: the block it reallocates */
	u64 out;     /* posix_memalign: where the address goes */
	u32 how;
	u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct ws_mem_thread);
} threads SEC(".maps");

/* Records sent (struct ws_mem_event; an allocation's entry is a struct ws_mem_alloc). */
enum ws_mem_kind {
	WS_MEM_ALLOC = 1, /* a sampled allocation's entry: its stack */
	WS_MEM_DONE = 2,  /* its return: the address (0: it failed, or could not be kept) */
	WS_MEM_FREED = 3, /* a sampled address freed */
};

struct ws_mem_event {
	u32 kind;
	u32 tgid;
	u32 tid;
	u32 entry;
	u64 time;
	u64 addr;
	u64 size;
};

struct ws_mem_alloc {
	struct ws_mem_event head;
	u64 ip;
	u64 sp;
	u64 bp;
	u32 ustack_bytes;
	u32 pad;
	u8 ustack[STACK_MAX + 2 * PAGE];
};
/* Never used: puts the structs into the skeleton's generated types, whose layout the reader uses. */
struct ws_mem_alloc *ws_mem_alloc_layout __attribute__((unused));
struct ws_mem_event *ws_mem_event_layout __attribute__((unused));

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by user space before load */
} events SEC(".maps");

static __always_inline void send(u32 kind, u64 pid_tgid, u32 entry, u64 addr, u64 size)
{
	struct ws_mem_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		drop(DROP_RING);
		return;
	}
	e->kind = kind;
	e->tgid = pid_tgid >> 32;
	e->tid = (u32)pid_tgid;
	e->entry = entry;
	e->time = bpf_ktime_get_ns();
	e->addr = addr;
	e->size = size;
	bpf_ringbuf_submit(e, DRAINED_ON_ITS_CLOCK);
}

/* A free of `addr`: sent when it was a sampled live block. */
static __always_inline void freed(u64 pid_tgid, u64 addr)
{
	if (!addr)
		return;
	struct ws_live_key k = { .tgid = pid_tgid >> 32, .addr = addr };
	if (bpf_map_delete_elem(&live, &k) == 0)
		send(WS_MEM_FREED, pid_tgid, 0, addr, 0);
}

/* Whether an allocation of `size` bytes is drawn: every one when exact, else when the thread's countdown
 * of bytes runs out (then a new interval is drawn). */
static __always_inline bool draw(struct ws_mem_thread *t, u64 size)
{
	if (!sample_bytes)
		return true;
	if (t->countdown == 0) {
		u32 i = bpf_get_prandom_u32() % INTERVALS;
		u64 *v = bpf_map_lookup_elem(&intervals, &i);
		t->countdown = v ? *v : sample_bytes;
	}
	t->countdown -= (s64)size;
	if (t->countdown > 0)
		return false;
	u32 i = bpf_get_prandom_u32() % INTERVALS;
	u64 *v = bpf_map_lookup_elem(&intervals, &i);
	t->countdown = v ? *v : sample_bytes;
	return true;
}

static __always_inline bool send_alloc(struct pt_regs *ctx, u64 pid_tgid, u32 entry, u64 size)
{
	struct ws_mem_alloc *a = bpf_ringbuf_reserve(&events, sizeof(*a), 0);
	if (!a) {
		drop(DROP_RING);
		return false;
	}
	a->head.kind = WS_MEM_ALLOC;
	a->head.tgid = pid_tgid >> 32;
	a->head.tid = (u32)pid_tgid;
	a->head.entry = entry;
	a->head.time = bpf_ktime_get_ns();
	a->head.addr = 0;
	a->head.size = size;
	a->ip = PT_REGS_IP(ctx);
	a->sp = PT_REGS_SP(ctx);
	a->bp = PT_REGS_FP(ctx);
	a->pad = 0;
	a->ustack_bytes = copy_user_stack(a->ustack, STACK_MAX - 1, 0, a->sp, stack_bytes, NULL);
	bpf_ringbuf_submit(a, DRAINED_ON_ITS_CLOCK);
	return true;
}

SEC("uprobe.multi")
int on_entry(struct pt_regs *ctx)
{
	u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!is_tracked(pid_tgid >> 32))
		return 0;
	u32 probe = (u32)bpf_get_attach_cookie(ctx);
	struct ws_mem_site *site = bpf_map_lookup_elem(&sites, &probe);
	if (!site)
		return 0;
	if (site->how == WS_MEM_FREE) {
		hit(HIT_FREE);
		freed(pid_tgid, PT_REGS_PARM1(ctx));
		return 0;
	}
	hit(HIT_ALLOC);
	struct ws_mem_thread *t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!t)
		return 0;
	u64 sp = PT_REGS_SP(ctx);
	u64 ret = 0;
	bpf_probe_read_user(&ret, sizeof(ret), (void *)sp);
	/* Inside the outermost allocation call: deeper on the stack, or at its depth with its return address
	 * hijacked by its return probe (a tail jump). Otherwise the outermost's return was never seen. */
	if (t->depth > 0 && (sp < t->sp || (sp == t->sp && ret != t->ret))) {
		t->depth++;
		return 0;
	}
	u64 size = 0;
	switch (site->how) {
	case WS_MEM_SIZE_RDI: size = PT_REGS_PARM1(ctx); break;
	case WS_MEM_SIZE_RSI: case WS_MEM_REALLOC: size = PT_REGS_PARM2(ctx); break;
	case WS_MEM_SIZE_PRODUCT: size = PT_REGS_PARM1(ctx) * PT_REGS_PARM2(ctx); break;
	case WS_MEM_REALLOCARRAY: size = PT_REGS_PARM2(ctx) * PT_REGS_PARM3(ctx); break;
	case WS_MEM_POSIX_MEMALIGN: size = PT_REGS_PARM3(ctx); break;
	default: break;
	}
	t->depth = 1;
	t->sp = sp;
	t->ret = ret;
	t->size = size;
	t->how = site->how;
	t->old = (site->how == WS_MEM_REALLOC || site->how == WS_MEM_REALLOCARRAY) ? PT_REGS_PARM1(ctx) : 0;
	t->out = site->how == WS_MEM_POSIX_MEMALIGN ? PT_REGS_PARM1(ctx) : 0;
	t->sampled = draw(t, size) && send_alloc(ctx, pid_tgid, site->entry, size);
	return 0;
}

SEC("uretprobe.multi")
int on_return(struct pt_regs *ctx)
{
	if (!is_tracked(bpf_get_current_pid_tgid() >> 32))
		return 0;
	hit(HIT_RETURN);
	struct ws_mem_thread *t = bpf_task_storage_get(&threads, bpf_get_current_task_btf(), 0, 0);
	if (!t || t->depth == 0)
		return 0; /* entered before the entry probes were attached */
	if (--t->depth > 0)
		return 0;
	u64 pid_tgid = bpf_get_current_pid_tgid();
	u64 addr = PT_REGS_RC(ctx);
	if (t->how == WS_MEM_POSIX_MEMALIGN) {
		u64 got = 0;
		if (addr == 0 && t->out)
			bpf_probe_read_user(&got, sizeof(got), (void *)t->out);
		addr = got;
	}
	/* A realloc that moved (or freed) its block: the old one is gone, whether or not the new is sampled. */
	if (t->old && (addr || t->size == 0))
		freed(pid_tgid, t->old);
	if (!t->sampled)
		return 0;
	t->sampled = 0;
	if (addr) {
		struct ws_live_key k = { .tgid = pid_tgid >> 32, .addr = addr };
		u64 size = t->size;
		if (bpf_map_update_elem(&live, &k, &size, BPF_ANY) != 0) {
			drop(DROP_LIVE);
			addr = 0;
		}
	}
	send(WS_MEM_DONE, pid_tgid, 0, addr, t->size);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
