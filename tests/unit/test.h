/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared bits of the unit tests: each test file exports one suite. */
#ifndef PBOX_TEST_H
#define PBOX_TEST_H

#include <check.h>
#include <stddef.h>

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

#endif /* PBOX_TEST_H */
