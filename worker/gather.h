/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Rank 0's door: the first message of every connection to its rendezvous
 * or bootstrap port, gathered from all of them at once. Each connection
 * has WK_GATHER_NS from its accept and a byte cap to complete its message;
 * at most WK_GATHER_MAX are pending (WK_GATHER_PER_SOURCE from one
 * address), a new one taking the oldest's place (its own address's first)
 * when full. So a connection that says nothing, drips, or sends a line
 * without end holds nobody up and cannot keep a rank out. Every connection
 * is greeted at once with "NONCE <hex>": WK_GATHER_NONCE fresh random bytes
 * that its first message proves a secret against (boot.c's wk_proof()), so
 * a message captured on another connection proves nothing. A leaf: sockets
 * and buffers only, no context.
 */
#ifndef PBOX_WK_GATHER_H
#define PBOX_WK_GATHER_H

#include <stddef.h>
#include <stdint.h>

#define WK_GATHER_NS	     (2ull * 1000000000ull)
#define WK_GATHER_MAX	     128
#define WK_GATHER_PER_SOURCE 16
#define WK_GATHER_NONCE	     16

/* Is @buf (@len bytes so far) a whole message? Its length, 0 while more
 * is to come, or (size_t)-1 when it never will be (refused as it is). */
typedef size_t (*wk_gather_done_fn)(const char *buf, size_t len, void *arg);

struct wk_gather;

/* Gather on listening socket @lfd (not taken over), messages of at most
 * @cap bytes. NULL: out of memory. */
struct wk_gather *wk_gather_open(int lfd, size_t cap, wk_gather_done_fn done, void *arg);

/* One whole message: 1, with its connection in *@fd (the caller's now,
 * blocking), the message in *@msg (*@len bytes, NUL-terminated, valid
 * until the next call; anything the peer sent after it is not kept) and
 * the nonce that connection was greeted with in @nonce; -2 when a
 * connection was dropped instead (@why says who and why: the caller logs
 * it); 0 at @deadline (wk_now()'s clock). */
int wk_gather_next(struct wk_gather *g, uint64_t deadline, int *fd, const char **msg, size_t *len,
		   uint8_t nonce[WK_GATHER_NONCE], char *why, size_t why_cap);

/* Closes every connection still pending. */
void wk_gather_close(struct wk_gather *g);

#endif /* PBOX_WK_GATHER_H */
