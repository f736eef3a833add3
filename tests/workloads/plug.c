/* A plugin for dlplug: loaded with dlopen, so its functions are not in the program when it starts. */
#include <stddef.h>

unsigned long plug_parse(const char *s) {
    unsigned long h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}
