#define _GNU_SOURCE
/* A small HTTP server for profiling under load: one thread, epoll, keep-alive. Every request ("GET ...
 * \r\n\r\n") goes through handle_request, which burns a little CPU (BURN_BODY(1)) and answers "hello\n".
 * SIGTERM or SIGINT: exits 0 after printing how many requests it served. Usage: httpserv PORT [DIE_AFTER
 * [UNITS]] (with DIE_AFTER > 0, it exits with status 3 without a word after that many requests, like a crash;
 * UNITS: BURN_BODY units per request, default 1). */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include "common.h"

#define MAX_FDS 4096
static volatile sig_atomic_t stopping;
static char bufs[MAX_FDS][4096];
static int lens[MAX_FDS];
static long served;
static int burn_units = 1;

static void on_term(int sig) { (void)sig; stopping = 1; }

static const char RESPONSE[] = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nContent-Type: text/plain\r\n\r\nhello\n";

__attribute__((noinline)) int handle_request(int fd, const char *req, int len) {
    (void)req; (void)len;
    BURN_BODY(burn_units);
    served++;
    return write(fd, RESPONSE, sizeof RESPONSE - 1) == (ssize_t)(sizeof RESPONSE - 1) ? 0 : -1;
}

/* Reads what the client sent and answers every complete request; -1 when the connection is done. */
__attribute__((noinline)) static int serve_client(int fd) {
    for (;;) {
        if (fd >= MAX_FDS) return -1;
        int room = (int)sizeof bufs[fd] - lens[fd];
        if (room <= 0) return -1; /* a request header larger than the buffer */
        ssize_t n = read(fd, bufs[fd] + lens[fd], room);
        if (n == 0) return -1;
        if (n < 0) return errno == EAGAIN ? 0 : -1;
        lens[fd] += n;
        char *end;
        while ((end = memmem(bufs[fd], lens[fd], "\r\n\r\n", 4)) != NULL) {
            int req_len = (int)(end + 4 - bufs[fd]);
            if (handle_request(fd, bufs[fd], req_len) < 0) return -1;
            memmove(bufs[fd], bufs[fd] + req_len, lens[fd] - req_len);
            lens[fd] -= req_len;
        }
    }
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: httpserv PORT [DIE_AFTER [UNITS]]\n"); return 2; }
    int port = atoi(argv[1]);
    long die_after = argc > 2 ? atol(argv[2]) : 0;
    if (argc > 3) burn_units = atoi(argv[3]);
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 512) < 0) {
        perror("httpserv: bind/listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    struct epoll_event events[64];
    while (!stopping) {
        int n = epoll_wait(ep, events, 64, 100);
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAX_FDS) { close(c); continue; }
                    lens[c] = 0;
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                }
            } else if (serve_client(fd) < 0) {
                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                close(fd);
            }
            if (die_after > 0 && served >= die_after) return 3; /* silently, like a crash */
        }
    }
    fprintf(stderr, "httpserv: stopped after %ld requests\n", served);
    return (int)(sink & 0);
}
