// protobuf-reflection (seed 000): a service serializes batches of messages generated with
// optimize_for = CODE_SIZE, so every serialization walks reflection. fixed: the same messages generated
// with the default optimize_for = SPEED.
#include <chrono>
#include <cstring>
#include <string>
#include "items_size.pb.h"
#include "items_speed.pb.h"

static volatile size_t sink;

template <class Batch> __attribute__((noinline)) size_t encode_batch(Batch &b, std::string &out) {
    out.clear();
    b.SerializeToString(&out);
    return out.size();
}

template <class Batch> static void fill(Batch &b) {
    for (int i = 0; i < 50; i++) {
        auto *it = b.add_items();
        it->set_id(i);
        it->set_name("item-" + std::to_string(i));
        for (int t = 0; t < 4; t++) it->add_tags(t * i);
        it->set_price(i * 1.5);
        it->set_description("a fairly ordinary item");
    }
}

int main(int argc, char **argv) {
    bool fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    compact::Batch slow;
    speed::Batch fast;
    fill(slow);
    fill(fast);
    std::string out;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < until)
        for (int i = 0; i < 100; i++) sink += fixed ? encode_batch(fast, out) : encode_batch(slow, out);
    return 0;
}
