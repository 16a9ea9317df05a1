/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pbox-client: the protocol test client. Speaks the wire format over kernel
 * UDP sockets to drive pboxd without the worker library, and checks every
 * sum it gets back.
 *
 *   pbox-client --box IP:PORT --job ID --token T --rank R --n N [options]
 *
 * The job's key is nic_job_key(T, ID, 0) on every rank (libpbox's ranks mix
 * in rank 0's nonce; these clients have no bootstrap), its MAC mode payload
 * unless --mac says.
 *
 *   --key-file F      the box key (default $PBOX_BOX_KEY_FILE, else
 *                     /etc/pbox/box.key): the control connection's handshake
 *   --mac M           payload (default), header or off
 *   --register        register the job first (chunk counts from ENDPOINTS)
 *   --ranks A:P,...   with --register: every rank's address (the box takes a
 *                     rank's pushes from there only)
 *   --hold            after registering (and any rounds), keep the job until
 *                     SIGINT/SIGTERM: the job lives as long as this connection
 *   --dtype T         fp32 (default), fp16, bf16
 *   --bytes B         tensor bytes (default 16M); --rounds V (default 100)
 *   --window W        fragments in flight (default 128); --rto-ms (default 40)
 *   --deadline-s S    fail when no progress for S seconds (default 20)
 *   --port P          our UDP port (default 9700): several clients on one host
 *   --addr IP         our address (default: the route's): one source address on
 *                     a host that reaches the box's ports through several links
 *   --replay K        after the rounds, one pull probe of the last round (its
 *                     result is ours already) sent K times, 1 ms apart, as a
 *                     replaying attacker would: the results it drew back
 *                     and the amplification (bytes out over bytes in)
 *   --mirror IFACE    every push sent again at once through AF_PACKET on IFACE
 *                     from another Ethernet address (the genuine datagram:
 *                     same IP and port, its MAC valid), as one who captured
 *                     it would replay it from elsewhere on the segment; the
 *                     frames the box then sends to that Ethernet address
 *                     are counted ("N results went there")
 *   --storm N         send N of each kind of malformed datagram instead
 *   --storm-raw IFACE also N of each malformed frame through AF_PACKET
 *   --quiet           only the summary line
 *
 * Rank r's element i in round v is ((7i + 13r + 3v) mod 61) - 30: small
 * integers, so every sum of up to 8 workers is exact in fp32, fp16 and bf16,
 * and the expected sum is computed here for every element.
 *
 * Exit status: 0 every sum exact, 1 a wrong sum or a failure (the message
 * names the endpoint), 2 bad usage, 3 the box refused the registration.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <sodium.h>
#include <unistd.h>

#include "cfg.h"
#include "layout.h"
#include "nic_ctl.h"
#include "nic_host.h"
#include "nic_wire.h"
#include "sum.h"

#define MAX_EPS	  1024
#define BATCH	  64
#define LINE	  (256 * 1024)
#define VAL_MOD	  61
#define MAX_FRAGB 65536

struct ep {
	uint32_t ip_be;
	uint16_t port;
	uint8_t mac[6];
	uint64_t weight;
	uint32_t n_chunks;
	uint32_t *global; /* global chunk of each local chunk */
	char name[80];
};

struct opts {
	uint32_t box_ip;
	uint16_t box_port;
	uint32_t job;
	uint64_t token;
	uint16_t rank, n, port;
	uint8_t dtype;
	uint64_t bytes;
	uint32_t rounds, window, rto_ms, deadline_s, storm, replay;
	const char *storm_raw;
	const char *mirror;		 /* --mirror IFACE */
	const char *ranks;		 /* --ranks, for REGISTER */
	struct nic_addr rank_addr[1024]; /* --ranks parsed (n of them) */
	uint32_t addr_be;		 /* --addr */
	const char *key_file;		 /* --key-file */
	unsigned mac;			 /* --mac: enum nic_mac_mode */
	bool reg, hold, quiet;
};

static struct opts o = {.bytes = 16u << 20,
			.rounds = 100,
			.window = 128,
			.rto_ms = 40,
			.deadline_s = 20,
			.port = 9700,
			.mac = NIC_MAC_PAYLOAD};
static struct nic_mac mac;	     /* the job's key and MAC mode */
static uint8_t job_key[NIC_KEY_LEN]; /* nic_job_key(token, job, 0) */
static struct nic_ctl_session sess;  /* the control connection's, once authenticated */
static struct ep eps[MAX_EPS];
static unsigned n_eps;
static uint32_t frag_size, chunk_size;
static volatile sig_atomic_t stop;

static void on_signal(int s)
{
	(void)s;
	stop = 1;
}

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* ---- control connection: the one client of nic/nic_ctl.h --------------------- */

static int ctl_fd = -1;

static uint64_t ctl_deadline(void)
{
	return nic_ctl_now() + 10000000000ull;
}

/* ENDPOINTS, and the frag/chunk geometry. */
static int endpoints(void)
{
	static struct nic_ctl_ep got[MAX_EPS];
	struct nic_ctl_geometry geo;
	char err[512], ip[INET_ADDRSTRLEN];
	uint64_t deadline = ctl_deadline();
	unsigned e;

	ctl_fd = nic_ctl_connect(o.box_ip, o.box_port, deadline);
	if (ctl_fd < 0) {
		fprintf(stderr, "pbox-client: cannot reach the box's control plane: %s\n",
			strerror(errno));
		return -1;
	}
	if (nic_ctl_endpoints(ctl_fd, got, MAX_EPS, &geo, deadline, err, sizeof(err))) {
		fprintf(stderr, "pbox-client: %s\n", err);
		return -1;
	}
	n_eps = geo.n_eps;
	frag_size = geo.frag;
	chunk_size = geo.chunk;
	for (e = 0; e < n_eps; e++) {
		eps[e].ip_be = got[e].addr.ip_be;
		eps[e].port = got[e].addr.port;
		memcpy(eps[e].mac, got[e].addr.mac, 6);
		eps[e].weight = got[e].weight_kbps;
		inet_ntop(AF_INET, &got[e].addr.ip_be, ip, sizeof(ip));
		snprintf(eps[e].name, sizeof(eps[e].name), "endpoint %u (%s:%u)", e, ip,
			 got[e].addr.port);
	}
	return 0;
}

/* ---- layout: libpbox's, with every chunk on the box (its PS layout) ------------- */

static uint32_t n_chunks, fpc;
static uint32_t *chunk_ep, *chunk_local;

static int layout(void)
{
	uint64_t kbps[MAX_EPS], *w = calloc(n_eps + o.n, sizeof(*w));
	uint32_t *bytes, *count = calloc(n_eps + o.n, sizeof(*count)), c, e;
	struct lay_in in = {.n = o.n, .worker_kbps = 1, .n_eps = n_eps, .mode = LAY_PS};

	n_chunks = (uint32_t)((o.bytes + chunk_size - 1) / chunk_size);
	fpc = chunk_size / frag_size;
	chunk_ep = calloc(n_chunks, sizeof(*chunk_ep));
	chunk_local = calloc(n_chunks, sizeof(*chunk_local));
	bytes = calloc(n_chunks, sizeof(*bytes));
	if (!w || !count || !chunk_ep || !chunk_local || !bytes)
		return -1;
	for (e = 0; e < n_eps; e++)
		kbps[e] = eps[e].weight ? eps[e].weight : 1;
	in.ep_kbps = kbps;
	lay_weights(&in, w);
	for (c = 0; c < n_chunks; c++)
		bytes[c] = c + 1 < n_chunks ? chunk_size
					    : (uint32_t)(o.bytes - (uint64_t)c * chunk_size);
	if (lay_assign(w, NULL, n_eps + o.n, bytes, n_chunks, chunk_ep, chunk_local, count))
		return -1;
	for (e = 0; e < n_eps; e++) {
		eps[e].n_chunks = count[e];
		eps[e].global = calloc(count[e] ? count[e] : 1, sizeof(uint32_t));
		if (!eps[e].global)
			return -1;
	}
	for (c = 0; c < n_chunks; c++)
		eps[chunk_ep[c]].global[chunk_local[c]] = c;
	free(w);
	free(count);
	free(bytes);
	return 0;
}

static int do_register(void)
{
	static struct nic_ctl_reg req;
	struct nic_ctl_reg_ok ok;
	char err[512];
	uint8_t box_key[NIC_KEY_LEN];
	unsigned e;
	int rc;

	if (nic_ctl_key_load(o.key_file, box_key, err, sizeof(err)) ||
	    nic_ctl_auth(ctl_fd, box_key, &sess, ctl_deadline(), err, sizeof(err))) {
		fprintf(stderr, "pbox-client: %s\n", err);
		return -1;
	}
	req = (struct nic_ctl_reg){.job = o.job,
				   .mac = (uint8_t)o.mac,
				   .n = o.n,
				   .dtype = o.dtype,
				   .frag = frag_size,
				   .chunk = chunk_size,
				   .n_eps = n_eps};
	for (e = 0; e < n_eps; e++)
		req.chunks[e] = eps[e].n_chunks;
	for (e = 0; e < o.n; e++)
		req.ranks[e] = o.rank_addr[e];
	if (o.bytes % chunk_size) { /* the last chunk is short: say how short */
		uint32_t last = n_chunks - 1;

		req.shorts[0] = (struct nic_ctl_short){.ep = chunk_ep[last],
						       .chunk = chunk_local[last],
						       .bytes = (uint32_t)(o.bytes % chunk_size)};
		req.n_shorts = 1;
	}
	memcpy(req.key, job_key, sizeof(req.key));
	rc = nic_ctl_register(ctl_fd, &sess, &req, &ok, ctl_deadline(), err, sizeof(err));
	if (rc == 0) {
		printf("pbox-client: job %u registered: %" PRIu64
		       " bytes of box state, fragment %u, "
		       "chunk %u\n",
		       ok.job, ok.bytes, ok.frag, ok.chunk);
		fflush(stdout);
		return 0;
	}
	if (rc > 0) {
		printf("pbox-client: registration refused: %s\n", err);
		return 3;
	}
	fprintf(stderr, "pbox-client: %s\n", err);
	return -1;
}

/* ---- values ----------------------------------------------------------------- */

static float own[VAL_MOD], want[VAL_MOD]; /* by (7i mod 61), this round */

static void round_tables(uint32_t v)
{
	for (unsigned k = 0; k < VAL_MOD; k++) {
		want[k] = 0;
		for (unsigned r = 0; r < o.n; r++) {
			float x = (float)((int)((k + 13 * r + 3 * v) % VAL_MOD) - 30);

			want[k] += x;
			if (r == o.rank)
				own[k] = x;
		}
	}
}

static void put_elem(uint8_t *p, unsigned i, float x)
{
	if (o.dtype == SUM_FP32)
		memcpy(p + 4 * (size_t)i, &x, 4);
	else {
		uint16_t h = o.dtype == SUM_FP16 ? sum_f32_to_f16(x) : sum_f32_to_bf16(x);

		memcpy(p + 2 * (size_t)i, &h, 2);
	}
}

static float get_elem(const uint8_t *p, unsigned i)
{
	float x;
	uint16_t h;

	if (o.dtype == SUM_FP32) {
		memcpy(&x, p + 4 * (size_t)i, 4);
		return x;
	}
	memcpy(&h, p + 2 * (size_t)i, 2);
	return o.dtype == SUM_FP16 ? sum_f16_to_f32(h) : sum_bf16_to_f32(h);
}

/* ---- rounds ------------------------------------------------------------------ */

struct frag {
	uint64_t off; /* byte offset in the tensor */
	uint16_t len;
	uint8_t done, queued;
	uint32_t tries;
	uint64_t sent;
};

static int sock;
static struct frag *fr;
static uint32_t n_frags; /* n_chunks * fpc, some with len 0 at the tail */
static uint32_t inflight;
static uint64_t retransmits, dup_results, errors_rx, stale_results, bad_macs;
static const char *last_error;

static void build_push(uint8_t *buf, uint32_t g, uint32_t v, bool retrans)
{
	struct frag *f = &fr[g];
	uint32_t c = g / fpc;
	struct pbox_hdr h = {.op = PBOX_OP_PUSH,
			     .dtype = o.dtype,
			     .flags = retrans ? PBOX_F_RETRANS : 0,
			     .rank = o.rank,
			     .job = o.job,
			     .chunk = chunk_local[c],
			     .frag = (uint16_t)(g % fpc),
			     .len = f->len,
			     .round = v};
	unsigned elem = (unsigned)sum_dtype_size((enum sum_dtype)o.dtype), n = f->len / elem, i;
	uint64_t e0 = f->off / elem;
	unsigned k = (unsigned)((e0 % VAL_MOD) * 7 % VAL_MOD);

	for (i = 0; i < n; i++) {
		put_elem(buf + PBOX_HDR_LEN, i, own[k]);
		k += 7;
		if (k >= VAL_MOD)
			k -= VAL_MOD;
	}
	h.mac = nic_mac_of(&mac, &h, buf + PBOX_HDR_LEN);
	nic_wire_put_hdr(buf, &h);
}

static int check_result(uint32_t g, const uint8_t *p)
{
	struct frag *f = &fr[g];
	unsigned elem = (unsigned)sum_dtype_size((enum sum_dtype)o.dtype), n = f->len / elem, i;
	uint64_t e0 = f->off / elem;
	unsigned k = (unsigned)((e0 % VAL_MOD) * 7 % VAL_MOD);

	for (i = 0; i < n; i++) {
		float x = get_elem(p, i);

		if (x != want[k]) {
			fprintf(stderr,
				"pbox-client: rank %u: WRONG SUM at element %" PRIu64
				": got %g, want %g (%s)\n",
				o.rank, e0 + i, (double)x, (double)want[k],
				eps[chunk_ep[g / fpc]].name);
			return -1;
		}
		k += 7;
		if (k >= VAL_MOD)
			k -= VAL_MOD;
	}
	return 0;
}

static int ep_of(uint32_t ip_be, uint16_t port)
{
	for (unsigned e = 0; e < n_eps; e++)
		if (eps[e].ip_be == ip_be && eps[e].port == port)
			return (int)e;
	return -1;
}

/* Receive what is there; returns fragments newly completed, or -1. */
static int64_t receive(uint32_t v)
{
	static uint8_t bufs[BATCH][PBOX_HDR_LEN + MAX_FRAGB];
	static struct sockaddr_in from[BATCH];
	struct mmsghdr mm[BATCH];
	struct iovec iov[BATCH];
	int64_t fresh = 0;
	int n, i;

	for (i = 0; i < BATCH; i++) {
		iov[i] = (struct iovec){.iov_base = bufs[i], .iov_len = sizeof(bufs[i])};
		mm[i].msg_hdr = (struct msghdr){.msg_name = &from[i],
						.msg_namelen = sizeof(from[i]),
						.msg_iov = &iov[i],
						.msg_iovlen = 1};
	}
	n = recvmmsg(sock, mm, BATCH, MSG_DONTWAIT, NULL);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0 : -1;
	for (i = 0; i < n; i++) {
		struct nic_wire_expect exp = {.accept_ops = (1u << PBOX_OP_RESULT) |
							    (1u << PBOX_OP_ERROR)};
		struct pbox_hdr h;
		int e = ep_of(from[i].sin_addr.s_addr, ntohs(from[i].sin_port));
		uint32_t c, g;

		if (e < 0 ||
		    nic_wire_parse_hdr(bufs[i], mm[i].msg_len, &exp, &h) != NIC_DROP_NONE ||
		    h.job != o.job)
			continue;
		if (!nic_mac_ok(&mac, &h, bufs[i] + PBOX_HDR_LEN) &&
		    !(h.op == PBOX_OP_ERROR && h.mac == 0)) { /* "no such job" has no key */
			bad_macs++;
			continue;
		}
		if (h.op == PBOX_OP_ERROR) {
			unsigned code =
				(unsigned)(bufs[i][PBOX_HDR_LEN] << 8 | bufs[i][PBOX_HDR_LEN + 1]);

			errors_rx++;
			last_error = nic_err_text(code);
			if (code != PBOX_ERR_NO_JOB) {
				fprintf(stderr, "pbox-client: rank %u: %s answered: %s\n", o.rank,
					eps[e].name, last_error);
				return -1;
			}
			continue;
		}
		if (h.chunk >= eps[e].n_chunks || h.frag >= fpc)
			continue;
		c = eps[e].global[h.chunk];
		g = c * fpc + h.frag;
		if (h.round != v) {
			stale_results++;
			continue;
		}
		if (fr[g].done) {
			dup_results++;
			continue;
		}
		if (h.len != fr[g].len || h.rank != o.rank) {
			fprintf(stderr,
				"pbox-client: rank %u: %s sent a result of %u bytes for %u\n",
				o.rank, eps[e].name, h.len, fr[g].len);
			return -1;
		}
		if (check_result(g, bufs[i] + PBOX_HDR_LEN))
			return -1;
		fr[g].done = 1;
		inflight--;
		fresh++;
	}
	return fresh;
}

/* ---- mirror ----------------------------------------------------------------- */

static int mirror_fd = -1;
static struct sockaddr_ll mirror_ll = {.sll_family = AF_PACKET, .sll_halen = 6};
static struct nic_addr mirror_src = {.mac = {0x02, 0, 0, 0x5b, 0xad, 0}};
static uint64_t mirrored, redirected, replies_there;

/* --mirror: a raw socket on the interface, and our Ethernet address there
 * replaced by one of our own making (rank in its last byte). */
static int mirror_open(void)
{
	int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)), sz = 8 << 20;
	struct sockaddr_in probe = {.sin_family = AF_INET, .sin_port = htons(eps[0].port)};
	socklen_t sl = sizeof(probe);
	int u = socket(AF_INET, SOCK_DGRAM, 0);

	mirror_ll.sll_protocol = htons(ETH_P_ALL);
	if (fd < 0 || u < 0 || !(mirror_ll.sll_ifindex = (int)if_nametoindex(o.mirror)) ||
	    bind(fd, (struct sockaddr *)&mirror_ll, sizeof(mirror_ll))) {
		fprintf(stderr, "pbox-client: raw socket on %s: %s\n", o.mirror, strerror(errno));
		if (fd >= 0)
			close(fd);
		if (u >= 0)
			close(u);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	/* our source address: the one the route to the box gives, or --addr */
	probe.sin_addr.s_addr = eps[0].ip_be;
	if (connect(u, (struct sockaddr *)&probe, sizeof(probe)) ||
	    getsockname(u, (struct sockaddr *)&probe, &sl)) {
		fprintf(stderr, "pbox-client: no route to %s: %s\n", eps[0].name, strerror(errno));
		close(u);
		close(fd);
		return -1;
	}
	close(u);
	mirror_src.ip_be = o.addr_be ? o.addr_be : probe.sin_addr.s_addr;
	mirror_src.port = o.port;
	mirror_src.mac[5] = (uint8_t)o.rank;
	mirror_fd = fd;
	return 0;
}

/* Frames the box sent to our made-up Ethernet address: results counted
 * apart from the header-only replies (an ACK of a duplicate, as big as
 * what drew it), all dropped. */
static void mirror_drain(void)
{
	static uint8_t buf[NIC_HDRS_LEN + MAX_FRAGB];
	ssize_t r;

	while ((r = recv(mirror_fd, buf, sizeof(buf), MSG_DONTWAIT)) >= (ssize_t)NIC_HDRS_LEN)
		if (memcmp(buf, mirror_src.mac, 6) == 0) {
			if (buf[NIC_HDRS_LEN - PBOX_HDR_LEN + 3] == PBOX_OP_RESULT)
				redirected++;
			else
				replies_there++;
		}
}

/* The datagram @d (@len bytes, a push we have just sent to @e) again, from
 * the made-up Ethernet address. */
static void mirror_send(const uint8_t *d, size_t len, const struct ep *e)
{
	static uint8_t frame[NIC_HDRS_LEN + MAX_FRAGB];
	struct nic_wire_expect exp = {.accept_ops = 1u << PBOX_OP_PUSH};
	struct nic_addr dst = {.ip_be = e->ip_be, .port = e->port};
	struct pbox_hdr h;
	size_t n;

	if (nic_wire_parse_hdr(d, len, &exp, &h) != NIC_DROP_NONE)
		return;
	memcpy(dst.mac, e->mac, 6);
	n = nic_wire_build(frame, sizeof(frame), &mirror_src, &dst, &h, d + PBOX_HDR_LEN);
	memcpy(mirror_ll.sll_addr, e->mac, 6);
	if (n &&
	    sendto(mirror_fd, frame, n, 0, (struct sockaddr *)&mirror_ll, sizeof(mirror_ll)) > 0)
		mirrored++;
	mirror_drain();
}

/* One message of a send batch: fragment @g's push to its endpoint. */
static void address(struct sockaddr_in *to, struct iovec *iov, uint8_t *buf, uint32_t g)
{
	const struct ep *e = &eps[chunk_ep[g / fpc]];

	*to = (struct sockaddr_in){.sin_family = AF_INET, .sin_port = htons(e->port)};
	to->sin_addr.s_addr = e->ip_be;
	*iov = (struct iovec){buf, PBOX_HDR_LEN + fr[g].len};
}

static int run_round(uint32_t v)
{
	static uint8_t out[BATCH][PBOX_HDR_LEN + MAX_FRAGB];
	static struct sockaddr_in to[BATCH];
	static uint32_t bg[BATCH]; /* each message's fragment */
	uint32_t *fifo = malloc(sizeof(uint32_t) * (n_frags + 1)), head = 0, tail = 0, next = 0;
	uint32_t remaining = 0, g;
	uint64_t rto = (uint64_t)o.rto_ms * 1000000u, last_progress = now_ns();
	int rc = -1;

	round_tables(v);
	inflight = 0;
	for (g = 0; g < n_frags; g++) {
		fr[g].done = fr[g].len == 0;
		fr[g].queued = 0;
		fr[g].tries = 0;
		remaining += fr[g].len != 0;
	}
	while (remaining) {
		struct mmsghdr mm[BATCH];
		struct iovec iov[BATCH];
		unsigned nb = 0;
		uint64_t t = now_ns();
		int64_t got;

		/* retransmit what timed out, oldest first */
		while (head != tail && nb < BATCH) {
			struct frag *f = &fr[fifo[head]];

			if (f->done) {
				f->queued = 0;
				head = (head + 1) % (n_frags + 1);
				continue;
			}
			if (t - f->sent < rto * (f->tries > 4 ? 4 : f->tries))
				break;
			g = fifo[head];
			head = (head + 1) % (n_frags + 1);
			fifo[tail] = g;
			tail = (tail + 1) % (n_frags + 1);
			build_push(out[nb], g, v, true);
			f->sent = t;
			f->tries++;
			retransmits++;
			address(&to[nb], &iov[nb], out[nb], g);
			bg[nb++] = g;
		}
		/* new fragments, within the window */
		while (next < n_frags && inflight < o.window && nb < BATCH) {
			struct frag *f = &fr[next];

			if (f->len) {
				build_push(out[nb], next, v, false);
				f->sent = t;
				f->tries = 1;
				f->queued = 1;
				fifo[tail] = next;
				tail = (tail + 1) % (n_frags + 1);
				inflight++;
				address(&to[nb], &iov[nb], out[nb], next);
				bg[nb++] = next;
			}
			next++;
		}
		for (unsigned i = 0; i < nb; i++)
			mm[i].msg_hdr = (struct msghdr){.msg_name = &to[i],
							.msg_namelen = sizeof(to[i]),
							.msg_iov = &iov[i],
							.msg_iovlen = 1};
		for (unsigned s = 0; s < nb;) {
			int w = sendmmsg(sock, mm + s, nb - s, 0);

			if (w < 0) {
				if (errno == EINTR || errno == ENOBUFS || errno == EAGAIN)
					continue;
				fprintf(stderr, "pbox-client: send: %s\n", strerror(errno));
				goto out;
			}
			s += (unsigned)w;
		}
		for (unsigned i = 0; mirror_fd >= 0 && i < nb; i++)
			mirror_send(out[i], iov[i].iov_len, &eps[chunk_ep[bg[i] / fpc]]);
		got = receive(v);
		if (got < 0)
			goto out;
		if (got) {
			remaining -= (uint32_t)got;
			last_progress = t;
		} else if (!nb) {
			struct pollfd p = {.fd = sock, .events = POLLIN};

			poll(&p, 1, 1);
		}
		if (t - last_progress > (uint64_t)o.deadline_s * 1000000000u) {
			while (head != tail && fr[fifo[head]].done)
				head = (head + 1) % (n_frags + 1);
			g = head != tail ? fifo[head] : 0;
			fprintf(stderr,
				"pbox-client: rank %u: round %u: no progress for %u s; %u fragments "
				"missing, e.g. from %s%s%s\n",
				o.rank, v, o.deadline_s, remaining, eps[chunk_ep[g / fpc]].name,
				last_error ? ": " : "", last_error ? last_error : "");
			goto out;
		}
		if (stop)
			goto out;
	}
	rc = 0;
out:
	free(fifo);
	return rc;
}

/* ---- replay ----------------------------------------------------------------- */

/* Results of round @v for us that arrived, their bytes on the wire added to
 * @bytes; nothing else is counted. */
static unsigned count_results(uint32_t v, uint64_t *bytes)
{
	static uint8_t buf[PBOX_HDR_LEN + MAX_FRAGB];
	struct nic_wire_expect exp = {.accept_ops = 1u << PBOX_OP_RESULT};
	struct pbox_hdr h;
	unsigned n = 0;
	ssize_t r;

	while ((r = recv(sock, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		if (nic_wire_parse_hdr(buf, (size_t)r, &exp, &h) == NIC_DROP_NONE &&
		    h.job == o.job && h.round == v && h.rank == o.rank &&
		    nic_mac_ok(&mac, &h, buf + PBOX_HDR_LEN)) {
			n++;
			*bytes += NIC_HDRS_LEN - PBOX_HDR_LEN + (uint64_t)r;
		}
	return n;
}

/* --replay: one genuine pull probe of round @v (the first fragment's), sent
 * o.replay times 1 ms apart, as one who captured it would replay it. */
static void replay(uint32_t v)
{
	uint8_t buf[PBOX_HDR_LEN];
	static const uint8_t none[1];
	const struct ep *e = &eps[chunk_ep[0]];
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(e->port)};
	struct pbox_hdr h = {.op = PBOX_OP_PROBE,
			     .dtype = o.dtype,
			     .flags = PBOX_F_PULL,
			     .rank = o.rank,
			     .job = o.job,
			     .chunk = chunk_local[0],
			     .round = v};
	struct timespec ms = {0, 1000000};
	uint64_t in = (uint64_t)o.replay * NIC_HDRS_LEN, out = 0;
	unsigned got = 0, k;

	to.sin_addr.s_addr = e->ip_be;
	h.mac = nic_mac_of(&mac, &h, none);
	nic_wire_put_hdr(buf, &h);
	count_results(v, &out); /* what was there before: not ours to count */
	out = 0;
	for (k = 0; k < o.replay; k++) {
		if (sendto(sock, buf, sizeof(buf), 0, (struct sockaddr *)&to, sizeof(to)) < 0)
			break;
		nanosleep(&ms, NULL);
		got += count_results(v, &out);
	}
	for (k = 0; k < 100; k++) { /* the last answers' way back */
		nanosleep(&ms, NULL);
		got += count_results(v, &out);
	}
	printf("pbox-client: rank %u: one pull probe replayed %u times (%" PRIu64
	       " bytes): %u results back (%" PRIu64 " bytes): amplification %.2f\n",
	       o.rank, o.replay, in, got, out, in ? (double)out / (double)in : 0.0);
}

/* ---- storm ------------------------------------------------------------------ */

static void udp_to(const void *p, size_t n, const struct ep *e, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};

	sa.sin_addr.s_addr = e->ip_be;
	sendto(sock, p, n, 0, (struct sockaddr *)&sa, sizeof(sa));
}

/* A valid round-0 push of 64 bytes from us: what each storm kind breaks. */
/* A storm is for counting refusals, not for overflowing receive rings: a
 * millisecond's pause every 8 rounds of kinds keeps a burst to ~40 frames
 * per box port, far inside an af_packet ring of 512 (an unpaced burst of
 * 3,400 frames lost ~12% on a slow machine, and the counts came up short). */
static void storm_pace(unsigned i)
{
	if (i % 8 == 0)
		usleep(1000);
}

static struct pbox_hdr storm_push(void)
{
	return (struct pbox_hdr){
		.op = PBOX_OP_PUSH, .dtype = o.dtype, .rank = o.rank, .job = o.job, .len = 64};
}

/* Datagrams the box must refuse, each kind @count times, round-robin over
 * the endpoints; prints what it sent as "STORM kind=count ...". */
static int storm(void)
{
	static const char *const kinds[] = {"magic", "version",	 "op",	"dtype",  "flags",
					    "len",   "udp_port", "mac", "no_job", "rank"};
	enum { NK = sizeof(kinds) / sizeof(kinds[0]) };
	uint8_t buf[PBOX_HDR_LEN + 256];
	unsigned k, i;

	for (i = 0; i < o.storm; i++, storm_pace(i))
		for (k = 0; k < NK; k++) {
			const struct ep *e = &eps[(i + k) % n_eps];
			struct pbox_hdr h = storm_push();
			size_t n = PBOX_HDR_LEN + 64;
			uint16_t port = e->port;

			memset(buf, 0, sizeof(buf));
			switch (k) {
			case 6:
				port = (uint16_t)(e->port + 77);
				break;
			case 8:
				h.job = o.job + 1000;
				break;
			case 9:
				h.rank = o.n;
				break;
			default:
				break;
			}
			h.mac = nic_mac_of(&mac, &h, buf + PBOX_HDR_LEN); /* right, but for mac */
			if (k == 7)
				h.mac ^= 0x5a5a;
			nic_wire_put_hdr(buf, &h);
			switch (k) {
			case 0:
				buf[0] ^= 0xff;
				break;
			case 1:
				buf[2] = 9;
				break;
			case 2:
				buf[3] = PBOX_OP_RESULT;
				break;
			case 3:
				buf[4] = 7;
				break;
			case 4:
				buf[5] = 0x80;
				break;
			case 5:
				n -= 3;
				break;
			default:
				break;
			}
			udp_to(buf, n, e, port);
		}
	printf("STORM");
	for (k = 0; k < NK; k++)
		printf(" %s=%u", kinds[k], o.storm);
	printf("\n");
	return 0;
}

/* Frames below UDP the kernel would never send: through AF_PACKET. */
static int storm_raw(void)
{
	static const char *const kinds[] = {
		"ip_csum",	  "ip_frag",	  "ip_proto",  "ip_hdr",    "ethertype",
		"ip_dst",	  "short",	  "src_bcast", "src_mcast", "src_zero",
		"icmp_src_bcast", "arp_src_zero", "chunk",     "frag",	    "short_push",
		"spoof_port",	  "spoof_ip"};
	enum { NK = sizeof(kinds) / sizeof(kinds[0]) };
	int fd = socket(AF_PACKET, SOCK_RAW, 0);
	struct sockaddr_ll ll = {.sll_family = AF_PACKET, .sll_halen = 6};
	uint8_t frame[256], payload[64] = {0};
	struct nic_addr src = {.mac = {0x02, 0, 0, 0x5b, 0x0a, 0xd0}, .port = 9700}, dst;
	unsigned i, k;

	if (fd < 0 || !(ll.sll_ifindex = (int)if_nametoindex(o.storm_raw))) {
		fprintf(stderr, "pbox-client: raw socket on %s: %s\n", o.storm_raw,
			strerror(errno));
		return -1;
	}
	for (i = 0; i < o.storm; i++, storm_pace(i))
		for (k = 0; k < NK; k++) {
			const struct ep *e = &eps[(i + k) % n_eps];
			struct pbox_hdr h = storm_push();
			size_t n;

			memcpy(dst.mac, e->mac, 6);
			dst.ip_be = e->ip_be;
			dst.port = e->port;
			src.ip_be = htonl(0xc6126401); /* 198.18.100.1: any of ours */
			src.port = 9700;
			if (k >= 12) { /* pushes from our own rank's registered address */
				src.ip_be = o.rank_addr[o.rank].ip_be;
				src.port = o.rank_addr[o.rank].port;
			}
			switch (k) {
			case 12:
				h.chunk = e->n_chunks + 5;
				break;
			case 13:
				h.frag = (uint16_t)fpc;
				break;
			case 14: /* all else right, 4 bytes to a full fragment of a
				  * round the job may be about to start: it must not
				  * fix the round's length (and wedge it) */
				h.chunk = e->n_chunks ? i % e->n_chunks : 0;
				h.round = i % 32;
				h.len = 4;
				break;
			case 15: /* our rank from another port of ours */
				src.port = (uint16_t)(src.port + 1);
				break;
			case 16: /* another rank, from our address */
				h.rank = (uint16_t)((o.rank + 1) % o.n);
				break;
			default:
				break;
			}
			h.mac = nic_mac_of(&mac, &h, payload); /* each kind fails its own check */
			n = nic_wire_build(frame, sizeof(frame), &src, &dst, &h, payload);
			switch (k) {
			case 1:
				frame[20] |= 0x20; /* more fragments */
				break;
			case 2:
				frame[23] = 6; /* TCP */
				break;
			case 3:
				frame[14] = 0x65; /* IP version 6 in an IPv4 frame */
				break;
			case 4:
				frame[12] = 0x86; /* IPv6 */
				frame[13] = 0xdd;
				break;
			case 5:
				frame[33] ^= 0x40; /* another host's address */
				break;
			case 6:
				n = 20;
				break;
			case 7: /* sources that are no single host: never answered */
			case 10:
				memset(frame + 26, 0xff, 4);
				if (k == 10)
					frame[23] = 1; /* an ICMP echo request "from everyone" */
				break;
			case 8:
				frame[26] = 224, frame[27] = 0, frame[28] = 0, frame[29] = 1;
				break;
			case 9:
				memset(frame + 26, 0, 4);
				break;
			default:
				break;
			}
			if (k == 10) { /* ICMP echo request, type 8, after the IP header */
				frame[34] = 8;
				frame[35] = 0;
			}
			/* a right header checksum, but for the checksum case */
			frame[24] = frame[25] = 0;
			{
				uint16_t cs = (uint16_t)~nic_csum_fold(frame + 14, 20, 0);

				frame[24] = (uint8_t)(cs >> 8);
				frame[25] = (uint8_t)(k == 0 ? cs ^ 1 : cs);
			}
			if (k == 11) /* ARP request from sender address 0.0.0.0 */
				n = nic_host_arp_request(frame, src.mac, 0, e->ip_be);
			memcpy(ll.sll_addr, e->mac, 6);
			if (sendto(fd, frame, n, 0, (struct sockaddr *)&ll, sizeof(ll)) < 0) {
				fprintf(stderr, "pbox-client: raw send on %s: %s\n", o.storm_raw,
					strerror(errno));
				close(fd);
				return -1;
			}
		}
	close(fd);
	printf("STORMRAW");
	for (k = 0; k < NK; k++)
		printf(" %s=%u", kinds[k], o.storm);
	printf("\n");
	return 0;
}

/* ---- main -------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f, "usage: pbox-client --box IP:PORT --job ID --token T --rank R --n N\n"
		   "         [--register --ranks IP:PORT,...] [--hold] [--dtype fp32|fp16|bf16]\n"
		   "         [--bytes B] [--addr IP]\n"
		   "         [--rounds V] [--window W] [--rto-ms MS] [--deadline-s S] [--port P]\n"
		   "         [--storm N] [--storm-raw IFACE] [--replay K] [--mirror IFACE]\n"
		   "         [--quiet]\n"
		   "         [--key-file F] [--mac header|payload|off]\n");
}

/* The numeric options: where each goes and its bound. */
static const struct {
	int c;
	void *dst;
	unsigned size;
	uint64_t max;
} num_opts[] = {
	{'j', &o.job, 4, UINT32_MAX},	{'t', &o.token, 8, UINT64_MAX},
	{'r', &o.rank, 2, UINT16_MAX},	{'n', &o.n, 2, UINT16_MAX},
	{'B', &o.bytes, 8, 1ull << 40}, {'V', &o.rounds, 4, UINT32_MAX},
	{'w', &o.window, 4, 1u << 20},	{'R', &o.rto_ms, 4, 600000},
	{'D', &o.deadline_s, 4, 86400}, {'s', &o.storm, 4, 1u << 20},
	{'p', &o.port, 2, UINT16_MAX},	{'P', &o.replay, 4, 1u << 20},
};

/* Option @c's number into its field; -1 (said why) when it is no number in
 * bounds or no numeric option. */
static int num_opt(const struct option *lo, int c, const char *arg)
{
	const char *name = "?";
	unsigned long long v;
	char *end;
	size_t i;

	for (i = 0; lo[i].name; i++)
		if (lo[i].val == c)
			name = lo[i].name;
	for (i = 0; i < sizeof(num_opts) / sizeof(num_opts[0]); i++) {
		if (num_opts[i].c != c)
			continue;
		errno = 0;
		v = strtoull(arg, &end, 0);
		if (errno || end == arg || *end || *arg == '-' || v > num_opts[i].max) {
			fprintf(stderr, "pbox-client: --%s: '%s' is not a number from 0 to %llu\n",
				name, arg, (unsigned long long)num_opts[i].max);
			return -1;
		}
		if (num_opts[i].size == 2)
			*(uint16_t *)num_opts[i].dst = (uint16_t)v;
		else if (num_opts[i].size == 4)
			*(uint32_t *)num_opts[i].dst = (uint32_t)v;
		else
			*(uint64_t *)num_opts[i].dst = v;
		return 0;
	}
	return -1;
}

static int parse_args(int argc, char **argv)
{
	static const struct option lo[] = {
		{"box", 1, 0, 'b'},    {"job", 1, 0, 'j'},	  {"token", 1, 0, 't'},
		{"rank", 1, 0, 'r'},   {"n", 1, 0, 'n'},	  {"dtype", 1, 0, 'd'},
		{"bytes", 1, 0, 'B'},  {"rounds", 1, 0, 'V'},	  {"window", 1, 0, 'w'},
		{"rto-ms", 1, 0, 'R'}, {"deadline-s", 1, 0, 'D'}, {"port", 1, 0, 'p'},
		{"storm", 1, 0, 's'},  {"storm-raw", 1, 0, 'S'},  {"register", 0, 0, 'g'},
		{"hold", 0, 0, 'H'},   {"quiet", 0, 0, 'q'},	  {"ranks", 1, 0, 'A'},
		{"addr", 1, 0, 'L'},   {"key-file", 1, 0, 'k'},	  {"mac", 1, 0, 'M'},
		{"replay", 1, 0, 'P'}, {"mirror", 1, 0, 'm'},	  {0, 0, 0, 0}};
	int c;
	bool have_box = false;

	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'b': {
			struct cfg_hostport at;
			const char *bad = cfg_parse_hostport(optarg, &at);

			if (bad) {
				fprintf(stderr, "pbox-client: --box '%s' %s\n", optarg, bad);
				return -1;
			}
			o.box_ip = at.ip_be;
			o.box_port = at.port;
			have_box = true;
			break;
		}
		case 'd':
			for (o.dtype = 0; o.dtype < SUM_DTYPE_COUNT; o.dtype++)
				if (strcmp(optarg, sum_dtype_name((enum sum_dtype)o.dtype)) == 0)
					break;
			if (o.dtype == SUM_DTYPE_COUNT)
				return -1;
			break;
		case 'S':
			o.storm_raw = optarg;
			break;
		case 'm':
			o.mirror = optarg;
			break;
		case 'g':
			o.reg = true;
			break;
		case 'A':
			o.ranks = optarg;
			break;
		case 'L':
			if (inet_pton(AF_INET, optarg, &o.addr_be) != 1)
				return -1;
			break;
		case 'H':
			o.hold = true;
			break;
		case 'k':
			o.key_file = optarg;
			break;
		case 'M': {
			int m = nic_mac_mode_parse(optarg);

			if (m < 0)
				return -1;
			o.mac = (unsigned)m;
			break;
		}
		case 'q':
			o.quiet = true;
			break;
		default:
			if (num_opt(lo, c, optarg))
				return -1;
			break;
		}
	}
	if (optind != argc || !have_box || o.n < 1 || o.rank >= o.n || o.window < 1 || !o.port ||
	    o.bytes == 0 || o.bytes % 4 || o.rto_ms < 1 || (o.reg && !o.ranks) || o.n > 1024)
		return -1;
	if (o.ranks) { /* --ranks A:P,...: one per rank */
		const char *p = o.ranks;

		for (unsigned r = 0; r < o.n; r++) {
			char ip[16];
			unsigned port;
			int used = 0;

			if (sscanf(p, "%15[0-9.]:%5u%n", ip, &port, &used) != 2 ||
			    inet_pton(AF_INET, ip, &o.rank_addr[r].ip_be) != 1 || port > 65535) {
				fprintf(stderr, "pbox-client: --ranks: no address for rank %u\n",
					r);
				return -1;
			}
			o.rank_addr[r].port = (uint16_t)port;
			p += used;
			if (*p == ',')
				p++;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in me = {.sin_family = AF_INET};
	int sz = 8 << 20, rc;
	uint64_t t0, t1;
	uint32_t v, g;

	if (parse_args(argc, argv)) {
		usage(stderr);
		return 2;
	}
	if (sodium_init() < 0)
		return 1;
	if (!o.key_file)
		o.key_file = getenv("PBOX_BOX_KEY_FILE") ? getenv("PBOX_BOX_KEY_FILE")
							 : "/etc/pbox/box.key";
	nic_job_key(o.token, o.job, 0, job_key);
	nic_mac_init(&mac, o.mac, job_key);
	me.sin_port = htons(o.port);
	me.sin_addr.s_addr = o.addr_be; /* --addr, or any */
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGPIPE, SIG_IGN);
	if (endpoints())
		return 1;
	if (frag_size > MAX_FRAGB - 1) {
		fprintf(stderr, "pbox-client: fragment size %u too large\n", frag_size);
		return 1;
	}
	if (layout()) {
		fprintf(stderr, "pbox-client: out of memory laying out %u chunks\n", n_chunks);
		return 1;
	}
	if (o.reg) {
		rc = do_register();
		if (rc)
			return rc;
	}
	sock = socket(AF_INET, SOCK_DGRAM, 0);
	setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	if (o.storm) {
		me.sin_port = 0;
		if (sock < 0 || bind(sock, (struct sockaddr *)&me, sizeof(me)))
			return 1;
		if (storm() || (o.storm_raw && storm_raw()))
			return 1;
		return 0;
	}
	if (!o.rounds)
		goto hold;
	if (sock < 0 || bind(sock, (struct sockaddr *)&me, sizeof(me))) {
		fprintf(stderr, "pbox-client: cannot bind UDP port %u: %s\n", o.port,
			strerror(errno));
		return 1;
	}
	if (o.mirror && mirror_open())
		return 1;
	n_frags = n_chunks * fpc;
	fr = calloc(n_frags, sizeof(*fr));
	for (g = 0; g < n_frags; g++) {
		uint64_t off = (uint64_t)g * frag_size;

		fr[g].off = off;
		fr[g].len = off >= o.bytes ? 0
					   : (uint16_t)(o.bytes - off < frag_size ? o.bytes - off
										  : frag_size);
	}
	t0 = now_ns();
	for (v = 0; v < o.rounds; v++) {
		if (run_round(v)) {
			fprintf(stderr, "pbox-client: rank %u: FAILED in round %u\n", o.rank, v);
			return 1;
		}
		if (!o.quiet && (v + 1) % 10 == 0)
			printf("pbox-client: rank %u: %u/%u rounds exact\n", o.rank, v + 1,
			       o.rounds);
	}
	t1 = now_ns();
	if (o.rounds)
		printf("pbox-client: rank %u: %u rounds x %" PRIu64
		       " bytes %s: all sums exact; goodput %.2f Gb/s; %" PRIu64
		       " retransmits, %" PRIu64 " duplicate results, %" PRIu64
		       " refused for their MAC\n",
		       o.rank, o.rounds, o.bytes, sum_dtype_name((enum sum_dtype)o.dtype),
		       (double)o.bytes * o.rounds * 8 / (double)(t1 - t0), retransmits, dup_results,
		       bad_macs);
	if (mirror_fd >= 0) {
		struct timespec ms = {0, 1000000};

		for (g = 0; g < 100; g++) { /* the last results' way back */
			nanosleep(&ms, NULL);
			mirror_drain();
		}
		printf("pbox-client: rank %u: %" PRIu64 " pushes mirrored from another Ethernet "
		       "address: %" PRIu64 " results went there (and %" PRIu64
		       " header-only replies)\n",
		       o.rank, mirrored, redirected, replies_there);
	}
	if (o.rounds && o.replay)
		replay(o.rounds - 1);
hold:
	fflush(stdout);
	if (o.hold)
		while (!stop)
			pause();
	return 0;
}
