/* Four threads named worker-0..worker-3, each burning CPU in thread_work. Usage: threads [SECONDS] (2). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "common.h"
static double secs = 2.0;
__attribute__((noinline)) void thread_work(double end) { while (now_s() < end) BURN_BODY(1); }
static void *worker(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "worker-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    thread_work(now_s() + secs);
    return NULL;
}
int main(int argc, char **argv) {
    if (argc > 1) secs = atof(argv[1]);
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    return 0;
}
