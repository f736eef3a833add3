// Exactly known allocations from known call sites, interleaved (so any stretch of the run has all three).
// Usage: allocs N
//   site_small: N x malloc(100)      site_big: N/2 x malloc(1000)      site_new: N x new Obj (48 bytes)
#include <cstdio>
#include <cstdlib>

struct Obj {
    long v[6];
};

static void *volatile keep;

__attribute__((noinline)) void site_small(long n) {
    for (long i = 0; i < n; i++) {
        keep = malloc(100);
        free(keep);
    }
}

__attribute__((noinline)) void site_big(long n) {
    for (long i = 0; i < n; i++) {
        keep = malloc(1000);
        free(keep);
    }
}

__attribute__((noinline)) void site_new(long n) {
    for (long i = 0; i < n; i++) {
        Obj *o = new Obj();
        keep = o;
        delete o;
    }
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    for (long i = 0; i < n; i++) {
        site_small(1);
        if (i % 2) site_big(1);
        site_new(1);
    }
    return 0;
}
