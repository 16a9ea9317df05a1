/* SPDX-License-Identifier: BSD-3-Clause */
/* ByteComp's decision algorithm (decide.h): the model's timeline, then
 * Algorithms 1 and 2, and the brute force they are measured against. */
#include "decide.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Algorithm 2 tries every combination up to this many, then settles each
 * group's count in turn (twice over) instead. */
#define DC_COMBOS_MAX 65536u

/* What one timeline leaves beside F(S). */
struct ws {
	const struct dc_model *m;
	double *avail, *net_end;
	uint32_t *order;
	double cut; /* the last bubble's start on the link (-1: none) */
};

static double enc(const struct dc_model *m, unsigned w, uint64_t bytes)
{
	return m->cost[w].enc_a + m->cost[w].enc_b * (double)bytes;
}

static double dec(const struct dc_model *m, unsigned w, uint64_t bytes)
{
	return m->cost[w].dec_a + m->cost[w].dec_b * (double)bytes;
}

static const struct ws *sort_ws; /* qsort's context: one thread decides at a time */

static int by_avail(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	double x = sort_ws->avail[i], y = sort_ws->avail[j];

	return x < y ? -1 : x > y ? 1 : (i > j) - (i < j);
}

/* Whether choice @w encodes the push on its resource, and decodes the sum
 * there. */
static bool enc_push(uint8_t w)
{
	return dc_res(w) != DC_SEND && !(w & DC_SUM_ONLY);
}

static bool dec_sum(uint8_t w)
{
	return dc_res(w) != DC_SEND && !(w & DC_PUSH_ONLY);
}

static double timeline(struct ws *s, const uint8_t *w)
{
	const struct dc_model *m = s->m;
	double dev = 0, cpu = 0, up = 0, down = 0, cpu_dec = 0, end;
	uint32_t i, k;

	for (i = 0; i < m->n; i++) {
		dev += m->compute_s[i];
		if (enc_push(w[i]) && dc_res(w[i]) == DC_DEVICE) { /* takes the device from the
								    * next layers' backward */
			dev += enc(m, DC_DEVICE, m->bytes[i]);
			s->avail[i] = dev;
		} else if (enc_push(w[i])) {
			cpu = (cpu > dev ? cpu : dev) + enc(m, DC_CPU, m->bytes[i]);
			s->avail[i] = cpu;
		} else {
			s->avail[i] = dev;
		}
		s->order[i] = i;
	}
	end = dev;
	sort_ws = s;
	qsort(s->order, m->n, sizeof(*s->order), by_avail);
	s->cut = -1;
	for (k = 0; k < m->n; k++) {
		double start, b = (double)m->bytes[i = s->order[k]], done;
		unsigned r = dc_res(w[i]);

		start = up > s->avail[i] ? up : s->avail[i];
		if (k > 0 && start > up)
			s->cut = up; /* the link waited: a bubble */
		up = start + m->net_a + m->net_b * b * (enc_push(w[i]) ? m->wire_ratio : 1.0);
		s->net_end[i] = up;
		down = (down > start ? down : start) +
		       m->net_b * b * (dec_sum(w[i]) ? m->wire_ratio : 1.0);
		down = down > up ? down : up;
		done = down;
		if (dec_sum(w[i]) && r == DC_DEVICE) {
			done += dec(m, DC_DEVICE, m->bytes[i]);
		} else if (dec_sum(w[i])) {
			cpu_dec = (cpu_dec > down ? cpu_dec : down) + dec(m, DC_CPU, m->bytes[i]);
			done = cpu_dec;
		}
		if (done > end)
			end = done;
	}
	return end + m->forward_s;
}

static int ws_init(struct ws *s, const struct dc_model *m)
{
	s->m = m;
	s->avail = calloc(m->n + 1, sizeof(double));
	s->net_end = calloc(m->n + 1, sizeof(double));
	s->order = calloc(m->n + 1, sizeof(uint32_t));
	if (s->avail && s->net_end && s->order)
		return 0;
	free(s->avail);
	free(s->net_end);
	free(s->order);
	return -ENOMEM;
}

static void ws_free(struct ws *s)
{
	free(s->avail);
	free(s->net_end);
	free(s->order);
}

double dc_time(const struct dc_model *m, const uint8_t *where)
{
	struct ws s;
	double t;

	if (ws_init(&s, m))
		return -1;
	t = timeline(&s, where);
	ws_free(&s);
	return t;
}

/* Property #1: an uncompressed tensor sent before the step's last bubble
 * gains nothing from compression (the gap only widens): ruled out. */
static void rule_out(struct ws *s, const uint8_t *w, uint8_t *out)
{
	timeline(s, w);
	for (uint32_t i = 0; i < s->m->n; i++)
		if (w[i] == DC_SEND && s->cut >= 0 && s->net_end[i] <= s->cut)
			out[i] = 1;
}

static const struct dc_model *sort_m;

/* Property #2: larger first; of one size, the closer to the output first. */
static int by_size(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	uint64_t x = sort_m->bytes[i], y = sort_m->bytes[j];

	return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

/* Lemma 1's order: by size, and of one size the farthest from the output
 * (the last in backward order) first. */
static int by_size_far(const void *a, const void *b)
{
	uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
	uint64_t x = sort_m->bytes[i], y = sort_m->bytes[j];

	return x > y ? -1 : x < y ? 1 : (i < j) - (i > j);
}

/* The options of resource @r: both directions compressed, and with
 * one_way each alone. How many. */
static unsigned options(const struct dc_model *m, unsigned r, uint8_t *opt)
{
	opt[0] = (uint8_t)r;
	if (!m->one_way)
		return 1;
	opt[1] = (uint8_t)(r | DC_PUSH_ONLY);
	opt[2] = (uint8_t)(r | DC_SUM_ONLY);
	return 3;
}

/* Algorithm 1 on resource @r. */
static void algorithm1(struct ws *s, unsigned r, uint8_t *w, uint8_t *out, uint32_t *cand)
{
	const struct dc_model *m = s->m;
	uint8_t opt[3];
	unsigned n_opt = options(m, r, opt);

	for (uint32_t i = 0; i < m->n; i++)
		cand[i] = i;
	sort_m = m;
	qsort(cand, m->n, sizeof(*cand), by_size);
	rule_out(s, w, out);
	for (uint32_t k = 0; k < m->n; k++) {
		uint32_t i = cand[k];
		uint8_t best;
		double keep;

		if (out[i])
			continue;
		keep = timeline(s, w); /* Property #3: the option of least F(S) */
		best = DC_SEND;
		for (unsigned o = 0; o < n_opt; o++) {
			double t;

			w[i] = opt[o];
			t = timeline(s, w);
			if (t < keep) {
				keep = t;
				best = opt[o];
			}
		}
		w[i] = best;
		rule_out(s, w, out);
	}
}

/* Algorithm 2's groups: g of them, group q the tensors ix[start[q] ..
 * start[q] + size[q]), farthest from the output first. */
struct groups {
	uint32_t g, *ix, *start, *size;
};

/* Group q offloads its first @u tensors to the CPU, the rest stay (each
 * with its direction). */
static void offload(const struct groups *gr, uint32_t q, uint32_t u, uint8_t *w)
{
	for (uint32_t j = 0; j < gr->size[q]; j++) {
		uint8_t *x = &w[gr->ix[gr->start[q] + j]];

		*x = (uint8_t)((*x & ~DC_RES_MASK) | (j < u ? DC_CPU : DC_DEVICE));
	}
}

/* Theorem 1: every U (@combos of them), the best kept in @w. */
static void every_u(struct ws *s, const struct groups *gr, uint64_t combos, uint8_t *w)
{
	uint8_t *keep = malloc(s->m->n);
	double best = timeline(s, w);

	if (!keep)
		return;
	memcpy(keep, w, s->m->n);
	for (uint64_t c = 1; c < combos; c++) {
		uint64_t x = c;
		double t;

		for (uint32_t q = 0; q < gr->g; x /= gr->size[q] + 1, q++)
			offload(gr, q, (uint32_t)(x % (gr->size[q] + 1)), w);
		t = timeline(s, w);
		if (t < best) {
			best = t;
			memcpy(keep, w, s->m->n);
		}
	}
	memcpy(w, keep, s->m->n);
	free(keep);
}

/* Too many U to try: each group's best u in turn, the others kept, twice
 * over. */
static void each_u(struct ws *s, const struct groups *gr, uint8_t *w)
{
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t q = 0; q < gr->g; q++) {
			uint32_t bu = 0;
			double bt = -1;

			for (uint32_t v = 0; v <= gr->size[q]; v++) {
				double t;

				offload(gr, q, v, w);
				t = timeline(s, w);
				if (bt < 0 || t < bt) {
					bt = t;
					bu = v;
				}
			}
			offload(gr, q, bu, w);
		}
}

/* Algorithm 2: the device-compressed tensors grouped by size, each
 * group's u farthest from the output offloaded to the CPU. */
static void algorithm2(struct ws *s, uint8_t *w, uint32_t *ix)
{
	const struct dc_model *m = s->m;
	struct groups gr = {.ix = ix};
	uint32_t n = 0;

	for (uint32_t i = 0; i < m->n; i++)
		if (dc_res(w[i]) == DC_DEVICE)
			ix[n++] = i;
	gr.start = calloc(n + 1, sizeof(*gr.start));
	gr.size = calloc(n + 1, sizeof(*gr.size));
	if (n && gr.start && gr.size) {
		uint64_t combos = 1;

		sort_m = m;
		qsort(ix, n, sizeof(*ix), by_size_far);
		for (uint32_t a = 0, b; a < n; a = b, gr.g++) {
			for (b = a; b < n && m->bytes[ix[b]] == m->bytes[ix[a]]; b++)
				;
			gr.start[gr.g] = a;
			gr.size[gr.g] = b - a;
			combos *= gr.size[gr.g] + 1;
			if (combos > DC_COMBOS_MAX)
				combos = DC_COMBOS_MAX + 1;
		}
		if (combos <= DC_COMBOS_MAX)
			every_u(s, &gr, combos, w);
		else
			each_u(s, &gr, w);
	}
	free(gr.start);
	free(gr.size);
}

/* Algorithms 1 and 2 over @m (its options) into @where. */
static int decide_once(const struct dc_model *m, uint8_t *where)
{
	unsigned first = m->cost[DC_DEVICE].can ? DC_DEVICE : DC_CPU;
	uint8_t *out = calloc(m->n + 1, 1);
	uint32_t *tmp = calloc(m->n + 1, sizeof(uint32_t));
	struct ws s;

	memset(where, DC_SEND, m->n);
	if (!out || !tmp || ws_init(&s, m)) {
		free(out);
		free(tmp);
		return -ENOMEM;
	}
	if (m->cost[first].can) {
		algorithm1(&s, first, where, out, tmp);
		if (first == DC_DEVICE && m->cost[DC_CPU].can)
			algorithm2(&s, where, tmp);
	}
	ws_free(&s);
	free(out);
	free(tmp);
	return 0;
}

/* With one_way, the greedy choice over more options is not always the
 * better one: both directions alike decided too, and the better kept. */
int dc_decide(const struct dc_model *m, uint8_t *where)
{
	struct dc_model both = *m;
	uint8_t *alike;
	int rc = decide_once(m, where);

	if (rc || !m->one_way)
		return rc;
	both.one_way = false;
	alike = malloc(m->n + 1);
	if (!alike)
		return -ENOMEM;
	rc = decide_once(&both, alike);
	if (!rc && dc_time(m, alike) < dc_time(m, where))
		memcpy(where, alike, m->n);
	free(alike);
	return rc;
}

int dc_brute(const struct dc_model *m, uint8_t *where)
{
	uint8_t opt[1 + 3 * DC_WHERE_COUNT], w[DC_BRUTE_MAX];
	unsigned k = 0;
	uint64_t combos = 1;
	double best = -1;
	struct ws s;

	if (m->n > DC_BRUTE_MAX)
		return -E2BIG;
	opt[k++] = DC_SEND;
	for (unsigned r = DC_DEVICE; r < DC_WHERE_COUNT; r++)
		if (m->cost[r].can)
			k += options(m, r, opt + k);
	for (uint32_t i = 0; i < m->n; i++)
		if ((combos *= k) > DC_BRUTE_COMBOS)
			return -E2BIG;
	if (ws_init(&s, m))
		return -ENOMEM;
	for (uint64_t c = 0; c < combos; c++) {
		uint64_t x = c;
		double t;

		for (uint32_t i = 0; i < m->n; i++, x /= k)
			w[i] = opt[x % k];
		t = timeline(&s, w);
		if (best < 0 || t < best) {
			best = t;
			memcpy(where, w, m->n);
		}
	}
	ws_free(&s);
	return 0;
}
