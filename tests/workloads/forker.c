/* Forks two children (no exec) that each do the same fixed CPU work in child_work as the parent does in
 * parent_work (about SECONDS of CPU each), then waits. Usage: forker [SECONDS] (default 1). */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"
__attribute__((noinline)) void child_work(long n) { for (long i = 0; i < n; i++) BURN_BODY(1); }
__attribute__((noinline)) void parent_work(long n) { for (long i = 0; i < n; i++) BURN_BODY(1); }
int main(int argc, char **argv) {
    long units = units_for(argc > 1 ? atof(argv[1]) : 1.0);
    for (int i = 0; i < 2; i++) {
        if (fork() == 0) {
            child_work(units);
            _exit(0);
        }
    }
    parent_work(units);
    while (wait(NULL) > 0) {}
    return 0;
}
