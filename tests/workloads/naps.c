/* Only sleeps: ROUNDS naps of MS milliseconds in nap (nanosleep), no work between them, so the thread
 * is off CPU for ROUNDS x MS ms in nap and runs for microseconds in all.
 * Usage: naps [ROUNDS] [MS]   (default 20 x 50 ms: 1.0 s)
 *        naps ROUNDS USus     (naps of US microseconds, e.g. `naps 4000 100us`)
 * At the end it prints to stderr the time the thread really spent off CPU over the naps (blocked, and
 * waiting for a CPU once woken), from the kernel's own accounting: elapsed - run time
 * (/proc/thread-self/schedstat), in ns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec - (long long)run;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20;
    long ns = (argc > 2 ? atol(argv[2]) : 50) * (argc > 2 && strstr(argv[2], "us") ? 1000L : 1000000L);
    long long before = off_cpu();
    for (long i = 0; i < rounds; i++) nap(ns);
    fprintf(stderr, "offcpu_ns %lld\n", off_cpu() - before);
    return 0;
}
