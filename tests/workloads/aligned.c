/* Aligned allocations with exactly known counts: `aligned posix` makes 5 posix_memalign(16, 100) and one
 * stdio buffer (the first printf: 1024 bytes on a pipe or file); `aligned memalign` makes 10
 * memalign(16, 128) and the same buffer. glibc's aligned allocators call malloc for alignments it gives
 * anyway: each is still one allocation. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    void *p[10];
    int posix = argc > 1 && strcmp(argv[1], "posix") == 0;
    int n = posix ? 5 : 10;
    for (int i = 0; i < n; i++) {
        if (posix) {
            if (posix_memalign(&p[i], 16, 100) != 0) return 1;
        } else {
            p[i] = memalign(16, 128);
        }
    }
    printf("%d aligned allocations\n", n);
    for (int i = 0; i < n; i++) free(p[i]);
    return 0;
}
