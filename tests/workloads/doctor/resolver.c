/* repeated-lookups (issue 34): a client resolves its backend's name with getaddrinfo() before every
 * request, and glibc re-reads nsswitch.conf, /etc/hosts and gai.conf on each call. fixed: resolved once
 * at startup, the address reused. */
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "../common.h"

static struct addrinfo *resolve(const char *host) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, "8080", &hints, &res) != 0) exit(1);
    return res;
}

/* The request's own work: building and checksumming a small payload. */
__attribute__((noinline)) static void send_request(const struct addrinfo *to, long i) {
    uint64_t x = (uint64_t)i + to->ai_addrlen;
    for (int k = 0; k < 400; k++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    sink += x;
}

__attribute__((noinline)) static void handle(long i, struct addrinfo *cached) {
    struct addrinfo *to = cached ? cached : resolve("localhost");
    send_request(to, i);
    if (!cached) freeaddrinfo(to);
}

int main(int argc, char **argv) {
    int fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    struct addrinfo *cached = fixed ? resolve("localhost") : NULL;
    double until = now_s() + 2.0;
    long n = 0;
    while (now_s() < until) handle(n++, cached);
    return 0;
}
