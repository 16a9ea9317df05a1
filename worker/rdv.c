/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rendezvous (pbox_start's first phase, with [rendezvous] address): the
 * ranks meet at host:port, where rank 0 listens, instead of each reading a
 * static [peers] list and a [job] id and token from its configuration.
 *
 *   rank r -> rank 0   (TCP, the rendezvous address; retried until rank 0
 *                       listens, up to [tuning] deadline)
 *   rank 0 -> rank r   at once
 *       NONCE <hex>                16 random bytes for this connection
 *   rank r -> rank 0
 *       JOIN rank=R world_size=N ep=IP:PORT pk=HEX [proof=HEX]
 *   rank 0 -> rank r   once every rank has joined
 *       ERR <message>              a world size that differs, a rank twice
 *     or
 *       JOINED job=J token=HEX
 *       EP <rank> <ip> <port>      N lines: every rank's SS_GPU endpoint
 *       END
 *
 * A rank's endpoint is its [data] address and port: unset, the local
 * address of the route to the rendezvous host and a port free for UDP and
 * TCP alike (rank 0 listens on TCP there for the bootstrap, boot.c).
 *
 * Rank 0 draws the job id and its secret token. The token goes to each rank
 * sealed (libsodium's crypto_box_seal) to an X25519 key that rank drew for
 * this JOIN (pk), so that reading the rendezvous traffic does not give it
 * away. With [rendezvous] secret (PBOX_RENDEZVOUS_SECRET), every JOIN
 * proves it (proof=:
 * an HMAC of the line and rank 0's NONCE, wk_link.h's wk_proof_*): a JOIN
 * without it, or captured and replayed, is refused and logged, and the
 * true rank still gets in, so nobody without the secret takes a rank or
 * stops the job. Without a secret nothing authenticates the rendezvous:
 * whoever reaches it first as rank R is rank R, as with torch's own store.
 * A conflicting JOIN (another world size, a rank twice) is refused to its
 * sender either way, never fatal to the job.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
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

#include "gather.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_link.h"
#include "wk_rdv.h"

#define RDV_LINE   384
#define SEALED_LEN (crypto_box_SEALBYTES + sizeof(uint64_t))

/* The local address of the route to @dst_be (no packet is sent). */
static int route_src(uint32_t dst_be, uint32_t *src_be)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(9)}, me;
	socklen_t len = sizeof(me);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), rc = -1;

	sa.sin_addr.s_addr = dst_be;
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&me, &len) == 0) {
		*src_be = me.sin_addr.s_addr;
		rc = 0;
	}
	if (fd >= 0)
		close(fd);
	return rc;
}

/* A port on @ip_be free for UDP and for TCP, or 0. */
static uint16_t free_port(uint32_t ip_be)
{
	for (int tries = 0; tries < 64; tries++) {
		struct sockaddr_in sa = {.sin_family = AF_INET};
		socklen_t len = sizeof(sa);
		int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		uint16_t port = 0;

		sa.sin_addr.s_addr = ip_be;
		if (u < 0)
			return 0;
		if (bind(u, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
		    getsockname(u, (struct sockaddr *)&sa, &len) == 0) {
			int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

			if (t >= 0 && bind(t, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				port = ntohs(sa.sin_port);
			if (t >= 0)
				close(t);
		}
		close(u);
		if (port)
			return port;
	}
	return 0;
}

/* @n bytes as 2n hex digits and a NUL into @out; and back: exactly 2n hex
 * digits, the whole of the word @s. */
static void hex(const uint8_t *b, size_t n, char *out)
{
	sodium_bin2hex(out, 2 * n + 1, b, n);
}

static int unhex(const char *s, uint8_t *b, size_t n)
{
	size_t got = 0;

	return strlen(s) == 2 * n && !sodium_hex2bin(b, n, s, 2 * n, NULL, &got, NULL) && got == n
		       ? 0
		       : -1;
}

/* This rank's endpoint: [data] address and port, or found. */
static int own_endpoint(struct pbox *px)
{
	struct wrk_cfg *c = &px->cfg;
	char ip[INET_ADDRSTRLEN];

	if (!c->data.address.be && route_src(c->rendezvous.address.ip_be, &c->data.address.be))
		return wk_err(PBOX_ENET, "pbox_start: no route to the rendezvous host %s: %s",
			      wk_ipstr(c->rendezvous.address.ip_be, ip), strerror(errno));
	if (!c->data.port && !(c->data.port = free_port(c->data.address.be)))
		return wk_err(PBOX_ENET, "pbox_start: no free port on %s for the data",
			      wk_ipstr(c->data.address.be, ip));
	return PBOX_OK;
}

/* The job's id and token, and the key that signs its datagrams. */
static void set_job(struct pbox *px, uint32_t job, uint64_t token)
{
	px->cfg.job.id = job;
	px->cfg.job.token = token;
	px->net.job = job;
	wk_set_key(px, 0);
}

/* A fresh job id (31 bits, not 0) and token (not 0): never configured. */
static int draw_job(uint32_t *job, uint64_t *token)
{
	*job = 0;
	*token = 0;
	while (!*job || !*token) {
		if (getrandom(job, sizeof(*job), 0) != sizeof(*job) ||
		    getrandom(token, sizeof(*token), 0) != sizeof(*token))
			return -1;
		*job &= 0x7fffffff;
	}
	return 0;
}

void wk_secret_key(const char *secret, uint8_t *k)
{
	static const char label[] = "pbox rendezvous secret v1";
	crypto_generichash_state st;

	crypto_generichash_init(&st, NULL, 0, WK_PROOF_KEY);
	crypto_generichash_update(&st, (const uint8_t *)label, sizeof(label));
	crypto_generichash_update(&st, (const uint8_t *)secret, strlen(secret));
	crypto_generichash_final(&st, k, WK_PROOF_KEY);
}

/* The key JOINs are proved with: 0, or -1 when there is no secret. */
static int secret_key(const struct pbox *px, uint8_t k[WK_PROOF_KEY])
{
	if (!px->cfg.rendezvous.secret[0])
		return -1;
	wk_secret_key(px->cfg.rendezvous.secret, k);
	return 0;
}

struct joiner {
	int fd;
	uint8_t pk[crypto_box_PUBLICKEYBYTES];
};

/* A JOIN is one line. */
static size_t one_line(const char *buf, size_t len, void *arg)
{
	const char *nl = memchr(buf, '\n', len);

	(void)arg;
	return nl ? (size_t)(nl - buf) + 1 : 0;
}

/* @line's JOIN into its rank's place: the rank (1 to n - 1); or 0 when it
 * is refused (@why for its sender and the log), -1 when it is no JOIN
 * (dropped unanswered). */
static int take_join(struct pbox *px, struct joiner *j, char *line, const uint8_t *nonce, char *why,
		     size_t cap)
{
	char err[160];
	uint8_t k[WK_PROOF_KEY];
	struct cfg_hostport ep;
	uint32_t rank, world;
	struct rp_msg m;
	const char *unproved = NULL; /* why the JOIN does not prove our secret */
	bool stray_proof = false;    /* it proves one, and we have none */

	if (secret_key(px, k) == 0) {
		int proved = wk_proof_cut(k, nonce, line);

		sodium_memzero(k, sizeof(k));
		if (proved != 1)
			unproved = proved ? "carries no proof of the job secret"
					  : "does not prove the job secret";
	} else {
		stray_proof = strstr(line, " proof=") != NULL;
	}
	if (rp_expect(line, RP_JOIN, &m, err, sizeof(err)) ||
	    strlen(m.join.pk) != 2 * crypto_box_PUBLICKEYBYTES)
		return -1;
	rank = m.join.rank;
	world = m.join.world_size;
	ep = (struct cfg_hostport){.ip_be = m.join.ep.ip_be, .port = m.join.ep.port};
	if (unproved)
		snprintf(why, cap,
			 "a JOIN as rank %u %s ([rendezvous] secret): forged or replayed, not the "
			 "rank's own",
			 rank, unproved);
	else if (stray_proof)
		snprintf(why, cap,
			 "rank %u joined with a proof of a secret, but rank 0 has no [rendezvous] "
			 "secret: set it on every rank or none",
			 rank);
	else if (world != px->net.n)
		snprintf(why, cap,
			 "rank %u joined the rendezvous with world_size %u, rank 0 has %u", rank,
			 world, px->net.n);
	else if (rank == 0 || rank >= px->net.n)
		snprintf(why, cap, "rank %u joined the rendezvous but no such rank exists", rank);
	else if (j[rank].fd >= 0)
		snprintf(why, cap, "rank %u joined the rendezvous twice (the first JOIN holds)",
			 rank);
	else if (unhex(m.join.pk, j[rank].pk, crypto_box_PUBLICKEYBYTES))
		return -1;
	else {
		px->cfg.peers[rank] = ep;
		return (int)rank;
	}
	return 0;
}

/* Rank 0's door: every JOIN into @j, each on its own connection, all
 * gathered at once: one that says nothing holds nobody up. A JOIN that
 * conflicts (another world size, a rank out of range or taken) is refused
 * to its sender and logged (the first in @refused), and the rest wait on
 * for the true rank up to the deadline. PBOX_OK with the ranks in (rank 0 counted) in @got, or a
 * code (wk_err() says why) when the door did not open. */
static int door_joins(struct pbox *px, struct joiner *j, uint64_t deadline, uint32_t *got,
		      char *refused, size_t refused_cap)
{
	const struct cfg_hostport *at = &px->cfg.rendezvous.address;
	int lfd = wk_tcp_listen(at->ip_be, at->port);
	struct wk_gather *door;

	*got = 1;
	if (lfd < 0) {
		char ip[INET_ADDRSTRLEN];

		return wk_err(PBOX_ENET,
			      "pbox_start: rank 0 cannot listen on the rendezvous %s:%u (%s): "
			      "rank 0 runs where [rendezvous] address points",
			      wk_ipstr(at->ip_be, ip), at->port, strerror(errno));
	}
	door = wk_gather_open(lfd, RDV_LINE, one_line, NULL);
	if (!door) {
		close(lfd);
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	}
	while (*got < px->net.n) {
		char line[RDV_LINE], why[192];
		const char *msg;
		size_t len;
		uint8_t nonce[WK_GATHER_NONCE];
		int fd, r = wk_gather_next(door, deadline, &fd, &msg, &len, nonce, why,
					   sizeof(why));

		if (r == 0)
			break;
		if (r < 0) {
			wk_log(px, CFG_LOG_WARNING, "rendezvous: %s; ignored", why);
			continue;
		}
		snprintf(line, sizeof(line), "%.*s", (int)strcspn(msg, "\r\n"), msg);
		r = take_join(px, j, line, nonce, why, sizeof(why));
		if (r < 0) {
			wk_log(px, CFG_LOG_WARNING,
			       "rendezvous: a connection sent no JOIN; ignored");
			close(fd);
		} else if (r == 0) {
			wk_log(px, CFG_LOG_WARNING, "rendezvous: %s: refused", why);
			wk_verdict_send(fd, PBOX_EMISMATCH, NULL, 0, why);
			close(fd);
			if (!refused[0])
				snprintf(refused, refused_cap, "%s", why);
		} else {
			j[r].fd = fd;
			++*got;
		}
	}
	wk_gather_close(door);
	close(lfd);
	return PBOX_OK;
}

/* What keeps the job from starting once the door closed, into @err: two
 * ranks on one endpoint, or ranks that never joined (@timed_out). */
static void check_joins(const struct pbox *px, const struct joiner *j, uint32_t got,
			const char *refused, char *err, size_t cap, bool *timed_out)
{
	char ip[INET_ADDRSTRLEN];

	for (uint32_t r = 1; !err[0] && r < px->net.n; r++)
		for (uint32_t q = 0; q < r && j[r].fd >= 0; q++)
			if (px->cfg.peers[q].ip_be == px->cfg.peers[r].ip_be &&
			    px->cfg.peers[q].port == px->cfg.peers[r].port)
				snprintf(err, cap, "ranks %u and %u joined with one endpoint %s:%u",
					 q, r, wk_ipstr(px->cfg.peers[r].ip_be, ip),
					 px->cfg.peers[r].port);
	*timed_out = !err[0] && got < px->net.n;
	if (*timed_out) {
		size_t off = (size_t)snprintf(err, cap, "the rendezvous timed out: ranks");

		for (uint32_t r = 1; r < px->net.n && off < cap - 16; r++)
			if (j[r].fd < 0)
				off += (size_t)snprintf(err + off, cap - off, " %u", r);
		snprintf(err + off, cap - off, " never joined%s%s%s",
			 refused[0] ? " (refused: " : "", refused, refused[0] ? ")" : "");
	}
}

/* Every rank in: ERR @code @err, or JOINED (the token sealed to its key)
 * and every rank's endpoint. */
static void answer_joins(const struct pbox *px, const struct joiner *j, int code, const char *err,
			 uint32_t job, uint64_t token)
{
	for (uint32_t r = 1; r < px->net.n; r++) {
		uint8_t sealed[SEALED_LEN];
		char sealed_hex[2 * SEALED_LEN + 1];

		if (j[r].fd < 0)
			continue;
		if (err[0]) {
			wk_verdict_send(j[r].fd, code, NULL, 0, err);
			continue;
		}
		crypto_box_seal(sealed, (const uint8_t *)&token, sizeof(token), j[r].pk);
		hex(sealed, sizeof(sealed), sealed_hex);
		RP_SEND(j[r].fd, JOINED, joined, .job = job, .token = sealed_hex);
		for (uint32_t q = 0; q < px->net.n; q++)
			RP_SEND(j[r].fd, PEER, peer, .rank = q, .ip = px->cfg.peers[q].ip_be,
				.port = px->cfg.peers[q].port);
		rp_send_verb(j[r].fd, RP_END);
	}
}

static int rdv_root(struct pbox *px, uint64_t deadline)
{
	struct joiner *j = calloc(px->net.n, sizeof(*j));
	char err[WK_ERR_LEN] = "", refused[WK_ERR_LEN / 2] = "";
	uint32_t got, job = 0;
	uint64_t token = 0;
	int rc, code;
	bool timed_out;

	if (!j)
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	for (uint32_t r = 0; r < px->net.n; r++)
		j[r].fd = -1;
	rc = door_joins(px, j, deadline, &got, refused, sizeof(refused));
	if (rc)
		goto out;
	check_joins(px, j, got, refused, err, sizeof(err), &timed_out);
	/* a refused JOIN explains a missing rank: a mismatch */
	code = timed_out && !refused[0] ? PBOX_ETIMEDOUT : PBOX_EMISMATCH;
	if (!err[0] && draw_job(&job, &token))
		snprintf(err, sizeof(err), "no random numbers: %s", strerror(errno));
	answer_joins(px, j, code, err, job, token);
	if (err[0])
		rc = wk_err(code, "pbox_start: %s", err);
	else
		set_job(px, job, token);
out:
	for (uint32_t r = 0; r < px->net.n; r++)
		if (j[r].fd >= 0)
			close(j[r].fd);
	free(j);
	return rc;
}

/* Our JOIN to the rendezvous on @fd, proved against its @nonce when there
 * is a secret: PBOX_OK or a code (wk_err() says why). */
static int send_join(struct pbox *px, int fd, const uint8_t *nonce, const char *pk_hex)
{
	const struct rp_msg m = {
		.verb = RP_JOIN,
		.join = {.rank = px->net.rank,
			 .world_size = px->net.n,
			 .ep = {px->cfg.data.address.be, (uint16_t)px->cfg.data.port},
			 .pk = pk_hex}};
	uint8_t k[WK_PROOF_KEY];
	char line[RP_LINE_MAX];

	if (rp_format(line, sizeof(line), &m) < 0)
		return wk_err(PBOX_EINVAL, "pbox_start: no JOIN for our endpoint (port %u)",
			      px->cfg.data.port);
	if (!secret_key(px, k)) {
		wk_proof_append(k, nonce, line, sizeof(line));
		sodium_memzero(k, sizeof(k));
	}
	return rp_send_text(fd, line) ? wk_err(PBOX_ENET, "pbox_start: the rendezvous closed")
				      : PBOX_OK;
}

/* JOINED's PEER lines and END on @fd into [peers]: PBOX_OK, or a code
 * (wk_err() says why) when they are not every rank's, ours as ours. */
static int read_peers(struct pbox *px, int fd, char *buf, uint32_t *len, size_t cap,
		      uint64_t deadline)
{
	char line[RP_LINE_MAX], err[160] = "";
	uint32_t seen = 0;
	struct rp_msg m;

	for (;;) {
		if (wk_line_wait(fd, buf, len, (uint32_t)cap, line, sizeof(line), deadline) != 1)
			return wk_err(PBOX_ENET, "pbox_start: the rendezvous closed mid-answer");
		if (rp_parse(line, &m, err, sizeof(err)) == 0 && m.verb == RP_END)
			break;
		if (err[0] || m.verb != RP_PEER || m.peer.rank >= px->net.n)
			return wk_err(PBOX_ENET, "pbox_start: the rendezvous sent %s%s",
				      err[0]		  ? err
				      : m.verb != RP_PEER ? rp_verb_name(m.verb)
							  : "PEER for a rank past the world",
				      err[0] || m.verb == RP_PEER ? "" : " where PEER was due");
		px->cfg.peers[m.peer.rank] =
			(struct cfg_hostport){.ip_be = m.peer.ip, .port = m.peer.port};
		seen++;
	}
	if (seen != px->net.n || px->cfg.peers[px->net.rank].ip_be != px->cfg.data.address.be ||
	    px->cfg.peers[px->net.rank].port != px->cfg.data.port)
		return wk_err(PBOX_ENET,
			      "pbox_start: the rendezvous sent %u endpoints of %u, or "
			      "not ours as ours",
			      seen, px->net.n);
	return PBOX_OK;
}

/* The rendezvous closed our connection before its answer: its door drops
 * a connection whose JOIN is not whole within WK_GATHER_NS (a lossy link's
 * retransmissions can take that long): join again. */
#define RDV_CLOSED 1

/* Rank 0's answer on @fd: JOINED (the token opened with @pk, @sk, into
 * @token; the job into @job) and the PEER list. PBOX_OK, RDV_CLOSED, or a
 * failure (wk_err() says why). */
static int read_joined(struct pbox *px, int fd, char *buf, uint32_t *len, size_t cap,
		       const uint8_t *pk, const uint8_t *sk, uint64_t deadline, uint32_t *job,
		       uint64_t *token)
{
	const struct cfg_hostport *at = &px->cfg.rendezvous.address;
	char line[RP_LINE_MAX], err[160];
	uint8_t sealed[SEALED_LEN];
	struct rp_msg m;
	int rc = wk_line_wait(fd, buf, len, (uint32_t)cap, line, sizeof(line), deadline);

	if (rc < 0)
		return RDV_CLOSED;
	if (rc == 1 && rp_parse(line, &m, err, sizeof(err)) == 0 && m.verb == RP_ERR)
		return wk_err(wk_verdict_of(&m.err, NULL, 0), "pbox_start: the rendezvous says: %s",
			      m.err.why);
	if (rc != 1 || m.verb != RP_JOINED || strlen(m.joined.token) != 2 * SEALED_LEN ||
	    unhex(m.joined.token, sealed, sizeof(sealed)) ||
	    crypto_box_seal_open((uint8_t *)token, sealed, sizeof(sealed), pk, sk)) {
		char ip[INET_ADDRSTRLEN];

		return wk_err(rc == 0 ? PBOX_ETIMEDOUT : PBOX_ENET,
			      "pbox_start: the rendezvous at %s:%u %s", wk_ipstr(at->ip_be, ip),
			      at->port,
			      rc == 0 ? "did not answer before the deadline (are all ranks up?)"
				      : "answered with something else than JOINED");
	}
	*job = m.joined.job;
	return read_peers(px, fd, buf, len, cap, deadline);
}

/* One try at the rendezvous: connect, its NONCE, our JOIN, its answer.
 * PBOX_OK, RDV_CLOSED, or a failure. */
static int join_once(struct pbox *px, const uint8_t *pk, const uint8_t *sk, const char *pk_hex,
		     uint64_t deadline, uint32_t *job, uint64_t *token)
{
	const struct cfg_hostport *at = &px->cfg.rendezvous.address;
	uint8_t nonce[WK_GATHER_NONCE];
	char buf[RP_LINE_MAX * 4], ip[INET_ADDRSTRLEN];
	uint32_t len = 0;
	int fd, rc;

	while ((fd = wk_tcp_to(at->ip_be, at->port)) < 0 && wk_now() < deadline)
		usleep(50000); /* rank 0 may not listen yet */
	if (fd < 0)
		return wk_err(PBOX_ETIMEDOUT, "pbox_start: no rendezvous at %s:%u: %s",
			      wk_ipstr(at->ip_be, ip), at->port, strerror(errno));
	rc = wk_nonce_wait(fd, buf, &len, sizeof(buf), nonce, deadline);
	if (rc == -1)
		rc = RDV_CLOSED;
	else if (rc != 1)
		rc = wk_err(rc ? PBOX_ENET : PBOX_ETIMEDOUT,
			    "pbox_start: the rendezvous at %s:%u %s", wk_ipstr(at->ip_be, ip),
			    at->port,
			    rc ? "did not greet us with a NONCE (not rank 0, or another libpbox)"
			       : "sent no NONCE before the deadline");
	else if ((rc = send_join(px, fd, nonce, pk_hex)) == PBOX_OK)
		rc = read_joined(px, fd, buf, &len, sizeof(buf), pk, sk, deadline, job, token);
	else if (rc == PBOX_ENET)
		rc = RDV_CLOSED;
	close(fd);
	return rc;
}

static int rdv_rank(struct pbox *px, uint64_t deadline)
{
	uint8_t pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
	char pk_hex[sizeof(pk) * 2 + 1];
	uint64_t token = 0;
	uint32_t job = 0;
	int rc;

	crypto_box_keypair(pk, sk);
	hex(pk, sizeof(pk), pk_hex);
	while ((rc = join_once(px, pk, sk, pk_hex, deadline, &job, &token)) == RDV_CLOSED) {
		if (wk_now() >= deadline) {
			rc = wk_err(PBOX_ENET,
				    "pbox_start: the rendezvous closed our connection before its "
				    "answer, again until [tuning] deadline");
			break;
		}
		wk_log(px, CFG_LOG_WARNING,
		       "rendezvous: rank 0 closed our connection before its answer (our JOIN "
		       "was not whole in time: a slow or lossy link?); joining again");
		usleep(100000);
	}
	if (rc == PBOX_OK)
		set_job(px, job, token);
	sodium_memzero(sk, sizeof(sk));
	return rc;
}

int wk_rendezvous(struct pbox *px, uint64_t deadline)
{
	int rc = own_endpoint(px);

	if (rc)
		return rc;
	/* ours, as rank 0 hands it out (and checked against what it hands back) */
	px->cfg.peers[px->net.rank] = (struct cfg_hostport){.ip_be = px->cfg.data.address.be,
							    .port = (uint16_t)px->cfg.data.port};
	if (sodium_init() < 0)
		return wk_err(PBOX_ENOMEM, "pbox_start: libsodium did not initialise");
	if (px->net.n == 1) { /* nobody to meet */
		uint64_t token;
		uint32_t job;

		if (draw_job(&job, &token))
			return wk_err(PBOX_ENOMEM, "pbox_start: no random numbers: %s",
				      strerror(errno));
		set_job(px, job, token);
		return PBOX_OK;
	}
	return px->net.rank == 0 ? rdv_root(px, deadline) : rdv_rank(px, deadline);
}
