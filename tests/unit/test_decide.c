/* SPDX-License-Identifier: BSD-3-Clause */
/* ByteComp's decision algorithm (worker/decide.c) against its own model:
 * the timeline's arithmetic on a step worked by hand, bubbles ruled out,
 * and on reduced models (12 tensors) within 5% of every combination tried,
 * never worse than compressing everything or nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decide.h"
#include "models.h"
#include "test.h"

/* A link of 1 GB/s, EFSignSGD's 1/31 on the wire; a device that encodes
 * at 400 GB/s after 20 us, a CPU at 5 GB/s after 5 us. */
static struct dc_model model(uint32_t n, const uint64_t *bytes, const double *compute)
{
	return (struct dc_model){
		.n = n,
		.bytes = bytes,
		.compute_s = compute,
		.forward_s = 0.01,
		.net_a = 50e-6,
		.net_b = 1e-9,
		.wire_ratio = 1.0 / 31,
		.cost = {[DC_DEVICE] = {true, 20e-6, 1 / 400e9, 20e-6, 1 / 400e9},
			 [DC_CPU] = {true, 5e-6, 1 / 5e9, 5e-6, 1 / 5e9}},
	};
}

/* Two tensors, worked by hand: 1 MB ready at 1 ms, 2 MB at 3 ms. Sent as
 * they are, the link is busy 1-2.05 ms and 3-5.05 ms (a bubble between):
 * 5.05 + 10 = 15.05 ms. The second compressed on the CPU: ready to go at 3 +
 * 0.005 + 0.4 = 3.405 ms, on the link 3.405 + 0.05 + 2/31 ms, decoded
 * 0.405 ms later. */
START_TEST(test_timeline_by_hand)
{
	const uint64_t bytes[] = {1000000, 2000000};
	const double compute[] = {0.001, 0.002};
	struct dc_model m = model(2, bytes, compute);
	uint8_t w[2] = {DC_SEND, DC_SEND};
	double want;

	ck_assert_double_eq_tol(dc_time(&m, w), 0.01505, 1e-12);
	w[1] = DC_CPU;
	want = 0.003 + 0.000405 + 0.00005 + 2e6 * 1e-9 / 31 + 0.000405 + 0.01;
	ck_assert_double_eq_tol(dc_time(&m, w), want, 1e-12);
	/* on the device, its encoding delays nothing after it (it is the last) */
	w[1] = DC_DEVICE;
	want = 0.003 + 20e-6 + 2e6 / 400e9 + 0.00005 + 2e6 * 1e-9 / 31 + 20e-6 + 2e6 / 400e9 + 0.01;
	ck_assert_double_eq_tol(dc_time(&m, w), want, 1e-12);
}
END_TEST

/* Communication hidden behind computation: every tensor's sum is in before
 * the next is ready (bubbles everywhere); nothing is worth compressing. */
START_TEST(test_hidden_not_compressed)
{
	uint64_t bytes[20];
	double compute[20];
	uint8_t w[20];

	for (unsigned i = 0; i < 20; i++) {
		bytes[i] = 100000;
		compute[i] = 0.005;
	}
	struct dc_model m = model(20, bytes, compute);
	ck_assert_int_eq(dc_decide(&m, w), 0);
	for (unsigned i = 0; i < 19; i++)
		ck_assert_msg(w[i] == DC_SEND, "tensor %u compressed though its link is idle after",
			      i);
}
END_TEST

/* Reduced models: 9 or 12 tensors of a few sizes and random compute, on
 * the device and CPU together, the CPU alone, and the device alone: ByteComp's
 * choice within 5% of the best of all combinations, and never worse than
 * sending everything as it is or compressing everything on one resource. */
START_TEST(test_near_brute_force)
{
	static const uint64_t sizes[] = {4u << 20, 16u << 20, 1u << 20, 64u << 10};
	unsigned seed = 7;

	for (unsigned trial = 0; trial < 30; trial++) {
		uint64_t bytes[DC_BRUTE_MAX];
		double compute[DC_BRUTE_MAX], none, dev_all, cpu_all, got, best;
		uint8_t w[DC_BRUTE_MAX], b[DC_BRUTE_MAX], all[DC_BRUTE_MAX];
		struct dc_model m;

		for (unsigned i = 0; i < DC_BRUTE_MAX; i++) {
			bytes[i] = sizes[rand_r(&seed) % 4];
			compute[i] = 0.0005 + (double)(rand_r(&seed) % 1000) * 1e-5;
		}
		/* both resources: 3^9 combinations; one: 2^12 (a unit test's time) */
		m = model(trial % 3 ? DC_BRUTE_MAX : 9, bytes, compute);
		m.cost[DC_DEVICE].can = trial % 3 != 1; /* every third: the CPU alone */
		m.cost[DC_CPU].can = trial % 3 != 2;	/* and the device alone */
		ck_assert_int_eq(dc_decide(&m, w), 0);
		ck_assert_int_eq(dc_brute(&m, b), 0);
		got = dc_time(&m, w);
		best = dc_time(&m, b);
		memset(all, DC_SEND, sizeof(all));
		none = dc_time(&m, all);
		memset(all, DC_DEVICE, sizeof(all));
		dev_all = m.cost[DC_DEVICE].can ? dc_time(&m, all) : 1e9;
		memset(all, DC_CPU, sizeof(all));
		cpu_all = m.cost[DC_CPU].can ? dc_time(&m, all) : 1e9;
		ck_assert_msg(got <= best * 1.05, "trial %u: %.6f s, the best %.6f s", trial, got,
			      best);
		ck_assert_msg(
			got <= none + 1e-12 && got <= dev_all + 1e-12 && got <= cpu_all + 1e-12,
			"trial %u: %.6f s; nothing %.6f, all on the device %.6f, all on the CPU "
			"%.6f",
			trial, got, none, dev_all, cpu_all);
	}
}
END_TEST

/*
 * One direction alone, worked by hand: a link of 1 ns a byte each way, no
 * latency, 1/32 on the wire, a CPU that encodes and decodes at 0.5 ns a
 * byte; 2 MB ready at 0, 1 MB at 0.5 ms, no forward pass.
 *  - Both compressed alike at best: the first sent as it is (the link 0-2
 *    ms), the second compressed (0.5-1 ms), pushed and summed 2-2.03125
 *    ms, decoded by 2.53125 ms.
 *  - The first compressed (1 ms), pushed and back 1-1.0625 ms, decoded by
 *    2.0625 ms; the second's push alone (encoded 1-1.5 ms, pushed 1.5-
 *    1.53125 ms), its sum back as fp32 1.5-2.5 ms, nothing to decode: 2.5
 *    ms, and what ByteComp's choice finds with one_way.
 *  - The first's sum alone compressed, the second sent as it is: the
 *    first pushed 0-2 ms (its sum back by then), decoded by 3 ms; the
 *    second's push 2-3 ms: 3 ms.
 */
START_TEST(test_one_way_by_hand)
{
	const uint64_t bytes[] = {2000000, 1000000};
	const double compute[] = {0, 0.0005};
	struct dc_model m = {.n = 2,
			     .bytes = bytes,
			     .compute_s = compute,
			     .net_b = 1e-9,
			     .wire_ratio = 1.0 / 32,
			     .cost = {[DC_CPU] = {true, 0, 0.5e-9, 0, 0.5e-9}}};
	uint8_t w[2], b[2];

	ck_assert_int_eq(dc_brute(&m, b), 0); /* both alike: the best of 3^2 */
	ck_assert_double_eq_tol(dc_time(&m, b), 0.00253125, 1e-12);
	ck_assert_int_eq(b[0], DC_SEND);
	ck_assert_int_eq(b[1], DC_CPU);
	w[0] = DC_CPU;
	w[1] = DC_CPU | DC_PUSH_ONLY;
	ck_assert_double_eq_tol(dc_time(&m, w), 0.0025, 1e-12);
	w[0] = DC_CPU | DC_SUM_ONLY;
	w[1] = DC_SEND;
	ck_assert_double_eq_tol(dc_time(&m, w), 0.003, 1e-12);
	m.one_way = true;
	ck_assert_int_eq(dc_decide(&m, w), 0);
	ck_assert_int_eq(w[0], DC_CPU);
	ck_assert_int_eq(w[1], DC_CPU | DC_PUSH_ONLY);
	ck_assert_int_eq(dc_brute(&m, b), 0); /* and the best of 4^2 */
	ck_assert_double_eq_tol(dc_time(&m, b), 0.0025, 1e-12);
}
END_TEST

/* With each direction alone an option (the CPU alone, 7 tensors: 4^7
 * combinations): ByteComp's choice within 5% of the best of them all, and
 * never worse than its choice with both directions alike. */
START_TEST(test_one_way_near_brute_force)
{
	static const uint64_t sizes[] = {4u << 20, 16u << 20, 1u << 20, 64u << 10};
	unsigned seed = 11, one_way = 0;

	for (unsigned trial = 0; trial < 30; trial++) {
		uint64_t bytes[7];
		double compute[7], got, best, alike;
		uint8_t w[7], b[7];
		struct dc_model m;

		for (unsigned i = 0; i < 7; i++) {
			bytes[i] = sizes[rand_r(&seed) % 4];
			compute[i] = 0.0005 + (double)(rand_r(&seed) % 1000) * 1e-5;
		}
		m = model(7, bytes, compute);
		m.cost[DC_DEVICE].can = false;
		ck_assert_int_eq(dc_decide(&m, w), 0);
		alike = dc_time(&m, w);
		m.one_way = true;
		ck_assert_int_eq(dc_decide(&m, w), 0);
		ck_assert_int_eq(dc_brute(&m, b), 0);
		got = dc_time(&m, w);
		best = dc_time(&m, b);
		for (unsigned i = 0; i < 7; i++)
			one_way += (w[i] & (DC_PUSH_ONLY | DC_SUM_ONLY)) != 0;
		ck_assert_msg(got <= best * 1.05, "trial %u: %.6f s, the best %.6f s", trial, got,
			      best);
		ck_assert_msg(got <= alike + 1e-12, "trial %u: %.6f s, both alike %.6f s", trial,
			      got, alike);
	}
	printf("decide: one direction alone chosen for %u of 210 tensors\n", one_way);
}
END_TEST

/* A real model's tensors (ResNet-50's 161), communication-bound: ByteComp
 * compresses some and not others, and its step is shorter than both
 * sending everything and compressing everything on the device. */
START_TEST(test_resnet50_mixed_choice)
{
	struct model rn;
	double *compute, none, all_t, got;
	uint64_t *bytes;
	uint8_t *w, *all;
	unsigned sent = 0, comp = 0;
	struct dc_model m;

	ck_assert_int_eq(model_get("resnet50", &rn), 0);
	bytes = calloc(rn.n, sizeof(*bytes));
	compute = calloc(rn.n, sizeof(*compute));
	w = calloc(rn.n, 1);
	all = calloc(rn.n, 1);
	ck_assert(bytes && compute && w && all);
	for (uint32_t i = 0; i < rn.n; i++) { /* backward order: the last layer first */
		bytes[i] = rn.count[rn.n - 1 - i] * 4;
		compute[i] = 0.08 / rn.n;
	}
	m = model(rn.n, bytes, compute);
	ck_assert_int_eq(dc_decide(&m, w), 0);
	got = dc_time(&m, w);
	memset(all, DC_SEND, rn.n);
	none = dc_time(&m, all);
	memset(all, DC_DEVICE, rn.n);
	all_t = dc_time(&m, all);
	for (uint32_t i = 0; i < rn.n; i++)
		w[i] == DC_SEND ? sent++ : comp++;
	ck_assert_msg(got < none && got <= all_t, "%.4f s; none %.4f, all %.4f", got, none, all_t);
	ck_assert_msg(sent > 0 && comp > 0, "%u sent, %u compressed", sent, comp);
	free(bytes);
	free(compute);
	free(w);
	free(all);
	model_free(&rn);
}
END_TEST

Suite *decide_suite(void)
{
	Suite *s = suite_create("decide");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_timeline_by_hand);
	tcase_add_test(tc, test_hidden_not_compressed);
	tcase_add_test(tc, test_near_brute_force);
	tcase_add_test(tc, test_resnet50_mixed_choice);
	tcase_add_test(tc, test_one_way_by_hand);
	tcase_add_test(tc, test_one_way_near_brute_force);
	suite_add_tcase(s, tc);
	return s;
}
