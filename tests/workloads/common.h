/* Shared by the C workloads: a deterministic CPU burner and a monotonic clock. */
#include <stdint.h>
#include <time.h>
static volatile uint64_t sink;
static inline double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
/* CPU time of the whole process (every thread) so far: workloads that must give the profiler the same
 * number of samples on a busy machine as on an idle one run for an amount of CPU time, not of wall time. */
static inline double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
/* xorshift steps: the same cost per unit in every caller. */
#define BURN_BODY(units) do { uint64_t x = sink + 1; \
    for (long i = 0; i < (long)(units) * 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; } \
    sink = x; } while (0)
/* Units of BURN_BODY(1) that take about `secs` of CPU here (measured over 50 ms), for workloads whose
 * threads or processes must do equal work however the scheduler interleaves them. */
static inline long units_for(double secs) {
    long n = 0;
    double start = now_s();
    while (now_s() - start < 0.05) { BURN_BODY(1); n++; }
    return (long)(secs * n / (now_s() - start));
}
