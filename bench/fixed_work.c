/* Fixed amount of CPU work (no deadline), so profiler overhead shows up as longer wall time.
 * Usage: fixed_work [ROUNDS] (default 500, about 5 s here). Same 60/30/10 shape as cpu_split. */
#include <stdint.h>
#include <stdlib.h>
static volatile uint64_t sink;
#define BURN(name) __attribute__((noinline)) void name(long n) { \
    uint64_t x = sink + n; for (long i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; } sink = x; }
BURN(work_a) BURN(work_b) BURN(work_c)
__attribute__((noinline)) static void round_(void) { work_a(6000000); work_b(3000000); work_c(1000000); }
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 500;
    for (long r = 0; r < rounds; r++) round_();
    return 0;
}
