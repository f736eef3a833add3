/* main -> run_round -> burn_a/burn_b/burn_c in a 60/30/10 split of CPU time (6:3:1 units of the same
 * loop, shuffled in each round). Usage: cpu_split [--wall] [SECONDS] (default 3): SECONDS of its own CPU
 * time, so a profiler gets as many samples of it on a busy machine as on an idle one; with --wall, of wall
 * time (to end at a known moment). The deadline is checked between rounds. */
#include <stdlib.h>
#include <string.h>
#include "common.h"
__attribute__((noinline)) void burn_a(int n) { BURN_BODY(n); }
__attribute__((noinline)) void burn_b(int n) { BURN_BODY(n); }
__attribute__((noinline)) void burn_c(int n) { BURN_BODY(n); }
/* The 10 units of a round run in a shuffled order: a fixed order would let the sampling clock lock onto
 * the round's period and over-count one function (runs spread 56-62% for burn_a that way). */
__attribute__((noinline)) static void run_round(void) {
    static unsigned rng = 2463534242u;
    char order[10] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 2};
    for (int i = 9; i > 0; i--) {
        rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
        int j = (int)(rng % (unsigned)(i + 1));
        char t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (int i = 0; i < 10; i++) {
        if (order[i] == 0) burn_a(1);
        else if (order[i] == 1) burn_b(1);
        else burn_c(1);
    }
    __asm__ volatile("" ::: "memory"); /* keep the calls out of tail position */
}
int main(int argc, char **argv) {
    int wall = argc > 1 && strcmp(argv[1], "--wall") == 0;
    double (*clock)(void) = wall ? now_s : cpu_s;
    double secs = argc > 1 + wall ? atof(argv[1 + wall]) : 3.0, end = clock() + secs;
    while (clock() < end) run_round();
    return (int)(sink & 0);
}
