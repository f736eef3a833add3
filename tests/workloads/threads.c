/* Four threads named worker-0..worker-3, each doing the same fixed amount of CPU work in thread_work
 * (about SECONDS of CPU each, calibrated at start), so each holds a quarter of the CPU samples however the
 * scheduler interleaves them. Usage: threads [SECONDS] (default 2). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "common.h"
static long units;
__attribute__((noinline)) void thread_work(long n) {
    for (long i = 0; i < n; i++) BURN_BODY(1);
}
static void *worker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    thread_work(units);
    return NULL;
}
int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    units = units_for(secs);
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    return 0;
}
