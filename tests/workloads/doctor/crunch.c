/* cpu-throttling: a CPU-bound service with one worker per online CPU (sized to the host, as most pools
 * are), burning until SIGTERM. The test runs it in a cgroup with a CPU quota of 0.2 CPU (bad) or of 3
 * CPUs, above what its workers can use (fixed): the program is the same, the limit differs. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>
#include "../common.h"

static volatile sig_atomic_t stop;
static void on_term(int s) { (void)s; stop = 1; }

__attribute__((noinline)) static void handle_request(void) { BURN_BODY(1); }

static void *worker(void *arg) {
    (void)arg;
    while (!stop) handle_request();
    return NULL;
}

int main(void) {
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1 || n > 64) n = 2;
    pthread_t t[64];
    for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, NULL);
    printf("%d\n", getpid());
    fflush(stdout);
    for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
    return 0;
}
