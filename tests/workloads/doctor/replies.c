/* small-writes on a request/response socket: a client thread sends 8-byte requests over a Unix stream
 * socket and a server thread answers each with a 5-byte reply over another (one write per reply, no
 * pipelining), for 2 s of the process's CPU time. Usage: replies [UNITS]: the server's handle() burns UNITS units of CPU per request (default 0:
 * the writes are most of the time; 8: they are a small share of it). */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "../common.h"

/* Requests go from req[0] to req[1], replies from rep[1] to rep[0]. With one socket pair both ways the
 * server's read of a request also woke the client (freeing the request's buffer wakes whoever waits on
 * the client's socket: the client, in its read, for a reply not there yet): a third switch per request,
 * in the reads, whose cost grows with the machine's load. Beside stress-ng the reads then outweighed the
 * writes (the write path less the protocol 14-19% of CPU, 23-25% with two pairs). */
static int req[2], rep[2];
static long units;

__attribute__((noinline)) static void handle(long n) { BURN_BODY(n); }

static void *server(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "server");
    char buf[8];
    while (read(req[1], buf, sizeof buf) == (ssize_t)sizeof buf) {
        handle(units);
        if (write(rep[1], "+OK\r\n", 5) != 5) break;
    }
    return NULL;
}

int main(int argc, char **argv) {
    units = argc > 1 ? atol(argv[1]) : 0;
    /* Both threads on one CPU: each request then costs the two syscalls and a switch between the
     * threads, not a wake-up of a CPU that went idle. That wake-up (an IPI, a VM exit on a virtual
     * machine) can cost more than everything else together, and only sometimes: on a VM it made the
     * reads, which wake the other thread too, outweigh the writes one day and not the next. */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, req) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, rep) < 0) return 1;
    pthread_t t;
    pthread_create(&t, NULL, server, NULL);
    char reply[5];
    double until = cpu_s() + 2.0; /* of the process's CPU time: the same evidence on a busy machine */
    while (cpu_s() < until) {
        for (int i = 0; i < 64; i++) {
            if (write(req[0], "GET key\n", 8) != 8 || read(rep[0], reply, 5) != 5) return 1;
        }
    }
    shutdown(req[0], SHUT_WR);
    pthread_join(t, NULL);
    return 0;
}
