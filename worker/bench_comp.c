/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pbox-bench --compress SCHEME:PLAN: which layers travel compressed
 * (pbox_set_compression()), as ByteComp would choose them (perf/compress).
 *
 *   none, all   every layer as it is, or every layer compressed
 *   bytecomp    ByteComp's decision algorithm (worker/decide.h) over this
 *               run's own empirical model: each layer's bytes and backward
 *               time (--backprop and --compute-per-mb), the link's time per
 *               byte measured by one plain allreduce of the whole model, the
 *               compressor's cost on this CPU (100 runs on a fragment), the
 *               scheme's bytes on the wire
 *   brute       the best of every choice in the same model (12 layers at most)
 *
 * Rank 0's plan is every rank's (it is summed with the others' zeros).
 */
#include "bench_comp.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comp.h"
#include "decide.h"

static const char *const plan_names[] = {"none", "all", "bytecomp", "brute"};

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Whether compressor @s keeps pbox-bench's sums exact. */
static bool exact(int s)
{
	return s == COMP_NONE || s == COMP_BF16 || s == COMP_FP16;
}

int bench_comp_parse(const char *arg, struct bench_comp *bc)
{
	const char *colon = strchr(arg, ':');
	char scheme[16], *arrow;
	int s, r;

	if (!colon || (size_t)(colon - arg) >= sizeof(scheme))
		return -1;
	memcpy(scheme, arg, (size_t)(colon - arg));
	scheme[colon - arg] = '\0';
	arrow = strchr(scheme, '>');
	if (arrow)
		*arrow++ = '\0';
	s = comp_scheme_parse(scheme);
	r = arrow ? comp_scheme_parse(arrow) : s;
	if (s < COMP_NONE || r < COMP_NONE || (s == COMP_NONE && r == COMP_NONE))
		return -1;
	bc->lossless = exact(s) && exact(r);
	_Static_assert(sizeof(bc->scheme) == sizeof(scheme), "the text before the colon fits");
	memcpy(bc->scheme, arg, (size_t)(colon - arg)); /* "fp16>none": one direction alone */
	bc->scheme[colon - arg] = '\0';
	for (unsigned p = 0; p < sizeof(plan_names) / sizeof(plan_names[0]); p++)
		if (strcmp(colon + 1, plan_names[p]) == 0) {
			bc->plan = (enum bench_plan)p;
			bc->on = !arrow || p <= BENCH_PLAN_ALL;
			return bc->on ? 0 : -1;
		}
	return -1;
}

const char *bench_plan_name(enum bench_plan p)
{
	return plan_names[p];
}

/* The compressor's cost per fp32 byte on this CPU: 100 runs of a fragment
 * of 2048 elements each way, the least (ByteComp profiles the same way). */
static void profile(const struct comp_spec *c, double *enc_b, double *dec_b)
{
	enum { N = 2048 };
	static float g[N], resid[N], out[N];
	static uint8_t wire[4 * N], scratch[16384];
	double best_e = 1, best_d = 1;

	for (unsigned i = 0; i < N; i++)
		g[i] = (float)((int)(i * 7 % 61) - 30) / 64;
	for (unsigned r = 0; r < 100; r++) {
		double t0 = now_s(), t1;

		comp_encode(c, g, resid, N, wire, r, scratch);
		t1 = now_s();
		comp_decode(c, out, wire, N, r, scratch);
		best_e = t1 - t0 < best_e ? t1 - t0 : best_e;
		best_d = now_s() - t1 < best_d ? now_s() - t1 : best_d;
	}
	*enc_b = best_e / (4.0 * N);
	*dec_b = best_d / (4.0 * N);
}

/* Rank 0's @plan (n bytes) on every rank: a sum with the others' zeros,
 * itself sent as it is (the job compresses fp32 tensors by default). */
static int agree(struct pbox *px, uint32_t rank, uint8_t *plan, uint32_t n)
{
	const uint64_t key = (1ull << 62) + 4096 + n;
	float *x = calloc(n, sizeof(*x));
	struct pbox_handle *op;
	int rc;

	if (!x)
		return PBOX_ENOMEM;
	for (uint32_t i = 0; rank == 0 && i < n; i++)
		x[i] = plan[i];
	rc = pbox_declare(px, key, n, PBOX_FP32, 0);
	if (rc == PBOX_OK)
		rc = pbox_set_compression(px, key, "none");
	if (rc == PBOX_OK)
		rc = pbox_push_pull(px, key, x, x, n, PBOX_FP32, &op);
	if (rc == PBOX_OK)
		rc = pbox_wait(op);
	for (uint32_t i = 0; rc == PBOX_OK && i < n; i++)
		plan[i] = (uint8_t)(x[i] + 0.5f); /* 0 to 3: exact in fp32 */
	free(x);
	return rc;
}

/* The link's time per byte: one allreduce of every layer at once, none
 * compressed, from rank @rank's view. */
static int link_time(struct pbox *px, const struct bench_layers *L, double *per_byte)
{
	struct pbox_handle **op = calloc(L->n, sizeof(*op));
	uint64_t bytes = 0;
	double t0;
	int rc = PBOX_OK;

	if (!op)
		return PBOX_ENOMEM;
	for (uint32_t i = 0; i < L->n; i++)
		if (pbox_set_compression(px, L->key[i], "none"))
			rc = -1;
	t0 = now_s();
	for (uint32_t i = L->n; rc == PBOX_OK && i-- > 0;) {
		rc = pbox_push_pull(px, L->key[i], L->buf[i], L->buf[i], L->count[i], PBOX_FP32,
				    &op[i]);
		bytes += L->count[i] * 4;
	}
	for (uint32_t i = 0; i < L->n; i++)
		if (op[i] && pbox_wait(op[i]) && rc == PBOX_OK)
			rc = -1;
	*per_byte = (now_s() - t0) / (double)(bytes ? bytes : 1);
	free(op);
	return rc;
}

/* This run's model of one step, and rank 0's decision in it. */
static int decide(const struct bench_comp *bc, const struct bench_layers *L, double per_byte,
		  uint8_t *plan, struct bench_comp_report *rep)
{
	const struct comp_spec c = {(uint8_t)comp_scheme_parse(bc->scheme), bc->rate_ppm};
	uint64_t *bytes = calloc(L->n, sizeof(*bytes));
	double *compute = calloc(L->n, sizeof(*compute)), enc_b, dec_b, t0;
	uint8_t *w = calloc(L->n, 1);
	struct dc_model m;
	int rc = 0;

	if (!bytes || !compute || !w) {
		rc = PBOX_ENOMEM;
		goto out;
	}
	profile(&c, &enc_b, &dec_b);
	for (uint32_t j = 0; j < L->n; j++) { /* backward order: the last layer first */
		uint32_t i = L->n - 1 - j;

		bytes[j] = L->count[i] * 4;
		compute[j] = j ? (double)L->compute_us[i] * 1e-6 : 0;
	}
	m = (struct dc_model){.n = L->n,
			      .bytes = bytes,
			      .compute_s = compute,
			      .net_b = per_byte * DC_LINK_MARGIN,
			      .wire_ratio = (double)comp_bytes(&c, 2048) / 8192,
			      .one_way = true,
			      .cost = {[DC_CPU] = {true, 0, enc_b, 0, dec_b}}};
	t0 = now_s();
	if (bc->plan == BENCH_PLAN_BRUTE)
		rc = dc_brute(&m, w);
	else
		rc = dc_decide(&m, w);
	rep->decide_ms = (now_s() - t0) * 1e3;
	rep->model_ms = dc_time(&m, w) * 1e3;
	for (uint32_t j = 0; j < L->n; j++) /* 0 none, 1 both ways, 2 the push, 3 the sum */
		plan[L->n - 1 - j] = w[j] == DC_SEND	   ? 0
				     : w[j] & DC_PUSH_ONLY ? 2
				     : w[j] & DC_SUM_ONLY  ? 3
							   : 1;
	memset(w, DC_SEND, L->n);
	rep->model_none_ms = dc_time(&m, w) * 1e3;
	memset(w, DC_CPU, L->n);
	rep->model_all_ms = dc_time(&m, w) * 1e3;
	rep->enc_gbps = 8 / enc_b / 1e9;
out:
	free(bytes);
	free(compute);
	free(w);
	return rc;
}

int bench_comp_apply(struct pbox *px, const struct bench_comp *bc, const struct bench_layers *L,
		     uint32_t rank, struct bench_comp_report *rep)
{
	uint8_t *plan = calloc(L->n, 1);
	double per_byte = 0;
	int rc = PBOX_OK;

	if (!plan)
		return PBOX_ENOMEM;
	memset(rep, 0, sizeof(*rep));
	if (bc->plan == BENCH_PLAN_ALL)
		memset(plan, 1, L->n);
	if (bc->plan >= BENCH_PLAN_BYTECOMP) {
		rc = link_time(px, L, &per_byte);
		if (rc == PBOX_OK)
			rc = decide(bc, L, per_byte, plan, rep);
		if (rc == PBOX_OK)
			rc = agree(px, rank, plan, L->n);
	}
	for (uint32_t i = 0; rc == PBOX_OK && i < L->n; i++) {
		char how[40];

		snprintf(how, sizeof(how), "%s%s%s", plan[i] == 3 ? "none>" : "",
			 plan[i] ? bc->scheme : "none", plan[i] == 2 ? ">none" : "");
		rc = pbox_set_compression(px, L->key[i], how);
		rep->compressed += plan[i] != 0;
		rep->one_way += plan[i] >= 2;
		rep->compressed_bytes += plan[i] ? L->count[i] * 4 : 0;
	}
	rep->link_gbps = per_byte > 0 ? 8 / per_byte / 1e9 : 0;
	free(plan);
	return rc;
}
