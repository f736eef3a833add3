/* SPDX-License-Identifier: GPL-2.0 */
/*
 * When a record in a BPF ring buffer wakes its reader. Every reader drains all of its rings at each step of
 * its loop, and steps at least every 100 ms; it waits (epoll) on few of them. A record wakes a reader that
 * has caught up with flags 0, which costs the traced thread an irq_work each time, and gains nothing for a
 * ring no one waits on.
 */
#ifndef WHYSLOW_RINGS_H
#define WHYSLOW_RINGS_H

/* A ring the reader drains on its own clock, never waiting on it. */
#define DRAINED_ON_ITS_CLOCK BPF_RB_NO_WAKEUP

/* A ring the reader waits on: a record wakes it only once a quarter of the ring is filled, as the clock's
 * perf rings do (its watermark): a deep stack's tails, up to 64 KB each, would fill the ring between two
 * wake-ups of the perf rings. */
static __always_inline u64 wake_flags(void *ring)
{
	u64 filled = bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA);
	return filled * 4 >= bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

#endif
