// tiny-container-lookups (seed 003): each request looks its headers up in a std::map of six entries.
// fixed: a flat array of known headers searched by length then bytes.
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>

static volatile size_t sink;
static const char *names[] = {"content-type", "content-length", "host", "user-agent", "accept", "x-request-id"};
static const char *wanted[] = {"host", "accept", "content-type", "x-request-id", "user-agent", "content-length", "accept", "host"};

__attribute__((noinline)) static size_t handle_map(const std::map<std::string, std::string> &h) {
    size_t n = 0;
    for (const char *w : wanted) {
        auto it = h.find(w);
        if (it != h.end()) n += it->second.size();
    }
    return n;
}

__attribute__((noinline)) static size_t handle_flat(const std::pair<std::string_view, std::string_view> *h, int count) {
    size_t n = 0;
    for (const char *w : wanted) {
        std::string_view k(w);
        for (int i = 0; i < count; i++)
            if (h[i].first.size() == k.size() && h[i].first == k) { n += h[i].second.size(); break; }
    }
    return n;
}

int main(int argc, char **argv) {
    bool fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    std::map<std::string, std::string> m;
    std::pair<std::string_view, std::string_view> flat[6];
    for (int i = 0; i < 6; i++) { m[names[i]] = "value-of-the-header"; flat[i] = {names[i], "value-of-the-header"}; }
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < until)
        for (int i = 0; i < 1000; i++) sink += fixed ? handle_flat(flat, 6) : handle_map(m);
    return 0;
}
