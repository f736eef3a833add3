/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Python frames. CPython keeps its frames on the heap, not on the native stack: a sample's stack copy
 * shows only _PyEval_EvalFrameDefault and the C functions around it. For a process user space found to
 * run CPython 3.8-3.13 (`py_procs`: where its _PyRuntime is and the offsets of its version's structs,
 * crates/python/src/layout.rs), the program that keeps a sample walks the sampled thread's frame chain
 * when the sample is taken and sends each frame's code object and instruction, which user space names
 * and puts in place of the _PyEval_EvalFrameDefault frames that run them.
 *
 * The thread's PyThreadState is the one whose thread_id (its pthread_t: the thread's TLS base, fsbase,
 * with glibc) is the task's fsbase, found in the interpreters' thread lists and cached per thread.
 * Include after track.h.
 */
#ifndef WHYSLOW_PYTHON_H
#define WHYSLOW_PYTHON_H

#define PY_FRAMES 64	   /* Python frames read at most per sample */
#define PY_INTERPRETERS 8  /* (sub-)interpreters searched for the thread */
#define PY_THREADS 128	   /* thread states searched per interpreter */
#define PY_OWNED_BY_CSTACK 3

/* Where a process's CPython keeps what is read (crates/python Layout; user space fills it). */
struct ws_py_proc {
	u64 runtime; /* the address of _PyRuntime */
	u16 interpreters_head;
	u16 interp_next;
	u16 interp_threads_head;
	u16 tstate_next;
	u16 tstate_thread_id;
	u16 tstate_frame;
	u16 cframe_current_frame; /* + 1; 0: the frame hangs off the thread state directly */
	u16 frame_previous;
	u16 frame_code;
	u16 frame_instr;
	u16 frame_owner;
	u8 minor;
	u8 pad;
};

struct ws_py_frame {
	u64 code;  /* the code object */
	u64 instr; /* f_lasti (3.8-3.10), or a pointer to the instruction */
};

/* A sample's Python frames, innermost first; bit k of `entry` set: frame k is the first its
 * _PyEval_EvalFrameDefault call ran (every frame before 3.11). */
struct ws_pystack {
	u64 time;
	u32 tid;
	u32 frames;
	u64 entry;
	u32 truncated; /* more than PY_FRAMES frames */
	u32 pad;
	struct ws_py_frame frame[PY_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, u32);
	__type(value, struct ws_py_proc);
} py_procs SEC(".maps");

/* Each thread's PyThreadState, checked at every use (a thread state is freed with its thread). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);
	__type(value, u64);
} py_tstates SEC(".maps");

/* Where a sample's Python frames are put together (too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct ws_pystack);
} py_scratch SEC(".maps");

static __always_inline u64 py_read_ptr(u64 addr)
{
	u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

/* A walk of the interpreters' thread lists for the thread whose thread_id is `fs`, one thread state per
 * step (bpf_loop: the verifier checks one step, not every path of the whole walk). */
struct py_search {
	struct ws_py_proc py;
	u64 fs;
	u64 interp;
	u64 ts;
	u32 interps;
	u32 found;
};

static long py_search_step(u64 i, void *ctx)
{
	struct py_search *s = ctx;
	while (!s->ts) {
		/* This interpreter's list ended: the next one's. */
		if (!s->interp || ++s->interps > PY_INTERPRETERS)
			return 1;
		s->interp = py_read_ptr(s->interp + s->py.interp_next);
		if (!s->interp)
			return 1;
		s->ts = py_read_ptr(s->interp + s->py.interp_threads_head);
		break;
	}
	if (!s->ts)
		return 1;
	if (py_read_ptr(s->ts + s->py.tstate_thread_id) == s->fs) {
		s->found = 1;
		return 1;
	}
	s->ts = py_read_ptr(s->ts + s->py.tstate_next);
	return 0;
}

/* The thread state of the current thread (fsbase `fs`), or 0. */
static __always_inline u64 py_tstate(struct ws_py_proc *py, u32 tid, u64 fs)
{
	u64 *cached = bpf_map_lookup_elem(&py_tstates, &tid);
	if (cached && *cached && py_read_ptr(*cached + py->tstate_thread_id) == fs)
		return *cached;
	struct py_search s = { .py = *py, .fs = fs };
	s.interp = py_read_ptr(py->runtime + py->interpreters_head);
	if (!s.interp)
		return 0;
	s.ts = py_read_ptr(s.interp + py->interp_threads_head);
	bpf_loop(PY_INTERPRETERS * PY_THREADS, py_search_step, &s, 0);
	if (!s.found)
		return 0;
	bpf_map_update_elem(&py_tstates, &tid, &s.ts, BPF_ANY);
	return s.ts;
}

/* A walk of a frame chain, one frame per step. */
struct py_walk {
	struct ws_py_proc py;
	u64 frame;
	u64 entry;
	u32 n;
	u32 truncated;
};

static long py_walk_step(u64 i, void *ctx)
{
	struct py_walk *w = ctx;
	u64 frame = w->frame;
	if (!frame)
		return 1;
	u8 owner = 0;
	if (w->py.minor >= 11)
		bpf_probe_read_user(&owner, 1, (void *)(frame + w->py.frame_owner));
	w->frame = py_read_ptr(frame + w->py.frame_previous);
	if (w->py.minor >= 12 && owner == PY_OWNED_BY_CSTACK) {
		/* The shim under an eval call's first frame: the frame before it was that first one. */
		if (w->n > 0)
			w->entry |= 1ULL << ((w->n - 1) & 63);
		return 0;
	}
	if (w->n >= PY_FRAMES) {
		w->truncated = 1;
		return 1;
	}
	u32 zero = 0;
	struct ws_pystack *out = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!out)
		return 1;
	u32 n = w->n & (PY_FRAMES - 1);
	struct ws_py_frame *f = &out->frame[n];
	f->code = py_read_ptr(frame + w->py.frame_code);
	if (w->py.minor <= 10) {
		s32 lasti = 0;
		bpf_probe_read_user(&lasti, sizeof(lasti), (void *)(frame + w->py.frame_instr));
		f->instr = (u64)(u32)lasti;
		w->entry |= 1ULL << n;
	} else {
		f->instr = py_read_ptr(frame + w->py.frame_instr);
		if (w->py.minor == 11 && owner)
			w->entry |= 1ULL << n;
	}
	w->n++;
	return 0;
}

/* Fills `out` (py_scratch's entry) with the current thread's Python frames; false when it runs none (or
 * is no Python thread). `task` is the current task. */
static __always_inline bool py_frames(struct ws_py_proc *py, struct task_struct *task, struct ws_pystack *out)
{
	u32 tid = (u32)bpf_get_current_pid_tgid();
	u64 fs = task->thread.fsbase;
	if (!fs)
		return false;
	u64 ts = py_tstate(py, tid, fs);
	if (!ts)
		return false;
	u64 frame = py_read_ptr(ts + py->tstate_frame);
	if (frame && py->cframe_current_frame)
		frame = py_read_ptr(frame + py->cframe_current_frame - 1);
	struct py_walk w = { .py = *py, .frame = frame };
	bpf_loop(PY_FRAMES * 2, py_walk_step, &w, 0);
	out->frames = w.n;
	out->entry = w.entry;
	out->truncated = w.truncated;
	out->tid = tid;
	return w.n > 0;
}

/* At a fork a child runs its parent's interpreter; at an exec, whatever it execs (user space finds it). */
static __always_inline void py_forked(u32 parent, u32 child)
{
	struct ws_py_proc *py = bpf_map_lookup_elem(&py_procs, &parent);
	if (py)
		bpf_map_update_elem(&py_procs, &child, py, BPF_ANY);
}

#endif
