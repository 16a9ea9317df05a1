/* SPDX-License-Identifier: BSD-3-Clause */
/* The summation service core: layout, every drop reason, the round state
 * machine, and a randomized schedule of pushes, duplicates and reordering
 * against sums computed here. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cfg_worker.h"
#include "ss.h"
#include "test.h"

#define FRAG  256
#define CHUNK 1024

/* A job of @d in a block of its own (freed by the caller through @mem). */
static struct ss_job *init_job(const struct ss_job_desc *d, void **mem)
{
	size_t bytes = ss_job_bytes(d, 16), align = ss_job_align(d);

	ck_assert_ptr_null(ss_job_desc_check(d));
	*mem = aligned_alloc(align, (bytes + align - 1) / align * align); /* C11: a multiple */
	ck_assert_ptr_nonnull(*mem);
	return ss_job_init(*mem, d, 16, sum_ops_best());
}

/* Every push of these tests is signed with its job's key, payload too, as a
 * rank signs it, right before ss_push() sees it; (ss_push)() takes a push
 * as it is. */
static enum ss_verdict signed_push(struct ss_job *j, unsigned ep, const struct pbox_hdr *h,
				   const void *p, const struct nic_addr *from, struct ss_out *out)
{
	struct pbox_hdr sh = *h;

	sh.mac = nic_mac_of(&j->mac, &sh, p);
	return (ss_push)(j, ep, &sh, p, from, out);
}
#define ss_push(...) signed_push(__VA_ARGS__)

static struct nic_mac test_mac(void)
{
	uint8_t key[NIC_KEY_LEN];
	struct nic_mac m;

	nic_job_key(0x1234, 7, 0, key);
	nic_mac_init(&m, NIC_MAC_PAYLOAD, key);
	return m;
}

/* The jobs of these tests: job 7, @n ranks, two endpoints of 3 and 2 chunks. */
static struct ss_job_desc desc(uint16_t n, uint8_t dtype)
{
	return (struct ss_job_desc){.id = 7,
				    .mac = test_mac(),
				    .n = n,
				    .dtype = dtype,
				    .frag_size = FRAG,
				    .chunk_size = CHUNK,
				    .n_eps = 2,
				    .ep_chunks = {3, 2}};
}

static struct ss_job *make_job(uint16_t n, uint8_t dtype, void **mem)
{
	const struct ss_job_desc d = desc(n, dtype);

	return init_job(&d, mem);
}

static struct pbox_hdr hdr(const struct ss_job *j, uint16_t rank, uint32_t chunk, uint16_t frag,
			   uint32_t round, uint16_t len)
{
	return (struct pbox_hdr){.op = PBOX_OP_PUSH,
				 .dtype = j->dtype,
				 .rank = rank,
				 .job = j->id,
				 .chunk = chunk,
				 .frag = frag,
				 .len = len,
				 .round = round};
}

/* Element i of rank r's contribution in round v: small integers, so every
 * sum is exact in fp32, fp16 and bf16 alike. */
static float val(unsigned i, unsigned r, uint32_t v)
{
	return (float)((int)((i * 7 + r * 13 + v * 3) % 61) - 30);
}

static void fill(uint8_t dtype, void *buf, unsigned elems, unsigned r, uint32_t v, unsigned base)
{
	for (unsigned i = 0; i < elems; i++) {
		float x = val(base + i, r, v);

		if (dtype == SUM_FP32)
			((float *)buf)[i] = x;
		else if (dtype == SUM_FP16)
			((uint16_t *)buf)[i] = sum_f32_to_f16(x);
		else
			((uint16_t *)buf)[i] = sum_f32_to_bf16(x);
	}
}

static float get(uint8_t dtype, const void *buf, unsigned i)
{
	if (dtype == SUM_FP32)
		return ((const float *)buf)[i];
	if (dtype == SUM_FP16)
		return sum_f16_to_f32(((const uint16_t *)buf)[i]);
	return sum_bf16_to_f32(((const uint16_t *)buf)[i]);
}

static int check_sum(uint8_t dtype, const void *buf, unsigned elems, unsigned n, uint32_t v,
		     unsigned base)
{
	for (unsigned i = 0; i < elems; i++) {
		float want = 0;

		for (unsigned r = 0; r < n; r++)
			want += val(base + i, r, v);
		if (get(dtype, buf, i) != want)
			return (int)i + 1;
	}
	return 0;
}

static const struct nic_addr who = {.mac = {2, 0, 0, 0, 0, 1}, .ip_be = 0x0100a8c6, .port = 9700};

START_TEST(test_ss_layout)
{
	void *mem;
	struct ss_job *j = make_job(70, SUM_FP16, &mem);

	ck_assert_uint_eq(j->n_frags, (3 + 2) * (CHUNK / FRAG));
	ck_assert_uint_eq(j->words, 2);
	ck_assert_uint_eq(j->ep_first[1], 3 * (CHUNK / FRAG));
	ck_assert_uint_eq((uintptr_t)j->res % FRAG, 0);
	ck_assert_ptr_nonnull(j->acc);
	/* every region inside the block, none overlapping the next */
	ck_assert((uint8_t *)j->acc >= j->res + (size_t)j->n_frags * 2 * FRAG);
	ck_assert((uint8_t *)j->frag >= (uint8_t *)(j->acc + (size_t)j->n_frags * FRAG / 2));
	ck_assert((uint8_t *)(j->txref + j->n_frags * 2 * 16) <= (uint8_t *)mem + j->bytes);
	free(mem);

	struct ss_job_desc bad = {.n = 0, .dtype = 0, .frag_size = FRAG, .chunk_size = CHUNK};
	ck_assert_ptr_nonnull(ss_job_desc_check(&bad));
	bad.n = 2;
	bad.frag_size = 100;
	ck_assert_ptr_nonnull(ss_job_desc_check(&bad));
	bad.frag_size = 2048;
	ck_assert_ptr_nonnull(ss_job_desc_check(&bad)); /* chunk < fragment */
	bad.dtype = 9;
	bad.frag_size = FRAG;
	ck_assert_ptr_nonnull(ss_job_desc_check(&bad));
}
END_TEST

/* Each refusal leaves the job's state exactly as it was. */
START_TEST(test_ss_drops)
{
	void *mem;
	struct ss_job *j = make_job(3, SUM_FP32, &mem);
	uint8_t payload[FRAG + 4] = {0}; /* a push that says 4 bytes more than a fragment */
	struct ss_out out;
	size_t state = j->bytes - sizeof(*j);
	uint8_t *snap = malloc(j->bytes);
	struct {
		struct pbox_hdr h;
		unsigned ep;
		enum ss_drop why;
	} cases[] = {
		{hdr(j, 0, 0, 0, 0, FRAG), 0, SS_DROP_MAC},
		{hdr(j, 0, 0, 0, 0, FRAG), 0, SS_DROP_DTYPE},
		{hdr(j, 3, 0, 0, 0, FRAG), 0, SS_DROP_RANK},
		{hdr(j, 0, 3, 0, 0, FRAG), 0, SS_DROP_CHUNK},
		{hdr(j, 0, 2, 0, 0, FRAG), 1, SS_DROP_CHUNK},
		{hdr(j, 0, 0, 0, 0, FRAG), 2, SS_DROP_CHUNK},
		{hdr(j, 0, 0, CHUNK / FRAG, 0, FRAG), 0, SS_DROP_FRAG},
		{hdr(j, 0, 0, 0, 0, FRAG + 4), 0, SS_DROP_LEN},
		{hdr(j, 0, 0, 0, 0, 6), 0, SS_DROP_LEN},
		{hdr(j, 0, 0, 0, 0, 0), 0, SS_DROP_LEN},
		{hdr(j, 0, 0, 0, 5, FRAG), 0, SS_DROP_STALE},
		{hdr(j, 0, 0, 0, UINT32_MAX, FRAG), 0, SS_DROP_STALE},
		{hdr(j, 0, 0, 0, 0, 0), 0, SS_DROP_TURNS},
	};

	cases[1].h.dtype = SUM_BF16;
	cases[12].h.flags = PBOX_F_REST; /* a chunk's turns: ss_push_each()'s alone */
	fill(SUM_FP32, payload, FRAG / 4, 0, 0, 0);
	memcpy(snap, mem, j->bytes);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t before = j->cnt.drop[cases[i].why];

		if (i == 0) { /* signed, then one payload bit flipped on the way */
			cases[0].h.mac = nic_mac_of(&j->mac, &cases[0].h, payload);
			payload[5] ^= 1;
			ck_assert_int_eq((ss_push)(j, 0, &cases[0].h, payload, &who, &out),
					 SS_DROP);
			payload[5] ^= 1;
			ck_assert_uint_eq(out.why, SS_DROP_MAC);
			ck_assert_uint_eq(j->cnt.drop[SS_DROP_MAC], before + 1);
			continue;
		}
		ck_assert_int_eq(ss_push(j, cases[i].ep, &cases[i].h, payload, &who, &out),
				 SS_DROP);
		ck_assert_msg(out.why == cases[i].why, "case %zu: %s, want %s", i,
			      ss_drop_name(out.why), ss_drop_name(cases[i].why));
		ck_assert_uint_eq(j->cnt.drop[cases[i].why], before + 1);
		ck_assert_msg(memcmp((uint8_t *)mem + sizeof(*j), snap + sizeof(*j), state) == 0,
			      "case %zu changed the state", i);
	}
	free(snap);
	free(mem);
}
END_TEST

/* One fragment through two rounds: sums, duplicates, answers, shadow. */
static void rounds(uint8_t dtype)
{
	void *mem;
	struct ss_job *j = make_job(3, dtype, &mem);
	unsigned elems = FRAG / j->elem, len = FRAG;
	uint8_t p[3][FRAG];
	struct pbox_hdr h;
	struct ss_out out;

	for (uint32_t v = 0; v < 2; v++) {
		for (unsigned r = 0; r < 3; r++)
			fill(dtype, p[r], elems, r, v, 0);
		h = hdr(j, 0, 1, 2, v, (uint16_t)len);
		ck_assert_int_eq(ss_push(j, 1, &h, p[0], &who, &out), SS_SUMMED);
		ck_assert_int_eq(ss_push(j, 1, &h, p[0], &who, &out), SS_DROP);
		ck_assert_int_eq(out.why, SS_DROP_DUP);
		h.rank = 2;
		ck_assert_int_eq(ss_push(j, 1, &h, p[2], &who, &out), SS_SUMMED);
		if (v == 1) { /* round 0 is the shadow now */
			h.round = 0;
			ck_assert_int_eq(ss_push(j, 1, &h, p[2], &who, &out), SS_ANSWER);
			ck_assert_int_eq(check_sum(dtype, out.buf, elems, 3, 0, 0), 0);
			h.round = 1;
		}
		h.rank = 1;
		h.len = (uint16_t)(len - j->elem);
		ck_assert_int_eq(ss_push(j, 1, &h, p[1], &who, &out), SS_DROP);
		ck_assert_int_eq(out.why, SS_DROP_LEN);
		h.len = (uint16_t)len;
		h.round = v + 1; /* ahead of an incomplete round */
		ck_assert_int_eq(ss_push(j, 1, &h, p[1], &who, &out), SS_DROP);
		ck_assert_int_eq(out.why, SS_DROP_STALE);
		h.round = v;
		ck_assert_int_eq(ss_push(j, 1, &h, p[1], &who, &out), SS_COMPLETE);
		ck_assert_uint_eq(out.len, len);
		ck_assert_uint_eq(out.round, v);
		ck_assert_ptr_eq(out.txref, ss_job_txref(j, j->ep_first[1] + 4 + 2, v & 1));
		ck_assert_int_eq(check_sum(dtype, out.buf, elems, 3, v, 0), 0);
		/* late duplicate of a complete round: answered from the result */
		ck_assert_int_eq(ss_push(j, 1, &h, p[1], &who, &out), SS_ANSWER);
		ck_assert_int_eq(check_sum(dtype, out.buf, elems, 3, v, 0), 0);
	}
	ck_assert_uint_eq(j->cnt.completed, 2);
	ck_assert_uint_eq(j->cnt.summed, 6);
	ck_assert_uint_eq(j->cnt.answers, 3);
	ck_assert_uint_eq(j->cnt.drop[SS_DROP_DUP], 2);
	ck_assert(memcmp(ss_peer(j, 1, 2), &who, sizeof(who)) == 0);
	free(mem);
}

/* A probe of (chunk 1, fragment 2, @round) from @rank: a header only;
 * @pull: asking for the result. */
static enum ss_verdict probe_f(struct ss_job *j, uint16_t rank, uint32_t round, bool pull,
			       struct ss_out *out)
{
	struct pbox_hdr h = hdr(j, rank, 1, 2, round, 0);

	h.op = PBOX_OP_PROBE;
	h.flags = pull ? PBOX_F_PULL : 0;
	return ss_push(j, 1, &h, &h, &who, out);
}
#define probe(j, rank, round, out) probe_f(j, rank, round, false, out)

/* Probes are answered from the state and never change it; resent pushes
 * the SS already had are counted as needless, probes are not. */
START_TEST(test_ss_probes)
{
	void *mem;
	struct ss_job *j = make_job(3, SUM_FP32, &mem);
	unsigned elems = FRAG / 4;
	uint8_t p[3][FRAG], *snap = malloc(j->bytes);
	struct pbox_hdr h;
	struct ss_out out;

	for (unsigned r = 0; r < 3; r++)
		fill(SUM_FP32, p[r], elems, r, 0, 0);
	memcpy(snap, mem, j->bytes);
	ck_assert_int_eq(probe(j, 1, 0, &out), SS_NACK); /* nobody's part is in */
	ck_assert_int_eq(probe(j, 1, 7, &out), SS_DROP); /* far ahead */
	ck_assert_int_eq(out.why, SS_DROP_STALE);
	ck_assert(memcmp((uint8_t *)mem + sizeof(*j), snap + sizeof(*j), j->bytes - sizeof(*j)) ==
		  0);

	h = hdr(j, 0, 1, 2, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, p[0], &who, &out), SS_SUMMED);
	ck_assert_int_eq(probe(j, 0, 0, &out), SS_WAITING);
	ck_assert_int_eq(probe(j, 2, 0, &out), SS_NACK);
	ck_assert_uint_eq(j->frag[j->ep_first[1] + 4 + 2].count, 1);

	h.flags = PBOX_F_RETRANS; /* a resend the SS had: needless */
	ck_assert_int_eq(ss_push(j, 1, &h, p[0], &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_DUP);
	ck_assert(out.needless);
	ck_assert_uint_eq(j->cnt.needless, 1);
	for (uint16_t r = 1; r < 3; r++) {
		h = hdr(j, r, 1, 2, 0, FRAG);
		ck_assert_int_eq(ss_push(j, 1, &h, p[r], &who, &out),
				 r == 2 ? SS_COMPLETE : SS_SUMMED);
	}
	ck_assert_int_eq(probe(j, 2, 0, &out), SS_DONE);	   /* its result went out */
	ck_assert_int_eq(probe_f(j, 2, 0, true, &out), SS_ANSWER); /* and was lost */
	ck_assert_int_eq(check_sum(SUM_FP32, out.buf, elems, 3, 0, 0), 0);
	ck_assert(!out.needless);
	ck_assert_uint_eq(j->cnt.needless, 1);

	fill(SUM_FP32, p[1], elems, 1, 1, 0);
	h = hdr(j, 1, 1, 2, 1, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, p[1], &who, &out), SS_SUMMED); /* round 1 */
	ck_assert_int_eq(probe(j, 0, 0, &out), SS_DONE);
	ck_assert_int_eq(probe_f(j, 0, 0, true, &out), SS_ANSWER); /* the shadow */
	ck_assert_int_eq(check_sum(SUM_FP32, out.buf, elems, 3, 0, 0), 0);
	ck_assert_int_eq(probe(j, 0, 1, &out), SS_NACK);
	ck_assert_int_eq(probe(j, 1, 1, &out), SS_WAITING);
	h = hdr(j, 1, 1, 2, 0, FRAG);
	h.flags = PBOX_F_RETRANS; /* a resend of round 0: answered, needless */
	ck_assert_int_eq(ss_push(j, 1, &h, p[1], &who, &out), SS_ANSWER);
	ck_assert_uint_eq(j->cnt.needless, 2);
	ck_assert_uint_eq(j->cnt.probes, 10);
	ck_assert_uint_eq(j->cnt.summed, 4);
	free(snap);
	free(mem);
}
END_TEST

START_TEST(test_ss_rounds)
{
	rounds((uint8_t)_i);
}
END_TEST

static bool busy_flag;
static bool busy_cb(void *txref)
{
	(void)txref;
	return busy_flag;
}

/* A round never starts over a result buffer still in flight. */
START_TEST(test_ss_busy)
{
	void *mem;
	struct ss_job *j = make_job(1, SUM_FP32, &mem);
	uint8_t p[FRAG];
	struct pbox_hdr h = hdr(j, 0, 0, 0, 0, FRAG);
	struct ss_out out;

	j->busy = busy_cb;
	fill(SUM_FP32, p, FRAG / 4, 0, 0, 0);
	busy_flag = true;
	ck_assert_int_eq(ss_push(j, 0, &h, p, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_BUSY);
	ck_assert_uint_eq(j->frag[0].round, UINT32_MAX);
	busy_flag = false;
	ck_assert_int_eq(ss_push(j, 0, &h, p, &who, &out), SS_COMPLETE);
	free(mem);
}
END_TEST

/* n workers, several rounds over all fragments, every push sent once or
 * twice in random order (duplicates, reordering, some answered late); the
 * results each worker collects must be the exact sums. */
START_TEST(test_ss_random)
{
	enum { N = 5, ROUNDS = 6 };
	uint8_t dtype = (uint8_t)_i;
	void *mem;
	struct ss_job *j = make_job(N, dtype, &mem);
	unsigned fpc = CHUNK / FRAG, elems = FRAG / j->elem;
	uint32_t F = j->n_frags, total = F * N * 2, k;
	struct {
		uint32_t f;
		uint16_t r;
	} *ev = malloc(sizeof(*ev) * total);
	uint8_t p[FRAG];
	unsigned seed = 12345, completes = 0;

	for (uint32_t v = 0; v < ROUNDS; v++) {
		for (k = 0; k < total; k++) {
			ev[k].f = k / 2 % F;
			ev[k].r = (uint16_t)(k / 2 / F);
		}
		for (k = total - 1; k > 0; k--) {
			uint32_t o = (uint32_t)rand_r(&seed) % (k + 1);
			__typeof__(*ev) t = ev[k];

			ev[k] = ev[o];
			ev[o] = t;
		}
		for (k = 0; k < total; k++) {
			uint32_t f = ev[k].f;
			unsigned ep = f >= j->ep_first[1];
			uint32_t lf = f - j->ep_first[ep];
			struct pbox_hdr h =
				hdr(j, ev[k].r, lf / fpc, (uint16_t)(lf % fpc), v, FRAG);
			struct ss_out out;
			enum ss_verdict vd;

			fill(dtype, p, elems, ev[k].r, v, f * elems);
			vd = ss_push(j, ep, &h, p, &who, &out);
			if (vd == SS_COMPLETE)
				completes++;
			if (vd == SS_COMPLETE || vd == SS_ANSWER) {
				int bad = check_sum(dtype, out.buf, elems, N, v, f * elems);

				if (bad)
					ck_abort_msg("round %u fragment %u element %d wrong", v, f,
						     bad - 1);
			} else if (vd == SS_DROP && out.why != SS_DROP_DUP) {
				ck_abort_msg("round %u: unexpected drop %s", v,
					     ss_drop_name(out.why));
			}
		}
	}
	ck_assert_uint_eq(completes, F * ROUNDS);
	ck_assert_uint_eq(j->cnt.completed, F * ROUNDS);
	ck_assert_uint_eq(j->cnt.summed, (uint64_t)F * N * ROUNDS);
	ck_assert_uint_eq(j->cnt.answers + j->cnt.drop[SS_DROP_DUP], (uint64_t)F * N * ROUNDS);
	free(ev);
	free(mem);
}
END_TEST

START_TEST(test_ss_table)
{
	static struct ss_table t;
	struct ss_job a = {.id = 1}, b = {.id = 2}, c = {.id = 1};

	ck_assert_int_eq(ss_table_add(&t, &a), 0);
	ck_assert_int_eq(ss_table_add(&t, &b), 0);
	ck_assert_int_eq(ss_table_add(&t, &c), -EEXIST);
	ck_assert_ptr_eq(ss_table_find(&t, 2), &b);
	ck_assert_ptr_eq(ss_table_find(&t, 1), &a);
	ck_assert_ptr_null(ss_table_find(&t, 3));
	ck_assert_ptr_eq(ss_table_del(&t, 1), &a);
	ck_assert_ptr_null(ss_table_del(&t, 1));
	ck_assert_ptr_eq(ss_table_find(&t, 2), &b);
	ck_assert_uint_eq(t.n, 1);
}
END_TEST

/*
 * A job that grew: a first segment of fp32 (endpoint chunks 3 and 2), then
 * one of bf16 after it (1 and 4 more). The wire's chunk index counts across
 * segments; ss_job_seg finds the segment, ss_push takes the segment's own
 * dtype and refuses a chunk below its base; ss_table_grow links it behind
 * the first and the table finds the job by its first segment.
 */
START_TEST(test_ss_segments)
{
	static struct ss_table t;
	struct ss_job_desc d0 = desc(2, SUM_FP32), d1 = desc(2, SUM_BF16);
	void *m0, *m1;
	struct ss_job *j0 = init_job(&d0, &m0), *j1, *seg;
	uint8_t pay[FRAG];
	struct ss_out out;
	struct pbox_hdr h;

	d1.ep_chunks[0] = 1;
	d1.ep_chunks[1] = 4;
	d1.ep_base[0] = 3;
	d1.ep_base[1] = 2;
	j1 = init_job(&d1, &m1);
	ck_assert_int_eq(ss_table_add(&t, j0), 0);
	ck_assert_int_eq(ss_table_grow(&t, j1), 0);
	ck_assert_ptr_eq(ss_table_find(&t, 7), j0);
	ck_assert_ptr_eq(j0->next, j1);
	ck_assert_ptr_eq(ss_job_seg(j0, 0, 2), j0);
	ck_assert_ptr_eq(ss_job_seg(j0, 0, 3), j1);
	ck_assert_ptr_null(ss_job_seg(j0, 0, 4));
	ck_assert_ptr_eq(ss_job_seg(j0, 1, 1), j0);
	ck_assert_ptr_eq(ss_job_seg(j0, 1, 5), j1);
	ck_assert_ptr_null(ss_job_seg(j0, 1, 6));
	/* endpoint 1's chunk 5 is the bf16 segment's chunk 3: both ranks sum it */
	fill(SUM_BF16, pay, FRAG / 2, 0, 0, 0);
	h = hdr(j1, 0, 5, 0, 0, FRAG);
	ck_assert_int_eq(ss_push(ss_job_seg(j0, 1, 5), 1, &h, pay, &who, &out), SS_SUMMED);
	fill(SUM_BF16, pay, FRAG / 2, 1, 0, 0);
	h.rank = 1;
	ck_assert_int_eq(ss_push(ss_job_seg(j0, 1, 5), 1, &h, pay, &who, &out), SS_COMPLETE);
	ck_assert_int_eq(check_sum(SUM_BF16, out.buf, FRAG / 2, 2, 0, 0), 0);
	/* fp32 for a bf16 segment, and a chunk below its base: refused */
	h = hdr(j0, 0, 5, 0, 1, FRAG);
	ck_assert_int_eq(ss_push(j1, 1, &h, pay, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_DTYPE);
	h = hdr(j1, 0, 1, 0, 0, FRAG);
	ck_assert_int_eq(ss_push(j1, 1, &h, pay, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_CHUNK);
	seg = ss_table_del(&t, 7);
	ck_assert_ptr_eq(seg, j0);
	ck_assert_int_eq(ss_table_grow(&t, j1), -ENOENT);
	free(m0);
	free(m1);
}
END_TEST

/* One rule maps a drop to what its sender hears, for the box and the
 * workers' SS_GPU alike: every reason that can never succeed as sent gets
 * an error whose code names it, a duplicate an ACK, stale and busy nothing. */
START_TEST(test_ss_reply_of_every_drop)
{
	static const struct {
		enum ss_drop why;
		uint8_t op;
		uint16_t err;
	} want[] = {
		{SS_DROP_NO_JOB, PBOX_OP_ERROR, PBOX_ERR_NO_JOB},
		{SS_DROP_MAC, 0, 0},
		{SS_DROP_DTYPE, PBOX_OP_ERROR, PBOX_ERR_DTYPE},
		{SS_DROP_RANK, PBOX_OP_ERROR, PBOX_ERR_RANGE},
		{SS_DROP_ADDR, 0, 0},
		{SS_DROP_CHUNK, PBOX_OP_ERROR, PBOX_ERR_RANGE},
		{SS_DROP_FRAG, PBOX_OP_ERROR, PBOX_ERR_RANGE},
		{SS_DROP_LEN, PBOX_OP_ERROR, PBOX_ERR_LEN},
		{SS_DROP_DUP, PBOX_OP_ACK, 0},
		{SS_DROP_STALE, 0, 0},
		{SS_DROP_BUSY, 0, 0},
		{SS_DROP_PACED, 0, 0},
		{SS_DROP_COMP, PBOX_OP_ERROR, PBOX_ERR_DTYPE},
		{SS_DROP_COMP_DATA, PBOX_OP_ERROR, PBOX_ERR_LEN},
		{SS_DROP_TURNS, PBOX_OP_ERROR, PBOX_ERR_LEN},
	};
	unsigned i;

	ck_assert_uint_eq(sizeof(want) / sizeof(want[0]), SS_DROP_COUNT);
	for (i = 0; i < SS_DROP_COUNT; i++) {
		uint16_t err = 0xffff;

		ck_assert_uint_eq(want[i].why, i);
		ck_assert_msg(ss_reply_of(want[i].why, &err) == want[i].op && err == want[i].err,
			      "%s: op %u err %u", ss_drop_name(want[i].why), want[i].op, err);
		if (err)
			ck_assert_str_ne(nic_err_text(err), "an unknown error code");
	}
}
END_TEST

/* A fragment's length is the registration's: a short push to a full
 * fragment is refused before it touches anything (it used to fix the
 * round's length and wedge it), and the round completes with the real
 * pushes; a tensor's tail fragment takes its short length only, and the
 * empty fragments after it take nothing. */
START_TEST(test_ss_lengths_from_registration)
{
	const struct ss_short tail = {.ep = 1, .chunk = 1, .bytes = FRAG + 40};
	struct ss_job_desc d = desc(2, SUM_FP32);
	void *mem;
	struct ss_job *j;
	uint8_t payload[FRAG];
	struct ss_out out;
	struct pbox_hdr h;

	d.shorts = &tail;
	d.n_shorts = 1;
	j = init_job(&d, &mem);
	fill(SUM_FP32, payload, FRAG / 4, 0, 0, 0);
	h = hdr(j, 0, 0, 1, 0, 4); /* 4 bytes to a full fragment */
	ck_assert_int_eq(ss_push(j, 0, &h, payload, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_LEN);
	ck_assert_uint_eq(j->frag[1].count, 0);
	ck_assert_uint_eq(j->frag[1].round, UINT32_MAX); /* untouched */
	h = hdr(j, 0, 0, 1, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, payload, &who, &out), SS_SUMMED);
	h = hdr(j, 1, 0, 1, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, payload, &who, &out), SS_COMPLETE);
	ck_assert_uint_eq(out.len, FRAG);
	/* the tail chunk: fragment 0 full, 1 of 40 bytes, 2 and 3 empty */
	h = hdr(j, 0, 1, 1, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, payload, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_LEN);
	h = hdr(j, 0, 1, 1, 0, 40);
	ck_assert_int_eq(ss_push(j, 1, &h, payload, &who, &out), SS_SUMMED);
	h = hdr(j, 1, 1, 1, 0, 40);
	ck_assert_int_eq(ss_push(j, 1, &h, payload, &who, &out), SS_COMPLETE);
	ck_assert_uint_eq(out.len, 40);
	h = hdr(j, 0, 1, 2, 0, 4);
	ck_assert_int_eq(ss_push(j, 1, &h, payload, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_LEN);
	h = hdr(j, 0, 1, 0, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, payload, &who, &out), SS_SUMMED);
	/* a short list that is not the job's is refused */
	d.n_shorts = 1;
	{
		const struct ss_short bad = {.ep = 1, .chunk = 2, .bytes = 8};

		d.shorts = &bad;
		ck_assert_ptr_nonnull(ss_job_desc_check(&d));
	}
	free(mem);
}
END_TEST

/* With the ranks' addresses registered, a push for rank r counts only from
 * rank r's address (another IP or port is dropped, unanswered, and leaves
 * no trace), and the results go to the registered addresses, not to
 * whoever pushed last. */
START_TEST(test_ss_ranks_bound_to_addresses)
{
	struct nic_addr ranks[2] = {{.ip_be = 0x0164a8c6, .port = 9700},
				    {.ip_be = 0x0264a8c6, .port = 9700}};
	struct ss_job_desc d = desc(2, SUM_FP32);
	void *mem;
	struct nic_addr spoof = ranks[1];
	uint8_t payload[FRAG] = {0};
	struct ss_job *j;
	struct ss_out out;
	struct pbox_hdr h;

	ranks[0].mac[0] = 2; /* the MAC is learnt from the pushes, not given */
	d.ranks = ranks;
	j = init_job(&d, &mem);
	ck_assert(j->bound);
	h = hdr(j, 1, 0, 0, 0, FRAG);
	spoof.port = 9701; /* rank 1's address, another port */
	ck_assert_int_eq(ss_push(j, 0, &h, payload, &spoof, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_ADDR);
	spoof = ranks[0]; /* rank 0's address, pushing for rank 1 */
	ck_assert_int_eq(ss_push(j, 0, &h, payload, &spoof, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_ADDR);
	ck_assert_uint_eq(j->frag[0].count, 0);
	ck_assert_uint_eq(j->cnt.drop[SS_DROP_ADDR], 2);
	{
		uint16_t err;

		ck_assert_uint_eq(ss_reply_of(SS_DROP_ADDR, &err), 0);
	}
	h = hdr(j, 0, 0, 0, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, payload, &ranks[0], &out), SS_SUMMED);
	h = hdr(j, 1, 0, 0, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, payload, &ranks[1], &out), SS_COMPLETE);
	ck_assert_uint_eq(ss_peer(j, 0, 1)->ip_be, ranks[1].ip_be);
	ck_assert_uint_eq(ss_peer(j, 0, 1)->port, 9700);
	free(mem);
}
END_TEST

/* The clock of test_ss_answers_paced(): its @test_now, in microseconds. */
static uint64_t test_now;
static uint64_t test_clock_us(void)
{
	return test_now / 1000;
}

/* A round's result goes to one rank alone (a pull probe, a resend of a
 * completed round) at most once per SS_ANSWER_GAP_NS, doubling per answer
 * of that round: a probe replayed a hundred times gets one result, not a
 * hundred. Other ranks, other rounds and the fan-out are not paced, and a
 * paced probe is not answered at all. */
START_TEST(test_ss_answers_paced)
{
	void *mem;
	struct ss_job *j = make_job(3, SUM_FP32, &mem);
	uint8_t p[3][FRAG];
	struct pbox_hdr h;
	struct ss_out out;
	unsigned answered = 0, i;
	uint16_t err;

	test_now = 5000000000ull;
	j->clock_us = test_clock_us;
	for (uint16_t r = 0; r < 3; r++) {
		fill(SUM_FP32, p[r], FRAG / 4, r, 0, 0);
		h = hdr(j, r, 1, 2, 0, FRAG);
		ck_assert_int_eq(ss_push(j, 1, &h, p[r], &who, &out),
				 r == 2 ? SS_COMPLETE : SS_SUMMED);
	}
	for (i = 0; i < 100; i++) /* one pull probe replayed 100 times at once */
		answered += probe_f(j, 2, 0, true, &out) == SS_ANSWER;
	ck_assert_uint_eq(answered, 1);
	ck_assert_uint_eq(out.why, SS_DROP_PACED);
	ck_assert_uint_eq(ss_reply_of(SS_DROP_PACED, &err), 0);
	ck_assert_uint_eq(j->cnt.drop[SS_DROP_PACED], 99);
	ck_assert_int_eq(probe_f(j, 1, 0, true, &out), SS_ANSWER); /* another rank */
	h = hdr(j, 2, 1, 2, 0, FRAG);
	h.flags = PBOX_F_RETRANS; /* a resend of the completed round: paced alike */
	ck_assert_int_eq(ss_push(j, 1, &h, p[2], &who, &out), SS_DROP);
	ck_assert_uint_eq(out.why, SS_DROP_PACED);
	test_now += SS_ANSWER_GAP_NS; /* a probe gap later: answered again */
	ck_assert_int_eq(ss_push(j, 1, &h, p[2], &who, &out), SS_ANSWER);
	ck_assert_int_eq(check_sum(SUM_FP32, out.buf, FRAG / 4, 3, 0, 0), 0);
	test_now += SS_ANSWER_GAP_NS; /* then twice the gap */
	ck_assert_int_eq(probe_f(j, 2, 0, true, &out), SS_DROP);
	test_now += SS_ANSWER_GAP_NS;
	ck_assert_int_eq(probe_f(j, 2, 0, true, &out), SS_ANSWER);
	for (answered = 0, i = 0; i < 1000; i++) { /* 100 replays a ms for 10 ms */
		test_now += SS_ANSWER_GAP_NS / 100;
		answered += probe_f(j, 2, 0, true, &out) == SS_ANSWER;
	}
	ck_assert_uint_le(answered, 2); /* 4 ms, then 8 ms apart */
	ck_assert_uint_ge(answered, 1);
	/* round 1: rank 2's answers start afresh (its shadow, round 0, too) */
	fill(SUM_FP32, p[0], FRAG / 4, 0, 1, 0);
	h = hdr(j, 0, 1, 2, 1, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, p[0], &who, &out), SS_SUMMED);
	ck_assert_int_eq(probe_f(j, 2, 0, true, &out), SS_DROP); /* round 0 still paced */
	test_now += 16ull * SS_ANSWER_GAP_NS;
	ck_assert_int_eq(probe_f(j, 2, 0, true, &out), SS_ANSWER);
	j->clock_us = NULL; /* no clock (a transport that does not pace): every one */
	ck_assert_int_eq(probe_f(j, 2, 0, true, &out), SS_ANSWER);
	ck_assert_int_eq(probe_f(j, 2, 0, true, &out), SS_ANSWER);
	free(mem);
}
END_TEST

/* A rank's Ethernet address is learnt only from a push that adds its part
 * to a round: a duplicate, a probe, or a resend of a completed or earlier
 * round from elsewhere (a replay: its MAC holds) leaves it as it was. */
START_TEST(test_ss_mac_learnt_from_new_parts_only)
{
	void *mem;
	struct ss_job *j = make_job(2, SUM_FP32, &mem);
	struct nic_addr other = who;
	uint8_t p[FRAG] = {0};
	struct pbox_hdr h;
	struct ss_out out;

	other.mac[5] = 0x66;
	h = hdr(j, 1, 1, 2, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, p, &who, &out), SS_SUMMED);
	ck_assert_int_eq(memcmp(ss_peer(j, 1, 1)->mac, who.mac, 6), 0);
	ck_assert_int_eq(ss_push(j, 1, &h, p, &other, &out), SS_DROP); /* duplicate */
	h.op = PBOX_OP_PROBE;
	h.len = 0;
	ck_assert_int_eq(ss_push(j, 1, &h, &h, &other, &out), SS_WAITING); /* probe */
	h = hdr(j, 0, 1, 2, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, p, &who, &out), SS_COMPLETE);
	h = hdr(j, 1, 1, 2, 0, FRAG); /* the completed round's push replayed */
	ck_assert_int_eq(ss_push(j, 1, &h, p, &other, &out), SS_ANSWER);
	h = hdr(j, 0, 1, 2, 1, FRAG);
	ck_assert_int_eq(ss_push(j, 1, &h, p, &who, &out), SS_SUMMED);
	h = hdr(j, 1, 1, 2, 0, FRAG); /* an earlier round's */
	ck_assert_int_eq(ss_push(j, 1, &h, p, &other, &out), SS_ANSWER);
	ck_assert_int_eq(memcmp(ss_peer(j, 1, 1)->mac, who.mac, 6), 0);
	h = hdr(j, 1, 1, 2, 1, FRAG); /* its part of round 1, from its new address */
	ck_assert_int_eq(ss_push(j, 1, &h, p, &other, &out), SS_COMPLETE);
	ck_assert_int_eq(memcmp(ss_peer(j, 1, 1)->mac, other.mac, 6), 0);
	free(mem);
}
END_TEST

/* One core serving two endpoints: a rank reaches each from an address of
 * its own there (the box's subnets differ), and each endpoint's results go
 * to the address its own pushes taught it, never the other's (a boot-test
 * under qemu lost every result sent across). */
START_TEST(test_ss_peer_per_endpoint)
{
	void *mem;
	struct ss_job *j = make_job(2, SUM_FP32, &mem);
	struct nic_addr on0 = who, on1 = who;
	uint8_t p[FRAG] = {0};
	struct pbox_hdr h;
	struct ss_out out;

	on0.ip_be = htonl(0xc6120102); /* 198.18.1.2 */
	on1.ip_be = htonl(0xc6120202); /* 198.18.2.2 */
	on1.mac[5] = 0x22;
	h = hdr(j, 1, 0, 0, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, p, &on0, &out), SS_SUMMED);
	h = hdr(j, 1, 0, 0, 0, FRAG); /* endpoint 1's first chunk */
	ck_assert_int_eq(ss_push(j, 1, &h, p, &on1, &out), SS_SUMMED);
	ck_assert(memcmp(ss_peer(j, 0, 1), &on0, sizeof(on0)) == 0);
	ck_assert(memcmp(ss_peer(j, 1, 1), &on1, sizeof(on1)) == 0);
	ck_assert_uint_eq(ss_peer(j, 0, 0)->ip_be, 0); /* rank 0 not heard from */
	h = hdr(j, 0, 0, 0, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, p, &who, &out), SS_COMPLETE);
	ck_assert(memcmp(ss_peer(j, 0, 1), &on0, sizeof(on0)) == 0);
	ck_assert(memcmp(ss_peer(j, 0, 0), &who, sizeof(who)) == 0);
	ck_assert_uint_eq(ss_peer(j, 1, 0)->ip_be, 0);
	free(mem);
}
END_TEST

/*
 * Compressed rounds (comp.h): 3 ranks push each fragment compressed with
 * their own residual; the SS decompresses each push into its accumulator,
 * compresses the sum once with its own residual (one per fragment,
 * whatever a round's compressor), and sends that. Every scheme both ways
 * (the push's dtype byte alone names it), then one direction compressed
 * (PBOX_F_RCOMP: the push names its round's result compressor beside its
 * own): a compressed push whose sum comes back as fp32 (the pushes decoded
 * into the result buffer, the SS's residual left alone), a plain push
 * whose sum the SS alone compresses (with its residual), top-k pushes
 * summed back as bf16; each over 3 rounds on one fragment, against the
 * same computed here, the result's bytes and dtype byte exactly the SS's;
 * in arrival order (the default) and in rank order ([job] deterministic:
 * stashed pushes of another length than the result's). A rank asking for
 * another result compressor in the same round is refused; a probe's
 * answer says the result's.
 */
START_TEST(test_ss_compressed_rounds)
{
	static const uint8_t dirs[][2] = {
		{COMP_SIGN, COMP_SIGN}, {COMP_TOPK, COMP_TOPK},	 {COMP_RANDK, COMP_RANDK},
		{COMP_BF16, COMP_BF16}, {COMP_FP16, COMP_FP16},	 {COMP_SIGN, COMP_NONE},
		{COMP_TOPK, COMP_NONE}, {COMP_RANDK, COMP_NONE}, {COMP_NONE, COMP_SIGN},
		{COMP_NONE, COMP_TOPK}, {COMP_NONE, COMP_RANDK}, {COMP_TOPK, COMP_BF16},
		{COMP_SIGN, COMP_FP16}};
	struct ss_job_desc d = desc(3, PBOX_DTYPE_FP32);
	const size_t n = FRAG / 4;
	float g[FRAG / 4], rr[3][FRAG / 4], acc[FRAG / 4], box[FRAG / 4];
	uint8_t pay[3][FRAG], want[FRAG], scratch[4096];
	const struct nic_addr from = {.ip_be = 0x0a000001};
	const unsigned order[2][3] = {{0, 1, 2}, {2, 0, 1}};

	d.comp_ppm = 100000;
	for (unsigned io = 0; io < 2; io++) {
		void *mem;
		struct ss_job *j;

		d.in_order = io == 1;
		j = init_job(&d, &mem);
		memset(box, 0, sizeof(box));
		for (unsigned di = 0; di < sizeof(dirs) / sizeof(dirs[0]); di++) {
			const struct comp_spec c = {dirs[di][0], d.comp_ppm},
					       r = {dirs[di][1], d.comp_ppm};
			const uint16_t plen = (uint16_t)(c.scheme ? comp_bytes(&c, n) : FRAG),
				       rlen = (uint16_t)(r.scheme ? comp_bytes(&r, n) : FRAG);

			memset(rr, 0, sizeof(rr));
			for (uint32_t round = 0; round < 3; round++) {
				uint32_t rd = di * 3 + round;
				uint64_t seed = comp_seed(7, 2, 1, rd);
				struct ss_out out;

				memset(acc, 0, sizeof(acc));
				for (unsigned k = 0; k < 3; k++) { /* rank order: the sum's */
					for (size_t i = 0; i < n; i++)
						g[i] = (float)((int)((i * 37 + k * 11 + rd * 5) %
								     23) -
							       11) /
							       64 +
						       (float)(k + 1) / 3;
					if (c.scheme) {
						comp_encode(&c, g, rr[k], n, pay[k], seed, scratch);
						comp_add(&c, acc, pay[k], n, seed, scratch);
					} else {
						memcpy(pay[k], g, FRAG);
						for (size_t i = 0; i < n; i++)
							acc[i] += g[i];
					}
				}
				for (unsigned q = 0; q < 3; q++) {
					unsigned k = order[io][q];
					struct pbox_hdr h = hdr(j, (uint16_t)k, 2, 1, rd, plen);
					enum ss_verdict v;

					h.dtype |= (uint8_t)(c.scheme << PBOX_COMP_SHIFT);
					if (r.scheme !=
					    c.scheme) /* else the dtype byte says both */
						h.flags = (uint8_t)(PBOX_F_RCOMP |
								    r.scheme << PBOX_F_RCOMP_SHIFT);
					if (q == 1) { /* another result compressor: refused */
						struct pbox_hdr x = h;

						x.flags = (uint8_t)(PBOX_F_RCOMP |
								    (r.scheme ? 0 : COMP_BF16)
									    << PBOX_F_RCOMP_SHIFT);
						ck_assert_int_eq(
							ss_push(j, 0, &x, pay[k], &from, &out),
							SS_DROP);
						ck_assert_int_eq(out.why, SS_DROP_COMP);
					}
					v = ss_push(j, 0, &h, pay[k], &from, &out);
					ck_assert_int_eq(v, q < 2 ? SS_SUMMED : SS_COMPLETE);
				}
				if (r.scheme)
					comp_encode(&r, acc, box, n, want, seed, scratch);
				else
					memcpy(want, acc, FRAG);
				ck_assert_uint_eq(out.len, rlen);
				ck_assert_uint_eq(out.dtype, r.scheme << PBOX_COMP_SHIFT);
				ck_assert_msg(memcmp(out.buf, want, rlen) == 0,
					      "%s push, %s result, round %u, %s: result differs",
					      comp_scheme_name(c.scheme),
					      comp_scheme_name(r.scheme), rd,
					      io ? "in rank order" : "as they came");
			}
			{ /* a probe of the last round, pulling: the result as it was */
				struct pbox_hdr h = hdr(j, 1, 2, 1, di * 3 + 2, 0);
				struct ss_out out;

				h.op = PBOX_OP_PROBE;
				h.flags = PBOX_F_PULL;
				ck_assert_int_eq(ss_push(j, 0, &h, NULL, &from, &out), SS_ANSWER);
				ck_assert_uint_eq(out.len, rlen);
				ck_assert_uint_eq(out.dtype, r.scheme << PBOX_COMP_SHIFT);
			}
		}
		ck_assert_uint_eq(j->cnt.drop[SS_DROP_COMP], 3 * sizeof(dirs) / sizeof(dirs[0]));
		ck_assert_uint_eq(j->cnt.completed, 3 * sizeof(dirs) / sizeof(dirs[0]));
		free(mem);
	}
}
END_TEST

/* The next permutation of @a (of @n) in lexicographic order; false after
 * the last. */
static bool next_perm(unsigned *a, unsigned n)
{
	unsigned i = n - 1, k;

	while (i > 0 && a[i - 1] >= a[i])
		i--;
	if (i == 0)
		return false;
	for (k = n - 1; a[k] <= a[i - 1]; k--)
		;
	unsigned t = a[i - 1];

	a[i - 1] = a[k];
	a[k] = t;
	for (unsigned l = i, r = n - 1; l < r; l++, r--) {
		t = a[l];
		a[l] = a[r];
		a[r] = t;
	}
	return true;
}

/* A job of desc(3, @dt) whose one async chunk is @root (@mem: as init_job()'s). */
static struct ss_job *async_job(uint8_t dt, const struct ss_root *root, uint32_t staleness,
				void **mem)
{
	struct ss_job_desc d = desc(3, dt);

	d.roots = root;
	d.n_roots = 1;
	d.staleness = staleness;
	return init_job(&d, mem);
}

/* @n floats of @f as dtype @dt into @out (narrowed as the SS narrows). */
static void as_dtype(uint8_t dt, const float *f, void *out, size_t n)
{
	sum_ops_best()->store[dt](out, f, n);
}

/*
 * An SS_ASYNC chunk, a parameter store with no round barrier (BytePS's
 * asynchronous mode): three ranks, the store at chunk 1 of endpoint 0 set
 * by rank 1's first push. Rank 0's first push waits for it (held, ACKed),
 * a delta before a rank's first is refused; the root's first answers both.
 * Then a fixed order of deltas from the three ranks: each answer is the
 * Asynchronous Parallel reference (x += delta, in arrival order, widened
 * to fp32 and narrowed once for fp16 and bf16), bit for bit; a duplicate
 * is answered and never added again; probes and pulls answered from the
 * rank's own count. Every dtype.
 */
START_TEST(test_ss_async)
{
	const uint8_t dt = (uint8_t)_i;
	const struct ss_root roots[1] = {{.ep = 0, .chunk = 1, .mode = SS_ASYNC, .root = 1}};
	const unsigned elem = (unsigned)sum_dtype_size(dt), n = FRAG / elem;
	static const uint16_t order[] = {0, 2, 2, 1, 0, 0, 2, 1, 1, 0, 2, 0};
	uint32_t next[3] = {1, 1, 1}; /* each rank's next push (its first is done) */
	float ref[FRAG / 2], delta[FRAG / 2];
	uint8_t pay[FRAG], want[FRAG];
	struct pbox_hdr h;
	struct ss_out out;
	void *mem;
	struct ss_job *j = async_job(dt, roots, 0, &mem);

	ck_assert_ptr_nonnull(j->applied);
	for (unsigned i = 0; i < n; i++)
		ref[i] = (float)(i % 7) - 3.0f;
	as_dtype(dt, ref, pay, n);
	/* rank 0's first push: the store is not set, its answer held */
	h = hdr(j, 0, 1, 3, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, want, &who, &out), SS_WAITING);
	h.op = PBOX_OP_PROBE;
	ck_assert_int_eq(ss_push(j, 0, &h, want, &who, &out), SS_WAITING);
	h = hdr(j, 0, 1, 3, 0, FRAG); /* its resend: ACKed, not taken again */
	ck_assert_int_eq(ss_push(j, 0, &h, want, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_DUP);
	h = hdr(j, 2, 1, 3, 1, FRAG); /* a delta before rank 2's first push */
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_STALE);
	/* the root's first push sets the store: rank 0 and the root answered */
	h = hdr(j, 1, 1, 3, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_RELEASE);
	ck_assert(ss_out_to(&out, 0) && ss_out_to(&out, 1) && !ss_out_to(&out, 2));
	ck_assert_uint_eq(ss_out_round(&out, 0), 0);
	ck_assert_uint_eq(ss_out_round(&out, 1), 0);
	ck_assert_uint_eq(out.len, FRAG);
	ck_assert_mem_eq(out.buf, pay, FRAG);
	/* rank 2's first push is its initial value, not a delta */
	memset(want, 0x55, sizeof(want));
	h = hdr(j, 2, 1, 3, 0, FRAG);
	ck_assert_int_eq(ss_push(j, 0, &h, want, &who, &out), SS_ANSWER);
	ck_assert_uint_eq(out.round, 0);
	ck_assert_mem_eq(out.buf, pay, FRAG);
	for (unsigned p = 0; p < sizeof(order) / sizeof(order[0]); p++) {
		const uint16_t r = order[p];
		float back[FRAG / 2];

		for (unsigned i = 0; i < n; i++)
			delta[i] = (float)((i + 3 * p + r) % 5) * 0.25f - 0.5f;
		as_dtype(dt, delta, pay, n);
		sum_ops_best()->load[dt](back, pay, n); /* the delta as the SS reads it */
		for (unsigned i = 0; i < n; i++)
			ref[i] += back[i];
		as_dtype(dt, ref, want, n);
		h = hdr(j, r, 1, 3, next[r], FRAG);
		ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_ANSWER);
		ck_assert_uint_eq(out.round, next[r]);
		ck_assert_msg(memcmp(out.buf, want, FRAG) == 0,
			      "%s: push %u (rank %u) is not the reference", sum_dtype_name(dt), p,
			      r);
		if (p % 4 == 1) { /* the same push again: answered, not added */
			h.flags = PBOX_F_RETRANS;
			ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_ANSWER);
			ck_assert(out.needless);
			ck_assert_mem_eq(out.buf, want, FRAG);
		}
		next[r]++;
	}
	/* probes from each rank's own count */
	h = hdr(j, 0, 1, 3, next[0] - 1, 0);
	h.op = PBOX_OP_PROBE;
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_DONE);
	h.flags = PBOX_F_PULL;
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_ANSWER);
	ck_assert_uint_eq(out.round, next[0] - 1);
	ck_assert_mem_eq(out.buf, want, FRAG);
	h.flags = 0;
	h.round = next[0];
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_NACK);
	h.round = next[0] + 1;
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_DROP);
	/* the all-reduce chunks of the job are untouched by it */
	ck_assert_uint_eq(j->frag[0].round, UINT32_MAX);
	/* compressed pushes are for all-reduce chunks */
	h = hdr(j, 0, 1, 3, next[0], FRAG);
	h.dtype = (uint8_t)(dt | COMP_TOPK << PBOX_COMP_SHIFT);
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &who, &out), SS_DROP);
	free(mem);
}
END_TEST

/*
 * Bounded staleness: with S = 1 a rank two pushes ahead of the slowest has
 * its push applied and its answer held (ACKed, its resend and probe too)
 * until the slowest pushes; then one SS_RELEASE answers it and the pusher,
 * each with its own round.
 */
START_TEST(test_ss_async_staleness)
{
	const struct ss_root roots[1] = {{.ep = 1, .chunk = 0, .mode = SS_ASYNC, .root = 0}};
	float v[FRAG / 4], one[FRAG / 4];
	struct pbox_hdr h;
	struct ss_out out;
	void *mem;
	struct ss_job *j = async_job(SUM_FP32, roots, 1, &mem);
	for (unsigned i = 0; i < FRAG / 4; i++) {
		v[i] = 1.0f;
		one[i] = 1.0f;
	}
	for (uint16_t r = 0; r < 3; r++) { /* every first push: rank 0's sets it */
		h = hdr(j, r, 0, 0, 0, FRAG);
		ck_assert_int_eq(ss_push(j, 1, &h, v, &who, &out), SS_ANSWER);
	}
	h = hdr(j, 0, 0, 0, 1, FRAG); /* one ahead: answered */
	ck_assert_int_eq(ss_push(j, 1, &h, one, &who, &out), SS_ANSWER);
	h = hdr(j, 0, 0, 0, 2, FRAG); /* two ahead: applied, held */
	ck_assert_int_eq(ss_push(j, 1, &h, one, &who, &out), SS_WAITING);
	ck_assert_int_eq(ss_push(j, 1, &h, one, &who, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_DUP);
	h.op = PBOX_OP_PROBE;
	ck_assert_int_eq(ss_push(j, 1, &h, one, &who, &out), SS_WAITING);
	h = hdr(j, 1, 0, 0, 1, FRAG); /* rank 2 is still the slowest */
	ck_assert_int_eq(ss_push(j, 1, &h, one, &who, &out), SS_ANSWER);
	ck_assert_uint_eq(out.round, 1);
	h = hdr(j, 2, 0, 0, 1, FRAG); /* the slowest catches up: rank 0 released */
	ck_assert_int_eq(ss_push(j, 1, &h, one, &who, &out), SS_RELEASE);
	ck_assert(ss_out_to(&out, 0) && !ss_out_to(&out, 1) && ss_out_to(&out, 2));
	ck_assert_uint_eq(ss_out_round(&out, 0), 2);
	ck_assert_uint_eq(ss_out_round(&out, 2), 1);
	for (unsigned i = 0; i < FRAG / 4; i++)
		ck_assert_float_eq(((const float *)out.buf)[i], 5.0f); /* 1 + four deltas */
	/* a probe of the released push: DONE, its answer went out */
	h = hdr(j, 0, 0, 0, 2, 0);
	h.op = PBOX_OP_PROBE;
	ck_assert_int_eq(ss_push(j, 1, &h, one, &who, &out), SS_DONE);
	free(mem);
	/* an async root past n is refused at registration */
	{
		const struct ss_root bad[1] = {{.ep = 1, .chunk = 0, .mode = SS_ASYNC, .root = 3}};
		struct ss_job_desc d = desc(3, SUM_FP32);

		d.roots = bad;
		d.n_roots = 1;
		ck_assert_ptr_nonnull(ss_job_desc_check(&d));
	}
}
END_TEST

/*
 * Rooted chunks (reduce-scatter's and all-gather's shards, broadcasts):
 * a reduce sums every rank's push and gives the sum to its root alone, an
 * empty RESULT to the others; a broadcast takes its root's push as the
 * result (bitwise, whatever the dtype) while the others' empty pushes take
 * their turns, and gives the root an empty RESULT. A push of the wrong
 * length for its rank, and a registration naming a root past n or no
 * mode, are refused; a probe and a pull are answered as for any chunk.
 */
START_TEST(test_ss_rooted)
{
	const uint8_t dt = (uint8_t)(_i % SUM_DTYPE_COUNT);
	const bool in_order = _i >= SUM_DTYPE_COUNT;
	const struct ss_root roots[2] = {{.ep = 1, .chunk = 0, .mode = SS_REDUCE, .root = 2},
					 {.ep = 1, .chunk = 1, .mode = SS_BCAST, .root = 1}};
	struct ss_job_desc d = desc(4, dt);
	const unsigned elem = (unsigned)sum_dtype_size(dt), n = FRAG / elem;
	uint8_t pay[4][FRAG];
	struct ss_out out;
	struct ss_job *j;
	void *mem;

	d.in_order = in_order;
	d.roots = roots;
	d.n_roots = 2;
	j = init_job(&d, &mem);
	for (uint32_t v = 0; v < 3; v++) {
		for (unsigned r = 0; r < 4; r++)
			fill(dt, pay[r], n, r, v, 0);
		/* reduce, root 2: the ranks in reverse order */
		for (unsigned p = 0; p < 4; p++) {
			struct pbox_hdr h = hdr(j, (uint16_t)(3 - p), 0, 1, v, FRAG);

			ck_assert_int_eq(ss_push(j, 1, &h, pay[3 - p], &who, &out),
					 p < 3 ? SS_SUMMED : SS_COMPLETE);
		}
		ck_assert_int_eq(out.mode, SS_REDUCE);
		ck_assert_uint_eq(ss_out_len(&out, 2), FRAG);
		ck_assert_uint_eq(ss_out_len(&out, 0) + ss_out_len(&out, 1) + ss_out_len(&out, 3),
				  0);
		ck_assert_int_eq(check_sum(dt, out.buf, n, 4, v, 0), 0);
		/* broadcast, root 1: its push third; the others' are empty */
		for (unsigned p = 0; p < 4; p++) {
			static const uint16_t order[4] = {3, 0, 1, 2};
			uint16_t r = order[p];
			struct pbox_hdr h = hdr(j, r, 1, 2, v, r == 1 ? FRAG : 0);
			struct pbox_hdr bad = hdr(j, r, 1, 2, v, r == 1 ? 0 : FRAG);

			ck_assert_int_eq(ss_push(j, 1, &bad, pay[r], &who, &out), SS_DROP);
			ck_assert_int_eq(out.why, SS_DROP_LEN);
			ck_assert_int_eq(ss_push(j, 1, &h, pay[r], &who, &out),
					 p < 3 ? SS_SUMMED : SS_COMPLETE);
		}
		ck_assert_int_eq(out.mode, SS_BCAST);
		ck_assert_uint_eq(out.len, FRAG);
		ck_assert_uint_eq(ss_out_len(&out, 1), 0);
		ck_assert_uint_eq(ss_out_len(&out, 0), FRAG);
		ck_assert_uint_eq(ss_out_len(&out, 3), FRAG);
		ck_assert_msg(memcmp(out.buf, pay[1], FRAG) == 0,
			      "%s: a broadcast is not its root's bits", sum_dtype_name(dt));
	}
	/* an empty push to an all-reduce chunk is no turn: refused */
	{
		struct pbox_hdr h = hdr(j, 0, 2, 0, 0, 0);

		ck_assert_int_eq(ss_push(j, 0, &h, pay[0], &who, &out), SS_DROP);
		ck_assert_int_eq(out.why, SS_DROP_LEN);
	}
	/* round 3 of the broadcast: rank 0's turn in, probes and a pull */
	{
		struct pbox_hdr h = hdr(j, 0, 1, 2, 3, 0), pr;

		ck_assert_int_eq(ss_push(j, 1, &h, pay[0], &who, &out), SS_SUMMED);
		pr = h;
		pr.op = PBOX_OP_PROBE;
		ck_assert_int_eq(ss_push(j, 1, &pr, pay[0], &who, &out), SS_WAITING);
		pr.rank = 3;
		ck_assert_int_eq(ss_push(j, 1, &pr, pay[0], &who, &out), SS_NACK);
		pr.round = 2;
		pr.flags = PBOX_F_PULL;
		ck_assert_int_eq(ss_push(j, 1, &pr, pay[0], &who, &out), SS_ANSWER);
		ck_assert_int_eq(out.mode, SS_BCAST);
		ck_assert_uint_eq(ss_out_len(&out, 3), FRAG);
	}
	free(mem);
	/* registrations refused: a root past n, no mode, a chunk not the job's */
	{
		static const struct ss_root bad[3] = {
			{.ep = 1, .chunk = 0, .mode = SS_REDUCE, .root = 4},
			{.ep = 1, .chunk = 0, .mode = SS_ALLREDUCE, .root = 3},
			{.ep = 1, .chunk = 2, .mode = SS_BCAST, .root = 3}};

		for (unsigned b = 0; b < 3; b++) {
			d.roots = &bad[b];
			d.n_roots = 1;
			ck_assert_ptr_nonnull(ss_job_desc_check(&d));
		}
	}
}
END_TEST

/* A job of @n ranks whose endpoint 1 holds two chunks of @mode, rooted
 * at @root0 and @root1, the second a tail chunk of one and a half
 * fragments. */
static struct ss_job *two_rooted(uint16_t n, uint8_t mode, uint16_t root0, uint16_t root1,
				 void **mem)
{
	const struct ss_root roots[2] = {{.ep = 1, .chunk = 0, .mode = mode, .root = root0},
					 {.ep = 1, .chunk = 1, .mode = mode, .root = root1}};
	static const struct ss_short tail = {.ep = 1, .chunk = 1, .bytes = FRAG + FRAG / 2};
	struct ss_job_desc d = desc(n, SUM_FP32);

	d.roots = roots;
	d.n_roots = 2;
	d.shorts = &tail;
	d.n_shorts = 1;
	return init_job(&d, mem);
}

/* What ss_push_each() gave its callback, fragment by fragment. */
struct each_log {
	unsigned n;
	struct {
		uint16_t frag;
		uint8_t flags;
		enum ss_verdict v;
		enum ss_drop why;
		uint16_t len0, len2; /* the result's bytes to rank 0 and rank 2 */
		uint8_t data[FRAG];
	} at[CHUNK / FRAG + 1];
};

static void log_each(void *ctx, const struct pbox_hdr *h, enum ss_verdict v, struct ss_out *out)
{
	struct each_log *l = ctx;

	ck_assert_uint_lt(l->n, CHUNK / FRAG + 1);
	l->at[l->n].frag = h->frag;
	l->at[l->n].flags = h->flags;
	l->at[l->n].v = v;
	l->at[l->n].why = out->why;
	if (v == SS_COMPLETE) {
		l->at[l->n].len0 = ss_out_len(out, 0);
		l->at[l->n].len2 = ss_out_len(out, 2);
		memcpy(l->at[l->n].data, out->buf, ss_out_len(out, 2));
	}
	l->n++;
}

/* ss_push_each(), signed as a rank signs */
static unsigned signed_each(struct ss_job *j, unsigned ep, const struct pbox_hdr *h, const void *p,
			    struct each_log *l)
{
	struct pbox_hdr sh = *h;

	sh.mac = nic_mac_of(&j->mac, &sh, p);
	memset(l, 0, sizeof(*l));
	return ss_push_each(j, ep, &sh, p, &who, log_each, l);
}

/*
 * A chunk's turns in one push (PBOX_F_REST): an all-gather shard's chunk
 * (broadcast, root 1, four fragments) and a tail chunk of one and a half
 * fragments. The root pushes its data fragment by fragment; each other rank
 * sends one empty push flagged PBOX_F_REST from fragment 0, which takes its
 * turn in every fragment its tensor has (not the tail's empty ones), and the
 * last rank's completes each fragment: the root's bits to everyone. A turn
 * already in (a resend of fragment 1 alone came first) is a duplicate there
 * and the push's turn is taken everywhere else; sent from a later fragment
 * it stands for the rest of the chunk only. A flagged push
 * with data, to an all-reduce chunk, or from the root takes no turn
 * anywhere; ss_push() takes none either (SS_DROP_TURNS); a forged one is
 * refused once.
 */
START_TEST(test_ss_turns_in_one)
{
	uint8_t pay[CHUNK / FRAG][FRAG], none[1] = {0};
	struct each_log *l = calloc(1, sizeof(*l));
	struct ss_out out;
	void *mem;
	struct ss_job *j = two_rooted(4, SS_BCAST, 1, 1, &mem);

	for (unsigned k = 0; k < CHUNK / FRAG; k++)
		fill(SUM_FP32, pay[k], FRAG / 4, 1, 0, k * FRAG / 4);
	for (uint32_t v = 0; v < 2; v++) {
		struct pbox_hdr h;

		/* the root's data, then a plain turn of rank 3 for fragment 1 */
		for (uint16_t k = 0; k < CHUNK / FRAG; k++) {
			h = hdr(j, 1, 0, k, v, FRAG);
			ck_assert_int_eq(ss_push(j, 1, &h, pay[k], &who, &out), SS_SUMMED);
		}
		h = hdr(j, 3, 0, 1, v, 0);
		ck_assert_int_eq(ss_push(j, 1, &h, none, &who, &out), SS_SUMMED);
		/* rank 3 again, in one push: a duplicate at fragment 1 */
		h = hdr(j, 3, 0, 0, v, 0);
		h.flags = PBOX_F_REST;
		ck_assert_uint_eq(signed_each(j, 1, &h, none, l), CHUNK / FRAG);
		for (unsigned k = 0; k < l->n; k++) {
			ck_assert_uint_eq(l->at[k].frag, k);
			ck_assert_uint_eq(l->at[k].flags & PBOX_F_REST, 0);
			ck_assert_int_eq(l->at[k].v, k == 1 ? SS_DROP : SS_SUMMED);
		}
		ck_assert_int_eq(l->at[1].why, SS_DROP_DUP);
		/* ranks 0 and 2: every fragment's turn in one push each; rank 2's
		 * completes them all */
		for (uint16_t r = 0; r < 3; r += 2) {
			h = hdr(j, r, 0, 0, v, 0);
			h.flags = PBOX_F_REST;
			ck_assert_uint_eq(signed_each(j, 1, &h, none, l), CHUNK / FRAG);
			for (unsigned k = 0; k < CHUNK / FRAG; k++)
				ck_assert_int_eq(l->at[k].v, r ? SS_COMPLETE : SS_SUMMED);
		}
		for (unsigned k = 0; k < CHUNK / FRAG; k++) {
			ck_assert_uint_eq(l->at[k].len0, FRAG);
			ck_assert_uint_eq(l->at[k].len2, FRAG);
			ck_assert_mem_eq(l->at[k].data, pay[k], FRAG);
		}
	}
	/* the tail chunk: its two fragments, not the empty ones; from 1 on, one */
	{
		struct pbox_hdr h = hdr(j, 0, 1, 0, 0, 0);

		h.flags = PBOX_F_REST;
		ck_assert_uint_eq(signed_each(j, 1, &h, none, l), 2);
		ck_assert_int_eq(l->at[1].v, SS_SUMMED);
		h = hdr(j, 2, 1, 1, 0, 0);
		h.flags = PBOX_F_REST;
		ck_assert_uint_eq(signed_each(j, 1, &h, none, l), 1);
		ck_assert_int_eq(l->at[0].v, SS_SUMMED);
		ck_assert_uint_eq(l->at[0].frag, 1);
	}
	/* no turns: from the root, to an all-reduce chunk; forged; ss_push() */
	{
		struct pbox_hdr h = hdr(j, 1, 1, 0, 0, 0);
		uint64_t summed = j->cnt.summed;

		h.flags = PBOX_F_REST;
		ck_assert_uint_eq(signed_each(j, 1, &h, none, l), 1);
		ck_assert_int_eq(l->at[0].v, SS_DROP);
		ck_assert_int_eq(l->at[0].why, SS_DROP_LEN);
		h = hdr(j, 0, 0, 0, 0, 0);
		h.flags = PBOX_F_REST;
		ck_assert_uint_eq(signed_each(j, 0, &h, none, l), 1);
		ck_assert_int_eq(l->at[0].why, SS_DROP_LEN);
		h = hdr(j, 0, 1, 0, 0, 0);
		h.flags = PBOX_F_REST;
		h.mac = 1;
		memset(l, 0, sizeof(*l));
		ck_assert_uint_eq(ss_push_each(j, 1, &h, none, &who, log_each, l), 0);
		ck_assert_uint_eq(l->n, 1);
		ck_assert_int_eq(l->at[0].why, SS_DROP_MAC);
		h = hdr(j, 3, 1, 0, 0, 0);
		h.flags = PBOX_F_REST;
		ck_assert_int_eq(ss_push(j, 1, &h, none, &who, &out), SS_DROP);
		ck_assert_int_eq(out.why, SS_DROP_TURNS);
		ck_assert_uint_eq(j->cnt.summed, summed);
	}
	free(l);
	free(mem);
}
END_TEST

/* ss_chunk_done(): a reduce's chunk (and a tail chunk of one and a half
 * fragments) complete in a round once its last fragment is, in any order;
 * not before, and not for another round. */
START_TEST(test_ss_chunk_done)
{
	static const uint16_t order[CHUNK / FRAG] = {2, 0, 3, 1};
	uint8_t pay[FRAG] = {0};
	struct ss_out out;
	void *mem;
	struct ss_job *j = two_rooted(2, SS_REDUCE, 0, 1, &mem);

	for (uint32_t v = 0; v < 2; v++) {
		for (unsigned i = 0; i < CHUNK / FRAG; i++) {
			uint16_t k = order[i];
			struct pbox_hdr h = hdr(j, 0, 0, k, v, FRAG);
			uint32_t f = ss_frag_of(j, 1, 0, k);

			ck_assert_int_eq(ss_push(j, 1, &h, pay, &who, &out), SS_SUMMED);
			ck_assert(!ss_chunk_done(j, f, v));
			h.rank = 1;
			ck_assert_int_eq(ss_push(j, 1, &h, pay, &who, &out), SS_COMPLETE);
			ck_assert_int_eq(ss_chunk_done(j, f, v), i == CHUNK / FRAG - 1);
			ck_assert(!ss_chunk_done(j, f, v + 1));
		}
		for (uint16_t k = 0; k < 2; k++) { /* the tail: fragments 0 and 1 */
			struct pbox_hdr h = hdr(j, 0, 1, k, v, k ? FRAG / 2 : FRAG);

			ck_assert_int_eq(ss_push(j, 1, &h, pay, &who, &out), SS_SUMMED);
			h.rank = 1;
			ck_assert_int_eq(ss_push(j, 1, &h, pay, &who, &out), SS_COMPLETE);
			ck_assert_int_eq(ss_chunk_done(j, ss_frag_of(j, 1, 1, 0), v), k == 1);
		}
	}
	free(mem);
}
END_TEST

/*
 * [job] deterministic: a job registered in rank order sums every fragment
 * as ((x0 + x1) + x2) + x3 whatever the order its pushes arrive in (all
 * 24 orders of 4 ranks), bitwise; the same job summed in arrival order
 * gives other bits for some orders (large values that cancel beside small
 * ones: fp32's rounding depends on the order, and shows in fp16 and bf16). A push that came
 * early waits in the stash: its duplicate is acknowledged, and its
 * probe says its part is in.
 */
START_TEST(test_ss_in_order)
{
	const uint8_t dt = (uint8_t)_i;
	struct ss_job_desc d = desc(4, dt);
	const unsigned elem = (unsigned)sum_dtype_size(dt), n = FRAG / elem;
	uint8_t pay[4][FRAG], want[FRAG];
	float ref[FRAG / 2];
	struct ss_job *j[2];
	void *mem[2];
	unsigned order[4] = {0, 1, 2, 3}, perms = 0, differ = 0;

	d.in_order = true;
	j[0] = init_job(&d, &mem[0]);
	d.in_order = false;
	j[1] = init_job(&d, &mem[1]);
	ck_assert_uint_eq(ss_job_bytes(&(struct ss_job_desc){.n = 4,
							     .dtype = dt,
							     .frag_size = FRAG,
							     .chunk_size = CHUNK,
							     .n_eps = 2,
							     .ep_chunks = {3, 2},
							     .in_order = true},
				       16) -
				  ss_job_bytes(&d, 16),
			  /* 5 chunks of 4 fragments, each with a stash of 3 */
			  5 * (CHUNK / FRAG) * 3 * FRAG);
	for (unsigned r = 0; r < 4; r++)
		for (unsigned i = 0; i < n; i++) {
			float x = test_wide(i, r, 0);

			if (dt == SUM_FP32)
				memcpy(&pay[r][i * 4], &x, 4);
			else if (dt == SUM_FP16)
				((uint16_t *)pay[r])[i] = sum_f32_to_f16(x);
			else
				((uint16_t *)pay[r])[i] = sum_f32_to_bf16(x);
		}
	/* the reference: rank order, in fp32, narrowed once */
	for (unsigned i = 0; i < n; i++) {
		ref[i] = get(dt, pay[0], i);
		for (unsigned r = 1; r < 4; r++)
			ref[i] += get(dt, pay[r], i);
		if (dt == SUM_FP32)
			memcpy(&want[i * 4], &ref[i], 4);
		else if (dt == SUM_FP16)
			((uint16_t *)want)[i] = sum_f32_to_f16(ref[i]);
		else
			((uint16_t *)want)[i] = sum_f32_to_bf16(ref[i]);
	}
	do { /* every order of the 4 ranks, one round each */
		for (unsigned k = 0; k < 2; k++) {
			struct ss_out out;

			for (unsigned p = 0; p < 4; p++) {
				struct pbox_hdr h =
					hdr(j[k], (uint16_t)order[p], 1, 2, perms, (uint16_t)FRAG);

				ck_assert_int_eq(ss_push(j[k], 1, &h, pay[order[p]], &who, &out),
						 p < 3 ? SS_SUMMED : SS_COMPLETE);
			}
			if (k == 0)
				ck_assert_msg(memcmp(out.buf, want, FRAG) == 0,
					      "%s, order %u%u%u%u: not the rank order's sum",
					      sum_dtype_name(dt), order[0], order[1], order[2],
					      order[3]);
			else
				differ += memcmp(out.buf, want, FRAG) != 0;
		}
		perms++;
	} while (next_perm(order, 4));
	ck_assert_uint_eq(perms, 24);
	ck_assert_msg(differ > 0, "%s: arrival order gave the rank order's bits in all 24 orders",
		      sum_dtype_name(dt));
	/* early pushes wait: a duplicate is acknowledged, a probe says it is in */
	{
		struct pbox_hdr h = hdr(j[0], 2, 1, 2, perms, (uint16_t)FRAG);
		struct ss_out out;

		ck_assert_int_eq(ss_push(j[0], 1, &h, pay[2], &who, &out), SS_SUMMED);
		ck_assert_int_eq(ss_push(j[0], 1, &h, pay[2], &who, &out), SS_DROP);
		ck_assert_int_eq(out.why, SS_DROP_DUP);
		ck_assert_int_eq(probe(j[0], 2, perms, &out), SS_WAITING);
		ck_assert_int_eq(probe(j[0], 1, perms, &out), SS_NACK);
	}
	free(mem[0]);
	free(mem[1]);
}
END_TEST

/* [job] compression names comp.h's schemes in their order, and the wire's
 * compressor nibble counts them. */
START_TEST(test_comp_names_agree)
{
	unsigned i;

	for (i = 0; cfg_comp_names[i]; i++) {
		ck_assert_str_eq(cfg_comp_names[i], comp_scheme_name(i));
		ck_assert_int_eq(comp_scheme_parse(cfg_comp_names[i]), (int)i);
	}
	ck_assert_uint_eq(i, COMP_SCHEME_COUNT);
	ck_assert_uint_eq(PBOX_COMP_COUNT, COMP_SCHEME_COUNT);
	ck_assert_int_eq(comp_scheme_parse("zip"), -1);
}
END_TEST

/* What a job with compression refuses, each with its reason, before it
 * touches the fragment; and a job without it refuses any compressed push. */
START_TEST(test_ss_compressed_drops)
{
	struct ss_job_desc d = desc(2, PBOX_DTYPE_FP32);
	const struct comp_spec topk = {COMP_TOPK, 100000};
	const size_t n = FRAG / 4, k = comp_k(n, 100000);
	const struct nic_addr from = {.ip_be = 0x0a000001};
	uint8_t pay[FRAG] = {0};
	struct ss_out out;
	struct pbox_hdr h;
	void *mem, *mem2;
	struct ss_job *j, *plain;

	ck_assert_ptr_nonnull(ss_job_desc_check(&(struct ss_job_desc){.id = 1,
								      .n = 2,
								      .dtype = PBOX_DTYPE_BF16,
								      .frag_size = FRAG,
								      .chunk_size = CHUNK,
								      .comp_ppm = 10000}));
	d.comp_ppm = 600000; /* top-k's 8 bytes an element would not fit */
	ck_assert_ptr_nonnull(ss_job_desc_check(&d));
	d.comp_ppm = 100000;
	j = init_job(&d, &mem);
	plain = make_job(2, PBOX_DTYPE_FP32, &mem2);
	for (uint32_t i = 0; i < k; i++) { /* ascending indices, then values */
		uint32_t ix = 3 * i;

		memcpy(pay + 4 * i, &ix, 4);
	}
	h = hdr(j, 0, 0, 0, 0, (uint16_t)comp_bytes(&topk, n));
	h.dtype |= COMP_TOPK << PBOX_COMP_SHIFT;
	ck_assert_int_eq(ss_push(plain, 0, &h, pay, &from, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_COMP);
	h.len--; /* not the scheme's length */
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &from, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_LEN);
	h.len++;
	memcpy(pay, pay + 4, 4); /* indices 3, 3, 6...: not ascending */
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &from, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_COMP_DATA);
	memset(pay, 0, 4); /* 0, 3, 6, ...: good */
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &from, &out), SS_SUMMED);
	/* rank 1 in another scheme for the same round */
	h.rank = 1;
	h.dtype = (uint8_t)(PBOX_DTYPE_FP32 | COMP_SIGN << PBOX_COMP_SHIFT);
	h.len = (uint16_t)comp_bytes(&(struct comp_spec){COMP_SIGN, 0}, n);
	ck_assert_int_eq(ss_push(j, 0, &h, pay, &from, &out), SS_DROP);
	ck_assert_int_eq(out.why, SS_DROP_COMP);
	ck_assert_uint_eq(j->cnt.drop[SS_DROP_COMP], 1);
	ck_assert_uint_eq(j->cnt.drop[SS_DROP_COMP_DATA], 1);
	ck_assert_uint_eq(j->cnt.summed, 1);
	free(mem);
	free(mem2);
}
END_TEST

Suite *ss_suite(void)
{
	Suite *s = suite_create("ss");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_ss_layout);
	tcase_add_test(tc, test_ss_drops);
	tcase_add_test(tc, test_ss_reply_of_every_drop);
	tcase_add_test(tc, test_ss_compressed_rounds);
	tcase_add_test(tc, test_ss_compressed_drops);
	tcase_add_test(tc, test_comp_names_agree);
	tcase_add_test(tc, test_ss_lengths_from_registration);
	tcase_add_test(tc, test_ss_ranks_bound_to_addresses);
	tcase_add_loop_test(tc, test_ss_rounds, SUM_FP32, SUM_DTYPE_COUNT);
	tcase_add_loop_test(tc, test_ss_in_order, SUM_FP32, SUM_DTYPE_COUNT);
	tcase_add_loop_test(tc, test_ss_rooted, 0, 2 * SUM_DTYPE_COUNT);
	tcase_add_test(tc, test_ss_turns_in_one);
	tcase_add_test(tc, test_ss_chunk_done);
	tcase_add_loop_test(tc, test_ss_async, SUM_FP32, SUM_DTYPE_COUNT);
	tcase_add_test(tc, test_ss_async_staleness);
	tcase_add_test(tc, test_ss_busy);
	tcase_add_test(tc, test_ss_probes);
	tcase_add_test(tc, test_ss_answers_paced);
	tcase_add_test(tc, test_ss_mac_learnt_from_new_parts_only);
	tcase_add_test(tc, test_ss_peer_per_endpoint);
	tcase_add_loop_test(tc, test_ss_random, SUM_FP32, SUM_DTYPE_COUNT);
	tcase_add_test(tc, test_ss_table);
	tcase_add_test(tc, test_ss_segments);
	suite_add_tcase(s, tc);
	return s;
}
