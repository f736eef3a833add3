/* Context-switch heavy: two threads pass a byte back and forth over pipes N times (each round blocks each
 * thread once). Usage: pingpong [N]. With PINGPONG_CPU set, prints its CPU time per switch-out to stderr
 * (what a recorder costs the program itself, whatever else runs on the machine). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static long rounds;

static void *pong(void *arg) {
    char c;
    for (long i = 0; i < rounds; i++) {
        if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1) abort();
    }
    return arg;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 100000;
    if (pipe(ab) || pipe(ba)) return 1;
    pthread_t t;
    pthread_create(&t, NULL, pong, NULL);
    char c = 'x';
    for (long i = 0; i < rounds; i++) {
        if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) abort();
    }
    pthread_join(t, NULL);
    if (getenv("PINGPONG_CPU")) {
        struct timespec ts;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
        fprintf(stderr, "%.0f ns of CPU per switch-out\n", (ts.tv_sec * 1e9 + ts.tv_nsec) / (2.0 * rounds));
    }
    return 0;
}
