/* redundant-calls (seed 003): bytes arrive one at a time and the parser is called for every byte;
 * it validates the partial header and returns at once until a whole 256-byte frame is there, and only
 * then runs the boundary search. fixed: the caller checks the length first. */
#include <string.h>
#include "../common.h"

#define FRAME 256
static unsigned char buf[4096];
static int len;

__attribute__((noinline)) static int find_boundary(const unsigned char *b, int n) {
    uint64_t h = 0;
    for (int i = 0; i < n; i++) h = h * 31 + b[i];
    sink += h;
    return n;
}

__attribute__((noinline)) static int parse_frames(unsigned char *b, int *n) {
    /* Header sanity check on every call: what makes the redundant calls cost something. */
    unsigned sum = 0;
    for (int i = 0; i < 16 && i < *n; i++) sum += b[i] ^ (unsigned)i;
    sink += sum;
    if (*n < FRAME) return 0;
    int used = find_boundary(b, FRAME);
    memmove(b, b + used, *n - used);
    *n -= used;
    return 1;
}

int main(int argc, char **argv) {
    int fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    double until = now_s() + 2.0;
    for (long i = 0; now_s() < until;) {
        for (int k = 0; k < 4096; k++, i++) {
            buf[len++] = (unsigned char)(i * 7);
            if (!fixed || len >= FRAME) parse_frames(buf, &len);
        }
    }
    return 0;
}
