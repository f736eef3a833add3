/* Calls libc's string/memory functions through real calls and checks every result against a
 * byte-loop reference. Usage: checkres [N]   (N defaults to 1000)
 *
 * main's loop calls each of memset, memcpy, mempcpy, memmove, memcmp, strlen, strchr, strrchr, strcmp,
 * strncmp, strcpy, strstr, malloc and free EXACTLY N times (one call each per iteration), and no
 * other libc function: no stdio, no atoi; the summary is formatted by hand and written with write(2).
 * A probe that corrupts a function's result (e.g. a uprobe on a mis-emulated VEX first instruction)
 * shows up as wrong results: stdout gets `checkres: <checks> checks, <wrong> wrong`, stderr names the
 * first failing function, and the exit status is 1.
 * Sizes run through 1..300 plus a few large ones (1024..8000) and alignments through 0..63 so the
 * small and large code paths of glibc's implementations run.
 * Build with -fno-builtin (real calls, no inlining). The reference loops must not be turned back into
 * memset/memcpy/memcmp calls by GCC's loop-pattern recognition, hence the pragma below. */
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#define _GNU_SOURCE /* mempcpy */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PAD 64
#define BUFSZ (8192 + 2 * PAD)
static unsigned char A[BUFSZ], B[BUFSZ], C[BUFSZ];

static unsigned long checks, wrong;
static const char *first_fail;
static long first_fail_iter = -1;

static void check(int ok, const char *fn, long iter) {
    checks++;
    if (!ok) {
        wrong++;
        if (!first_fail) { first_fail = fn; first_fail_iter = iter; }
    }
}

static unsigned int rng = 12345u;
static unsigned int rnd(void) { rng = rng * 1103515245u + 12345u; return rng >> 8; }

/* A size for iteration i: mostly 1..300, every 7th a large one. */
static size_t size_for(long i) {
    static const size_t big[] = {1024, 4096, 4097, 8000};
    if (i % 7 == 6) return big[(i / 7) % 4];
    return (size_t)(i % 300) + 1;
}

/* ---- references (plain byte loops) ---- */
static int sgn(long v) { return (v > 0) - (v < 0); }
static void fill(unsigned char *p, size_t n, unsigned char lo, unsigned char span) {
    for (size_t k = 0; k < n; k++) p[k] = (unsigned char)(lo + rnd() % span);
}
static void ref_copy(unsigned char *d, const unsigned char *s, size_t n) {
    for (size_t k = 0; k < n; k++) d[k] = s[k];
}
static int same(const unsigned char *x, const unsigned char *y, size_t n) {
    for (size_t k = 0; k < n; k++) if (x[k] != y[k]) return 0;
    return 1;
}
static int ref_memcmp(const unsigned char *x, const unsigned char *y, size_t n) {
    for (size_t k = 0; k < n; k++) if (x[k] != y[k]) return x[k] < y[k] ? -1 : 1;
    return 0;
}
static size_t ref_strlen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }
static const char *ref_strchr(const char *s, int c) {
    for (;; s++) { if (*s == (char)c) return s; if (!*s) return NULL; }
}
static const char *ref_strrchr(const char *s, int c) {
    const char *r = NULL;
    for (;; s++) { if (*s == (char)c) r = s; if (!*s) return r; }
}
static int ref_strncmp(const char *x, const char *y, size_t n) {
    for (size_t k = 0; k < n; k++) {
        unsigned char a = (unsigned char)x[k], b = (unsigned char)y[k];
        if (a != b) return a < b ? -1 : 1;
        if (!a) return 0;
    }
    return 0;
}
static const char *ref_strstr(const char *h, const char *ne) {
    size_t m = ref_strlen(ne);
    for (; *h; h++) {
        size_t k = 0;
        while (k < m && h[k] == ne[k]) k++;
        if (k == m) return h;
    }
    return m == 0 ? h : NULL;
}

/* ---- output without stdio ---- */
static char obuf[256];
static size_t olen;
static void put(const char *s) { while (*s && olen < sizeof obuf) obuf[olen++] = *s++; }
static void putnum(unsigned long v) {
    char t[24]; int k = 0;
    do { t[k++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (k && olen < sizeof obuf) obuf[olen++] = t[--k];
}
static void flush(int fd) {
    size_t off = 0;
    while (off < olen) { ssize_t w = write(fd, obuf + off, olen - off); if (w <= 0) break; off += (size_t)w; }
    olen = 0;
}

int main(int argc, char **argv) {
    long n = 1000;
    if (argc > 1) {
        n = 0;
        for (const char *p = argv[1]; *p >= '0' && *p <= '9'; p++) n = n * 10 + (*p - '0');
    }
    for (long i = 0; i < n; i++) {
        size_t sz = size_for(i);
        size_t oa = (size_t)(i * 7) % PAD, ob = (size_t)(i * 13 + 5) % PAD;
        unsigned char *a = A + oa, *b = B + ob;

        /* memset: returns dst, sets exactly sz bytes, guards untouched. */
        {
            int c = (int)(rnd() & 0xff);
            fill(A, BUFSZ, 1, 255);
            ref_copy(C, A, BUFSZ);
            void *r = memset(a, c, sz);
            for (size_t k = 0; k < sz; k++) C[oa + k] = (unsigned char)c;
            check(r == a && same(A, C, BUFSZ), "memset", i);
        }
        /* memcpy: non-overlapping, different alignments. */
        {
            fill(A, BUFSZ, 0, 255);
            fill(B, BUFSZ, 0, 255);
            ref_copy(C, B, BUFSZ);
            void *r = memcpy(b, a, sz);
            ref_copy(C + ob, a, sz);
            check(r == b && same(B, C, BUFSZ), "memcpy", i);
        }
        /* mempcpy: glibc's jumps into memmove's first instructions (whyslow must not count it there). */
        {
            fill(B, BUFSZ, 0, 255);
            ref_copy(C, B, BUFSZ);
            void *r = mempcpy(b, a, sz);
            ref_copy(C + ob, a, sz);
            check(r == b + sz && same(B, C, BUFSZ), "mempcpy", i);
        }
        /* memmove: overlapping, forward on even iterations, backward on odd ones. */
        {
            size_t shift = 1 + (size_t)(i % 61);
            size_t msz = sz > BUFSZ - 2 * PAD - shift ? BUFSZ - 2 * PAD - shift : sz;
            unsigned char *src = A + PAD + ((i & 1) ? 0 : shift);
            unsigned char *dst = A + PAD + ((i & 1) ? shift : 0);
            fill(A, BUFSZ, 0, 255);
            ref_copy(C, A, BUFSZ);
            ref_copy(B, src, msz); /* snapshot of the source */
            void *r = memmove(dst, src, msz);
            ref_copy(C + (dst - A), B, msz);
            check(r == dst && same(A, C, BUFSZ), "memmove", i);
        }
        /* memcmp: equal, or one differing byte at a varying position, either sign. */
        {
            fill(A, BUFSZ, 0, 255);
            ref_copy(b, a, sz);
            if (i % 4 != 0) {
                size_t p = rnd() % sz;
                unsigned char v = (unsigned char)(rnd() & 0xff);
                if (v == a[p]) v ^= 0x80;
                b[p] = v;
            }
            int r = memcmp(a, b, sz);
            check(sgn(r) == ref_memcmp(a, b, sz), "memcmp", i);
        }
        /* Strings: a NUL-terminated string of length sl (0..8000) at a varying alignment. */
        size_t sl = sz - 1;
        char *s = (char *)a;
        fill(A, BUFSZ, 'a', 26);
        s[sl] = '\0';
        /* strlen */
        {
            size_t r = strlen(s);
            check(r == ref_strlen(s) && r == sl, "strlen", i);
        }
        /* strchr: a present char, an absent char, or NUL. */
        {
            int c = (i % 5 == 4) ? 0 : (i % 3 == 0) ? '#' : sl ? (unsigned char)s[rnd() % sl] : 'q';
            if (i % 11 == 10) c = 0x100 | c; /* int argument converted to char */
            char *r = strchr(s, c);
            check(r == ref_strchr(s, c), "strchr", i);
        }
        /* strrchr */
        {
            int c = (i % 5 == 4) ? 0 : (i % 3 == 0) ? '#' : sl ? (unsigned char)s[rnd() % sl] : 'q';
            char *r = strrchr(s, c);
            check(r == ref_strrchr(s, c), "strrchr", i);
        }
        /* strcmp: t equals s up to a point, then differs (incl. high bytes) or ends. */
        char *t = (char *)b;
        ref_copy((unsigned char *)t, (unsigned char *)s, sl + 1);
        if (i % 4 != 0 && sl) {
            size_t p = rnd() % (sl + 1);
            unsigned int kind = rnd() % 3;
            if (kind == 0) t[p] = '\0';                       /* t is a prefix of s */
            else if (kind == 1) t[p] = (char)0xe9;              /* high byte: compares as unsigned */
            else t[p] = (p == sl) ? 'b' : (s[p] == 'a' ? 'z' : 'a'); /* t longer, or a lower/higher letter */
            if (p == sl) t[p + 1] = '\0';
        }
        {
            int r = strcmp(s, t);
            check(sgn(r) == ref_strncmp(s, t, (size_t)-1), "strcmp", i);
        }
        /* strncmp: limit below, at or beyond the difference. */
        {
            size_t lim = (i % 3 == 0) ? sl + 1 + (size_t)(i % 17) : (size_t)(rnd() % (sl + 2));
            int r = strncmp(s, t, lim);
            check(sgn(r) == ref_strncmp(s, t, lim), "strncmp", i);
        }
        /* strcpy: into C at a varying alignment, guard byte after the NUL untouched. */
        {
            char *d = (char *)C + ob;
            fill(C, BUFSZ, 1, 255);
            unsigned char guard = C[ob + sl + 1];
            char *r = strcpy(d, s);
            check(r == d && same((unsigned char *)d, (unsigned char *)s, sl + 1) && C[ob + sl + 1] == guard,
                  "strcpy", i);
        }
        /* strstr: small alphabet, needle of 2..40 chars taken from the haystack (found) or altered. */
        {
            char *h = (char *)C + oa;
            fill((unsigned char *)h, sl, 'a', 3);
            h[sl] = '\0';
            char ne[48];
            size_t m = 2 + (size_t)(i % 39);
            if (i % 3 != 2 && sl >= m) {
                size_t p = rnd() % (sl - m + 1);
                ref_copy((unsigned char *)ne, (unsigned char *)h + p, m);
                if (i % 3 == 1) ne[m - 1] = (char)('a' + rnd() % 4); /* maybe absent */
            } else {
                fill((unsigned char *)ne, m, 'a', 4);
            }
            ne[m] = '\0';
            char *r = strstr(h, ne);
            check(r == ref_strstr(h, ne), "strstr", i);
        }
        /* malloc/free: a usable, 16-byte aligned block of sz bytes. */
        {
            unsigned char *p = malloc(sz);
            int ok = p != NULL && ((unsigned long)p & 15) == 0;
            if (ok) {
                for (size_t k = 0; k < sz; k++) p[k] = (unsigned char)(k * 31 + (size_t)i);
                for (size_t k = 0; k < sz; k++) if (p[k] != (unsigned char)(k * 31 + (size_t)i)) ok = 0;
            }
            check(ok, "malloc", i);
            free(p);
        }
    }
    put("checkres: "); putnum(checks); put(" checks, "); putnum(wrong); put(" wrong\n");
    flush(1);
    if (wrong) {
        put("checkres: first wrong result from "); put(first_fail);
        put(" at iteration "); putnum((unsigned long)first_fail_iter); put("\n");
        flush(2);
        return 1;
    }
    return 0;
}
