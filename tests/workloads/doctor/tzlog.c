/* tz-stat-storm (seed 001): a job stamps every record with localtime()+strftime() while TZ is unset,
 * so glibc stats /etc/localtime on every call. fixed: TZ is set once at startup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../common.h"

__attribute__((noinline)) static size_t stamp(char *buf, size_t n) {
    time_t t = time(NULL);
    return strftime(buf, n, "%Y-%m-%d %H:%M:%S", localtime(&t));
}

__attribute__((noinline)) static void process_record(long i) {
    uint64_t x = (uint64_t)i + 1;
    for (int k = 0; k < 300; k++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    sink += x;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "fixed") == 0) setenv("TZ", ":/etc/localtime", 1);
    else unsetenv("TZ");
    char ts[64];
    double until = now_s() + 2.0;
    for (long i = 0; now_s() < until; i++) {
        process_record(i);
        sink += stamp(ts, sizeof ts);
    }
    return 0;
}
