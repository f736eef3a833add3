// std::string operations (construct from char*, append, find, substr, compare, copy), N times each,
// every result checked against a byte-loop reference. Usage: checkres_cpp [N]   (N defaults to 1000)
// Prints `checkres_cpp: <checks> checks, <wrong> wrong`; exit 1 on any wrong result (the first failing
// operation goes to stderr). These operations call libc's memcpy/memmove/memcmp/strlen/memchr
// underneath, so a probe that corrupts those results shows up here as wrong results.
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#include <cstdio>
#include <cstdlib>
#include <string>

static unsigned long checks, wrong;
static const char *first_fail;
static long first_fail_iter = -1;

static void check(bool ok, const char *what, long iter) {
    checks++;
    if (!ok) {
        wrong++;
        if (!first_fail) { first_fail = what; first_fail_iter = iter; }
    }
}

static unsigned int rng = 777u;
static unsigned int rnd() { rng = rng * 1103515245u + 12345u; return rng >> 8; }

static size_t size_for(long i) {
    static const size_t big[] = {1024, 4096, 4097, 6000};
    if (i % 7 == 6) return big[(i / 7) % 4];
    return (size_t)(i % 300) + 1;
}

static bool same(const char *x, const char *y, size_t n) {
    for (size_t k = 0; k < n; k++) if (x[k] != y[k]) return false;
    return true;
}
static int sgn(long v) { return (v > 0) - (v < 0); }

static char S1[8192], S2[8192], OUT[8192 + 64];

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 0; i < n; i++) {
        size_t l1 = size_for(i), l2 = size_for(i * 5 + 3) / 2;
        for (size_t k = 0; k < l1; k++) S1[k] = (char)('a' + rnd() % 4);
        for (size_t k = 0; k < l2; k++) S2[k] = (char)('a' + rnd() % 4);
        S1[l1] = S2[l2] = '\0';

        // construct from a char*
        std::string a(S1);
        check(a.size() == l1 && same(a.data(), S1, l1) && a.c_str()[l1] == '\0', "string(const char*)", i);

        // append
        std::string b(a);
        b.append(S2);
        check(b.size() == l1 + l2 && same(b.data(), S1, l1) && same(b.data() + l1, S2, l2) &&
                  b.c_str()[l1 + l2] == '\0',
              "append", i);

        // find: a needle taken from b (found) or random (maybe absent), from a varying start
        size_t m = 1 + (size_t)(i % 12), from = (size_t)(i % 5);
        char ne[16];
        if (i % 3 != 2 && b.size() >= m) {
            size_t p = rnd() % (b.size() - m + 1);
            for (size_t k = 0; k < m; k++) ne[k] = b[p + k];
        } else {
            for (size_t k = 0; k < m; k++) ne[k] = (char)('a' + rnd() % 5);
        }
        ne[m] = '\0';
        size_t expect = std::string::npos;
        for (size_t p = from; p + m <= b.size(); p++)
            if (same(b.data() + p, ne, m)) { expect = p; break; }
        check(b.find(ne, from) == expect, "find", i);

        // substr
        size_t pos = b.size() ? rnd() % b.size() : 0, len = rnd() % (b.size() + 2);
        std::string c = b.substr(pos, len);
        size_t clen = len < b.size() - pos ? len : b.size() - pos;
        check(c.size() == clen && same(c.data(), b.data() + pos, clen), "substr", i);

        // compare: equal, a prefix, or one letter changed
        std::string d(a);
        if (i % 4 == 1 && d.size()) d.resize(rnd() % d.size());
        else if (i % 4 >= 2 && d.size()) { size_t p = rnd() % d.size(); d[p] = d[p] == 'a' ? 'z' : 'a'; }
        int ref = 0;
        size_t common = a.size() < d.size() ? a.size() : d.size();
        for (size_t k = 0; k < common && !ref; k++)
            if (a[k] != d[k]) ref = (unsigned char)a[k] < (unsigned char)d[k] ? -1 : 1;
        if (!ref) ref = sgn((long)a.size() - (long)d.size());
        check(sgn(a.compare(d)) == ref && ((a == d) == (ref == 0)), "compare", i);

        // copy
        size_t cpos = (size_t)(i % 7) < b.size() ? (size_t)(i % 7) : 0, cn = 1 + rnd() % (b.size() + 8);
        for (size_t k = 0; k < sizeof OUT; k++) OUT[k] = '#';
        size_t got = b.copy(OUT, cn, cpos);
        size_t want = cn < b.size() - cpos ? cn : b.size() - cpos;
        check(got == want && same(OUT, b.data() + cpos, want) && OUT[want] == '#', "copy", i);
    }
    printf("checkres_cpp: %lu checks, %lu wrong\n", checks, wrong);
    if (wrong) {
        fprintf(stderr, "checkres_cpp: first wrong result from %s at iteration %ld\n", first_fail, first_fail_iter);
        return 1;
    }
    return 0;
}
