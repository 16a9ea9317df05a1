/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Local aggregation's messages: the machine's socket (an abstract unix
 * socket named after the job and the leader's endpoint), the proof of
 * [job] token a rank brings, and the small messages on it (struct lmsg,
 * SOCK_SEQPACKET, a memfd passed with SCM_RIGHTS), checked as they are
 * read. And the layout a rank of the machine reports.
 */
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_submit.h"
#include "wk_local_msg.h"
#include "local.h"
#include "cuda/stage.h"
#include "sum.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

void wk_lc_proof(const struct pbox *px, uint8_t *out)
{
	uint8_t in[24] = "pbox-local";

	memcpy(in + 8, &px->cfg.job.token, 8);
	memcpy(in + 16, &px->cfg.job.id, 4);
	crypto_generichash(out, LM_PROOF, in, sizeof(in), NULL, 0);
}

/* The socket's abstract name: the job and the leader's endpoint. */
socklen_t wk_lc_sock_name(const struct pbox *px, struct sockaddr_un *a)
{
	const struct cfg_hostport *l = &px->loc->world_peers[px->loc->ranks[0]];
	char ip[INET_ADDRSTRLEN];
	int n;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "pbox/%u/%s:%u", px->cfg.job.id,
		     wk_ipstr(l->ip_be, ip), l->port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---- messages ----------------------------------------------------------- */

int wk_lc_msg_send(int fd, const struct lmsg *m, size_t len, int memfd)
{
	struct iovec iov = {.iov_base = (void *)m, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (memfd >= 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &memfd, sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

int wk_lc_say(const struct wk_local *lc, int fd, uint8_t type, uint64_t key, uint32_t round,
	      uint32_t piece)
{
	struct lmsg m = {
		.type = type, .epoch = lc->epoch, .key = key, .round = round, .piece = piece};

	return wk_lc_msg_send(fd, &m, LM_SHORT, -1);
}

int wk_lc_say_fail(const struct wk_local *lc, int fd, int code, uint16_t flags, const char *msg)
{
	struct lmsg m = {.type = LM_FAIL, .flags = flags, .code = code, .epoch = lc->epoch};

	snprintf(m.u.text, sizeof(m.u.text), "%s", msg);
	return wk_lc_msg_send(fd, &m, LM_SHORT + strlen(m.u.text) + 1, -1);
}

/* A message (and a passed descriptor into *@memfd, else -1): its length,
 * 0 the peer closed, -1 an error or nothing yet (non-blocking). */
ssize_t wk_lc_msg_recv(int fd, struct lmsg *m, int *memfd, int flags)
{
	struct iovec iov = {.iov_base = m, .iov_len = sizeof(*m)};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cm.buf,
			    .msg_controllen = sizeof(cm.buf)};
	ssize_t n;

	*memfd = -1;
	memset(m, 0, LM_SHORT);
	n = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(memfd, CMSG_DATA(c), sizeof(int));
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n < LM_SHORT) {
		if (*memfd >= 0)
			close(*memfd);
		*memfd = -1;
		errno = EPROTO;
		return -1;
	}
	if ((m->type == LM_TENSOR || m->type == LM_TENSOR_OK) && (m->flags & LMF_DEV) &&
	    (size_t)n < LM_SHORT + sizeof(m->u.ipc)) {
		if (*memfd >= 0)
			close(*memfd);
		*memfd = -1;
		errno = EPROTO; /* a CUDA tensor's message without its handle */
		return -1;
	}
	if (m->type == LM_FAIL || m->type == LM_HELLO)
		m->u.text[sizeof(m->u.text) - 1] = 0; /* FAIL: bounded; HELLO: fixed fields */
	return n;
}

/* A message within @deadline (blocking): as wk_lc_msg_recv(), 0 also on timeout. */
ssize_t wk_lc_msg_wait(int fd, struct lmsg *m, int *memfd, uint64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	uint64_t now = wk_now();

	*memfd = -1;
	if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
		return 0;
	return wk_lc_msg_recv(fd, m, memfd, 0);
}

/* ---- the plan: which ranks share a machine ------------------------------- */

/* The layout a rank of the machine reports: the world's size and its rank
 * in it; the others' the leader's (told by READY and RENEW). */
int wk_local_layout(const struct pbox *px, struct pbox_layout_info *o)
{
	const struct wk_local *lc = px->loc;

	if (!leader(lc))
		*o = lc->li;
	o->world_size = lc->world_n;
	o->rank = lc->world_rank;
	return PBOX_OK;
}

/* The leader's layout, told to its machine's ranks (READY, RENEW): the
 * network job's, in the world's numbers. */
int wk_lc_leader_layout(const struct pbox *px, struct pbox_layout_info *o)
{
	memset(o, 0, sizeof(*o));
	wk_net_layout(px, o);
	return wk_local_layout(px, o);
}
