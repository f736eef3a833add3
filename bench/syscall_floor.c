/* syscall_floor OBJ -- CMD ARGS...: attaches every program of the eBPF object OBJ (bench/syscall_floor.bpf.c),
 * runs CMD, detaches. For bench/startup_cost.sh: a command's time with the syscall tracepoints' floor. */
#include <bpf/libbpf.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: syscall_floor OBJ -- CMD ARGS...\n");
        return 2;
    }
    struct bpf_object *o = bpf_object__open_file(argv[1], NULL);
    if (!o || bpf_object__load(o)) {
        fprintf(stderr, "syscall_floor: cannot load %s\n", argv[1]);
        return 1;
    }
    struct bpf_program *p;
    bpf_object__for_each_program(p, o) {
        if (!bpf_program__attach(p)) {
            fprintf(stderr, "syscall_floor: cannot attach %s\n", bpf_program__name(p));
            return 1;
        }
    }
    pid_t c = fork();
    if (c == 0) {
        execvp(argv[3], argv + 3);
        _exit(127);
    }
    int st;
    waitpid(c, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
