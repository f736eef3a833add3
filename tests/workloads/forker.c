/* Forks two children (no exec) that burn CPU in child_work while the parent burns in parent_work for the
 * same time, then waits. Usage: forker [SECONDS] (default 1). */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"
__attribute__((noinline)) void child_work(double end) { while (now_s() < end) BURN_BODY(1); }
__attribute__((noinline)) void parent_work(double end) { while (now_s() < end) BURN_BODY(1); }
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1.0;
    for (int i = 0; i < 2; i++) {
        if (fork() == 0) {
            child_work(now_s() + secs);
            _exit(0);
        }
    }
    parent_work(now_s() + secs);
    while (wait(NULL) > 0) {}
    return 0;
}
