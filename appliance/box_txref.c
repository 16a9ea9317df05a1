/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Transmit references of result buffers. A completed round is sent to all
 * n workers as n header mbufs chained to external mbufs that point at the
 * one result buffer; the buffer's struct box_txref counts them. The SS core
 * asks (ss_job.busy) before it starts a round over a buffer; the control
 * plane asks (box_txref_inflight) before it frees a removed job.
 */
#include <rte_branch_prediction.h>
#include <rte_eal.h>
#include <rte_mbuf.h>

#include "box.h"

static void txref_free(void *addr, void *opaque)
{
	(void)addr; /* the buffer belongs to the job; never freed through mbufs */
	(void)opaque;
}

size_t box_txref_size(void)
{
	return sizeof(struct box_txref);
}

void box_txref_init(void *txref, struct box_lcore *lc, const void *buf)
{
	struct box_txref *t = txref;

	t->iova = rte_eal_iova_mode() == RTE_IOVA_VA ? (rte_iova_t)(uintptr_t)buf
						     : rte_mem_virt2iova(buf);
	t->sh.free_cb = txref_free;
	t->sh.fcb_opaque = lc;
	rte_mbuf_ext_refcnt_set(&t->sh, 1);
}

/* On a NIC that frees transmitted mbufs lazily, push the core's queued
 * frames out and reap completions before saying the buffer is busy. */
bool box_txref_busy(void *txref)
{
	struct box_txref *t = txref;
	struct box_lcore *lc;

	if (likely(rte_mbuf_ext_refcnt_read(&t->sh) <= 1))
		return false;
	lc = t->sh.fcb_opaque;
	lc->st.busy_cleanups++;
	box_lcore_tx_reap(lc);
	return rte_mbuf_ext_refcnt_read(&t->sh) > 1;
}

bool box_txref_inflight(const void *txref)
{
	const struct box_txref *t = txref;

	return rte_mbuf_ext_refcnt_read(&t->sh) > 1;
}
