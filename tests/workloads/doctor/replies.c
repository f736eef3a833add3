/* small-writes on a request/response socket: a client thread sends a batch of 64 8-byte requests over a
 * Unix stream socket (one write, as a pipelining client does); a server thread reads them two at a time
 * (as much as its 16-byte buffer takes) and answers each with a 5-byte reply of its own write (one write
 * per reply, never batched), for 2 s of the process's CPU time. Usage: replies [UNITS]: the server's
 * handle() burns UNITS units of CPU per request (default 0: the writes are most of the time; 8: they are
 * a small share of it).
 *
 * The server tells the client its batch is answered through a semaphore, and the client reads the 64
 * replies then, 16 per read (the reads stay about one per two requests): while the server works nobody
 * waits on the socket, so no write wakes a thread. A client waiting for each reply in read makes every request two context switches, whose cost
 * (sampled in the reads' schedule(), dearer the busier the machine) outweighed the writes under load:
 * beside stress-ng and the test suite the write path less the protocol fell under 10% of CPU. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "../common.h"

#define BATCH 64
#define REQ 8

static int fds[2];
static long units;
static sem_t answered;

__attribute__((noinline)) static void handle(long n) { BURN_BODY(n); }

static void *server(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "server");
    char req[2 * REQ];
    long n = 0;
    for (ssize_t got; (got = read(fds[1], req, sizeof req)) > 0;) {
        for (ssize_t i = 0; i + REQ <= got; i += REQ) {
            handle(units);
            if (write(fds[1], "+OK\r\n", 5) != 5) return NULL;
            if (++n % BATCH == 0) sem_post(&answered);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    units = argc > 1 ? atol(argv[1]) : 0;
    /* Both threads on one CPU: the client's batch and the server's answer hand over with one switch each,
     * not a wake-up of a CPU that went idle (an IPI, a VM exit on a virtual machine), whose cost varies. */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    sched_setaffinity(0, sizeof one, &one);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) < 0 || sem_init(&answered, 0, 0) < 0) return 1;
    pthread_t t;
    pthread_create(&t, NULL, server, NULL);
    char batch[REQ * BATCH], replies[5 * BATCH];
    for (int i = 0; i < BATCH; i++) memcpy(batch + REQ * i, "GET key\n", REQ);
    double until = cpu_s() + 2.0; /* of the process's CPU time: the same evidence on a busy machine */
    while (cpu_s() < until) {
        if (write(fds[0], batch, sizeof batch) != (ssize_t)sizeof batch) return 1;
        sem_wait(&answered);
        for (int i = 0; i < 4; i++) /* a quarter at a time: a read per 16 replies */
            if (recv(fds[0], replies, sizeof replies / 4, MSG_WAITALL) != (ssize_t)sizeof replies / 4) return 1;
    }
    shutdown(fds[0], SHUT_WR);
    pthread_join(t, NULL);
    return 0;
}
