/* Memory in use with exactly known answers, for `record --mem`. Prints what it still holds at exit.
 *   memwork leak N [wait]  N blocks through cache_put() (sizes 16..112 bytes, kept forever), 100000
 *                       malloc/free pairs in churn(), a bounded cache of 64 entries in lru_put() that
 *                       evicts its oldest and is emptied before exit: only cache_put's blocks are held.
 *                       With `wait`: prints its pid and does the work once a line arrives on stdin (the
 *                       seconds printed are the work's).
 *   memwork grow S R    for S seconds, R bytes per second through cache_put() in 100 blocks a second
 *                       (one every 10 ms), with churn and the bounded cache beside it: grows R B/s.
 *   memwork bounded S   for S seconds, the bounded cache alone (64 x 4 KiB at most), freed at exit.
 *   memwork attach S R [N]  for a recorder attaching to it (-p): first keeps 1000 blocks through cache_put()
 *                       and fills the bounded cache, prints its pid and waits for a line on stdin (the
 *                       recorder is attached); then the window: for S seconds `grow S R` (N blocks a tick,
 *                       default 1), freeing the 1000 early blocks on the way (frees of blocks allocated
 *                       before the window). It prints what cache_put kept in the window alone.
 *   memwork serve S R   a server for an agent: prints its pid, waits for a line on stdin, then for S seconds
 *                       ticks 20 times a second: R/20 bytes through cache_put() (none when R is 0), 3
 *                       entries of the bounded cache at 64 KiB (4 MiB at most, each entry replaced about
 *                       once a second) and 2 ms of CPU work, so the allocator probes cost it about 1.5%
 *                       of its CPU time. R 0: bounded memory only.
 * Output: "held N objects B bytes in S s" (what cache_put kept, and the seconds main ran: under load the
 * ticks stretch, so the rate a test expects is B / S). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct block { struct block *next; char data[]; };
static struct block *kept;
static long kept_objects, kept_bytes;

__attribute__((noinline)) void cache_put(size_t size) {
    struct block *b = malloc(size);
    if (!b) abort();
    memset(b, 0x5a, size);
    b->next = kept;
    kept = b;
    kept_objects++;
    kept_bytes += (long)size;
}

__attribute__((noinline)) void churn(int n) {
    for (int i = 0; i < n; i++) {
        char *volatile p = malloc(32 + i % 200);
        p[0] = 1;
        free(p);
    }
}

#define LRU 64
static void *lru[LRU];
static int lru_next;

__attribute__((noinline)) void lru_put(size_t size) {
    free(lru[lru_next]);
    lru[lru_next] = calloc(1, size);
    lru_next = (lru_next + 1) % LRU;
}

static void lru_clear(void) {
    for (int i = 0; i < LRU; i++) free(lru[i]), lru[i] = NULL;
}

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A request's CPU work: about `ms` of this thread's CPU time. */
__attribute__((noinline)) void handle(double ms) {
    volatile unsigned long x = 0;
    double until = thread_cpu_s() + ms / 1e3;
    while (thread_cpu_s() < until)
        for (int i = 0; i < 1000; i++) x += (unsigned long)i * 2654435761u;
}

int main(int argc, char **argv) {
    double t0 = now_s();
    const char *mode = argc > 1 ? argv[1] : "leak";
    if (!strcmp(mode, "leak")) {
        long n = argc > 2 ? atol(argv[2]) : 1000;
        if (argc > 3 && !strcmp(argv[3], "wait")) {
            /* For a recorder attaching to it: its pid, then the work once a line arrives on stdin. */
            printf("%d\n", (int)getpid());
            fflush(stdout);
            char line[16];
            if (!fgets(line, sizeof line, stdin)) return 3;
            t0 = now_s();
        }
        for (long i = 0; i < n; i++) {
            cache_put(sizeof(struct block) + 8 + (size_t)(i % 7) * 16);
            lru_put(256);
        }
        churn(100000);
    } else if (!strcmp(mode, "grow")) {
        long secs = argc > 2 ? atol(argv[2]) : 3, rate = argc > 3 ? atol(argv[3]) : 100000;
        for (long tick = 0; tick < secs * 100; tick++) {
            cache_put((size_t)(rate / 100));
            lru_put(4096);
            churn(100);
            nap_ms(10);
        }
    } else if (!strcmp(mode, "bounded")) {
        long secs = argc > 2 ? atol(argv[2]) : 3;
        for (long tick = 0; tick < secs * 100; tick++) {
            lru_put(4096);
            churn(100);
            nap_ms(10);
        }
    } else if (!strcmp(mode, "serve")) {
        long secs = argc > 2 ? atol(argv[2]) : 3, rate = argc > 3 ? atol(argv[3]) : 0;
        printf("%d\n", (int)getpid());
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 3;
        t0 = now_s();
        for (long tick = 0; tick < secs * 20; tick++) {
            if (rate > 0) cache_put((size_t)(rate / 20));
            for (int k = 0; k < 3; k++) lru_put(65536);
            handle(2.0);
            nap_ms(50);
        }
    } else if (!strcmp(mode, "attach")) {
        long secs = argc > 2 ? atol(argv[2]) : 3, rate = argc > 3 ? atol(argv[3]) : 100000;
        long per_tick = argc > 4 ? atol(argv[4]) : 1;
        for (int i = 0; i < 1000; i++) cache_put(64), lru_put(4096);
        struct block *early = kept;
        kept = NULL, kept_objects = 0, kept_bytes = 0;
        printf("%d\n", (int)getpid());
        fflush(stdout);
        char line[16];
        if (!fgets(line, sizeof line, stdin)) return 3;
        t0 = now_s();
        for (long tick = 0; tick < secs * 100; tick++) {
            for (long k = 0; k < per_tick; k++) cache_put((size_t)(rate / 100 / per_tick));
            lru_put(4096);
            churn(100);
            for (int i = 0; i < 10 && early; i++) {
                struct block *next = early->next;
                free(early);
                early = next;
            }
            nap_ms(10);
        }
    } else {
        fprintf(stderr, "usage: memwork leak N | grow SECONDS BYTES_PER_SECOND | bounded SECONDS | attach SECONDS "
                        "BYTES_PER_SECOND [BLOCKS_PER_TICK] | serve SECONDS BYTES_PER_SECOND\n");
        return 2;
    }
    lru_clear();
    printf("held %ld objects %ld bytes in %.3f s\n", kept_objects, kept_bytes, now_s() - t0);
    return 0;
}
