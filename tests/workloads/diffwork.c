/* Fixed work for before/after comparisons: ROUNDS rounds of main -> run_round -> work_a (2 units),
 * work_b (1 unit), work_c (1 unit), in a shuffled order. Built twice: bin/diffwork, and bin/diffwork_2x with -DDOUBLE_B, where
 * work_b does 2 units (+25% CPU time in all, all of it in work_b). Usage: diffwork [ROUNDS] (default 2500;
 * a round is 4 units, ~0.16 ms here). */
#include <stdlib.h>
#include "common.h"
#ifdef DOUBLE_B
#define B_UNITS 2
#else
#define B_UNITS 1
#endif
__attribute__((noinline)) void work_a(int n) { BURN_BODY(n); }
__attribute__((noinline)) void work_b(int n) { BURN_BODY(n); }
__attribute__((noinline)) void work_c(int n) { BURN_BODY(n); }
/* The three calls run in a shuffled order each round: a fixed order would let the sampling clock lock
 * onto the round's period and skew the shares within a run. */
__attribute__((noinline)) static void run_round(void) {
    static unsigned rng = 2463534242u;
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    static const char orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    const char *order = orders[rng % 6];
    for (int i = 0; i < 3; i++) {
        if (order[i] == 0) work_a(2);
        else if (order[i] == 1) work_b(B_UNITS);
        else work_c(1);
    }
    __asm__ volatile("" ::: "memory"); /* keep the calls out of tail position */
}
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 2500;
    for (long i = 0; i < rounds; i++) run_round();
    return (int)(sink & 0);
}
