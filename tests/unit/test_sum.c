/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Summation kernels. The scalar conversions are checked against independent
 * oracles (the compiler's _Float16; a bf16 rounding done in double); every
 * vector variant the CPU has is then checked against scalar, to the bit,
 * for every length 0..300 and large ones, every misalignment 0..63 of both
 * buffers, with NaN, Inf, subnormals and -0 mixed in, and guard bytes around
 * the output to catch a tail that writes too far.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sum.h"
#include "sum_conv.h"
#include "test.h"

#define GUARD	   64
#define GUARD_BYTE 0xcc

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd32(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x2545f4914f6cdd1dull) >> 32);
}

static const uint32_t f32_specials[] = {
	0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
	0x00000001, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff, 0x477ff000, 0x477fefff,
	0x477fe000, 0x33000000, 0x33000001, 0x387fc000, 0x38800000, 0x387ff000, 0x3f808000,
	0x3f818000, 0x3f80c000, 0x3f7fffff, 0x3a000000, 0x39ffe000, 0x337fffff, 0x7f7f8000,
};
static const uint16_t f16_specials[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x8001, 0x0400,
					0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
					0xfe01, 0x3c00, 0x3c01, 0x0200};
static const uint16_t bf16_specials[] = {0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x7f7f,
					 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x8001, 0x3f80,
					 0x3f81, 0xff7f, 0x0040, 0x80ff};

static bool f32_is_nan(uint32_t b)
{
	return (b & 0x7fffffffu) > 0x7f800000u;
}

static bool f16_is_nan(uint16_t h)
{
	return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

static bool bf16_is_nan(uint16_t h)
{
	return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
}

/* A mix: 1 in 8 special, the rest finite values of moderate magnitude. */
static uint32_t rnd_f32(void)
{
	uint32_t r = rnd32();

	if ((r & 7) == 0)
		return f32_specials[(r >> 3) % (sizeof(f32_specials) / sizeof(f32_specials[0]))];
	return (r & 0x807fffffu) | ((uint32_t)(107 + (rnd32() % 40)) << 23);
}

static uint16_t rnd_u16(enum sum_dtype t)
{
	uint32_t r = rnd32();

	if ((r & 7) == 0)
		return t == SUM_FP16 ? f16_specials[(r >> 3) % (sizeof(f16_specials) / 2)]
				     : bf16_specials[(r >> 3) % (sizeof(bf16_specials) / 2)];
	return (uint16_t)(r >> 8);
}

static void fill(void *p, enum sum_dtype t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (t == SUM_FP32) {
			uint32_t v = rnd_f32();
			memcpy((char *)p + 4 * i, &v, 4);
		} else {
			uint16_t v = rnd_u16(t);
			memcpy((char *)p + 2 * i, &v, 2);
		}
	}
}

/* Bitwise equal, except that any NaN equals any NaN (which NaN an addition
 * propagates depends on operand order, which compilers may swap). */
static bool same(const void *a, const void *b, enum sum_dtype t, size_t n, size_t *at)
{
	for (size_t i = 0; i < n; i++) {
		bool eq;

		if (t == SUM_FP32) {
			uint32_t x, y;
			memcpy(&x, (const char *)a + 4 * i, 4);
			memcpy(&y, (const char *)b + 4 * i, 4);
			eq = x == y || (f32_is_nan(x) && f32_is_nan(y));
		} else {
			uint16_t x, y;
			memcpy(&x, (const char *)a + 2 * i, 2);
			memcpy(&y, (const char *)b + 2 * i, 2);
			eq = x == y || (t == SUM_FP16 ? f16_is_nan(x) && f16_is_nan(y)
						      : bf16_is_nan(x) && bf16_is_nan(y));
		}
		if (!eq) {
			*at = i;
			return false;
		}
	}
	return true;
}

/* ---- scalar conversions against oracles ------------------------------- */

static float oracle_f16_to_f32(uint16_t h)
{
	_Float16 v;

	memcpy(&v, &h, 2);
	return (float)v;
}

static uint16_t oracle_f32_to_f16(float f)
{
	_Float16 v = (_Float16)f;
	uint16_t h;

	memcpy(&h, &v, 2);
	return h;
}

/* Nearest bf16 by distance in double, ties to the even one. */
static uint16_t oracle_f32_to_bf16(float f)
{
	uint32_t b = sum__f32_bits(f), lo = b & 0xffff0000u, hi = lo + 0x10000u;
	double dlo, dhi, d = f;

	if (isnan(f))
		return 0; /* NaNs are checked apart */
	if ((b & 0x7fffffffu) >= 0x7f800000u || lo == b)
		return (uint16_t)(b >> 16);
	dlo = sum__bits_f32(lo);
	/* one step past the largest finite value is infinity */
	dhi = (hi & 0x7fffffffu) == 0x7f800000u ? (d > 0 ? 1 : -1) * ldexp(1.0, 128)
						: (double)sum__bits_f32(hi);
	if (fabs(d - dlo) < fabs(dhi - d))
		return (uint16_t)(lo >> 16);
	if (fabs(d - dlo) > fabs(dhi - d))
		return (uint16_t)(hi >> 16);
	return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

START_TEST(f16_to_f32_exhaustive)
{
	for (uint32_t h = 0; h < 65536; h++) {
		uint32_t got = sum__f32_bits(sum_f16_to_f32((uint16_t)h));
		uint32_t want = sum__f32_bits(oracle_f16_to_f32((uint16_t)h));

		if (f16_is_nan((uint16_t)h) ? !f32_is_nan(got) || (got >> 31) != (h >> 15u)
					    : got != want)
			ck_abort_msg("h=%04x got %08x want %08x", h, got, want);
	}
}
END_TEST

static void check_f32_to_f16(uint32_t b)
{
	uint16_t got = sum_f32_to_f16(sum__bits_f32(b));

	if (f32_is_nan(b) ? !f16_is_nan(got) || (got >> 15) != (b >> 31)
			  : got != oracle_f32_to_f16(sum__bits_f32(b)))
		ck_abort_msg("f=%08x got %04x want %04x", b, got,
			     oracle_f32_to_f16(sum__bits_f32(b)));
}

static void check_f32_to_bf16(uint32_t b)
{
	uint16_t got = sum_f32_to_bf16(sum__bits_f32(b));

	if (f32_is_nan(b) ? !bf16_is_nan(got) || (got >> 15) != (b >> 31)
			  : got != oracle_f32_to_bf16(sum__bits_f32(b)))
		ck_abort_msg("f=%08x got %04x want %04x", b, got,
			     oracle_f32_to_bf16(sum__bits_f32(b)));
}

START_TEST(f32_narrowing_against_oracles)
{
	uint32_t i, e;

	for (i = 0; i < sizeof(f32_specials) / sizeof(f32_specials[0]); i++) {
		check_f32_to_f16(f32_specials[i]);
		check_f32_to_bf16(f32_specials[i]);
	}
	/* every exponent, with mantissas at and around the rounding points */
	for (e = 0; e < 256; e++)
		for (i = 0; i < 4096; i++) {
			uint32_t m = (i & 1) ? rnd32() & 0x7fffff : (i << 11) | (i & 0x7ff);
			uint32_t b = (e << 23) | (m & 0x7fffff) | ((i & 2) ? 0x80000000u : 0);

			check_f32_to_f16(b);
			check_f32_to_bf16(b);
			check_f32_to_f16(b ^ (0x1000u | ((rnd32() & 1) ? 0xfffu : 0)));
			check_f32_to_bf16((b & 0xffff0000u) | 0x8000u);
		}
	for (i = 0; i < (1u << 22); i++) {
		uint32_t b = rnd32();

		check_f32_to_f16(b);
		check_f32_to_bf16(b);
	}
}
END_TEST

START_TEST(bf16_widening_exhaustive)
{
	for (uint32_t h = 0; h < 65536; h++)
		if (sum__f32_bits(sum_bf16_to_f32((uint16_t)h)) != h << 16)
			ck_abort_msg("bf16 %04x widened to %08x", h,
				     sum__f32_bits(sum_bf16_to_f32((uint16_t)h)));
}
END_TEST

/* ---- every vector variant against scalar ------------------------------ */

enum op { OP_ADD, OP_LOAD, OP_STORE };
static const char *const op_names[] = {"add", "load", "store"};

struct bufs {
	uint8_t *d_ref, *d_var, *src;
};

static struct bufs B;
#define BUF_BYTES ((4u << 20) + 4 * GUARD)

static void bufs_setup(void)
{
	B.d_ref = malloc(BUF_BYTES);
	B.d_var = malloc(BUF_BYTES);
	B.src = malloc(BUF_BYTES);
	ck_assert(B.d_ref && B.d_var && B.src);
}

static void bufs_teardown(void)
{
	free(B.d_ref);
	free(B.d_var);
	free(B.src);
}

/* Run one kernel of @v and of scalar on the same inputs; compare. */
static void compare_one(const struct sum_ops *v, enum op op, enum sum_dtype t, size_t n,
			size_t mis_dst, size_t mis_src)
{
	const struct sum_ops *ref = &sum_ops_scalar;
	enum sum_dtype dt = op == OP_STORE ? t : SUM_FP32; /* dst element type */
	enum sum_dtype st = op == OP_STORE ? SUM_FP32 : t; /* src element type */
	size_t dbytes = n * sum_dtype_size(dt), at = 0;
	uint8_t *dr = B.d_ref + GUARD + mis_dst, *dv = B.d_var + GUARD + mis_dst;
	uint8_t *s = B.src + GUARD + mis_src;
	sum_fn fr, fv;

	memset(B.d_ref, GUARD_BYTE, dbytes + 2 * GUARD + 64);
	memset(B.d_var, GUARD_BYTE, dbytes + 2 * GUARD + 64);
	fill(s, st, n);
	if (op == OP_ADD) {
		fill(dr, SUM_FP32, n);
		memcpy(dv, dr, dbytes);
	}
	fr = op == OP_ADD ? ref->add[t] : op == OP_LOAD ? ref->load[t] : ref->store[t];
	fv = op == OP_ADD ? v->add[t] : op == OP_LOAD ? v->load[t] : v->store[t];
	fr(dr, s, n);
	fv(dv, s, n);
	/* plain ifs: every ck_assert is a message to the parent process */
	if (!same(dr, dv, dt, n, &at))
		ck_abort_msg("%s %s %s n=%zu mis=%zu/%zu: element %zu differs from scalar", v->name,
			     op_names[op], sum_dtype_name(t), n, mis_dst, mis_src, at);
	for (size_t g = 0; g < GUARD + mis_dst; g++)
		if (B.d_var[g] != GUARD_BYTE)
			ck_abort_msg("%s %s %s n=%zu: wrote before the buffer", v->name,
				     op_names[op], sum_dtype_name(t), n);
	for (size_t g = 0; g < GUARD; g++)
		if (dv[dbytes + g] != GUARD_BYTE)
			ck_abort_msg("%s %s %s n=%zu mis=%zu: wrote %zu bytes past the end",
				     v->name, op_names[op], sum_dtype_name(t), n, mis_dst, g + 1);
}

static unsigned tested_variants(const struct sum_ops **out)
{
	unsigned n = 0;

	for (enum sum_isa isa = SUM_ISA_SCALAR + 1; isa < SUM_ISA_COUNT; isa++) {
		const struct sum_ops *v = sum_ops_isa(isa);

		if (v)
			out[n++] = v;
		else
			fprintf(stderr, "sum: this CPU lacks %s: its kernels are not run here\n",
				sum_isa_name(isa));
	}
	return n;
}

static void sweep(void (*body)(const struct sum_ops *, enum op, enum sum_dtype))
{
	const struct sum_ops *vs[SUM_ISA_COUNT];
	unsigned nv = tested_variants(vs);

	/* scalar against itself proves the harness; the variants are the test */
	vs[nv++] = &sum_ops_scalar;
	for (unsigned i = 0; i < nv; i++)
		for (int op = OP_ADD; op <= OP_STORE; op++)
			for (int t = SUM_FP32; t < SUM_DTYPE_COUNT; t++)
				body(vs[i], (enum op)op, (enum sum_dtype)t);
}

static void lengths_body(const struct sum_ops *v, enum op op, enum sum_dtype t)
{
	for (size_t n = 0; n <= 300; n++)
		compare_one(v, op, t, n, n % 64, (n * 7 + 3) % 64);
	compare_one(v, op, t, 4096, 0, 0);
	compare_one(v, op, t, 65536 + 13, 5, 60);
	compare_one(v, op, t, (1u << 20) - 1, 32, 1);
}

static void misalign_body(const struct sum_ops *v, enum op op, enum sum_dtype t)
{
	for (size_t md = 0; md < 64; md++)
		for (size_t ms = 0; ms < 64; ms++) {
			compare_one(v, op, t, 37, md, ms);
			compare_one(v, op, t, 300, md, ms);
		}
}

START_TEST(variants_every_length)
{
	sweep(lengths_body);
}
END_TEST

START_TEST(variants_every_misalignment)
{
	sweep(misalign_body);
}
END_TEST

/* A harness that cannot fail proves nothing: a kernel that is off by one
 * element at the tail must be caught. */
static void broken_add_f32(void *restrict acc, const void *restrict x, size_t n)
{
	sum_ops_scalar.add[SUM_FP32](acc, x, n ? n - 1 : 0);
}

START_TEST(harness_catches_a_short_tail)
{
	struct sum_ops broken = sum_ops_scalar;
	uint8_t *s = B.src + GUARD;
	size_t at = 99;

	broken.add[SUM_FP32] = broken_add_f32;
	for (size_t i = 0; i < 17; i++) {
		float one = 1.0f;
		memcpy(B.d_ref + 4 * i, &one, 4);
		memcpy(B.d_var + 4 * i, &one, 4);
		memcpy(s + 4 * i, &one, 4);
	}
	sum_ops_scalar.add[SUM_FP32](B.d_ref, s, 17);
	broken.add[SUM_FP32](B.d_var, s, 17);
	ck_assert(!same(B.d_ref, B.d_var, SUM_FP32, 17, &at));
	ck_assert_uint_eq(at, 16);
}
END_TEST

/* ---- semantics -------------------------------------------------------- */

/* fp16 sums are rounded once, at completion: 2048 + 1 + 1 is 2050, where
 * rounding after every step would give 2048 (each +1 is a tie to even). */
START_TEST(rounded_once_at_completion)
{
	const struct sum_ops *vs[SUM_ISA_COUNT];
	unsigned nv = tested_variants(vs);
	enum { N = 67 };

	vs[nv++] = &sum_ops_scalar;
	for (unsigned v = 0; v < nv; v++) {
		uint16_t a[N], one[N], out[N];
		float acc[N];

		for (int t = SUM_FP16; t <= SUM_BF16; t++) {
			/* fp16: 2048 has ulp 2; bf16: 256 has ulp 2 */
			uint16_t big = t == SUM_FP16 ? 0x6800 : 0x4380;
			uint16_t unit = t == SUM_FP16 ? 0x3c00 : 0x3f80;
			uint16_t want = t == SUM_FP16 ? 0x6801 : 0x4381;

			for (int i = 0; i < N; i++) {
				a[i] = big;
				one[i] = unit;
			}
			vs[v]->load[t](acc, a, N);
			vs[v]->add[t](acc, one, N);
			vs[v]->add[t](acc, one, N);
			vs[v]->store[t](out, acc, N);
			for (int i = 0; i < N; i++)
				ck_assert_msg(out[i] == want,
					      "%s %s: element %d is %04x, want %04x", vs[v]->name,
					      sum_dtype_name((enum sum_dtype)t), i, out[i], want);
		}
	}
}
END_TEST

/* n workers' integer-valued gradients sum exactly, in every dtype. */
START_TEST(exact_sums_of_many_workers)
{
	const struct sum_ops *o = sum_ops_best();
	enum { N = 1000, W = 64 };
	static float acc[N], x32[N];
	static uint16_t x16[N], out[N];

	for (int t = SUM_FP32; t < SUM_DTYPE_COUNT; t++) {
		for (int w = 0; w < W; w++) {
			for (int i = 0; i < N; i++) {
				float v = (float)((i * 7 + w * 3) % 17) - 8.0f;

				x32[i] = v;
				x16[i] = t == SUM_FP16 ? sum_f32_to_f16(v) : sum_f32_to_bf16(v);
			}
			const void *src = t == SUM_FP32 ? (const void *)x32 : (const void *)x16;
			if (w == 0)
				o->load[t](acc, src, N);
			else
				o->add[t](acc, src, N);
		}
		o->store[t](t == SUM_FP32 ? (void *)x32 : (void *)out, acc, N);
		for (int i = 0; i < N; i++) {
			float want = 0;

			for (int w = 0; w < W; w++)
				want += (float)((i * 7 + w * 3) % 17) - 8.0f;
			float got = t == SUM_FP32   ? x32[i]
				    : t == SUM_FP16 ? sum_f16_to_f32(out[i])
						    : sum_bf16_to_f32(out[i]);
			ck_assert_msg(got == want, "%s %s: element %d is %g, want %g", o->name,
				      sum_dtype_name((enum sum_dtype)t), i, (double)got,
				      (double)want);
		}
	}
}
END_TEST

/* ---- dispatch --------------------------------------------------------- */

START_TEST(dispatch_choice)
{
	enum sum_isa best, isa;

	ck_assert(sum_isa_supported(SUM_ISA_SCALAR));
	ck_assert_ptr_null(sum_ops_isa(SUM_ISA_COUNT));
	ck_assert_int_eq(sum_isa_choose(NULL, &best), 0);
	ck_assert(sum_isa_supported(best));
	for (enum sum_isa i = best + 1; i < SUM_ISA_COUNT; i++)
		ck_assert(!sum_isa_supported(i));
	ck_assert_int_eq(sum_isa_choose("scalar", &isa), 0);
	ck_assert_int_eq(isa, SUM_ISA_SCALAR);
	ck_assert_int_eq(sum_isa_choose("avx2", &isa), 0);
	ck_assert_int_eq(isa, best < SUM_ISA_AVX2 ? best : SUM_ISA_AVX2);
	ck_assert_int_eq(sum_isa_choose("avx512", &isa), 0);
	ck_assert_int_eq(isa, best);
	ck_assert_int_eq(sum_isa_choose("sse9", &isa), -EINVAL);
	ck_assert_int_eq(isa, best);
	for (enum sum_isa i = SUM_ISA_SCALAR; i <= best; i++)
		ck_assert_int_eq(sum_ops_isa(i)->isa, i);
}
END_TEST

/* PBOX_SIMD caps what sum_ops_best() picks; the choice is made once per
 * process, and Check runs each test in a fresh fork. */
START_TEST(dispatch_env_cap)
{
	if (getenv("CK_FORK") && strcmp(getenv("CK_FORK"), "no") == 0)
		return; /* the choice may already be made in this process */
	setenv("PBOX_SIMD", "scalar", 1);
	ck_assert_int_eq(sum_ops_best()->isa, SUM_ISA_SCALAR);
	ck_assert_ptr_eq(sum_ops_best(), &sum_ops_scalar);
}
END_TEST

Suite *sum_suite(void)
{
	Suite *s = suite_create("sum");
	TCase *tc = tcase_create("conversions");

	tcase_add_test(tc, f16_to_f32_exhaustive);
	tcase_add_test(tc, bf16_widening_exhaustive);
	tcase_add_test(tc, f32_narrowing_against_oracles);
	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);

	tc = tcase_create("variants");
	tcase_add_checked_fixture(tc, bufs_setup, bufs_teardown);
	tcase_add_test(tc, variants_every_length);
	tcase_add_test(tc, variants_every_misalignment);
	tcase_add_test(tc, harness_catches_a_short_tail);
	tcase_set_timeout(tc, 300);
	suite_add_tcase(s, tc);

	tc = tcase_create("semantics");
	tcase_add_test(tc, rounded_once_at_completion);
	tcase_add_test(tc, exact_sums_of_many_workers);
	tcase_add_test(tc, dispatch_choice);
	tcase_add_test(tc, dispatch_env_cap);
	suite_add_tcase(s, tc);
	return s;
}
