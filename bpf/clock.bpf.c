// SPDX-License-Identifier: GPL-2.0
/*
 * Which clock samples to keep. The CPU clock is sampled by one event per CPU, not one per thread of the
 * target: a per-thread timer is stopped and started at every context switch of that thread (a few
 * microseconds each in a VM, where each reprograms the timer), which cost a server that switches often
 * more than the samples themselves. The per-CPU events see every process; this program, run by the kernel
 * at each sample before anything is copied, keeps those of the tracked processes (and their children,
 * from track.h) and drops the rest (return 0).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "track.h"

SEC("perf_event")
int keep(void *ctx)
{
	return is_tracked(bpf_get_current_pid_tgid() >> 32);
}

char LICENSE[] SEC("license") = "GPL";
