/* Only sleeps: ROUNDS naps of MS milliseconds in nap (nanosleep), no work between them, so the thread
 * is off CPU for ROUNDS x MS ms in nap and runs for microseconds in all.
 * Usage: naps [ROUNDS] [MS]   (default 20 x 50 ms: 1.0 s) */
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) void nap(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 20;
    long ms = argc > 2 ? atol(argv[2]) : 50;
    for (long i = 0; i < rounds; i++) nap(ms);
    return 0;
}
