/* blocking-io: an append-only journal that makes every 100-byte record durable with fdatasync.
 * fixed: group commit: records are buffered and written and synced once per 10000 records. Each record
 * also costs some CPU (its checksum), the work the journal is for.
 * The file lives in the directory given as the second argument (default: the current one). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "../common.h"

__attribute__((noinline)) static void commit(int fd) {
    if (fdatasync(fd) != 0) _exit(1);
}

static char batch[100 * 10000];
static size_t used;

__attribute__((noinline)) static void checksum(char *rec) {
    uint64_t h = 1469598103934665603ull;
    for (int r = 0; r < 100; r++)
        for (int k = 0; k < 90; k++) h = (h ^ (unsigned char)rec[k]) * 1099511628211ull;
    rec[90] = (char)('a' + h % 26);
}

__attribute__((noinline)) static void append_record(int fd, long i, int fixed) {
    char *rec = batch + used;
    memset(rec, ' ', 100);
    snprintf(rec, 100, "txn %ld committed", i);
    checksum(rec);
    rec[99] = '\n';
    used += 100;
    if (!fixed || used == sizeof batch) {
        if (write(fd, batch, used) != (ssize_t)used) _exit(1);
        used = 0;
        commit(fd);
    }
}

int main(int argc, char **argv) {
    int fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    char path[4096];
    snprintf(path, sizeof path, "%s/whyslow-journal-%d.log", argc > 2 ? argv[2] : ".", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(path); return 1; }
    double until = now_s() + 2.0;
    for (long i = 0; now_s() < until; i++) append_record(fd, i, fixed);
    close(fd);
    unlink(path);
    return 0;
}
