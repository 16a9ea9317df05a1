/* SPDX-License-Identifier: BSD-3-Clause */
/* pbox-bench --compress SCHEME:PLAN (bench_comp.c). */
#ifndef PBOX_BENCH_COMP_H
#define PBOX_BENCH_COMP_H

#include <stdbool.h>
#include <stdint.h>

#include "pbox.h"

enum bench_plan { BENCH_PLAN_NONE, BENCH_PLAN_ALL, BENCH_PLAN_BYTECOMP, BENCH_PLAN_BRUTE };

struct bench_comp {
	bool on;
	char scheme[16]; /* comp.h's name, or "PUSH>SUM" (plans none and all) */
	bool lossless;	 /* bf16, fp16 and none alone: these sums stay exact */
	enum bench_plan plan;
	uint32_t rate_ppm; /* the job's [job] compression_rate, for the model */
};

/* The run's layers: keys, fp32 element counts, buffers, each one's backward
 * compute before it is pushed (layer order, front first). */
struct bench_layers {
	uint32_t n;
	const uint64_t *key, *count, *compute_us;
	void *const *buf;
};

/* What the plan came to: layers and bytes compressed; with a decision, the
 * model's step with it, with none and with all compressed, the link's rate
 * measured and the compressor's on this CPU, the time to decide. */
struct bench_comp_report {
	uint32_t compressed, one_way; /* one_way: of them, one direction alone */
	uint64_t compressed_bytes;
	double model_ms, model_none_ms, model_all_ms, decide_ms, link_gbps, enc_gbps;
};

/* "sign:bytecomp" or "fp16>none:all" into @bc: 0, or -1. */
int bench_comp_parse(const char *arg, struct bench_comp *bc);
const char *bench_plan_name(enum bench_plan p);

/* After pbox_start(): the plan, agreed with every rank, each layer's
 * compression set. PBOX_OK or a pbox status. */
int bench_comp_apply(struct pbox *px, const struct bench_comp *bc, const struct bench_layers *L,
		     uint32_t rank, struct bench_comp_report *rep);

#endif /* PBOX_BENCH_COMP_H */
