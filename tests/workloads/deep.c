/* `deep DEPTH SECONDS`: recurses DEPTH frames deep (about 100 bytes a frame: 2000 frames are deeper than
 * any stack copy), then spins at the bottom for SECONDS. */
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

int main(int argc, char **argv) {
    int depth = argc > 1 ? atoi(argv[1]) : 2000;
    double secs = argc > 2 ? atof(argv[2]) : 1.0;
    printf("%lu\n", down(depth, now_s() + secs));
    return 0;
}
