/* Calls clock_gettime (served by the vDSO) in a loop: a profiler must name the vDSO function.
 * Usage: clock_loop [SECONDS] (default 1): SECONDS of its CPU time, however busy the machine (checked
 * every 1000 calls, by a syscall the vDSO does not serve). */
#include <stdlib.h>
#include "common.h"
int main(int argc, char **argv) {
    double end = cpu_s() + (argc > 1 ? atof(argv[1]) : 1.0);
    do {
        for (int i = 0; i < 1000; i++) sink += (uint64_t)now_s();
    } while (cpu_s() < end);
    return 0;
}
