/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rank protocol's codec: every line ranks say to each other over TCP
 * (the bootstrap, the rendezvous, the control lines of a running job, the
 * agreement on new tensors, the resume after a lost box), from one table.
 * nic/nic_ctl.h is the box's protocol; this is the ranks'.
 *
 * A line is a verb and its fields, each " name=value", in the table's
 * order, then a newline:
 *
 *     FAIL origin=3 code=-7 why=rank 3 lost the box
 *
 * RP_VERBS() lists the verbs; each one's RP_F_<VERB>() its fields, with a
 * type letter:
 *
 *     u  uint32_t, decimal             U  uint64_t, decimal
 *     i  int32_t, decimal              I  int64_t, decimal
 *     x  uint64_t, hex with 0x         y  a dtype: fp32, fp16 or bf16 (enum sum_dtype)
 *     a  an IPv4 address, dotted       p  a port, 1 to 65535
 *     e  an address and port, A:P      w  a word: one or more bytes, no space
 *     t  text: the rest of the line, spaces and all (the last field only)
 *
 * From the table come the enum (RP_FAIL), a struct per verb (struct
 * rp_fail { uint32_t origin; int32_t code; const char *why; }) in the union
 * of struct rp_msg (m.fail.origin), the formatter and the parser. Adding a
 * verb is a table row and its fields' line; nothing else changes here.
 *
 * The parser is strict: the verb known, every field present, in order, of
 * its type and in range, nothing after the last. It splits the line in
 * place (a word field ends where a NUL now is) and points the w and t
 * fields into it: the line outlives the message. A refusal says the verb,
 * the field and what is wrong, never more than what was read.
 */
#ifndef PBOX_WORKER_RANK_PROTO_H
#define PBOX_WORKER_RANK_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A line's bytes at most, its newline included; a text field is cut to fit. */
#define RP_LINE_MAX 1024
/* How much of a text field a line carries (a failure's message). */
#define RP_TEXT_MAX 400

/*      verb      member    fields
 * Bootstrap (boot.c): rank 0 greets with NONCE; a rank says HELLO, a T per
 * tensor and END; rank 0 answers ERR, or GO, an EP per box endpoint, END. */
#define RP_VERBS(X)                                                                                \
	X(NONCE, nonce, RP_F_NONCE)                                                                \
	X(HELLO, hello, RP_F_HELLO)                                                                \
	X(T, t, RP_F_T)                                                                            \
	X(END, end, RP_F_NONE)                                                                     \
	X(ERR, err, RP_F_ERR)                                                                      \
	X(GO, go, RP_F_GO)                                                                         \
	X(EP, ep, RP_F_EP)                                                                         \
	/* the rendezvous (rdv.c): JOIN; JOINED, a PEER per rank, END (or ERR) */                  \
	X(JOIN, join, RP_F_JOIN)                                                                   \
	X(JOINED, joined, RP_F_JOINED)                                                             \
	X(PEER, peer, RP_F_PEER)                                                                   \
	/* a running job's control lines (engine.c) */                                             \
	X(HB, hb, RP_F_NONE)                                                                       \
	X(BYE, bye, RP_F_NONE)                                                                     \
	X(REJOIN, rejoin, RP_F_NONE)                                                               \
	X(LOST, lost, RP_F_LOST)                                                                   \
	X(LEAVE, leave, RP_F_LEAVE)                                                                \
	X(FAIL, fail, RP_F_FAIL)                                                                   \
	/* new tensors agreed (grow.c) */                                                          \
	X(NEW, newt, RP_F_NEW)                                                                     \
	X(WAIT, wait, RP_F_WAIT)                                                                   \
	X(AT, at, RP_F_AT)                                                                         \
	X(PAST, past, RP_F_WAIT)                                                                   \
	X(MISMATCH, mismatch, RP_F_LEAVE)                                                          \
	X(GREW, grew, RP_F_GREW)                                                                   \
	/* rank 0's order of sends ([job] leader_order: flow.c) */                                 \
	X(ORD, ord, RP_F_ORD)                                                                      \
	/* resuming after a lost box (survive.c): a RESUME account each way,                       \
	 * R per tensor and D per range; rank 0's PLAN, P per tensor, O per                        \
	 * owned range, END, or REDO */                                                            \
	X(RESUME, resume, RP_F_RESUME)                                                             \
	X(R, r, RP_F_R)                                                                            \
	X(D, d, RP_F_D)                                                                            \
	X(PLAN, plan, RP_F_PLAN)                                                                   \
	X(P, p, RP_F_P)                                                                            \
	X(O, o, RP_F_O)                                                                            \
	X(REDO, redo, RP_F_LEAVE)

/* Each verb's fields, in order: F(s, name, type letter), s the verb's member */
#define RP_F_NONE(F, s)
/* 16 random bytes, hex: what this connection's proofs are bound to */
#define RP_F_NONCE(F, s) F(s, nonce, w)
/* what a rank says of its job (boot.c compares each with rank 0's own);
 * token: a hash of [job] token, never the token; peers: a hash of [peers] */
#define RP_F_HELLO(F, s)                                                                           \
	F(s, rank, u)                                                                              \
	F(s, world_size, U)                                                                        \
	F(s, job, U)                                                                               \
	F(s, token, U)                                                                             \
	F(s, chunk_size, U)                                                                        \
	F(s, mtu, U)                                                                               \
	F(s, bandwidth, U)                                                                         \
	F(s, peers, U)                                                                             \
	F(s, layout, U)                                                                            \
	F(s, heartbeat, U)                                                                         \
	F(s, compression, U)                                                                       \
	F(s, deterministic, U)                                                                     \
	F(s, leader_order, U)                                                                      \
	F(s, tensors, U)
/* a declared tensor */
#define RP_F_T(F, s) F(s, key, U) F(s, count, U) F(s, dtype, y) F(s, prio, i)
/* a refusal: its PBOX_E* code, the ranks it names ("-" or "1,5,7") and why */
#define RP_F_ERR(F, s) F(s, code, i) F(s, gone, w) F(s, why, t)
/* the job's fragment size, the box's endpoint count, the incarnation's nonce; */
/* txref: the box's transmit reference size (0: none said); an endpoint's
 * room: the bytes of state it would still take (UINT64_MAX: not said) */
#define RP_F_GO(F, s) F(s, frag, u) F(s, eps, u) F(s, nonce, x) F(s, txref, u)
#define RP_F_EP(F, s) F(s, ip, a) F(s, port, p) F(s, kbps, U) F(s, room, U)
/* pk: the rank's public key (hex) that JOINED's token is sealed to */
#define RP_F_JOIN(F, s)	  F(s, rank, u) F(s, world_size, u) F(s, ep, e) F(s, pk, w)
#define RP_F_JOINED(F, s) F(s, job, u) F(s, token, w)
#define RP_F_PEER(F, s)	  F(s, rank, u) F(s, ip, a) F(s, port, p)
#define RP_F_LOST(F, s)	  F(s, rank, u) F(s, why, t)
#define RP_F_LEAVE(F, s)  F(s, why, t)
/* origin: the rank that saw the failure first */
#define RP_F_FAIL(F, s) F(s, origin, u) F(s, code, i) F(s, why, t)
/* a rank's first use of new tensor @seq, in its collective @call; kind:
 * what it computes (enum wk_kind: 0 all-reduce, 1 a reduce-scatter's
 * shard, 2 an all-gather's, 3 a broadcast), root: its root rank */
#define RP_F_NEW(F, s)                                                                             \
	F(s, seq, u)                                                                               \
	F(s, key, U)                                                                               \
	F(s, count, U) F(s, dtype, y) F(s, prio, i) F(s, call, U) F(s, kind, u) F(s, root, u)
/* WAIT: rank 0 asks what a rank's collective @call is; PAST: one it had
 * used before, AT: this one (fresh: a new tensor) */
#define RP_F_WAIT(F, s) F(s, seq, u) F(s, call, U)
#define RP_F_AT(F, s)                                                                              \
	F(s, seq, u) F(s, call, U) F(s, key, U) F(s, count, U) F(s, dtype, y) F(s, fresh, u)
/* new tensors @from to @to - 1 are laid out: push them */
#define RP_F_GREW(F, s) F(s, from, u) F(s, to, u)
/* rank 0 starts sending partition @row of tensor @key's push-pull @round */
#define RP_F_ORD(F, s) F(s, key, U) F(s, round, u) F(s, row, u)
/* RESUME: the tensors' entries that follow, why the rank cannot resume
 * (0: it can; enum wk_rs_broken) and the sharded collectives' pieces it
 * had submitted */
#define RP_F_RESUME(F, s) F(s, entries, u) F(s, broken, u) F(s, pieces, U)
/* a tensor in flight: its next push-pull, the one interrupted (-1: none)
 * and how many ranges of it this rank holds summed */
#define RP_F_R(F, s)	F(s, key, U) F(s, next, u) F(s, op, I) F(s, runs, u)
#define RP_F_D(F, s)	F(s, from, U) F(s, to, U)
#define RP_F_PLAN(F, s) F(s, keys, u)
#define RP_F_P(F, s)	F(s, key, U) F(s, op, I) F(s, owned, u)
/* bytes [from, to) of a resumed tensor, summed by rank @rank */
#define RP_F_O(F, s) F(s, from, U) F(s, to, U) F(s, rank, U)

/* the C type of each type letter */
#define RP_CT_u uint32_t
#define RP_CT_U uint64_t
#define RP_CT_i int32_t
#define RP_CT_I int64_t
#define RP_CT_x uint64_t
#define RP_CT_y uint8_t
#define RP_CT_a uint32_t /* network order */
#define RP_CT_p uint16_t
#define RP_CT_e struct rp_addr
#define RP_CT_w const char *
#define RP_CT_t const char *

struct rp_addr {
	uint32_t ip_be;
	uint16_t port;
};

enum rp_verb {
#define RP_ENUM(V, m, F) RP_##V,
	RP_VERBS(RP_ENUM)
#undef RP_ENUM
		RP_VERB_COUNT
};

/* struct rp_<member> per verb (a verb without fields holds nothing but
 * its place in the union) */
#define RP_MEMBER(s, name, T) RP_CT_##T name;
#define RP_STRUCT(V, m, F)                                                                         \
	struct rp_##m {                                                                            \
		F(RP_MEMBER, m) char rp_none_;                                                     \
	};
RP_VERBS(RP_STRUCT)
#undef RP_STRUCT
#undef RP_MEMBER

struct rp_msg {
	enum rp_verb verb;
	union {
#define RP_UNION(V, m, F) struct rp_##m m;
		RP_VERBS(RP_UNION)
#undef RP_UNION
	};
};

/* The verb's name on the wire ("FAIL"), or "?" */
const char *rp_verb_name(enum rp_verb v);

/* @m as a line, without its newline, into @buf: its length, or -1 when it
 * does not fit in @cap (a text field is cut to fit first, and to
 * RP_TEXT_MAX) or a field cannot be written (no dtype of that number; a
 * word that is empty or holds a space; a port of 0). */
int rp_format(char *buf, size_t cap, const struct rp_msg *m);

/* @line (no newline) into @m: 0, or -1 with @err naming the verb, the
 * field and what is wrong. Splits @line in place (see above). */
int rp_parse(char *line, struct rp_msg *m, char *err, size_t cap);

/* rp_parse(), and the verb must be @want: 0, or -1 with @err. */
int rp_expect(char *line, enum rp_verb want, struct rp_msg *m, char *err, size_t cap);

/* @m and a newline to @fd, whole: 0 or -1. */
int rp_send(int fd, const struct rp_msg *m);
/* @line as it is and a newline (a line rp_format() wrote, a proof
 * appended): 0, or -1 (longer than RP_LINE_MAX - 1, a newline in it). */
int rp_send_text(int fd, const char *line);
/* A verb without fields (HB, BYE, REJOIN, END). */
int rp_send_verb(int fd, enum rp_verb v);
/* RP_SEND(fd, LOST, lost, .rank = r, .why = how): one line, its fields named. */
#define RP_SEND(fd, V, member, ...)                                                                \
	rp_send((fd), &(const struct rp_msg){.verb = RP_##V, .member = {__VA_ARGS__}})

/* ERR's gone= for the ranks flagged in @gone (@n of them; NULL: none) into
 * @buf: "-" or "1,5,7"; ranks that do not fit in @cap are left out. */
void rp_ranks_format(char *buf, size_t cap, const bool *gone, uint32_t n);
/* gone= into @gone (@n flags, ORed in; ranks >= @n ignored): 0, or -1 when
 * it is neither "-" nor a list of decimal ranks. */
int rp_ranks_parse(const char *list, bool *gone, uint32_t n);

#endif /* PBOX_WORKER_RANK_PROTO_H */
