/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * perf/compress (make perf-compress): what compression costs a summation
 * service's core. One core's ss_push() over a job of 4 ranks and a
 * DRAM-sized set of fragments (4096 of 8 KiB: 32 MiB of sums, as a box
 * holds), every push's MAC checked (the default, payload mode): rounds of
 * plain fp32 pushes against the same rounds compressed with each scheme
 * (each push decompressed into the accumulator, the sum compressed once
 * with the SS's error feedback). Plain and compressed rounds alternate,
 * best of N each, so a noisy neighbour hits both.
 *
 * Rate: gradient bytes summed per second (a compressed fragment stands for
 * the 8 KiB it carries). The figure is a scheme's rate over the plain
 * rate, on this core: ByteComp's question of whether the box's CPUs keep
 * up with compressed traffic (goal for sign: >= 0.5).
 *
 * Both with the box's default MAC (payload: a compressed push has fewer
 * bytes to hash) and with the header MAC alone (the compressors' own cost).
 *
 * One direction alone too: plain pushes whose sum the SS signs ("none>sign",
 * the worker compressing nothing) and signed pushes whose sum goes back as
 * fp32 ("sign>none").
 *
 * Last line: RESULT compress box_ratio=R (sign, payload MAC) topk=R randk=R
 * bf16=R fp16=R sign_sum=R sign_push=R box_ratio_mac_header=R, then the
 * decision's figures
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comp.h"
#include "decide.h"
#include "models.h"
#include "ss.h"

#define FRAG   8192u
#define CHUNK  32768u
#define RANKS  4u
#define CHUNKS 1024u /* 4096 fragments: 32 MiB of sums, 128 MiB of pushes */
#define FRAGS  (CHUNKS * (CHUNK / FRAG))

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run {
	struct ss_job *j;
	void *mem;
	uint8_t *pay; /* RANKS x FRAGS payloads of stride bytes */
	size_t stride;
	uint64_t *digest;
	uint8_t scheme, rscheme; /* the pushes' compressor, the sums' */
	uint32_t round;
};

/* What a run's pushes and sums are compressed with. */
struct pair {
	uint8_t push, sum;
};

/* "sign", or "none>sign" where one direction alone is. */
static const char *pair_name(struct pair p, char *buf, size_t cap)
{
	if (p.push == p.sum)
		return comp_scheme_name(p.push);
	snprintf(buf, cap, "%s>%s", comp_scheme_name(p.push), comp_scheme_name(p.sum));
	return buf;
}

/* A job of 1 endpoint and CHUNKS chunks, compressed pushes taken at 1%. */
static int job(struct run *r, const struct nic_mac *mac)
{
	struct ss_job_desc d = {.id = 9,
				.mac = *mac,
				.n = RANKS,
				.dtype = SUM_FP32,
				.frag_size = FRAG,
				.chunk_size = CHUNK,
				.n_eps = 1,
				.ep_chunks = {CHUNKS},
				.comp_ppm = COMP_RATE_DEFAULT_PPM};
	size_t bytes = ss_job_bytes(&d, 0), align = ss_job_align(&d);

	r->mem = aligned_alloc(align, (bytes + align - 1) / align * align);
	if (!r->mem)
		return -1;
	r->j = ss_job_init(r->mem, &d, 0, sum_ops_best());
	return 0;
}

/* Every rank's push of every fragment: gradients compressed once (the
 * rounds reuse them; the SS's work per round is the same). */
static int pushes(struct run *r, struct pair pr, const struct nic_mac *mac)
{
	const struct comp_spec c = {pr.push, COMP_RATE_DEFAULT_PPM};
	float g[FRAG / 4], resid[FRAG / 4];
	uint8_t scratch[16384];

	r->scheme = pr.push;
	r->rscheme = pr.sum;
	r->stride = comp_bytes(&c, FRAG / 4);
	r->pay = malloc((size_t)RANKS * FRAGS * r->stride);
	r->digest = malloc((size_t)RANKS * FRAGS * sizeof(uint64_t));
	if (!r->pay || !r->digest)
		return -1;
	for (uint32_t k = 0; k < RANKS * FRAGS; k++) {
		uint8_t *p = r->pay + (size_t)k * r->stride;

		for (uint32_t i = 0; i < FRAG / 4; i++)
			g[i] = (float)((int)((i * 7 + k * 13) % 61) - 30) / 256.0f;
		memset(resid, 0, sizeof(resid));
		comp_encode(&c, g, resid, FRAG / 4, p, comp_seed(9, k % FRAGS / 4, k % 4, 0),
			    scratch);
		r->digest[k] = nic_mac_digest(mac, p, r->stride);
	}
	return 0;
}

/* One round of every fragment, every rank; its seconds. */
static double round_of(struct run *r)
{
	const struct nic_addr from = {.ip_be = 0x0a000001};
	struct ss_out out;
	double t0 = now();
	unsigned done = 0;

	for (uint32_t f = 0; f < FRAGS; f++)
		for (uint32_t q = 0; q < RANKS; q++) {
			uint32_t k = q * FRAGS + f;
			struct pbox_hdr h = {
				.op = PBOX_OP_PUSH,
				.dtype = (uint8_t)(r->scheme << PBOX_COMP_SHIFT),
				.flags = (uint8_t)(r->rscheme == r->scheme
							   ? 0
							   : PBOX_F_RCOMP |
								     r->rscheme
									     << PBOX_F_RCOMP_SHIFT),
				.rank = (uint16_t)q,
				.job = 9,
				.chunk = f / 4,
				.frag = (uint16_t)(f % 4),
				.len = (uint16_t)r->stride,
				.round = r->round};

			h.mac = nic_mac_hdr(&r->j->mac, &h, r->digest[k]);
			done += ss_push(r->j, 0, &h, r->pay + (size_t)k * r->stride, &from, &out) ==
				SS_COMPLETE;
		}
	r->round++;
	if (done != FRAGS) {
		fprintf(stderr, "perf-compress: %s: %u of %u rounds completed\n",
			comp_scheme_name(r->scheme), done, FRAGS);
		exit(1);
	}
	return now() - t0;
}

/* Every pair's best round under MAC mode @mode, printed; @best filled. */
#define PAIRS_MAX 8u
static int measure(unsigned mode, unsigned reps, const struct pair *schemes, unsigned n,
		   double *best)
{
	const double gbytes = (double)FRAGS * FRAG * RANKS / 1e9;
	struct run r[PAIRS_MAX];
	char name[24];
	uint8_t key[NIC_KEY_LEN];
	struct nic_mac mac;

	nic_job_key(1, 9, 2, key);
	nic_mac_init(&mac, mode, key);
	for (unsigned s = 0; s < n; s++) {
		memset(&r[s], 0, sizeof(r[s]));
		if (job(&r[s], &mac) || pushes(&r[s], schemes[s], &mac)) {
			fprintf(stderr, "perf-compress: out of memory\n");
			return -1;
		}
		round_of(&r[s]); /* first touch */
		best[s] = 1e9;
	}
	for (unsigned i = 0; i < reps; i++)
		for (unsigned s = 0; s < n; s++) {
			double t = round_of(&r[s]);

			best[s] = t < best[s] ? t : best[s];
		}
	printf("perf-compress: one core (%s kernels), %u ranks, %u fragments of %u bytes, MAC "
	       "mode %s, best of %u rounds\n",
	       sum_ops_best()->name, RANKS, FRAGS, FRAG, nic_mac_mode_name(mode), reps);
	for (unsigned s = 0; s < n; s++) {
		printf("perf-compress: %-9s %4zu bytes a push, %6.2f GB/s of gradient summed "
		       "(%.3f of plain)\n",
		       pair_name(schemes[s], name, sizeof(name)), r[s].stride, gbytes / best[s],
		       best[0] / best[s]);
		free(r[s].mem);
		free(r[s].pay);
		free(r[s].digest);
	}
	return 0;
}

/* ---- the decision algorithm (worker/decide.c) ------------------------------ */

/* A step of @mdl's tensors (backward order), @bwd_s of backward spread by
 * size, a link of @gbps; EFSignSGD on a device (400 GB/s) and a CPU (5 GB/s,
 * perf/compress's own rate above would do as well). */
static struct dc_model step_of(const struct model *mdl, uint64_t *bytes, double *compute,
			       double bwd_s, double gbps)
{
	for (uint32_t i = 0; i < mdl->n; i++) {
		bytes[i] = mdl->count[mdl->n - 1 - i] * 4;
		compute[i] = bwd_s * (double)mdl->count[mdl->n - 1 - i] / (double)mdl->total;
	}
	return (struct dc_model){.n = mdl->n,
				 .bytes = bytes,
				 .compute_s = compute,
				 .forward_s = bwd_s / 2,
				 .net_a = 30e-6,
				 .net_b = 2 * 8 /
					  (gbps * 1e9), /* push and pull through the layout */
				 .wire_ratio = (4.0 + 256) / 8192,
				 .cost = {[DC_DEVICE] = {true, 20e-6, 1 / 400e9, 20e-6, 1 / 400e9},
					  [DC_CPU] = {true, 5e-6, 1 / 5e9, 5e-6, 1 / 5e9}}};
}

/* ByteComp's choice on @name at @gbps, against sending everything and
 * compressing everything on the device, in the model; its decision time.
 * Returns the speedup over sending everything (0: unknown model). */
static double decide_on(const char *name, double gbps, double *vs_all, double *ms, uint32_t *n)
{
	struct model mdl;
	uint64_t *bytes;
	double *compute, t0, none, all, got;
	uint8_t *w, *a;
	struct dc_model m;

	if (model_get(name, &mdl))
		return 0;
	bytes = calloc(mdl.n, sizeof(*bytes));
	compute = calloc(mdl.n, sizeof(*compute));
	w = calloc(mdl.n, 1);
	a = calloc(mdl.n, 1);
	if (!bytes || !compute || !w || !a)
		exit(1);
	m = step_of(&mdl, bytes, compute, 0.1, gbps);
	t0 = now();
	dc_decide(&m, w);
	*ms = (now() - t0) * 1e3;
	got = dc_time(&m, w);
	memset(a, DC_SEND, mdl.n);
	none = dc_time(&m, a);
	memset(a, DC_DEVICE, mdl.n);
	all = dc_time(&m, a);
	*vs_all = all / got;
	*n = mdl.n;
	free(bytes);
	free(compute);
	free(w);
	free(a);
	model_free(&mdl);
	return none / got;
}

/* 100 reduced models (12 tensors): ByteComp's step against the best of
 * every combination; the worst and mean gap. */
static void reduced(double *worst, double *mean)
{
	unsigned seed = 11;

	*worst = *mean = 0;
	for (unsigned trial = 0; trial < 100; trial++) {
		static const uint64_t sizes[] = {16u << 20, 4u << 20, 1u << 20, 256u << 10};
		uint64_t bytes[DC_BRUTE_MAX];
		double compute[DC_BRUTE_MAX], gap;
		uint8_t w[DC_BRUTE_MAX], b[DC_BRUTE_MAX];
		struct model mdl = {.n = DC_BRUTE_MAX, .count = (uint64_t[DC_BRUTE_MAX]){0}};
		struct dc_model m;

		for (unsigned i = 0; i < DC_BRUTE_MAX; i++) {
			mdl.count[i] = sizes[rand_r(&seed) % 4] / 4;
			mdl.total += mdl.count[i];
		}
		m = step_of(&mdl, bytes, compute, 0.02 + (double)(rand_r(&seed) % 100) * 1e-3,
			    10 + rand_r(&seed) % 90);
		dc_decide(&m, w);
		dc_brute(&m, b);
		gap = dc_time(&m, w) / dc_time(&m, b) - 1;
		*worst = gap > *worst ? gap : *worst;
		*mean += gap / 100;
	}
}

/* One direction alone (Dimension 4): 100 reduced models of 8 tensors, the
 * CPU alone at 0.5 to 5 GB/s, links of 1 to 10 Gb/s: how often the best
 * of every choice (4^8, each direction alone an option) has a tensor
 * compressed one way and is more than 1% shorter than the best with both
 * directions alike (2^8), by how much at most; and ByteComp's choice with
 * the option, its worst gap to that best (and without, to the best alike:
 * how far the greedy is from the best on these slow CPUs anyway). */
static void one_way(unsigned *used, unsigned *wins, double *gain, double *worst,
		    double *worst_alike)
{
	unsigned seed = 13;

	*used = *wins = 0;
	*gain = *worst = *worst_alike = 0;
	for (unsigned trial = 0; trial < 100; trial++) {
		static const uint64_t sizes[] = {16u << 20, 4u << 20, 1u << 20, 64u << 10};
		uint64_t bytes[8];
		double compute[8], alike, best, g, enc = 1 / (0.5e9 + (rand_r(&seed) % 10) * 0.5e9),
						   link = (1 + rand_r(&seed) % 10) * 1e9;
		uint8_t w[8], b[8];
		bool any = false;
		struct dc_model m;

		for (unsigned i = 0; i < 8; i++) {
			bytes[i] = sizes[rand_r(&seed) % 4];
			compute[i] = 0.0005 + (double)(rand_r(&seed) % 1000) * 1e-5;
		}
		m = (struct dc_model){.n = 8,
				      .bytes = bytes,
				      .compute_s = compute,
				      .forward_s = 0.01,
				      .net_a = 30e-6,
				      .net_b = 8 / link,
				      .wire_ratio = (4.0 + 256) / 8192,
				      .cost = {[DC_CPU] = {true, 5e-6, enc, 5e-6, enc / 2}}};
		dc_brute(&m, b);
		alike = dc_time(&m, b);
		dc_decide(&m, w);
		g = dc_time(&m, w) / alike - 1;
		*worst_alike = g > *worst_alike ? g : *worst_alike;
		m.one_way = true;
		dc_brute(&m, b);
		best = dc_time(&m, b);
		dc_decide(&m, w);
		for (unsigned i = 0; i < 8; i++)
			any |= (b[i] & (DC_PUSH_ONLY | DC_SUM_ONLY)) != 0;
		*used += any;
		g = 1 - best / alike;
		*wins += any && g > 0.01;
		*gain = g > *gain ? g : *gain;
		g = dc_time(&m, w) / best - 1;
		*worst = g > *worst ? g : *worst;
	}
}

int main(int argc, char **argv)
{
	static const struct pair schemes[] = {{COMP_NONE, COMP_NONE}, {COMP_SIGN, COMP_SIGN},
					      {COMP_TOPK, COMP_TOPK}, {COMP_RANDK, COMP_RANDK},
					      {COMP_BF16, COMP_BF16}, {COMP_FP16, COMP_FP16},
					      {COMP_NONE, COMP_SIGN}, {COMP_SIGN, COMP_NONE}};
	const unsigned n = sizeof(schemes) / sizeof(schemes[0]),
		       reps = argc > 1 ? (unsigned)atoi(argv[1]) : 5;
	double best[PAIRS_MAX], hdr[PAIRS_MAX];
	char line[384];
	int at;

	/* the box's default (the payload MAC: fewer bytes, less hashing), then
	 * the header MAC alone: the compressors' own cost shows more */
	if (measure(NIC_MAC_PAYLOAD, reps, schemes, n, best) ||
	    measure(NIC_MAC_HEADER, reps, schemes, n, hdr))
		return 1;
	at = snprintf(line, sizeof(line), "RESULT compress box_ratio=%.3f", best[0] / best[1]);
	for (unsigned s = 2; s < n; s++) /* "none>sign": sign_sum, "sign>none": sign_push */
		at += snprintf(line + at, sizeof(line) - (size_t)at, " %s%s=%.3f",
			       comp_scheme_name(schemes[s].push ? schemes[s].push : schemes[s].sum),
			       schemes[s].push == schemes[s].sum ? ""
			       : schemes[s].push		 ? "_push"
								 : "_sum",
			       best[0] / best[s]);
	at += snprintf(line + at, sizeof(line) - (size_t)at, " box_ratio_mac_header=%.3f",
		       hdr[0] / hdr[1]);
	{ /* the decision algorithm, in its model */
		double vs_all = 0, ms = 0, worst, mean, big_ms = 0;
		uint32_t tensors = 0, big_n = 0;

		for (unsigned k = 0; k < 4; k++) {
			static const char *const names[] = {"resnet50", "vgg16", "bert-base",
							    "bert-large"};

			double sp = decide_on(names[k], 25, &vs_all, &ms, &tensors);
			printf("perf-compress: model: %-10s %3u tensors, 25 Gb/s: ByteComp's choice "
			       "%.3fx sending everything, %.3fx compressing everything, decided in "
			       "%.1f ms\n",
			       names[k], tensors, sp, vs_all, ms);
			if (tensors > big_n) {
				big_n = tensors;
				big_ms = ms;
			}
		}
		reduced(&worst, &mean);
		printf("perf-compress: model: 100 reduced steps of 12 tensors: ByteComp's choice "
		       "%.2f%% (worst) and %.2f%% (mean) from the best of all 3^12 choices\n",
		       worst * 100, mean * 100);
		at += snprintf(line + at, sizeof(line) - (size_t)at,
			       " decide_ms=%.1f decide_tensors=%u gap_to_best_model=%.4f", big_ms,
			       big_n, worst);
	}
	{ /* each direction alone */
		unsigned used, wins;
		double gain, worst, worst_alike;

		one_way(&used, &wins, &gain, &worst, &worst_alike);
		printf("perf-compress: model: 100 reduced steps of 8 tensors, the CPU alone: the "
		       "best of all 4^8 choices compresses a tensor one way in %u, and is more "
		       "than 1%% shorter than the best with both ways alike in %u (at most "
		       "%.2f%%); ByteComp's choice at most %.2f%% from it (both ways alike: "
		       "%.2f%% from the best of 2^8)\n",
		       used, wins, gain * 100, worst * 100, worst_alike * 100);
		snprintf(line + at, sizeof(line) - (size_t)at, " one_way_gain=%.4f", gain);
	}
	puts(line);
	return 0;
}
