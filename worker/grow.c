/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Tensors that come after pbox_start(): a framework hands its collectives
 * tensors as it goes (PyTorch's DDP rebuilds its buckets after the first
 * iteration), so a job grows. A tensor first seen after the start is
 * agreed with every rank before any of its data moves, on the bootstrap
 * connections, by the engine thread:
 *
 *   rank r -> rank 0   NEW <seq> <key> <count> <dtype> <prio>
 *       seq: its place in this rank's order of new tensors (0, 1, ...)
 *   rank 0 -> every rank, once all n ranks said NEW for seqs [a, b) and
 *   they agree (key, count, dtype):
 *                      GREW <a> <b>
 *   or, at the first seq where they do not:
 *                      MISMATCH <what differs, naming the ranks>
 *
 * Rank 0 agrees once no NEW has come for WK_AGREE_QUIET_NS: the new tensors
 * of one iteration (a framework's buckets come in a burst) become one
 * growth, one segment per dtype, and the box's cores walk few segments.
 *
 * On GREW every rank lays the new tensors out in the same way (wk_grow: one
 * segment per dtype, chunks after the job's earlier ones, the weights of
 * the start), and rank 0 has already added the box's share to the job
 * (GROW on its control connection, admitted against the box's budget as a
 * registration is) before it says GREW: no push for the new chunks can
 * reach the box before the box has them. A rank's SS_GPU may hear a push
 * for a new chunk before that rank has read GREW: engine.c drops it
 * unanswered, and the sender's resend finds it laid out.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbox_int.h"

#define WK_AGREE_QUIET_NS 3000000ull

int wk_grow(struct pbox *px, struct wk_tensor *const *ts, uint32_t n, uint64_t deadline, char *msg,
	    size_t cap)
{
	struct wk_tensor **group = malloc((n ? n : 1) * sizeof(*group));
	uint32_t *base = calloc(px->n_units, sizeof(uint32_t)),
		 *count = calloc(px->n_units, sizeof(uint32_t));
	int rc = PBOX_OK;

	if (!group || !base || !count) {
		snprintf(msg, cap, "out of memory");
		rc = PBOX_ENOMEM;
		goto out;
	}
	for (unsigned d = 0; d < SUM_DTYPE_COUNT && rc == PBOX_OK; d++) {
		uint32_t m = 0, on_box = 0;

		for (uint32_t i = 0; i < n; i++)
			if (ts[i]->dtype == d)
				group[m++] = ts[i];
		if (!m)
			continue;
		rc = wk_layout_add(px, group, m, base, count);
		if (rc) {
			snprintf(msg, cap, "%s", pbox_last_error());
			break;
		}
		px->segments++;
		for (uint32_t e = 0; e < px->n_eps; e++)
			on_box += count[e];
		if (px->rank == 0 && on_box && px->box_fd >= 0 &&
		    wk_box_segment(px, (uint8_t)d, base, count, deadline, msg, cap))
			rc = PBOX_EBOX;
	}
out:
	free(group);
	free(base);
	free(count);
	return rc;
}

/* Rank 0: the row of seq @s, rows growing as needed; NULL when out of memory. */
static struct wk_ag *ag_row(struct pbox *px, uint32_t s)
{
	uint32_t row = s - px->applied;

	if (row >= px->ag_rows) {
		if (row >= px->ag_cap) {
			uint32_t cap = px->ag_cap ? px->ag_cap * 2 : 16;
			struct wk_ag *v;

			while (cap <= row)
				cap *= 2;
			v = realloc(px->ag, (size_t)cap * px->n * sizeof(*v));
			if (!v)
				return NULL;
			px->ag = v;
			px->ag_cap = cap;
		}
		memset(&px->ag[(size_t)px->ag_rows * px->n], 0,
		       (size_t)(row + 1 - px->ag_rows) * px->n * sizeof(*px->ag));
		px->ag_rows = row + 1;
	}
	return &px->ag[(size_t)row * px->n];
}

static void record(struct pbox *px, uint32_t rank, uint32_t s, const struct wk_ag *a)
{
	struct wk_ag *row;

	if (s < px->applied) /* a repeat: ignored */
		return;
	row = ag_row(px, s);
	if (!row) {
		wk_fail(px, PBOX_ENOMEM, "out of memory agreeing on new tensors");
		return;
	}
	row[rank] = *a;
	row[rank].have = true;
	px->ag_last_ns = wk_now();
}

/* The new tensors [a, b) of this rank, laid out; their parked push-pulls go. */
static void apply(struct pbox *px, uint32_t a, uint32_t b)
{
	struct wk_tensor **ts = malloc((b - a) * sizeof(*ts));
	char msg[WK_ERR_LEN];
	int rc;

	if (!ts) {
		wk_fail(px, PBOX_ENOMEM, "out of memory laying out new tensors");
		return;
	}
	pthread_mutex_lock(&px->mu);
	memcpy(ts, &px->newt[a], (b - a) * sizeof(*ts));
	pthread_mutex_unlock(&px->mu);
	rc = wk_grow(px, ts, b - a, wk_now() + px->deadline_ns, msg, sizeof(msg));
	if (rc) {
		free(ts);
		wk_fail(px, rc, "new tensors %u to %u: %s", a, b - 1, msg);
		return;
	}
	px->applied = b;
	for (uint32_t i = 0; i < b - a; i++)
		if (ts[i]->parked) {
			struct pbox_handle *op = ts[i]->parked;

			ts[i]->parked = NULL;
			wk_engine_take(px, op);
		}
	free(ts);
}

/* Rank 0: how the ranks' words on one new tensor differ, or "" when they
 * do not. */
static void disagree(const struct pbox *px, uint32_t s, const struct wk_ag *row, char *msg,
		     size_t cap)
{
	const struct wk_ag *z = &row[0];

	msg[0] = 0;
	for (uint32_t r = 1; r < px->n; r++) {
		const struct wk_ag *o = &row[r];
		const char *what = o->key != z->key	  ? "keys"
				   : o->count != z->count ? "element counts"
				   : o->dtype != z->dtype ? "dtypes"
							  : NULL;

		if (!what)
			continue;
		snprintf(msg, cap,
			 "ranks disagree on new tensor %u (the %u%s tensor first used after "
			 "pbox_start()): rank 0 has key %" PRIu64 ", %" PRIu64 " elements of %s; "
			 "rank %u has key %" PRIu64 ", %" PRIu64 " elements of %s: the %s differ",
			 s, s + 1,
			 (s + 1) % 10 == 1 && (s + 1) % 100 != 11   ? "st"
			 : (s + 1) % 10 == 2 && (s + 1) % 100 != 12 ? "nd"
			 : (s + 1) % 10 == 3 && (s + 1) % 100 != 13 ? "rd"
								    : "th",
			 z->key, z->count, sum_dtype_name((enum sum_dtype)z->dtype), r, o->key,
			 o->count, sum_dtype_name((enum sum_dtype)o->dtype), what);
		return;
	}
}

/* Rank 0: the leading seqs every rank has spoken for, agreed or not. */
static void agree(struct pbox *px)
{
	uint32_t rows = 0, a = px->applied;
	char msg[WK_ERR_LEN];

	while (rows < px->ag_rows) {
		const struct wk_ag *row = &px->ag[(size_t)rows * px->n];
		uint32_t r;

		for (r = 0; r < px->n && row[r].have; r++)
			;
		if (r < px->n)
			break;
		disagree(px, a + rows, row, msg, sizeof(msg));
		if (msg[0]) {
			for (r = 1; r < px->n; r++)
				if (px->peer_fd[r] >= 0)
					wk_line_send(px->peer_fd[r], "MISMATCH %s", msg);
			wk_fail(px, PBOX_EMISMATCH, "%s", msg);
			return;
		}
		rows++;
	}
	if (!rows)
		return;
	memmove(px->ag, &px->ag[(size_t)rows * px->n],
		(size_t)(px->ag_rows - rows) * px->n * sizeof(*px->ag));
	px->ag_rows -= rows;
	apply(px, a, a + rows); /* the box first: then the ranks may push */
	if (px->fail)
		return;
	for (uint32_t r = 1; r < px->n; r++)
		if (px->peer_fd[r] >= 0)
			wk_line_send(px->peer_fd[r], "GREW %u %u", a, a + rows);
}

void wk_grow_poll(struct pbox *px)
{
	uint32_t n_new;

	pthread_mutex_lock(&px->mu);
	n_new = px->n_new;
	pthread_mutex_unlock(&px->mu);
	if (px->rank == 0 && px->ag_rows && !px->fail &&
	    wk_now() - px->ag_last_ns >= WK_AGREE_QUIET_NS)
		agree(px);
	if (n_new == px->announced || px->fail)
		return;
	while (px->announced < n_new && !px->fail) {
		struct wk_tensor *t;
		struct wk_ag a;

		pthread_mutex_lock(&px->mu);
		t = px->newt[px->announced];
		pthread_mutex_unlock(&px->mu);
		a = (struct wk_ag){
			.key = t->key, .count = t->count, .prio = t->prio, .dtype = t->dtype};
		if (px->rank == 0)
			record(px, 0, t->seq, &a);
		else if (px->peer_fd[0] >= 0)
			wk_line_send(px->peer_fd[0], "NEW %u %" PRIu64 " %" PRIu64 " %s %d", t->seq,
				     t->key, t->count, sum_dtype_name((enum sum_dtype)t->dtype),
				     t->prio);
		px->announced++;
	}
	if (px->n == 1)
		apply(px, px->applied, n_new);
}

int wk_grow_line(struct pbox *px, uint32_t from, const char *line)
{
	unsigned s, b;
	struct wk_ag a;

	if (px->rank == 0 && strncmp(line, "NEW ", 4) == 0) {
		char dt[8];
		int prio, d;

		if (sscanf(line, "NEW %u %" SCNu64 " %" SCNu64 " %7s %d", &s, &a.key, &a.count, dt,
			   &prio) != 5 ||
		    (d = nic_dtype_parse(dt)) < 0) {
			wk_fail(px, PBOX_EPEER, "rank %u sent '%.80s'", from, line);
			return 1;
		}
		a.dtype = (uint8_t)d;
		a.prio = prio;
		record(px, from, s, &a);
		return 1;
	}
	if (px->rank != 0 && strncmp(line, "MISMATCH ", 9) == 0) {
		wk_fail(px, PBOX_EMISMATCH, "%s", line + 9);
		return 1;
	}
	if (px->rank != 0 && sscanf(line, "GREW %u %u", &s, &b) == 2) {
		if (s != px->applied || b <= s || b > px->announced)
			wk_fail(px, PBOX_EPEER,
				"rank 0 agreed on new tensors %u to %u, but this rank has laid out "
				"%u and used %u",
				s, b - 1, px->applied, px->announced);
		else
			apply(px, s, b);
		return 1;
	}
	return 0;
}
