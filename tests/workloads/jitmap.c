/* A pretend JIT: machine code copied into an anonymous mapping at run time, which no ELF file describes,
 * named for profilers only by /tmp/perf-PID.map (and, with --dump, by a jitdump file).
 *
 * Usage: jitmap SECONDS [--dump DIR] [--garbage] [--no-map]
 * (--garbage: 3 lines naming no symbol ahead of the map's two; --no-map: only the jitdump names them)
 *
 * Two functions are "compiled" into one RX region: jit_hot_a at offset 0x000 and "jit_hot_b [jitted]"
 * (a name with a space, as JITs write) at offset 0x100. main calls them directly for SECONDS of process
 * CPU time in rounds of 4 equal units, 3 of a and 1 of b (shuffled in each round), so a has 75% and b
 * 25% of the CPU. Both keep a frame pointer (push rbp; mov rbp,rsp ... pop rbp) so a frame-pointer
 * unwinder walks out of them to main. The perf map is written before the first call; with --dump DIR the
 * file DIR/jit-PID.dump (header and one JIT_CODE_LOAD per function, code bytes included) is written too
 * and stays mapped PROT_READ|PROT_EXEC, so its path shows in /proc/PID/maps as perf's convention wants.
 * Prints nothing on success and deletes nothing: profilers read the files after the exit. */
#define _GNU_SOURCE
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* a(seed, n): n xorshift64 steps (shifts 13, 7, 17) of seed; rdi = seed, rsi = n, returns rax. */
static const unsigned char code_a[] = {
    0x55,                   /* push rbp */
    0x48, 0x89, 0xe5,       /* mov rbp, rsp */
    0x48, 0x89, 0xf8,       /* mov rax, rdi */
    0x48, 0x89, 0xf1,       /* mov rcx, rsi */
    0x48, 0x85, 0xc9,       /* test rcx, rcx */
    0x74, 0x23,             /* je done (+0x23 -> 0x32) */
    0x48, 0x89, 0xc2,       /* loop: mov rdx, rax */
    0x48, 0xc1, 0xe2, 0x0d, /* shl rdx, 13 */
    0x48, 0x31, 0xd0,       /* xor rax, rdx */
    0x48, 0x89, 0xc2,       /* mov rdx, rax */
    0x48, 0xc1, 0xea, 0x07, /* shr rdx, 7 */
    0x48, 0x31, 0xd0,       /* xor rax, rdx */
    0x48, 0x89, 0xc2,       /* mov rdx, rax */
    0x48, 0xc1, 0xe2, 0x11, /* shl rdx, 17 */
    0x48, 0x31, 0xd0,       /* xor rax, rdx */
    0x48, 0xff, 0xc9,       /* dec rcx */
    0x75, 0xdd,             /* jne loop (-0x23 -> 0x0f) */
    0x5d,                   /* done: pop rbp */
    0xc3,                   /* ret */
};
/* b: the same loop with other shifts (right 12, left 25, right 27): the same instructions, so the same
 * cost per step, in different bytes. */
static const unsigned char code_b[] = {
    0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0xf8, 0x48, 0x89, 0xf1, 0x48, 0x85, 0xc9, 0x74, 0x23,
    0x48, 0x89, 0xc2,       /* loop: mov rdx, rax */
    0x48, 0xc1, 0xea, 0x0c, /* shr rdx, 12 */
    0x48, 0x31, 0xd0,       /* xor rax, rdx */
    0x48, 0x89, 0xc2,       /* mov rdx, rax */
    0x48, 0xc1, 0xe2, 0x19, /* shl rdx, 25 */
    0x48, 0x31, 0xd0,       /* xor rax, rdx */
    0x48, 0x89, 0xc2,       /* mov rdx, rax */
    0x48, 0xc1, 0xea, 0x1b, /* shr rdx, 27 */
    0x48, 0x31, 0xd0,       /* xor rax, rdx */
    0x48, 0xff, 0xc9, 0x75, 0xdd, 0x5d, 0xc3,
};
#define OFF_A 0x000
#define OFF_B 0x100
#define NAME_A "jit_hot_a"
#define NAME_B "jit_hot_b [jitted]"
/* Steps per unit: about 50 us here, so the clock is read every few hundred microseconds. */
#define UNIT_STEPS 20000

typedef uint64_t (*jit_fn)(uint64_t seed, uint64_t n);
static volatile uint64_t sink;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static uint64_t clock_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* garbage: also 3 lines that name no symbol (a profiler must skip and count them). */
static void write_perf_map(uintptr_t base, int garbage) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) die(path);
    if (garbage) fputs("not a line of a perf map\nzz 10 bad_start\n12345\n", f);
    fprintf(f, "%lx %zx %s\n", (unsigned long)(base + OFF_A), sizeof code_a, NAME_A);
    fprintf(f, "%lx %zx %s\n", (unsigned long)(base + OFF_B), sizeof code_b, NAME_B);
    if (fclose(f) != 0) die(path);
}

/* The jitdump layout (perf's tools/perf/Documentation/jitdump-specification.txt), host byte order. */
struct jd_header {
    uint32_t magic, version, total_size, elf_mach, pad1, pid;
    uint64_t timestamp, flags;
};
struct jd_record {
    uint32_t id, total_size;
    uint64_t timestamp;
};
struct jd_code_load {
    struct jd_record p;
    uint32_t pid, tid;
    uint64_t vma, code_addr, code_size, code_index;
};

static void put(FILE *f, const void *p, size_t n, const char *path) {
    if (fwrite(p, 1, n, f) != n) die(path);
}

static void write_load(FILE *f, uint64_t addr, const unsigned char *code, size_t size, const char *name,
                       uint64_t index, const char *path) {
    struct jd_code_load r = {
        .p = {.id = 0 /* JIT_CODE_LOAD */, .timestamp = clock_ns(CLOCK_MONOTONIC)},
        .pid = (uint32_t)getpid(), .tid = (uint32_t)syscall(SYS_gettid),
        .vma = addr, .code_addr = addr, .code_size = size, .code_index = index,
    };
    r.p.total_size = (uint32_t)(sizeof r + strlen(name) + 1 + size);
    put(f, &r, sizeof r, path);
    put(f, name, strlen(name) + 1, path);
    put(f, code, size, path);
}

static void write_jitdump(const char *dir, uintptr_t base) {
    char path[4096];
    snprintf(path, sizeof path, "%s/jit-%d.dump", dir, (int)getpid());
    FILE *f = fopen(path, "w+");
    if (!f) die(path);
    /* perf inject --jit finds the dump by this mapping's path in the recording; like perf's own JVMTI
     * agent, map one page of it executable (an exec mapping is what perf record logs by default). */
    void *marker = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC, MAP_PRIVATE, fileno(f), 0);
    if (marker == MAP_FAILED) die("mmap jitdump");
    struct jd_header h = {
        .magic = 0x4A695444, .version = 1, .total_size = sizeof h, .elf_mach = EM_X86_64,
        .pid = (uint32_t)getpid(), .timestamp = clock_ns(CLOCK_MONOTONIC), .flags = 0,
    };
    put(f, &h, sizeof h, path);
    write_load(f, base + OFF_A, code_a, sizeof code_a, NAME_A, 1, path);
    write_load(f, base + OFF_B, code_b, sizeof code_b, NAME_B, 2, path);
    /* The mapping stays until exit; closing the stream does not unmap it. */
    if (fclose(f) != 0) die(path);
}

int main(int argc, char **argv) {
    const char *dump_dir = NULL;
    int garbage = 0, map = 1, bad = argc < 2;
    for (int i = 2; i < argc && !bad; i++) {
        if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc) dump_dir = argv[++i];
        else if (strcmp(argv[i], "--garbage") == 0) garbage = 1;
        else if (strcmp(argv[i], "--no-map") == 0) map = 0;
        else bad = 1;
    }
    if (bad) {
        fprintf(stderr, "usage: jitmap SECONDS [--dump DIR] [--garbage] [--no-map]\n");
        return 2;
    }
    double secs = atof(argv[1]);

    /* Written while writable, then made executable before any call (W^X, as real JITs do). */
    size_t len = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) die("mmap");
    memset(region, 0xcc, len); /* int3 between the functions */
    memcpy(region + OFF_A, code_a, sizeof code_a);
    memcpy(region + OFF_B, code_b, sizeof code_b);
    if (mprotect(region, len, PROT_READ | PROT_EXEC) != 0) die("mprotect");
    jit_fn fa = (jit_fn)(void *)(region + OFF_A), fb = (jit_fn)(void *)(region + OFF_B);

    /* Named before the first call, so a profiler attached from the start can resolve every sample. */
    if (map) write_perf_map((uintptr_t)region, garbage);
    if (dump_dir) write_jitdump(dump_dir, (uintptr_t)region);

    /* 3:1 by step counts, not by time. The order within a round is shuffled: a fixed order could let the
     * sampling clock lock onto the round's period and over-count one function. */
    uint64_t end = clock_ns(CLOCK_PROCESS_CPUTIME_ID) + (uint64_t)(secs * 1e9), x = 88172645463325252u;
    unsigned rng = 2463534242u;
    while (clock_ns(CLOCK_PROCESS_CPUTIME_ID) < end) {
        int b_at = (int)((rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5) % 4u);
        for (int i = 0; i < 4; i++) x = (i == b_at ? fb : fa)(x, UNIT_STEPS);
        __asm__ volatile("" ::: "memory"); /* keep the calls in main, not in a tail position */
    }
    sink = x;
    return 0;
}
