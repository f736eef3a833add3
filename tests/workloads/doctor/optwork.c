/* unoptimized-build: the same numeric kernel built at -O0 (bad) and -O2 (fixed), both with -g. */
#include <stdint.h>
#include <stdio.h>
#include "../common.h"

__attribute__((noinline)) static double kernel(const double *a, int n) {
    double s = 0;
    for (int r = 0; r < 50; r++)
        for (int i = 0; i < n; i++) s += a[i] * a[(i * 7) % n] + (double)(i & 3);
    return s;
}

int main(void) {
    static double a[4096];
    for (int i = 0; i < 4096; i++) a[i] = i * 0.5;
    /* 2 s of its own CPU time: a busy machine gives it the same samples, only later (and an agent
     * matching it by its command line the time to find it). */
    double until = cpu_s() + 2.0, s = 0;
    while (cpu_s() < until) s += kernel(a, 4096);
    sink = (uint64_t)s;
    return 0;
}
