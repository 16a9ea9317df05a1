/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rank 0's door (gather.h): every pending connection polled at once, each
 * read into a buffer of its own until its message is whole, its time is
 * up, or its buffer is full.
 */
#include "gather.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
#include <time.h>
#include <unistd.h>

#include "rank_proto.h"

struct pending {
	int fd; /* -1: a free slot */
	uint32_t src_be;
	uint64_t born; /* accepted (ns) */
	uint8_t nonce[WK_GATHER_NONCE];
	size_t len;
	char *buf; /* cap + 1 bytes */
	char name[INET_ADDRSTRLEN + 8];
};

struct wk_gather {
	int lfd;
	size_t cap;
	wk_gather_done_fn done;
	void *arg;
	char *taken; /* the message handed out last: freed at the next call */
	struct pending p[WK_GATHER_MAX];
};

static uint64_t now_ns(void) /* wk_now()'s clock */
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

struct wk_gather *wk_gather_open(int lfd, size_t cap, wk_gather_done_fn done, void *arg)
{
	struct wk_gather *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	g->lfd = lfd;
	g->cap = cap;
	g->done = done;
	g->arg = arg;
	for (unsigned i = 0; i < WK_GATHER_MAX; i++)
		g->p[i].fd = -1;
	return g;
}

static void drop(struct pending *p)
{
	close(p->fd);
	free(p->buf);
	*p = (struct pending){.fd = -1};
}

/* The slot of the oldest pending connection from @src_be (0: any). */
static int oldest(const struct wk_gather *g, uint32_t src_be)
{
	int o = -1;

	for (int i = 0; i < WK_GATHER_MAX; i++)
		if (g->p[i].fd >= 0 && (!src_be || g->p[i].src_be == src_be) &&
		    (o < 0 || g->p[i].born < g->p[o].born))
			o = i;
	return o;
}

/* NONCE to a connection just accepted: a few bytes into an empty socket
 * buffer, so never a short write. */
static int greet(struct pending *p)
{
	char hex[2 * WK_GATHER_NONCE + 1], line[64 + sizeof(hex)];
	struct rp_msg m = {.verb = RP_NONCE, .nonce = {.nonce = hex}};
	int n;

	if (getrandom(p->nonce, sizeof(p->nonce), 0) != (ssize_t)sizeof(p->nonce))
		return -1;
	sodium_bin2hex(hex, sizeof(hex), p->nonce, WK_GATHER_NONCE);
	n = rp_format(line, sizeof(line) - 1, &m);
	if (n < 0)
		return -1;
	line[n++] = '\n';
	return send(p->fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) == n ? 0 : -1;
}

/* A new connection into a free slot, or the oldest's; -2 and @why when
 * one was dropped for it, else 0. */
static int take_new(struct wk_gather *g, uint64_t now, char *why, size_t why_cap)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	int fd = accept4(g->lfd, (struct sockaddr *)&sa, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
	unsigned same = 0, used = 0;
	int slot = -1, one = 1, rc = 0;

	if (fd < 0)
		return 0;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	for (int i = 0; i < WK_GATHER_MAX; i++) {
		if (g->p[i].fd < 0) {
			if (slot < 0)
				slot = i;
			continue;
		}
		used++;
		same += g->p[i].src_be == sa.sin_addr.s_addr;
	}
	if (same >= WK_GATHER_PER_SOURCE || used >= WK_GATHER_MAX) {
		slot = oldest(g, same >= WK_GATHER_PER_SOURCE ? sa.sin_addr.s_addr : 0);
		snprintf(why, why_cap, "a connection from %s gave its place to a newer one",
			 g->p[slot].name);
		drop(&g->p[slot]);
		rc = -2;
	}
	g->p[slot] = (struct pending){.fd = fd, .src_be = sa.sin_addr.s_addr, .born = now};
	g->p[slot].buf = malloc(g->cap + 1);
	inet_ntop(AF_INET, &sa.sin_addr, g->p[slot].name, INET_ADDRSTRLEN);
	snprintf(g->p[slot].name + strlen(g->p[slot].name), 8, ":%u", ntohs(sa.sin_port));
	if (!g->p[slot].buf) {
		snprintf(why, why_cap, "out of memory for a connection from %s", g->p[slot].name);
		drop(&g->p[slot]);
		return -2;
	}
	if (greet(&g->p[slot])) {
		snprintf(why, why_cap, "could not greet a connection from %s: %s", g->p[slot].name,
			 strerror(errno));
		drop(&g->p[slot]);
		return -2;
	}
	return rc;
}

/* Read what @p has; 1 with a whole message, 0 for more, -2 (why) dropped. */
static int read_some(struct wk_gather *g, struct pending *p, char *why, size_t why_cap)
{
	ssize_t r = recv(p->fd, p->buf + p->len, g->cap - p->len, MSG_DONTWAIT);
	size_t whole;

	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
		snprintf(why, why_cap, "a connection from %s closed before its message was whole",
			 p->name);
		drop(p);
		return -2;
	}
	if (r > 0)
		p->len += (size_t)r;
	p->buf[p->len] = '\0';
	whole = g->done(p->buf, p->len, g->arg);
	if (whole == (size_t)-1 || (!whole && p->len == g->cap)) {
		snprintf(why, why_cap, "a connection from %s sent %s", p->name,
			 whole ? "something else than the protocol's first message"
			       : "more than a first message may hold");
		drop(p);
		return -2;
	}
	return whole ? 1 : 0;
}

int wk_gather_next(struct wk_gather *g, uint64_t deadline, int *fd, const char **msg, size_t *len,
		   uint8_t nonce[WK_GATHER_NONCE], char *why, size_t why_cap)
{
	free(g->taken);
	g->taken = NULL;
	for (;;) {
		struct pollfd pfd[WK_GATHER_MAX + 1];
		int slot[WK_GATHER_MAX + 1], n = 1, rc;
		uint64_t now = now_ns(), wake = deadline;

		/* a whole message already in a buffer (a peer that sent more) */
		for (int i = 0; i < WK_GATHER_MAX; i++) {
			struct pending *p = &g->p[i];
			size_t whole;

			if (p->fd < 0)
				continue;
			whole = p->len ? g->done(p->buf, p->len, g->arg) : 0;
			if (whole &&
			    whole != (size_t)-1) { /* handed over blocking, as accept()ed */
				fcntl(p->fd, F_SETFL, fcntl(p->fd, F_GETFL) & ~O_NONBLOCK);
				*fd = p->fd;
				*msg = g->taken = p->buf;
				*len = whole;
				memcpy(nonce, p->nonce, WK_GATHER_NONCE);
				p->buf[whole] = '\0';
				*p = (struct pending){.fd = -1};
				return 1;
			}
			if (now - p->born >= WK_GATHER_NS) {
				snprintf(why, why_cap,
					 "a connection from %s sent no whole message within %.0f s",
					 p->name, WK_GATHER_NS / 1e9);
				drop(p);
				return -2;
			}
			if (p->born + WK_GATHER_NS < wake)
				wake = p->born + WK_GATHER_NS;
		}
		if (now >= deadline)
			return 0;
		pfd[0] = (struct pollfd){.fd = g->lfd, .events = POLLIN};
		for (int i = 0; i < WK_GATHER_MAX; i++)
			if (g->p[i].fd >= 0) {
				pfd[n] = (struct pollfd){.fd = g->p[i].fd, .events = POLLIN};
				slot[n++] = i;
			}
		if (poll(pfd, (nfds_t)n, (int)((wake - now) / 1000000 + 1)) <= 0)
			continue;
		now = now_ns();
		for (int i = 1; i < n; i++)
			if (pfd[i].revents && g->p[slot[i]].fd >= 0 &&
			    (rc = read_some(g, &g->p[slot[i]], why, why_cap)) < 0)
				return rc;
		if ((pfd[0].revents & POLLIN) && (rc = take_new(g, now, why, why_cap)) < 0)
			return rc;
	}
}

void wk_gather_close(struct wk_gather *g)
{
	if (!g)
		return;
	for (int i = 0; i < WK_GATHER_MAX; i++)
		if (g->p[i].fd >= 0)
			drop(&g->p[i]);
	free(g->taken);
	free(g);
}
