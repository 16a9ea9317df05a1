/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Which tensors to compress, and where: ByteComp's decision algorithm
 * (shared/seeds/004, §4.3-4.4) over an empirical model of one training
 * step. Pure: no I/O, no clock; the caller measures.
 *
 * The model. Tensors in backward order (t[0] the output layer's, ready
 * first): tensor i's gradient is ready when the backward computation of
 * t[0..i] is done on the device. A tensor is then sent as it is, or first
 * compressed with the job's one scheme on the device (the GPU: its time is
 * taken from the backward computation that follows) or on the worker's CPU
 * (a queue of its own). The network is one link, taken by tensors in the
 * order they are ready to go; a tensor's push-pull there costs
 * net_a + net_b x its bytes on the wire (the layout's traffic per byte at
 * the link's rate). Its result is then decompressed where it was
 * compressed (the CPU's decoding, a queue of its own). The step ends when
 * the backward pass and every decompressed sum are done, plus the forward
 * pass: F(S).
 *
 * The algorithm (dc_decide()): ByteComp's Algorithm 1 on the first
 * resource (the device where it can compress, else the CPU): tensors by
 * size, largest first, ties closest to the output first; tensors sent
 * before the step's last bubble (a gap on the link) are ruled out while
 * uncompressed; each remaining tensor takes the option that gives the
 * least F(S) with every other choice kept, and the bubbles are found again.
 * Then Algorithm 2 when both resources compress: the device-compressed
 * tensors grouped by size, each group offloading to the CPU its u tensors
 * farthest from the output, every combination of the u's tried (Lemma 1
 * and Theorem 1). dc_brute() tries every option of every tensor (at most
 * DC_BRUTE_MAX of them): the reference it is measured against.
 */
#ifndef PBOX_DECIDE_H
#define PBOX_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dc_where { DC_SEND = 0, DC_DEVICE, DC_CPU, DC_WHERE_COUNT };

#define DC_BRUTE_MAX 12u

/* A compressor's cost on one resource: seconds = a + b x bytes (of fp32,
 * for encoding; decoding the same) */
struct dc_cost {
	bool can; /* this resource runs the scheme */
	double enc_a, enc_b, dec_a, dec_b;
};

struct dc_model {
	uint32_t n;
	const uint64_t *bytes;	 /* fp32 bytes of each tensor, backward order */
	const double *compute_s; /* each one's backward computation */
	double forward_s;	 /* the next forward pass */
	double net_a, net_b;	 /* a push-pull: seconds, and seconds per byte on the wire */
	double wire_ratio;	 /* the scheme's bytes on the wire per byte of fp32 */
	struct dc_cost cost[DC_WHERE_COUNT]; /* [DC_DEVICE], [DC_CPU] */
};

/* F(S): the modelled step time with @where[i] for tensor i. */
double dc_time(const struct dc_model *m, const uint8_t *where);

/* ByteComp's choice into @where (m->n of them); 0, or -ENOMEM. */
int dc_decide(const struct dc_model *m, uint8_t *where);

/* The best of every combination (m->n <= DC_BRUTE_MAX); 0, -E2BIG or
 * -ENOMEM. */
int dc_brute(const struct dc_model *m, uint8_t *where);

#endif /* PBOX_DECIDE_H */
