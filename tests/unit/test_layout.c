/* SPDX-License-Identifier: BSD-3-Clause */
/* The unified layout: Theorem 1 shares, exact proportions, balance; the
 * model size lists. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"
#include "models.h"
#include "test.h"

#define W_KBPS 1000000ull /* 1 Gb/s workers */

/* Box of @n_eps endpoints with @rel weights (relative) adding up to k·w. */
static void box_kbps(double k, uint32_t n_eps, const unsigned *rel, uint64_t *kbps)
{
	unsigned sum = 0;

	for (uint32_t e = 0; e < n_eps; e++)
		sum += rel[e];
	for (uint32_t e = 0; e < n_eps; e++)
		kbps[e] = (uint64_t)llround(k * W_KBPS * rel[e] / sum);
}

struct run {
	uint32_t n_units, *unit_of, *local_of, *count;
	uint64_t *w, *bytes;
};

static void assign_mode(struct run *r, enum lay_mode mode, uint32_t n, double k, uint32_t n_eps,
			const unsigned *rel, const uint32_t *chunk_bytes, uint32_t n_chunks)
{
	uint64_t kbps[8];
	struct lay_in in = {.n = n,
			    .worker_kbps = W_KBPS,
			    .n_eps = k > 0 ? n_eps : 0,
			    .ep_kbps = kbps,
			    .mode = mode};

	box_kbps(k, n_eps, rel, kbps);
	r->n_units = in.n_eps + n;
	r->w = calloc(r->n_units, sizeof(uint64_t));
	r->bytes = calloc(r->n_units, sizeof(uint64_t));
	r->count = calloc(r->n_units, sizeof(uint32_t));
	r->unit_of = malloc(n_chunks * sizeof(uint32_t));
	r->local_of = malloc(n_chunks * sizeof(uint32_t));
	ck_assert_ptr_nonnull(r->local_of);
	lay_weights(&in, r->w);
	ck_assert_int_eq(lay_assign(r->w, NULL, r->n_units, chunk_bytes, n_chunks, r->unit_of,
				    r->local_of, r->count),
			 0);
	for (uint32_t c = 0; c < n_chunks; c++)
		r->bytes[r->unit_of[c]] += chunk_bytes[c];
}

static void assign(struct run *r, uint32_t n, double k, uint32_t n_eps, const unsigned *rel,
		   const uint32_t *chunk_bytes, uint32_t n_chunks)
{
	assign_mode(r, LAY_UNIFIED, n, k, n_eps, rel, chunk_bytes, n_chunks);
}

static void run_free(struct run *r)
{
	free(r->w);
	free(r->bytes);
	free(r->count);
	free(r->unit_of);
	free(r->local_of);
}

/* Every (n, k) with n = 2..64 and k = 0..n+2 in steps of 0.5: the weights
 * are Theorem 1's shares, and the assignment of a 128 MiB model gives every
 * unit (each box endpoint, each SS_GPU) its share within two chunks. */
START_TEST(test_shares_match_theorem1)
{
	enum { CHUNKS = 4096, CHUNK = 32768 };
	static const unsigned rel[2] = {1, 1};
	uint32_t *cb = malloc(CHUNKS * sizeof(uint32_t));
	const double M = (double)CHUNKS * CHUNK;
	unsigned combos = 0;

	for (uint32_t c = 0; c < CHUNKS; c++)
		cb[c] = CHUNK;
	for (uint32_t n = 2; n <= 64; n++)
		for (double k = 0; k <= n + 2; k += 0.5) {
			struct run r;
			uint32_t eps = k > 0 ? 2 : 0;
			double wsum = 0, box_w = 0;

			assign(&r, n, k, 2, rel, cb, CHUNKS);
			for (uint32_t u = 0; u < r.n_units; u++)
				wsum += (double)r.w[u];
			for (uint32_t e = 0; e < eps; e++) {
				box_w += (double)r.w[e];
			}
			/* the weights are the formula */
			ck_assert_msg(fabs(box_w / wsum - lay_box_share(n, k, LAY_UNIFIED)) < 1e-9,
				      "n=%u k=%.1f: box weight %.9f, Theorem 1 %.9f", n, k,
				      box_w / wsum, lay_box_share(n, k, LAY_UNIFIED));
			for (uint32_t q = 0; q < n; q++)
				ck_assert_msg(fabs((double)r.w[eps + q] / wsum -
						   lay_ssgpu_share(n, k, LAY_UNIFIED)) < 1e-9,
					      "n=%u k=%.1f: SS_GPU %u weight off", n, k, q);
			/* and the chunks follow, within two chunks per unit */
			for (uint32_t e = 0; e < eps; e++)
				ck_assert_msg(
					fabs((double)r.bytes[e] -
					     lay_box_share(n, k, LAY_UNIFIED) * M / 2) <= 2 * CHUNK,
					"n=%u k=%.1f: box endpoint %u got %llu bytes, Theorem 1 "
					"%.0f",
					n, k, e, (unsigned long long)r.bytes[e],
					lay_box_share(n, k, LAY_UNIFIED) * M / 2);
			for (uint32_t q = 0; q < n; q++)
				ck_assert_msg(
					fabs((double)r.bytes[eps + q] -
					     lay_ssgpu_share(n, k, LAY_UNIFIED) * M) <= 2 * CHUNK,
					"n=%u k=%.1f: SS_GPU %u got %llu bytes, Theorem 1 %.0f", n,
					k, q, (unsigned long long)r.bytes[eps + q],
					lay_ssgpu_share(n, k, LAY_UNIFIED) * M);
			run_free(&r);
			combos++;
		}
	ck_assert_uint_eq(combos, 63 * 5 + 2 * (63 * 64 / 2 + 63)); /* sum of (2n+5) */
	free(cb);
}
END_TEST

/* The limits: no box is all-reduce (equal SS_GPUs), k >= n is all box. */
START_TEST(test_limits)
{
	static const unsigned rel[2] = {1, 1};
	uint32_t cb[64];
	struct run r;

	for (int i = 0; i < 64; i++)
		cb[i] = 32768;
	assign(&r, 4, 0, 2, rel, cb, 64);
	ck_assert_uint_eq(r.n_units, 4);
	for (int q = 0; q < 4; q++)
		ck_assert_uint_eq(r.count[q], 16);
	run_free(&r);
	assign(&r, 4, 4, 2, rel, cb, 64);
	ck_assert_uint_eq(r.count[0] + r.count[1], 64);
	run_free(&r);
	assign(&r, 4, 6, 2, rel, cb, 64);
	ck_assert_uint_eq(r.count[0], 32);
	ck_assert_uint_eq(r.count[1], 32);
	run_free(&r);
	ck_assert(lay_box_share(4, 0, LAY_UNIFIED) == 0 &&
		  lay_ssgpu_share(4, 0, LAY_UNIFIED) == 0.25);
	ck_assert(lay_box_share(4, 6, LAY_UNIFIED) == 1 && lay_ssgpu_share(4, 6, LAY_UNIFIED) == 0);
}
END_TEST

/* [tuning] layout = ps: every chunk on the box, endpoints by bandwidth,
 * at any k; ssgpu: the SS_GPUs share equally and the box gets nothing, at
 * any k. The shares reported follow the mode. */
START_TEST(test_modes)
{
	static const unsigned rel[2] = {1, 3};
	uint32_t cb[64];
	struct run r;

	for (int i = 0; i < 64; i++)
		cb[i] = 32768;
	for (double k = 0.5; k <= 6; k += 0.5) {
		assign_mode(&r, LAY_PS, 4, k, 2, rel, cb, 64);
		ck_assert_uint_eq(r.count[0], 16);
		ck_assert_uint_eq(r.count[1], 48);
		for (int q = 0; q < 4; q++)
			ck_assert_uint_eq(r.count[2 + q], 0);
		run_free(&r);
		ck_assert(lay_box_share(4, k, LAY_PS) == 1 && lay_ssgpu_share(4, k, LAY_PS) == 0);
		assign_mode(&r, LAY_SSGPU, 4, k, 2, rel, cb, 64);
		ck_assert_uint_eq(r.count[0] + r.count[1], 0);
		for (int q = 0; q < 4; q++)
			ck_assert_uint_eq(r.count[2 + q], 16);
		run_free(&r);
		ck_assert(lay_box_share(4, k, LAY_SSGPU) == 0 &&
			  lay_ssgpu_share(4, k, LAY_SSGPU) == 0.25);
	}
	ck_assert_str_eq(lay_mode_name(LAY_UNIFIED), "unified");
	ck_assert_str_eq(lay_mode_name(LAY_PS), "ps");
	ck_assert_str_eq(lay_mode_name(LAY_SSGPU), "ssgpu");
	ck_assert_str_eq(lay_mode_name((enum lay_mode)7), "?");
}
END_TEST

/* A box endpoint's memory caps its chunks (lay_fit(), lay_assign()'s cap):
 * n = 4, k = 2, two endpoints, 4096 chunks, of which Theorem 1 gives the box
 * 60%. Capped at 500 chunks each, the endpoints take 500 (the weights made
 * so; the round robin never passes them), spread over the whole batch, and
 * the SS_GPUs share the rest equally; caps above the shares change
 * nothing; an endpoint with no room takes nothing. At k >= n (the box takes
 * everything), a full box spills the rest to the SS_GPUs, or, under
 * [tuning] layout = ps, fails. */
START_TEST(test_box_room)
{
	enum { CHUNKS = 4096 };
	static const unsigned rel[2] = {1, 1};
	uint32_t *cb = malloc(CHUNKS * sizeof(uint32_t)), cap[6], count[6], half[6] = {0};
	uint32_t *unit_of = malloc(CHUNKS * sizeof(uint32_t)), *local = malloc(CHUNKS * 4);
	uint64_t kbps[2], w[6], w0[6];
	struct lay_in in = {.n = 4, .worker_kbps = W_KBPS, .n_eps = 2, .ep_kbps = kbps};
	struct run r;

	ck_assert_ptr_nonnull(local);
	for (uint32_t c = 0; c < CHUNKS; c++)
		cb[c] = c % 7 ? 32768 : 1000; /* some tensors' short last chunks */
	box_kbps(2, 2, rel, kbps);
	lay_weights(&in, w0);
	for (int u = 0; u < 6; u++)
		cap[u] = u < 2 ? 500 : UINT32_MAX;
	memcpy(w, w0, sizeof(w));
	ck_assert_int_eq(lay_fit(w, cap, 6, CHUNKS, 1), 0);
	ck_assert(w[0] < w0[0] && w[1] < w0[1] && w[2] == w0[2] && w[5] == w0[5]);
	ck_assert_int_eq(lay_assign(w, cap, 6, cb, CHUNKS, unit_of, local, count), 0);
	for (uint32_t c = CHUNKS / 2; c < CHUNKS; c++)
		half[unit_of[c]]++;
	for (int u = 0; u < 2; u++) {
		ck_assert_uint_le(count[u], 500);
		ck_assert_uint_ge(count[u], 498);
		ck_assert_msg(half[u] >= 240 && half[u] <= 260,
			      "endpoint %d: %u of its chunks in the "
			      "second half",
			      u, half[u]);
	}
	for (int u = 2; u < 6; u++)
		ck_assert_msg(count[u] + 2 >= (CHUNKS - count[0] - count[1]) / 4 &&
				      count[u] <= (CHUNKS - count[0] - count[1]) / 4 + 2,
			      "SS_GPU %d: %u chunks", u - 2, count[u]);
	for (uint32_t c = 0; c < CHUNKS; c++) /* each unit's chunks numbered in order */
		ck_assert_uint_lt(local[c], count[unit_of[c]]);

	/* caps above the shares: Theorem 1's assignment, chunk for chunk */
	assign(&r, 4, 2, 2, rel, cb, CHUNKS);
	cap[0] = cap[1] = 5000;
	memcpy(w, w0, sizeof(w));
	ck_assert_int_eq(lay_fit(w, cap, 6, CHUNKS, 1), 0);
	ck_assert_mem_eq(w, w0, sizeof(w));
	ck_assert_int_eq(lay_assign(w, cap, 6, cb, CHUNKS, unit_of, local, count), 0);
	ck_assert_mem_eq(unit_of, r.unit_of, CHUNKS * sizeof(uint32_t));
	run_free(&r);

	/* no room on endpoint 0 */
	cap[0] = 0;
	memcpy(w, w0, sizeof(w));
	ck_assert_int_eq(lay_fit(w, cap, 6, CHUNKS, 1), 0);
	ck_assert_int_eq(lay_assign(w, cap, 6, cb, CHUNKS, unit_of, local, count), 0);
	ck_assert_uint_eq(count[0], 0);
	ck_assert_uint_eq(count[0] + count[1] + count[2] + count[3] + count[4] + count[5], CHUNKS);

	/* k = 6 >= n: all on the box, which holds 1000 of 4096 */
	box_kbps(6, 2, rel, kbps);
	lay_weights(&in, w0);
	ck_assert(w0[2] == 0 && w0[0] > 0);
	cap[0] = cap[1] = 500;
	memcpy(w, w0, sizeof(w));
	ck_assert_int_eq(lay_fit(w, cap, 6, CHUNKS, 1), 0);
	ck_assert_int_eq(lay_assign(w, cap, 6, cb, CHUNKS, unit_of, local, count), 0);
	ck_assert(count[0] >= 498 && count[0] <= 500 && count[1] >= 498 && count[1] <= 500);
	for (int u = 2; u < 6; u++)
		ck_assert_uint_ge(count[u], (CHUNKS - 1000) / 4 - 2);
	memcpy(w, w0, sizeof(w));
	ck_assert_int_eq(lay_fit(w, cap, 6, CHUNKS, 0), -1); /* layout = ps */
	/* the round robin itself: no unit with room left */
	ck_assert_int_eq(lay_assign(w0, cap, 6, cb, CHUNKS, unit_of, local, count), -1);
	free(cb);
	free(unit_of);
	free(local);
}
END_TEST

/* BERT-large, fp32, in 32 KiB chunks: units of equal weight get bytes
 * within 1% of each other; box endpoints weighted 1:2:3 within 1% per unit
 * of weight. Only where every unit holds at least 200 chunks ("large"). */
START_TEST(test_balance_large_model)
{
	static const unsigned rel[3] = {1, 2, 3};
	static const uint32_t ns[] = {2, 4, 8, 16, 32, 64};
	struct model m;
	uint32_t *cb, n_chunks = 0, checked = 0;

	ck_assert_int_eq(model_get("bert-large", &m), 0);
	for (uint32_t i = 0; i < m.n; i++)
		n_chunks += (uint32_t)((m.count[i] * 4 + 32767) / 32768);
	cb = malloc(n_chunks * sizeof(uint32_t));
	n_chunks = 0;
	for (uint32_t i = 0; i < m.n; i++)
		for (uint64_t b = m.count[i] * 4; b; b -= b > 32768 ? 32768 : b)
			cb[n_chunks++] = (uint32_t)(b > 32768 ? 32768 : b);
	for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
		const double ks[] = {0, 1, ns[a] / 2.0, ns[a] - 0.5, (double)ns[a]};

		for (size_t b = 0; b < sizeof(ks) / sizeof(ks[0]); b++) {
			uint32_t n = ns[a], eps = ks[b] > 0 ? 3 : 0;
			double lo = 1e300, hi = 0, elo = 1e300, ehi = 0;
			struct run r;

			assign(&r, n, ks[b], 3, rel, cb, n_chunks);
			for (uint32_t q = 0; q < n && r.w[eps]; q++) {
				lo = fmin(lo, (double)r.bytes[eps + q]);
				hi = fmax(hi, (double)r.bytes[eps + q]);
			}
			for (uint32_t e = 0; e < eps && r.w[0]; e++) {
				elo = fmin(elo, (double)r.bytes[e] / rel[e]);
				ehi = fmax(ehi, (double)r.bytes[e] / rel[e]);
			}
			if (r.w[eps] && lay_ssgpu_share(n, ks[b], LAY_UNIFIED) * n_chunks >= 200) {
				ck_assert_msg(hi / lo <= 1.01, "n=%u k=%.1f: SS_GPU max/min %.4f",
					      n, ks[b], hi / lo);
				checked++;
			}
			if (eps && lay_box_share(n, ks[b], LAY_UNIFIED) * n_chunks / 6 >= 200) {
				ck_assert_msg(ehi / elo <= 1.01,
					      "n=%u k=%.1f: box endpoints max/min per weight %.4f",
					      n, ks[b], ehi / elo);
				checked++;
			}
			run_free(&r);
		}
	}
	ck_assert_uint_ge(checked, 30);
	free(cb);
	model_free(&m);
}
END_TEST

/* Deterministic: the same inputs give the same assignment, byte for byte. */
START_TEST(test_deterministic)
{
	static const unsigned rel[2] = {3, 5};
	uint32_t cb[5000];
	struct run a, b;

	for (int i = 0; i < 5000; i++)
		cb[i] = (uint32_t)(i % 7 == 6 ? 1000 + i : 32768);
	assign(&a, 8, 2.5, 2, rel, cb, 5000);
	assign(&b, 8, 2.5, 2, rel, cb, 5000);
	ck_assert_mem_eq(a.unit_of, b.unit_of, 5000 * sizeof(uint32_t));
	ck_assert_mem_eq(a.local_of, b.local_of, 5000 * sizeof(uint32_t));
	/* local indices number each unit's chunks 0, 1, 2, ... in order */
	for (uint32_t u = 0; u < a.n_units; u++) {
		uint32_t next = 0;

		for (int c = 0; c < 5000; c++)
			if (a.unit_of[c] == u)
				ck_assert_uint_eq(a.local_of[c], next++);
		ck_assert_uint_eq(next, a.count[u]);
	}
	run_free(&a);
	run_free(&b);
}
END_TEST

START_TEST(test_models)
{
	static const struct {
		const char *name;
		uint64_t params;
		uint32_t tensors;
	} want[] = {{"resnet50", 25557032, 161},
		    {"vgg16", 138357544, 32},
		    {"bert-large", 335141888, 391}};
	struct model m;

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		ck_assert_int_eq(model_get(want[i].name, &m), 0);
		ck_assert_uint_eq(m.total, want[i].params);
		ck_assert_uint_eq(m.n, want[i].tensors);
		model_free(&m);
	}
	ck_assert_int_eq(model_get("alexnet", &m), -1);
}
END_TEST

Suite *layout_suite(void)
{
	Suite *s = suite_create("layout");
	TCase *tc = tcase_create("layout");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_shares_match_theorem1);
	tcase_add_test(tc, test_limits);
	tcase_add_test(tc, test_modes);
	tcase_add_test(tc, test_box_room);
	tcase_add_test(tc, test_balance_large_model);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_models);
	suite_add_tcase(s, tc);
	return s;
}
