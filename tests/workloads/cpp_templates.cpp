// C++ with templates, std containers and an always-inlined helper: a profiler must show the demangled
// `work::hot_loop(...)` with `mix` inlined below it. Usage: cpp_templates [SECONDS] (default 2).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

static volatile uint64_t sink;

static inline __attribute__((always_inline)) uint64_t mix(uint64_t x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

namespace work {
template <typename T>
struct Accumulator {
    T total{};
    void add(const T &v) { total += v; }
};

__attribute__((noinline)) uint64_t hot_loop(uint64_t seed) {
    for (int i = 0; i < 200000; i++) seed = mix(seed);
    return seed;
}

__attribute__((noinline)) int containers(int n) {
    std::map<std::string, int> m;
    std::vector<std::string> v;
    for (int i = 0; i < n; i++) {
        v.push_back("key" + std::to_string((i * 7919) % n));
        m[v.back()] += i;
    }
    std::sort(v.begin(), v.end());
    Accumulator<int> acc;
    for (auto &kv : m) acc.add(kv.second);
    return acc.total + (int)v.size();
}
}  // namespace work

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(secs);
    uint64_t s = 1;
    while (std::chrono::steady_clock::now() < end) {
        for (int i = 0; i < 8; i++) s = work::hot_loop(s);
        s += work::containers(2000);
    }
    sink = s;
    return 0;
}
