// SPDX-License-Identifier: GPL-2.0
/* The floor of exact syscall counting (bench/startup_cost.sh): two programs on the syscall tracepoints
 * that do nothing. What they cost a program is what any counter of every syscall pays on this kernel
 * before it counts anything: the syscall tracepoints' slow path and two program dispatches. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("tp_btf/sys_enter")
int BPF_PROG(floor_enter, struct pt_regs *regs, long id)
{
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(floor_exit, struct pt_regs *regs, long ret)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
