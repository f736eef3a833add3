/* Calls the VEX-first-instruction functions of vexfuncs.S N times each and checks every result.
 * Usage: vexfuncs [N]   (N defaults to 1000)
 * Prints `vexfuncs: <checks> checks, <wrong> wrong`; exit 1 on any wrong result (the first failing
 * function goes to stderr). Without AVX2: prints `vexfuncs: no AVX2` and exits 77 (skip).
 * The C side needs only SSE2 (__m128i); it is not built with -mavx2 so that the no-AVX2 path cannot
 * run a VEX instruction itself. */
#include <emmintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vex_bcast78(__m128i v);
void *vex_store7f(void *dst, __m128i v);
int vex_sub_e8(__m128i a, __m128i b);

/* Called through volatile pointers: every call is a real call to the symbol. */
static int (*volatile p_bcast78)(__m128i) = vex_bcast78;
static void *(*volatile p_store7f)(void *, __m128i) = vex_store7f;
static int (*volatile p_sub_e8)(__m128i, __m128i) = vex_sub_e8;

static unsigned long checks, wrong;
static const char *first_fail;
static long first_fail_iter = -1;

static void check(int ok, const char *fn, long i) {
    checks++;
    if (!ok) {
        wrong++;
        if (!first_fail) { first_fail = fn; first_fail_iter = i; }
    }
}

static unsigned int rng = 4242u;
static unsigned int rnd(void) { rng = rng * 1103515245u + 12345u; return rng >> 8; }

static signed char sat_sub(signed char a, signed char b) {
    int d = (int)a - (int)b;
    return (signed char)(d > 127 ? 127 : d < -128 ? -128 : d);
}

__attribute__((noinline)) static void run(long n) {
    static unsigned char buf[64];
    for (long i = 0; i < n; i++) {
        /* vex_bcast78: low byte c, bytes 1..3 differ from c, so a skipped broadcast gives a wrong value. */
        {
            unsigned int c = (unsigned int)(i % 255) + 1;
            unsigned int lo = c | ((c ^ 0x11u) << 8) | ((c ^ 0x22u) << 16) | ((c ^ 0x44u) << 24);
            __m128i v = _mm_set_epi32((int)rnd(), (int)rnd(), (int)rnd(), (int)lo);
            unsigned int r = (unsigned int)p_bcast78(v);
            check(r == c * 0x01010101u, "vex_bcast78", i);
        }
        /* vex_store7f: 16 bytes at a varying offset; the bytes around untouched. */
        {
            unsigned char val[16], expect[64];
            size_t off = (size_t)(i % 40);
            for (int k = 0; k < 16; k++) val[k] = (unsigned char)rnd();
            for (int k = 0; k < 64; k++) buf[k] = expect[k] = (unsigned char)(0xa5 ^ k);
            for (int k = 0; k < 16; k++) expect[off + k] = val[k];
            __m128i v;
            memcpy(&v, val, 16);
            void *r = p_store7f(buf + off, v);
            check(r == buf + off && memcmp(buf, expect, 64) == 0, "vex_store7f", i);
        }
        /* vex_sub_e8: signed saturating byte subtract, including saturation; b's low bytes non-zero. */
        {
            signed char a[16], b[16];
            for (int k = 0; k < 16; k++) {
                a[k] = (signed char)rnd();
                b[k] = (signed char)(rnd() | 1);
            }
            if (i % 4 == 1) { a[0] = 127; b[0] = -100; }  /* saturates high */
            if (i % 4 == 2) { a[1] = -128; b[1] = 1; }    /* saturates low */
            __m128i va, vb;
            memcpy(&va, a, 16);
            memcpy(&vb, b, 16);
            unsigned int expect = 0;
            for (int k = 0; k < 4; k++) expect |= (unsigned int)(unsigned char)sat_sub(a[k], b[k]) << (8 * k);
            unsigned int r = (unsigned int)p_sub_e8(va, vb);
            check(r == expect, "vex_sub_e8", i);
        }
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) {
        puts("vexfuncs: no AVX2");
        return 77;
    }
    run(n);
    printf("vexfuncs: %lu checks, %lu wrong\n", checks, wrong);
    if (wrong) {
        fprintf(stderr, "vexfuncs: first wrong result from %s at iteration %ld\n", first_fail, first_fail_iter);
        return 1;
    }
    return 0;
}
