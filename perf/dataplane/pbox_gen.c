/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pbox-gen: a DPDK traffic generator that plays W workers against one box
 * port, for perf/dataplane and perf/scale.
 *
 *   pbox-gen [EAL args] -- --port VDEV --mode box|echo [--ctl HOST:PORT]
 *            [--key-file F] [--mac header|payload|off]
 *            [--workers W] [--bytes M] [--frag F] [--window P]
 *            [--warmup S] [--seconds S] [--job ID] [--hold]
 *
 * box:  registers a job of M bytes for W workers over pboxd's control
 *       plane, then every emulated worker pushes every fragment, round
 *       after round; each RESULT that comes back is parsed and its payload
 *       compared, byte for byte, with the sum it must hold, and its MAC
 *       checked. A fragment's next round goes out once all W results of
 *       this one are in. --key-file: the box key (for the control plane's
 *       handshake); --mac: the job's MAC mode (default header; the
 *       payloads' digests are computed once, so the generator's own cost
 *       per push is one header MAC in every mode).
 * echo: the same pushes to a reflector (dpdk-testpmd in macswap mode): each
 *       comes back with its MAC addresses swapped and is compared, header
 *       and payload, with what was sent. The I/O
 *       ceiling of the port type, with the generator doing the same work.
 *
 * At most --window packets are outstanding (so the far side's transmit
 * ring cannot overflow); a fragment silent for 200 ms is pushed again.
 * After --warmup seconds the counters are zeroed; after --seconds more it
 * prints one line:
 *   GEN mode=M workers=W frag=F pkts_in=N pps=P gbps_in=G gbps_out=G
 *       rounds=R resent=X stale=S foreign=O bad=B
 * (pps, Gb/s: what came back per second; gbps_out: what was sent) and, in
 * box mode, the box's own memory for the job (the REGISTER reply).
 * With --hold it then stops polling and keeps its port open until the far
 * side closes it (or a signal): a memif peer that leaves while the other
 * side polls can crash it (DPDK 22.11's memif PMD unmaps the shared rings
 * from its control thread while the data core reads them), so the harness
 * stops the far side first. A held generator leaves without tearing its
 * port down: run it with --huge-unlink.
 * Exit status 0 when every packet checked, 1 otherwise, 2 bad usage.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sodium.h>

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "cfg.h"
#include "nic_port.h"
#include "nic_ctl.h"
#include "nic_wire.h"

#define BURST	     32
#define MAX_WORKERS  256
#define MAX_EPS	     64
#define VARIANTS     5 /* rounds cycle through this many payload patterns */
#define STALL_MS     200
#define GEN_UDP_PORT 9700

enum gen_mode { GEN_BOX, GEN_ECHO };

struct gen_ep {
	struct nic_addr addr;
	uint32_t n_chunks;
};

struct gen_frag {
	uint32_t round;
	uint16_t next_w;  /* the next worker to push this round (W: all sent) */
	uint16_t got;	  /* results of this round in */
	uint64_t sent_at; /* TSC of the round's first push */
	uint64_t seen[MAX_WORKERS / 64];
	uint32_t ring_next; /* in the send FIFO: link */
	bool queued;
	bool resending; /* this round's missing parts go again */
};

struct gen {
	/* options */
	enum gen_mode mode;
	const char *port_dev, *ctl;
	uint32_t workers, frag, window, job;
	uint64_t bytes;
	double warmup_s, seconds;
	struct cfg_hostport ctl_at; /* --ctl */
	/* port */
	struct nic_port port;
	struct rte_mempool *pool;
	/* the job */
	struct gen_ep ep[MAX_EPS];
	uint32_t n_eps, chunk, fpc, n_chunks, n_frags;
	const char *key_file;
	unsigned mac_mode;
	struct nic_mac mac;	     /* the job's key, drawn for this run */
	uint64_t *push_dg, *want_dg; /* nic_mac_digest() of each payload */
	int ctl_fd;
	char reg_reply[512];
	struct nic_addr worker[MAX_WORKERS];
	/* payloads: push[v][w] and what the sum (box) or echo must hold */
	float *push, *want; /* frag / 4 elements each */
	struct gen_frag *f;
	uint32_t fifo_head, fifo_tail; /* fragments with pushes to send */
	uint32_t outstanding;	       /* packets sent, not answered */
	struct rte_mbuf *txq[BURST];   /* built, not yet taken by the port */
	uint16_t txn;
	uint8_t lin[16384]; /* a chained frame, made contiguous */
	/* counters */
	uint64_t pkts_in, bytes_in, pkts_out, bytes_out, rounds, resent, bad, stale, foreign;
	bool hold; /* after the result, keep the port until the far side leaves */
};

static volatile sig_atomic_t quit;

static void on_signal(int sig)
{
	(void)sig;
	quit = 1;
}

/* ---- values ----------------------------------------------------------------- */

/* Worker w's element i in variant v: small integers, so every fp32 sum of
 * up to 256 workers is exact. */
static float value(uint32_t w, uint32_t i, uint32_t v)
{
	return (float)((int)((i % 7) + 3 * w + 11 * v) % 97 - 48);
}

static int build_payloads(struct gen *g)
{
	uint32_t n = g->frag / 4, v, w, i;

	g->push = malloc((size_t)VARIANTS * g->workers * g->frag);
	g->want = malloc((size_t)VARIANTS * g->frag);
	g->push_dg = calloc((size_t)VARIANTS * g->workers, sizeof(uint64_t));
	g->want_dg = calloc(VARIANTS, sizeof(uint64_t));
	if (!g->push || !g->want || !g->push_dg || !g->want_dg)
		return -1;
	for (v = 0; v < VARIANTS; v++) {
		float *want = g->want + (size_t)v * n;

		for (i = 0; i < n; i++)
			want[i] = 0;
		for (w = 0; w < g->workers; w++) {
			float *p = g->push + ((size_t)v * g->workers + w) * n;

			for (i = 0; i < n; i++) {
				p[i] = value(w, i, v);
				want[i] += p[i];
			}
		}
	}
	for (v = 0; v < VARIANTS; v++) { /* the key is drawn by now (box_register) */
		g->want_dg[v] = nic_mac_digest(&g->mac, g->want + (size_t)v * n, g->frag);
		for (w = 0; w < g->workers; w++)
			g->push_dg[(size_t)v * g->workers + w] = nic_mac_digest(
				&g->mac, g->push + ((size_t)v * g->workers + w) * n, g->frag);
	}
	return 0;
}

/* ---- control plane (box mode) ----------------------------------------------- */

/* ENDPOINTS, then REGISTER a job of @g->bytes over every endpoint, through
 * the one control-protocol client (nic/nic_ctl.h). */
static int box_register(struct gen *g)
{
	static struct nic_ctl_reg req;
	static struct nic_ctl_ep eps[MAX_EPS];
	struct nic_ctl_geometry geo;
	struct nic_ctl_reg_ok ok;
	struct nic_ctl_session sess;
	uint8_t box_key[NIC_KEY_LEN];
	uint64_t deadline = nic_ctl_now() + 10000000000ull;
	char err[512];
	unsigned e;
	int rc;

	if (nic_ctl_key_load(g->key_file, box_key, err, sizeof(err)))
		return fprintf(stderr, "pbox-gen: --key-file %s\n", err), -1;
	g->ctl_fd = nic_ctl_connect(g->ctl_at.ip_be, g->ctl_at.port, deadline);
	if (g->ctl_fd < 0)
		return fprintf(stderr, "pbox-gen: control plane %s: %s\n", g->ctl, strerror(errno)),
		       -1;
	if (nic_ctl_auth(g->ctl_fd, box_key, &sess, deadline, err, sizeof(err)) ||
	    nic_ctl_endpoints(g->ctl_fd, eps, MAX_EPS, &geo, deadline, err, sizeof(err)))
		return fprintf(stderr, "pbox-gen: %s\n", err), -1;
	g->n_eps = geo.n_eps;
	for (e = 0; e < g->n_eps; e++)
		g->ep[e].addr = eps[e].addr;
	g->frag = geo.frag;
	g->chunk = geo.chunk;
	g->n_chunks = (uint32_t)(g->bytes / geo.chunk);
	if (!g->n_chunks || g->bytes % geo.chunk)
		return fprintf(stderr, "pbox-gen: --bytes must be a multiple of the chunk (%u)\n",
			       geo.chunk),
		       -1;
	for (uint32_t c = 0; c < g->n_chunks; c++) /* round robin over the endpoints */
		g->ep[c % g->n_eps].n_chunks++;
	req = (struct nic_ctl_reg){.job = g->job,
				   .mac = (uint8_t)g->mac_mode,
				   .n = g->workers,
				   .dtype = PBOX_DTYPE_FP32,
				   .frag = geo.frag,
				   .chunk = geo.chunk,
				   .n_eps = g->n_eps};
	for (e = 0; e < g->n_eps; e++)
		req.chunks[e] = g->ep[e].n_chunks;
	for (e = 0; e < g->workers; e++) /* the box takes each rank's pushes from there only */
		req.ranks[e] = g->worker[e];
	randombytes_buf(req.key, sizeof(req.key));
	nic_mac_init(&g->mac, g->mac_mode, req.key);
	rc = nic_ctl_register(g->ctl_fd, &sess, &req, &ok, deadline, err, sizeof(err));
	sodium_memzero(req.key, sizeof(req.key));
	if (rc)
		return fprintf(stderr, "pbox-gen: REGISTER %s: %s\n", rc > 0 ? "refused" : "failed",
			       err),
		       -1;
	snprintf(g->reg_reply, sizeof(g->reg_reply), "OK job=%u bytes=%" PRIu64, ok.job, ok.bytes);
	return 0;
}

/* ---- the send FIFO ------------------------------------------------------------- */

static void fifo_push(struct gen *g, uint32_t i)
{
	struct gen_frag *f = &g->f[i];

	if (f->queued)
		return;
	f->queued = true;
	f->ring_next = UINT32_MAX;
	if (g->fifo_head == UINT32_MAX)
		g->fifo_head = i;
	else
		g->f[g->fifo_tail].ring_next = i;
	g->fifo_tail = i;
}

static void fifo_pop(struct gen *g)
{
	struct gen_frag *f = &g->f[g->fifo_head];

	f->queued = false;
	g->fifo_head = f->ring_next;
}

/* ---- pushes ------------------------------------------------------------------- */

/* Fragment @i's header for worker @w: where it goes and what it says. */
static const struct nic_addr *frag_hdr(const struct gen *g, uint32_t i, uint32_t w,
				       struct pbox_hdr *h, bool resend)
{
	uint32_t chunk = i / g->fpc, e = g->mode == GEN_BOX ? chunk % g->n_eps : 0;

	*h = (struct pbox_hdr){.op = PBOX_OP_PUSH,
			       .dtype = PBOX_DTYPE_FP32,
			       .flags = resend ? PBOX_F_RETRANS : 0,
			       .rank = (uint16_t)w,
			       .job = g->job,
			       .chunk = g->mode == GEN_BOX ? chunk / g->n_eps : chunk,
			       .frag = (uint16_t)(i % g->fpc),
			       .len = (uint16_t)g->frag,
			       .round = g->f[i].round};
	h->mac =
		nic_mac_hdr(&g->mac, h, g->push_dg[(size_t)(h->round % VARIANTS) * g->workers + w]);
	return &g->ep[e].addr;
}

/* Pushes from the FIFO into the transmit buffer, within the window, then
 * one transmit burst; what the port did not take stays for next time. */
static void send_pushes(struct gen *g)
{
	uint16_t sent;

	while (g->txn < BURST && g->fifo_head != UINT32_MAX && g->outstanding < g->window) {
		uint32_t i = g->fifo_head, w = g->f[i].next_w;
		struct pbox_hdr h;

		if (g->f[i].resending && (g->f[i].seen[w / 64] >> (w % 64) & 1)) {
			if (++g->f[i].next_w == g->workers)
				fifo_pop(g);
			continue;
		}
		{
			const struct nic_addr *dst = frag_hdr(g, i, w, &h, g->f[i].resending);
			const float *pl = g->push + ((size_t)(h.round % VARIANTS) * g->workers +
						     w) * (g->frag / 4);
			struct rte_mbuf *m = rte_pktmbuf_alloc(g->pool);
			size_t len;

			if (!m)
				break;
			len = nic_wire_build(rte_pktmbuf_mtod(m, uint8_t *),
					     rte_pktmbuf_tailroom(m), &g->worker[w], dst, &h, pl);
			if (!len) {
				rte_pktmbuf_free(m);
				fprintf(stderr,
					"pbox-gen: a %u-byte fragment does not fit an mbuf\n",
					g->frag);
				quit = 1;
				break;
			}
			m->data_len = (uint16_t)len;
			m->pkt_len = (uint32_t)len;
			g->txq[g->txn++] = m;
			g->outstanding++;
			g->bytes_out += g->frag;
			if (w == 0 && !g->f[i].resending)
				g->f[i].sent_at = rte_rdtsc();
			if (++g->f[i].next_w == g->workers)
				fifo_pop(g);
		}
	}
	if (!g->txn)
		return;
	sent = rte_eth_tx_burst(g->port.port_id, 0, g->txq, g->txn);
	g->pkts_out += sent;
	if (sent < g->txn)
		memmove(g->txq, g->txq + sent, (g->txn - sent) * sizeof(g->txq[0]));
	g->txn = (uint16_t)(g->txn - sent);
}

/* ---- answers ------------------------------------------------------------------ */

/* One answer: a RESULT (box) or our own push back (echo). Every field and
 * every payload byte is checked; a duplicate (a resend answered twice) is
 * counted once. */
static void on_answer(struct gen *g, const uint8_t *frame, uint32_t len)
{
	/* macswap swaps the MAC addresses only: an echoed push is still
	 * addressed to the box's endpoint, from the worker */
	uint16_t port = g->mode == GEN_BOX ? GEN_UDP_PORT : g->ep[0].addr.port;
	struct nic_wire_expect exp = {.port_lo = port,
				      .port_hi = port,
				      .max_payload = (uint16_t)g->frag,
				      .accept_ops = g->mode == GEN_BOX ? 1u << PBOX_OP_RESULT |
										 1u << PBOX_OP_ACK
								       : 1u << PBOX_OP_PUSH};
	struct nic_pkt pkt;
	const float *want;
	struct gen_frag *f;
	uint32_t i, w, to;

	if (nic_wire_parse(frame, len, &exp, &pkt) != NIC_DROP_NONE) {
		g->foreign++; /* ARP, or a frame not for a worker */
		return;
	}
	if (pkt.kind != NIC_KIND_PBOX || pkt.hdr.job != g->job || pkt.hdr.rank >= g->workers ||
	    pkt.hdr.len != g->frag || pkt.hdr.frag >= g->fpc) {
		g->bad++;
		return;
	}
	if (pkt.hdr.op == PBOX_OP_ACK) /* a resend's part is in: its sum will come */
		return;
	w = pkt.hdr.rank;
	i = pkt.hdr.chunk * g->fpc + pkt.hdr.frag;
	if (g->mode == GEN_BOX) { /* which endpoint: by the source address */
		uint32_t e = 0;

		while (e < g->n_eps && g->ep[e].addr.ip_be != pkt.src_ip_be)
			e++;
		if (e == g->n_eps) {
			g->bad++;
			return;
		}
		i = (pkt.hdr.chunk * g->n_eps + e) * g->fpc + pkt.hdr.frag;
	}
	to = g->mode == GEN_BOX ? pkt.dst_ip_be : pkt.src_ip_be;
	if (i >= g->n_frags || to != g->worker[w].ip_be ||
	    (g->mode == GEN_ECHO && pkt.dst_ip_be != g->ep[0].addr.ip_be)) {
		g->bad++;
		return;
	}
	f = &g->f[i];
	if (pkt.hdr.round != f->round || (f->seen[w / 64] >> (w % 64) & 1)) {
		g->stale++; /* an answer to a resend we no longer need */
		return;
	}
	want = g->mode == GEN_BOX
		       ? g->want + (size_t)(f->round % VARIANTS) * (g->frag / 4)
		       : g->push + ((size_t)(f->round % VARIANTS) * g->workers + w) * (g->frag / 4);
	if (memcmp(frame + pkt.payload_off, want, g->frag) ||
	    (g->mode == GEN_BOX &&
	     nic_mac_hdr(&g->mac, &pkt.hdr, g->want_dg[f->round % VARIANTS]) != pkt.hdr.mac)) {
		g->bad++;
		return;
	}
	f->seen[w / 64] |= 1ull << (w % 64);
	g->pkts_in++;
	g->bytes_in += g->frag;
	if (g->outstanding)
		g->outstanding--;
	if (++f->got == g->workers) { /* the round is done: the next one */
		f->round++;
		f->got = 0;
		f->next_w = 0;
		f->resending = false;
		memset(f->seen, 0, sizeof(f->seen));
		g->rounds++;
		fifo_push(g, i);
	}
}

/* Frames may come chained (the box sends header and payload apart). */
static void receive(struct gen *g)
{
	struct rte_mbuf *m[BURST];
	uint16_t n = rte_eth_rx_burst(g->port.port_id, 0, m, BURST);

	for (uint16_t k = 0; k < n; k++) {
		const uint8_t *frame = rte_pktmbuf_mtod(m[k], const uint8_t *);

		if (m[k]->nb_segs > 1)
			frame = m[k]->pkt_len <= sizeof(g->lin)
					? rte_pktmbuf_read(m[k], 0, m[k]->pkt_len, g->lin)
					: NULL;
		if (frame)
			on_answer(g, frame, m[k]->pkt_len);
		else
			g->bad++;
		rte_pktmbuf_free(m[k]);
	}
}

/* A fragment whose round has been out for STALL_MS: lost somewhere (a
 * ring was full); push its missing workers' parts again. */
static void resend_stalled(struct gen *g, uint64_t now, uint64_t stall)
{
	for (uint32_t i = 0; i < g->n_frags; i++) {
		struct gen_frag *f = &g->f[i];

		if (f->queued || f->next_w < g->workers || now - f->sent_at < stall)
			continue;
		g->resent++;
		g->outstanding -=
			g->outstanding < g->workers - f->got ? g->outstanding : g->workers - f->got;
		f->next_w = 0;
		f->resending = true;
		f->sent_at = now;
		fifo_push(g, i);
	}
}

/* ---- main ------------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr,
		"usage: pbox-gen [EAL args] -- --port VDEV --mode box|echo [--ctl HOST:PORT]\n"
		"                [--key-file F] [--mac header|payload|off]\n"
		"                [--workers W] [--bytes M] [--frag F] [--window P]\n"
		"                [--warmup S] [--seconds S] [--job ID] [--hold]\n");
}

/* --NAME's @arg as a number of @type no larger than @max, or a message
 * naming the option. */
static int opt_num(const char *name, const char *arg, enum cfg_type type, uint64_t max,
		   uint64_t *out)
{
	const char *err = cfg_parse_num(type, arg, out);

	if (!err && *out > max)
		err = "is too large";
	if (err)
		fprintf(stderr, "pbox-gen: --%s '%s' %s\n", name, arg, err);
	return err ? -1 : 0;
}

static int opt_u32(const char *name, const char *arg, uint32_t *out)
{
	uint64_t v;

	if (opt_num(name, arg, CFG_UINT, UINT32_MAX, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* Seconds: a decimal ("2", "0.5"), from 0 to a day. */
static int opt_secs(const char *name, const char *arg, double *out)
{
	uint64_t us = 0;
	char with_unit[64];
	const char *err =
		(size_t)snprintf(with_unit, sizeof(with_unit), "%ss", arg) >= sizeof(with_unit)
			? "is too long"
			: cfg_parse_num(CFG_DURATION, with_unit, &us);

	if (!err && us > 86400000000ull)
		err = "is more than a day";
	if (err) {
		fprintf(stderr, "pbox-gen: --%s '%s' %s (seconds)\n", name, arg, err);
		return -1;
	}
	*out = (double)us / 1e6;
	return 0;
}

static int parse_args(int argc, char **argv, struct gen *g)
{
	static const struct option lo[] = {
		{"port", 1, 0, 'p'},	{"mode", 1, 0, 'm'},   {"ctl", 1, 0, 'c'},
		{"workers", 1, 0, 'w'}, {"bytes", 1, 0, 'b'},  {"frag", 1, 0, 'f'},
		{"window", 1, 0, 'W'},	{"warmup", 1, 0, 'u'}, {"seconds", 1, 0, 's'},
		{"job", 1, 0, 'j'},	{"hold", 0, 0, 'h'},   {"key-file", 1, 0, 'k'},
		{"mac", 1, 0, 'M'},	{0, 0, 0, 0}};
	int mode;
	int c;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'p':
			g->port_dev = optarg;
			break;
		case 'm':
			if (strcmp(optarg, "box") && strcmp(optarg, "echo"))
				return -1;
			g->mode = strcmp(optarg, "box") ? GEN_ECHO : GEN_BOX;
			break;
		case 'c': {
			const char *bad = cfg_parse_hostport(optarg, &g->ctl_at);

			if (bad) {
				fprintf(stderr, "pbox-gen: --ctl '%s' %s\n", optarg, bad);
				return -1;
			}
			g->ctl = optarg;
			break;
		}
		case 'w':
			if (opt_u32("workers", optarg, &g->workers))
				return -1;
			break;
		case 'b':
			if (opt_num("bytes", optarg, CFG_SIZE, UINT64_MAX, &g->bytes))
				return -1;
			break;
		case 'f':
			if (opt_u32("frag", optarg, &g->frag))
				return -1;
			break;
		case 'W':
			if (opt_u32("window", optarg, &g->window))
				return -1;
			break;
		case 'u':
			if (opt_secs("warmup", optarg, &g->warmup_s))
				return -1;
			break;
		case 's':
			if (opt_secs("seconds", optarg, &g->seconds))
				return -1;
			break;
		case 'j':
			if (opt_u32("job", optarg, &g->job))
				return -1;
			break;
		case 'h':
			g->hold = true;
			break;
		case 'k':
			g->key_file = optarg;
			break;
		case 'M':
			mode = nic_mac_mode_parse(optarg);
			if (mode < 0)
				return -1;
			g->mac_mode = (unsigned)mode;
			break;
		default:
			return -1;
		}
	}
	if (!g->port_dev || (g->mode == GEN_BOX && !g->ctl) || g->workers < 1 ||
	    g->workers > MAX_WORKERS || g->frag < 64 || g->frag % 4 || g->frag > 9000 ||
	    g->window < g->workers || g->seconds <= 0 || g->warmup_s < 0 || !g->bytes)
		return -1;
	return 0;
}

/* The emulated workers: 198.18.128.0/17 host addresses, our port's MAC. */
static void make_workers(struct gen *g)
{
	for (uint32_t w = 0; w < g->workers; w++) {
		memcpy(g->worker[w].mac, g->port.mac, 6);
		g->worker[w].ip_be = htonl(0xc6128000u + 256 * (w / 250) + w % 250 + 1);
		g->worker[w].port = GEN_UDP_PORT;
	}
}

static int port_up(struct gen *g)
{
	char err[256];
	unsigned room = RTE_PKTMBUF_HEADROOM + RTE_ALIGN_CEIL(g->frag + NIC_HDRS_LEN, 1024) + 1024;

	g->pool = rte_pktmbuf_pool_create("gen_pool", 16383, 256, 0, (uint16_t)room,
					  (int)rte_socket_id());
	if (!g->pool)
		return fprintf(stderr, "pbox-gen: mempool: %s\n", rte_strerror(rte_errno)), -1;
	nic_port_dev_name(NULL, g->port_dev, g->port.dev, sizeof(g->port.dev));
	snprintf(g->port.name, sizeof(g->port.name), "gen");
	if (nic_port_probe(&g->port, err, sizeof(err)) ||
	    nic_port_setup(&g->port, 1, g->frag + NIC_L3_OVERHEAD, 1024, 1024, &g->pool, err,
			   sizeof(err)))
		return fprintf(stderr, "pbox-gen: %s\n", err), -1;
	if (!nic_port_link_wait(&g->port, 10000, NULL, NULL))
		return fprintf(stderr, "pbox-gen: %s: no link in 10 s\n", g->port_dev), -1;
	return 0;
}

/* Run until @until (TSC), keeping the pipe full. */
static void run(struct gen *g, uint64_t until)
{
	uint64_t hz = rte_get_tsc_hz(), stall = hz / 1000 * STALL_MS, last_scan = rte_rdtsc();

	while (!quit) {
		uint64_t now = rte_rdtsc();

		if (now >= until)
			break;
		receive(g);
		send_pushes(g);
		if (now - last_scan > stall / 4) {
			resend_stalled(g, now, stall);
			last_scan = now;
		}
	}
}

int main(int argc, char **argv)
{
	struct gen *g;
	uint64_t hz, t0, t1;
	int used, rc = 1;

	g = calloc(1, sizeof(*g));
	if (!g)
		return 1;
	*g = (struct gen){.mode = GEN_BOX,
			  .workers = 4,
			  .bytes = 32u << 20,
			  .frag = 8192,
			  .window = 512,
			  .warmup_s = 2,
			  .seconds = 10,
			  .job = 7,
			  .key_file = getenv("PBOX_BOX_KEY_FILE") ? getenv("PBOX_BOX_KEY_FILE")
								  : "/etc/pbox/box.key",
			  .mac_mode = NIC_MAC_HEADER};
	if (sodium_init() < 0) {
		free(g);
		return 1;
	}
	used = rte_eal_init(argc, argv);
	if (used < 0) {
		fprintf(stderr, "pbox-gen: EAL: %s\n", rte_strerror(rte_errno));
		free(g);
		return 1;
	}
	argc -= used;
	argv += used;
	if (parse_args(argc, argv, g)) {
		usage();
		rte_eal_cleanup();
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (port_up(g))
		goto out;
	make_workers(g);
	if (g->mode == GEN_BOX) {
		if (box_register(g))
			goto out;
	} else {
		g->n_eps = 1;
		g->ep[0].addr = (struct nic_addr){.ip_be = htonl(0xc6120101u), .port = 9600};
		memcpy(g->ep[0].addr.mac, g->port.mac, 6);
		g->chunk = 32768 / g->frag * g->frag;
		g->n_chunks = (uint32_t)(g->bytes / g->chunk);
	}
	g->fpc = g->chunk / g->frag;
	g->n_frags = g->n_chunks * g->fpc;
	g->f = calloc(g->n_frags ? g->n_frags : 1, sizeof(*g->f));
	if (!g->f || !g->n_frags || build_payloads(g)) {
		fprintf(stderr, "pbox-gen: out of memory, or a model of no fragment\n");
		goto out;
	}
	g->fifo_head = UINT32_MAX;
	for (uint32_t i = 0; i < g->n_frags; i++)
		fifo_push(g, i);
	hz = rte_get_tsc_hz();
	t0 = rte_rdtsc();
	run(g, t0 + (uint64_t)(g->warmup_s * (double)hz));
	g->pkts_in = g->bytes_in = g->pkts_out = g->bytes_out = g->rounds = 0;
	t0 = rte_rdtsc();
	run(g, t0 + (uint64_t)(g->seconds * (double)hz));
	t1 = rte_rdtsc();
	{
		double s = (double)(t1 - t0) / (double)hz;

		printf("GEN mode=%s workers=%u frag=%u bytes=%" PRIu64
		       " seconds=%.2f pkts_in=%" PRIu64
		       " pps=%.0f gbps_in=%.3f gbps_out=%.3f rounds=%" PRIu64 " resent=%" PRIu64
		       " stale=%" PRIu64 " foreign=%" PRIu64 " bad=%" PRIu64 "%s%s\n",
		       g->mode == GEN_BOX ? "box" : "echo", g->workers, g->frag, g->bytes, s,
		       g->pkts_in, (double)g->pkts_in / s, (double)g->bytes_in * 8 / s / 1e9,
		       (double)g->bytes_out * 8 / s / 1e9, g->rounds, g->resent, g->stale,
		       g->foreign, g->bad, g->mode == GEN_BOX ? " box: " : "",
		       g->mode == GEN_BOX ? g->reg_reply : "");
	}
	fflush(stdout);
	rc = g->bad || !g->pkts_in ? 1 : 0;
	if (g->bad)
		fprintf(stderr, "pbox-gen: %" PRIu64 " answers failed their checks\n", g->bad);
	if (g->hold) { /* no more polling: the far side may now stop and close */
		while (!quit && nic_port_link_wait(&g->port, 0, NULL, NULL))
			usleep(10000);
		/* and no teardown either: 22.11's memif control thread, handling
		 * the peer's leaving, can crash or deadlock a port close and EAL
		 * cleanup racing it. The harness runs us with --huge-unlink, so
		 * the hugepages go back with the process */
		fflush(stdout);
		_exit(rc);
	}
out:
	for (uint16_t k = 0; k < g->txn; k++)
		rte_pktmbuf_free(g->txq[k]);
	if (g->port.started) {
		nic_port_stop(&g->port);
		nic_port_close(&g->port);
	}
	if (g->ctl_fd > 0)
		close(g->ctl_fd);
	free(g->f);
	free(g->push);
	free(g->push_dg);
	free(g->want_dg);
	free(g->want);
	free(g);
	rte_eal_cleanup();
	return rc;
}
