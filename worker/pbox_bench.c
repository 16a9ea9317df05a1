/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pbox-bench: allreduce iterations through libpbox over synthetic tensors
 * shaped like a real model, every result verified.
 *
 *   pbox-bench --config FILE [--model resnet50|vgg16|bert-large | --size B]
 *              [--tensors T] [--dtype fp32|fp16|bf16] [--iters N] [--warmup W]
 *              [--layout] [--quiet] [--backprop GAP_US [--fifo]] [--survive]
 *              [--rejoin ITER] [--sync] [--collective C]
 *
 * --survive: an iteration that fails because a rank or the box was lost
 * goes on with the survivors (pbox_shrink()): after a lost box its failed
 * push-pulls are pushed again as they are and resume (what was summed
 * stays summed), after a lost rank it is done again, from its inputs, by
 * the smaller job; each recovery is printed with its time. --rejoin V:
 * pbox_rejoin() before iteration V (1-based), taking back a box lost and
 * back since.
 *
 * --collective reduce_scatter|all_gather|broadcast: each tensor through
 * that sharded collective instead of a push-pull (shard r of a tensor its
 * r-th n-th; a broadcast's root each rank in turn), every element of what
 * the rank receives checked (perf/shard).
 *
 * --collective async: each tensor an asynchronous training's store
 * (pbox_push_pull_async()): the first iteration rank 0's start (the
 * others send NaNs, which must not be added), each later one a delta of 1;
 * each answer holds this rank's own deltas at least, and after the last
 * iteration (a barrier, then a call of nothing) every store is its start
 * plus every rank's deltas, each added once, exactly.
 *
 * --sync: before each iteration, a barrier (a one-element allreduce, not
 * timed), so that every rank's iteration starts together: without it the
 * ranks start as their own checking and refilling of the last iteration's
 * tensors end, which on a shared host differs by up to 0.2 s, and the
 * earliest rank's time includes that wait (perf/cluster uses it).
 *
 * Every rank runs it with its own configuration (PBOX_* overrides apply).
 * Per iteration the tensors are pushed in backward order (the last layer's
 * gradient is ready first), with the layer index as priority, then awaited
 * and checked. Rank r's element i in iteration v is ((7i + 13r + 3v) mod 61)
 * - 30: the sum over up to 8 ranks is exact in every dtype, and the
 * expected sum of every element is known.
 *
 * --compress SCHEME:PLAN (fp32; the job's [job] compression must not be
 * none): which layers travel compressed with SCHEME, by PLAN: none, all,
 * bytecomp (ByteComp's decision algorithm over this run's own measured
 * model) or brute (the best of every choice in it); see bench_comp.c. With
 * sign, topk or randk the sums are approximate: each is checked finite
 * (bf16 and fp16 keep these sums exact: checked exact). --compute-per-mb
 * US: each layer's backward compute grows by US per MiB of it, beside
 * --backprop's GAP_US; --scale DIV: a --model's tensors DIV times smaller.
 *
 * --backprop plays backpropagation: layer i's gradient becomes ready GAP_US
 * after layer i + 1's (its compute), last layer first, and the next forward
 * pass can start once layer 0's sum is in. Each iteration then reports the
 * time from the end of the backward pass (layer 0 pushed) to layer 0's sum:
 * fwd_ms in the RESULT line. Layer i has priority i (the front layers
 * first); with --fifo every layer has one priority and the keys follow the
 * order the gradients become ready, so the ranks send first come, first
 * served.
 *
 * Prints each iteration's time and goodput (model bytes / time), the bytes
 * this rank moved per summation service, and last one line:
 *   RESULT bench model=M n=N k=K iters=I mean_ms=T goodput_gbps=G
 *                rss_warm_kib=W rss_end_kib=E verified=yes
 * (with --backprop: ... fwd_ms=F sched=priority|fifo before rss_warm_kib;
 * W and E: this process's resident memory after the warm-up and at the end,
 * for the soak to hold flat).
 * Exit status: 0 every sum exact, 1 a failure or a wrong sum, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_comp.h"
#include "models.h"
#include "pbox.h"
#include "sum.h"

#define VAL_MOD 61

/* --collective: what each layer's tensor goes through. */
enum coll { COLL_ALLREDUCE, COLL_RS, COLL_AG, COLL_BCAST, COLL_ASYNC, COLL_COUNT };

static const char *const coll_names[COLL_COUNT] = {"allreduce", "reduce_scatter", "all_gather",
						   "broadcast", "async"};

struct opts {
	const char *config, *model;
	uint64_t size;
	uint32_t tensors, iters, warmup;
	enum pbox_dtype dtype;
	bool layout, quiet;
	bool late;	 /* declare nothing: every tensor first seen by its first push-pull */
	bool mixed;	 /* tensor i of fp32, bf16, fp16 in turn (--dtype ignored) */
	uint64_t gap_us; /* --backprop: compute per layer; 0: push all at once */
	bool backprop, fifo;
	bool survive;		/* pbox_shrink() after a lost rank or box, and on */
	uint64_t rejoin;	/* pbox_rejoin() before this iteration (0: never) */
	bool sync;		/* a barrier before each iteration */
	uint64_t per_mb_us;	/* --compute-per-mb: more compute per MiB of a layer */
	uint64_t scale;		/* --scale: a model's tensors divided by it */
	struct bench_comp comp; /* --compress SCHEME:PLAN */
	enum coll coll;		/* --collective */
};

/* Layer i's key and priority: the layer itself, or (--fifo) the order its
 * gradient becomes ready, one priority for all. */
static uint64_t key_of(const struct opts *o, uint32_t n, uint32_t i)
{
	return o->fifo ? n - 1 - i : i;
}

static int prio_of(const struct opts *o, uint32_t i)
{
	return o->fifo ? 0 : (int)i;
}

static enum pbox_dtype dtype_of(const struct opts *o, uint32_t i)
{
	static const enum pbox_dtype cycle[3] = {PBOX_FP32, PBOX_BF16, PBOX_FP16};

	return o->mixed ? cycle[i % 3] : o->dtype;
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A layer's compute, as a sleep (the CPU stays free for the engine, as a
 * GPU's kernels would leave it). */
static void nap_us(uint64_t us)
{
	struct timespec t = {.tv_sec = (time_t)(us / 1000000),
			     .tv_nsec = (long)(us % 1000000) * 1000};

	while (nanosleep(&t, &t) && errno == EINTR)
		;
}

/* This rank's values and the expected sums for one iteration, by (7i mod
 * 61), in the wire encoding of the dtype. */
struct tables {
	uint32_t own[VAL_MOD], want[VAL_MOD];
};

static uint32_t encode(enum pbox_dtype dt, float x)
{
	uint32_t u;

	if (dt == PBOX_FP16)
		return sum_f32_to_f16(x);
	if (dt == PBOX_BF16)
		return sum_f32_to_bf16(x);
	memcpy(&u, &x, 4);
	return u;
}

static void tables(struct tables *tb, enum pbox_dtype dt, uint32_t rank, uint32_t n, uint32_t v)
{
	for (unsigned k = 0; k < VAL_MOD; k++) {
		float sum = 0, mine = 0;

		for (uint32_t r = 0; r < n; r++) {
			float x = (float)((int)((k + 13 * r + 3 * v) % VAL_MOD) - 30);

			sum += x;
			if (r == rank)
				mine = x;
		}
		tb->own[k] = encode(dt, mine);
		tb->want[k] = encode(dt, sum);
	}
}

/* @count elements from element @first on: rank @tb's own values. */
static void fill(uint8_t *p, uint64_t count, enum pbox_dtype dt, const struct tables *tb,
		 uint64_t first)
{
	unsigned k = (unsigned)(7 * (first % VAL_MOD) % VAL_MOD);

	for (uint64_t i = 0; i < count; i++) {
		if (dt == PBOX_FP32)
			memcpy(p + 4 * i, &tb->own[k], 4);
		else {
			uint16_t h = (uint16_t)tb->own[k];

			memcpy(p + 2 * i, &h, 2);
		}
		k += 7;
		if (k >= VAL_MOD)
			k -= VAL_MOD;
	}
}

/* Compressed sums are approximate: the first element that is not a
 * finite number, or -1. */
static int64_t finite(const uint8_t *p, uint64_t count, uint32_t *got, uint32_t *want)
{
	for (uint64_t i = 0; i < count; i++) {
		uint32_t u;

		memcpy(&u, p + 4 * i, 4);
		if ((u & 0x7f800000u) == 0x7f800000u) {
			*got = u;
			*want = 0;
			return (int64_t)i;
		}
	}
	return -1;
}

/* The first wrong element of @count from element @first on, against @w
 * (a table's want: the sums; or own: one rank's values), or -1. */
static int64_t verify(const uint8_t *p, uint64_t count, enum pbox_dtype dt, const uint32_t *w,
		      uint64_t first, uint32_t *got, uint32_t *want)
{
	unsigned k = (unsigned)(7 * (first % VAL_MOD) % VAL_MOD);

	for (uint64_t i = 0; i < count; i++) {
		uint32_t x = 0;

		if (dt == PBOX_FP32)
			memcpy(&x, p + 4 * i, 4);
		else {
			uint16_t h;

			memcpy(&h, p + 2 * i, 2);
			x = h;
		}
		if (x != w[k]) {
			*got = x;
			*want = w[k];
			return (int64_t)i;
		}
		k += 7;
		if (k >= VAL_MOD)
			k -= VAL_MOD;
	}
	return -1;
}

static float decode(enum pbox_dtype dt, uint32_t u)
{
	float f;

	if (dt == PBOX_FP16)
		return sum_f16_to_f32((uint16_t)u);
	if (dt == PBOX_BF16)
		return sum_bf16_to_f32((uint16_t)u);
	memcpy(&f, &u, 4);
	return f;
}

/* ---- --collective: the sharded collectives, each layer's tensor through one ---- */

static size_t elem_size(enum pbox_dtype dt)
{
	return dt == PBOX_FP32 ? 4 : 2;
}

/* Rank @s's shard of @count elements among @n ranks: its elements, and
 * its first into *@first (the first count % n shards one longer). */
static uint64_t shard_of(uint64_t count, uint32_t n, uint32_t s, uint64_t *first)
{
	uint64_t q = count / n, r = count % n;

	*first = s * q + (s < r ? s : r);
	return q + (s < r);
}

/* A broadcast's root in iteration @v: every rank in turn. */
static uint32_t root_of(uint32_t v, uint32_t n)
{
	return v % n;
}

/* --collective async: element @i of the stores' initial parameters (rank
 * 0's), and whole numbers added to them, exact in every dtype. */
static float async_init(uint64_t i)
{
	return (float)(i % 7);
}

/* @count elements of @f each (f < 0: element i's async_init()) as @dt into @p. */
static void async_put(uint8_t *p, uint64_t count, enum pbox_dtype dt, float f)
{
	const size_t esz = elem_size(dt);

	for (uint64_t i = 0; i < count; i++) {
		const float x = f < 0 ? async_init(i) : f;

		sum_ops_best()->store[dt](p + i * esz, &x, 1);
	}
}

/* The store's parameters @p against what iteration @v may see: rank 0's
 * start plus a whole number T of deltas of 1, this rank's own @v among
 * them, at most @most (every rank's so far); @most == @least: exactly. */
static int64_t async_verify(const uint8_t *p, uint64_t count, enum pbox_dtype dt, uint32_t least,
			    uint32_t most, uint32_t *got, uint32_t *want)
{
	float f[1024];

	for (uint64_t at = 0; at < count; at += 1024) {
		const uint64_t k = count - at > 1024 ? 1024 : count - at;

		sum_ops_best()->load[dt](f, p + at * elem_size(dt), k);
		for (uint64_t i = 0; i < k; i++) {
			float t = f[i] - async_init(at + i);

			if (!(t >= (float)least && t <= (float)most) || t != (float)(uint32_t)t) {
				float w = async_init(at + i) + (float)least;

				memcpy(got, &f[i], 4);
				memcpy(want, &w, 4);
				return (int64_t)(at + i);
			}
		}
	}
	return -1;
}

/* Layer inputs for iteration @v: the whole tensor @whole (reduce-scatter,
 * a broadcast's root; the others' garbage), or this rank's shard @part
 * (all-gather). */
static void coll_fill(enum coll c, uint8_t *whole, uint8_t *part, uint64_t count,
		      enum pbox_dtype dt, const struct pbox_layout_info *li, uint32_t v)
{
	const uint32_t n = li->world_size;
	struct tables t;

	tables(&t, dt, li->rank, n, v);
	if (c == COLL_ASYNC && v == 0 && li->rank) /* not added: NaNs would show */
		memset(whole, 0xff, count * elem_size(dt));
	else if (c == COLL_ASYNC) /* rank 0's start, then a delta of 1 */
		async_put(whole, count, dt, v ? 1.0f : -1.0f);
	else if (c == COLL_AG) {
		uint64_t first, k = shard_of(count, n, li->rank, &first);

		fill(part, k, dt, &t, first);
	} else if (c == COLL_BCAST && li->rank != root_of(v, n)) {
		memset(whole, 0xff, count * elem_size(dt)); /* NaNs: all of it must come */
	} else {
		fill(whole, count, dt, &t, 0);
	}
}

/* Layer tensor @key's collective, started. */
static int coll_start(struct pbox *px, enum coll c, uint64_t key, uint8_t *whole, uint8_t *part,
		      uint64_t count, enum pbox_dtype dt, const struct pbox_layout_info *li,
		      uint32_t v, struct pbox_handle **op)
{
	const uint32_t n = li->world_size;
	uint64_t *counts = calloc(n, sizeof(*counts)), first;
	int rc;

	if (!counts)
		return PBOX_ENOMEM;
	for (uint32_t s = 0; s < n; s++)
		counts[s] = shard_of(count, n, s, &first);
	rc = c == COLL_RS      ? pbox_reduce_scatter(px, key, whole, part, counts, dt, op)
	     : c == COLL_AG    ? pbox_all_gather(px, key, part, whole, counts, dt, op)
	     : c == COLL_ASYNC ? pbox_push_pull_async(px, key, whole, part, count, dt, op)
			       : pbox_broadcast(px, key, whole, count, dt, root_of(v, n), op);
	free(counts);
	return rc;
}

/* The first wrong element of the collective's result (its index in the
 * whole tensor), or -1. */
static int64_t coll_verify(enum coll c, const uint8_t *whole, const uint8_t *part, uint64_t count,
			   enum pbox_dtype dt, const struct pbox_layout_info *li, uint32_t v,
			   uint32_t *got, uint32_t *want)
{
	const uint32_t n = li->world_size;
	struct tables t;
	uint64_t first, k;
	int64_t bad;

	if (c == COLL_ASYNC) /* its own v deltas in, whole numbers (the others' any) */
		return async_verify(part, count, dt, v, 1u << 20, got, want);
	if (c == COLL_RS) {
		tables(&t, dt, li->rank, n, v);
		k = shard_of(count, n, li->rank, &first);
		bad = verify(part, k, dt, t.want, first, got, want);
		return bad < 0 ? -1 : (int64_t)first + bad;
	}
	if (c == COLL_BCAST) {
		tables(&t, dt, root_of(v, n), n, v);
		return verify(whole, count, dt, t.own, 0, got, want);
	}
	for (uint32_t s = 0; s < n; s++) { /* all-gather: shard s is rank s's own */
		tables(&t, dt, s, n, v);
		k = shard_of(count, n, s, &first);
		bad = verify(whole + first * elem_size(dt), k, dt, t.own, first, got, want);
		if (bad >= 0)
			return (int64_t)first + bad;
	}
	return -1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pbox-bench --config FILE [--model NAME | --size BYTES] [--tensors T]\n"
		"                  [--dtype fp32|fp16|bf16] [--iters N] [--warmup W] [--layout] "
		"[--quiet]\n"
		"                  [--late] [--mixed] [--backprop GAP_US [--fifo]] [--survive]\n"
		"                  [--rejoin ITER] [--sync]\n"
		"  --model NAME  tensor sizes of %s\n"
		"  --size BYTES  one model of BYTES (K/M/G suffix) in T equal tensors (default 1)\n"
		"  --late        declare nothing: the first iteration grows the job, as a\n"
		"                framework's first collectives do\n"
		"  --mixed       tensors of fp32, bf16 and fp16 in turn, in one context\n"
		"  --backprop US each layer's gradient ready US after the next layer's; reports\n"
		"                the time from the end of backward to layer 0's sum (fwd_ms)\n"
		"  --fifo        with --backprop: first come, first served, not by layer\n"
		"  --survive     a rank or the box lost: go on with the survivors (pbox_shrink)\n"
		"  --rejoin ITER before iteration ITER, take back a box lost and back (pbox_rejoin)\n"
		"  --sync        a barrier (a one-element allreduce, not timed) before each\n"
		"                iteration: the ranks start it together\n"
		"  --compress SCHEME:PLAN  sign|topk|randk|bf16|fp16 on none|all|bytecomp|brute\n"
		"                (or PUSH>SUM, one direction alone: fp16>none:all, on none|all)\n"
		"                of the layers ([job] compression must not be none)\n"
		"  --compress-rate PPM  the job's compression_rate, for bytecomp's model\n"
		"  --compute-per-mb US  with --backprop: US more compute per MiB of a layer\n"
		"  --scale DIV   a --model's tensors DIV times smaller\n"
		"  --collective C  allreduce (the default), reduce_scatter, all_gather,\n"
		"                broadcast (from each rank in turn) or async (each tensor a\n"
		"                store: rank 0's start, then deltas of 1) of each tensor\n",
		model_names);
}

/* A decimal count with an optional K, M or G (binary): never octal or hex
 * ("010" is ten), never wrapped. */
static int parse_u64(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned shift;
	char *end;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
	if (shift)
		end++;
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {{"config", 1, 0, 'c'},
					   {"model", 1, 0, 'm'},
					   {"size", 1, 0, 's'},
					   {"tensors", 1, 0, 't'},
					   {"dtype", 1, 0, 'd'},
					   {"iters", 1, 0, 'i'},
					   {"warmup", 1, 0, 'w'},
					   {"layout", 0, 0, 'l'},
					   {"quiet", 0, 0, 'q'},
					   {"late", 0, 0, 'L'},
					   {"mixed", 0, 0, 'M'},
					   {"help", 0, 0, 'h'},
					   {"backprop", 1, 0, 'b'},
					   {"fifo", 0, 0, 'f'},
					   {"survive", 0, 0, 'S'},
					   {"rejoin", 1, 0, 'R'},
					   {"sync", 0, 0, 'y'},
					   {"compress", 1, 0, 'C'},
					   {"compress-rate", 1, 0, 'r'},
					   {"compute-per-mb", 1, 0, 'P'},
					   {"scale", 1, 0, 'D'},
					   {"collective", 1, 0, 'K'},
					   {0, 0, 0, 0}};
	uint64_t v;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'c':
			o->config = optarg;
			break;
		case 'm':
			o->model = optarg;
			break;
		case 'd':
			if (!strcmp(optarg, "fp32"))
				o->dtype = PBOX_FP32;
			else if (!strcmp(optarg, "fp16"))
				o->dtype = PBOX_FP16;
			else if (!strcmp(optarg, "bf16"))
				o->dtype = PBOX_BF16;
			else
				return -1;
			break;
		case 'l':
			o->layout = true;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'L':
			o->late = true;
			break;
		case 'M':
			o->mixed = true;
			break;
		case 'f':
			o->fifo = true;
			break;
		case 'S':
			o->survive = true;
			break;
		case 'y':
			o->sync = true;
			break;
		case 'R':
			if (parse_u64(optarg, &o->rejoin) || !o->rejoin) {
				fprintf(stderr, "pbox-bench: --rejoin: '%s' is not an iteration\n",
					optarg);
				return -1;
			}
			break;
		case 'b':
			if (parse_u64(optarg, &o->gap_us) || o->gap_us > 10000000) {
				fprintf(stderr,
					"pbox-bench: --backprop: '%s' is not a number of "
					"microseconds up to 10 s\n",
					optarg);
				return -1;
			}
			o->backprop = true;
			break;
		case 'C':
			if (bench_comp_parse(optarg, &o->comp)) {
				fprintf(stderr,
					"pbox-bench: --compress: '%s' is not SCHEME:PLAN (sign, topk, "
					"randk, bf16 or fp16; none, all, bytecomp or brute), nor "
					"PUSH>SUM:PLAN (none or all)\n",
					optarg);
				return -1;
			}
			break;
		case 'r':
		case 'P':
		case 'D':
			if (parse_u64(optarg, &v) || !v || v > 10000000) {
				fprintf(stderr,
					"pbox-bench: '%s' is not a number from 1 to 10000000\n",
					optarg);
				return -1;
			}
			if (c == 'r')
				o->comp.rate_ppm = (uint32_t)v;
			else if (c == 'P')
				o->per_mb_us = v;
			else
				o->scale = v;
			break;
		case 'K':
			for (v = 0; v < COLL_COUNT && strcmp(optarg, coll_names[v]); v++)
				;
			if (v == COLL_COUNT) {
				fprintf(stderr,
					"pbox-bench: --collective: '%s' is not allreduce, "
					"reduce_scatter, all_gather, broadcast or async\n",
					optarg);
				return -1;
			}
			o->coll = (enum coll)v;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 's':
		case 't':
		case 'i':
		case 'w':
			if (parse_u64(optarg, &v) || (c != 's' && v > UINT32_MAX)) {
				fprintf(stderr, "pbox-bench: --%s: '%s' is not a number\n",
					c == 's'   ? "size"
					: c == 't' ? "tensors"
					: c == 'i' ? "iters"
						   : "warmup",
					optarg);
				return -1;
			}
			if (c == 's')
				o->size = v;
			else if (c == 't')
				o->tensors = (uint32_t)v;
			else if (c == 'i')
				o->iters = (uint32_t)v;
			else
				o->warmup = (uint32_t)v;
			break;
		default:
			return -1;
		}
	}
	if (optind != argc || (o->model && o->size) || !o->iters || !o->tensors ||
	    (o->fifo && !o->backprop) || (o->sync && o->survive) ||
	    (o->comp.on && (o->dtype != PBOX_FP32 || o->mixed || o->late || o->survive)) ||
	    (o->per_mb_us && !o->backprop) || (o->scale && !o->model) ||
	    (o->coll && (o->comp.on || o->backprop)))
		return -1;
	if (!o->comp.rate_ppm)
		o->comp.rate_ppm = 10000;
	return 0;
}

/* The model's tensors, or o->size in o->tensors equal parts. */
static int build_model(const struct opts *o, struct model *m)
{
	size_t esz = o->dtype == PBOX_FP32 ? 4 : 2;

	if (o->model) {
		if (model_get(o->model, m)) {
			fprintf(stderr, "pbox-bench: unknown model '%s' (%s)\n", o->model,
				model_names);
			return -1;
		}
		for (uint32_t i = 0; o->scale > 1 && i < m->n; i++) {
			m->total -= m->count[i];
			m->count[i] = (m->count[i] / o->scale) ? m->count[i] / o->scale : 1;
			m->total += m->count[i];
		}
		return 0;
	}
	if (o->size < esz * o->tensors) {
		fprintf(stderr,
			"pbox-bench: --size %" PRIu64 " is less than one element per tensor\n",
			o->size);
		return -1;
	}
	memset(m, 0, sizeof(*m));
	m->name = "synthetic";
	m->n = o->tensors;
	m->count = calloc(m->n, sizeof(uint64_t));
	if (!m->count)
		return -1;
	for (uint32_t i = 0; i < m->n; i++) {
		m->count[i] = o->size / esz / m->n;
		m->total += m->count[i];
	}
	return 0;
}

static void print_layout(struct pbox *px, const struct model *m, enum pbox_dtype dt)
{
	struct pbox_layout_info li;
	struct pbox_machine_info mi;
	struct pbox_stats st;
	struct pbox_ss_stats *ss;

	if (pbox_layout(px, &li) || pbox_machine(px, &mi))
		return;
	if (mi.machines != li.world_size) /* the layout's n counts machines */
		printf("layout: local aggregation: %u ranks on %u machines, %u on this one\n",
		       li.world_size, mi.machines, mi.local_size);
	printf("layout: %s n=%u k=%.2f box endpoints=%u fragment=%u chunk=%u model %s %.1f MiB "
	       "%s\n",
	       li.layout, mi.machines, li.k, li.box_endpoints, li.fragment_size, li.chunk_size,
	       m->name, (double)li.total_bytes / 1048576,
	       dt == PBOX_FP32	 ? "fp32"
	       : dt == PBOX_FP16 ? "fp16"
				 : "bf16");
	printf("layout: pacing at %.0f Mb/s\n", li.pace_mbps);
	printf("layout: %s: box %.4f of M, each SS_GPU %.4f of M; assigned: box %.4f, this "
	       "SS_GPU %.4f\n",
	       strcmp(li.layout, "unified") ? "shares" : "Theorem 1", li.box_share, li.ssgpu_share,
	       (double)li.box_bytes / (double)li.total_bytes,
	       (double)li.ssgpu_bytes_mine / (double)li.total_bytes);
	ss = calloc(li.box_endpoints + li.world_size, sizeof(*ss));
	if (ss && pbox_stats(px, &st, ss, li.box_endpoints + li.world_size) == 0)
		for (uint32_t i = 0; i < st.n_ss; i++)
			printf("layout:   %-40s %7" PRIu64 " chunks %10.2f MiB\n", ss[i].name,
			       ss[i].chunks, (double)ss[i].bytes / 1048576);
	free(ss);
}

/* --survive: an iteration failed: reap its handles (@ok: those that had
 * their sum), shrink to the survivors and say so; -1 to stop, else
 * pbox_shrink()'s PBOX_OK (the failed push-pulls are pushed again as they
 * are: they resume) or PBOX_REDO (the iteration again from its inputs);
 * @li the new layout. */
static int survive(struct pbox *px, struct pbox_handle **ops, uint8_t *ok, uint32_t n,
		   struct pbox_layout_info *li, uint32_t *v)
{
	char why[512];
	uint32_t was = li->rank, world = li->world_size;
	uint64_t t0, step = *v;
	int rc;

	snprintf(why, sizeof(why), "%s", pbox_last_error());
	for (uint32_t i = 0; i < n; i++)
		if (ops[i]) {
			ok[i] = pbox_wait(ops[i]) == PBOX_OK; /* or failed with the job */
			ops[i] = NULL;
		}
	t0 = now_ns();
	/* the survivors redo the earliest iteration any of them failed in: a
	 * rank can finish one that another cannot (the lost rank's SS_GPU
	 * answered it but not the other before it died) */
	rc = pbox_shrink_step(px, &step);
	if (rc < 0) {
		fprintf(stderr, "pbox-bench: rank %u: iteration %u: %s; pbox_shrink_step: %s\n",
			was, *v, why, pbox_last_error());
		return -1;
	}
	pbox_layout(px, li);
	printf("bench: rank %u: iteration %u failed: %s\n", was, *v, why);
	if (step != *v)
		printf("bench: rank %u: the survivors redo iteration %" PRIu64
		       " (this rank failed in %u)\n",
		       li->rank, step, *v);
	*v = (uint32_t)step;
	printf("bench: rank %u: recovered: rank %u of %u (was %u), k=%.2f, %s, in %.1f ms\n", was,
	       li->rank, li->world_size, world, li->k,
	       rc == PBOX_OK ? "resuming the iteration" : "redoing the iteration",
	       (double)(now_ns() - t0) / 1e6);
	fflush(stdout);
	return rc;
}

/* The bench's own bookkeeping (the --sync barrier) sums @n fp32 under
 * @key exactly: declared on first use (a second declaration is refused,
 * and harmless), and sent uncompressed under [job] compression (without
 * it, pbox_set_compression() refuses, and every push is exact anyway). */
static void exact_key(struct pbox *px, uint64_t key, uint64_t n)
{
	if (pbox_declare(px, key, n, PBOX_FP32, 0) == PBOX_OK)
		(void)pbox_set_compression(px, key, "none");
}

static void print_traffic(struct pbox *px, uint32_t rank)
{
	struct pbox_stats st;
	struct pbox_ss_stats ss[128];
	struct pbox_tuning tu;

	if (pbox_stats(px, &st, ss, 128))
		return;
	printf("bench: rank %u moved %.1f MiB out, %.1f MiB in (payload), %" PRIu64
	       " retransmits; its SS_GPU summed %.1f MiB and sent %.1f MiB of results\n",
	       rank, (double)st.tx_bytes / 1048576, (double)st.rx_bytes / 1048576, st.retransmits,
	       (double)st.ssgpu_summed / 1048576, (double)st.ssgpu_results / 1048576);
	printf("bench: rank %u datagrams: %" PRIu64 " out (%" PRIu64 " in GSO sends), %" PRIu64
	       " in (%" PRIu64 " GRO-coalesced); %" PRIu64 " probes, %" PRIu64
	       " acknowledged (our part was in), %" PRIu64 " NACKs taken, %" PRIu64
	       " sent by its SS_GPU, %" PRIu64 " needless resends it got\n",
	       rank, st.tx_pkts, st.tx_gso, st.rx_pkts, st.rx_gro, st.probes, st.acks, st.nacks,
	       st.nacks_sent, st.ssgpu_needless);
	printf("bench: rank %u recovery: %" PRIu64 " fast probes, %" PRIu64 " tail probes, %" PRIu64
	       " results pulled; timeout %.1f ms, time to a sum %.1f ms, a probe's round trip %.2f ms\n",
	       rank, st.fast_probes, st.tail_probes, st.pulls, (double)st.rto_ns / 1e6,
	       (double)st.srtt_ns / 1e6, (double)st.probe_rtt_ns / 1e6);
	if (pbox_tuning(px, &tu) == 0)
		printf("bench: rank %u tuning: credit %" PRIu64 " KiB, partition %" PRIu64
		       " KiB, %s after %u windows; goodput %.1f MB/s at first, %.1f MB/s best\n",
		       rank, tu.credit_bytes >> 10, tu.partition_bytes >> 10,
		       tu.converged ? "converged" : "searching", tu.windows, tu.goodput_first_mbps,
		       tu.goodput_best_mbps);
	for (uint32_t i = 0; i < st.n_ss; i++)
		if (ss[i].bytes)
			printf("bench:   %-40s sent %10.1f MiB  got %10.1f MiB  retrans %" PRIu64
			       "\n",
			       ss[i].name, (double)ss[i].tx / 1048576, (double)ss[i].rx / 1048576,
			       ss[i].retrans);
}

/* --sync: every rank adds 1 under @key; 0 once all @n have, before the
 * next iteration's clock starts. */
static int barrier(struct pbox *px, uint64_t key, uint32_t n)
{
	struct pbox_handle *h;
	float one = 1;

	exact_key(px, key, 1);
	if (pbox_push_pull(px, key, &one, &one, 1, PBOX_FP32, &h) || pbox_wait(h)) {
		fprintf(stderr, "pbox-bench: barrier: %s\n", pbox_last_error());
		return -1;
	}
	if (one != (float)n) {
		fprintf(stderr, "pbox-bench: barrier: WRONG SUM %g for %u ranks\n", one, n);
		return -1;
	}
	return 0;
}

/* --collective async, after the last iteration: once every rank is done
 * (a barrier), a call of nothing on each store; each must be rank 0's
 * start plus every rank's every delta, once. 0, or -1 said. */
static int async_final(struct pbox *px, const struct opts *o, const struct model *m, uint8_t **buf,
		       uint8_t **part, struct pbox_handle **ops, const struct pbox_layout_info *li)
{
	const uint32_t deltas = li->world_size * (o->warmup + o->iters - 1);

	if (barrier(px, m->n, li->world_size))
		return -1;
	for (uint32_t i = 0; i < m->n; i++) {
		enum pbox_dtype dt = dtype_of(o, i);
		uint32_t got, want;
		int64_t bad;

		memset(buf[i], 0, m->count[i] * elem_size(dt));
		if (pbox_push_pull_async(px, key_of(o, m->n, i), buf[i], part[i], m->count[i], dt,
					 &ops[i]) ||
		    pbox_wait(ops[i])) {
			ops[i] = NULL;
			fprintf(stderr, "pbox-bench: rank %u: the stores' last call: %s\n",
				li->rank, pbox_last_error());
			return -1;
		}
		ops[i] = NULL;
		bad = async_verify(part[i], m->count[i], dt, deltas, deltas, &got, &want);
		if (bad >= 0) {
			fprintf(stderr,
				"pbox-bench: rank %u: WRONG STORE in tensor %u element %" PRId64
				": got %g, want %g (every rank's %u deltas once)\n",
				li->rank, i, bad, (double)decode(dt, got), (double)decode(dt, want),
				deltas);
			return -1;
		}
	}
	printf("bench: rank %u: every store holds rank 0's start and every rank's %u deltas, "
	       "each once\n",
	       li->rank, deltas);
	return 0;
}

/* This process's resident memory (VmRSS), or 0 when /proc says nothing. */
static unsigned long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[128];
	unsigned long kib = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %lu kB", &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

int main(int argc, char **argv)
{
	struct opts o = {.tensors = 1, .iters = 10, .warmup = 1};
	struct pbox_layout_info li;
	struct pbox_handle **ops = NULL;
	struct model m;
	struct tables tb[3];
	uint64_t model_bytes = 0;
	uint8_t **buf = NULL, **part = NULL, *ok = NULL;
	struct pbox *px = NULL;
	bool resume = false;
	uint64_t t0 = 0;
	double sum_ms = 0, sum_fwd = 0, fwd_ms = 0;
	unsigned long rss_warm = 0;
	uint32_t timed = 0, i, v;
	uint64_t *compute_us = NULL, *keys = NULL;
	struct bench_comp_report crep = {0};
	bool lossy;
	size_t esz;
	int rc = 1, st;

	if (parse_args(argc, argv, &o) || (!o.model && !o.size)) {
		usage(stderr);
		return 2;
	}
	esz = 4; /* room for any dtype */
	if (build_model(&o, &m))
		return 2;
	if (pbox_init(o.config, &px)) {
		fprintf(stderr, "pbox-bench: %s\n", pbox_last_error());
		model_free(&m);
		return 1;
	}
	/* sign, topk and randk do not keep these sums exact; bf16 and fp16 do */
	lossy = o.comp.on && !o.comp.lossless;
	compute_us = calloc(m.n, sizeof(*compute_us));
	keys = calloc(m.n, sizeof(*keys));
	for (i = 0; compute_us && keys && i < m.n; i++) {
		compute_us[i] = o.gap_us + o.per_mb_us * m.count[i] * 4 / 1048576;
		keys[i] = key_of(&o, m.n, i);
	}
	buf = calloc(m.n, sizeof(*buf));
	part = calloc(m.n, sizeof(*part));
	ops = calloc(m.n, sizeof(*ops));
	ok = calloc(m.n, 1);
	for (i = 0; buf && part && ops && ok && i < m.n; i++) {
		buf[i] = malloc(m.count[i] * esz);
		part[i] = o.coll ? malloc(m.count[i] * esz) : buf[i]; /* a shard's room */
		model_bytes += m.count[i] * (dtype_of(&o, i) == PBOX_FP32 ? 4 : 2);
		if (!buf[i] || !part[i] ||
		    (!o.late && !o.coll && /* a collective's pieces are first seen in use */
		     pbox_declare(px, key_of(&o, m.n, i), m.count[i], dtype_of(&o, i),
				  prio_of(&o, i))))
			break;
	}
	if (i == m.n && o.sync && !o.late && pbox_declare(px, m.n, 1, PBOX_FP32, 0))
		i = 0; /* the barrier's key follows the layers' */
	if (!buf || !part || !ops || !ok || !compute_us || !keys || i < m.n) {
		fprintf(stderr, "pbox-bench: %s\n",
			buf && part && ops && ok ? pbox_last_error() : "out of memory");
		goto out;
	}
	st = pbox_start(px);
	if (st) { /* the words, and the code (the same on every rank) */
		fprintf(stderr, "pbox-bench: %s (%s)\n", pbox_last_error(), pbox_strerror(st));
		goto out;
	}
	pbox_layout(px, &li);
	printf("bench: rank %u transport: %s, paced at %.1f Mb/s\n", li.rank, li.transport,
	       li.pace_mbps);
	if (o.layout && !o.late && !o.coll)
		print_layout(px, &m, o.dtype);
	if (o.comp.on) { /* which layers travel compressed, agreed by every rank */
		const struct bench_layers L = {.n = m.n,
					       .key = keys,
					       .count = m.count,
					       .compute_us = compute_us,
					       .buf = (void *const *)buf};

		st = bench_comp_apply(px, &o.comp, &L, li.rank, &crep);
		if (st) {
			fprintf(stderr, "pbox-bench: --compress: %s\n", pbox_last_error());
			goto out;
		}
		printf("bench: rank %u: %s on %s of the layers: %u of %u (%.1f of %.1f MiB, %u "
		       "one direction alone)",
		       li.rank, o.comp.scheme, bench_plan_name(o.comp.plan), crep.compressed, m.n,
		       (double)crep.compressed_bytes / 1048576, (double)m.total * 4 / 1048576,
		       crep.one_way);
		if (o.comp.plan >= BENCH_PLAN_BYTECOMP)
			printf("; the link %.3f Gb/s, the compressor %.1f Gb/s on this CPU; decided "
			       "in %.2f ms; modelled step %.1f ms (none %.1f, all %.1f)",
			       crep.link_gbps, crep.enc_gbps, crep.decide_ms, crep.model_ms,
			       crep.model_none_ms, crep.model_all_ms);
		printf("\n");
	}
	for (v = 0; v < o.warmup + o.iters; v++) {
		uint64_t t1;

		if (v == o.warmup)
			rss_warm = rss_kib();
		if (!resume && o.rejoin == v + 1) { /* the boxes left out, if they are back */
			double k = li.k;
			uint64_t r0 = now_ns();

			if (pbox_rejoin(px)) {
				fprintf(stderr, "pbox-bench: rank %u: pbox_rejoin: %s\n", li.rank,
					pbox_last_error());
				goto out;
			}
			pbox_layout(px, &li);
			printf("bench: rank %u: rejoined before iteration %u: k=%.2f (was %.2f), in %.1f "
			       "ms\n",
			       li.rank, v + 1, li.k, k, (double)(now_ns() - r0) / 1e6);
		}
		if (!resume) {
			for (i = 0; i < 3; i++)
				tables(&tb[i], dtype_of(&o, i), li.rank, li.world_size, v);
			for (i = 0; i < m.n; i++)
				if (o.coll)
					coll_fill(o.coll, buf[i], part[i], m.count[i],
						  dtype_of(&o, i), &li, v);
				else
					fill(buf[i], m.count[i], dtype_of(&o, i),
					     &tb[o.mixed ? i % 3 : 0], 0);
			memset(ok, 0, m.n);
			if (o.sync && barrier(px, m.n, li.world_size))
				goto out;
			t0 = now_ns();
		}
		for (i = m.n; i-- > 0;) {    /* backward order: the last layer first */
			if (resume && ok[i]) /* summed before the failure */
				continue;
			if (o.backprop && i + 1 < m.n && !resume)
				nap_us(compute_us[i]); /* layer i's backward compute */
			if (o.coll ? coll_start(px, o.coll, key_of(&o, m.n, i), buf[i], part[i],
						m.count[i], dtype_of(&o, i), &li, v, &ops[i])
				   : pbox_push_pull(px, key_of(&o, m.n, i), buf[i], buf[i],
						    m.count[i], dtype_of(&o, i), &ops[i]))
				goto failed;
		}
		resume = false;
		if (o.backprop && ops[0]) { /* the next forward waits for layer 0 first */
			uint64_t bwd_end = now_ns();

			st = pbox_wait(ops[0]);
			ops[0] = NULL;
			if (st)
				goto failed;
			ok[0] = 1;
			fwd_ms = (double)(now_ns() - bwd_end) / 1e6;
			if (v >= o.warmup)
				sum_fwd += fwd_ms;
		}
		for (i = m.n; i-- > 0;) {
			st = ops[i] ? pbox_wait(ops[i]) : 0;
			ok[i] |= ops[i] && !st;
			ops[i] = NULL;
			if (st)
				goto failed;
		}
		t1 = now_ns();
		for (i = 0; i < m.n; i++) {
			uint32_t got, want;
			int64_t bad =
				lossy	 ? finite(buf[i], m.count[i], &got, &want)
				: o.coll ? coll_verify(o.coll, buf[i], part[i], m.count[i],
						       dtype_of(&o, i), &li, v, &got, &want)
					 : verify(buf[i], m.count[i], dtype_of(&o, i),
						  &tb[o.mixed ? i % 3 : 0].want[0], 0, &got, &want);

			if (bad >= 0) {
				fprintf(stderr,
					"pbox-bench: rank %u: iteration %u: WRONG SUM in tensor %u "
					"element %" PRId64 ": got %g, want %g\n",
					li.rank, v, i, bad, (double)decode(dtype_of(&o, i), got),
					(double)decode(dtype_of(&o, i), want));
				goto out;
			}
		}
		if (v >= o.warmup) {
			sum_ms += (double)(t1 - t0) / 1e6;
			timed++;
		}
		if (!o.quiet && o.backprop)
			printf("bench: rank %u: iteration %u/%u%s: %.2f ms; layer 0 summed %.2f ms "
			       "after the backward pass ended (%s), verified\n",
			       li.rank, v + 1, o.warmup + o.iters, v < o.warmup ? " (warm-up)" : "",
			       (double)(t1 - t0) / 1e6, fwd_ms,
			       o.fifo ? "first come, first served" : "by priority");
		else if (!o.quiet)
			printf("bench: rank %u: iteration %u/%u%s: %.2f ms, goodput %.2f Gb/s, "
			       "verified\n",
			       li.rank, v + 1, o.warmup + o.iters, v < o.warmup ? " (warm-up)" : "",
			       (double)(t1 - t0) / 1e6,
			       (double)model_bytes * 8 / (double)(t1 - t0));
		fflush(stdout);
		continue;
	failed:
		st = o.survive ? survive(px, ops, ok, m.n, &li, &v) : -1;
		if (st < 0) {
			fprintf(stderr, "pbox-bench: rank %u: iteration %u: %s\n", li.rank, v,
				pbox_last_error());
			goto out;
		}
		resume = st == PBOX_OK; /* its push-pulls go on where they were */
		v--;			/* or the iteration again, by the survivors */
	}
	if (o.coll == COLL_ASYNC && async_final(px, &o, &m, buf, part, ops, &li))
		goto out;
	if (!o.quiet)
		print_traffic(px, li.rank);
	printf("RESULT bench model=%s n=%u k=%.2f iters=%u mean_ms=%.3f goodput_gbps=%.3f ", m.name,
	       li.world_size, li.k, timed, sum_ms / timed,
	       (double)model_bytes * 8 / (sum_ms / timed * 1e6));
	if (o.coll) {
		pbox_layout(px, &li); /* the pace the job ended at */
		printf("collective=%s pace_mbps=%.1f ", coll_names[o.coll], li.pace_mbps);
	}
	if (o.backprop)
		printf("fwd_ms=%.3f sched=%s ", sum_fwd / timed, o.fifo ? "fifo" : "priority");
	if (o.comp.on)
		printf("comp=%s plan=%s compressed=%u decide_ms=%.2f ", o.comp.scheme,
		       bench_plan_name(o.comp.plan), crep.compressed, crep.decide_ms);
	printf("rss_warm_kib=%lu rss_end_kib=%lu verified=%s\n", rss_warm, rss_kib(),
	       lossy ? "finite" : "yes");
	rc = 0;
out:
	if (pbox_finalize(px) && rc == 0) {
		fprintf(stderr, "pbox-bench: finalize: %s\n", pbox_last_error());
		rc = 1;
	}
	for (i = 0; buf && i < m.n; i++) {
		if (part && part[i] != buf[i])
			free(part[i]);
		free(buf[i]);
	}
	free(buf);
	free(part);
	free(compute_us);
	free(keys);
	free(ops);
	free(ok);
	model_free(&m);
	return rc;
}
