/* Known shares of wall time on the main thread: ROUNDS x 200 ms of 100 ms burning CPU, 60 ms blocked
 * reading a pipe (a writer thread feeds it after 60 ms), 40 ms in nanosleep: 50% / 30% / 20%.
 * Usage: offcpu [ROUNDS] */
#include "common.h"
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static int fds[2];

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

__attribute__((noinline)) static void burn_phase(double secs) {
    double end = now_s() + secs;
    while (now_s() < end) BURN_BODY(1);
}

__attribute__((noinline)) static void read_phase(int rfd) {
    char c;
    if (read(rfd, &c, 1) != 1) abort();
}

__attribute__((noinline)) static void sleep_phase(void) { nap_ms(40); }

static int feed[2];

static void *feeder(void *arg) {
    long rounds = (long)arg;
    for (long i = 0; i < rounds; i++) {
        char c;
        if (read(feed[0], &c, 1) != 1) abort(); /* main asks for a byte */
        nap_ms(60);
        if (write(fds[1], "x", 1) != 1) abort();
    }
    return NULL;
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 10;
    if (pipe(fds) || pipe(feed)) return 1;
    pthread_t t;
    pthread_create(&t, NULL, feeder, (void *)rounds);
    for (long i = 0; i < rounds; i++) {
        burn_phase(0.1);
        if (write(feed[1], "?", 1) != 1) abort();
        read_phase(fds[0]);
        sleep_phase();
    }
    pthread_join(t, NULL);
    return 0;
}
