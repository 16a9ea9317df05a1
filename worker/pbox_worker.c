/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pbox-worker: the worker's command-line tool.
 *
 *   pbox-worker --check-config FILE   print the effective configuration
 *                                     (FILE plus PBOX_* overrides), or every
 *                                     error (exit 1)
 *
 * Exit status: 0 success, 1 bad configuration, 2 bad usage.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cfg_worker.h"

extern char **environ;

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pbox-worker --check-config FILE\n"
		"  --check-config FILE  validate FILE (with PBOX_SECTION_KEY overrides from the\n"
		"                       environment) and print the effective configuration\n"
		"  --config-reference   print every configuration key (Markdown)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"check-config", required_argument, NULL, 'c'},
		{"config-reference", no_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *check = NULL;
	struct cfg_errors errs;
	struct wrk_cfg *cfg;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			check = optarg;
			break;
		case 'r':
			cfg_print_reference(&wrk_cfg_schema, stdout);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !check) {
		usage(stderr);
		return 2;
	}
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg) {
		fprintf(stderr, "pbox-worker: out of memory\n");
		return 1;
	}
	rc = wrk_cfg_load(check, environ, cfg, &errs);
	if (rc == 0) {
		cfg_print(&wrk_cfg_schema, cfg, stdout);
	} else {
		cfg_errors_print(&errs, stderr);
		fprintf(stderr, "pbox-worker: %s: %u error%s\n", check, errs.n,
			errs.n == 1 ? "" : "s");
	}
	free(cfg);
	return rc == 0 ? 0 : 1;
}
