/* tiny-reads: a loader parses its input file reading one byte per read(2), as a hand-written lexer on a
 * raw fd does. fixed: the same lexer reads through a FILE* (getc: glibc fills a 4 KB buffer per read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common.h"

static int buffered;
static FILE *in;
static int fd;

__attribute__((noinline)) static int next_char(void) {
    if (buffered) return getc(in);
    unsigned char c;
    return read(fd, &c, 1) == 1 ? c : EOF;
}

/* Sums the numbers of a "key=value\n" file: the work per byte is small, as in a config or CSV loader. */
__attribute__((noinline)) static long load(void) {
    long total = 0, v = 0;
    int c, in_value = 0;
    while ((c = next_char()) != EOF) {
        if (c == '=') in_value = 1;
        else if (c == '\n') { total += v; v = 0; in_value = 0; }
        else if (in_value && c >= '0' && c <= '9') v = v * 10 + (c - '0');
    }
    return total;
}

int main(int argc, char **argv) {
    buffered = argc > 1 && strcmp(argv[1], "fixed") == 0;
    char path[] = "/tmp/whyslow-loader-XXXXXX";
    fd = mkstemp(path);
    if (fd < 0) return 1;
    unlink(path);
    FILE *out = fdopen(dup(fd), "w");
    for (int i = 0; i < 20000; i++) fprintf(out, "setting.%d=%d\n", i, i * 7);
    fclose(out);
    in = fdopen(fd, "r");
    double until = now_s() + 2.0;
    while (now_s() < until) {
        if (buffered) rewind(in);
        else lseek(fd, 0, SEEK_SET);
        sink += load();
    }
    return 0;
}
