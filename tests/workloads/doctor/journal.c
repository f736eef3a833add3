/* blocking-io: an append-only journal that makes every 100-byte record durable with fdatasync.
 * fixed: records are written as they come and synced once per 1000 records (group commit).
 * The file lives in the directory given as the second argument (default: the current one). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../common.h"

__attribute__((noinline)) static void commit(int fd) {
    if (fdatasync(fd) != 0) _exit(1);
}

__attribute__((noinline)) static void append_record(int fd, long i, int fixed) {
    char rec[100];
    memset(rec, ' ', sizeof rec);
    snprintf(rec, sizeof rec, "txn %ld committed", i);
    rec[99] = '\n';
    if (write(fd, rec, sizeof rec) != sizeof rec) _exit(1);
    if (!fixed || i % 1000 == 999) commit(fd);
}

int main(int argc, char **argv) {
    int fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/whyslow-journal-%d.log", argc > 2 ? argv[2] : ".", getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(path); return 1; }
    double until = now_s() + 2.0;
    for (long i = 0; now_s() < until; i++) append_record(fd, i, fixed);
    close(fd);
    unlink(path);
    return 0;
}
