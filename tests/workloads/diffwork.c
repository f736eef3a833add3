/* Fixed work for before/after comparisons: ROUNDS rounds of main -> run_round -> work_a (2 units),
 * work_b (1 unit), work_c (1 unit). Built twice: bin/diffwork, and bin/diffwork_2x with -DDOUBLE_B, where
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
__attribute__((noinline)) static void run_round(void) {
    work_a(2);
    work_b(B_UNITS);
    work_c(1);
    __asm__ volatile("" ::: "memory"); /* keep the calls out of tail position */
}
int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 2500;
    for (long i = 0; i < rounds; i++) run_round();
    return (int)(sink & 0);
}
