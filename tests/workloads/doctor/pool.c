/* cpu-oversubscription: a pool of 4 worker threads per CPU shares a fixed amount of CPU-bound work, so
 * most workers wait on a run queue at any time (each request's latency grows with the queue). fixed: one
 * worker per CPU does the same work. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include "../common.h"

static long units_each;

__attribute__((noinline)) static void handle_request(void) { BURN_BODY(1); }

static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < units_each; i++) handle_request();
    return NULL;
}

int main(int argc, char **argv) {
    int fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1 || cpus > 16) cpus = 2;
    long n = fixed ? cpus : 4 * cpus;
    /* About 2 s of work per CPU in all, split evenly. */
    units_each = units_for(2.0) * cpus / n;
    pthread_t t[64];
    for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
    return 0;
}
