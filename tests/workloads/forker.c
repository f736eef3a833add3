/* Forks two children (no exec) that each do the same fixed CPU work in child_work as the parent does in
 * parent_work (about SECONDS of CPU each), then waits. With ALLOCS, each child first waits 1 s, then
 * makes ALLOCS mallocs of 64 bytes in child_alloc (freed at once). Usage: forker [SECONDS [ALLOCS]]
 * (default 1 s, no allocations). */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common.h"
__attribute__((noinline)) void child_work(long n) { for (long i = 0; i < n; i++) BURN_BODY(1); }
__attribute__((noinline)) void parent_work(long n) { for (long i = 0; i < n; i++) BURN_BODY(1); }
__attribute__((noinline)) void child_alloc(long n) {
    for (long i = 0; i < n; i++) {
        void *volatile p = malloc(64);
        free(p);
    }
}
int main(int argc, char **argv) {
    long units = units_for(argc > 1 ? atof(argv[1]) : 1.0);
    long allocs = argc > 2 ? atol(argv[2]) : 0;
    for (int i = 0; i < 2; i++) {
        if (fork() == 0) {
            if (allocs > 0) {
                sleep(1);
                child_alloc(allocs);
            }
            child_work(units);
            _exit(0);
        }
    }
    parent_work(units);
    while (wait(NULL) > 0) {}
    return 0;
}
