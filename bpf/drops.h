/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a program could not record, counted in `drops` (user space sums every slot of every CPU's row):
 * never a silent loss. A program with several kinds of loss defines DROP_SLOTS before including this file.
 * The counters are a global in .bss, which user space reads through its mapping of it: no syscall per
 * read (a recorder reads them at every drain of its rings). Each CPU adds to its own row, a cache line
 * of its own; CPUs past DROP_CPUS share rows, which the atomic add keeps exact.
 */
#ifndef WHYSLOW_DROPS_H
#define WHYSLOW_DROPS_H

#ifndef DROP_SLOTS
#define DROP_SLOTS 1
#endif
#define DROP_CPUS 256 /* a power of two */
#define DROP_ROW 8    /* u64s per row: a cache line; DROP_SLOTS <= DROP_ROW */

u64 drops[DROP_CPUS][DROP_ROW];

static __always_inline void drop(u32 slot)
{
	u32 cpu = bpf_get_smp_processor_id() & (DROP_CPUS - 1);
	__sync_fetch_and_add(&drops[cpu][slot & (DROP_ROW - 1)], 1);
}

#endif
