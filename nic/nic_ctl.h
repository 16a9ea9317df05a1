/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The box's control protocol: one codec for every request and reply, and
 * one blocking client, shared by pboxd (which parses requests with it),
 * libpbox, pbox-client and pbox-gen. TCP, one request per line, one reply
 * per request: zero or more data lines, then "OK ..." or "ERR message".
 *
 *   ENDPOINTS
 *       EP <i> ip=A mac=M port=P weight=KBPS    one per endpoint
 *       OK endpoints=N frag=F chunk=C mtu=MTU
 *   AUTH <client nonce>       the box proves it holds the box key, then
 *       OK nonce=<box nonce> proof=<HMAC>
 *   PROVE <HMAC>              and the client does: OK, or ERR and closed
 *   REGISTER job=ID key=K [mac=header|payload|off] n=N dtype=fp32|fp16|bf16
 *            [frag=F] [chunk=C] chunks=C0,C1,... ranks=IP:PORT,... [short=E:C:B,...]
 *            [comp=RATE] [order=arrival|rank]
 *       EP lines, then OK job=ID bytes=B frag=F chunk=C   (the effective sizes)
 *   GROW (REGISTER's fields)   a segment of new chunks for a registered job,
 *       from the connection that registered it: n, frag, chunk and ranks as
 *       registered; chunks= and short= count the segment's own chunks (its
 *       chunks follow the job's earlier ones on each endpoint); one dtype per
 *       segment, any of them. Replies as REGISTER (bytes: the whole job's).
 *   UNREGISTER job=ID proof=P
 *   LIST, STATS   (for people and monitoring: see box_ctl.c)
 *
 * Every request but ENDPOINTS waits for the handshake: both ends prove
 * they hold the box's key (32 bytes from a key file: nic_ctl_key_load())
 * by HMAC-SHA-256 over both ends' fresh nonces, and derive a session key
 * from them. The job's key travels wrapped under the session key (K: a
 * nonce, the key XOR a pad, a tag; nic_ctl_wrap_key()), and UNREGISTER
 * proves the job's key by an HMAC bound to the session (P), so that no key
 * and no token is ever on the wire in clear, and nothing seen on one
 * connection can be replayed on another. The lines themselves are not
 * encrypted: what they say (job ids, sizes, addresses) is not secret.
 *
 * REGISTER is strict: every key once, no unknown key, every number within
 * bounds that the error states; chunks= gives the job's chunk count on each
 * endpoint, in ENDPOINTS order; ranks= every rank's data address, rank 0
 * first (the box takes a rank's pushes from there only, and sends its
 * results only there); short= lists the chunks shorter than the
 * chunk size (a tensor's last: endpoint E's chunk C holds B bytes), in
 * (endpoint, chunk) order, so that the box knows every fragment's length;
 * comp= (fp32 only) says the job's pushes may be compressed (nic/WIRE.md),
 * top-k and rand-k at RATE parts per million of a fragment's elements;
 * order=rank has every fragment summed in rank order, bitwise the same
 * whatever order its pushes arrive in (the box keeps n - 1 more buffers
 * per fragment for the early ones; the default is arrival).
 */
#ifndef PBOX_NIC_CTL_H
#define PBOX_NIC_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nic_wire.h"

#define NIC_CTL_PORT	   9570 /* the default control port */
#define NIC_CTL_MAX_EPS	   8192 /* endpoints of one box (ports x queues) */
#define NIC_CTL_LINE_MAX   (256 * 1024)
#define NIC_CTL_MAX_CHUNK  (1u << 20)
#define NIC_CTL_MAX_SHORTS 8192u /* short chunks (tensor tails) in one REGISTER */
#define NIC_CTL_MAX_RANKS  1024u
#define NIC_CTL_MAX_ASYNC  4096u /* runs of async chunks in one REGISTER */

/* ---- keys and the handshake ------------------------------------------------ */

#define NIC_CTL_NONCE_LEN 16u
#define NIC_CTL_WRAP_HEX  (2 * (NIC_CTL_NONCE_LEN + NIC_KEY_LEN + 16)) /* key= */

/* One authenticated control connection, on either end. */
struct nic_ctl_session {
	bool authed;
	uint8_t nc[NIC_CTL_NONCE_LEN], nb[NIC_CTL_NONCE_LEN]; /* client's, box's nonce */
	uint8_t box_proof[32], client_proof[32];
	uint8_t ks[32]; /* the session key */
};

/* A key file: NIC_KEY_LEN bytes as 64 hex digits (a newline may follow),
 * not readable by others than its owner and group. 0, or -1 with @err
 * naming the file and what is wrong with it. */
int nic_ctl_key_load(const char *path, uint8_t key[NIC_KEY_LEN], char *err, size_t cap);
/* @n random bytes as 2n hex digits and a NUL into @hex (key files, nonces). */
void nic_ctl_random_hex(char *hex, size_t n);

/* Both proofs and the session key from the box key and both nonces (in
 * @s): what either end computes. */
void nic_ctl_session_derive(struct nic_ctl_session *s, const uint8_t box_key[NIC_KEY_LEN]);

/* The job key @key (NIC_KEY_LEN bytes) of job @job wrapped under @s as
 * NIC_CTL_WRAP_HEX hex digits and a NUL into @hex; and back: 0, or -1
 * when @hex is malformed or was not wrapped under this session for @job. */
void nic_ctl_wrap_key(const struct nic_ctl_session *s, uint32_t job, const uint8_t *key, char *hex);
int nic_ctl_unwrap_key(const struct nic_ctl_session *s, uint32_t job, const char *hex, size_t len,
		       uint8_t *key);
/* UNREGISTER's proof that the sender holds job @job's key, on session @s:
 * 64 hex digits and a NUL into @hex. */
void nic_ctl_unreg_proof(const struct nic_ctl_session *s, uint32_t job, const uint8_t *key,
			 char *hex);

/* AUTH's reply, "OK nonce=<@s's box nonce> proof=<its box proof>", into
 * @buf: its length, or -1 when it does not fit; and back, into @nb and
 * @proof: 0, or -1 unless the line is exactly that (lower-case hex). */
int nic_ctl_format_auth_ok(char *buf, size_t cap, const struct nic_ctl_session *s);
int nic_ctl_parse_auth_ok(const char *line, uint8_t nb[NIC_CTL_NONCE_LEN], uint8_t proof[32]);

/*
 * One endpoint line. A connection that has proved the box key also hears
 * room=B on each: the bytes of job state the box would still take on the
 * endpoint (its node's free budget, less a reserve, shared among the
 * node's endpoints by weight; at most its weight's part of limits.
 * job_memory), so that a job lays out no more on the box than it holds
 * (worker/units.c). NIC_CTL_ROOM_UNKNOWN where the line has none.
 */
#define NIC_CTL_ROOM_UNKNOWN UINT64_MAX
struct nic_ctl_ep {
	unsigned idx;
	struct nic_addr addr;
	uint64_t weight_kbps; /* this endpoint's share of the box's bandwidth */
	uint64_t room;	      /* bytes of job state it would still take */
};

/* The line for @e into @buf (no newline); its length, or -1 if it does not fit. */
int nic_ctl_format_ep(char *buf, size_t cap, const struct nic_ctl_ep *e);
/* @line into @out: 0, or -1 when it is no EP line or a field is out of range
 * (an address, a MAC, a port of 0 or over 65535, a weight of 0, trailing text). */
int nic_ctl_parse_ep(const char *line, struct nic_ctl_ep *out);

/* ENDPOINTS' OK line; txref=T (a proved connection's): the box's bytes of
 * transmit reference per result buffer, which ss_job_bytes() needs to
 * cost a chunk as the box does. */
struct nic_ctl_geometry {
	unsigned n_eps;
	uint32_t frag, chunk, mtu;
	uint32_t txref; /* 0: not said */
};
int nic_ctl_format_geometry(char *buf, size_t cap, const struct nic_ctl_geometry *g);
int nic_ctl_parse_geometry(const char *line, struct nic_ctl_geometry *g);

/* A REGISTER request (or a GROW: the same fields). */
struct nic_ctl_reg {
	bool grow; /* formatted as GROW */
	uint32_t job;
	uint8_t key[NIC_KEY_LEN]; /* REGISTER: the job's key (wrapped on the wire) */
	uint8_t mac;		  /* REGISTER: enum nic_mac_mode */
	uint32_t n;
	uint8_t dtype; /* PBOX_DTYPE_* */
	uint32_t comp; /* comp=: 0, or compressed pushes taken at this top-k/rand-k rate (ppm) */
	bool in_order; /* order=rank: every fragment summed in rank order ([job] deterministic) */
	uint32_t frag, chunk; /* 0 in a request: the box's own */
	uint32_t n_eps;
	uint32_t chunks[NIC_CTL_MAX_EPS];
	struct nic_addr ranks[NIC_CTL_MAX_RANKS]; /* n of them; MACs unused */
	uint32_t n_shorts;
	struct nic_ctl_short {
		uint32_t ep, chunk, bytes;
	} shorts[NIC_CTL_MAX_SHORTS];
	/* async=E:C+N:R,... : runs of async chunks (asynchronous training's
	 * parameter stores, ss.h's SS_ASYNC): endpoint E's chunks [C, C + N),
	 * set by rank R's first push; in (E, C) order, not overlapping */
	uint32_t n_asyncs;
	struct nic_ctl_async {
		uint32_t ep, chunk, count, root;
	} asyncs[NIC_CTL_MAX_ASYNC];
	uint32_t stale; /* stale=S: the async chunks' bound (0: unbounded) */
};

/* What the box checks a REGISTER against. */
struct nic_ctl_reg_limits {
	uint32_t max_workers;
	uint32_t max_frag;		/* the box's fragment size: the largest */
	uint32_t dflt_frag, dflt_chunk; /* when the request leaves them out */
	uint32_t n_eps;			/* chunks= must have exactly this many */
};

/* "REGISTER ..." (its key wrapped under @s) or "GROW ..." (no key) into
 * @buf; its length, or -1 when it does not fit. */
int nic_ctl_format_register(char *buf, size_t cap, const struct nic_ctl_session *s,
			    const struct nic_ctl_reg *r);
/* The fields after "REGISTER " (or "GROW ": @r->grow set by the caller)
 * into @r, the key unwrapped with @s: 0, or -1 with @err saying which field
 * is wrong and what it may be. */
int nic_ctl_parse_register(const char *args, const struct nic_ctl_reg_limits *lim,
			   const struct nic_ctl_session *s, struct nic_ctl_reg *r, char *err,
			   size_t cap);

/* REGISTER's OK line. */
struct nic_ctl_reg_ok {
	uint32_t job;
	uint64_t bytes; /* box memory the job holds */
	uint32_t frag, chunk;
};
int nic_ctl_format_reg_ok(char *buf, size_t cap, const struct nic_ctl_reg_ok *ok);
int nic_ctl_parse_reg_ok(const char *line, struct nic_ctl_reg_ok *ok);

/* "UNREGISTER job=ID proof=P" (no newline) on session @s for the job whose
 * key is @key; its length or -1. */
int nic_ctl_format_unregister(char *buf, size_t cap, const struct nic_ctl_session *s, uint32_t job,
			      const uint8_t *key);
/* The fields after "UNREGISTER ", exactly as formatted: the job and its
 * proof (64 hex digits and a NUL into @proof): 0, or -1 with @err. */
int nic_ctl_parse_unregister(const char *args, uint32_t *job, char proof[65], char *err,
			     size_t cap);

/* ---- the client: blocking, every wait bounded by a CLOCK_MONOTONIC deadline */

uint64_t nic_ctl_now(void); /* ns, CLOCK_MONOTONIC */

/* Connect to @ip_be:@port by @deadline: the descriptor (close-on-exec,
 * TCP_NODELAY), or -1 with errno set. */
int nic_ctl_connect(uint32_t ip_be, uint16_t port, uint64_t deadline);
/* @line and a newline, whole (a non-blocking socket is waited on until it
 * takes them): 0 or -1. */
int nic_ctl_send(int fd, const char *line);
/* One line (without its newline) into @out: 1, or 0 at the deadline, -1
 * when the box closed the connection or the line is longer than @cap.
 * Reads byte by byte, so nothing past the line is consumed. */
int nic_ctl_recv_line(int fd, char *out, size_t cap, uint64_t deadline);

/* The handshake (AUTH, PROVE) with the box key @box_key: 0 (@s holds the
 * session), or -1 with @err saying why (the box does not hold our key, or
 * we do not hold its, or the connection failed). */
int nic_ctl_auth(int fd, const uint8_t box_key[NIC_KEY_LEN], struct nic_ctl_session *s,
		 uint64_t deadline, char *err, size_t cap);

/* ENDPOINTS: up to @max endpoints, in order, and the geometry. 0, or -1 with
 * @err saying what went wrong. */
int nic_ctl_endpoints(int fd, struct nic_ctl_ep *eps, unsigned max, struct nic_ctl_geometry *g,
		      uint64_t deadline, char *err, size_t cap);
/* REGISTER (GROW where @r->grow) @r: 0 (@ok filled), 1 when the box refused (@err holds its
 * reason), -1 when the connection failed (@err says so). */
int nic_ctl_register(int fd, const struct nic_ctl_session *s, const struct nic_ctl_reg *r,
		     struct nic_ctl_reg_ok *ok, uint64_t deadline, char *err, size_t cap);

#endif /* PBOX_NIC_CTL_H */
