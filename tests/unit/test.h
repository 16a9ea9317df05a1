/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared bits of the unit tests: each test file exports one suite. */
#ifndef PBOX_TEST_H
#define PBOX_TEST_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

Suite *box_suite(void);
Suite *cfg_suite(void);
Suite *cli_suite(void);
Suite *ctl_suite(void);
Suite *decide_suite(void);
Suite *layout_suite(void);
Suite *libpbox_suite(void);
Suite *numa_suite(void);
Suite *rank_proto_suite(void);
Suite *ss_suite(void);
Suite *sum_suite(void);
Suite *wire_suite(void);

/* Source tree and build tree roots (TEST_SRC_DIR, TEST_BUILD_DIR; "." and "build"). */
const char *test_src_dir(void);
const char *test_build_dir(void);

/* Run @cmd through the shell; capture up to @len-1 bytes of its stdout and
 * stderr into @out. Returns the exit status, or -1. */
int test_run(const char *cmd, char *out, size_t len);

/* Rank @r's element @i in iteration @v, values whose fp32 sum shows the
 * order of its additions ([job] deterministic's tests): in even elements
 * ranks 0 and 2 cancel (+b, -b, b up to 2^15) beside small values of 8
 * significant bits that b + x rounds away; odd elements any sign, 2^-14 to
 * 2^15. Exact in fp16 and bf16 alike. */
float test_wide(uint64_t i, unsigned r, unsigned v);

#endif /* PBOX_TEST_H */
