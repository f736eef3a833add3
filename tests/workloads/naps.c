/* Only sleeps: ROUNDS naps of MS milliseconds in nap (nanosleep), no work between them, so the thread
 * is off CPU for ROUNDS x MS ms in nap and runs for microseconds in all.
 * Usage: naps [ROUNDS] [MS]   (default 20 x 50 ms: 1.0 s)
 *        naps ROUNDS USus     (naps of US microseconds, e.g. `naps 4000 100us`)
 * At the end it prints to stderr two bounds of the time the thread spent off CPU over the naps (blocked,
 * and waiting for a CPU once woken), in ns: `offcpu_ns`, elapsed - run time from the kernel's own
 * accounting (/proc/thread-self/schedstat), and `napwall_ns`, the wall time spent inside nap. The first is
 * a lower bound: in a VM the run time also holds the interrupt and steal time the scheduler's task clock
 * leaves out (~10 us per wake-up under load, measured here), time the thread was switched out for. The
 * second is an upper bound: it also holds the few microseconds nanosleep runs on the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
}

__attribute__((noinline)) void nap(long ns) {
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

/* CLOCK_MONOTONIC minus the run time of this thread, in ns. */
static long long off_cpu(void) {
    unsigned long long run = 0;
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f) {
        if (fscanf(f, "%llu", &run) != 1) run = 0;
        fclose(f);
    }
    return now_ns() - (long long)run;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20;
    long ns = (argc > 2 ? atol(argv[2]) : 50) * (argc > 2 && strstr(argv[2], "us") ? 1000L : 1000000L);
    long long before = off_cpu();
    long long wall = 0;
    for (long i = 0; i < rounds; i++) {
        long long start = now_ns();
        nap(ns);
        wall += now_ns() - start;
    }
    fprintf(stderr, "offcpu_ns %lld\nnapwall_ns %lld\n", off_cpu() - before, wall);
    return 0;
}
