/* One function with a hot loop and a cold loop on known lines, for source annotation (`report --source
 * hot_loops`): the hot line runs 9 divisions for every 1 of the cold line (the same chain of dependent
 * divisions, whose latency dwarfs the loop's own instructions), so it holds about 90% of the function's
 * samples. Usage: hotlines [SECONDS] (default 2): SECONDS of its own CPU time. The lines marked HOT and COLD
 * are found by the tests by their markers; keep one statement per line. */
#include <stdlib.h>
#include "common.h"
static volatile double dsink;
__attribute__((noinline, noclone)) static double hot_loops(long n, double x) {
    double a = x;
    for (long i = 0; i < 9 * n; i++) {
        a = a / 1.0000001 + 1e-9; /* HOT */
    }
    for (long i = 0; i < n; i++) {
        a = a / 1.0000003 + 2e-9; /* COLD */
    }
    return a;
}
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    double start = cpu_s();
    double x = 1.0;
    while (cpu_s() - start < secs) {
        x = hot_loops(100000, x);
    }
    dsink = x;
    return 0;
}
