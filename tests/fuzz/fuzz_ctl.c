/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the text a peer or a file hands pbox (make fuzz):
 * the ranks' protocol lines (worker/rank_proto.h), the box's control lines
 * (nic/nic_ctl.h) and both configuration files (config/). The input's
 * first byte picks the parser (fuzz_ctl.h), the rest is the text. Any
 * input: no read or write outside it (ASan), no undefined behaviour
 * (UBSan), no leak; and what a parser accepts, its formatter writes, and
 * that parses back to the same thing and formats to the same text. The
 * box's reply lines are taken only as their formatter writes them: what
 * one of them accepts is that text, byte for byte.
 */
#include <netdb.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "cfg_box.h"
#include "cfg_worker.h"
#include "fuzz_ctl.h"
#include "nic_ctl.h"
#include "rank_proto.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct nic_ctl_session session;

/* The configurations' host names never reach a resolver here (this
 * definition takes the place of libc's): made-up names must not leave the
 * host as DNS questions. "localhost" still resolves, in config/cfg.c. */
int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	(void)node;
	(void)service;
	(void)hints;
	*res = NULL;
	return EAI_NONAME;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (sodium_init() < 0)
		abort();
	fuzz_ctl_session(&session);
	return 0;
}

/* A rank's line: parsed, formatted, parsed again and formatted the same. */
static void rank_line(char *line)
{
	static char out[2 * RP_LINE_MAX], again[2 * RP_LINE_MAX], err[256];
	struct rp_msg m, m2;
	int n;

	if (rp_parse(line, &m, err, sizeof(err)))
		return;
	/* an accepted message is one the formatter can write (texts are cut) */
	n = rp_format(out, sizeof(out), &m);
	if (n < 0 || (size_t)n != strlen(out))
		abort();
	memcpy(again, out, (size_t)n + 1);
	if (rp_parse(again, &m2, err, sizeof(err)) || m2.verb != m.verb)
		abort();
	if (rp_format(again, sizeof(again), &m2) != n || memcmp(again, out, (size_t)n))
		abort();
}

static void rank_list(const char *list)
{
	bool gone[64] = {0}, gone2[64] = {0};
	char out[256];

	if (rp_ranks_parse(list, gone, 64))
		return;
	rp_ranks_format(out, sizeof(out), gone, 64);
	if (rp_ranks_parse(out, gone2, 64) || memcmp(gone, gone2, sizeof(gone)))
		abort();
}

static void box_ep(const char *line)
{
	struct nic_ctl_ep a = {0}, b = {0};
	char out[512];

	if (nic_ctl_parse_ep(line, &a))
		return;
	if (nic_ctl_format_ep(out, sizeof(out), &a) < 0 || strcmp(out, line) ||
	    nic_ctl_parse_ep(out, &b) || a.idx != b.idx || a.addr.ip_be != b.addr.ip_be ||
	    a.addr.port != b.addr.port || memcmp(a.addr.mac, b.addr.mac, 6) ||
	    a.weight_kbps != b.weight_kbps || a.room != b.room)
		abort();
}

static void box_geometry(const char *line)
{
	struct nic_ctl_geometry a = {0}, b = {0};
	char out[256];

	if (nic_ctl_parse_geometry(line, &a))
		return;
	if (nic_ctl_format_geometry(out, sizeof(out), &a) < 0 || strcmp(out, line) ||
	    nic_ctl_parse_geometry(out, &b) || a.n_eps != b.n_eps || a.frag != b.frag ||
	    a.chunk != b.chunk || a.mtu != b.mtu || a.txref != b.txref)
		abort();
}

static void box_reg_ok(const char *line)
{
	struct nic_ctl_reg_ok a = {0}, b = {0};
	char out[256];

	if (nic_ctl_parse_reg_ok(line, &a))
		return;
	if (nic_ctl_format_reg_ok(out, sizeof(out), &a) < 0 || strcmp(out, line) ||
	    nic_ctl_parse_reg_ok(out, &b) || a.job != b.job || a.bytes != b.bytes ||
	    a.frag != b.frag || a.chunk != b.chunk)
		abort();
}

static bool ranks_same(const struct nic_ctl_reg *a, const struct nic_ctl_reg *b)
{
	for (uint32_t i = 0; i < a->n; i++)
		if (a->ranks[i].ip_be != b->ranks[i].ip_be || a->ranks[i].port != b->ranks[i].port)
			return false;
	return true;
}

/* Two registrations say the same: every scalar, and what each list holds. */
static bool reg_same(const struct nic_ctl_reg *a, const struct nic_ctl_reg *b)
{
	return a->grow == b->grow && a->job == b->job &&
	       (a->grow || (!memcmp(a->key, b->key, NIC_KEY_LEN) && a->mac == b->mac)) &&
	       a->n == b->n && a->dtype == b->dtype && a->comp == b->comp &&
	       a->in_order == b->in_order && a->frag == b->frag && a->chunk == b->chunk &&
	       a->n_eps == b->n_eps && a->n_shorts == b->n_shorts && a->n_asyncs == b->n_asyncs &&
	       a->stale == b->stale &&
	       !memcmp(a->chunks, b->chunks, a->n_eps * sizeof(a->chunks[0])) &&
	       !memcmp(a->shorts, b->shorts, a->n_shorts * sizeof(a->shorts[0])) &&
	       !memcmp(a->asyncs, b->asyncs, a->n_asyncs * sizeof(a->asyncs[0])) &&
	       ranks_same(a, b);
}

static void box_register(const char *args, bool grow)
{
	static struct nic_ctl_reg a, b;
	static char out[NIC_CTL_LINE_MAX];
	char err[256];
	const char *sp;

	a.grow = grow;
	if (nic_ctl_parse_register(args, &fuzz_ctl_limits, &session, &a, err, sizeof(err)))
		return;
	if (nic_ctl_format_register(out, sizeof(out), &session, &a) < 0 ||
	    !(sp = strchr(out, ' ')) ||
	    strncmp(out, grow ? "GROW " : "REGISTER ", (size_t)(sp - out) + 1))
		abort();
	b.grow = grow;
	if (nic_ctl_parse_register(sp + 1, &fuzz_ctl_limits, &session, &b, err, sizeof(err)) ||
	    !reg_same(&a, &b))
		abort();
}

static void box_unregister(const char *args)
{
	char proof[65], err[160], out[128];
	uint32_t job;

	if (nic_ctl_parse_unregister(args, &job, proof, err, sizeof(err)))
		return;
	snprintf(out, sizeof(out), "job=%u proof=%s", job, proof);
	if (strcmp(out, args))
		abort();
}

static void box_auth_ok(const char *line)
{
	struct nic_ctl_session s = {0};
	char out[160];

	if (nic_ctl_parse_auth_ok(line, s.nb, s.box_proof))
		return;
	if (nic_ctl_format_auth_ok(out, sizeof(out), &s) < 0 || strcmp(out, line))
		abort();
}

/* A configuration file: what loads prints as text that loads to the same
 * configuration (cfg.h), byte for byte. */
static void config(const struct cfg_schema *sc, const char *text)
{
	struct cfg_errors errs;
	void *a = calloc(1, sc->size), *b = calloc(1, sc->size);
	char *printed = NULL;
	size_t len = 0;

	if (!a || !b)
		abort();
	if (cfg_load_text(sc, "fuzz.ini", text, NULL, a, &errs) == 0) {
		FILE *mem = open_memstream(&printed, &len);

		if (!mem)
			abort();
		cfg_print(sc, a, mem);
		if (fclose(mem))
			abort();
		if (cfg_load_text(sc, "printed.ini", printed, NULL, b, &errs) != 0) {
			fprintf(stderr, "printed text does not load: %s\n%s", errs.msg[0], printed);
			abort();
		}
		if (memcmp(a, b, sc->size)) {
			fprintf(stderr, "printed text loads to another configuration:\n%s",
				printed);
			abort();
		}
		free(printed);
	}
	free(a);
	free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char text[NIC_CTL_LINE_MAX];
	unsigned target;

	if (size < 1)
		return 0;
	target = data[0] % FZ_TARGETS;
	size--;
	/* a line as the receivers hand it over: at most their buffer, no NUL in it */
	if (size >= (target <= FZ_RANK_LIST ? RP_LINE_MAX : sizeof(text)))
		return 0;
	memcpy(text, data + 1, size);
	text[size] = '\0';
	switch ((enum fuzz_ctl_target)target) {
	case FZ_RANK_LINE:
		rank_line(text);
		break;
	case FZ_RANK_LIST:
		rank_list(text);
		break;
	case FZ_BOX_EP:
		box_ep(text);
		break;
	case FZ_BOX_GEOMETRY:
		box_geometry(text);
		break;
	case FZ_BOX_REG_OK:
		box_reg_ok(text);
		break;
	case FZ_BOX_REGISTER:
	case FZ_BOX_GROW:
		box_register(text, target == FZ_BOX_GROW);
		break;
	case FZ_BOX_UNREGISTER:
		box_unregister(text);
		break;
	case FZ_BOX_AUTH_OK:
		box_auth_ok(text);
		break;
	case FZ_CFG_WORKER:
		config(&wrk_cfg_schema, text);
		break;
	case FZ_CFG_BOX:
		config(&box_cfg_schema, text);
		break;
	case FZ_TARGETS:
		break;
	}
	return 0;
}
