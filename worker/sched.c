/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The scheduler (ByteScheduler's, engine thread only): a push-pull is cut
 * into partitions of [tuning] partition_size, each a run of fragments, and
 * the partitions wait in one heap ordered by (priority, key, seq), so the
 * most urgent tensor's next partition always goes first and a late urgent
 * one overtakes what waits; the credit window (set here, grown and cut by
 * engine.c's congestion control) bounds what is in flight. engine.c's
 * send_new() takes from the heap's top.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "wk_ctx.h"
#include "wk_fail.h"
#include "wk_sched.h"

/* (priority, key) is one total order on every rank (the ranks agree on
 * both); seq orders the partitions of one push-pull, and push-pulls of one
 * key in turn. */
static bool part_before(const struct wk_part *a, const struct wk_part *b)
{
	uint64_t ka = a->op->t->key, kb = b->op->t->key;

	return a->prio < b->prio ||
	       (a->prio == b->prio && (ka < kb || (ka == kb && a->seq < b->seq)));
}

int wk_heap_push(struct pbox *px, struct wk_part *p)
{
	uint32_t i;

	if (px->net.es.heap_n == px->net.es.heap_cap) {
		uint32_t cap = px->net.es.heap_cap ? px->net.es.heap_cap * 2 : 256;
		struct wk_part **h = realloc(px->net.es.heap, cap * sizeof(*h));

		if (!h)
			return -1;
		px->net.es.heap = h;
		px->net.es.heap_cap = cap;
	}
	i = px->net.es.heap_n++;
	while (i && part_before(p, px->net.es.heap[(i - 1) / 2])) {
		px->net.es.heap[i] = px->net.es.heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	px->net.es.heap[i] = p;
	return 0;
}

/* The top leaves the heap (all of it sent): it no longer goes out beyond
 * the credit either. */
void wk_heap_pop(struct pbox *px)
{
	struct wk_part *last = px->net.es.heap[--px->net.es.heap_n];
	uint32_t i = 0;

	if (px->net.es.over == px->net.es.heap[0])
		px->net.es.over = NULL;
	for (;;) {
		uint32_t l = 2 * i + 1, m = l;

		if (l >= px->net.es.heap_n)
			break;
		if (l + 1 < px->net.es.heap_n &&
		    part_before(px->net.es.heap[l + 1], px->net.es.heap[l]))
			m = l + 1;
		if (!part_before(px->net.es.heap[m], last))
			break;
		px->net.es.heap[i] = px->net.es.heap[m];
		i = m;
	}
	if (px->net.es.heap_n)
		px->net.es.heap[i] = last;
}

/* A push-pull of a laid-out tensor: its partitions into the heap. */
void wk_sched_take(struct pbox *px, struct pbox_handle *op)
{
	const struct wk_tensor *t = op->t;
	uint64_t part_bytes = px->net.es.part_bytes;
	uint32_t g, g0 = t->chunk0 * px->net.fpc, g1 = g0 + t->n_chunks * px->net.fpc;

	op->n_parts = (uint32_t)((t->bytes + part_bytes - 1) / part_bytes);
	op->parts = calloc(op->n_parts, sizeof(*op->parts));
	if (!op->parts) {
		wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0, "tensor key %" PRIu64 ": out of memory",
			 t->key);
		return;
	}
	for (uint32_t p = 0; p < op->n_parts; p++) {
		uint64_t c0 = (uint64_t)p * part_bytes / px->net.chunk_size,
			 c1 = c0 + part_bytes / px->net.chunk_size;

		if (c1 > t->n_chunks)
			c1 = t->n_chunks;
		op->parts[p] = (struct wk_part){.op = op,
						.g = g0 + (uint32_t)c0 * px->net.fpc,
						.g_end = g0 + (uint32_t)c1 * px->net.fpc,
						.prio = t->prio};
	}
	op->left = t->n_frags;
	for (g = g0; g < g1; g++) {
		px->net.es.frag[g].state = WK_IDLE;
		px->net.es.frag[g].op = op;
	}
	for (uint32_t p = 0; p < op->n_parts; p++) {
		op->parts[p].seq = px->net.es.seq++;
		if (wk_heap_push(px, &op->parts[p]))
			wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0,
				 "out of memory for the scheduler");
	}
}

/* The credit, the window under it, and the timeout's floor: the
 * configured timeout, or the time to drain the credit at the rate we pace
 * at, whichever is longer: the results of a whole credit can be queued
 * ahead of a fragment's on our link (and, without pacing, its pushes too:
 * twice that). Sooner, a fragment is only queued, not lost. */
void wk_set_credit(struct pbox *px, uint64_t credit)
{
	uint64_t drain = (uint64_t)((double)credit * (px->cfg.tuning.pacing ? 8e6 : 16e6) /
				    (double)px->net.es.pace_kbps);

	px->net.es.credit = px->net.es.cwnd = px->net.es.ssthresh = credit;
	px->net.es.rto_min_ns = px->cfg.tuning.retransmit_us * 1000;
	if (drain > px->net.es.rto_min_ns)
		px->net.es.rto_min_ns = drain;
	if (px->net.es.rto_ns < px->net.es.rto_min_ns)
		px->net.es.rto_ns = px->net.es.rto_min_ns;
}
