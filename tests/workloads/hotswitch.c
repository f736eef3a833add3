/* A service whose hot function changes mid-run: main -> run_round -> steady (3 units) and hot_old
 * (7 units) per round; after SIGUSR1 hot_new takes hot_old's place (built with -DV2 it does from the
 * start: the "deploy" of a slower build). SIGUSR2 changes only the load: from then on it sleeps 60% of
 * each 50 ms (the same shares of less CPU). Usage: hotswitch [SECONDS] (default 10). */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include "common.h"
static volatile sig_atomic_t switched, light;
__attribute__((noinline)) void steady(int n) { BURN_BODY(n); }
__attribute__((noinline)) void hot_old(int n) { BURN_BODY(n); }
__attribute__((noinline)) void hot_new(int n) { BURN_BODY(n); }
static void on_usr1(int sig) { (void)sig; switched = 1; }
static void on_usr2(int sig) { (void)sig; light = 1; }
/* The 10 units of a round in a shuffled order (see cpu_split.c). */
__attribute__((noinline)) static void run_round(void) {
    static unsigned rng = 2463534242u;
    char order[10] = {0, 0, 0, 0, 0, 0, 0, 1, 1, 1};
    for (int i = 9; i > 0; i--) {
        rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
        int j = (int)(rng % (unsigned)(i + 1));
        char t = order[i]; order[i] = order[j]; order[j] = t;
    }
    for (int i = 0; i < 10; i++) {
        if (order[i] == 1) steady(1);
        else if (switched) hot_new(1);
        else hot_old(1);
    }
    __asm__ volatile("" ::: "memory");
}
int main(int argc, char **argv) {
#ifdef V2
    switched = 1;
#endif
    signal(SIGUSR1, on_usr1);
    signal(SIGUSR2, on_usr2);
    double secs = argc > 1 ? atof(argv[1]) : 10.0, end = now_s() + secs;
    while (now_s() < end) {
        if (!light) { run_round(); continue; }
        double busy_until = now_s() + 0.02;
        while (now_s() < busy_until) run_round();
        struct timespec nap = {0, 30 * 1000 * 1000};
        nanosleep(&nap, 0);
    }
    return (int)(sink & 0);
}
