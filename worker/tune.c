/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Online tuning of the credit and the partition size ([tuning] autotune),
 * as ByteScheduler tunes them while the job trains, with a simpler search
 * than its Bayesian one: a coordinate search over powers of two that
 * converges in a bounded number of steps.
 *
 * The measure is goodput while busy: bytes of push-pulls completed over the
 * time the engine had something to send or wait for, in windows of at
 * least WINDOW_MIN_BYTES (and four credits) and WINDOW_MIN_NS of busy time.
 * Idle time between iterations (a framework's compute) does not count.
 *
 *   credit     from the configured value, doubled while each doubling is
 *              better by TUNE_GAIN; then, if the first doubling was not,
 *              halved while that is; the best value stays
 *   partition  the same, between a chunk and 64 MiB
 *
 * then the search is over and the best values stay (pbox_tuning() and a
 * log line at info say which, with the goodput before and after). Each
 * step is one window, every value is tried once, and a direction is
 * abandoned at its first loss: at most a dozen windows per coordinate.
 * The tuned values are this rank's own: the credit and the partition
 * size only bound and order what this rank sends (the layout, the chunks
 * and the pieces of CUDA tensors keep the configured sizes, which the
 * ranks share).
 *
 * Engine thread only.
 */
#include <inttypes.h>

#include "wk_ctx.h"
#include "wk_ranks.h"
#include "wk_sched.h"
#include "wk_tune.h"

#define WINDOW_MIN_BYTES (32ull << 20)
#define WINDOW_MIN_NS	 100000000ull
#define TUNE_GAIN	 1.03
#define CREDIT_MAX	 (256ull << 20)
#define PART_MAX	 (64ull << 20)

static uint64_t *coord(struct pbox *px)
{
	return px->net.es.tune.phase == WK_TUNE_CREDIT ? &px->net.es.credit
						       : &px->net.es.part_bytes;
}

static bool in_range(const struct pbox *px, uint64_t v)
{
	if (px->net.es.tune.phase == WK_TUNE_CREDIT)
		return v >= px->net.chunk_size &&
		       v <= CREDIT_MAX; /* a chunk at least, as configured */
	return v >= px->net.chunk_size && v <= PART_MAX && v % px->net.chunk_size == 0;
}

/* This coordinate is done: its best value stays. */
static void finish(struct pbox *px)
{
	struct wk_tune *t = &px->net.es.tune;

	wk_tune_apply(px, t->phase, t->best_val);
	t->phase++;
	t->dir = 0;
	if (t->phase == WK_TUNE_DONE)
		wk_log(px, CFG_LOG_INFO,
		       "tuned after %u windows: credit %" PRIu64 " KiB, partition %" PRIu64
		       " KiB; goodput %.1f MB/s at the configured values, %.1f MB/s tuned",
		       t->windows, px->net.es.credit >> 10, px->net.es.part_bytes >> 10,
		       t->first * 1e3, t->best * 1e3);
}

/* Try @v for the next window; out of range, turn down once (when going up
 * bought nothing) or finish. */
static void next(struct pbox *px, uint64_t v)
{
	struct wk_tune *t = &px->net.es.tune;

	if (in_range(px, v)) {
		wk_tune_apply(px, t->phase, v);
		return;
	}
	if (t->dir > 0 && t->best_val == t->start) {
		t->dir = -1;
		if (in_range(px, t->start / 2)) {
			wk_tune_apply(px, t->phase, t->start / 2);
			return;
		}
	}
	finish(px);
}

void wk_tune_window(struct pbox *px, double g)
{
	struct wk_tune *t = &px->net.es.tune;
	uint64_t v = *coord(px);

	t->windows++;
	if (!t->first)
		t->first = g;
	if (t->dir == 0) { /* the coordinate's starting point, measured afresh */
		t->start = t->best_val = v;
		t->best = g;
		t->dir = 1;
		next(px, v * 2);
	} else if (g > t->best * TUNE_GAIN) {
		t->best = g;
		t->best_val = v;
		next(px, t->dir > 0 ? v * 2 : v / 2);
	} else if (t->dir > 0 && t->best_val == t->start) {
		t->dir = -1; /* up bought nothing: down once */
		next(px, t->start / 2);
	} else {
		finish(px);
	}
}

void wk_tune_turn(struct pbox *px, uint64_t now)
{
	struct wk_tune *t = &px->net.es.tune;
	bool busy =
		px->net.es.heap_n || px->net.es.ord_n || px->net.es.turns_n || px->net.es.active;

	if (!px->cfg.tuning.autotune || t->phase == WK_TUNE_DONE)
		return;
	if (busy && !t->busy_since)
		t->busy_since = now;
	if (!busy && t->busy_since) {
		t->busy_ns += now - t->busy_since;
		t->busy_since = 0;
	}
}

void wk_tune_done(struct pbox *px, uint64_t bytes, uint64_t now)
{
	struct wk_tune *t = &px->net.es.tune;
	uint64_t busy, want;

	if (!px->cfg.tuning.autotune || t->phase == WK_TUNE_DONE)
		return;
	t->bytes += bytes;
	busy = t->busy_ns + (t->busy_since ? now - t->busy_since : 0);
	want = 4 * px->net.es.credit > WINDOW_MIN_BYTES ? 4 * px->net.es.credit : WINDOW_MIN_BYTES;
	if (t->bytes < want || busy < WINDOW_MIN_NS)
		return;
	wk_tune_window(px, (double)t->bytes / (double)busy);
	t->bytes = 0;
	t->busy_ns = 0;
	t->busy_since = t->busy_since ? now : 0;
}

void wk_tune_apply(struct pbox *px, unsigned phase, uint64_t v)
{
	if (phase == WK_TUNE_CREDIT)
		wk_set_credit(px, v);
	else
		px->net.es.part_bytes = v; /* for push-pulls taken from now on */
}
