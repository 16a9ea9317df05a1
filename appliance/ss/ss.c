/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The summation service core: job layout and the fragment state machine.
 * Runs per packet: ss_push() is the only data-path function here. It takes
 * no lock and no atomic; a job belongs to one core.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ss.h"

_Static_assert(PBOX_DTYPE_FP32 == SUM_FP32 && PBOX_DTYPE_FP16 == SUM_FP16 &&
		       PBOX_DTYPE_BF16 == SUM_BF16 && PBOX_DTYPE_COUNT == SUM_DTYPE_COUNT,
	       "wire dtypes are enum sum_dtype");
_Static_assert(PBOX_COMP_COUNT == COMP_SCHEME_COUNT, "the dtype byte's compressors are comp.h's");

static const char *const drop_names[SS_DROP_COUNT] = {
#define SS__DROP_NAME(n, id, s) [SS_DROP_##n] = s,
	SS_FOREACH_DROP(SS__DROP_NAME)
#undef SS__DROP_NAME
};

static const char *const drop_ids[SS_DROP_COUNT] = {
#define SS__DROP_ID(n, id, s) [SS_DROP_##n] = #id,
	SS_FOREACH_DROP(SS__DROP_ID)
#undef SS__DROP_ID
};

const char *ss_drop_name(enum ss_drop d)
{
	return (unsigned)d < SS_DROP_COUNT ? drop_names[d] : "?";
}

const char *ss_drop_id(enum ss_drop d)
{
	return (unsigned)d < SS_DROP_COUNT ? drop_ids[d] : "?";
}

const char *ss_job_desc_check(const struct ss_job_desc *d)
{
	unsigned e;

	if (d->n < 1 || d->n > SS_MAX_RANKS)
		return "n must be 1 to 1024";
	if (d->dtype >= SUM_DTYPE_COUNT)
		return "unknown dtype";
	if (d->frag_size < 64 || d->frag_size > 65535 || (d->frag_size & (d->frag_size - 1)))
		return "fragment size must be a power of two from 64 to 32768";
	if (d->chunk_size < d->frag_size || (d->chunk_size & (d->chunk_size - 1)))
		return "chunk size must be a power of two, at least the fragment size";
	if (d->n_eps > SS_MAX_EPS)
		return "too many endpoints";
	for (e = 0; e < d->n_eps; e++)
		if (d->ep_chunks[e] > (1u << 30) / (d->chunk_size / d->frag_size))
			return "too many chunks on an endpoint";
	if (d->comp_ppm) {
		const struct comp_spec topk = {COMP_TOPK, d->comp_ppm};

		if (d->dtype != SUM_FP32)
			return "compressed pushes are of fp32 jobs only";
		if (d->comp_ppm > COMP_RATE_MAX_PPM ||
		    comp_bytes(&topk, d->frag_size / 4) > d->frag_size)
			return "compression rate must be 1 to 500000 ppm (top-k's indices and values "
			       "fit the fragment)";
	}
	for (e = 0; e < d->n_shorts; e++) {
		const struct ss_short *s = &d->shorts[e];

		if (s->ep >= d->n_eps || s->chunk >= d->ep_chunks[s->ep])
			return "a short chunk is not one of the job's chunks";
		if (!s->bytes || s->bytes >= d->chunk_size || s->bytes % sum_dtype_size(d->dtype))
			return "a short chunk's bytes must be a whole number of elements below the "
			       "chunk size";
	}
	for (e = 0; e < d->n_roots; e++) {
		const struct ss_root *r = &d->roots[e];

		if (r->ep >= d->n_eps || r->chunk >= d->ep_chunks[r->ep])
			return "a rooted chunk is not one of the job's chunks";
		if (r->mode != SS_REDUCE && r->mode != SS_BCAST && r->mode != SS_ASYNC)
			return "a rooted chunk's mode must be reduce, broadcast or async";
		if (r->root >= d->n)
			return "a rooted chunk's root must be below n";
	}
	return NULL;
}

/* The layout, computed once for sizing and once for carving. */
struct layout {
	size_t frag, bitmap, peer, answered, res, acc, cacc, resid, scratch, stash, txref, applied,
		wake, end;
	uint32_t n_frags;
};

static size_t align_up(size_t x, size_t a)
{
	return (x + a - 1) / a * a;
}

/* Does @d have SS_ASYNC chunks? */
static bool has_async(const struct ss_job_desc *d)
{
	for (uint32_t e = 0; e < d->n_roots; e++)
		if (d->roots[e].mode == SS_ASYNC)
			return true;
	return false;
}

static void layout(const struct ss_job_desc *d, size_t txref_size, struct layout *l)
{
	size_t fpc = d->chunk_size / d->frag_size, words = (d->n + 63) / 64, x, F = 0;
	unsigned e;

	for (e = 0; e < d->n_eps; e++)
		F += (size_t)d->ep_chunks[e] * fpc;
	l->n_frags = (uint32_t)F;
	/* Result buffers first, aligned to their size, so that none crosses a
	 * page (one IOVA per buffer); then the rest. */
	x = align_up(sizeof(struct ss_job), d->frag_size);
	l->res = x;
	x += F * 2 * d->frag_size;
	x = align_up(x, SS_CACHE_LINE);
	l->acc = x;
	if (d->dtype != SUM_FP32)
		x += F * (d->frag_size / sum_dtype_size(d->dtype)) * sizeof(float);
	x = align_up(x, SS_CACHE_LINE);
	l->cacc = x;
	l->resid = x + (d->comp_ppm ? F * d->frag_size : 0);
	l->scratch = l->resid + (d->comp_ppm ? F * d->frag_size : 0);
	x = align_up(l->scratch + (d->comp_ppm ? comp_scratch_bytes(d->frag_size / 4) : 0),
		     SS_CACHE_LINE);
	l->stash = x;
	if (d->in_order)
		x += F * (d->n - 1u) * d->frag_size;
	l->frag = x;
	x += F * sizeof(struct ss_frag);
	x = align_up(x, 8);
	l->bitmap = x;
	x += F * words * sizeof(uint64_t);
	x = align_up(x, 8);
	l->peer = x;
	x += (size_t)d->n_eps * d->n * sizeof(struct nic_addr);
	x = align_up(x, 8);
	l->answered = x;
	x += F * d->n * sizeof(struct ss_answered);
	x = align_up(x, 16);
	l->txref = x;
	x += F * 2 * txref_size;
	x = align_up(x, 8);
	l->applied = x;
	l->wake = x;
	if (has_async(d)) {
		x += F * d->n * sizeof(uint32_t);
		x = align_up(x, 8);
		l->wake = x;
		x += words * sizeof(uint64_t);
	}
	l->end = align_up(x, SS_CACHE_LINE);
}

size_t ss_job_bytes(const struct ss_job_desc *d, size_t txref_size)
{
	struct layout l;

	layout(d, txref_size, &l);
	return l.end;
}

size_t ss_job_align(const struct ss_job_desc *d)
{
	return d->frag_size > SS_CACHE_LINE ? d->frag_size : SS_CACHE_LINE;
}

struct ss_job *ss_job_init(void *mem, const struct ss_job_desc *d, size_t txref_size,
			   const struct sum_ops *ops)
{
	struct ss_job *j = mem;
	uint8_t *base = mem;
	struct layout l;
	uint32_t f, first = 0;
	unsigned e;

	layout(d, txref_size, &l);
	memset(j, 0, sizeof(*j));
	j->id = d->id;
	j->mac = d->mac;
	j->n = d->n;
	j->words = (uint16_t)((d->n + 63) / 64);
	j->dtype = d->dtype;
	j->elem = (uint8_t)sum_dtype_size(d->dtype);
	j->n_eps = d->n_eps;
	j->frag_size = d->frag_size;
	j->frags_per_chunk = d->chunk_size / d->frag_size;
	j->ops = ops;
	j->txref_size = txref_size;
	j->frag = (struct ss_frag *)(base + l.frag);
	j->bitmap = (uint64_t *)(base + l.bitmap);
	j->res = base + l.res;
	j->acc = d->dtype == SUM_FP32 ? NULL : (float *)(void *)(base + l.acc);
	j->txref = base + l.txref;
	j->peer = (struct nic_addr *)(base + l.peer);
	j->answered = (struct ss_answered *)(void *)(base + l.answered);
	j->comp_ppm = d->comp_ppm;
	if (d->comp_ppm) {
		j->cacc = (float *)(void *)(base + l.cacc);
		j->resid = (float *)(void *)(base + l.resid);
		j->scratch = base + l.scratch;
		memset(j->resid, 0, (size_t)l.n_frags * d->frag_size);
	}
	j->stash = d->in_order ? base + l.stash : NULL;
	j->staleness = d->staleness;
	if (has_async(d)) {
		j->applied = (uint32_t *)(void *)(base + l.applied);
		j->wake = (uint64_t *)(void *)(base + l.wake);
		memset(j->applied, 0, (size_t)l.n_frags * d->n * sizeof(uint32_t));
		memset(j->wake, 0, j->words * sizeof(uint64_t));
	}
	for (e = 0; e < d->n_eps; e++) {
		j->ep_first[e] = first;
		j->ep_chunks[e] = d->ep_chunks[e];
		j->ep_base[e] = d->ep_base[e];
		first += d->ep_chunks[e] * j->frags_per_chunk;
	}
	j->n_frags = l.n_frags;
	j->bytes = l.end;
	/* Every fragment starts as if round 2^32 - 1 had completed, with no
	 * result: the first push of round 0 starts round 0. */
	for (f = 0; f < l.n_frags; f++)
		j->frag[f] = (struct ss_frag){
			.round = UINT32_MAX, .done = 1, .want = (uint16_t)d->frag_size};
	for (e = 0; e < d->n_shorts; e++) {
		const struct ss_short *s = &d->shorts[e];
		uint32_t g = j->ep_first[s->ep] + s->chunk * j->frags_per_chunk, k;

		for (k = 0; k < j->frags_per_chunk; k++) {
			uint32_t at = k * d->frag_size;

			j->frag[g + k].want =
				(uint16_t)(at >= s->bytes		  ? 0
					   : s->bytes - at < d->frag_size ? s->bytes - at
									  : d->frag_size);
		}
	}
	for (e = 0; e < d->n_roots; e++) {
		const struct ss_root *r = &d->roots[e];
		uint32_t g = j->ep_first[r->ep] + r->chunk * j->frags_per_chunk, k;

		for (k = 0; k < j->frags_per_chunk; k++) {
			j->frag[g + k].mode = r->mode;
			j->frag[g + k].root = r->root;
		}
	}
	memset(j->bitmap, 0, (size_t)l.n_frags * j->words * sizeof(uint64_t));
	memset(j->peer, 0, (size_t)d->n_eps * d->n * sizeof(struct nic_addr));
	memset(j->answered, 0, (size_t)l.n_frags * d->n * sizeof(struct ss_answered));
	if (d->ranks) {
		for (e = 0; e < (unsigned)d->n_eps * d->n; e++) {
			j->peer[e].ip_be = d->ranks[e % d->n].ip_be;
			j->peer[e].port = d->ranks[e % d->n].port;
		}
		j->bound = true;
	}
	memset(j->txref, 0, (size_t)l.n_frags * 2 * txref_size);
	return j;
}

static enum ss_verdict drop(struct ss_job *j, struct ss_out *out, enum ss_drop why)
{
	j->cnt.drop[why]++;
	out->why = why;
	return SS_DROP;
}

/* A resend the SS already had: counted, and said in @out. */
static void needless(struct ss_job *j, struct ss_out *out, bool resent)
{
	out->needless = resent;
	j->cnt.needless += resent;
}

/* May fragment @f's result of @round go to @rank alone now? See
 * struct ss_answered. */
static bool pace(struct ss_job *j, uint32_t f, uint16_t rank, uint32_t round)
{
	struct ss_answered *a;
	uint32_t now_us;

	if (!j->clock_us)
		return true;
	a = &j->answered[(size_t)f * j->n + rank];
	now_us = (uint32_t)j->clock_us();
	if (a->times && a->round_lo == (uint16_t)round &&
	    now_us - a->at_us < (SS_ANSWER_GAP_NS / 1000)
					<< (a->times <= SS_ANSWER_DOUBLINGS ? a->times - 1
									    : SS_ANSWER_DOUBLINGS))
		return false;
	if (a->round_lo != (uint16_t)round || !a->times) {
		a->round_lo = (uint16_t)round;
		a->times = 0;
	}
	a->at_us = now_us;
	a->times += a->times < UINT8_MAX;
	return true;
}

/* @out's result: fragment @f's result buffer @which, @len bytes of
 * compressor @comp, as round @round's. */
static void result(const struct ss_job *j, uint32_t f, unsigned which, uint16_t len, uint8_t comp,
		   uint32_t round, struct ss_out *out)
{
	out->buf = ss_job_res(j, f, which);
	out->txref = j->txref_size ? ss_job_txref(j, f, which) : NULL;
	out->len = len;
	out->dtype = (uint8_t)(j->dtype | comp << PBOX_COMP_SHIFT);
	out->round = round;
	out->mode = j->frag[f].mode;
	out->root = j->frag[f].root;
}

/* Round @round's result, in buffer @which, to the sender (@rank) alone,
 * paced; @resent: a resend that asked for it (needless: the sender had
 * pushed its part before). */
static enum ss_verdict answer(struct ss_job *j, uint32_t f, uint16_t rank, uint32_t round,
			      unsigned which, uint16_t len, uint8_t comp, bool resent,
			      struct ss_out *out)
{
	needless(j, out, resent);
	if (!pace(j, f, rank, round))
		return drop(j, out, SS_DROP_PACED);
	result(j, f, which, len, comp, round, out);
	j->cnt.answers++;
	return SS_ANSWER;
}

/* The accumulator of fragment @f in its current round. */
static inline float *acc_of(const struct ss_job *j, uint32_t f, uint32_t round)
{
	if (j->acc)
		return j->acc + (size_t)f * (j->frag_size / j->elem);
	return (float *)(void *)ss_job_res(j, f, round & 1);
}

/* A compressed fragment's accumulator and its result's residual. */
static inline float *cacc_of(const struct ss_job *j, uint32_t f)
{
	return j->cacc + (size_t)f * (j->frag_size / 4);
}

static inline float *resid_of(const struct ss_job *j, uint32_t f)
{
	return j->resid + (size_t)f * (j->frag_size / 4);
}

/* A push's length for its fragment and compressor: the registered one, or
 * for a compressed push its scheme's for the fragment's elements, the
 * payload checked too (comp_payload_check()). SS_DROP_COUNT: good. */
static enum ss_drop push_len(const struct ss_frag *fr, const struct pbox_hdr *h,
			     const struct comp_spec *c, const struct comp_spec *r,
			     const void *payload)
{
	if (!fr->want) /* past its tensor's end: never pushed */
		return SS_DROP_LEN;
	if ((c->scheme || r->scheme) && fr->mode != SS_ALLREDUCE)
		return SS_DROP_COMP;
	if (fr->mode == SS_BCAST && h->rank != fr->root) /* its turn, no data */
		return h->len == 0 ? SS_DROP_COUNT : SS_DROP_LEN;
	if (!c->scheme)
		return h->len == fr->want ? SS_DROP_COUNT : SS_DROP_LEN;
	if (h->len != comp_bytes(c, fr->want / 4u))
		return SS_DROP_LEN;
	if (comp_payload_check(c, payload, h->len, fr->want / 4u))
		return SS_DROP_COMP_DATA;
	return SS_DROP_COUNT;
}

/* SS_ASYNC: fragment @f's pushes applied, one count per rank. */
static inline uint32_t *applied_of(const struct ss_job *j, uint32_t f)
{
	return j->applied + (size_t)f * j->n;
}

/* SS_ASYNC: the latest parameters to rank @rank alone, as the answer to
 * its push @round, paced as any answer. */
static enum ss_verdict async_answer(struct ss_job *j, uint32_t f, uint16_t rank, uint32_t round,
				    bool resent, struct ss_out *out)
{
	const struct ss_frag *fr = &j->frag[f];

	return answer(j, f, rank, round, fr->round & 1, fr->len, COMP_NONE, resent, out);
}

/* SS_ASYNC: a probe of rank @h->rank's push @h->round. */
static enum ss_verdict async_probe(struct ss_job *j, uint32_t f, const struct pbox_hdr *h,
				   struct ss_out *out)
{
	const uint32_t *ap = applied_of(j, f);
	const uint64_t held = j->bitmap[(size_t)f * j->words + h->rank / 64] >> (h->rank % 64) & 1;

	if (h->round == ap[h->rank])
		return SS_NACK; /* not applied: send it again */
	if (h->round > ap[h->rank])
		return drop(j, out, SS_DROP_STALE);
	if (held && h->round + 1 == ap[h->rank])
		return SS_WAITING;
	return h->flags & PBOX_F_PULL ? async_answer(j, f, h->rank, h->round, false, out) : SS_DONE;
}

/* SS_ASYNC: the held ranks of fragment @f whose answers may go now (the
 * store is set, and they are no more than the staleness ahead of the
 * slowest), moved from the held bits to j->wake. How many. */
static unsigned async_wake(struct ss_job *j, uint32_t f)
{
	uint64_t *held = &j->bitmap[(size_t)f * j->words];
	const uint32_t *ap = applied_of(j, f);
	uint32_t least = UINT32_MAX;
	unsigned woken = 0;

	if (j->staleness)
		for (unsigned q = 0; q < j->n; q++)
			least = ap[q] < least ? ap[q] : least;
	for (unsigned w = 0; w < j->words; w++) {
		uint64_t go = 0;

		for (uint64_t b = held[w]; b; b &= b - 1) {
			unsigned q = w * 64 + (unsigned)__builtin_ctzll(b);

			if (!j->staleness || ap[q] - least <= j->staleness)
				go |= b & -b;
		}
		held[w] &= ~go;
		j->wake[w] = go;
		woken += (unsigned)__builtin_popcountll(go);
	}
	return woken;
}

/*
 * SS_ASYNC: rank @h->rank's push @h->round (validated, its length the
 * fragment's). Its first push is the root's initial value or, from any
 * other rank, not added; every later one a delta, added into the other
 * result buffer so that an answer still going out of the current one is
 * never overwritten. Applied once: a duplicate is answered, never added.
 */
static enum ss_verdict async_push(struct ss_job *j, uint32_t f, const struct pbox_hdr *h,
				  const void *payload, const struct nic_addr *from,
				  struct nic_addr *peer, bool resent, struct ss_out *out)
{
	struct ss_frag *fr = &j->frag[f];
	uint32_t *ap = applied_of(j, f);
	uint64_t *held = &j->bitmap[(size_t)f * j->words + h->rank / 64];
	const uint64_t bit = 1ull << (h->rank % 64);
	const size_t elems = fr->want / j->elem;
	unsigned woken;

	if (h->round < ap[h->rank]) { /* applied before */
		if (*held & bit && h->round + 1 == ap[h->rank]) {
			needless(j, out, resent);
			return drop(j, out, SS_DROP_DUP); /* its answer is held: ACK */
		}
		return async_answer(j, f, h->rank, h->round, resent, out);
	}
	if (h->round != ap[h->rank] || (h->round && !fr->has_prev))
		return drop(j, out, SS_DROP_STALE);
	if (h->round || h->rank == fr->root) { /* the initial value, or a delta */
		uint8_t *nxt = ss_job_res(j, f, (fr->round + 1) & 1);

		if (j->busy && j->busy(ss_job_txref(j, f, (fr->round + 1) & 1)))
			return drop(j, out, SS_DROP_BUSY);
		if (j->acc) { /* fp16, bf16: the store's fp32 copy is the master */
			float *a = acc_of(j, f, 0);

			if (h->round)
				j->ops->add[j->dtype](a, payload, elems);
			else
				j->ops->load[j->dtype](a, payload, elems);
			j->ops->store[j->dtype](nxt, a, elems);
		} else if (h->round) {
			memcpy(nxt, ss_job_res(j, f, fr->round & 1), fr->want);
			j->ops->add[j->dtype]((float *)(void *)nxt, payload, elems);
		} else {
			memcpy(nxt, payload, fr->want);
		}
		fr->round++;
		fr->len = fr->want;
		fr->has_prev = 1;
		j->cnt.summed++;
	}
	ap[h->rank]++;
	*peer = *from;
	*held |= bit;
	if (!fr->has_prev)
		return SS_WAITING; /* the store waits for the root's first push */
	woken = async_wake(j, f);
	if (!(j->wake[h->rank / 64] & bit))
		return SS_WAITING; /* too far ahead: held */
	if (woken == 1) {
		j->cnt.completed++;
		return async_answer(j, f, h->rank, h->round, resent, out);
	}
	needless(j, out, resent);
	j->cnt.completed++;
	result(j, f, fr->round & 1, fr->len, COMP_NONE, h->round, out);
	out->to = j->wake;
	out->applied = ap;
	return SS_RELEASE;
}

/* A probe for fragment @f (validated as a push is): see ss.h. */
static enum ss_verdict probe(struct ss_job *j, uint32_t f, const struct pbox_hdr *h,
			     struct ss_out *out)
{
	const struct ss_frag *fr = &j->frag[f];
	const uint64_t *bits = &j->bitmap[(size_t)f * j->words + h->rank / 64];

	j->cnt.probes++;
	out->round = h->round;
	if (fr->mode == SS_ASYNC)
		return async_probe(j, f, h, out);
	if (h->round == fr->round) {
		if (fr->done) {
			if (!fr->len) /* the initial pseudo-round has no result */
				return drop(j, out, SS_DROP_STALE);
			return h->flags & PBOX_F_PULL
				       ? answer(j, f, h->rank, fr->round, fr->round & 1, fr->len,
						fr->rcomp, false, out)
				       : SS_DONE;
		}
		return *bits >> (h->rank % 64) & 1 ? SS_WAITING : SS_NACK;
	}
	if (h->round == fr->round + 1 && fr->done)
		return SS_NACK; /* nobody's part of it is in yet */
	if (h->round == fr->round - 1 && fr->has_prev)
		return h->flags & PBOX_F_PULL ? answer(j, f, h->rank, h->round, h->round & 1,
						       fr->prev_len, fr->prev_rcomp, false, out)
					      : SS_DONE;
	return drop(j, out, SS_DROP_STALE);
}

/* The length of a round's result: the fragment's bytes, or what result
 * compressor @r makes of them. */
static uint16_t result_len(const struct ss_frag *fr, const struct comp_spec *r)
{
	if (fr->mode == SS_BCAST || !r->scheme)
		return fr->want;
	return (uint16_t)comp_bytes(r, fr->want / 4u);
}

/* A push into its fragment's sum: the round's first (@first) loads the
 * accumulator, every other adds to it. The sum of a round whose result is
 * compressed is formed in the fp32 accumulator (the encoder's input), any
 * other in the result buffer itself (or, fp16 and bf16, their fp32 one). */
static void take(struct ss_job *j, uint32_t f, const struct comp_spec *c, const void *payload,
		 size_t elems, uint64_t seed, bool first)
{
	float *a = j->frag[f].rcomp ? cacc_of(j, f) : acc_of(j, f, j->frag[f].round);

	if (c->scheme && first)
		comp_decode(c, a, payload, elems, seed, j->scratch);
	else if (c->scheme)
		comp_add(c, a, payload, elems, seed, j->scratch);
	else if (first)
		j->ops->load[j->dtype](a, payload, elems);
	else
		j->ops->add[j->dtype](a, payload, elems);
}

/* Rank @r's stash slot in fragment @f (ranks 1 to n - 1: rank 0's push is
 * never early). */
static inline uint8_t *stash_of(const struct ss_job *j, uint32_t f, uint16_t r)
{
	return j->stash + ((size_t)f * (j->n - 1u) + (r - 1u)) * j->frag_size;
}

/* In rank order: rank @r's push added now if it is its turn, with the
 * stashed pushes of the ranks after it that came early; kept in the stash
 * otherwise (its bit set by the caller says it is there). */
static void take_in_order(struct ss_job *j, uint32_t f, uint16_t r, const struct comp_spec *c,
			  const void *payload, uint16_t len, size_t elems, uint64_t seed)
{
	struct ss_frag *fr = &j->frag[f];
	const uint64_t *bits = &j->bitmap[(size_t)f * j->words];

	if (r != fr->next) {
		memcpy(stash_of(j, f, r), payload, len);
		return;
	}
	take(j, f, c, payload, elems, seed, r == 0);
	while (++fr->next < j->n && (bits[fr->next / 64] >> (fr->next % 64) & 1))
		take(j, f, c, stash_of(j, f, fr->next), elems, seed, false);
}

/* What a datagram's header must hold before any fragment is looked at:
 * its MAC, dtype, rank, address and place. Returns its fragment's index
 * (@peer: the sender's address slot), or UINT32_MAX, dropped and counted. */
static uint32_t check_hdr(struct ss_job *j, unsigned ep, const struct pbox_hdr *h,
			  const void *payload, const struct nic_addr *from, struct nic_addr **peer,
			  struct ss_out *out)
{
	uint32_t chunk;
	enum ss_drop bad = SS_DROP_COUNT;

	j->cnt.rx++;
	out->needless = false;
	out->to = NULL;
	if (!nic_mac_ok(&j->mac, h, payload))
		bad = SS_DROP_MAC;
	else if (pbox_hdr_dtype(h) != j->dtype)
		bad = SS_DROP_DTYPE;
	else if ((pbox_hdr_comp(h) || pbox_hdr_rcomp(h)) && !j->comp_ppm)
		bad = SS_DROP_COMP;
	else if (h->rank >= j->n)
		bad = SS_DROP_RANK;
	else if (ep >= j->n_eps)
		bad = SS_DROP_CHUNK;
	if (bad != SS_DROP_COUNT) {
		drop(j, out, bad);
		return UINT32_MAX;
	}
	*peer = ss_peer(j, ep, h->rank);
	chunk = h->chunk - j->ep_base[ep]; /* below the base: wraps, and is refused */
	if (j->bound && (from->ip_be != (*peer)->ip_be || from->port != (*peer)->port))
		bad = SS_DROP_ADDR;
	else if (chunk >= j->ep_chunks[ep])
		bad = SS_DROP_CHUNK;
	else if (h->frag >= j->frags_per_chunk)
		bad = SS_DROP_FRAG;
	if (bad != SS_DROP_COUNT) {
		drop(j, out, bad);
		return UINT32_MAX;
	}
	return ss_frag_of(j, ep, h->chunk, h->frag);
}

/* ~40 cycles of checks and bookkeeping per push before the kernel, which
 * runs at memory speed (perf/sum): fragment @f's push or probe @h, its
 * header checked (check_hdr()). */
static enum ss_verdict push_frag(struct ss_job *j, uint32_t f, const struct pbox_hdr *h,
				 const void *payload, const struct nic_addr *from,
				 struct nic_addr *peer, struct ss_out *out)
{
	const struct comp_spec c = {(uint8_t)pbox_hdr_comp(h), j->comp_ppm},
			       r = {(uint8_t)pbox_hdr_rcomp(h), j->comp_ppm};
	struct ss_frag *fr = &j->frag[f];
	uint64_t *bits, bit, seed;
	enum ss_drop bad;
	size_t elems;
	bool resent;

	if (h->op == PBOX_OP_PROBE)
		return probe(j, f, h, out);
	/* the registration says how long it is */
	bad = push_len(fr, h, &c, &r, payload);
	if (bad != SS_DROP_COUNT)
		return drop(j, out, bad);
	resent = (h->flags & PBOX_F_RETRANS) != 0;
	if (resent)
		j->cnt.retrans_rx++;

	if (fr->mode == SS_ASYNC)
		return async_push(j, f, h, payload, from, peer, resent, out);
	bits = &j->bitmap[(size_t)f * j->words + h->rank / 64];
	bit = 1ull << (h->rank % 64);
	/* a broadcast's round is the root's elements, whoever's push this is */
	elems = c.scheme || r.scheme ? fr->want / 4u
				     : (fr->mode == SS_BCAST ? fr->want : h->len) / j->elem;
	/* RANDK's indices: the same for every rank of this fragment's round */
	seed = c.scheme == COMP_RANDK || r.scheme == COMP_RANDK
		       ? comp_seed(j->id, h->chunk, h->frag, h->round)
		       : 0;

	if (h->round == fr->round) {
		if (fr->done) {
			if (!fr->len) /* the initial pseudo-round has no result */
				return drop(j, out, SS_DROP_STALE);
			return answer(j, f, h->rank, fr->round, fr->round & 1, fr->len, fr->rcomp,
				      resent, out);
		}
		if (*bits & bit) {
			needless(j, out, resent);
			return drop(j, out, SS_DROP_DUP);
		}
		if (c.scheme != fr->comp || r.scheme != fr->rcomp)
			return drop(j, out, SS_DROP_COMP);
	} else if (h->round == fr->round + 1 && fr->done) {
		/* A new round, over the buffer of round - 1. */
		if (j->busy && j->busy(ss_job_txref(j, f, h->round & 1)))
			return drop(j, out, SS_DROP_BUSY);
		fr->prev_len = fr->len;
		fr->prev_rcomp = fr->rcomp;
		fr->has_prev = fr->len != 0;
		fr->round = h->round;
		fr->len = result_len(fr, &r);
		fr->comp = c.scheme;
		fr->rcomp = r.scheme;
		fr->count = 0;
		fr->next = 0;
		fr->done = 0;
		memset(&j->bitmap[(size_t)f * j->words], 0, j->words * sizeof(uint64_t));
	} else if (h->round == fr->round - 1 && fr->has_prev) {
		return answer(j, f, h->rank, h->round, h->round & 1, fr->prev_len, fr->prev_rcomp,
			      resent, out);
	} else {
		return drop(j, out, SS_DROP_STALE);
	}

	if (fr->mode == SS_BCAST) { /* the root's push is the result; the others' are empty */
		if (h->rank == fr->root)
			take(j, f, &c, payload, elems, seed, true);
	} else if (j->stash) {
		take_in_order(j, f, h->rank, &c, payload, h->len, elems, seed);
	} else {
		take(j, f, &c, payload, elems, seed, fr->count == 0);
	}
	*bits |= bit;
	*peer = *from;
	j->cnt.summed++;
	if (++fr->count < j->n)
		return SS_SUMMED;

	fr->done = 1;
	if (r.scheme) /* the sum compressed once, with this SS's error feedback */
		comp_encode(&r, cacc_of(j, f), resid_of(j, f), elems,
			    ss_job_res(j, f, fr->round & 1), seed, j->scratch);
	else if (j->acc)
		j->ops->store[j->dtype](ss_job_res(j, f, fr->round & 1), acc_of(j, f, fr->round),
					elems);
	j->cnt.completed++;
	result(j, f, fr->round & 1, fr->len, r.scheme, fr->round, out);
	return SS_COMPLETE;
}

enum ss_verdict ss_push(struct ss_job *j, unsigned ep, const struct pbox_hdr *h,
			const void *payload, const struct nic_addr *from, struct ss_out *out)
{
	struct nic_addr *peer = NULL;
	uint32_t f = check_hdr(j, ep, h, payload, from, &peer, out);

	if (f == UINT32_MAX)
		return SS_DROP;
	if (h->flags & PBOX_F_REST) /* a whole chunk's turns: ss_push_each()'s alone */
		return drop(j, out, SS_DROP_TURNS);
	return push_frag(j, f, h, payload, from, peer, out);
}

unsigned ss_push_each(struct ss_job *j, unsigned ep, const struct pbox_hdr *h, const void *payload,
		      const struct nic_addr *from, ss_each_fn *each, void *ctx)
{
	struct nic_addr *peer = NULL;
	struct ss_out out;
	struct pbox_hdr fh = *h;
	uint32_t f = check_hdr(j, ep, h, payload, from, &peer, &out);
	unsigned k = 0;

	if (f == UINT32_MAX) {
		each(ctx, h, SS_DROP, &out);
		return 0;
	}
	fh.flags &= (uint8_t)~PBOX_F_REST;
	do { /* each fragment as its own turn, the header checked once */
		enum ss_verdict v = push_frag(j, f + k, &fh, payload, from, peer, &out);

		each(ctx, &fh, v, &out);
		k++;
		if (v == SS_DROP && (out.why == SS_DROP_LEN || out.why == SS_DROP_COMP))
			break; /* no turn: whatever follows is no better */
		fh.frag++;
		out.needless = false;
		out.to = NULL;
	} while (h->flags & PBOX_F_REST && fh.frag < j->frags_per_chunk && j->frag[f + k].want);
	return k;
}

bool ss_chunk_done(const struct ss_job *j, uint32_t f, uint32_t round)
{
	const uint32_t f0 = f - f % j->frags_per_chunk;

	for (uint32_t k = f0; k < f0 + j->frags_per_chunk && j->frag[k].want; k++)
		if (j->frag[k].round != round || !j->frag[k].done)
			return false;
	return true;
}

int ss_table_add(struct ss_table *t, struct ss_job *j)
{
	uint32_t i;

	for (i = 0; i < t->n; i++)
		if (t->id[i] == j->id)
			return -EEXIST;
	if (t->n >= SS_MAX_JOBS)
		return -ENOSPC;
	t->id[t->n] = j->id;
	t->job[t->n] = j;
	t->n++;
	j->clock_us = t->clock_us;
	return 0;
}

int ss_table_grow(struct ss_table *t, struct ss_job *seg)
{
	uint32_t i;

	for (i = 0; i < t->n; i++)
		if (t->id[i] == seg->id) {
			struct ss_job *j = t->job[i];

			while (j->next)
				j = j->next;
			seg->next = NULL;
			seg->clock_us = t->clock_us;
			j->next = seg;
			return 0;
		}
	return -ENOENT;
}

struct ss_job *ss_table_del(struct ss_table *t, uint32_t id)
{
	struct ss_job *j;
	uint32_t i;

	for (i = 0; i < t->n; i++) {
		if (t->id[i] != id)
			continue;
		j = t->job[i];
		t->n--;
		t->id[i] = t->id[t->n];
		t->job[i] = t->job[t->n];
		t->last = 0;
		return j;
	}
	return NULL;
}
