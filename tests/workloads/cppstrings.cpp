// N std::string objects longer than the small-string buffer: N operator new and N operator delete, and
// N appends. Usage: cppstrings N
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000;
    unsigned long total = 0;
    for (long i = 0; i < n; i++) {
        std::string s(40, 'a' + (char)(i % 26));
        s.append("xyz");
        total += s.size();
    }
    std::printf("%lu\n", total);
    return 0;
}
