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
 * order they are ready to go, full duplex: a tensor's push holds the
 * way out for net_a + net_b x its push's bytes on the wire (the layout's
 * traffic per byte at the link's rate), and its sum the way back for
 * net_b x the sum's bytes, after the sums before it and from the push's
 * start on, ending no earlier than its push (the fragments pipeline). Its sum is then decompressed
 * where it was compressed (the CPU's decoding, a queue of its own). The step ends when the backward
 * pass and every decompressed sum are done, plus the forward pass: F(S). With both directions
 * compressed alike, as every option was before one_way, the sums never wait for the way back and
 * F(S) is that of one link taken in turn.
 *
 * One direction alone (ByteComp's Dimension 4, m->one_way): a tensor's
 * push compressed and its sum sent back as fp32 (DC_PUSH_ONLY: encoded on
 * its resource, nothing to decode), or its push sent as it is and its sum
 * compressed by the summation service (DC_SUM_ONLY: nothing to encode, the
 * sum decoded on its resource). The summation service's own work (decoding
 * pushes, encoding sums) is not in the model, for any option: the box's
 * cores run it beside the link.
 *
 * The algorithm (dc_decide()): ByteComp's Algorithm 1 on the first
 * resource (the device where it can compress, else the CPU): tensors by
 * size, largest first, ties closest to the output first; tensors sent
 * before the step's last bubble (a gap on the link) are ruled out while
 * uncompressed; each remaining tensor takes the option that gives the
 * least F(S) with every other choice kept (each direction alone too, with
 * one_way), and the bubbles are found again.
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

/* A choice: its resource (enum dc_where, the low 2 bits), and with
 * m->one_way the one direction compressed. */
#define DC_RES_MASK  0x3u
#define DC_PUSH_ONLY 0x4u /* the push compressed, its sum back as fp32 */
#define DC_SUM_ONLY  0x8u /* the push as it is, its sum compressed by the service */
static inline unsigned dc_res(uint8_t w)
{
	return w & DC_RES_MASK;
}

#define DC_BRUTE_MAX 12u

/*
 * What a caller multiplies its measured link time per byte by: a choice
 * that compresses just enough to meet the computation in the model leaves
 * no room for a link a little slower than measured (one allreduce alone
 * measures it; a step's own contention does not show), and there the step
 * turns link-bound: ResNet-50's choice at the measured rate was 4% slower
 * in the model at a link 10% slower, and 1.5-2.8% slower than compressing
 * everything when measured (perf/compress). At 1.25 the choice compresses
 * a few more tensors and holds up to a link 25% slower.
 */
#define DC_LINK_MARGIN 1.25

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
	bool one_way;		 /* each direction alone is an option too */
	struct dc_cost cost[DC_WHERE_COUNT]; /* [DC_DEVICE], [DC_CPU] */
};

/* F(S): the modelled step time with @where[i] (a resource, maybe with
 * DC_PUSH_ONLY or DC_SUM_ONLY) for tensor i. */
double dc_time(const struct dc_model *m, const uint8_t *where);

/* ByteComp's choice into @where (m->n of them); 0, or -ENOMEM. */
int dc_decide(const struct dc_model *m, uint8_t *where);

/* The best of every combination (m->n <= DC_BRUTE_MAX, and at most
 * DC_BRUTE_COMBOS of them); 0, -E2BIG or -ENOMEM. */
#define DC_BRUTE_COMBOS (1ull << 26)
int dc_brute(const struct dc_model *m, uint8_t *where);

#endif /* PBOX_DECIDE_H */
