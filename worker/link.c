/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ranks' TCP links, under the rank protocol (rank_proto.h): connecting
 * and listening, lines read whole from a non-blocking socket, the NONCE a
 * door greets a connection with and the proof a line carries under it, the
 * verdict (ERR or GO) rank 0 ends a bootstrap or rendezvous with, and the
 * job's key from its token and rank 0's nonce. The bootstrap (boot.c), the
 * rendezvous (rdv.c), the engine's control lines and pbox_shrink() use them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gather.h"
#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_link.h"

int wk_verdict_send(int fd, int code, const bool *gone, uint32_t n, const char *text)
{
	char list[256];

	rp_ranks_format(list, sizeof(list), gone, n);
	return RP_SEND(fd, ERR, err, .code = code, .gone = list, .why = text);
}

int wk_verdict_of(const struct rp_err *e, bool *gone, uint32_t n)
{
	if (rp_ranks_parse(e->gone, gone, n))
		return PBOX_EPEER;
	return e->code < PBOX_ENODEV || e->code > PBOX_EINVAL ? PBOX_EPEER : e->code;
}

int wk_verdict_parse(char *line, int *code, bool *gone, uint32_t n, const char **text)
{
	char err[160];
	struct rp_msg m;

	if (rp_expect(line, RP_ERR, &m, err, sizeof(err)) || rp_ranks_parse(m.err.gone, NULL, 0))
		return -1;
	*code = wk_verdict_of(&m.err, gone, n);
	*text = m.err.why;
	return 0;
}

/* Take one line out of @buf (@*len bytes); 1 when there was one. */
static int take_line(char *buf, uint32_t *len, char *out, size_t out_cap)
{
	char *nl = memchr(buf, '\n', *len);
	size_t n;

	if (!nl)
		return 0;
	n = (size_t)(nl - buf);
	snprintf(out, out_cap, "%.*s", (int)n, buf);
	*len -= (uint32_t)(n + 1);
	memmove(buf, nl + 1, *len);
	return 1;
}

int wk_line_poll(int fd, char *buf, uint32_t *len, uint32_t cap, char *out, size_t out_cap)
{
	ssize_t r;

	if (take_line(buf, len, out, out_cap))
		return 1;
	if (*len >= cap) /* a line longer than the buffer: the peer is not speaking our protocol */
		return -1;
	r = recv(fd, buf + *len, cap - *len, MSG_DONTWAIT);
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
		return -1;
	if (r > 0)
		*len += (uint32_t)r;
	return take_line(buf, len, out, out_cap);
}

int wk_line_wait(int fd, char *buf, uint32_t *len, uint32_t cap, char *out, size_t out_cap,
		 uint64_t deadline)
{
	for (;;) {
		int r = wk_line_poll(fd, buf, len, cap, out, out_cap);
		uint64_t now = wk_now();
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (r)
			return r;
		if (now >= deadline)
			return 0;
		poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
	}
}

int wk_nonce_wait(int fd, char *buf, uint32_t *len, uint32_t cap, uint8_t *nonce, uint64_t deadline)
{
	char line[64 + 2 * WK_GATHER_NONCE], err[160];
	int rc = wk_line_wait(fd, buf, len, cap, line, sizeof(line), deadline);
	struct rp_msg m;
	size_t got = 0;

	if (rc != 1)
		return rc;
	if (rp_expect(line, RP_NONCE, &m, err, sizeof(err)) ||
	    strlen(m.nonce.nonce) != 2 * WK_GATHER_NONCE ||
	    sodium_hex2bin(nonce, WK_GATHER_NONCE, m.nonce.nonce, 2 * WK_GATHER_NONCE, NULL, &got,
			   NULL) ||
	    got != WK_GATHER_NONCE)
		return -2;
	return 1;
}

static void proof_of(const uint8_t *key, const uint8_t *nonce, const char *line, size_t n,
		     char hex[2 * crypto_auth_hmacsha256_BYTES + 1])
{
	static const char label[] = "pbox proof v1";
	uint8_t mac[crypto_auth_hmacsha256_BYTES];
	crypto_auth_hmacsha256_state st;

	crypto_auth_hmacsha256_init(&st, key, WK_PROOF_KEY);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label, sizeof(label));
	crypto_auth_hmacsha256_update(&st, nonce, WK_GATHER_NONCE);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)line, n);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_bin2hex(hex, 2 * sizeof(mac) + 1, mac, sizeof(mac));
}

void wk_proof_append(const uint8_t *key, const uint8_t *nonce, char *line, size_t cap)
{
	char hex[2 * crypto_auth_hmacsha256_BYTES + 1];
	size_t n = strlen(line);

	proof_of(key, nonce, line, n, hex);
	snprintf(line + n, cap - n, " proof=%s", hex);
}

int wk_proof_cut(const uint8_t *key, const uint8_t *nonce, char *line)
{
	char want[2 * crypto_auth_hmacsha256_BYTES + 1];
	char *p = strstr(line, " proof=");
	size_t n;

	if (!p)
		return -1;
	n = (size_t)(p - line);
	p += 7;
	proof_of(key, nonce, line, n, want);
	line[n] = '\0';
	return strlen(p) == sizeof(want) - 1 && sodium_memcmp(p, want, sizeof(want) - 1) == 0;
}

int wk_tcp_to(uint32_t ip_be, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	sa.sin_addr.s_addr = ip_be;
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int wk_tcp_listen(uint32_t ip_be, uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	sa.sin_addr.s_addr = ip_be;
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 128)) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

void wk_tcp_dead_after(int fd, uint64_t us)
{
	int one = 1, s = (int)(us / 3000000), cnt = 2;
	unsigned ms = (unsigned)(us / 1000);

	if (!us)
		return;
	if (s < 1)
		s = 1;
	/* idle s, then 2 probes s apart: an answerless host is found in ~3 s */
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &s, sizeof(s));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &s, sizeof(s));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof(ms));
}

void wk_set_key(struct pbox *px, uint64_t nonce)
{
	nic_job_key(px->cfg.job.token, px->net.job, nonce, px->net.jkey);
	nic_mac_init(&px->net.mac, px->cfg.job.mac, px->net.jkey);
}
