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

/* What orders a tensor among the others: its key, or its collective's
 * (the pieces of one reduce-scatter or all-gather go together). */
uint64_t wk_order_key(const struct wk_tensor *t)
{
	return t->group ? t->group : t->key;
}

/*
 * (priority, key) is one total order on every rank (the ranks agree on
 * both); seq orders the partitions of one push-pull, and push-pulls of one
 * key in turn. The pieces of one sharded collective (one per rank's shard,
 * each summed at or sent from its owner's SS_GPU) go row by row, piece by
 * piece: chunk 0 of every shard, then chunk 1 of every shard, and so on.
 * Sent piece after piece, every rank would push to one owner at a time,
 * n - 1 streams into its one link while the others idle; interleaved, each
 * rank's pushes spread over all owners, and the order is still one on
 * every rank (what keeps the credit from deadlocking). With local
 * aggregation a shard is several tensors (its pieces of partition_size,
 * one root): their keys order them, else two would tie and each rank's
 * heap would put them in its own order, the ranks' credit deadlocking
 * one run in ten.
 */
bool wk_part_before(const struct wk_part *a, const struct wk_part *b)
{
	const struct wk_tensor *ta = a->op->t, *tb = b->op->t;
	uint64_t ka = wk_order_key(ta), kb = wk_order_key(tb);

	if (a->prio != b->prio)
		return a->prio < b->prio;
	if (ka != kb)
		return ka < kb;
	if (ta != tb && ta->group && tb->group) {
		if (a->op->round != b->op->round)
			return a->op->round < b->op->round;
		if (a->row != b->row)
			return a->row < b->row;
		if (ta->root != tb->root)
			return ta->root < tb->root;
		return ta->key < tb->key; /* one root's pieces (local aggregation's) */
	}
	return a->seq < b->seq;
}

/* @p into the heap @h of @n (room @cap): 0, or -1 out of memory. */
static int heap_in(struct wk_part ***h, uint32_t *n, uint32_t *cap, struct wk_part *p)
{
	uint32_t i;

	if (*n == *cap) {
		uint32_t c = *cap ? *cap * 2 : 256;
		struct wk_part **v = realloc(*h, c * sizeof(*v));

		if (!v)
			return -1;
		*h = v;
		*cap = c;
	}
	i = (*n)++;
	while (i && wk_part_before(p, (*h)[(i - 1) / 2])) {
		(*h)[i] = (*h)[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	(*h)[i] = p;
	return 0;
}

/* Element @i of heap @h of @n out. */
static void heap_out_at(struct wk_part **h, uint32_t *n, uint32_t i)
{
	struct wk_part *last = h[--*n];

	if (i == *n)
		return;
	while (i && wk_part_before(last, h[(i - 1) / 2])) { /* up, where it came from below */
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}

	for (;;) {
		uint32_t l = 2 * i + 1, m = l;

		if (l >= *n)
			break;
		if (l + 1 < *n && wk_part_before(h[l + 1], h[l]))
			m = l + 1;
		if (!wk_part_before(h[m], last))
			break;
		h[i] = h[m];
		i = m;
	}
	h[i] = last;
}

/* The top of heap @h of @n out. */
static void heap_out(struct wk_part **h, uint32_t *n)
{
	heap_out_at(h, n, 0);
}

int wk_heap_push(struct pbox *px, struct wk_part *p)
{
	return heap_in(&px->net.es.heap, &px->net.es.heap_n, &px->net.es.heap_cap, p);
}

/* The top leaves the heap (all of it sent): it no longer goes out beyond
 * the credit either. */
void wk_heap_pop(struct pbox *px)
{
	if (px->net.es.over == px->net.es.heap[0])
		px->net.es.over = NULL;
	heap_out(px->net.es.heap, &px->net.es.heap_n);
}

void wk_heap_remove(struct pbox *px, const struct wk_part *p)
{
	for (uint32_t i = 0; i < px->net.es.heap_n; i++)
		if (px->net.es.heap[i] == p) {
			if (px->net.es.over == p)
				px->net.es.over = NULL;
			heap_out_at(px->net.es.heap, &px->net.es.heap_n, i);
			return;
		}
}

/*
 * [job] leader_order: ByteScheduler's master Core. Each rank choosing its
 * own order lets a later, more urgent tensor overtake at a different point
 * on each rank (its gradients come at its own moments), and every rank
 * then holds sends whose sums wait for the others until they come back to
 * them: on full links priority cost resnet18's step 15% (docs/
 * performance.md). So rank 0 alone chooses: it sends each partition to its
 * end (a more urgent one waits at most a partition) and says which it
 * starts (ORD), and the others send their all-reduces' partitions in that
 * order, each as soon as they have it. Not the sharded collectives (their
 * turns have an order of their own), async stores (no round to wait for),
 * or local aggregation (a machine's leader pushes for it).
 */
bool wk_ordered(const struct pbox *px, const struct pbox_handle *op)
{
	const struct wk_tensor *t = op->t;

	return px->cfg.job.leader_order && px->net.n > 1 && !px->loc && t &&
	       t->kind == WK_ALLREDUCE && !t->group;
}

/* A follower's partition of an ordered push-pull, kept for rank 0's word. */
static int ord_in(struct pbox *px, struct wk_part *p)
{
	if (px->net.es.ord_n == px->net.es.ord_cap) {
		uint32_t c = px->net.es.ord_cap ? px->net.es.ord_cap * 2 : 256;
		struct wk_part **v = realloc(px->net.es.ord, c * sizeof(*v));

		if (!v)
			return -1;
		px->net.es.ord = v;
		px->net.es.ord_cap = c;
	}
	px->net.es.ord[px->net.es.ord_n++] = p;
	return 0;
}

void wk_turns_pop(struct pbox *px)
{
	heap_out(px->net.es.turns, &px->net.es.turns_n);
}

/* Whether @op's pushes are all empty (a rooted tensor whose root alone
 * has data, and this rank is not it). */
static bool all_turns(const struct pbox *px, const struct pbox_handle *op)
{
	const struct wk_tensor *t = op->t;

	return wk_root_sends(t) && t->root != px->net.rank;
}

/* A push-pull of a laid-out tensor: its partitions into the heap. */
void wk_sched_take(struct pbox *px, struct pbox_handle *op)
{
	const struct wk_tensor *t = op->t;
	/* a sharded collective's pieces: a chunk per partition, interleaved */
	uint64_t part_bytes = t->group ? px->net.chunk_size : px->net.es.part_bytes;
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
						.prio = t->prio,
						.row = p};
	}
	op->left = t->n_frags;
	for (g = g0; g < g1; g++) {
		px->net.es.frag[g].state = WK_IDLE;
		px->net.es.frag[g].op = op;
	}
	bool follow = wk_ordered(px, op) && px->net.rank != 0;

	for (uint32_t p = 0; p < op->n_parts; p++) {
		op->parts[p].seq = px->net.es.seq++;
		if (all_turns(px, op) ? heap_in(&px->net.es.turns, &px->net.es.turns_n,
						&px->net.es.turns_cap, &op->parts[p])
		    : follow	      ? ord_in(px, &op->parts[p])
				      : wk_heap_push(px, &op->parts[p]))
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
