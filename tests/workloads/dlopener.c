/* Loads libm with dlopen 300 ms after start and calls cos() N times, then lingers 1 s: functions of a
 * library that appears during a run. Usage: dlopener [N] */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void nap(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    nap(300);
    void *m = dlopen("libm.so.6", RTLD_NOW);
    if (!m) return 1;
    double (*cosine)(double) = (double (*)(double))dlsym(m, "cos");
    double s = 0;
    for (long i = 0; i < n; i++) s += cosine((double)i);
    nap(1000);
    printf("%f\n", s);
    return 0;
}
