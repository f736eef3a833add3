/* Idle threads next to a busy one: the doctor summarizes them as idle, never as findings or hot paths.
 * main -> work burns CPU for SECONDS (default 2) while
 *   bg-purge  wakes every 20 ms from pthread_cond_timedwait (like jemalloc's background thread),
 *   pool-0/1  wait in pthread_cond_wait for jobs that never come (an idle thread pool),
 *   loop      waits in epoll_wait on a pipe nothing is written to, 50 ms at a time (an idle event loop).
 * Usage: idle [SECONDS] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "../common.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs = PTHREAD_COND_INITIALIZER, tick = PTHREAD_COND_INITIALIZER;
static volatile int done;

static void *bg_purge(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "bg-purge");
    pthread_mutex_lock(&mu);
    while (!done) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 20000000;
        if (t.tv_nsec >= 1000000000) { t.tv_sec++; t.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&tick, &mu, &t);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *pool(void *arg) {
    char name[16];
    snprintf(name, sizeof name, "pool-%ld", (long)arg);
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&mu);
    while (!done) pthread_cond_wait(&jobs, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *loop(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "loop");
    int p[2], ep = epoll_create1(0);
    if (pipe(p) < 0 || ep < 0) exit(1);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = p[0]}, out;
    epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev);
    while (!done) epoll_wait(ep, &out, 1, 50);
    return NULL;
}

__attribute__((noinline)) static void work(double until) {
    while (now_s() < until) BURN_BODY(1);
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    pthread_t t[4];
    pthread_create(&t[0], NULL, bg_purge, NULL);
    pthread_create(&t[1], NULL, pool, (void *)0);
    pthread_create(&t[2], NULL, pool, (void *)1);
    pthread_create(&t[3], NULL, loop, NULL);
    work(now_s() + secs);
    pthread_mutex_lock(&mu);
    done = 1;
    pthread_cond_broadcast(&jobs);
    pthread_cond_broadcast(&tick);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    return 0;
}
