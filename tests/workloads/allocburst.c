/* Allocation bursts with exactly known counts, made right after main starts and printing nothing (no
 * stdio buffer is allocated):
 *   allocburst aligned   1000 posix_memalign(16, 100), 1000 memalign(16, 128), 1000 malloc(64), all
 *                        called from main and freed: 3000 allocations, 292,000 bytes requested.
 *   allocburst burst N   N malloc(16) from main, each freed at once (1,000,000 take about 20 ms).
 *   allocburst callers   one call site of malloc(32), in make(), called 1000 times from from_a(), then
 *                        3000 times from from_b(): one site, two stacks. */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#define N 1000

/* Checks the result, so that malloc is called, not jumped to: make() is the call site. */
__attribute__((noinline)) static void *make(void) {
    void *p = malloc(32);
    if (!p) abort();
    return p;
}
__attribute__((noinline)) static void from_a(void **p, int n) { for (int i = 0; i < n; i++) p[i] = make(); }
/* Fills from the end: not identical to from_a, which the compiler would fold into one function. */
__attribute__((noinline)) static void from_b(void **p, int n) { for (int i = n - 1; i >= 0; i--) p[i] = make(); }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "callers") == 0) {
        static void *q[4 * N];
        from_a(q, N);
        from_b(q + N, 3 * N);
        for (int i = 0; i < 4 * N; i++) free(q[i]);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "burst") == 0) {
        long n = argc > 2 ? atol(argv[2]) : 1000000;
        for (long i = 0; i < n; i++) {
            void *volatile p = malloc(16);
            free(p);
        }
        return 0;
    }
    static void *p[3 * N];
    for (int i = 0; i < N; i++)
        if (posix_memalign(&p[i], 16, 100) != 0) return 1;
    for (int i = 0; i < N; i++) p[N + i] = memalign(16, 128);
    for (int i = 0; i < N; i++) p[2 * N + i] = malloc(64);
    for (int i = 0; i < 3 * N; i++) free(p[i]);
    return 0;
}
