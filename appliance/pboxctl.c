/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pboxctl: pboxd's telemetry for people. Talks to DPDK's telemetry socket
 * of a running pboxd (the same one dpdk-telemetry.py uses).
 *
 *   pboxctl [--prefix P] stats        box totals
 *   pboxctl [--prefix P] cores        one column per data core
 *   pboxctl [--prefix P] jobs         one column per job
 *   pboxctl [--prefix P] raw CMD      any telemetry command, JSON as received
 *   --all    also the counters that are zero;  --json  JSON as received
 *
 *   pboxctl --box HOST:PORT [--key-file F] request 'LINE'
 *       one request to a box's control plane over the network (STATS, LIST,
 *       ...), after proving the box key (F: $PBOX_BOX_KEY_FILE, else
 *       /etc/pbox/box.key); prints the reply's lines; exit 1 on ERR
 *
 * Exit status: 0, 1 when pboxd cannot be reached, 2 bad usage.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sodium.h>

#include "cfg.h"
#include "nic_ctl.h"

#define REPLY_MAX (1 << 20)
#define MAX_COLS  64
#define MAX_ROWS  128
#define NAME_LEN  64
#define VAL_LEN	  32

/* A parsed reply: a dict of numbers/strings (one column), or a dict of
 * such dicts (one column each). */
struct table {
	unsigned n_cols, n_rows;
	char col[MAX_COLS][NAME_LEN];
	char row[MAX_ROWS][NAME_LEN];
	char val[MAX_COLS][MAX_ROWS][VAL_LEN];
};

static const char *skip(const char *p)
{
	while (*p && isspace((unsigned char)*p))
		p++;
	return p;
}

/* A JSON string or number into @out; returns the text after it, or NULL. */
static const char *scalar(const char *p, char *out, size_t len)
{
	size_t n = 0;

	p = skip(p);
	if (*p == '"') {
		for (p++; *p && *p != '"'; p++)
			if (n + 1 < len)
				out[n++] = *p;
		if (*p != '"')
			return NULL;
		p++;
	} else {
		while (*p && (isalnum((unsigned char)*p) || *p == '-' || *p == '.' || *p == '+'))
			if (n + 1 < len)
				out[n++] = *p++;
			else
				p++;
		if (!n)
			return NULL;
	}
	out[n] = '\0';
	return p;
}

static unsigned row_of(struct table *t, const char *name)
{
	unsigned r;

	for (r = 0; r < t->n_rows; r++)
		if (strcmp(t->row[r], name) == 0)
			return r;
	if (t->n_rows == MAX_ROWS)
		return MAX_ROWS;
	snprintf(t->row[t->n_rows], NAME_LEN, "%s", name);
	return t->n_rows++;
}

/* The dict at @p as column @c; returns the text after it, or NULL. */
static const char *dict(const char *p, struct table *t, unsigned c, int depth)
{
	char k[NAME_LEN];

	p = skip(p);
	if (*p != '{')
		return NULL;
	p = skip(p + 1);
	if (*p == '}')
		return p + 1;
	for (;;) {
		p = scalar(p, k, sizeof(k));
		if (!p)
			return NULL;
		p = skip(p);
		if (*p != ':')
			return NULL;
		p = skip(p + 1);
		if (*p == '{') {
			if (depth > 0 || t->n_cols == MAX_COLS)
				return NULL;
			snprintf(t->col[t->n_cols], NAME_LEN, "%s", k);
			p = dict(p, t, t->n_cols++, depth + 1);
		} else {
			char v[VAL_LEN];
			unsigned r;

			p = scalar(p, v, sizeof(v));
			if (!p)
				return NULL;
			r = row_of(t, k);
			if (r < MAX_ROWS)
				snprintf(t->val[c][r], VAL_LEN, "%s", v);
		}
		if (!p)
			return NULL;
		p = skip(p);
		if (*p == ',') {
			p++;
			continue;
		}
		if (*p == '}')
			return p + 1;
		return NULL;
	}
}

static void print_table(struct table *t, bool all)
{
	unsigned r, c, w = 8;

	for (r = 0; r < t->n_rows; r++)
		if (strlen(t->row[r]) > w)
			w = (unsigned)strlen(t->row[r]);
	if (t->n_cols > 1 || t->col[0][0]) {
		printf("%-*s", (int)w, "");
		for (c = 0; c < t->n_cols; c++)
			printf(" %16s", t->col[c]);
		printf("\n");
	}
	for (r = 0; r < t->n_rows; r++) {
		bool any = all;

		for (c = 0; c < t->n_cols && !any; c++)
			any = t->val[c][r][0] && strcmp(t->val[c][r], "0") != 0;
		if (!any)
			continue;
		printf("%-*s", (int)w, t->row[r]);
		for (c = 0; c < t->n_cols; c++)
			printf(" %16s", t->val[c][r][0] ? t->val[c][r] : "-");
		printf("\n");
	}
}

static int query(const char *prefix, const char *cmd, char *out, size_t cap)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	const char *run = getenv("XDG_RUNTIME_DIR");
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ssize_t n;

	if (getuid() == 0 || !run)
		run = "/var/run";
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dpdk/%s/dpdk_telemetry.v2", run, prefix);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr,
			"pboxctl: cannot reach pboxd at %s (is it running with --file-prefix "
			"%s?)\n",
			sa.sun_path, prefix);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* the greeting first, then one reply per command */
	if (recv(fd, out, cap - 1, 0) < 0 || send(fd, cmd, strlen(cmd), 0) < 0 ||
	    (n = recv(fd, out, cap - 1, 0)) <= 0) {
		fprintf(stderr, "pboxctl: %s: no reply\n", cmd);
		close(fd);
		return -1;
	}
	out[n] = '\0';
	close(fd);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pboxctl [--prefix P] [--all] [--json] stats|cores|jobs|raw CMD\n"
		"       pboxctl --box HOST:PORT [--key-file F] request 'LINE'\n"
		"On the box, from its DPDK telemetry socket:\n"
		"  stats              the box's totals\n"
		"  cores              one column per data core\n"
		"  jobs               one column per job\n"
		"  raw CMD            any telemetry command (/pbox/stats, ...), JSON as received\n"
		"  --prefix P         pboxd's --file-prefix (default pboxd)\n"
		"  --all              also the counters that are zero\n"
		"  --json             JSON as received\n"
		"From anywhere, over the control plane after proving the box key:\n"
		"  request 'LINE'     one request (STATS, LIST, ...); its reply's lines\n"
		"  --box HOST:PORT    the box's control address ([management] address)\n"
		"  --key-file F       the box key (default $PBOX_BOX_KEY_FILE, else\n"
		"                     /etc/pbox/box.key)\n"
		"Exit status: 0; 1 when pboxd cannot be reached or answers ERR; 2 bad usage.\n");
}

/* One request on the control plane at @box ("HOST:PORT", as [box] control is written),
 * authenticated with the key in @key_file; the reply's lines to stdout. 0 on OK, 1 otherwise. */
static int request(const char *box, const char *key_file, const char *line)
{
	uint64_t deadline = nic_ctl_now() + 10000000000ull;
	struct nic_ctl_session s;
	struct cfg_hostport at;
	uint8_t key[NIC_KEY_LEN];
	char err[512], *buf = malloc(NIC_CTL_LINE_MAX);
	const char *bad = cfg_parse_hostport(box, &at);
	int fd, r, rc = 1;

	if (bad || !buf) {
		fprintf(stderr, "pboxctl: --box '%s' %s\n", box, bad ? bad : "(out of memory)");
		free(buf);
		return 2;
	}
	if (sodium_init() < 0 || nic_ctl_key_load(key_file, key, err, sizeof(err))) {
		fprintf(stderr, "pboxctl: --key-file %s\n", err);
		free(buf);
		return 1;
	}
	fd = nic_ctl_connect(at.ip_be, at.port, deadline);
	if (fd < 0) {
		fprintf(stderr, "pboxctl: %s: %s\n", box, strerror(errno));
	} else if (nic_ctl_auth(fd, key, &s, deadline, err, sizeof(err))) {
		fprintf(stderr, "pboxctl: %s: %s\n", box, err);
	} else if (nic_ctl_send(fd, line) == 0) {
		while ((r = nic_ctl_recv_line(fd, buf, NIC_CTL_LINE_MAX, deadline)) == 1) {
			printf("%s\n", buf);
			if (strncmp(buf, "OK", 2) == 0 || strncmp(buf, "ERR", 3) == 0) {
				rc = buf[0] == 'O' ? 0 : 1;
				break;
			}
		}
		if (r != 1)
			fprintf(stderr, "pboxctl: %s: %s\n", box,
				r == 0 ? "no answer in time" : "connection closed");
	}
	sodium_memzero(key, sizeof(key));
	if (fd >= 0)
		close(fd);
	free(buf);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {{"prefix", 1, 0, 'p'}, {"all", 0, 0, 'a'},
					   {"json", 0, 0, 'j'},	  {"help", 0, 0, 'h'},
					   {"box", 1, 0, 'b'},	  {"key-file", 1, 0, 'k'},
					   {0, 0, 0, 0}};
	const char *prefix = "pboxd", *what, *cmd, *box = NULL;
	const char *key_file = getenv("PBOX_BOX_KEY_FILE");
	bool all = false, json = false;
	char *reply = malloc(REPLY_MAX);
	struct table *t = calloc(1, sizeof(*t));
	const char *p;
	int c;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			prefix = optarg;
			break;
		case 'a':
			all = true;
			break;
		case 'j':
			json = true;
			break;
		case 'b':
			box = optarg;
			break;
		case 'k':
			key_file = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc || !reply || !t) {
		usage(stderr);
		return 2;
	}
	what = argv[optind++];
	if (strcmp(what, "request") == 0 && box && optind + 1 == argc) {
		free(reply);
		free(t);
		return request(box, key_file ? key_file : "/etc/pbox/box.key", argv[optind]);
	}
	if (strcmp(what, "stats") == 0)
		cmd = "/pbox/stats";
	else if (strcmp(what, "cores") == 0)
		cmd = "/pbox/cores";
	else if (strcmp(what, "jobs") == 0)
		cmd = "/pbox/jobs";
	else if (strcmp(what, "raw") == 0 && optind < argc) {
		cmd = argv[optind++];
		json = true;
	} else {
		usage(stderr);
		return 2;
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	if (query(prefix, cmd, reply, REPLY_MAX))
		return 1;
	if (json) {
		printf("%s\n", reply);
		return 0;
	}
	/* {"/pbox/x": {...}} */
	p = skip(reply);
	if (*p == '{') {
		char top[NAME_LEN];

		p = scalar(p + 1, top, sizeof(top));
	}
	if (p)
		p = skip(p);
	if (p && *p == ':') {
		t->n_cols = 1; /* column 0 holds a flat dict's values */
		p = dict(p + 1, t, 0, 0);
		if (t->n_cols > 1) { /* nested: drop the unused first column */
			memmove(t->col, t->col + 1, sizeof(t->col[0]) * (t->n_cols - 1));
			memmove(t->val, t->val + 1, sizeof(t->val[0]) * (t->n_cols - 1));
			t->n_cols--;
		}
	}
	if (!p) {
		fprintf(stderr, "pboxctl: %s: unexpected reply: %.200s\n", cmd, reply);
		return 1;
	}
	if (strcmp(what, "jobs") == 0 && t->n_rows == 0)
		printf("no jobs\n");
	else
		print_table(t, all);
	free(reply);
	free(t);
	return 0;
}
