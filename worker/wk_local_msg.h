/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_LOCAL_MSG_H
#define PBOX_WK_LOCAL_MSG_H

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "wk_ctx.h"
#include "local.h"

/* ---- local_msg.c: the machine's socket and its messages ---- */

/* The layout a rank of the machine reports (pbox_layout()). */
int wk_local_layout(const struct pbox *px, struct pbox_layout_info *o);
/* The proof of [job] token a rank brings to the leader (LM_PROOF bytes). */
void wk_lc_proof(const struct pbox *px, uint8_t *out);
/* The socket's abstract name: the job and the leader's endpoint. */
socklen_t wk_lc_sock_name(const struct pbox *px, struct sockaddr_un *a);
/* A message of @len bytes, with @memfd passed (SCM_RIGHTS) where >= 0;
 * a short one (no payload), FAIL with its text: 0 or -1. */
int wk_lc_msg_send(int fd, const struct lmsg *m, size_t len, int memfd);
int wk_lc_say(const struct wk_local *lc, int fd, uint8_t type, uint64_t key, uint32_t round,
	      uint32_t piece);
int wk_lc_say_fail(const struct wk_local *lc, int fd, int code, uint16_t flags, const char *msg);
/* A message (and a passed descriptor into *@memfd, else -1): its length,
 * 0 the peer closed, -1 an error or nothing yet (non-blocking). */
ssize_t wk_lc_msg_recv(int fd, struct lmsg *m, int *memfd, int flags);
/* A message within @deadline (blocking): as wk_lc_msg_recv(), 0 also on timeout. */
ssize_t wk_lc_msg_wait(int fd, struct lmsg *m, int *memfd, uint64_t deadline);
/* The leader's layout, told to its machine's ranks (READY, RENEW): the
 * network job's, in the world's numbers. */
int wk_lc_leader_layout(const struct pbox *px, struct pbox_layout_info *o);

#endif /* PBOX_WK_LOCAL_MSG_H */
