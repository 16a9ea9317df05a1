/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_LINK_H
#define PBOX_WK_LINK_H

#include "wk_ctx.h"

/* ---- link.c: the ranks' TCP links ------------------------------------------- */

/* A line from @fd before @deadline (ns): 1, 0 the deadline passed, -1 closed. */
int wk_line_wait(int fd, char *buf, uint32_t *len, uint32_t cap, char *out, size_t out_cap,
		 uint64_t deadline);
/* Next complete line of @fd's buffer, non-blocking: 1 a line in @out, 0 none
 * yet, -1 the connection closed. */
int wk_line_poll(int fd, char *buf, uint32_t *len, uint32_t cap, char *out, size_t out_cap);
/* A TCP connection to @ip_be:@port (no delay), or -1 with errno. */
int wk_tcp_to(uint32_t ip_be, uint16_t port);
/* A TCP listener on @ip_be:@port (address reuse), or -1 with errno. */
int wk_tcp_listen(uint32_t ip_be, uint16_t port);
/* A connection whose peer host does not answer for @us (keepalive probes,
 * a user timeout) errors with ETIMEDOUT; 0: the kernel's defaults. */
void wk_tcp_dead_after(int fd, uint64_t us);
/* Proving a secret to rank 0 on a rendezvous or bootstrap connection:
 * rank 0 greets each connection with "NONCE <hex>" (gather.h), and the
 * first line the rank sends ends in " proof=<hex>", HMAC-SHA-256 under a
 * key derived from the secret of "pbox proof v1", the nonce and the line
 * before " proof=". A line captured on one connection proves nothing on
 * another. wk_nonce_wait(): the greeting, 1, or 0 / -1 as wk_line_wait().
 * wk_proof_append(): @line (a buffer of @cap) with its proof. wk_proof_cut():
 * 1 when @line ends in a proof that holds, 0 when it ends in one that does
 * not, -1 when it has none; the proof cut off in every case. */
#define WK_PROOF_KEY 32
int wk_nonce_wait(int fd, char *buf, uint32_t *len, uint32_t cap, uint8_t *nonce,
		  uint64_t deadline);
void wk_proof_append(const uint8_t *key, const uint8_t *nonce, char *line, size_t cap);
int wk_proof_cut(const uint8_t *key, const uint8_t *nonce, char *line);
/* Rank 0's verdict to a rank that will not start: "ERR code=C gone=R,R... TEXT",
 * the PBOX_E* code and the ranks that are gone (@gone[r] of @n; NULL or
 * none: "-") as fields, TEXT for people. 0, or -1 when it cannot be sent. */
int wk_verdict_send(int fd, int code, const bool *gone, uint32_t n, const char *text);
/* The code a verdict @e carries, the same on every rank that reads it
 * (PBOX_EPEER when it is no PBOX_E* code or its gone list is malformed: a
 * peer's fault), its gone ranks marked in @gone (of @n; NULL: not wanted). */
int wk_verdict_of(const struct rp_err *e, bool *gone, uint32_t n);
/* @line as such a verdict: its code in @code (wk_verdict_of()), its gone
 * ranks marked in @gone (of @n), @text at its words. 0; -1 when @line is no
 * verdict. */
int wk_verdict_parse(char *line, int *code, bool *gone, uint32_t n, const char **text);
/* The key that signs the job's datagrams, from [job] token, the job id and
 * rank 0's @nonce (0 until the bootstrap has it). */
void wk_set_key(struct pbox *px, uint64_t nonce);

#endif /* PBOX_WK_LINK_H */
