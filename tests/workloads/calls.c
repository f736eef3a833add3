/* Exactly known calls: N x (malloc, memcpy through the IFUNC, free) and N calls of a static function.
 * Usage: calls N [COPY_BYTES] [wait] — with `wait`: print the pid, wait for a line on stdin, then work. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void bump(unsigned long v) { sink += v; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    size_t bytes = argc > 2 ? (size_t)atol(argv[2]) : 100;
    static char src[4096];
    if (bytes > sizeof src) bytes = sizeof src;
    if (argc > 3) {
        char line[16];
        printf("%d\n", (int)getpid());
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
    }
    for (long i = 0; i < n; i++) {
        char *p = malloc(bytes + (size_t)(i & 63));
        memcpy(p, src, bytes);
        bump((unsigned char)p[i % bytes]);
        free(p);
    }
    char out[32];
    int len = snprintf(out, sizeof out, "%lu\n", sink);
    return write(1, out, len) == len ? 0 : 1;
}
