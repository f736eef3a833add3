/* Seed 001 in miniature: localtime()+strftime() with TZ unset make glibc stat /etc/localtime on every
 * call. Usage: tzstat [CALLS] [FAILED_OPENS] [CHILDREN] — each of 1 + CHILDREN processes does CALLS
 * localtime+strftime pairs and FAILED_OPENS opens of a missing file (ENOENT), so the totals are known.
 * With a 4th argument `wait`: load the time zone, print the pid, wait for a line on stdin, then work
 * (for attaching: exactly CALLS stats of /etc/localtime happen after the line). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void work(long calls, long fails) {
    char buf[64];
    size_t total = 0;
    for (long i = 0; i < calls; i++) {
        time_t t = 1700000000 + i;
        struct tm *tm = localtime(&t);
        total += strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", tm);
    }
    for (long i = 0; i < fails; i++) {
        if (open("/nonexistent/whyslow-tzstat", O_RDONLY) >= 0) abort();
    }
    if (total == 0 && calls > 0) abort();
}

int main(int argc, char **argv) {
    long calls = argc > 1 ? atol(argv[1]) : 200000;
    long fails = argc > 2 ? atol(argv[2]) : 1000;
    int children = argc > 3 ? atoi(argv[3]) : 0;
    unsetenv("TZ");
    if (argc > 4) {
        char line[16];
        time_t t = 0;
        localtime(&t);
        printf("%d\n", (int)getpid());
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
    }
    for (int c = 0; c < children; c++) {
        pid_t p = fork();
        if (p == 0) {
            work(calls, fails);
            _exit(0);
        }
        if (p < 0) return 1;
    }
    work(calls, fails);
    for (int c = 0; c < children; c++) wait(NULL);
    return 0;
}
