/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Python frames. CPython keeps its frames on the heap, not on the native stack: a sample's stack copy
 * shows only _PyEval_EvalFrameDefault and the C functions around it. For a process user space found to
 * run CPython 3.8-3.13 (`py_procs`: where its _PyRuntime is and the offsets of its version's structs,
 * crates/python/src/layout.rs), the program that keeps a sample walks the sampled thread's frame chain
 * when the sample is taken and sends each frame's code object and instruction, which user space names
 * and puts in place of the _PyEval_EvalFrameDefault frames that run them. User space reads the code
 * objects later, when another may have taken a freed one's address (code made by exec and dropped): each
 * frame also carries its code object's name as it was (the string's address and hash), which the one
 * read must have.
 *
 * The thread's PyThreadState is the one whose thread_id (its pthread_t: the thread's TLS base, fsbase,
 * with glibc) is the task's fsbase, found in the interpreters' thread lists and cached per thread.
 * Include after track.h.
 *
 * The frames read are the current thread's, through its own memory; a sleepable program that defines
 * WS_PY_OTHER_TASKS may read another thread's (bpf/stacks.bpf.c: a blocked thread, from a task
 * iterator), and one that defines PY_OUT(tid) (a `struct ws_pystack *` for thread tid, or NULL) puts
 * them elsewhere than the per-CPU scratch entry.
 */
#ifndef WHYSLOW_PYTHON_H
#define WHYSLOW_PYTHON_H

#define PY_FRAMES 64	   /* Python frames read at most per sample */
#define PY_SEARCH 1024	   /* thread states (and interpreters) visited at most to find a thread's */
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
	u16 code_name;	  /* the code object's name (its qualified name from 3.11) */
	u16 unicode_hash; /* a str's hash */
	u8 minor;
	u8 pad;
};

struct ws_py_frame {
	u64 code;  /* the code object */
	u64 instr; /* f_lasti (3.8-3.10), or a pointer to the instruction */
	u64 name;  /* the code object's name (a str) */
	u64 hash;  /* its hash (-1: not computed yet) */
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

/* Reads `len` bytes at `addr` of the process: through the current thread, or where the program defines
 * WS_PY_OTHER_TASKS, through thread `other` (always: one way of reading keeps the verifier's work small). */
static __always_inline long py_read(void *dst, u32 len, u64 addr, u32 other)
{
#ifdef WS_PY_OTHER_TASKS
	struct task_struct *t = bpf_task_from_pid(other);
	if (!t)
		return -1;
	long err = bpf_copy_from_user_task(dst, len, (void *)addr, t, 0);
	bpf_task_release(t);
	return err;
#else
	return bpf_probe_read_user(dst, len, (void *)addr);
#endif
}

static __always_inline u64 py_read_ptr(u64 addr, u32 other)
{
	u64 v = 0;
	if (py_read(&v, sizeof(v), addr, other))
		return 0;
	return v;
}

#ifndef PY_OUT
/* Where a sample's Python frames are put together: the per-CPU scratch entry. */
#define PY_OUT(tid) py_scratch_out()
static __always_inline struct ws_pystack *py_scratch_out(void)
{
	u32 zero = 0;
	return bpf_map_lookup_elem(&py_scratch, &zero);
}
#endif

/* A walk of the interpreters' thread lists for the thread whose thread_id is `fs`, one thread state per
 * step (bpf_loop: the verifier checks one step, not every path of the whole walk). Nothing in it counts:
 * the walk's bound is bpf_loop's alone. A count of the interpreters passed, kept here, made each value a
 * state of its own to the verifier, which took a third of a second at every load for it. */
struct py_search {
	struct ws_py_proc py;
	u64 fs;
	u64 interp;
	u64 ts;
	u32 found;
	u32 other; /* see py_read */
};

static long py_search_step(u64 i, void *ctx)
{
	struct py_search *s = ctx;
	while (!s->ts) {
		/* This interpreter's list ended: the next one's. */
		if (!s->interp)
			return 1;
		s->interp = py_read_ptr(s->interp + s->py.interp_next, s->other);
		if (!s->interp)
			return 1;
		s->ts = py_read_ptr(s->interp + s->py.interp_threads_head, s->other);
		break;
	}
	if (!s->ts)
		return 1;
	if (py_read_ptr(s->ts + s->py.tstate_thread_id, s->other) == s->fs) {
		s->found = 1;
		return 1;
	}
	s->ts = py_read_ptr(s->ts + s->py.tstate_next, s->other);
	return 0;
}

/* The thread state of thread `tid` (fsbase `fs`), or 0. */
static __always_inline u64 py_tstate(struct ws_py_proc *py, u32 tid, u64 fs, u32 other)
{
	u64 *cached = bpf_map_lookup_elem(&py_tstates, &tid);
	if (cached && *cached && py_read_ptr(*cached + py->tstate_thread_id, other) == fs)
		return *cached;
	struct py_search s = { .py = *py, .fs = fs, .other = other };
	s.interp = py_read_ptr(py->runtime + py->interpreters_head, other);
	if (!s.interp)
		return 0;
	s.ts = py_read_ptr(s.interp + py->interp_threads_head, other);
	bpf_loop(PY_SEARCH, py_search_step, &s, 0);
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
	u32 tid;
	u32 other; /* see py_read */
};

static long py_walk_step(u64 i, void *ctx)
{
	struct py_walk *w = ctx;
	u64 frame = w->frame;
	if (!frame)
		return 1;
	u8 owner = 0;
	if (w->py.minor >= 11)
		py_read(&owner, 1, frame + w->py.frame_owner, w->other);
	w->frame = py_read_ptr(frame + w->py.frame_previous, w->other);
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
	struct ws_pystack *out = PY_OUT(w->tid);
	if (!out)
		return 1;
	u32 n = w->n & (PY_FRAMES - 1);
	struct ws_py_frame *f = &out->frame[n];
	f->code = py_read_ptr(frame + w->py.frame_code, w->other);
	f->name = f->code ? py_read_ptr(f->code + w->py.code_name, w->other) : 0;
	f->hash = f->name ? py_read_ptr(f->name + w->py.unicode_hash, w->other) : 0;
	if (w->py.minor <= 10) {
		s32 lasti = 0;
		py_read(&lasti, sizeof(lasti), frame + w->py.frame_instr, w->other);
		f->instr = (u64)(u32)lasti;
		w->entry |= 1ULL << n;
	} else {
		f->instr = py_read_ptr(frame + w->py.frame_instr, w->other);
		if (w->py.minor == 11 && owner)
			w->entry |= 1ULL << n;
	}
	w->n++;
	return 0;
}

/* Fills `out` (PY_OUT(tid)) with the Python frames of thread `tid`, whose fsbase is `fs`; false when it
 * runs none (or is no Python thread). The thread is the current task, read through its own memory
 * (`other` 0), or (see py_read) a blocked thread `other`. */
static __always_inline bool py_frames_of(struct ws_py_proc *py, u32 tid, u64 fs, u32 other,
					 struct ws_pystack *out)
{
	if (!fs)
		return false;
	u64 ts = py_tstate(py, tid, fs, other);
	if (!ts)
		return false;
	u64 frame = py_read_ptr(ts + py->tstate_frame, other);
	if (frame && py->cframe_current_frame)
		frame = py_read_ptr(frame + py->cframe_current_frame - 1, other);
	struct py_walk w = { .py = *py, .frame = frame, .tid = tid, .other = other };
	bpf_loop(PY_FRAMES * 2, py_walk_step, &w, 0);
	out->frames = w.n;
	out->entry = w.entry;
	out->truncated = w.truncated;
	out->tid = tid;
	return w.n > 0;
}

/* py_frames_of for thread `task`. */
static __always_inline bool py_frames(struct ws_py_proc *py, struct task_struct *task, u32 other,
				      struct ws_pystack *out)
{
	return py_frames_of(py, task->pid, task->thread.fsbase, other, out);
}

/* At a fork a child runs its parent's interpreter; at an exec, whatever it execs (user space finds it). */
static __always_inline void py_forked(u32 parent, u32 child)
{
	struct ws_py_proc *py = bpf_map_lookup_elem(&py_procs, &parent);
	if (py)
		bpf_map_update_elem(&py_procs, &child, py, BPF_ANY);
}

#endif
