// excess-copying (seed 002): a JSON writer that builds its document with `out = out + piece`, copying
// the whole document for every piece, then checksums it (the work it is for). fixed: append into a
// string reserved once.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

static volatile size_t sink;

static std::string pieces[100];

__attribute__((noinline)) static uint64_t checksum(const std::string &doc) {
    uint64_t h = 1469598103934665603ull;
    for (int r = 0; r < 2; r++)
        for (unsigned char c : doc) h = (h ^ c) * 1099511628211ull;
    return h;
}

__attribute__((noinline)) static std::string render(int items, bool fixed) {
    std::string out;
    if (fixed) out.reserve(items * 48 + 16);
    out = fixed ? (out += "[") : out + "[";
    for (int i = 0; i < items; i++) {
        const std::string &piece = pieces[i % 100];
        if (fixed) out.append(piece);
        else out = out + piece;
    }
    out += "]";
    return out;
}

int main(int argc, char **argv) {
    bool fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    for (int i = 0; i < 100; i++) pieces[i] = "{\"id\":" + std::to_string(i) + ",\"name\":\"item-" + std::to_string(i) + "\",\"ok\":true},";
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < until) sink += checksum(render(600, fixed));
    return 0;
}
