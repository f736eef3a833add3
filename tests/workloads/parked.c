/* Threads parked in known places, for `whyslow stacks`: "futexer" waits on a futex in park_in_futex,
 * "reader" reads an empty pipe in park_in_read, "spinner" spins in spin_here, POOL threads "pool-N" wait
 * on a futex in park_in_futex under pool_worker (identical stacks), and the main thread sleeps in
 * park_in_sleep. The syscalls are made by inline `syscall` instructions, so each one's innermost user
 * function is the named one. Prints its pid and "ready" once every thread started.
 * Usage: parked [POOL] (default 3). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

static int futex_word; /* never changes: the waits last */
static int pipe_fds[2];
static volatile unsigned long spins;
static volatile int started;

static long raw_syscall(long nr, long a, long b, long c, long d) {
    long ret;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return ret;
}

__attribute__((noinline)) void park_in_futex(void) {
    for (;;) {
        long ret;
        register long r10 __asm__("r10") = 0;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"((long)SYS_futex), "D"(&futex_word), "S"((long)FUTEX_WAIT_PRIVATE), "d"(0L), "r"(r10)
                         : "rcx", "r11", "memory");
    }
}

__attribute__((noinline)) void park_in_read(void) {
    char c;
    for (;;) {
        long ret;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"((long)SYS_read), "D"((long)pipe_fds[0]), "S"(&c), "d"(1L)
                         : "rcx", "r11", "memory");
    }
}

__attribute__((noinline)) void spin_here(void) {
    for (;;) spins++;
}

__attribute__((noinline)) void park_in_sleep(void) {
    struct timespec ts = { 1000, 0 };
    for (;;) {
        long ret;
        register long r10 __asm__("r10") = 0;
        __asm__ volatile("syscall"
                         : "=a"(ret)
                         : "a"((long)SYS_clock_nanosleep), "D"((long)CLOCK_MONOTONIC), "S"(0L), "d"(&ts), "r"(r10)
                         : "rcx", "r11", "memory");
    }
}

__attribute__((noinline)) void pool_worker(void) {
    park_in_futex();
}

static void named(const char *name) {
    pthread_setname_np(pthread_self(), name);
    __sync_fetch_and_add(&started, 1);
}

static void *futexer(void *arg) { (void)arg; named("futexer"); park_in_futex(); return NULL; }
static void *reader(void *arg) { (void)arg; named("reader"); park_in_read(); return NULL; }
static void *spinner(void *arg) { (void)arg; named("spinner"); spin_here(); return NULL; }
static void *pool(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "pool-%ld", (long)arg);
    named(name);
    pool_worker();
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3;
    if (pipe(pipe_fds)) return 1;
    pthread_t t;
    pthread_create(&t, NULL, futexer, NULL);
    pthread_create(&t, NULL, reader, NULL);
    pthread_create(&t, NULL, spinner, NULL);
    for (long i = 0; i < n; i++) pthread_create(&t, NULL, pool, (void *)i);
    while (started < 3 + n) raw_syscall(SYS_sched_yield, 0, 0, 0, 0);
    printf("%d ready\n", getpid());
    fflush(stdout);
    park_in_sleep();
}
