/* SPDX-License-Identifier: BSD-3-Clause */
/* The command-line front ends (--check-config, --plan, pboxctl's options),
 * run as a user would run them. */
#include <stdio.h>
#include <string.h>

#include "test.h"

static char out[65536];

/* Run "ENV BUILD/bin/PROG ARGS" with SRC/ prefixed to @file (if any). */
static int run(const char *env, const char *prog, const char *args, const char *file)
{
	char cmd[4096];

	if ((size_t)snprintf(cmd, sizeof(cmd), "%s %s/bin/%s %s%s%s 2>&1", env, test_build_dir(),
			     prog, args, file ? test_src_dir() : "",
			     file ? file : "") >= sizeof(cmd))
		ck_abort_msg("command too long");
	return test_run(cmd, out, sizeof(out));
}

START_TEST(pboxd_check_config_good)
{
	ck_assert_int_eq(run("", "pboxd", "--check-config ", "/config/examples/box-emulated.ini"),
			 0);
	ck_assert_ptr_nonnull(strstr(out, "; effective pboxd configuration"));
	ck_assert_ptr_nonnull(strstr(out, "[port p3]\n"));
	ck_assert_ptr_nonnull(strstr(out, "fragment_size = 8K\n"));
	ck_assert_ptr_nonnull(strstr(out, "chunk_size = 32K ; default\n"));
}
END_TEST

START_TEST(pboxd_check_config_bad)
{
	char want[1024];

	ck_assert_int_eq(
		run("", "pboxd", "--check-config ", "/config/examples/bad/box-unknown-key.ini"), 1);
	snprintf(want, sizeof(want),
		 "%s/config/examples/bad/box-unknown-key.ini:9: unknown key 'bandwdith'",
		 test_src_dir());
	ck_assert_msg(strstr(out, want), "got: %s", out);
	ck_assert_ptr_nonnull(strstr(out, "error"));
}
END_TEST

START_TEST(pboxd_usage)
{
	ck_assert_int_eq(run("", "pboxd", "", NULL), 2);
	ck_assert_ptr_nonnull(strstr(out, "usage: pboxd"));
	ck_assert_int_eq(run("", "pboxd", "--bogus", NULL), 2);
	ck_assert_int_eq(run("", "pboxd", "--check-config ", "/nonexistent.ini"), 1);
	ck_assert_ptr_nonnull(strstr(out, "cannot open"));
}
END_TEST

START_TEST(pboxd_plan_on_this_machine)
{
	ck_assert_int_eq(run("", "pboxd", "--plan ", "/config/examples/box-emulated.ini"), 0);
	ck_assert_ptr_nonnull(strstr(out, "placement: 2 data cores, 4 ports"));
	ck_assert_ptr_nonnull(strstr(out, "p0/q0"));
	ck_assert_ptr_nonnull(strstr(out, "p3/q0"));
	/* the PBox's PCI devices do not exist here: a clear refusal, not a crash */
	ck_assert_int_eq(run("", "pboxd", "--plan ", "/config/examples/box-pbox.ini"), 1);
	ck_assert_msg(strstr(out, "[port nic0] pci: no device 0000:18:00.0"), "got: %s", out);
}
END_TEST

START_TEST(worker_check_config_with_env)
{
	ck_assert_int_eq(run("PBOX_TUNING_CREDIT_BYTES=32M", "pbox-worker", "--check-config ",
			     "/config/examples/worker.ini"),
			 0);
	ck_assert_ptr_nonnull(strstr(out, "credit_bytes = 32M\n"));
	ck_assert_ptr_nonnull(strstr(out, "1 = 198.18.1.11:9700\n"));
	ck_assert_int_eq(run("PBOX_WORKER_RANK=x", "pbox-worker", "--check-config ",
			     "/config/examples/worker.ini"),
			 1);
	ck_assert_ptr_nonnull(strstr(out, "env PBOX_WORKER_RANK: 'x' is not a number"));
}
END_TEST

/* pboxctl's usage says every command; a bad --box is named before any key is
 * read or any connection made (exit 2), a missing key file after it (1). */
START_TEST(pboxctl_usage_and_box)
{
	ck_assert_int_eq(run("", "pboxctl", "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "usage: pboxctl"));
	ck_assert_ptr_nonnull(strstr(out, "  jobs "));
	ck_assert_ptr_nonnull(strstr(out, "  request 'LINE'"));
	ck_assert_int_eq(run("", "pboxctl", "", NULL), 2);
	ck_assert_int_eq(run("", "pboxctl",
			     "--box 198.18.0.1:9570x --key-file /nonexistent "
			     "request LIST",
			     NULL),
			 2);
	ck_assert_msg(strstr(out, "pboxctl: --box '198.18.0.1:9570x' has a port that is not a "
				  "number from 1 to 65535"),
		      "got: %s", out);
	ck_assert_int_eq(run("", "pboxctl", "--box 198.18.0.1 request LIST", NULL), 2);
	ck_assert_ptr_nonnull(strstr(out, "is not address:port"));
	ck_assert_int_eq(run("", "pboxctl",
			     "--box localhost:9570 --key-file /nonexistent "
			     "request LIST",
			     NULL),
			 1);
	ck_assert_msg(strstr(out, "pboxctl: --key-file /nonexistent"), "got: %s", out);
}
END_TEST

/* pbox-bench's counts are decimal with K, M or G, never octal, hex or
 * wrapped: refused (exit 2) before its configuration is read. */
START_TEST(bench_numbers_strict)
{
	static const char *const bad[] = {"--size 0x10", "--size 17179869184G",
					  "--size ' 5'", "--iters 4294967296",
					  "--iters -1",	 "--size 16Q"};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char args[128];

		snprintf(args, sizeof(args), "%s --config /nonexistent", bad[i]);
		ck_assert_msg(run("", "pbox-bench", args, NULL) == 2, "%s: %s", bad[i], out);
		ck_assert_msg(strstr(out, "is not a number"), "%s: %s", bad[i], out);
	}
	/* taken, then the missing configuration named */
	ck_assert_int_eq(run("", "pbox-bench", "--size 1M --iters 010 --config /nonexistent", NULL),
			 1);
	ck_assert_msg(strstr(out, "/nonexistent: cannot open"), "got: %s", out);
}
END_TEST

Suite *cli_suite(void)
{
	Suite *s = suite_create("cli");
	TCase *tc = tcase_create("check-config");

	tcase_add_test(tc, pboxd_check_config_good);
	tcase_add_test(tc, pboxd_check_config_bad);
	tcase_add_test(tc, pboxd_usage);
	tcase_add_test(tc, pboxd_plan_on_this_machine);
	tcase_add_test(tc, worker_check_config_with_env);
	tcase_add_test(tc, pboxctl_usage_and_box);
	tcase_add_test(tc, bench_numbers_strict);
	suite_add_tcase(s, tc);
	return s;
}
