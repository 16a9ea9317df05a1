/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bootstrap (pbox_start): before any data moves, every rank proves to
 * rank 0 that it holds the same job, and learns where the summation
 * services are.
 *
 *   rank 0 -> rank r   (TCP, rank 0's [data] address:port), at once
 *       NONCE <hex>                16 random bytes for this connection
 *   rank r -> rank 0
 *       HELLO rank=R world_size=N job=J token=T chunk_size=C mtu=M bandwidth=B
 *             peers=H layout=L tensors=K proof=P
 *       T <key> <count> <dtype> <priority>   K lines, by key: the tensors declared
 *       END
 *   rank 0 -> rank r
 *       ERR <message>              a mismatch, a missing rank, the box refused
 *     or
 *       GO frag=F eps=E nonce=X
 *       EP <ip> <port> <kbps>      E lines: the box's endpoints
 *       END
 *
 * Rank 0 asks the box for its endpoints, compares every HELLO with its own
 * (the message names both ranks and the field), computes the layout and
 * registers the job with the box on a connection it keeps for the job's
 * life. The bootstrap connections stay open as well: they tell rank 0 when
 * a rank goes away (rank 0 then tells the others: LOST <rank>), and carry
 * the finalize barrier (BYE).
 *
 * Every incarnation of a job gets a key of its own: rank 0 draws a nonce,
 * and every rank derives the job's key from [job] token, the job id and the
 * nonce (nic_job_key()); the key signs every datagram (nic_mac_hdr()) and
 * rank 0 hands it to the box wrapped under the control connection's session
 * key. The token itself never leaves a rank: HELLO carries a hash of it
 * (token=), compared by rank 0, and proves it holds it (proof=: an HMAC of
 * the HELLO line and rank 0's NONCE under a key from the token, wk_link.h's
 * wk_proof_*), so a HELLO forged without the token, or captured and
 * replayed, is refused and logged and the true rank still gets in. A run
 * that reuses the job id and addresses of the one before it then cannot
 * take that run's late datagrams (a resend still queued somewhere) for its
 * own, and nobody without the token can forge one.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cfg_box.h"
#include "gather.h"
#include "layout.h"
#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_units.h"
#include "wk_module.h"
#include "wk_link.h"
#include "wk_box.h"
#include "wk_grow.h"
#include "wk_udp.h"
#include "wk_boot.h"
#include "wk_serve.h"

#define LINE_CAP 512

/* ---- what every rank says about itself ------------------------------------ */

#define HELLO_FIELDS(_)                                                                            \
	_(world_size)                                                                              \
	_(job)                                                                                     \
	_(token)                                                                                   \
	_(chunk_size)                                                                              \
	_(mtu)                                                                                     \
	_(bandwidth)                                                                               \
	_(peers)                                                                                   \
	_(layout)                                                                                  \
	_(heartbeat)                                                                               \
	_(compression)                                                                             \
	_(deterministic)                                                                           \
	_(leader_order)                                                                            \
	_(tensors)

enum {
#define HF_ENUM(f) HF_##f,
	HELLO_FIELDS(HF_ENUM)
#undef HF_ENUM
		HF_COUNT
};

static const char *const hf_name[HF_COUNT] = {
#define HF_NAME(f) #f,
	HELLO_FIELDS(HF_NAME)
#undef HF_NAME
};

struct hello {
	uint32_t rank;
	uint64_t v[HF_COUNT];
	uint64_t *key, *count; /* tensors, by key */
	uint8_t *dtype;
	int *prio;
};

/* FNV-1a over every rank's SS_GPU address: the peers lists must agree. */
static uint64_t peers_hash(const struct pbox *px)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (uint32_t r = 0; r < px->net.n; r++) {
		uint64_t x = (uint64_t)px->cfg.peers[r].ip_be << 16 | px->cfg.peers[r].port;

		for (int b = 0; b < 6; b++) {
			h ^= (x >> (8 * b)) & 0xff;
			h *= 0x100000001b3ull;
		}
	}
	return h;
}

/* What HELLO says of the token: 64 bits of a hash of it and the job id,
 * which rank 0 compares with its own (the token never travels). */
static uint64_t token_check(const struct pbox *px)
{
	uint8_t k[NIC_KEY_LEN];
	uint64_t v = 0;

	nic_job_key(px->cfg.job.token, px->net.job, UINT64_MAX, k); /* no nonce is all ones */
	for (int i = 0; i < 8; i++)
		v = v << 8 | k[i];
	sodium_memzero(k, sizeof(k));
	return v;
}

/* The key a HELLO's proof is made with: the token's, for no incarnation
 * (UINT64_MAX - 1 is no nonce either). Whoever proves it holds the token. */
static void hello_key(const struct pbox *px, uint8_t k[WK_PROOF_KEY])
{
	_Static_assert(NIC_KEY_LEN == WK_PROOF_KEY, "one key size");
	nic_job_key(px->cfg.job.token, px->net.job, UINT64_MAX - 1, k);
}

static void own_hello(const struct pbox *px, struct hello *h)
{
	h->rank = px->net.rank;
	h->v[HF_world_size] = px->net.n;
	h->v[HF_job] = px->net.job;
	h->v[HF_token] = token_check(px);
	h->v[HF_chunk_size] = px->cfg.tuning.chunk_size;
	h->v[HF_mtu] = px->cfg.data.mtu;
	h->v[HF_bandwidth] = px->cfg.data.bandwidth_mbps;
	h->v[HF_peers] = peers_hash(px);
	h->v[HF_layout] = px->cfg.tuning.layout;
	h->v[HF_heartbeat] = px->cfg.tuning.heartbeat_us;
	/* [job] compression, and the rate where the scheme takes one */
	h->v[HF_compression] =
		(uint64_t)px->cfg.job.compression << 32 |
		(uint64_t)(px->cfg.job.compression && px->cfg.job.compression_sum) << 31 |
		(px->cfg.job.compression == COMP_TOPK || px->cfg.job.compression == COMP_RANDK
			 ? px->cfg.job.compression_ppm
			 : 0);
	h->v[HF_deterministic] = px->cfg.job.deterministic;
	h->v[HF_leader_order] = px->cfg.job.leader_order;
	h->v[HF_tensors] = px->n_t;
}

/* Our HELLO, its first line proved against rank 0's @nonce. */
static int send_hello(const struct pbox *px, int fd, const uint8_t *nonce)
{
	struct rp_msg m = {.verb = RP_HELLO, .hello = {.rank = px->net.rank}};
	uint8_t k[WK_PROOF_KEY];
	struct hello h;
	char line[RP_LINE_MAX];
	int rc;

	own_hello(px, &h);
#define HF_PUT(f) m.hello.f = h.v[HF_##f];
	HELLO_FIELDS(HF_PUT)
#undef HF_PUT
	if (rp_format(line, sizeof(line), &m) < 0)
		return -1;
	hello_key(px, k);
	wk_proof_append(k, nonce, line, sizeof(line));
	sodium_memzero(k, sizeof(k));
	rc = rp_send_text(fd, line);
	for (uint32_t i = 0; rc == 0 && i < px->n_t; i++)
		rc = RP_SEND(fd, T, t, .key = px->t[i]->key, .count = px->t[i]->count,
			     .dtype = px->t[i]->dtype, .prio = px->t[i]->prio);
	return rc ? rc : rp_send_verb(fd, RP_END);
}

/* A HELLO is its line, a T line per tensor and END. */
static size_t hello_whole(const char *buf, size_t len, void *arg)
{
	const char *end;

	(void)arg;
	if (memchr(buf, '\n', len) && strncmp(buf, "HELLO ", 6))
		return (size_t)-1;
	for (const char *p = buf; (end = memchr(p, '\n', len - (size_t)(p - buf))); p = end + 1)
		if (end - p >= 3 && !strncmp(p, "END", 3) &&
		    (end - p == 3 || (end - p == 4 && p[3] == '\r')))
			return (size_t)(end - buf) + 1;
	return 0;
}

/* The next line of @*p (a whole HELLO) into @line; 0 when there is none. */
static int next_line(const char **p, char *line, size_t cap)
{
	size_t n = strcspn(*p, "\n");

	if (!**p)
		return 0;
	snprintf(line, cap, "%.*s", (int)(n && (*p)[n - 1] == '\r' ? n - 1 : n), *p);
	*p += n + ((*p)[n] == '\n');
	return 1;
}

/* A whole HELLO into @h (tensors allocated): its first line @first (the
 * proof cut off), then @rest (T lines and END); 0, or -1 with @why. */
static int parse_hello(char *first, const char *rest, struct hello *h, char *why, size_t why_cap)
{
	char line[RP_LINE_MAX], err[160];
	struct rp_msg m;
	uint32_t i = 0;

	memset(h, 0, sizeof(*h));
	if (rp_expect(first, RP_HELLO, &m, err, sizeof(err))) {
		snprintf(why, why_cap, "%s", err);
		return -1;
	}
	h->rank = m.hello.rank;
#define HF_GET(f) h->v[HF_##f] = m.hello.f;
	HELLO_FIELDS(HF_GET)
#undef HF_GET
	if (h->v[HF_tensors] > (1u << 24)) {
		snprintf(why, why_cap, "HELLO with %" PRIu64 " tensors", h->v[HF_tensors]);
		return -1;
	}
	h->key = calloc(h->v[HF_tensors] + 1, sizeof(uint64_t));
	h->count = calloc(h->v[HF_tensors] + 1, sizeof(uint64_t));
	h->dtype = calloc(h->v[HF_tensors] + 1, 1);
	h->prio = calloc(h->v[HF_tensors] + 1, sizeof(*h->prio));
	if (!h->key || !h->count || !h->dtype || !h->prio) {
		snprintf(why, why_cap, "out of memory");
		return -1;
	}
	for (;;) {
		if (!next_line(&rest, line, sizeof(line))) {
			snprintf(why, why_cap, "HELLO cut short");
			return -1;
		}
		if (rp_parse(line, &m, err, sizeof(err))) {
			snprintf(why, why_cap, "a HELLO with %s", err);
			return -1;
		}
		if (m.verb == RP_END)
			break;
		if (m.verb != RP_T || i >= h->v[HF_tensors]) {
			snprintf(why, why_cap, "a HELLO with %s where %s was due",
				 rp_verb_name(m.verb), i < h->v[HF_tensors] ? "T" : "END");
			return -1;
		}
		h->key[i] = m.t.key;
		h->count[i] = m.t.count;
		h->prio[i] = m.t.prio;
		h->dtype[i++] = m.t.dtype;
	}
	if (i != h->v[HF_tensors]) {
		snprintf(why, why_cap, "%u tensor lines for tensors=%" PRIu64, i, h->v[HF_tensors]);
		return -1;
	}
	return 0;
}

static void hello_free(struct hello *h)
{
	free(h->key);
	free(h->count);
	free(h->dtype);
	free(h->prio);
	h->key = h->count = NULL;
	h->dtype = NULL;
	h->prio = NULL;
}

static void field_str(int f, uint64_t v, char *buf, size_t cap)
{
	if (f == HF_layout)
		snprintf(buf, cap, "%s", lay_mode_name((enum lay_mode)v));
	else if (f == HF_compression && (v & 0x7fffffffu))
		snprintf(buf, cap, "%s at %u ppm%s", comp_scheme_name((enum comp_scheme)(v >> 32)),
			 (uint32_t)v & 0x7fffffffu, v >> 31 & 1 ? ", summed by all-gather" : "");
	else if (f == HF_compression)
		snprintf(buf, cap, "%s%s", comp_scheme_name((enum comp_scheme)(v >> 32)),
			 v >> 31 & 1 ? ", summed by all-gather" : "");
	else if (f == HF_deterministic || f == HF_leader_order)
		snprintf(buf, cap, "%s", v ? "on" : "off");
	else if (f == HF_token || f == HF_peers)
		snprintf(buf, cap, "%#" PRIx64, v);
	else
		snprintf(buf, cap, "%" PRIu64, v);
}

/* Rank 0: how @h differs from our own, in words; 0 when it does not. */
static int compare(const struct pbox *px, const struct hello *h, char *msg, size_t cap)
{
	struct hello me;
	char a[64], b[64];
	uint32_t i;

	own_hello(px, &me);
	for (int f = 0; f < HF_COUNT; f++) {
		if (f == HF_tensors || h->v[f] == me.v[f])
			continue;
		field_str(f, h->v[f], a, sizeof(a));
		field_str(f, me.v[f], b, sizeof(b));
		snprintf(msg, cap,
			 "rank %u and rank 0 disagree on %s: %s (rank %u) vs %s (rank 0)%s",
			 h->rank, hf_name[f], a, h->rank, b,
			 f == HF_peers ? ": the [peers] lists differ" : "");
		return 1;
	}
	for (i = 0; i < px->n_t && i < h->v[HF_tensors]; i++) {
		const struct wk_tensor *t = px->t[i];

		if (h->key[i] != t->key) {
			bool theirs = h->key[i] < t->key; /* the smaller key is missing */

			snprintf(msg, cap,
				 "rank %u and rank 0 disagree on the tensors: key %" PRIu64
				 " is declared by rank %u only",
				 h->rank, theirs ? h->key[i] : t->key, theirs ? h->rank : 0);
			return 1;
		}
		if (h->count[i] != t->count || h->dtype[i] != t->dtype) {
			snprintf(msg, cap,
				 "rank %u and rank 0 disagree on tensor key %" PRIu64 ": %" PRIu64
				 " of %s (rank %u) vs %" PRIu64 " of %s (rank 0)",
				 h->rank, h->key[i], h->count[i],
				 sum_dtype_name((enum sum_dtype)h->dtype[i]), h->rank, t->count,
				 sum_dtype_name((enum sum_dtype)t->dtype));
			return 1;
		}
		if (h->prio[i] != t->prio) { /* the no-deadlock argument assumes one order */
			snprintf(msg, cap,
				 "rank %u and rank 0 disagree on tensor key %" PRIu64
				 ": priority %d (rank %u) vs %d (rank 0); every rank must send "
				 "tensors in one order",
				 h->rank, h->key[i], h->prio[i], h->rank, t->prio);
			return 1;
		}
	}
	if (h->v[HF_tensors] != px->n_t) {
		snprintf(msg, cap,
			 "rank %u and rank 0 disagree on the number of tensors: %" PRIu64
			 " (rank %u) vs %u (rank 0)",
			 h->rank, h->v[HF_tensors], h->rank, px->n_t);
		return 1;
	}
	return 0;
}

/* ---- both sides --------------------------------------------------------- */

static int own_frag(const struct pbox *px)
{
	return (int)nic_frag_for_mtu(px->cfg.data.mtu, px->cfg.tuning.chunk_size);
}

static int udp_open(struct pbox *px)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(px->cfg.data.port)};
	int sz = 16 << 20;

	sa.sin_addr.s_addr = px->cfg.data.address.be;
	px->net.udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (px->net.udp < 0 || bind(px->net.udp, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		char ip[INET_ADDRSTRLEN];

		return wk_err(PBOX_ENET,
			      "pbox_start: cannot bind UDP %s:%u ([data] address, port): %s",
			      wk_ipstr(sa.sin_addr.s_addr, ip), px->cfg.data.port, strerror(errno));
	}
	/* as large as allowed: FORCE works as root, the plain call otherwise */
	if (setsockopt(px->net.udp, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(px->net.udp, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (setsockopt(px->net.udp, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(px->net.udp, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	/* GRO: the kernel may hand us runs of datagrams from one sender in one
	 * buffer; a kernel without it leaves them single (GSO is tried on the
	 * first send, see engine.c) */
	px->net.gro = false;
	if (px->cfg.transport.gso) {
		int one = 1;

		px->net.gro = setsockopt(px->net.udp, SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0;
	}
	return PBOX_OK;
}

static int alloc_peers(struct pbox *px)
{
	px->net.peer_fd = malloc(px->net.n * sizeof(int));
	px->net.peer_buf = calloc(px->net.n, sizeof(char *));
	px->net.peer_len = calloc(px->net.n, sizeof(uint32_t));
	px->net.peer_bye = calloc(px->net.n, sizeof(bool));
	px->net.peer_heard = calloc(px->net.n, sizeof(uint64_t));
	px->net.gone = calloc(px->net.n, sizeof(bool));
	if (!px->net.peer_fd || !px->net.peer_buf || !px->net.peer_len || !px->net.peer_bye ||
	    !px->net.peer_heard || !px->net.gone)
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	for (uint32_t r = 0; r < px->net.n; r++)
		px->net.peer_fd[r] = -1;
	return PBOX_OK;
}

/* Rank 0's nonce for this incarnation: the kernel's randomness, or (should
 * getrandom fail) the clock and the pid, which still differ between runs. */
static uint64_t draw_nonce(void)
{
	uint64_t v;

	do
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
			v = wk_now() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32;
	while (v >= UINT64_MAX - 1); /* token_check()'s and hello_key()'s */
	return v;
}

/* A whole HELLO (@m) on @fd into its rank's place: 0; 1 when it disagrees
 * with ours (@why, the job's verdict; the rank is in its place to hear it);
 * -1 when it is refused (@why, told to its sender, which is closed by the
 * caller): not a HELLO, no such rank, one already here, or another job's
 * token (its sender learns nothing of ours). */
static int take_hello(struct pbox *px, int fd, const char *m, const uint8_t *nonce, char *why,
		      size_t cap)
{
	char first[RP_LINE_MAX];
	uint8_t k[WK_PROOF_KEY];
	struct hello h, me;
	const char *rest;
	int rc = 0, proved;

	own_hello(px, &me);
	snprintf(first, sizeof(first), "%.*s", (int)strcspn(m, "\r\n"), m);
	hello_key(px, k);
	proved = wk_proof_cut(k, nonce, first);
	sodium_memzero(k, sizeof(k));
	rest = m + strcspn(m, "\n");
	if (parse_hello(first, rest + (*rest == '\n'), &h, why, cap)) {
		char what[WK_ERR_LEN / 2];

		snprintf(what, sizeof(what), "%.200s", why);
		snprintf(why, cap, "a connection sent %.200s", what);
		hello_free(&h);
		return -1;
	}
	if (h.rank == 0 || h.rank >= px->net.n || px->net.peer_fd[h.rank] >= 0) {
		snprintf(why, cap, "rank %u connected to rank 0 %s (world_size %u at rank 0)",
			 h.rank,
			 h.rank && h.rank < px->net.n ? "twice (the first holds)"
						      : "but no such rank exists",
			 px->net.n);
		wk_verdict_send(fd, PBOX_EMISMATCH, NULL, 0, why);
		rc = -1;
	} else if (h.v[HF_token] != me.v[HF_token]) {
		snprintf(why, cap,
			 "rank %u and rank 0 disagree on the job's token ([job] token): a HELLO "
			 "from another job",
			 h.rank);
		wk_verdict_send(fd, PBOX_EMISMATCH, NULL, 0, why);
		rc = -1;
	} else if (proved != 1) {
		snprintf(why, cap, "a HELLO as rank %u %s: forged or replayed, not the rank's own",
			 h.rank,
			 proved ? "carries no proof of the token"
				: "does not prove the job's token");
		wk_verdict_send(fd, PBOX_EMISMATCH, NULL, 0, why);
		rc = -1;
	} else {
		px->net.peer_fd[h.rank] = fd;
		rc = compare(px, &h, why, cap);
	}
	hello_free(&h);
	return rc;
}

/*
 * Rank 0's door: every other rank's HELLO, gathered from all connections at
 * once (one that says nothing holds nobody up), compared with ours as it
 * comes; after a mismatch still every rank, so that all of them hear why. A
 * HELLO that cannot be a rank's of this job (no such rank, one already
 * here, another job's token) is refused to its sender and logged (the
 * first in @refused), and the true rank is waited for up to the deadline.
 * PBOX_OK or PBOX_EMISMATCH (@msg) with @got ranks in; another code (set
 * by wk_err()) when the door did not open.
 */
static int door_hellos(struct pbox *px, uint64_t deadline, uint32_t *got, char *msg, size_t cap,
		       char *refused, size_t refused_cap)
{
	int lfd = wk_tcp_listen(px->cfg.data.address.be, (uint16_t)px->cfg.data.port), rc = PBOX_OK;
	struct wk_gather *door;

	if (lfd < 0) {
		char ip[INET_ADDRSTRLEN];

		return wk_err(PBOX_ENET, "pbox_start: rank 0 cannot listen on TCP %s:%u: %s",
			      wk_ipstr(px->cfg.data.address.be, ip), px->cfg.data.port,
			      strerror(errno));
	}
	door = wk_gather_open(lfd, LINE_CAP * ((size_t)px->n_t + 2) + 65536, hello_whole, NULL);
	if (!door) {
		close(lfd);
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	}
	while (*got + 1 < px->net.n) {
		char why[WK_ERR_LEN / 2];
		const char *m;
		size_t len;
		uint8_t greeting[WK_GATHER_NONCE];
		int fd, t = wk_gather_next(door, deadline, &fd, &m, &len, greeting, why,
					   sizeof(why));

		if (t == 0)
			break;
		if (t < 0) {
			wk_log(px, CFG_LOG_WARNING, "bootstrap: %s; ignored", why);
			continue;
		}
		t = take_hello(px, fd, m, greeting, why, sizeof(why));
		if (t < 0) {
			wk_log(px, CFG_LOG_WARNING, "bootstrap: %s; refused", why);
			close(fd);
			if (!refused[0])
				snprintf(refused, refused_cap, "%s", why);
			continue;
		}
		++*got;
		if (t > 0 && !msg[0]) {
			rc = PBOX_EMISMATCH;
			snprintf(msg, cap, "%s", why);
		}
	}
	/* Closed before any verdict goes out: a rank that hears ERR may call
	 * pbox_shrink() again at once, and its connection must not land in this
	 * incarnation's backlog, to be reset when we close it, while the next
	 * incarnation waits for it (one more rank "never reached rank 0"). */
	wk_gather_close(door);
	close(lfd);
	return rc;
}

/* The ranks that never reached rank 0, flagged in @missing and px->net.gone
 * (a second pbox_shrink() goes on without them), named in @msg. */
static int name_missing(struct pbox *px, uint32_t got, bool *missing, const char *refused,
			char *msg, size_t cap)
{
	size_t off = (size_t)snprintf(msg, cap, "rank%s", px->net.n - 1 - got > 1 ? "s" : "");
	char ip[INET_ADDRSTRLEN];

	for (uint32_t r = 1; r < px->net.n; r++) {
		if (px->net.peer_fd[r] >= 0)
			continue;
		px->net.gone[r] = true;
		missing[r] = true;
		if (off < cap - 64)
			off += (size_t)snprintf(msg + off, cap - off, " %u", r);
	}
	snprintf(msg + off, cap - off,
		 " never reached rank 0 at %s:%u within %.1f s ([tuning] deadline)%s%s%s",
		 wk_ipstr(px->cfg.data.address.be, ip), px->cfg.data.port,
		 (double)px->cfg.tuning.deadline_us / 1e6, refused[0] ? " (refused: " : "", refused,
		 refused[0] ? ")" : "");
	return PBOX_ETIMEDOUT;
}

/* The boxes' endpoints into @eps, and the fragment size they allow into
 * @frag: PBOX_OK, or a code with @msg. */
static int box_geometry(struct pbox *px, struct wk_box_eps *eps, uint32_t *frag, uint64_t deadline,
			char *msg, size_t cap)
{
	if (!px->cfg.box.control.n)
		return PBOX_OK;
	if (wk_boxes_endpoints(px, eps, deadline, msg, cap))
		return PBOX_EBOX;
	if (eps->n && eps->chunk != px->cfg.tuning.chunk_size) {
		snprintf(msg, cap,
			 "the box's chunk size is %u, [tuning] chunk_size is %" PRIu64
			 ": they must match",
			 eps->chunk, px->cfg.tuning.chunk_size);
		return PBOX_EMISMATCH;
	}
	if (eps->n && eps->frag < *frag)
		*frag = eps->frag;
	return PBOX_OK;
}

/* Rank 0's verdict to every rank in: ERR @rc @msg, or GO and the box's
 * endpoints. */
static void send_verdicts(struct pbox *px, int rc, const char *msg, const bool *missing,
			  const struct wk_box_eps *eps, uint32_t frag, uint64_t nonce)
{
	for (uint32_t r = 1; r < px->net.n; r++) {
		if (px->net.peer_fd[r] < 0)
			continue;
		if (msg[0]) {
			wk_verdict_send(px->net.peer_fd[r], rc, missing, px->net.n, msg);
			continue;
		}
		RP_SEND(px->net.peer_fd[r], GO, go, .frag = frag, .eps = eps->n, .nonce = nonce,
			.txref = eps->txref);
		for (uint32_t e = 0; e < eps->n; e++)
			RP_SEND(px->net.peer_fd[r], EP, ep, .ip = eps->ip[e], .port = eps->port[e],
				.kbps = eps->kbps[e], .room = eps->room[e]);
		rp_send_verb(px->net.peer_fd[r], RP_END);
	}
}

/* Rank 0's side. */
static int boot_root(struct pbox *px, uint64_t deadline)
{
	struct wk_box_eps *eps = calloc(1, sizeof(*eps));
	bool *missing = calloc(px->net.n, sizeof(bool)); /* ranks that never reached us */
	char msg[WK_ERR_LEN] = "", refused[WK_ERR_LEN / 2] = "";
	uint32_t got = 0, frag = (uint32_t)own_frag(px);
	uint64_t nonce = 0;
	int rc;

	if (!eps || !missing) {
		free(eps);
		free(missing);
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	}
	rc = door_hellos(px, deadline, &got, msg, sizeof(msg), refused, sizeof(refused));
	if (rc != PBOX_OK && rc != PBOX_EMISMATCH)
		goto out;
	if (!msg[0] && got + 1 < px->net.n)
		rc = name_missing(px, got, missing, refused, msg, sizeof(msg));
	if (!msg[0])
		rc = box_geometry(px, eps, &frag, deadline, msg, sizeof(msg));
	if (!msg[0]) {
		nonce = draw_nonce();
		wk_set_key(px, nonce);
		rc = wk_layout_init(px, frag, eps);
		if (rc)
			snprintf(msg, sizeof(msg), "%s", pbox_last_error());
		else
			rc = wk_grow(px, px->t, px->n_t, NULL, deadline, msg, sizeof(msg));
	}
	send_verdicts(px, rc, msg, missing, eps, frag, nonce);
	if (msg[0])
		rc = wk_err(rc, "pbox_start: %s", msg);
out:
	free(missing);
	free(eps);
	return rc;
}

/* Rank 0 closed the bootstrap connection before its verdict: its door
 * drops a connection whose HELLO is not whole within WK_GATHER_NS (a
 * lossy link's retransmissions can take that long), so the rank connects
 * again. */
#define BOOT_CLOSED 1

/* Rank 0's verdict on @fd (its bytes so far in @buf, @*len of them): GO
 * and the box's endpoints into @eps, @frag and @nonce: PBOX_OK; or rank
 * 0's ERR, its code the same on every rank and the ranks it names gone
 * for a second shrink; BOOT_CLOSED; or what went wrong (set by wk_err()). */
static int read_verdict(struct pbox *px, int fd, char *buf, uint32_t *len, const char *name,
			uint64_t deadline, struct wk_box_eps *eps, uint32_t *frag, uint64_t *nonce)
{
	char line[RP_LINE_MAX], err[160] = "";
	struct rp_msg m;
	int rc;

	/* rank 0 gives its verdict at the deadline at the latest: wait a little longer */
	rc = wk_line_wait(fd, buf, len, WK_LINEBUF, line, sizeof(line),
			  deadline + 1000000000ull + px->cfg.tuning.deadline_us * 100);
	if (rc < 0)
		return BOOT_CLOSED;
	if (rc == 0)
		return wk_err(PBOX_ETIMEDOUT,
			      "pbox_start: no word from %s within [tuning] deadline", name);
	if (rp_parse(line, &m, err, sizeof(err)) == 0 && m.verb == RP_ERR)
		return wk_err(wk_verdict_of(&m.err, px->net.gone, px->net.n), "pbox_start: %s",
			      m.err.why);
	if (m.verb != RP_GO || m.go.eps > WK_MAX_EPS)
		return wk_err(PBOX_EPEER, "pbox_start: %s sent %s", name,
			      err[0] ? err : rp_verb_name(m.verb));
	*frag = m.go.frag;
	*nonce = m.go.nonce;
	eps->txref = m.go.txref;
	for (uint32_t n = m.go.eps; eps->n < n;) {
		if (wk_line_wait(fd, buf, len, WK_LINEBUF, line, sizeof(line), deadline) != 1 ||
		    rp_expect(line, RP_EP, &m, err, sizeof(err)))
			return wk_err(PBOX_EPEER, "pbox_start: %s sent a bad endpoint list (%s)",
				      name, err[0] ? err : "cut short");
		eps->ip[eps->n] = m.ep.ip;
		eps->port[eps->n] = m.ep.port;
		eps->room[eps->n] = m.ep.room;
		eps->kbps[eps->n++] = m.ep.kbps;
	}
	if (wk_line_wait(fd, buf, len, WK_LINEBUF, line, sizeof(line), deadline) != 1 ||
	    rp_expect(line, RP_END, &m, err, sizeof(err)))
		return wk_err(PBOX_EPEER, "pbox_start: %s cut the endpoint list short", name);
	if (*frag < 64 || *frag > px->cfg.tuning.chunk_size || (*frag & (*frag - 1)))
		return wk_err(PBOX_EPEER, "pbox_start: %s sent fragment size %u", name, *frag);
	return PBOX_OK;
}

/* One try at rank 0's door: connect, its NONCE, our HELLO, its verdict
 * (into @buf, @eps, @frag, @nonce). PBOX_OK, BOOT_CLOSED, or a failure. */
static int hello_rank0(struct pbox *px, uint64_t deadline, const char *name, char *buf,
		       uint32_t *len, struct wk_box_eps *eps, uint32_t *frag, uint64_t *nonce)
{
	const struct cfg_hostport *root = &px->cfg.peers[0];
	uint8_t rank0_nonce[WK_GATHER_NONCE];
	int fd, rc;

	/* rank 0 is not listening yet: soon, after a pbox_rejoin() or
	 * pbox_forget() (1 ms, doubling to 20) */
	for (useconds_t nap = 1000;
	     (fd = wk_tcp_to(root->ip_be, root->port)) < 0 && wk_now() < deadline;
	     nap = nap < 20000 ? nap * 2 : 20000)
		usleep(nap);
	if (fd < 0) {
		px->net.gone[0] = true; /* a second pbox_shrink() goes on without it */
		return wk_err(PBOX_ETIMEDOUT,
			      "pbox_start: cannot reach %s within %.1f s ([tuning] deadline): %s",
			      name, (double)px->cfg.tuning.deadline_us / 1e6, strerror(errno));
	}
	px->net.peer_fd[0] = fd;
	*len = 0;
	eps->n = 0;
	rc = wk_nonce_wait(fd, buf, len, WK_LINEBUF, rank0_nonce, deadline);
	if (rc == -1)
		return BOOT_CLOSED;
	if (rc != 1)
		return wk_err(rc ? PBOX_EPEER : PBOX_ETIMEDOUT, "pbox_start: %s %s", name,
			      rc ? "did not greet the bootstrap connection with a NONCE (not rank "
				   "0, or another libpbox)"
				 : "sent no NONCE within [tuning] deadline");
	if (send_hello(px, fd, rank0_nonce))
		return BOOT_CLOSED;
	return read_verdict(px, fd, buf, len, name, deadline, eps, frag, nonce);
}

/* Every other rank's side. */
static int boot_rank(struct pbox *px, uint64_t deadline)
{
	struct wk_box_eps *eps = calloc(1, sizeof(*eps));
	char buf[WK_LINEBUF], name[96];
	uint32_t len = 0, frag = 0;
	uint64_t nonce = 0;
	int rc;

	if (!eps)
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	wk_peer_name(px, 0, name, sizeof(name));
	while ((rc = hello_rank0(px, deadline, name, buf, &len, eps, &frag, &nonce)) ==
	       BOOT_CLOSED) {
		close(px->net.peer_fd[0]);
		px->net.peer_fd[0] = -1;
		if (wk_now() >= deadline) {
			rc = wk_err(PBOX_EPEER,
				    "pbox_start: %s closed the bootstrap connection before its "
				    "verdict, again until [tuning] deadline",
				    name);
			goto out;
		}
		wk_log(px, CFG_LOG_WARNING,
		       "bootstrap: %s closed our connection before its verdict (our HELLO was "
		       "not whole in time: a slow or lossy link?); connecting again",
		       name);
		usleep(100000);
	}
	if (rc)
		goto out;
	wk_set_key(px, nonce);
	rc = wk_layout_init(px, frag, eps);
	if (rc == PBOX_OK) {
		char msg[WK_ERR_LEN];

		rc = wk_grow(px, px->t, px->n_t, NULL, deadline, msg, sizeof(msg));
		if (rc)
			rc = wk_err(rc, "pbox_start: %s", msg);
	}
	if (rc == PBOX_OK && len <= WK_LINEBUF) { /* anything after END is the engine's */
		memcpy(px->net.peer_buf[0], buf, len);
		px->net.peer_len[0] = len;
	}
out:
	free(eps);
	return rc;
}

static int transport_open(struct pbox *px)
{
	wk_tp_open_fn *open_dpdk;

	if (px->cfg.transport.kind != WRK_TRANSPORT_DPDK) {
		px->net.tp = &wk_udp_transport;
		px->net.tp_st = px;
		return udp_open(px);
	}
	open_dpdk = (wk_tp_open_fn *)wk_module_sym("pbox_start", "dpdk", WK_DPDK_ENTRY);
	if (!open_dpdk)
		return PBOX_ECONFIG;
	wk_tp_env_init(px, &px->net.tp_env);
	return open_dpdk(&px->net.tp_env, &px->net.tp, &px->net.tp_st);
}

int wk_boot(struct pbox *px)
{
	uint64_t deadline = wk_now() + px->cfg.tuning.deadline_us * 1000;
	int rc;

	if (own_frag(px) < 256)
		return wk_err(PBOX_ECONFIG,
			      "pbox_start: [data] mtu %u leaves no room for a fragment",
			      px->cfg.data.mtu);
	rc = alloc_peers(px);
	if (rc == PBOX_OK) /* chosen once: the engine never asks again */
		rc = transport_open(px);
	for (uint32_t r = 0; rc == PBOX_OK && r < px->net.n; r++)
		if (!(px->net.peer_buf[r] = malloc(WK_LINEBUF)))
			rc = wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	if (rc)
		return rc;
	if (px->net.n == 1) {
		char msg[WK_ERR_LEN];

		rc = wk_layout_init(px, (uint32_t)own_frag(px), NULL);
		if (rc == PBOX_OK &&
		    (rc = wk_grow(px, px->t, px->n_t, NULL, deadline, msg, sizeof(msg))))
			rc = wk_err(rc, "pbox_start: %s", msg);
		return rc;
	}
	rc = px->net.rank == 0 ? boot_root(px, deadline) : boot_rank(px, deadline);
	for (uint32_t r = 0; rc == PBOX_OK && r < px->net.n; r++)
		if (px->net.peer_fd[r] >= 0)
			fcntl(px->net.peer_fd[r], F_SETFL,
			      fcntl(px->net.peer_fd[r], F_GETFL) | O_NONBLOCK);
	return rc;
}

/* Everything of one incarnation of the job: its connections, transport,
 * layout and engine state (the engine stopped); the tensors stay. */
void wk_free_net(struct pbox *px)
{
	uint32_t u, i;

	for (i = 0; px->net.peer_fd && i < px->net.n; i++)
		if (px->net.peer_fd[i] >= 0)
			close(px->net.peer_fd[i]);
	for (i = 0; px->net.peer_buf && i < px->net.n; i++)
		free(px->net.peer_buf[i]);
	wk_boxes_close(px, false);
	if (px->net.udp >= 0)
		close(px->net.udp);
	if (px->net.tp && px->net.tp->close)
		px->net.tp->close(px->net.tp_st);
	px->net.tp_st = NULL;
	if (px->net.efd >= 0)
		close(px->net.efd);
	for (u = 0; px->net.unit && u < px->net.n_units; u++) {
		free(px->net.unit[u].global);
		free(px->net.unit[u].sent.g);
		free(px->net.unit[u].sent.stamp);
	}
	for (i = 0; i < WK_LEVELS; i++) {
		free(px->net.es.ring[i].g);
		free(px->net.es.ring[i].stamp);
	}
	free(px->net.es.local.g);
	free(px->net.es.local.stamp);
	free(px->net.peer_fd);
	free(px->net.peer_buf);
	free(px->net.peer_len);
	free(px->net.peer_bye);
	free(px->net.peer_heard);
	free(px->net.gone);
	px->net.gone = NULL;
	free(px->net.unit);
	free(px->net.chunk_unit);
	free(px->net.chunk_local);
	free(px->net.chunk_mode);
	free(px->net.es.frag);
	free(px->net.es.comp_scratch);
	px->net.es.comp_scratch = NULL;
	while (px->net.es.ssj) {
		struct ss_job *next = px->net.es.ssj->next;

		free(px->net.es.ssj);
		px->net.es.ssj = next;
	}
	free(px->net.es.heap);
	free(px->net.es.ord);
	free(px->net.es.annq);
	free(px->net.es.turns);
	free(px->net.es.hash_unit);
	free(px->net.ss_pub);
	free(px->net.newt);
	free(px->net.ag);
	free(px->net.es.eng);
	free(px->net.es.nap_fds);
	px->net.es.nap_fds = NULL;
	free(px->net.es.grow_ts);
	px->net.es.grow_ts = NULL;
	wk_serve_early_free(px);
}
