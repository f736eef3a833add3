/* whyslow_mem: the in-process half of `whyslow record --mem` for launched commands.
 *
 * Loaded with LD_PRELOAD, it interposes the allocator's entry points (malloc, calloc, realloc,
 * reallocarray, free, posix_memalign, aligned_alloc, memalign, valloc, pvalloc; C++ new and delete reach
 * them through libstdc++), forwards every call to the next definition (glibc's, or a jemalloc/tcmalloc
 * linked dynamically), and pairs allocations with frees here, in the target, so that nothing crosses a
 * process boundary per call: per stack it keeps allocations made, bytes and objects in use, their value
 * at the heap's peak, and the oldest live allocation. Every period it appends the stacks whose in-use
 * changed (the series); at exit it appends the totals and the process's mappings. whyslow reads the file
 * after the run (crates/record/src/mem.rs documents the format; the two must agree).
 *
 * Stacks are walked here by the binaries' own .eh_frame rules (found with _dl_find_object, interpreted
 * once per return address and cached), so no frame pointers are needed and no stack bytes are copied.
 *
 * It must never change what the target computes: every call returns what the real allocator returned,
 * errno included; its own memory comes from mmap, never from the target's heap; a stack walk reads only
 * inside the thread's stack; a pointer it never saw allocated is forwarded and counted, never guessed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ---- file format (little-endian; see crates/record/src/mem.rs) ---- */
#define MAGIC "WSMEM001"
enum { REC_STACK = 1, REC_SNAP = 2, REC_TOTALS = 3, REC_MAPS = 4, REC_END = 5, REC_ALLOCATOR = 6 };
/* The function a stack ends in: the order of HeapEntry::ALL in crates/convert/src/heap.rs. */
enum {
    ENTRY_MALLOC, ENTRY_CALLOC, ENTRY_REALLOC, ENTRY_POSIX_MEMALIGN, ENTRY_ALIGNED_ALLOC, ENTRY_MEMALIGN,
    ENTRY_VALLOC, ENTRY_PVALLOC, ENTRY_REALLOCARRAY
};
#define MAX_DEPTH 128

/* ---- the real allocator ---- */
static void *(*real_malloc)(size_t);
static void (*real_free)(void *);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void *(*real_pvalloc)(size_t);

/* dlsym may allocate before the real functions are known: those requests come from this arena. */
static char boot_arena[1 << 16] __attribute__((aligned(16)));
static size_t boot_used;
static int resolving;

static int in_boot_arena(const void *p) {
    return (const char *)p >= boot_arena && (const char *)p < boot_arena + sizeof boot_arena;
}

static void *boot_alloc(size_t n) {
    size_t at = (boot_used + 15) & ~(size_t)15;
    if (at + n > sizeof boot_arena) return NULL;
    boot_used = at + n;
    return boot_arena + at;
}

/* ---- state ---- */
typedef struct {
    uint64_t hash;
    uint32_t pcs_at; /* index into pcs */
    uint16_t depth;
    uint8_t dirty;
    uint8_t announced;
    uint8_t entry;
    uint8_t complete;
    uint64_t alloc_count, alloc_bytes;
    uint64_t inuse_count, inuse_bytes;
    uint64_t peak_count, peak_bytes; /* in use at the heap's peak, valid when last_mod > peak_seq */
    uint64_t last_mod;
} Stack;

typedef struct {
    uint64_t ptr;
    uint64_t size;
    uint32_t stack;
    uint32_t birth_ms;
} Live;

typedef struct {
    uint64_t pc;
    int32_t cfa_off;
    int16_t rbp_off;
    uint8_t cfa_rbp; /* CFA from rbp (else rsp) */
    uint8_t flags;
} Rule;
enum { RULE_OK = 1, RULE_RBP_SAVED = 2, RULE_LAST = 4 };

static volatile int lock_word;
static int ready, finished, disabled;
static int out_fd = -1;
static uint64_t sample_mean; /* 0: exact */
static uint64_t period_ns = 100 * 1000000ull;
static uint64_t start_ns, next_snap_ns;
static char out_dir[512];

static Stack *stacks;
static uint32_t n_stacks, cap_stacks;
static uint32_t *stack_index; /* open addressing over stacks, 0 = empty, else id + 1 */
static uint32_t index_mask;
static uint64_t *pcs;
static uint64_t n_pcs, cap_pcs;
static uint32_t *dirty;
static uint32_t n_dirty;

static Live *live;
static uint64_t live_mask, n_live;

#define RULES (1u << 16)
static Rule *rules;

static uint64_t seq, peak_seq, total_bytes, total_count, peak_bytes;
static uint64_t unknown_frees, stack_truncated, lost;

static __thread int in_hook __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_lo __attribute__((tls_model("initial-exec")));
static __thread uintptr_t stack_hi __attribute__((tls_model("initial-exec")));
static __thread int64_t until_sample __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

static void lock(void) {
    while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE))
        while (__atomic_load_n(&lock_word, __ATOMIC_RELAXED)) __builtin_ia32_pause();
}
static void unlock(void) { __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE); }

static void *map(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static uint64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- output ---- */
static char *buf;
#define BUF_SIZE (1u << 20)
static size_t buf_used;

static void flush(void) {
    size_t at = 0;
    while (at < buf_used && out_fd >= 0) {
        ssize_t w = write(out_fd, buf + at, buf_used - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { lost++; break; }
        at += (size_t)w;
    }
    buf_used = 0;
}

static void put(const void *p, size_t n) {
    const char *s = p;
    while (n) {
        if (buf_used == BUF_SIZE) flush();
        size_t k = BUF_SIZE - buf_used < n ? BUF_SIZE - buf_used : n;
        memcpy(buf + buf_used, s, k);
        buf_used += k, s += k, n -= k;
    }
}
static void put32(uint32_t v) { put(&v, 4); }
static void put64(uint64_t v) { put(&v, 8); }
static void record_head(uint32_t kind, uint32_t len) { put32(kind); put32(len); }

static void open_output(void) {
    char path[600];
    for (int n = 0; n < 1000; n++) {
        /* mem.PID.N: an exec keeps the pid, so each image of the process writes a file of its own. */
        int len = 0;
        const char *d = out_dir;
        while (*d && len < 500) path[len++] = *d++;
        const char *pre = "/mem.";
        while (*pre) path[len++] = *pre++;
        char digits[24];
        int k = 0;
        for (unsigned v = (unsigned)getpid(); v || !k; v /= 10) digits[k++] = (char)('0' + v % 10);
        while (k) path[len++] = digits[--k];
        path[len++] = '.';
        for (unsigned v = (unsigned)n; v || !k; v /= 10) digits[k++] = (char)('0' + v % 10);
        while (k) path[len++] = digits[--k];
        path[len] = 0;
        out_fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (out_fd >= 0 || errno != EEXIST) break;
    }
    if (out_fd < 0) { disabled = 1; return; }
    put(MAGIC, 8);
    put32(1);
    put32((uint32_t)getpid());
    put64(start_ns);
    put64(sample_mean);
    put64(period_ns);
    /* Which library serves the allocations (glibc, or a jemalloc or tcmalloc the program links). */
    Dl_info info;
    if (dladdr((void *)real_malloc, &info) && info.dli_fname) {
        record_head(REC_ALLOCATOR, (uint32_t)strlen(info.dli_fname));
        put(info.dli_fname, strlen(info.dli_fname));
    }
    flush();
}

/* ---- .eh_frame rules ---- */
static uint64_t uleb(const uint8_t **p) {
    uint64_t v = 0;
    int shift = 0;
    uint8_t b;
    do { b = *(*p)++; if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift; shift += 7; } while (b & 0x80);
    return v;
}
static int64_t sleb(const uint8_t **p) {
    int64_t v = 0;
    int shift = 0;
    uint8_t b;
    do { b = *(*p)++; if (shift < 64) v |= (int64_t)(b & 0x7f) << shift; shift += 7; } while (b & 0x80);
    if (shift < 64 && (b & 0x40)) v |= -((int64_t)1 << shift);
    return v;
}

/* A DW_EH_PE-encoded pointer; 0 with *ok = 0 for encodings this reader does not take. */
static uint64_t read_encoded(const uint8_t **p, uint8_t enc, uint64_t datarel, int *ok) {
    const uint8_t *at = *p;
    uint64_t v;
    if (enc == 0xff) return 0; /* omit */
    switch (enc & 0x0f) {
    case 0x00: v = *(const uint64_t *)at; *p += 8; break;
    case 0x01: v = uleb(p); break;
    case 0x02: v = *(const uint16_t *)at; *p += 2; break;
    case 0x03: v = *(const uint32_t *)at; *p += 4; break;
    case 0x04: v = *(const uint64_t *)at; *p += 8; break;
    case 0x09: v = (uint64_t)sleb(p); break;
    case 0x0a: v = (uint64_t)(int64_t) * (const int16_t *)at; *p += 2; break;
    case 0x0b: v = (uint64_t)(int64_t) * (const int32_t *)at; *p += 4; break;
    case 0x0c: v = *(const uint64_t *)at; *p += 8; break;
    default: *ok = 0; return 0;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += (uint64_t)at; break;
    case 0x30: v += datarel; break;
    default: *ok = 0; return 0;
    }
    if (enc & 0x80) v = *(const uint64_t *)v;
    return v;
}

typedef struct {
    uint8_t cfa_rbp;
    int64_t cfa_off;
    int64_t rbp_off; /* 0: not saved */
    int ra_undefined, unsupported;
} Row;

/* Runs CFA instructions until the row that covers `pc` (or the end); `init` is the CIE's row. */
static void run_cfa(const uint8_t *p, const uint8_t *end, uint64_t loc, uint64_t pc, uint64_t code_align,
                    int64_t data_align, Row *row, const Row *init) {
    Row saved[8];
    int n_saved = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint64_t reg, delta = 0;
        switch (op & 0xc0) {
        case 0x40: delta = (op & 0x3f) * code_align; goto advance;
        case 0x80:
            reg = op & 0x3f;
            { int64_t off = (int64_t)uleb(&p) * data_align; if (reg == 6) row->rbp_off = off; }
            continue;
        case 0xc0:
            if ((op & 0x3f) == 6) row->rbp_off = init ? init->rbp_off : 0;
            continue;
        }
        switch (op) {
        case 0x00: break;
        case 0x01: { int ok = 1; loc = read_encoded(&p, 0x00, 0, &ok); if (loc > pc) return; break; }
        case 0x02: delta = *p * code_align; p += 1; goto advance;
        case 0x03: delta = *(const uint16_t *)p * code_align; p += 2; goto advance;
        case 0x04: delta = *(const uint32_t *)p * code_align; p += 4; goto advance;
        case 0x05: reg = uleb(&p); { int64_t off = (int64_t)uleb(&p) * data_align; if (reg == 6) row->rbp_off = off; } break;
        case 0x06: reg = uleb(&p); if (reg == 6) row->rbp_off = init ? init->rbp_off : 0; break;
        case 0x07: reg = uleb(&p); if (reg == 16) row->ra_undefined = 1; if (reg == 6) row->rbp_off = 0; break;
        case 0x08: reg = uleb(&p); if (reg == 6) row->rbp_off = 0; break;
        case 0x09: reg = uleb(&p); uleb(&p); if (reg == 6 || reg == 16) row->unsupported = 1; break;
        case 0x0a: if (n_saved < 8) saved[n_saved++] = *row; else row->unsupported = 1; break;
        case 0x0b: if (n_saved) { Row r = saved[--n_saved]; r.ra_undefined = row->ra_undefined; *row = r; } break;
        case 0x0c: reg = uleb(&p); row->cfa_off = (int64_t)uleb(&p);
            if (reg == 7) row->cfa_rbp = 0; else if (reg == 6) row->cfa_rbp = 1; else row->unsupported = 1; break;
        case 0x0d: reg = uleb(&p);
            if (reg == 7) row->cfa_rbp = 0; else if (reg == 6) row->cfa_rbp = 1; else row->unsupported = 1; break;
        case 0x0e: row->cfa_off = (int64_t)uleb(&p); break;
        case 0x0f: { uint64_t n = uleb(&p); p += n; row->unsupported = 1; break; }
        case 0x10: { reg = uleb(&p); uint64_t n = uleb(&p); p += n; if (reg == 6 || reg == 16) row->unsupported = 1; break; }
        case 0x11: reg = uleb(&p); { int64_t off = sleb(&p) * data_align; if (reg == 6) row->rbp_off = off; } break;
        case 0x12: reg = uleb(&p); row->cfa_off = sleb(&p) * data_align;
            if (reg == 7) row->cfa_rbp = 0; else if (reg == 6) row->cfa_rbp = 1; else row->unsupported = 1; break;
        case 0x13: row->cfa_off = sleb(&p) * data_align; break;
        case 0x14: reg = uleb(&p); uleb(&p); if (reg == 6 || reg == 16) row->unsupported = 1; break;
        case 0x15: reg = uleb(&p); sleb(&p); if (reg == 6 || reg == 16) row->unsupported = 1; break;
        case 0x16: { reg = uleb(&p); uint64_t n = uleb(&p); p += n; if (reg == 6 || reg == 16) row->unsupported = 1; break; }
        case 0x2e: uleb(&p); break;
        case 0x2f: reg = uleb(&p); { int64_t off = -(int64_t)uleb(&p) * data_align; if (reg == 6) row->rbp_off = off; } break;
        default: row->unsupported = 1; return;
        }
        continue;
    advance:
        loc += delta;
        if (loc > pc) return;
    }
}

/* The unwind row at `pc` (a return address minus one) from the object's .eh_frame_hdr. */
static int find_row(uint64_t pc, Row *row) {
    struct dl_find_object dlfo;
    if (_dl_find_object((void *)pc, &dlfo) != 0 || !dlfo.dlfo_eh_frame) return 0;
    const uint8_t *hdr = dlfo.dlfo_eh_frame, *p = hdr + 4;
    if (hdr[0] != 1 || hdr[3] != 0x3b) return 0; /* table of datarel sdata4 pairs, as ld writes it */
    int ok = 1;
    read_encoded(&p, hdr[1], (uint64_t)hdr, &ok);
    uint64_t count = read_encoded(&p, hdr[2], (uint64_t)hdr, &ok);
    if (!ok || !count) return 0;
    const int32_t *table = (const int32_t *)p;
    uint64_t lo = 0, hi = count;
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if ((uint64_t)hdr + (int64_t)table[2 * mid] <= pc) lo = mid; else hi = mid;
    }
    if ((uint64_t)hdr + (int64_t)table[2 * lo] > pc) return 0;
    const uint8_t *fde = hdr + table[2 * lo + 1];
    uint64_t len = *(const uint32_t *)fde;
    const uint8_t *fp = fde + 4;
    if (len == 0xffffffff) { len = *(const uint64_t *)fp; fp += 8; }
    const uint8_t *fde_end = fp + len;
    const uint8_t *cie = fp - *(const uint32_t *)fp;
    fp += 4;
    /* The CIE. */
    uint64_t clen = *(const uint32_t *)cie;
    const uint8_t *cp = cie + 4;
    if (clen == 0xffffffff) { clen = *(const uint64_t *)cp; cp += 8; }
    const uint8_t *cie_end = cp + clen;
    cp += 4; /* id */
    uint8_t version = *cp++;
    const char *aug = (const char *)cp;
    cp += strlen(aug) + 1;
    if (aug[0] == 'e' && aug[1] == 'h') cp += 8;
    uint64_t code_align = uleb(&cp);
    int64_t data_align = sleb(&cp);
    if (version == 1) cp++; else uleb(&cp);
    uint8_t fde_enc = 0;
    if (aug[0] == 'z') {
        uint64_t alen = uleb(&cp);
        const uint8_t *aend = cp + alen;
        for (const char *a = aug + 1; *a; a++) {
            if (*a == 'R') fde_enc = *cp++;
            else if (*a == 'L') cp++;
            else if (*a == 'P') { uint8_t e = *cp++; read_encoded(&cp, e & 0x7f, 0, &ok); ok = 1; }
            else if (*a == 'S' || *a == 'B') continue;
            else break;
        }
        cp = aend;
    }
    /* The FDE's range. */
    uint64_t start = read_encoded(&fp, fde_enc, (uint64_t)hdr, &ok);
    uint64_t range = read_encoded(&fp, fde_enc & 0x0f, 0, &ok);
    if (!ok || pc < start || pc >= start + range) return 0;
    if (aug[0] == 'z') { uint64_t alen = uleb(&fp); fp += alen; }
    Row init = {0, 8, 0, 0, 0};
    run_cfa(cp, cie_end, start, UINT64_MAX, code_align, data_align, &init, NULL);
    *row = init;
    run_cfa(fp, fde_end, start, pc, code_align, data_align, row, &init);
    return !row->unsupported;
}

static const Rule *rule_for(uint64_t ra) {
    Rule *r = &rules[(ra * 0x9E3779B97F4A7C15ull) >> 48];
    if (LIKELY(r->pc == ra)) return r;
    Row row;
    Rule fresh = {ra, 0, 0, 0, 0};
    if (find_row(ra - 1, &row) && row.cfa_off >= 8 && row.cfa_off < (1 << 30)) {
        fresh.cfa_rbp = row.cfa_rbp;
        fresh.cfa_off = (int32_t)row.cfa_off;
        fresh.flags = RULE_OK | (row.ra_undefined ? RULE_LAST : 0);
        if (row.rbp_off && row.rbp_off > -(1 << 15) && row.rbp_off < 0) {
            fresh.rbp_off = (int16_t)row.rbp_off;
            fresh.flags |= RULE_RBP_SAVED;
        }
    }
    *r = fresh;
    return r;
}

static void thread_stack_bounds(void) {
    pthread_attr_t attr;
    void *addr;
    size_t size;
    stack_lo = 1, stack_hi = 0; /* known, and empty until read */
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
            stack_lo = (uintptr_t)addr;
            stack_hi = (uintptr_t)addr + size;
        }
        pthread_attr_destroy(&attr);
    }
}

/* Return addresses from the hook's caller outward; `fp` is the hook's frame. *complete: the walk ended
 * where the unwind rules say the stack ends (_start, clone). */
static int walk(uint64_t *out, uintptr_t fp, int *complete) {
    *complete = 0;
    if (UNLIKELY(!stack_lo)) thread_stack_bounds();
    uint64_t pc = ((uint64_t *)fp)[1];
    uintptr_t sp = fp + 16, bp = ((uintptr_t *)fp)[0];
    int n = 0;
    out[n++] = pc;
    if (sp < stack_lo || sp >= stack_hi) return n;
    while (n < MAX_DEPTH) {
        const Rule *r = rule_for(pc);
        if (r->flags & RULE_LAST) { *complete = 1; return n; }
        if (!(r->flags & RULE_OK)) return n;
        uintptr_t cfa = (r->cfa_rbp ? bp : sp) + (intptr_t)r->cfa_off;
        if (cfa <= sp || cfa > stack_hi || cfa - 8 < stack_lo) return n;
        if (r->flags & RULE_RBP_SAVED) {
            uintptr_t at = cfa + r->rbp_off;
            if (at < sp || at + 8 > stack_hi) return n;
            bp = *(uintptr_t *)at;
        }
        pc = *(uint64_t *)(cfa - 8);
        sp = cfa;
        if (pc < 4096) return n;
        out[n++] = pc;
    }
    stack_truncated++;
    return n;
}

/* ---- tables ---- */
static int grow_stacks(void) {
    uint32_t cap = cap_stacks ? cap_stacks * 2 : 4096;
    Stack *s = map(sizeof(Stack) * cap);
    uint32_t *d = map(sizeof(uint32_t) * cap);
    uint32_t *ix = map(sizeof(uint32_t) * cap * 2);
    if (!s || !d || !ix) return 0;
    if (stacks) {
        memcpy(s, stacks, sizeof(Stack) * n_stacks);
        memcpy(d, dirty, sizeof(uint32_t) * n_dirty);
        munmap(stacks, sizeof(Stack) * cap_stacks);
        munmap(dirty, sizeof(uint32_t) * cap_stacks);
        munmap(stack_index, sizeof(uint32_t) * cap_stacks * 2);
    }
    stacks = s, dirty = d, stack_index = ix, cap_stacks = cap, index_mask = cap * 2 - 1;
    for (uint32_t i = 0; i < n_stacks; i++) {
        uint32_t at = (uint32_t)stacks[i].hash & index_mask;
        while (stack_index[at]) at = (at + 1) & index_mask;
        stack_index[at] = i + 1;
    }
    return 1;
}

static int grow_pcs(uint64_t need) {
    uint64_t cap = cap_pcs ? cap_pcs : 1 << 16;
    while (cap < need) cap *= 2;
    if (cap == cap_pcs) return 1;
    uint64_t *p = map(sizeof(uint64_t) * cap);
    if (!p) return 0;
    if (pcs) { memcpy(p, pcs, sizeof(uint64_t) * n_pcs); munmap(pcs, sizeof(uint64_t) * cap_pcs); }
    pcs = p, cap_pcs = cap;
    return 1;
}

/* The id of the stack `st[0..n]`, added when new; UINT32_MAX when out of memory. */
static uint32_t stack_id(const uint64_t *st, int n, int entry, int complete) {
    uint64_t h = 0x243F6A8885A308D3ull ^ (uint64_t)n ^ ((uint64_t)entry << 56);
    for (int i = 0; i < n; i++) h = (h ^ st[i]) * 0x100000001B3ull, h ^= h >> 29;
    if (cap_stacks) {
        for (uint32_t at = (uint32_t)h & index_mask; stack_index[at]; at = (at + 1) & index_mask) {
            Stack *s = &stacks[stack_index[at] - 1];
            if (s->hash == h && s->depth == n && s->entry == entry && !memcmp(pcs + s->pcs_at, st, sizeof(uint64_t) * (size_t)n))
                return stack_index[at] - 1;
        }
    }
    if (n_stacks + 1 > cap_stacks / 4 * 3 && !grow_stacks()) return UINT32_MAX;
    if (n_pcs + (uint64_t)n > cap_pcs && !grow_pcs(n_pcs + (uint64_t)n)) return UINT32_MAX;
    if (n_pcs + (uint64_t)n >= UINT32_MAX) return UINT32_MAX;
    uint32_t id = n_stacks++;
    Stack *s = &stacks[id];
    memset(s, 0, sizeof *s);
    s->hash = h, s->depth = (uint16_t)n, s->pcs_at = (uint32_t)n_pcs;
    s->entry = (uint8_t)entry, s->complete = (uint8_t)complete;
    memcpy(pcs + n_pcs, st, sizeof(uint64_t) * (size_t)n);
    n_pcs += (uint64_t)n;
    uint32_t at = (uint32_t)h & index_mask;
    while (stack_index[at]) at = (at + 1) & index_mask;
    stack_index[at] = id + 1;
    return id;
}

static uint64_t ptr_hash(uint64_t p) { return (p >> 4) * 0x9E3779B97F4A7C15ull; }

static int grow_live(void) {
    uint64_t cap = live ? (live_mask + 1) * 2 : 1 << 16;
    Live *t = map(sizeof(Live) * cap);
    if (!t) return 0;
    if (live) {
        for (uint64_t i = 0; i <= live_mask; i++) {
            if (!live[i].ptr) continue;
            uint64_t at = ptr_hash(live[i].ptr) & (cap - 1);
            while (t[at].ptr) at = (at + 1) & (cap - 1);
            t[at] = live[i];
        }
        munmap(live, sizeof(Live) * (live_mask + 1));
    }
    live = t, live_mask = cap - 1;
    return 1;
}

/* Moves `s`'s counters by one allocation of `size` bytes (sign +1) or its free (-1). */
static void change(uint32_t id, uint64_t count, uint64_t bytes, int sign) {
    Stack *s = &stacks[id];
    uint64_t event = ++seq;
    if (s->last_mod <= peak_seq) s->peak_count = s->inuse_count, s->peak_bytes = s->inuse_bytes;
    s->last_mod = event;
    if (sign > 0) {
        s->inuse_count += count, s->inuse_bytes += bytes;
        s->alloc_count += count, s->alloc_bytes += bytes;
        total_count += count, total_bytes += bytes;
        if (total_bytes > peak_bytes) peak_bytes = total_bytes, peak_seq = event;
    } else {
        s->inuse_count -= count, s->inuse_bytes -= bytes;
        total_count -= count, total_bytes -= bytes;
    }
    if (!s->dirty) s->dirty = 1, dirty[n_dirty++] = id;
}

/* The weight of one allocation of `size` bytes: itself when exact, else the expected number of bytes
 * and allocations one sampled allocation of that size stands for (a Poisson draw of mean sample_mean). */
static void weight(uint64_t size, uint64_t *count, uint64_t *bytes) {
    if (!sample_mean) { *count = 1, *bytes = size; return; }
    double p = 1.0 - exp(-(double)size / (double)sample_mean);
    if (p <= 0) p = 1e-12;
    *count = (uint64_t)(1.0 / p + 0.5);
    *bytes = (uint64_t)((double)size / p + 0.5);
}

static uint64_t next_rand(void) {
    if (!rng) rng = (uint64_t)(uintptr_t)&rng ^ now_ns(CLOCK_MONOTONIC) ^ 0x9E3779B97F4A7C15ull;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static int64_t draw_interval(void) {
    double u = ((double)(next_rand() >> 11) + 1.0) / 9007199254740993.0;
    return (int64_t)(-log(u) * (double)sample_mean) + 1;
}

static void snapshot(uint64_t t);

/* A snapshot when the period has passed at `t` (the coarse clock). Called with the lock held. */
static void maybe_snapshot(uint64_t t) {
    if (UNLIKELY(t >= next_snap_ns)) {
        snapshot(now_ns(CLOCK_MONOTONIC));
        next_snap_ns = t + period_ns;
    }
}

static void on_alloc(void *ptr, size_t size, uintptr_t fp, int entry) {
    if (!ptr) return;
    if (sample_mean) {
        if (!until_sample) until_sample = draw_interval();
        until_sample -= (int64_t)size;
        if (until_sample > 0) return;
        until_sample = draw_interval();
    }
    uint64_t st[MAX_DEPTH];
    int complete;
    int n = walk(st, fp, &complete);
    lock();
    if (UNLIKELY(finished)) { unlock(); return; }
    uint32_t id = stack_id(st, n, entry, complete);
    if (id == UINT32_MAX || (n_live + 1 > (live_mask + 1) / 2 && !grow_live())) { lost++; unlock(); return; }
    uint64_t count, bytes;
    weight(size, &count, &bytes);
    uint64_t at = ptr_hash((uint64_t)ptr) & live_mask;
    while (live[at].ptr && live[at].ptr != (uint64_t)ptr) at = (at + 1) & live_mask;
    if (live[at].ptr) {
        /* The allocator handed out a pointer we hold as live: its free was not seen (a path we do not
         * interpose). Count it as freed where it was made, then as this allocation. */
        uint64_t c, b;
        weight(live[at].size, &c, &b);
        change(live[at].stack, c, b, -1);
        unknown_frees++;
    } else {
        n_live++;
    }
    uint64_t t = now_ns(CLOCK_MONOTONIC_COARSE);
    live[at] = (Live){(uint64_t)ptr, size, id, (uint32_t)((t > start_ns ? t - start_ns : 0) / 1000000)};
    change(id, count, bytes, +1);
    maybe_snapshot(t);
    unlock();
}

/* Forgets `ptr`; 1 when it was ours. Called with the lock held. */
static int forget(uint64_t ptr) {
    uint64_t at = ptr_hash(ptr) & live_mask;
    while (live[at].ptr != ptr) {
        if (!live[at].ptr) return 0;
        at = (at + 1) & live_mask;
    }
    uint64_t c, b;
    weight(live[at].size, &c, &b);
    change(live[at].stack, c, b, -1);
    n_live--;
    /* Backward-shift deletion keeps every probe chain whole without tombstones. */
    uint64_t hole = at;
    for (uint64_t j = (hole + 1) & live_mask; live[j].ptr; j = (j + 1) & live_mask) {
        uint64_t home = ptr_hash(live[j].ptr) & live_mask;
        if (((j - home) & live_mask) >= ((j - hole) & live_mask)) live[hole] = live[j], hole = j;
    }
    live[hole].ptr = 0;
    return 1;
}

static void on_free(void *ptr) {
    if (!ptr) return;
    lock();
    if (LIKELY(!finished && live)) {
        if (!forget((uint64_t)ptr) && !sample_mean) unknown_frees++;
        maybe_snapshot(now_ns(CLOCK_MONOTONIC_COARSE));
    }
    unlock();
}

/* ---- records ---- */
static void announce(uint32_t id) {
    Stack *s = &stacks[id];
    if (s->announced) return;
    s->announced = 1;
    record_head(REC_STACK, 8 + 8 * (uint32_t)s->depth);
    put32(id);
    uint16_t depth = s->depth;
    put(&depth, 2);
    put(&s->entry, 1);
    put(&s->complete, 1);
    put(pcs + s->pcs_at, 8 * (size_t)s->depth);
}

/* The stacks whose in-use changed since the last snapshot. Called with the lock held. */
static void snapshot(uint64_t t) {
    if (out_fd < 0) return;
    for (uint32_t i = 0; i < n_dirty; i++) announce(dirty[i]);
    record_head(REC_SNAP, 32 + 20 * n_dirty);
    put64(t);
    put64(total_bytes);
    put64(total_count);
    put32(n_dirty);
    put32(0);
    for (uint32_t i = 0; i < n_dirty; i++) {
        Stack *s = &stacks[dirty[i]];
        s->dirty = 0;
        put32(dirty[i]);
        put64(s->inuse_bytes);
        put64(s->inuse_count);
    }
    n_dirty = 0;
    flush(); /* a killed process keeps its series up to here */
}

static void oldest_births(uint32_t *oldest) {
    for (uint32_t i = 0; i < n_stacks; i++) oldest[i] = UINT32_MAX;
    for (uint64_t i = 0; live && i <= live_mask; i++)
        if (live[i].ptr && live[i].birth_ms < oldest[live[i].stack]) oldest[live[i].stack] = live[i].birth_ms;
}

static void write_maps(void) {
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    size_t cap = 1 << 20, len = 0;
    char *text = map(cap);
    while (text) {
        if (len == cap) {
            char *bigger = map(cap * 2);
            if (!bigger) break;
            memcpy(bigger, text, len);
            munmap(text, cap);
            text = bigger, cap *= 2;
        }
        ssize_t r = read(fd, text + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    if (!text) return;
    record_head(REC_MAPS, (uint32_t)len);
    put(text, len);
    munmap(text, cap);
}

/* Totals at the end: per stack what was allocated, what is still in use, its value at the peak and the
 * birth of its oldest live allocation; then the mappings the addresses are in. Lock held. */
static void write_totals(void) {
    uint64_t t = now_ns(CLOCK_MONOTONIC);
    snapshot(t);
    uint32_t *oldest = n_stacks ? map(sizeof(uint32_t) * n_stacks) : NULL;
    if (oldest) oldest_births(oldest);
    for (uint32_t i = 0; i < n_stacks; i++) announce(i);
    record_head(REC_TOTALS, 64 + 56 * n_stacks);
    put64(t);
    put64(peak_bytes);
    put64(unknown_frees);
    put64(lost);
    put64(stack_truncated);
    put64(n_live);
    put32(n_stacks);
    put32(0);
    put64(0);
    for (uint32_t i = 0; i < n_stacks; i++) {
        Stack *s = &stacks[i];
        int changed_after_peak = s->last_mod > peak_seq;
        put32(i);
        put64(s->alloc_count);
        put64(s->alloc_bytes);
        put64(s->inuse_count);
        put64(s->inuse_bytes);
        put64(changed_after_peak ? s->peak_count : s->inuse_count);
        put64(changed_after_peak ? s->peak_bytes : s->inuse_bytes);
        put32(oldest ? oldest[i] : UINT32_MAX);
    }
    if (oldest) munmap(oldest, sizeof(uint32_t) * n_stacks);
    write_maps();
    record_head(REC_END, 0);
    flush();
}

/* ---- setup ---- */
static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    uint64_t n = 0;
    for (; *v >= '0' && *v <= '9'; v++) n = n * 10 + (uint64_t)(*v - '0');
    return n;
}

static void at_fork_prepare(void) { lock(); }
static void at_fork_parent(void) { unlock(); }
static void at_fork_child(void) {
    /* The child inherits the tables (its copies of the parent's live allocations are live in it too);
     * it writes a file of its own from here. */
    lock_word = 0;
    if (out_fd >= 0) { close(out_fd); out_fd = -1; buf_used = 0; }
    for (uint32_t i = 0; i < n_stacks; i++) stacks[i].announced = 0, stacks[i].dirty = 0;
    n_dirty = 0;
    for (uint32_t i = 0; i < n_stacks; i++) {
        /* What this process allocates counts from here; what it holds includes its copy of the parent's. */
        Stack *s = &stacks[i];
        s->dirty = 1, dirty[n_dirty++] = i;
        s->alloc_count = s->alloc_bytes = 0;
        s->last_mod = 0;
    }
    peak_bytes = total_bytes, peak_seq = seq;
    open_output();
}

static void finish(void);

static __attribute__((noreturn)) void syscall_exit_group(int status) {
    for (;;) syscall(SYS_exit_group, status);
}

static void init(void) {
    static volatile int once;
    if (__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL)) {
        while (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE) && !disabled) __builtin_ia32_pause();
        return;
    }
    in_hook = 1;
    resolving = 1;
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
    real_valloc = dlsym(RTLD_NEXT, "valloc");
    real_pvalloc = dlsym(RTLD_NEXT, "pvalloc");
    resolving = 0;
    const char *dir = getenv("WHYSLOW_MEM_DIR");
    if (!real_malloc || !real_free || !real_calloc || !real_realloc || !dir || strlen(dir) >= sizeof out_dir) {
        disabled = 1;
        in_hook = 0;
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
        return;
    }
    strcpy(out_dir, dir);
    sample_mean = env_u64("WHYSLOW_MEM_SAMPLE", 0);
    period_ns = env_u64("WHYSLOW_MEM_PERIOD_MS", 100) * 1000000ull;
    if (!period_ns) period_ns = 100 * 1000000ull;
    start_ns = now_ns(CLOCK_MONOTONIC);
    next_snap_ns = start_ns + period_ns;
    buf = map(BUF_SIZE);
    rules = map(sizeof(Rule) * RULES);
    if (!buf || !rules || !grow_stacks() || !grow_pcs(1) || !grow_live()) {
        disabled = 1;
    } else {
        open_output();
        pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
    }
    in_hook = 0;
    __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void whyslow_mem_start(void) { init(); }

/* Runs after the program's own destructors and atexit handlers (this library was loaded first, so it is
 * finalized last): what is still in use now is what the program leaked. */
__attribute__((destructor)) static void whyslow_mem_end(void) {
    finish();
}

/* _exit skips the destructors: a child that ends with it (as forked children do) still writes its end. */
EXPORT void _exit(int status) {
    finish();
    syscall_exit_group(status);
}

EXPORT void _Exit(int status) {
    finish();
    syscall_exit_group(status);
}

static void finish(void) {
    if (!ready || disabled) return;
    /* _exit may come from a signal handler that interrupted this thread inside the lock: give up the
     * totals rather than wait forever. */
    int spins = 0;
    while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE))
        if (++spins > 1 << 22) return; else __builtin_ia32_pause();
    if (!finished) {
        finished = 1;
        write_totals();
        close(out_fd);
        out_fd = -1;
    }
    unlock();
}

/* ---- entry points ---- */
#define ENTER(fallback)                                                                              \
    if (UNLIKELY(!ready)) {                                                                          \
        if (resolving) fallback;                                                                     \
        init();                                                                                      \
    }                                                                                                \
    int tracked = !in_hook && !disabled;                                                             \
    if (tracked) in_hook = 1

#define LEAVE() if (tracked) in_hook = 0

EXPORT void *malloc(size_t size) {
    ENTER(return boot_alloc(size));
    void *p = real_malloc(size);
    if (tracked) { int e = errno; on_alloc(p, size, (uintptr_t)__builtin_frame_address(0), ENTRY_MALLOC); errno = e; }
    LEAVE();
    return p;
}

EXPORT void *calloc(size_t n, size_t m) {
    ENTER({ void *b = boot_alloc(n * m); if (b) memset(b, 0, n * m); return b; });
    void *p = real_calloc(n, m);
    if (tracked) { int e = errno; on_alloc(p, n * m, (uintptr_t)__builtin_frame_address(0), ENTRY_CALLOC); errno = e; }
    LEAVE();
    return p;
}

EXPORT void free(void *ptr) {
    if (UNLIKELY(in_boot_arena(ptr))) return;
    ENTER(return);
    if (tracked) { int e = errno; on_free(ptr); errno = e; }
    real_free(ptr);
    LEAVE();
}

/* Moved or resized: the old block is freed and a new one allocated by the caller of `fp`'s function; on
 * failure the old block stays. realloc(p, 0) frees p and returns NULL. */
static void on_realloc(void *old, void *p, size_t size, uintptr_t fp, int entry) {
    int e = errno;
    if (old && (p || size == 0)) on_free(old);
    on_alloc(p, size, fp, entry);
    errno = e;
}

EXPORT void *realloc(void *ptr, size_t size) {
    if (UNLIKELY(in_boot_arena(ptr))) {
        void *p = malloc(size);
        if (p) memcpy(p, ptr, size < (size_t)(boot_arena + sizeof boot_arena - (char *)ptr)
                                  ? size : (size_t)(boot_arena + sizeof boot_arena - (char *)ptr));
        return p;
    }
    ENTER(return boot_alloc(size));
    void *p = real_realloc(ptr, size);
    if (tracked) on_realloc(ptr, p, size, (uintptr_t)__builtin_frame_address(0), ENTRY_REALLOC);
    LEAVE();
    return p;
}

EXPORT void *reallocarray(void *ptr, size_t n, size_t m) {
    size_t size;
    if (__builtin_mul_overflow(n, m, &size)) { errno = ENOMEM; return NULL; }
    ENTER(return NULL);
    void *p = real_realloc(ptr, size);
    if (tracked) on_realloc(ptr, p, size, (uintptr_t)__builtin_frame_address(0), ENTRY_REALLOCARRAY);
    LEAVE();
    return p;
}

EXPORT int posix_memalign(void **out, size_t align, size_t size) {
    ENTER(return ENOMEM);
    int r = real_posix_memalign(out, align, size);
    if (tracked) { int e = errno; if (r == 0) on_alloc(*out, size, (uintptr_t)__builtin_frame_address(0), ENTRY_POSIX_MEMALIGN); errno = e; }
    LEAVE();
    return r;
}

#define ALIGNED(name, call, size_expr, entry)                                                              \
    EXPORT void *name {                                                                             \
        ENTER(return NULL);                                                                         \
        void *p = call;                                                                             \
        if (tracked) { int e = errno; on_alloc(p, size_expr, (uintptr_t)__builtin_frame_address(0), entry); errno = e; } \
        LEAVE();                                                                                    \
        return p;                                                                                   \
    }

ALIGNED(aligned_alloc(size_t align, size_t size), real_aligned_alloc(align, size), size, ENTRY_ALIGNED_ALLOC)
ALIGNED(memalign(size_t align, size_t size), real_memalign(align, size), size, ENTRY_MEMALIGN)
ALIGNED(valloc(size_t size), real_valloc(size), size, ENTRY_VALLOC)
ALIGNED(pvalloc(size_t size), real_pvalloc(size), size, ENTRY_PVALLOC)
