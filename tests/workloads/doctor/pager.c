/* memory-pressure: a lookup service whose 32 MB index is a mapped file, and whose pages keep being
 * evicted (as under a memory limit smaller than its working set): every lookup of an evicted page is a
 * major fault that reads the page back from disk. Eviction is forced with MADV_DONTNEED + POSIX_FADV_DONTNEED
 * after each pass, so the faults happen on any host. fixed: the index is read into the heap once (and the
 * limit would be raised): no faults after the start. Argument 2 (optional): the directory of the file. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../common.h"

#define SIZE (32L << 20)
#define PAGE 4096L

__attribute__((noinline)) static uint64_t lookup(const unsigned char *index, long page) {
    return index[page * PAGE + (page & 511)];
}

int main(int argc, char **argv) {
    int fixed = argc > 1 && strcmp(argv[1], "fixed") == 0;
    const char *dir = argc > 2 ? argv[2] : "/var/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/whyslow-pager-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    unlink(path);
    static unsigned char block[1 << 20];
    for (long i = 0; i < SIZE; i += sizeof block) {
        memset(block, (int)(i >> 20), sizeof block);
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block) return 1;
    }
    fsync(fd);
    unsigned char *map = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return 1;
    madvise(map, SIZE, MADV_RANDOM);
    const unsigned char *index = map;
    if (fixed) {
        unsigned char *heap = malloc(SIZE);
        memcpy(heap, map, SIZE);
        index = heap;
    }
    long pages = SIZE / PAGE;
    uint64_t x = 88172645463325252ull;
    double until = now_s() + 3.0;
    while (now_s() < until) {
        if (!fixed) {
            madvise(map, SIZE, MADV_DONTNEED);
            posix_fadvise(fd, 0, SIZE, POSIX_FADV_DONTNEED);
        }
        for (long i = 0; i < pages / 4; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            sink += lookup(index, (long)(x % (uint64_t)pages));
            BURN_BODY(0.01);
        }
    }
    return 0;
}
