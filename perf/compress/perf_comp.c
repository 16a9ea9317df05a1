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
 * Last line: RESULT compress box_ratio=R (sign, payload MAC) topk=R randk=R
 * bf16=R fp16=R box_ratio_mac_header=R
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comp.h"
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
	uint8_t scheme;
	uint32_t round;
};

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
static int pushes(struct run *r, uint8_t scheme, const struct nic_mac *mac)
{
	const struct comp_spec c = {scheme, COMP_RATE_DEFAULT_PPM};
	float g[FRAG / 4], resid[FRAG / 4];
	uint8_t scratch[16384];

	r->scheme = scheme;
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
			struct pbox_hdr h = {.op = PBOX_OP_PUSH,
					     .dtype = (uint8_t)(r->scheme << PBOX_COMP_SHIFT),
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

/* Every scheme's best round under MAC mode @mode, printed; @best filled. */
static int measure(unsigned mode, unsigned reps, const uint8_t *schemes, unsigned n, double *best)
{
	const double gbytes = (double)FRAGS * FRAG * RANKS / 1e9;
	struct run r[COMP_SCHEME_COUNT];
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
		printf("perf-compress: %-5s %4zu bytes a push, %6.2f GB/s of gradient summed (%.3f "
		       "of plain)\n",
		       comp_scheme_name(schemes[s]), r[s].stride, gbytes / best[s],
		       best[0] / best[s]);
		free(r[s].mem);
		free(r[s].pay);
		free(r[s].digest);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const uint8_t schemes[] = {COMP_NONE,  COMP_SIGN, COMP_TOPK,
					  COMP_RANDK, COMP_BF16, COMP_FP16};
	const unsigned n = sizeof(schemes), reps = argc > 1 ? (unsigned)atoi(argv[1]) : 5;
	double best[sizeof(schemes)], hdr[sizeof(schemes)];
	char line[256];
	int at;

	/* the box's default (the payload MAC: fewer bytes, less hashing), then
	 * the header MAC alone: the compressors' own cost shows more */
	if (measure(NIC_MAC_PAYLOAD, reps, schemes, n, best) ||
	    measure(NIC_MAC_HEADER, reps, schemes, n, hdr))
		return 1;
	at = snprintf(line, sizeof(line), "RESULT compress box_ratio=%.3f", best[0] / best[1]);
	for (unsigned s = 2; s < n; s++)
		at += snprintf(line + at, sizeof(line) - (size_t)at, " %s=%.3f",
			       comp_scheme_name(schemes[s]), best[0] / best[s]);
	snprintf(line + at, sizeof(line) - (size_t)at, " box_ratio_mac_header=%.3f",
		 hdr[0] / hdr[1]);
	puts(line);
	return 0;
}
