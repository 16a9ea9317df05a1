/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The box's control protocol: codec and blocking client (nic_ctl.h).
 * Control path only: nothing here runs per packet.
 */
#include "nic_ctl.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void errf(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
}

/* ---- endpoint and OK lines ------------------------------------------------- */

/*
 * A cursor over a line, each step taking exactly what this file's
 * formatters write: a literal, a decimal number ("0", or no leading zero;
 * no sign, no space, never wrapped past its bound), an IPv4 address, a
 * MAC in lower-case hex. 0 and *@p past what was taken, or -1 and *@p
 * where it was.
 */
static int take(const char **p, const char *lit)
{
	size_t n = strlen(lit);

	if (strncmp(*p, lit, n))
		return -1;
	*p += n;
	return 0;
}

static int take_dec(const char **p, uint64_t max, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;

	if (!isdigit((unsigned char)s[0]) || (s[0] == '0' && isdigit((unsigned char)s[1])))
		return -1;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = (unsigned)(*s - '0');

		if (v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*p = s;
	*out = v;
	return 0;
}

static int take_u32(const char **p, uint32_t *out)
{
	uint64_t v;

	if (take_dec(p, UINT32_MAX, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int take_ipv4(const char **p, uint32_t *be)
{
	size_t n = strspn(*p, "0123456789.");
	char ip[INET_ADDRSTRLEN];

	if (!n || n >= sizeof(ip))
		return -1;
	memcpy(ip, *p, n);
	ip[n] = '\0';
	if (inet_pton(AF_INET, ip, be) != 1)
		return -1;
	*p += n;
	return 0;
}

/* Exactly 2 @n lower-case hex digits, @n bytes into @b. */
static int take_hex(const char **p, uint8_t *b, size_t n)
{
	size_t got = 0;

	if (strspn(*p, "0123456789abcdef") != 2 * n ||
	    sodium_hex2bin(b, n, *p, 2 * n, NULL, &got, NULL) || got != n)
		return -1;
	*p += 2 * n;
	return 0;
}

static int take_mac(const char **p, uint8_t mac[6])
{
	const char *s = *p;

	for (int i = 0; i < 6; i++)
		if ((i && take(&s, ":")) || take_hex(&s, &mac[i], 1))
			return -1;
	*p = s;
	return 0;
}

int nic_ctl_format_ep(char *buf, size_t cap, const struct nic_ctl_ep *e)
{
	char ip[INET_ADDRSTRLEN];
	const uint8_t *m = e->addr.mac;
	int n;

	if (!inet_ntop(AF_INET, &e->addr.ip_be, ip, sizeof(ip)))
		return -1;
	n = snprintf(buf, cap,
		     "EP %u ip=%s mac=%02x:%02x:%02x:%02x:%02x:%02x port=%u weight=%" PRIu64,
		     e->idx, ip, m[0], m[1], m[2], m[3], m[4], m[5], e->addr.port, e->weight_kbps);
	if (n >= 0 && (size_t)n < cap && e->room != NIC_CTL_ROOM_UNKNOWN)
		n += snprintf(buf + n, cap - (size_t)n, " room=%" PRIu64, e->room);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int nic_ctl_parse_ep(const char *line, struct nic_ctl_ep *out)
{
	struct nic_ctl_ep e = {.room = NIC_CTL_ROOM_UNKNOWN};
	const char *p = line;
	uint64_t idx, port;

	if (take(&p, "EP ") || take_dec(&p, UINT_MAX, &idx) || take(&p, " ip=") ||
	    take_ipv4(&p, &e.addr.ip_be) || take(&p, " mac=") || take_mac(&p, e.addr.mac) ||
	    take(&p, " port=") || take_dec(&p, 65535, &port) || !port || take(&p, " weight=") ||
	    take_dec(&p, UINT64_MAX, &e.weight_kbps) || !e.weight_kbps)
		return -1;
	if (*p && (take(&p, " room=") || take_dec(&p, NIC_CTL_ROOM_UNKNOWN - 1, &e.room)))
		return -1;
	if (*p)
		return -1;
	e.idx = (unsigned)idx;
	e.addr.port = (uint16_t)port;
	*out = e;
	return 0;
}

static int fits(int n, size_t cap)
{
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int nic_ctl_format_geometry(char *buf, size_t cap, const struct nic_ctl_geometry *g)
{
	int n = snprintf(buf, cap, "OK endpoints=%u frag=%u chunk=%u mtu=%u", g->n_eps, g->frag,
			 g->chunk, g->mtu);

	if (n >= 0 && (size_t)n < cap && g->txref)
		n += snprintf(buf + n, cap - (size_t)n, " txref=%u", g->txref);
	return fits(n, cap);
}

int nic_ctl_parse_geometry(const char *line, struct nic_ctl_geometry *g)
{
	struct nic_ctl_geometry v = {0};
	const char *p = line;
	uint64_t txref = 0;

	if (take(&p, "OK endpoints=") || take_u32(&p, &v.n_eps) || take(&p, " frag=") ||
	    take_u32(&p, &v.frag) || take(&p, " chunk=") || take_u32(&p, &v.chunk) ||
	    take(&p, " mtu=") || take_u32(&p, &v.mtu) || !v.frag || !v.chunk || v.chunk % v.frag)
		return -1;
	if (*p && (take(&p, " txref=") || take_dec(&p, 4096, &txref) || !txref))
		return -1;
	if (*p)
		return -1;
	v.txref = (uint32_t)txref;
	*g = v;
	return 0;
}

int nic_ctl_format_reg_ok(char *buf, size_t cap, const struct nic_ctl_reg_ok *ok)
{
	return fits(snprintf(buf, cap, "OK job=%u bytes=%" PRIu64 " frag=%u chunk=%u", ok->job,
			     ok->bytes, ok->frag, ok->chunk),
		    cap);
}

int nic_ctl_parse_reg_ok(const char *line, struct nic_ctl_reg_ok *ok)
{
	struct nic_ctl_reg_ok v;
	const char *p = line;

	if (take(&p, "OK job=") || take_u32(&p, &v.job) || take(&p, " bytes=") ||
	    take_dec(&p, UINT64_MAX, &v.bytes) || take(&p, " frag=") || take_u32(&p, &v.frag) ||
	    take(&p, " chunk=") || take_u32(&p, &v.chunk) || *p)
		return -1;
	*ok = v;
	return 0;
}

int nic_ctl_format_unregister(char *buf, size_t cap, const struct nic_ctl_session *s, uint32_t job,
			      const uint8_t *key)
{
	char proof[65];

	nic_ctl_unreg_proof(s, job, key, proof);
	return fits(snprintf(buf, cap, "UNREGISTER job=%u proof=%s", job, proof), cap);
}

int nic_ctl_parse_unregister(const char *args, uint32_t *job, char proof[65], char *err, size_t cap)
{
	const char *p = args;
	uint64_t id;
	size_t n;

	if (take(&p, "job=") || take_dec(&p, UINT32_MAX, &id) || !id || take(&p, " proof=") ||
	    (n = strspn(p, "0123456789abcdef")) != 64 || p[n]) {
		errf(err, cap,
		     "UNREGISTER: '%.60s' is not job=ID (1 to %u) proof=P (64 hex digits)", args,
		     UINT32_MAX);
		return -1;
	}
	*job = (uint32_t)id;
	memcpy(proof, p, 64);
	proof[64] = '\0';
	return 0;
}

/* ---- keys and the handshake -------------------------------------------------- */

int nic_ctl_key_load(const char *path, uint8_t key[NIC_KEY_LEN], char *err, size_t cap)
{
	char hex[2 * NIC_KEY_LEN + 4];
	struct stat st;
	size_t n, got = 0;
	const char *end;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		snprintf(err, cap, "%s: %s (make one: pbox-setup --keygen %s)", path,
			 strerror(errno), path);
		return -1;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, cap, "%s: not a regular file", path);
		return -1;
	}
	if (st.st_mode & S_IRWXO) {
		close(fd);
		snprintf(err, cap, "%s: others may read or write it (chmod o-rwx %s)", path, path);
		return -1;
	}
	n = (size_t)read(fd, hex, sizeof(hex) - 1);
	close(fd);
	if (n > sizeof(hex) - 1)
		n = 0;
	while (n && (hex[n - 1] == '\n' || hex[n - 1] == '\r'))
		n--;
	hex[n] = '\0';
	if (n != 2 * NIC_KEY_LEN || sodium_hex2bin(key, NIC_KEY_LEN, hex, n, NULL, &got, &end) ||
	    got != NIC_KEY_LEN || *end) {
		sodium_memzero(hex, sizeof(hex));
		snprintf(err, cap, "%s: not a key: %u hex digits expected on one line", path,
			 2 * NIC_KEY_LEN);
		return -1;
	}
	sodium_memzero(hex, sizeof(hex));
	return 0;
}

void nic_ctl_random_hex(char *hex, size_t n)
{
	uint8_t b[64];

	if (n > sizeof(b))
		n = sizeof(b);
	randombytes_buf(b, n);
	sodium_bin2hex(hex, 2 * n + 1, b, n);
}

/* HMAC-SHA-256 under @key of a label, then @a and @b (each @n bytes, may be NULL). */
static void hmac(uint8_t out[32], const uint8_t *key, const char *label, const void *a,
		 const void *b, size_t n, const void *c, size_t cn)
{
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, key, 32);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, strlen(label));
	if (a)
		crypto_auth_hmacsha256_update(&st, a, n);
	if (b)
		crypto_auth_hmacsha256_update(&st, b, n);
	if (c)
		crypto_auth_hmacsha256_update(&st, c, cn);
	crypto_auth_hmacsha256_final(&st, out);
}

void nic_ctl_session_derive(struct nic_ctl_session *s, const uint8_t box_key[NIC_KEY_LEN])
{
	hmac(s->box_proof, box_key, "pbox box proof", s->nc, s->nb, NIC_CTL_NONCE_LEN, NULL, 0);
	hmac(s->client_proof, box_key, "pbox client proof", s->nc, s->nb, NIC_CTL_NONCE_LEN, NULL,
	     0);
	hmac(s->ks, box_key, "pbox session", s->nc, s->nb, NIC_CTL_NONCE_LEN, NULL, 0);
}

int nic_ctl_format_auth_ok(char *buf, size_t cap, const struct nic_ctl_session *s)
{
	char nb[2 * NIC_CTL_NONCE_LEN + 1], pr[2 * sizeof(s->box_proof) + 1];

	sodium_bin2hex(nb, sizeof(nb), s->nb, sizeof(s->nb));
	sodium_bin2hex(pr, sizeof(pr), s->box_proof, sizeof(s->box_proof));
	return fits(snprintf(buf, cap, "OK nonce=%s proof=%s", nb, pr), cap);
}

int nic_ctl_parse_auth_ok(const char *line, uint8_t nb[NIC_CTL_NONCE_LEN], uint8_t proof[32])
{
	const char *p = line;

	return take(&p, "OK nonce=") || take_hex(&p, nb, NIC_CTL_NONCE_LEN) ||
			       take(&p, " proof=") || take_hex(&p, proof, 32) || *p
		       ? -1
		       : 0;
}

/* The pad and the tag of a key wrapped for @job with @nonce. */
static void wrap_parts(const struct nic_ctl_session *s, uint32_t job, const uint8_t *nonce,
		       const uint8_t *key, uint8_t pad[32], uint8_t tag[32])
{
	uint8_t j[4] = {(uint8_t)(job >> 24), (uint8_t)(job >> 16), (uint8_t)(job >> 8),
			(uint8_t)job};

	hmac(pad, s->ks, "pbox key pad", nonce, NULL, NIC_CTL_NONCE_LEN, j, sizeof(j));
	if (key) {
		uint8_t m[4 + NIC_KEY_LEN];

		memcpy(m, j, 4);
		memcpy(m + 4, key, NIC_KEY_LEN);
		hmac(tag, s->ks, "pbox key tag", nonce, NULL, NIC_CTL_NONCE_LEN, m, sizeof(m));
		sodium_memzero(m, sizeof(m));
	}
}

void nic_ctl_wrap_key(const struct nic_ctl_session *s, uint32_t job, const uint8_t *key, char *hex)
{
	uint8_t w[NIC_CTL_NONCE_LEN + NIC_KEY_LEN + 16], pad[32], tag[32];

	randombytes_buf(w, NIC_CTL_NONCE_LEN);
	wrap_parts(s, job, w, key, pad, tag);
	for (unsigned i = 0; i < NIC_KEY_LEN; i++)
		w[NIC_CTL_NONCE_LEN + i] = key[i] ^ pad[i];
	memcpy(w + NIC_CTL_NONCE_LEN + NIC_KEY_LEN, tag, 16);
	sodium_bin2hex(hex, NIC_CTL_WRAP_HEX + 1, w, sizeof(w));
	sodium_memzero(pad, sizeof(pad));
}

int nic_ctl_unwrap_key(const struct nic_ctl_session *s, uint32_t job, const char *hex, size_t len,
		       uint8_t *key)
{
	uint8_t w[NIC_CTL_NONCE_LEN + NIC_KEY_LEN + 16], pad[32], tag[32];
	size_t got = 0;
	int rc;

	if (len != NIC_CTL_WRAP_HEX || sodium_hex2bin(w, sizeof(w), hex, len, NULL, &got, NULL) ||
	    got != sizeof(w))
		return -1;
	wrap_parts(s, job, w, NULL, pad, NULL);
	for (unsigned i = 0; i < NIC_KEY_LEN; i++)
		key[i] = w[NIC_CTL_NONCE_LEN + i] ^ pad[i];
	wrap_parts(s, job, w, key, pad, tag);
	rc = sodium_memcmp(tag, w + NIC_CTL_NONCE_LEN + NIC_KEY_LEN, 16) ? -1 : 0;
	if (rc)
		sodium_memzero(key, NIC_KEY_LEN);
	sodium_memzero(pad, sizeof(pad));
	return rc;
}

void nic_ctl_unreg_proof(const struct nic_ctl_session *s, uint32_t job, const uint8_t *key,
			 char *hex)
{
	uint8_t p[32], m[4 + 2 * NIC_CTL_NONCE_LEN] = {(uint8_t)(job >> 24), (uint8_t)(job >> 16),
						       (uint8_t)(job >> 8), (uint8_t)job};

	memcpy(m + 4, s->nc, NIC_CTL_NONCE_LEN);
	memcpy(m + 4 + NIC_CTL_NONCE_LEN, s->nb, NIC_CTL_NONCE_LEN);
	hmac(p, key, "pbox unregister", m, NULL, sizeof(m), NULL, 0);
	sodium_bin2hex(hex, 65, p, sizeof(p));
}

/* ---- REGISTER ----------------------------------------------------------------- */

int nic_ctl_format_register(char *buf, size_t cap, const struct nic_ctl_session *s,
			    const struct nic_ctl_reg *r)
{
	size_t off;
	int n;
	uint32_t e;

	if (r->grow) {
		n = snprintf(buf, cap, "GROW job=%u n=%u dtype=%s", r->job, r->n,
			     nic_dtype_name(r->dtype));
	} else {
		char key[NIC_CTL_WRAP_HEX + 1];

		nic_ctl_wrap_key(s, r->job, r->key, key);
		n = snprintf(buf, cap, "REGISTER job=%u key=%s mac=%s n=%u dtype=%s", r->job, key,
			     nic_mac_mode_name(r->mac), r->n, nic_dtype_name(r->dtype));
	}
	if (fits(n, cap) < 0)
		return -1;
	off = (size_t)n;
	if (r->frag) {
		n = snprintf(buf + off, cap - off, " frag=%u", r->frag);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	if (r->chunk) {
		n = snprintf(buf + off, cap - off, " chunk=%u", r->chunk);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	if (r->comp) {
		n = snprintf(buf + off, cap - off, " comp=%u", r->comp);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	if (r->in_order) {
		n = snprintf(buf + off, cap - off, " order=rank");
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	if (r->stale) {
		n = snprintf(buf + off, cap - off, " stale=%u", r->stale);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	n = snprintf(buf + off, cap - off, " chunks=");
	if (fits(n, cap - off) < 0)
		return -1;
	off += (size_t)n;
	for (e = 0; e < r->n_eps; e++) {
		n = snprintf(buf + off, cap - off, "%s%u", e ? "," : "", r->chunks[e]);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	for (e = 0; e < r->n; e++) {
		char ip[INET_ADDRSTRLEN];

		if (!inet_ntop(AF_INET, &r->ranks[e].ip_be, ip, sizeof(ip)))
			return -1;
		n = snprintf(buf + off, cap - off, "%s%s:%u", e ? "," : " ranks=", ip,
			     r->ranks[e].port);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	for (e = 0; e < r->n_shorts; e++) {
		const struct nic_ctl_short *sh = &r->shorts[e];

		n = snprintf(buf + off, cap - off, "%s%u:%u:%u", e ? "," : " short=", sh->ep,
			     sh->chunk, sh->bytes);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	for (e = 0; e < r->n_asyncs; e++) {
		const struct nic_ctl_async *a = &r->asyncs[e];

		n = snprintf(buf + off, cap - off, "%s%u:%u+%u:%u", e ? "," : " async=", a->ep,
			     a->chunk, a->count, a->root);
		if (fits(n, cap - off) < 0)
			return -1;
		off += (size_t)n;
	}
	return (int)off;
}

/* A decimal number in [lo, hi] from @v (the whole of it), or -1 with @err. */
static int number(const char *k, const char *v, size_t vlen, uint64_t lo, uint64_t hi, bool pow2,
		  uint64_t *out, char *err, size_t cap)
{
	char tmp[32];
	const char *p = tmp;

	if (vlen == 0 || vlen >= sizeof(tmp))
		goto bad;
	memcpy(tmp, v, vlen);
	tmp[vlen] = '\0';
	if (take_dec(&p, hi, out) || *p || *out < lo || (pow2 && (*out & (*out - 1))))
		goto bad;
	return 0;
bad:
	errf(err, cap, "%s: '%.*s' is not %s from %" PRIu64 " to %" PRIu64, k,
	     (int)(vlen > 40 ? 40 : vlen), v, pow2 ? "a power of two" : "a number", lo, hi);
	return -1;
}

/* The comma-separated chunk counts of @v, exactly @want of them. */
static int chunk_list(const char *v, size_t vlen, unsigned want, struct nic_ctl_reg *r, char *err,
		      size_t cap)
{
	const char *p = v, *end = v + vlen;
	uint64_t total = 0;
	unsigned g = 0;

	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		size_t len = (size_t)((comma ? comma : end) - p);
		uint64_t c;

		if (g == want) {
			errf(err, cap, "chunks: more than one count per endpoint (%u endpoints)",
			     want);
			return -1;
		}
		if (number("chunks", p, len, 0, 1u << 24, false, &c, err, cap)) {
			errf(err, cap, "chunks: entry %u: '%.*s' is not a count from 0 to %u", g,
			     (int)(len > 20 ? 20 : len), p, 1u << 24);
			return -1;
		}
		r->chunks[g++] = (uint32_t)c;
		total += c;
		p += len + (comma ? 1 : 0);
		if (comma && p == end) {
			errf(err, cap, "chunks: a count is missing after the last comma");
			return -1;
		}
	}
	if (g != want) {
		errf(err, cap,
		     "chunks: %u counts for %u endpoints (one per endpoint, in ENDPOINTS order)", g,
		     want);
		return -1;
	}
	if (!total) {
		errf(err, cap, "chunks: the job has no chunk on any endpoint");
		return -1;
	}
	r->n_eps = g;
	return 0;
}

/* ranks=IP:PORT,... : each rank's data address, exactly n, one host each. */
static int rank_list(const char *v, size_t vlen, struct nic_ctl_reg *r, char *err, size_t cap)
{
	const char *p = v, *end = v + vlen;
	uint32_t g = 0, q;

	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		size_t len = (size_t)((comma ? comma : end) - p);
		char tmp[24];
		const char *c = tmp;
		uint64_t port;

		if (g == r->n) {
			errf(err, cap, "ranks: more than n = %u addresses", r->n);
			return -1;
		}
		if (len >= sizeof(tmp)) {
			errf(err, cap, "ranks: entry %u is not IP:PORT", g);
			return -1;
		}
		memcpy(tmp, p, len);
		tmp[len] = '\0';
		if (take_ipv4(&c, &r->ranks[g].ip_be) || take(&c, ":") ||
		    take_dec(&c, 65535, &port) || *c || !port ||
		    !nic_ip_unicast(r->ranks[g].ip_be)) {
			errf(err, cap,
			     "ranks: entry %u: '%s' is not a host's IPv4 address and port", g, tmp);
			return -1;
		}
		r->ranks[g].port = (uint16_t)port;
		memset(r->ranks[g].mac, 0, 6);
		for (q = 0; q < g; q++)
			if (r->ranks[q].ip_be == r->ranks[g].ip_be && r->ranks[q].port == port) {
				errf(err, cap, "ranks: ranks %u and %u have the same address %s", q,
				     g, tmp);
				return -1;
			}
		g++;
		p += len + (comma ? 1 : 0);
		if (comma && p == end) {
			errf(err, cap, "ranks: an address is missing after the last comma");
			return -1;
		}
	}
	if (g != r->n) {
		errf(err, cap, "ranks: %u addresses for n = %u ranks", g, r->n);
		return -1;
	}
	return 0;
}

/* short=E:C:B,... : chunks shorter than the chunk size, in (E, C) order. */
static int short_list(const char *v, size_t vlen, struct nic_ctl_reg *r, char *err, size_t cap)
{
	const char *p = v, *end = v + vlen;
	unsigned elem = nic_dtype_size(r->dtype);

	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		size_t len = (size_t)((comma ? comma : end) - p);
		struct nic_ctl_short *s = &r->shorts[r->n_shorts];
		char tmp[40];
		const char *q = tmp;

		if (r->n_shorts == NIC_CTL_MAX_SHORTS) {
			errf(err, cap, "short: more than %u entries", NIC_CTL_MAX_SHORTS);
			return -1;
		}
		if (len > 32) { /* three 10-digit numbers and two colons at most */
			errf(err, cap, "short: entry %u: '%.20s...' is not ENDPOINT:CHUNK:BYTES",
			     r->n_shorts, p);
			return -1;
		}
		memcpy(tmp, p, len);
		tmp[len] = '\0';
		if (take_u32(&q, &s->ep) || take(&q, ":") || take_u32(&q, &s->chunk) ||
		    take(&q, ":") || take_u32(&q, &s->bytes) || *q) {
			errf(err, cap, "short: entry %u: '%s' is not ENDPOINT:CHUNK:BYTES",
			     r->n_shorts, tmp);
			return -1;
		}
		if (s->ep >= r->n_eps || s->chunk >= r->chunks[s->ep]) {
			errf(err, cap, "short: entry %u: endpoint %u has no chunk %u", r->n_shorts,
			     s->ep, s->chunk);
			return -1;
		}
		if (!s->bytes || s->bytes >= r->chunk || s->bytes % elem) {
			errf(err, cap,
			     "short: entry %u: %u bytes is not a whole number of %u-byte elements from "
			     "1 to %u",
			     r->n_shorts, s->bytes, elem, r->chunk - 1);
			return -1;
		}
		if (r->n_shorts &&
		    (s->ep < s[-1].ep || (s->ep == s[-1].ep && s->chunk <= s[-1].chunk))) {
			errf(err, cap, "short: entry %u: not in (endpoint, chunk) order, or twice",
			     r->n_shorts);
			return -1;
		}
		r->n_shorts++;
		p += len + (comma ? 1 : 0);
		if (comma && p == end) {
			errf(err, cap, "short: an entry is missing after the last comma");
			return -1;
		}
	}
	return 0;
}

/* async=E:C+N:R,... : runs of async chunks, in (E, C) order, apart. */
static int async_list(const char *v, size_t vlen, struct nic_ctl_reg *r, char *err, size_t cap)
{
	const char *p = v, *end = v + vlen;

	while (p < end) {
		const char *comma = memchr(p, ',', (size_t)(end - p));
		size_t len = (size_t)((comma ? comma : end) - p);
		struct nic_ctl_async *a = &r->asyncs[r->n_asyncs];
		char tmp[48];
		const char *q = tmp;

		if (r->n_asyncs == NIC_CTL_MAX_ASYNC) {
			errf(err, cap, "async: more than %u entries", NIC_CTL_MAX_ASYNC);
			return -1;
		}
		if (len > 43) { /* four 10-digit numbers and three separators at most */
			errf(err, cap,
			     "async: entry %u: '%.20s...' is not ENDPOINT:CHUNK+COUNT:ROOT",
			     r->n_asyncs, p);
			return -1;
		}
		memcpy(tmp, p, len);
		tmp[len] = '\0';
		if (take_u32(&q, &a->ep) || take(&q, ":") || take_u32(&q, &a->chunk) ||
		    take(&q, "+") || take_u32(&q, &a->count) || take(&q, ":") ||
		    take_u32(&q, &a->root) || *q) {
			errf(err, cap, "async: entry %u: '%s' is not ENDPOINT:CHUNK+COUNT:ROOT",
			     r->n_asyncs, tmp);
			return -1;
		}
		if (a->ep >= r->n_eps || !a->count || a->chunk >= r->chunks[a->ep] ||
		    a->count > r->chunks[a->ep] - a->chunk) {
			errf(err, cap, "async: entry %u: endpoint %u has no chunks [%u, %u + %u)",
			     r->n_asyncs, a->ep, a->chunk, a->chunk, a->count);
			return -1;
		}
		if (a->root >= r->n) {
			errf(err, cap, "async: entry %u: root %u is not below n = %u", r->n_asyncs,
			     a->root, r->n);
			return -1;
		}
		if (r->n_asyncs && (a->ep < a[-1].ep ||
				    (a->ep == a[-1].ep && a->chunk < a[-1].chunk + a[-1].count))) {
			errf(err, cap,
			     "async: entry %u: not in (endpoint, chunk) order, or overlapping",
			     r->n_asyncs);
			return -1;
		}
		r->n_asyncs++;
		p += len + (comma ? 1 : 0);
		if (comma && p == end) {
			errf(err, cap, "async: an entry is missing after the last comma");
			return -1;
		}
	}
	return 0;
}

int nic_ctl_parse_register(const char *args, const struct nic_ctl_reg_limits *lim,
			   const struct nic_ctl_session *s, struct nic_ctl_reg *r, char *err,
			   size_t cap)
{
	enum {
		K_JOB,
		K_KEY,
		K_MAC,
		K_N,
		K_DTYPE,
		K_FRAG,
		K_CHUNK,
		K_CHUNKS,
		K_RANKS,
		K_SHORT,
		K_COMP,
		K_ORDER,
		K_ASYNC,
		K_STALE,
		K_COUNT
	};
	static const char *const keys[K_COUNT] = {"job",  "key",   "mac",    "n",     "dtype",
						  "frag", "chunk", "chunks", "ranks", "short",
						  "comp", "order", "async",  "stale"};
	const char *val[K_COUNT] = {0};
	size_t vlen[K_COUNT] = {0};
	const char *p = args;
	const char *verb = r->grow ? "GROW" : "REGISTER";
	bool grow = r->grow;
	uint64_t v;
	unsigned k;

	memset(r, 0, offsetof(struct nic_ctl_reg, chunks));
	r->grow = grow;
	while (*p) {
		const char *tok, *eq;
		size_t len;

		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		tok = p;
		while (*p && *p != ' ' && *p != '\t')
			p++;
		len = (size_t)(p - tok);
		eq = memchr(tok, '=', len);
		if (!eq) {
			errf(err, cap, "'%.*s': expected key=value", (int)(len > 40 ? 40 : len),
			     tok);
			return -1;
		}
		for (k = 0; k < K_COUNT; k++)
			if (strlen(keys[k]) == (size_t)(eq - tok) &&
			    memcmp(tok, keys[k], (size_t)(eq - tok)) == 0)
				break;
		if (k == K_COUNT) {
			errf(err, cap,
			     "unknown key '%.*s' (%s takes job, %sn, dtype, frag, chunk, chunks, "
			     "ranks, short, comp, order, async, stale)",
			     (int)(eq - tok > 20 ? 20 : eq - tok), tok, verb,
			     grow ? "" : "key, mac, ");
			return -1;
		}
		if (grow && (k == K_KEY || k == K_MAC)) {
			errf(err, cap, "%s: GROW keeps the job's key and MAC mode", keys[k]);
			return -1;
		}
		if (val[k]) {
			errf(err, cap, "%s: given twice", keys[k]);
			return -1;
		}
		val[k] = eq + 1;
		vlen[k] = len - (size_t)(eq + 1 - tok);
	}
	for (k = 0; k < K_COUNT; k++)
		if (!val[k] && k != K_FRAG && k != K_CHUNK && k != K_SHORT && k != K_MAC &&
		    k != K_COMP && k != K_ORDER && k != K_ASYNC && k != K_STALE &&
		    (k != K_KEY || !grow)) {
			errf(err, cap, "%s: missing", keys[k]);
			return -1;
		}
	if (number("job", val[K_JOB], vlen[K_JOB], 1, UINT32_MAX, false, &v, err, cap))
		return -1;
	r->job = (uint32_t)v;
	if (!grow && nic_ctl_unwrap_key(s, r->job, val[K_KEY], vlen[K_KEY], r->key)) {
		errf(err, cap,
		     "key: not the job's key wrapped on this connection (%u hex digits: nonce, "
		     "key, tag)",
		     NIC_CTL_WRAP_HEX);
		return -1;
	}
	r->mac = NIC_MAC_PAYLOAD;
	if (val[K_MAC]) {
		char m[12] = "";
		int mode = -1;

		if (vlen[K_MAC] < sizeof(m)) {
			memcpy(m, val[K_MAC], vlen[K_MAC]);
			mode = nic_mac_mode_parse(m);
		}
		if (mode < 0) {
			errf(err, cap, "mac: '%.*s' is not header, payload or off",
			     (int)(vlen[K_MAC] > 20 ? 20 : vlen[K_MAC]), val[K_MAC]);
			return -1;
		}
		r->mac = (uint8_t)mode;
	}
	if (number("n", val[K_N], vlen[K_N], 2, lim->max_workers, false, &v, err, cap))
		return -1;
	r->n = (uint32_t)v;
	{
		char dt[8] = "";
		int t;

		if (vlen[K_DTYPE] < sizeof(dt))
			memcpy(dt, val[K_DTYPE], vlen[K_DTYPE]), dt[vlen[K_DTYPE]] = '\0';
		t = nic_dtype_parse(dt);
		if (t < 0) {
			errf(err, cap, "dtype: '%.*s' is not fp32, fp16 or bf16",
			     (int)(vlen[K_DTYPE] > 20 ? 20 : vlen[K_DTYPE]), val[K_DTYPE]);
			return -1;
		}
		r->dtype = (uint8_t)t;
	}
	r->frag = lim->dflt_frag;
	if (val[K_FRAG]) {
		if (number("frag", val[K_FRAG], vlen[K_FRAG], 64, lim->max_frag, true, &v, err,
			   cap))
			return -1;
		r->frag = (uint32_t)v;
	}
	r->chunk = lim->dflt_chunk;
	if (val[K_CHUNK]) {
		if (number("chunk", val[K_CHUNK], vlen[K_CHUNK], r->frag, NIC_CTL_MAX_CHUNK, true,
			   &v, err, cap))
			return -1;
		r->chunk = (uint32_t)v;
	}
	if (r->chunk < r->frag) {
		errf(err, cap, "frag: %u is larger than the chunk (%u)", r->frag, r->chunk);
		return -1;
	}
	/* compressed pushes (fp32 only; the SS says which rates fit its fragments) */
	if (val[K_COMP]) {
		if (number("comp", val[K_COMP], vlen[K_COMP], 1, 1000000, false, &v, err, cap))
			return -1;
		if (r->dtype != PBOX_DTYPE_FP32) {
			errf(err, cap, "comp: compressed pushes are of fp32 data only");
			return -1;
		}
		r->comp = (uint32_t)v;
	}
	if (val[K_ORDER]) {
		bool rank = vlen[K_ORDER] == 4 && memcmp(val[K_ORDER], "rank", 4) == 0;

		if (!rank && !(vlen[K_ORDER] == 7 && memcmp(val[K_ORDER], "arrival", 7) == 0)) {
			errf(err, cap, "order: '%.*s' is not arrival or rank",
			     (int)(vlen[K_ORDER] > 20 ? 20 : vlen[K_ORDER]), val[K_ORDER]);
			return -1;
		}
		r->in_order = rank;
	}
	r->stale = 0;
	if (val[K_STALE]) {
		if (number("stale", val[K_STALE], vlen[K_STALE], 0, UINT32_MAX, false, &v, err,
			   cap))
			return -1;
		r->stale = (uint32_t)v;
	}
	if (chunk_list(val[K_CHUNKS], vlen[K_CHUNKS], lim->n_eps, r, err, cap) ||
	    rank_list(val[K_RANKS], vlen[K_RANKS], r, err, cap))
		return -1;
	r->n_shorts = 0;
	r->n_asyncs = 0;
	if (val[K_SHORT] && short_list(val[K_SHORT], vlen[K_SHORT], r, err, cap))
		return -1;
	return val[K_ASYNC] ? async_list(val[K_ASYNC], vlen[K_ASYNC], r, err, cap) : 0;
}

/* ---- the client ------------------------------------------------------------------ */

uint64_t nic_ctl_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int wait_fd(int fd, short ev, uint64_t deadline)
{
	for (;;) {
		uint64_t now = nic_ctl_now();
		struct pollfd p = {.fd = fd, .events = ev};
		int r;

		if (now >= deadline)
			return 0;
		r = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -1;
	}
}

int nic_ctl_connect(uint32_t ip_be, uint16_t port, uint64_t deadline)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1, e = 0;
	socklen_t el = sizeof(e);

	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = ip_be;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		if (errno != EINPROGRESS)
			goto fail;
		if (wait_fd(fd, POLLOUT, deadline) != 1) {
			errno = ETIMEDOUT;
			goto fail;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) || e) {
			errno = e ? e : errno;
			goto fail;
		}
	}
	/* blocking again: callers send whole lines and read with deadlines */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
		goto fail;
	return fd;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

int nic_ctl_send(int fd, const char *line)
{
	size_t n = strlen(line), off = 0;
	struct iovec iov[2] = {{(void *)(uintptr_t)line, n}, {"\n", 1}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};

	while (off < n + 1) {
		ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = {.fd = fd, .events = POLLOUT};

			poll(&p, 1, 100); /* a non-blocking socket: until it takes more */
			continue;
		}
		if (w <= 0)
			return -1;
		off += (size_t)w;
		/* rare: a partial send; move the iovecs on */
		while (mh.msg_iovlen && (size_t)w >= mh.msg_iov[0].iov_len) {
			w -= (ssize_t)mh.msg_iov[0].iov_len;
			mh.msg_iov++;
			mh.msg_iovlen--;
		}
		if (mh.msg_iovlen) {
			mh.msg_iov[0].iov_base = (char *)mh.msg_iov[0].iov_base + w;
			mh.msg_iov[0].iov_len -= (size_t)w;
		}
	}
	return 0;
}

int nic_ctl_recv_line(int fd, char *out, size_t cap, uint64_t deadline)
{
	size_t n = 0;

	for (;;) {
		char c;
		ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);

		if (r == 1) {
			if (c == '\n') {
				if (n && out[n - 1] == '\r')
					n--;
				out[n] = '\0';
				return 1;
			}
			if (n + 1 >= cap)
				return -1;
			out[n++] = c;
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return -1;
		r = wait_fd(fd, POLLIN, deadline);
		if (r <= 0)
			return r;
	}
}

int nic_ctl_auth(int fd, const uint8_t box_key[NIC_KEY_LEN], struct nic_ctl_session *s,
		 uint64_t deadline, char *err, size_t cap)
{
	char line[256], nc[2 * NIC_CTL_NONCE_LEN + 1], pr[65];
	uint8_t proof[32];
	int r;

	memset(s, 0, sizeof(*s));
	randombytes_buf(s->nc, sizeof(s->nc));
	sodium_bin2hex(nc, sizeof(nc), s->nc, sizeof(s->nc));
	snprintf(line, sizeof(line), "AUTH %s", nc);
	if (nic_ctl_send(fd, line)) {
		errf(err, cap, "AUTH: cannot send: %s", strerror(errno));
		return -1;
	}
	r = nic_ctl_recv_line(fd, line, sizeof(line), deadline);
	if (r != 1) {
		errf(err, cap, "AUTH: %s", r == 0 ? "no answer in time" : "connection closed");
		return -1;
	}
	if (strncmp(line, "ERR ", 4) == 0) {
		errf(err, cap, "AUTH: the box says: %s", line + 4);
		return -1;
	}
	if (nic_ctl_parse_auth_ok(line, s->nb, proof)) {
		errf(err, cap, "AUTH: unexpected reply '%.80s'", line);
		return -1;
	}
	nic_ctl_session_derive(s, box_key);
	if (sodium_memcmp(proof, s->box_proof, sizeof(proof))) {
		errf(err, cap, "AUTH: the box does not hold our box key (its proof is wrong)");
		return -1;
	}
	sodium_bin2hex(pr, sizeof(pr), s->client_proof, sizeof(s->client_proof));
	snprintf(line, sizeof(line), "PROVE %s", pr);
	if (nic_ctl_send(fd, line)) {
		errf(err, cap, "PROVE: cannot send: %s", strerror(errno));
		return -1;
	}
	r = nic_ctl_recv_line(fd, line, sizeof(line), deadline);
	if (r != 1 || strcmp(line, "OK") != 0) {
		errf(err, cap, "PROVE: %s",
		     r == 0  ? "no answer in time"
		     : r < 0 ? "connection closed"
			     : line);
		return -1;
	}
	s->authed = true;
	return 0;
}

int nic_ctl_endpoints(int fd, struct nic_ctl_ep *eps, unsigned max, struct nic_ctl_geometry *g,
		      uint64_t deadline, char *err, size_t cap)
{
	char line[512];
	unsigned n = 0;
	int r;

	if (nic_ctl_send(fd, "ENDPOINTS")) {
		errf(err, cap, "ENDPOINTS: cannot send: %s", strerror(errno));
		return -1;
	}
	while ((r = nic_ctl_recv_line(fd, line, sizeof(line), deadline)) == 1) {
		struct nic_ctl_ep e;

		if (strncmp(line, "EP ", 3) == 0) {
			if (nic_ctl_parse_ep(line, &e) || e.idx != n || n == max) {
				errf(err, cap, "ENDPOINTS: a bad endpoint line: '%.80s'", line);
				return -1;
			}
			eps[n++] = e;
			continue;
		}
		if (nic_ctl_parse_geometry(line, g) || g->n_eps != n || !n) {
			errf(err, cap, "ENDPOINTS: unexpected reply '%.80s' after %u endpoints",
			     line, n);
			return -1;
		}
		return 0;
	}
	errf(err, cap, "ENDPOINTS: %s", r == 0 ? "no answer in time" : "connection closed");
	return -1;
}

int nic_ctl_register(int fd, const struct nic_ctl_session *s, const struct nic_ctl_reg *r,
		     struct nic_ctl_reg_ok *ok, uint64_t deadline, char *err, size_t cap)
{
	size_t room = 160 + NIC_CTL_WRAP_HEX + 12 * (size_t)r->n_eps + 22 * (size_t)r->n +
		      34 * (size_t)r->n_shorts + 46 * (size_t)r->n_asyncs;
	char *req = malloc(room), line[1024];
	const char *verb = r->grow ? "GROW" : "REGISTER";
	int rc;

	if (!req) {
		errf(err, cap, "%s: out of memory", verb);
		return -1;
	}
	if (nic_ctl_format_register(req, room, s, r) < 0) {
		free(req);
		errf(err, cap, "%s: the request does not fit in %zu bytes", verb, room);
		return -1;
	}
	rc = nic_ctl_send(fd, req);
	free(req);
	if (rc) {
		errf(err, cap, "%s: cannot send: %s", verb, strerror(errno));
		return -1;
	}
	while ((rc = nic_ctl_recv_line(fd, line, sizeof(line), deadline)) == 1) {
		if (strncmp(line, "EP ", 3) == 0)
			continue; /* the endpoints again, as ENDPOINTS said */
		if (strncmp(line, "ERR ", 4) == 0) {
			errf(err, cap, "%s", line + 4);
			return 1;
		}
		if (nic_ctl_parse_reg_ok(line, ok) || ok->job != r->job) {
			errf(err, cap, "%s: unexpected reply '%.80s'", verb, line);
			return -1;
		}
		return 0;
	}
	errf(err, cap, "%s: %s", verb, rc == 0 ? "no answer in time" : "connection closed");
	return -1;
}
