/* hot-logging: a request loop that formats a debug log line (timestamp + fields) for every request.
 * fixed: the log level drops debug lines before formatting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../common.h"

static int log_level_debug = 1;
static FILE *logf_;

__attribute__((noinline)) static void log_request(int id, const char *path, int status, double ms) {
    if (!log_level_debug) return;
    char ts[64], line[512];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S%z", &tm);
    snprintf(line, sizeof line, "%s DEBUG request id=%d path=%s status=%d took=%.3fms user=%s agent=%s bytes=%ld\n",
             ts, id, path, status, ms, "alice", "curl/7.88.1", (long)id * 37 % 10000);
    fputs(line, logf_);
}

__attribute__((noinline)) static int handle_request(int id) {
    uint64_t x = id + 1;
    for (int i = 0; i < 1500; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    sink += x;
    return (int)(x % 5) ? 200 : 404;
}

int main(int argc, char **argv) {
    log_level_debug = !(argc > 1 && strcmp(argv[1], "fixed") == 0);
    setenv("TZ", ":/etc/localtime", 1);
    tzset();
    logf_ = fopen("/dev/null", "w");
    double until = now_s() + 2.0;
    for (int id = 0; now_s() < until; id++) {
        int status = handle_request(id);
        log_request(id, "/api/v1/items", status, 0.25);
    }
    return 0;
}
