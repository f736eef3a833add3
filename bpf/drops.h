/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a program could not record, counted per CPU in `drops` (user space sums every slot of every CPU):
 * never a silent loss. A program with several kinds of loss defines DROP_SLOTS before including this file.
 */
#ifndef WHYSLOW_DROPS_H
#define WHYSLOW_DROPS_H

#ifndef DROP_SLOTS
#define DROP_SLOTS 1
#endif

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DROP_SLOTS);
	__type(key, u32);
	__type(value, u64);
} drops SEC(".maps");

static __always_inline void drop(u32 slot)
{
	u64 *n = bpf_map_lookup_elem(&drops, &slot);
	if (n)
		*n += 1;
}

#endif
