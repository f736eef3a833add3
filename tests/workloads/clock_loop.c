/* Calls clock_gettime (served by the vDSO) in a loop: a profiler must name the vDSO function.
 * Usage: clock_loop [SECONDS] (default 1). */
#include <stdlib.h>
#include "common.h"
int main(int argc, char **argv) {
    double end = now_s() + (argc > 1 ? atof(argv[1]) : 1.0);
    while (now_s() < end) {}
    return 0;
}
