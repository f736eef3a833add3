/* Prints its PID, then burns CPU in spin_forever until SIGTERM/SIGINT (or SECONDS if given). Used for
 * attach (-p) and --comm tests. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "common.h"
static volatile sig_atomic_t stop;
static void on_term(int s) { (void)s; stop = 1; }
__attribute__((noinline)) void spin_forever(double end) { while (!stop && now_s() < end) BURN_BODY(1); }
int main(int argc, char **argv) {
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    printf("%d\n", getpid());
    fflush(stdout);
    spin_forever(argc > 1 ? now_s() + atof(argv[1]) : 1e300);
    return 0;
}
