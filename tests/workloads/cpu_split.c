/* main -> run_round -> burn_a/burn_b/burn_c in a 60/30/10 split of CPU time (6:3:1 units of the same
 * loop, interleaved). Usage: cpu_split [SECONDS] (default 3; the deadline is checked between rounds). */
#include <stdlib.h>
#include "common.h"
__attribute__((noinline)) void burn_a(int n) { BURN_BODY(n); }
__attribute__((noinline)) void burn_b(int n) { BURN_BODY(n); }
__attribute__((noinline)) void burn_c(int n) { BURN_BODY(n); }
__attribute__((noinline)) static void run_round(void) {
    for (int i = 0; i < 6; i++) burn_a(1);
    for (int i = 0; i < 3; i++) burn_b(1);
    burn_c(1);
    __asm__ volatile("" ::: "memory"); /* keep the calls out of tail position */
}
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3.0, end = now_s() + secs;
    while (now_s() < end) run_round();
    return (int)(sink & 0);
}
