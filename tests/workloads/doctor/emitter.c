/* small-writes: every 48-byte record goes out with its own write(2).
 * fixed: records are gathered in a 64 KB buffer written when full. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include "../common.h"

static char buf[65536];
static size_t used;
static int buffered;

__attribute__((noinline)) static void emit(int fd, const char *rec, size_t n) {
    if (!buffered) { if (write(fd, rec, n) < 0) _exit(1); return; }
    if (used + n > sizeof buf) { if (write(fd, buf, used) < 0) _exit(1); used = 0; }
    memcpy(buf + used, rec, n);
    used += n;
}

int main(int argc, char **argv) {
    buffered = argc > 1 && strcmp(argv[1], "fixed") == 0;
    int fd = open("/dev/null", O_WRONLY);
    char rec[] = "metric.requests.total 0000 ok\n";
    double until = now_s() + 2.0;
    for (long i = 0; now_s() < until; i++) {
        for (int k = 0; k < 64; k++) {
            rec[22] = (char)('0' + k / 10 % 10);
            rec[23] = (char)('0' + k % 10);
            emit(fd, rec, sizeof rec - 1);
        }
    }
    if (used) { if (write(fd, buf, used) < 0) return 1; }
    return 0;
}
