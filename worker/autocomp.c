/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pbox_decide_compression(): ByteComp's decision algorithm (decide.c) run
 * by libpbox over one training step, as a framework measures it: which of
 * its fp32 tensors travel compressed with [job] compression's scheme and
 * which as they are. The model of the step (decide.h): each tensor's bytes
 * and the backward computation before it is ready, as the caller measured
 * them; the link from the layout, Theorem 1's allreduce time per byte at
 * [data] bandwidth B and the boxes' k (t = 2n(n-1)M / ((n^2 + kn - 2k) B),
 * M / B from k >= n; n the machines); the compressor's cost on this CPU,
 * profiled once per context (the least of 20 runs over 1 MiB each way, as
 * ByteComp profiles); for CUDA tensors of the staged path, the GPU's too
 * (the CUDA module's profile), so that each compressed tensor is placed
 * on the GPU or the CPU (ByteComp's Algorithm 2). Rank 0 decides, and its
 * choice is every rank's
 * (summed with the others' zeros on a key of libpbox's own, sent as it
 * is), so the ranks' own measurements may differ. Above the API: it calls
 * only what a program could.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "comp.h"
#include "decide.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_pbox.h"
#include "wk_submit.h"

/* The agreement's key: libpbox's own, apart from the CUDA pieces' hashes */
#define AUTO_KEY (WK_KEY_OWN | 0x3c0decde00000000ull)

/* The compressor's cost per fp32 byte on this CPU, encoding and decoding:
 * 1 MiB of gradient (beyond the first caches, as a tensor is) in fragments
 * of 2048 elements, each with its residual, the least of 20 runs. */
static int profile(const struct comp_spec *c, double *enc_b, double *dec_b)
{
	enum { N = 2048, FRAGS = 128 };
	float *g = malloc(3 * (size_t)N * FRAGS * sizeof(float));
	uint8_t *wire = malloc(4 * (size_t)N * FRAGS), *scratch = malloc(comp_scratch_bytes(N));
	uint64_t best_e = UINT64_MAX, best_d = UINT64_MAX;

	if (!g || !wire || !scratch) {
		free(g);
		free(wire);
		free(scratch);
		return PBOX_ENOMEM;
	}
	memset(g, 0, 3 * (size_t)N * FRAGS * sizeof(float));
	for (size_t i = 0; i < (size_t)N * FRAGS; i++)
		g[i] = (float)((int)(i * 7 % 61) - 30) / 64;
	for (unsigned r = 0; r < 20; r++) {
		uint64_t t0 = wk_now(), t1, t2;
		size_t at = 0;

		for (size_t f = 0; f < FRAGS; f++, at += comp_bytes(c, N))
			comp_encode(c, g + f * N, g + (size_t)N * FRAGS + f * N, N, wire + at, r,
				    scratch);
		t1 = wk_now();
		at = 0;
		for (size_t f = 0; f < FRAGS; f++, at += comp_bytes(c, N))
			comp_decode(c, g + 2 * (size_t)N * FRAGS + f * N, wire + at, N, r, scratch);
		t2 = wk_now();
		best_e = t1 - t0 < best_e ? t1 - t0 : best_e;
		best_d = t2 - t1 < best_d ? t2 - t1 : best_d;
	}
	*enc_b = (double)best_e * 1e-9 / (4.0 * N * FRAGS);
	*dec_b = (double)best_d * 1e-9 / (4.0 * N * FRAGS);
	free(g);
	free(wire);
	free(scratch);
	return PBOX_OK;
}

/* Theorem 1's allreduce seconds per byte of M on layout @li. */
static double net_per_byte(const struct pbox *px, const struct pbox_layout_info *li)
{
	struct pbox_machine_info mi;
	double n, k, b = (double)px->cfg.data.bandwidth_mbps * 1e6 / 8;

	if (pbox_machine(px, &mi) || b <= 0 || mi.machines < 2)
		return 0;
	n = mi.machines;
	k = li->k;
	return k >= n ? 1 / b : 2 * n * (n - 1) / ((n * n + k * n - 2 * k) * b);
}

/* Whether the job's compressed tensors are summed by all-gather (gsum.c). */
static bool gathers(const struct pbox *px)
{
	return px->cfg.job.compression_sum == 1 && !px->loc;
}

/* @m for sums by all-gather: a rank's link carries the n - 1 others'
 * compressed tensors in (and its own out to them), (n - 1) c / B where a
 * push-pull carries M in net_b M, and it decodes n of them. */
static void gather_model(const struct pbox *px, struct dc_model *m)
{
	struct pbox_machine_info mi;
	double b = (double)px->cfg.data.bandwidth_mbps * 1e6 / 8;

	if (pbox_machine(px, &mi) || mi.machines < 2 || m->net_b <= 0 || b <= 0)
		return;
	m->wire_ratio *= (double)(mi.machines - 1) / b / m->net_b;
	m->cost[DC_CPU].dec_b *= mi.machines;
}

/*
 * Whether the GPU is a resource of this decision: every tensor a CUDA
 * tensor of the staged path (fp32), the scheme one comp.cu runs (randk's
 * indices come from the layout), summed by the services; its cost then
 * in px->gpu_enc_b and gpu_dec_b, profiled by the module once.
 */
static bool gpu_resource(struct pbox *px, const struct comp_spec *c, uint32_t n,
			 const uint64_t *keys)
{
	struct wk_cuda_comp cc = {.scheme = c->scheme,
				  .gpu = 1,
				  .ppm = c->rate_ppm,
				  .frag_elems = px->net.frag_size / 4u};
	bool all = !px->loc && !gathers(px) && c->scheme != COMP_RANDK && px->cuda_ops &&
		   px->cuda_ops->profile && px->gpu_enc_b >= 0;

	pthread_mutex_lock(&px->mu);
	for (uint32_t i = 0; all && i < n; i++) {
		const struct wk_ckey *k =
			wk_find_tensor(px, keys[i]) ? NULL : wk_ckey_find(px, keys[i]);

		all = k && k->dtype == PBOX_FP32;
	}
	pthread_mutex_unlock(&px->mu);
	if (all && !px->gpu_enc_b &&
	    px->cuda_ops->profile(px->cuda, &cc, &px->gpu_enc_b, &px->gpu_dec_b)) {
		wk_log(px, CFG_LOG_WARNING,
		       "pbox_decide_compression: the GPU's compressor was not profiled (%s): "
		       "CUDA tensors compress on the CPU",
		       pbox_last_error());
		px->gpu_enc_b = -1;
	}
	return all && px->gpu_enc_b > 0;
}

/* Rank 0's @plan (n bytes) on every rank (this one @rank). */
static int agree(struct pbox *px, uint32_t rank, uint8_t *plan, uint32_t n)
{
	float *x = calloc(n, sizeof(*x));
	int rc;

	if (!x)
		return PBOX_ENOMEM;
	for (uint32_t i = 0; rank == 0 && i < n; i++)
		x[i] = plan[i];
	rc = wk_own_sum(px, AUTO_KEY + n, x, n);
	for (uint32_t i = 0; rc == PBOX_OK && i < n; i++)
		plan[i] = (uint8_t)(x[i] + 0.5f); /* 0 to 10: exact in fp32 */
	free(x);
	return rc;
}

/* Rank 0's choice over the model (backward order, as given), on layout @li:
 * in @plan 0 for a tensor sent as it is, PBOX_COMP_CPU or PBOX_COMP_GPU. */
static int decide(struct pbox *px, const struct pbox_layout_info *li, uint32_t n,
		  const uint64_t *keys, const uint64_t *count, const uint64_t *compute_ns,
		  uint8_t *plan)
{
	const struct comp_spec c = {(uint8_t)px->cfg.job.compression, px->cfg.job.compression_ppm};
	uint64_t *bytes = calloc(n, sizeof(*bytes));
	double *compute = calloc(n, sizeof(*compute));
	uint8_t *w = calloc(n, 1);
	struct dc_model m;
	int rc = bytes && compute && w ? PBOX_OK : PBOX_ENOMEM;

	if (rc == PBOX_OK && !px->comp_enc_b)
		rc = profile(&c, &px->comp_enc_b, &px->comp_dec_b);
	for (uint32_t i = 0; rc == PBOX_OK && i < n; i++) {
		bytes[i] = count[i] * 4;
		compute[i] = (double)compute_ns[i] * 1e-9;
	}
	m = (struct dc_model){.n = n,
			      .bytes = bytes,
			      .compute_s = compute,
			      .net_b = net_per_byte(px, li) * DC_LINK_MARGIN,
			      .wire_ratio = (double)comp_bytes(&c, 2048) / 8192,
			      .cost = {[DC_CPU] = {true, 0, px->comp_enc_b, 0, px->comp_dec_b}}};
	if (gathers(px)) /* every rank's compressed tensor in, each decoded */
		gather_model(px, &m);
	if (rc == PBOX_OK && gpu_resource(px, &c, n, keys))
		m.cost[DC_DEVICE] = (struct dc_cost){true, 0, px->gpu_enc_b, 0, px->gpu_dec_b};
	/* one direction alone: host tensors summed by the services */
	m.one_way = !gathers(px) && !m.cost[DC_DEVICE].can;
	if (rc == PBOX_OK && dc_decide(&m, w))
		rc = PBOX_ENOMEM;
	if (rc == PBOX_OK) {
		double chosen = dc_time(&m, w), plain;
		uint32_t k = 0, on_gpu = 0, one_way = 0;

		for (uint32_t i = 0; i < n; i++) {
			plan[i] = (uint8_t)((dc_res(w[i]) == DC_SEND  ? 0
					     : dc_res(w[i]) == DC_CPU ? PBOX_COMP_CPU
								      : PBOX_COMP_GPU) |
					    (w[i] & DC_PUSH_ONLY ? PBOX_COMP_PUSH_ONLY : 0) |
					    (w[i] & DC_SUM_ONLY ? PBOX_COMP_SUM_ONLY : 0));
			k += plan[i] != 0;
			on_gpu += (plan[i] & PBOX_COMP_GPU) != 0;
			one_way += plan[i] > PBOX_COMP_GPU;
		}
		plain = dc_time(&m, memset(w, DC_SEND, n));
		wk_log(px, CFG_LOG_INFO,
		       "pbox_decide_compression: %s on %u of %u tensors (%u on the GPU, %u one "
		       "direction alone): the link "
		       "%.3g ns a byte, the compressor %.3g ns a byte on the CPU, %.3g on the GPU; "
		       "a step of %.3f ms in the model, %.3f ms with none compressed",
		       comp_scheme_name(c.scheme), k, n, on_gpu, one_way, m.net_b * 1e9,
		       px->comp_enc_b * 1e9, m.cost[DC_DEVICE].can ? px->gpu_enc_b * 1e9 : 0.0,
		       chosen * 1e3, plain * 1e3);
	}
	free(bytes);
	free(compute);
	free(w);
	return rc;
}

int pbox_decide_compression(struct pbox *px, uint32_t n, const uint64_t *keys,
			    const uint64_t *counts, const uint64_t *compute_ns, uint8_t *chosen)
{
	const char *fn = "pbox_decide_compression";
	struct pbox_layout_info li;
	char scheme[32];
	uint8_t *plan;
	int rc, drc;

	if (!px || !n || !keys || !counts || !compute_ns)
		return wk_err(PBOX_EINVAL, "%s: no context, or no tensors", fn);
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "%s: call it after pbox_start()", fn);
	if (px->cfg.job.compression == COMP_NONE)
		return wk_err(PBOX_EINVAL,
			      "%s: [job] compression is none: the scheme to decide on is the job's "
			      "(sign, topk, randk, bf16 or fp16)",
			      fn);
	if ((rc = pbox_layout(px, &li)))
		return rc;
	plan = calloc(n, 1);
	if (!plan)
		return wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
	drc = li.rank == 0 ? decide(px, &li, n, keys, counts, compute_ns, plan) : PBOX_OK;
	if (drc) /* rank 0 agrees all the same (on none): no rank waits alone */
		memset(plan, 0, n);
	rc = agree(px, li.rank, plan, n);
	if (rc == PBOX_OK)
		rc = drc;
	for (uint32_t i = 0; rc == PBOX_OK && i < n; i++) {
		const char *name = comp_scheme_name(px->cfg.job.compression);

		snprintf(scheme, sizeof(scheme), "%s%s%s%s%s",
			 plan[i] & PBOX_COMP_SUM_ONLY ? "none>" : "", plan[i] ? name : "none",
			 plan[i] & PBOX_COMP_PUSH_ONLY ? ">none" : "",
			 plan[i] && gathers(px) ? ":gather" : "",
			 plan[i] & PBOX_COMP_GPU ? "@gpu" : "");
		rc = pbox_set_compression(px, keys[i], scheme);
		if (chosen)
			chosen[i] = plan[i];
	}
	free(plan);
	return rc;
}
