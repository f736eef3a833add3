/* `deep DEPTH SECONDS [thread]`: recurses DEPTH frames deep (about 100 bytes a frame: 2000 frames are
 * deeper than any stack copy), then spins at the bottom for SECONDS; with `thread`, in a thread of its own
 * (glibc's default stack) while the main thread waits for it. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((noinline)) static unsigned long down(int n, double end) {
    volatile char pad[64];
    pad[0] = (char)n;
    if (n > 0) return down(n - 1, end) + (unsigned long)pad[0];
    unsigned long x = 0;
    while (now_s() < end) x++;
    return x;
}

static int depth = 2000;
static double secs = 1.0;
static unsigned long result;

static void *run(void *arg) {
    (void)arg;
    result = down(depth, now_s() + secs);
    return NULL;
}

int main(int argc, char **argv) {
    depth = argc > 1 ? atoi(argv[1]) : 2000;
    secs = argc > 2 ? atof(argv[2]) : 1.0;
    if (argc > 3) {
        pthread_t t;
        if (pthread_create(&t, NULL, run, NULL) || pthread_join(t, NULL)) return 1;
    } else {
        run(NULL);
    }
    printf("%lu\n", result);
    return 0;
}
