// An allocator-heavy loop for the call-counting benchmark: each iteration makes one operator new, one
// operator delete, one malloc, one memcpy and one free call from main's loop (operator new and delete
// call malloc and free inside libstdc++ too). Usage: allocloop N
#include <cstdlib>
#include <cstring>

struct Obj {
    long v[6];
};

static void *volatile keep;
static char src[64] = "the quick brown fox jumps over the lazy dog, again and again.";

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    for (long i = 0; i < n; i++) {
        Obj *o = new Obj();
        keep = o;
        delete o;
        char *p = static_cast<char *>(malloc(64));
        memcpy(p, src, 64);
        keep = p;
        free(p);
    }
    return 0;
}
