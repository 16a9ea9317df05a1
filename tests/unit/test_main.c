/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The unit-test runner: every suite, XML for CI in unit_tests.xml, exit
 * status non-zero unless everything passed. Tests fork (Check's default), so
 * a crash fails one test, not the run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "test.h"

#include <math.h>

static uint32_t wide_mix(uint64_t i, unsigned r, unsigned v)
{
	uint32_t h = (uint32_t)(i * 2654435761u) ^ (r * 40503u + v * 7919u + 0x9e37u);

	h ^= h >> 13;
	h *= 0x5bd1e995u;
	return h ^ h >> 15;
}

float test_wide(uint64_t i, unsigned r, unsigned v)
{
	uint32_t h = wide_mix(i, r, v), h0 = wide_mix(i, 0, v);

	if (i % 2 == 0 && (r == 0 || r == 2))
		return (r == 0 ? 1.0f : -1.0f) * (1.0f + (float)(h0 >> 1 & 7) / 8.0f) * 32768.0f;
	if (i % 2 == 0)
		return (h & 1 ? -1.0f : 1.0f) * (1.0f + (float)(h >> 1 & 127) / 128.0f) *
		       ldexpf(1.0f, -(int)(h >> 8 & 7));
	return (h & 1 ? -1.0f : 1.0f) * (1.0f + (float)(h >> 1 & 7) / 8.0f) *
	       ldexpf(1.0f, (int)(h >> 4 & 31) % 30 - 14);
}

const char *test_src_dir(void)
{
	const char *d = getenv("TEST_SRC_DIR");

	return d && *d ? d : ".";
}

const char *test_build_dir(void)
{
	const char *d = getenv("TEST_BUILD_DIR");

	return d && *d ? d : "build";
}

int test_run(const char *cmd, char *out, size_t len)
{
	FILE *p = popen(cmd, "r");
	size_t n = 0, r;
	int st;

	if (!p)
		return -1;
	while (len > 1 && (r = fread(out + n, 1, len - 1 - n, p)) > 0)
		n += r;
	if (len)
		out[n] = '\0';
	/* drain what did not fit, so the child never blocks on a full pipe */
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static Suite *(*const suites[])(void) = {box_suite,	   cfg_suite,	 cli_suite,	ctl_suite,
					 decide_suite,	   layout_suite, libpbox_suite, numa_suite,
					 rank_proto_suite, ss_suite,	 sum_suite,	wire_suite};

int main(void)
{
	SRunner *sr = srunner_create(NULL);
	int failed;

	for (size_t i = 0; i < sizeof(suites) / sizeof(suites[0]); i++)
		srunner_add_suite(sr, suites[i]());
	srunner_set_xml(sr, "unit_tests.xml");
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
