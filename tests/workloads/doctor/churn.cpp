// alloc-churn: every request splits a line into a fresh vector of heap strings and joins some back.
// fixed: the vector and the output string are reused, tokens are string_views.
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

static volatile size_t sink;
static const char *line = "GET /api/v1/items/12345/attributes/color?format=json&locale=en_US&session=abcdefghijklmnop HTTP/1.1";

__attribute__((noinline)) static size_t handle_bad(const char *l) {
    std::vector<std::string> tokens;
    std::string cur;
    for (const char *p = l; *p; p++) {
        if (*p == '/' || *p == '?' || *p == '&' || *p == ' ') {
            tokens.push_back(cur + std::string(" (token of a request line)"));
            cur.clear();
        } else {
            cur += *p;
        }
    }
    size_t n = 0;
    for (auto &t : tokens) n += std::string(t).size();
    return n;
}

__attribute__((noinline)) static size_t handle_fixed(const char *l) {
    static std::vector<std::string_view> tokens;
    tokens.clear();
    std::string_view s(l);
    size_t start = 0;
    for (size_t i = 0; i < s.size(); i++) {
        char c = s[i];
        if (c == '/' || c == '?' || c == '&' || c == ' ') { tokens.push_back(s.substr(start, i - start)); start = i + 1; }
    }
    size_t n = 0;
    for (auto t : tokens) n += t.size() + 26;
    return n;
}

int main(int argc, char **argv) {
    bool fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < until)
        for (int i = 0; i < 100; i++) sink += fixed ? handle_fixed(line) : handle_bad(line);
    return 0;
}
