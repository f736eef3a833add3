/* Loads bin/libplug.so (beside this program) with dlopen after DELAY ms, waits 300 ms, then calls its
 * plug_parse() N times; plug_init() (in the program) runs once at the start. Known counts for functions
 * of a library that appears during a run. Usage: dlplug N DELAY_MS */
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void nap(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

__attribute__((noinline)) static unsigned long plug_init(const char *seed) {
    return strlen(seed) * 31;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long delay = argc > 2 ? atol(argv[2]) : 300;
    unsigned long sum = plug_init(argv[0]);
    char dir[PATH_MAX], path[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s", argv[0]);
    snprintf(path, sizeof path, "%s/libplug.so", dirname(dir));
    nap(delay);
    void *h = dlopen(path, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlplug: %s\n", dlerror());
        return 1;
    }
    unsigned long (*parse)(const char *) = (unsigned long (*)(const char *))dlsym(h, "plug_parse");
    nap(300);
    for (long i = 0; i < n; i++) sum += parse(i & 1 ? "GET /index.html" : "POST /api");
    printf("%lu\n", sum);
    return 0;
}
