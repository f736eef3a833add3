/* lock-contention: four workers update shared statistics under one mutex, doing their per-item work
 * while holding it. fixed: each worker works on its own and merges once at the end. */
#include <pthread.h>
#include <string.h>
#include "../common.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t total;
static int fixed;
static double until;

__attribute__((noinline)) static uint64_t work_item(uint64_t x) {
    for (int i = 0; i < 20000; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}

__attribute__((noinline)) static void add_sample(uint64_t *mine, uint64_t seed) {
    if (fixed) { *mine += work_item(seed); return; }
    pthread_mutex_lock(&lock);
    total += work_item(seed + total);
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg) {
    uint64_t mine = 0, seed = (uint64_t)(uintptr_t)arg;
    while (now_s() < until)
        for (int i = 0; i < 10; i++) add_sample(&mine, seed++);
    pthread_mutex_lock(&lock);
    total += mine;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(int argc, char **argv) {
    fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    until = now_s() + 2.0;
    pthread_t t[4];
    for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    sink = total;
    return 0;
}
