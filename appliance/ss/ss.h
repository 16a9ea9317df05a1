/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The summation service core (SS): per-fragment round state and in-place
 * summation, independent of any transport. The box links it once per data
 * core (SS_CPU); workers link it as SS_GPU. Pure C, no EAL: tested as is.
 *
 * One struct ss_job holds the state one core keeps for one job: the
 * fragments of the chunks of the job's endpoints that core owns. It lives in
 * a single block sized by ss_job_bytes() and laid out by ss_job_init(), all
 * at registration; ss_push() allocates nothing.
 *
 * A fragment's state machine (DESIGN.md §3, SwitchML's shadow copy):
 *
 *   round r current, incomplete   push(r), bit unset  -> sum; last one completes
 *                                 push(r), bit set    -> duplicate, dropped
 *   round r current, complete     push(r)             -> answer with result r
 *                                 push(r + 1)         -> start round r + 1
 *   round r current, any          push(r - 1)         -> answer with the shadow
 *   anything else                                     -> stale, dropped
 *
 * A probe (PBOX_OP_PROBE: a rank suspects a loss, and asks instead of
 * sending its data again) is answered from the same state, to the prober
 * only: DONE when the round is complete (its result went out before this
 * answer, on the same path: a rank that gets the DONE without the result
 * has lost the result, and asks for it with PBOX_F_PULL, which is answered
 * with the result or the shadow); an ACK when the rank's part is in and the
 * round waits for others; a NACK ("send it again") when it is not. The rank
 * whose push was lost finds that out by its own probe (libpbox's engine.c
 * says when a rank probes), so no rank ever resends a push the SS has, and
 * no result is sent twice to a rank that has it.
 *
 * The result of round r is in res[r & 1]; the shadow, res[(r - 1) & 1], is the
 * previous round's. fp32 jobs sum straight into res[r & 1]; fp16 and bf16
 * jobs sum into an fp32 accumulator and narrow once into res[r & 1] when the
 * round completes.
 *
 * A job registered in rank order (ss_job_desc.in_order: [job]
 * deterministic) sums each fragment as ((x0 + x1) + x2) + ..., whatever
 * order the pushes arrive in: a push that comes before its turn waits in
 * the fragment's stash (n - 1 fragment buffers more per fragment), and is
 * added when the ranks before it are. fp32 addition rounds exactly, every
 * ISA alike, so a sum is then bitwise the same on every run and whichever
 * SS (the box's or a worker's) sums it.
 *
 * A transport that sends results by reference (the box:
 * external mbufs, one payload and n headers) keeps a reference count per
 * result buffer in the job's txref area and tells ss_push() through
 * ss_job.busy whether a buffer is still on its way out: a round never starts
 * over a buffer the NIC may still be reading.
 */
#ifndef PBOX_SS_H
#define PBOX_SS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comp.h"
#include "nic_wire.h"
#include "sum.h"

#define SS_MAX_EPS    64   /* endpoints of one job on one core */
#define SS_MAX_JOBS   4096 /* [limits] jobs */
#define SS_MAX_RANKS  1024
#define SS_CACHE_LINE 64

/* Why ss_push() dropped a push. X-macro: the enum and the counter names. */
#define SS_FOREACH_DROP(_)                                                                         \
	_(NO_JOB, no_job, "job not registered")                                                    \
	_(MAC, mac, "MAC wrong (forged, altered, or another incarnation's key)")                   \
	_(DTYPE, dtype, "dtype is not the job's")                                                  \
	_(RANK, rank, "rank not below the job's n")                                                \
	_(ADDR, addr, "push for a rank from another address than the rank\'s")                     \
	_(CHUNK, chunk, "chunk not on this endpoint")                                              \
	_(FRAG, frag, "fragment outside the chunk")                                                \
	_(LEN, len, "payload length wrong for the round")                                          \
	_(DUP, dup, "duplicate of an incomplete round")                                            \
	_(STALE, stale, "round neither current, next nor previous")                                \
	_(BUSY, busy, "result buffer still being transmitted")                                     \
	_(PACED, paced, "result sent to this rank again too soon (a replayed probe or resend)")    \
	_(COMP, comp, "compressed push the job does not take, or not the round's compressor")      \
	_(COMP_DATA, comp_data, "compressed payload malformed (a top-k index out of order)")       \
	_(TURNS, turns, "a chunk's turns in one push where each fragment's is wanted (the box)")

enum ss_drop {
#define SS__DROP_ENUM(n, id, s) SS_DROP_##n,
	SS_FOREACH_DROP(SS__DROP_ENUM)
#undef SS__DROP_ENUM
		SS_DROP_COUNT
};

/* What the reason means, and its short id ("no_job", "dup"). */
const char *ss_drop_name(enum ss_drop d);
const char *ss_drop_id(enum ss_drop d);

/*
 * What the sender of a dropped push hears, the same from the box (SS_CPU)
 * and from a worker's SS_GPU: an ERROR whose code says what was wrong when
 * the push can never succeed as sent, an ACK for a duplicate of a round
 * still waiting for other ranks (its part is in: stop resending), nothing
 * for a stale round or a busy buffer (a resend will do). Returns the op to
 * send back (PBOX_OP_ERROR, PBOX_OP_ACK) or 0, and the error code in @err.
 */
static inline uint8_t ss_reply_of(enum ss_drop d, uint16_t *err)
{
	static const uint16_t code[SS_DROP_COUNT] = {
		[SS_DROP_NO_JOB] = PBOX_ERR_NO_JOB,
		/* SS_DROP_MAC: not answered: whoever sent it may not hold the key */
		[SS_DROP_DTYPE] = PBOX_ERR_DTYPE,
		[SS_DROP_RANK] = PBOX_ERR_RANGE,
		/* SS_DROP_ADDR: not answered: the source may be forged */
		[SS_DROP_CHUNK] = PBOX_ERR_RANGE,
		[SS_DROP_FRAG] = PBOX_ERR_RANGE,
		[SS_DROP_LEN] = PBOX_ERR_LEN,
		[SS_DROP_COMP] = PBOX_ERR_DTYPE,
		[SS_DROP_COMP_DATA] = PBOX_ERR_LEN,
		/* a turn stands for an empty push, and only a worker's SS_GPU
		 * takes a chunk's turns in one (ss_push_each()) */
		[SS_DROP_TURNS] = PBOX_ERR_LEN};

	*err = (unsigned)d < SS_DROP_COUNT ? code[d] : 0;
	if (*err)
		return PBOX_OP_ERROR;
	return d == SS_DROP_DUP ? PBOX_OP_ACK : 0;
}

/* A chunk shorter than the chunk size (a tensor's last): its bytes. Its
 * fragments are full up to there, the one across the end is short, the
 * rest empty (never pushed). Every other chunk is whole. */
struct ss_short {
	uint16_t ep;	/* this core's endpoint (its own order) */
	uint32_t chunk; /* index among that endpoint's chunks of the job */
	uint32_t bytes; /* 0 < bytes < chunk size, a whole number of elements */
};

/*
 * What a chunk's rounds compute (a job's chunks are all-reduce unless
 * ss_job_desc.roots says otherwise):
 *  - SS_ALLREDUCE: every rank's push summed, the sum to every rank;
 *  - SS_REDUCE: every rank's push summed, the sum to the root alone (a
 *    reduce-scatter's shard); the others get an empty RESULT, which says
 *    their part is in and the round done;
 *  - SS_BCAST: the root's push alone, to every other rank (an all-gather's
 *    shard, a broadcast); the others push nothing (an empty PUSH takes
 *    their turn: the round still waits for every rank, so no rank falls a
 *    round behind), and the root gets an empty RESULT.
 *  - SS_ASYNC: a parameter store (BytePS's asynchronous mode, its
 *    Theorem 2). The fragment holds the latest parameters: the root's
 *    first push sets them, every later push of any rank is a delta added
 *    to them as it comes, and its sender alone is answered with the
 *    parameters that result; there is no round barrier. A round here is
 *    the sender's own count of its pushes (0: its first), so each rank's
 *    push n is applied exactly once (a duplicate is answered, never
 *    added again). The others' first pushes are their initial values,
 *    not deltas: not added, answered once the root's has set the store.
 *    With ss_job_desc.staleness S > 0 a rank more than S pushes ahead of
 *    the slowest rank has its push applied and its answer held (an ACK:
 *    its part is in) until the slowest catches up: SS_RELEASE then
 *    answers every rank it held.
 * Compressed pushes are for all-reduce chunks only.
 */
enum ss_mode { SS_ALLREDUCE = 0, SS_REDUCE, SS_BCAST, SS_ASYNC, SS_MODE_COUNT };

/* A chunk that is not all-reduce: its mode and root rank. */
struct ss_root {
	uint16_t ep;	/* this core's endpoint (its own order) */
	uint32_t chunk; /* index among that endpoint's chunks of the job */
	uint8_t mode;	/* SS_REDUCE, SS_BCAST or SS_ASYNC */
	uint16_t root;	/* below the job's n (SS_ASYNC: whose first push sets the store) */
};

/* What one core needs to know of a job. */
struct ss_job_desc {
	uint32_t id;
	struct nic_mac mac; /* the job's key and MAC mode */
	uint16_t n;	    /* workers */
	uint8_t dtype;	    /* enum sum_dtype */
	uint32_t frag_size, chunk_size;
	uint16_t n_eps;			/* this core's endpoints, in its own order */
	uint32_t ep_chunks[SS_MAX_EPS]; /* chunks of the job on each */
	/* A segment added to a job that grew (GROW): its chunks on endpoint e
	 * are the job's [ep_base[e], ep_base[e] + ep_chunks[e]) there. 0 for a
	 * job's first segment. */
	uint32_t ep_base[SS_MAX_EPS];
	/* The job's short chunks on this core: with them every fragment's
	 * length is known from the registration, and a push of any other length
	 * is refused before it touches the fragment (it can wedge no round). */
	const struct ss_short *shorts;
	uint32_t n_shorts;
	/* The job's chunks on this core that are not all-reduce. */
	const struct ss_root *roots;
	uint32_t n_roots;
	/* Every rank's data address (IPv4, UDP port), n of them: a push for
	 * rank r is taken only from rank r's address, and its results go only
	 * there. NULL: learnt from each rank's pushes (tests only). */
	const struct nic_addr *ranks;
	/* fp32 jobs: 0, or compressed pushes are taken (comp.h, the scheme in
	 * each push's dtype byte) and this is the TOPK and RANDK rate (ppm).
	 * Such a job keeps, per fragment, an accumulator and its result's
	 * residual (error feedback): twice the fragment size more. */
	uint32_t comp_ppm;
	/* Summed in rank order, bitwise reproducible (see above): every
	 * fragment keeps a stash of n - 1 of its buffers more. */
	bool in_order;
	/* SS_ASYNC chunks: the most pushes a rank may be ahead of the slowest
	 * before its answers are held (bounded staleness); 0: unbounded. */
	uint32_t staleness;
};

/* Counters of one job on one core, written by that core only. */
struct ss_counters {
	uint64_t rx;	     /* pushes and probes that reached the job */
	uint64_t summed;     /* contributions added in */
	uint64_t completed;  /* rounds completed */
	uint64_t results;    /* result packets sent: n per completed round */
	uint64_t answers;    /* result re-sent to one worker (duplicate, previous round) */
	uint64_t retrans_rx; /* pushes flagged as retransmissions */
	uint64_t probes;     /* probes that reached the job */
	uint64_t needless;   /* retransmissions it already had: duplicates, or answered */
	uint64_t drop[SS_DROP_COUNT];
} __attribute__((aligned(SS_CACHE_LINE)));

struct ss_frag {
	uint32_t round;	    /* current round */
	uint16_t count;	    /* contributors so far */
	uint16_t len;	    /* payload bytes of the current round */
	uint16_t prev_len;  /* of the previous round (the shadow) */
	uint16_t want;	    /* the only length a push may have (0: none) */
	uint8_t done;	    /* current round complete */
	uint8_t has_prev;   /* the shadow holds a result */
	uint8_t comp;	    /* the current round's pushes' compressor (its first push's) */
	uint8_t rcomp;	    /* and its result's (pbox_hdr_rcomp() of its first push) */
	uint8_t prev_rcomp; /* the shadow's result's */
	uint16_t next;	    /* in order: the rank whose push is added next */
	uint8_t mode;	    /* enum ss_mode */
	uint16_t root;	    /* SS_REDUCE, SS_BCAST: the root rank */
};

/*
 * When a result last went to one rank alone (an answer to its probe or
 * resend), per fragment and rank: a round's result goes to a rank again
 * only SS_ANSWER_GAP_NS (the worker's least probe gap) after the last,
 * the gap doubling with each answer of that round up to 512 times (the
 * worker backs off too, and needing more than a few answers of one round
 * means its every result is lost). A probe or resend replayed 1000 times
 * in a second draws 10 results, not 1000: about what the replays cost the
 * replayer in bytes, instead of 112 times that.
 */
#define SS_ANSWER_GAP_NS    1000000u
#define SS_ANSWER_DOUBLINGS 9
struct ss_answered {
	uint32_t at_us;	   /* the clock's microseconds, wrapping */
	uint16_t round_lo; /* the round answered (its low bits) */
	uint8_t times;	   /* answers of that round so far */
	uint8_t pad;
};

struct ss_job {
	/* accessed on the data path */
	uint32_t id;
	uint16_t n, words; /* bitmap words per fragment */
	uint8_t dtype, elem;
	uint16_t n_eps;
	uint32_t frag_size, frags_per_chunk;
	const struct sum_ops *ops;
	bool (*busy)(void *txref); /* NULL: results are copied, never busy */
	size_t txref_size;
	struct ss_frag *frag;
	uint64_t *bitmap;
	uint8_t *res;		       /* 2 buffers of frag_size per fragment */
	float *acc;		       /* fp16/bf16: frag_size / elem floats per fragment */
	uint8_t *txref;		       /* 2 per fragment, txref_size each */
	struct nic_addr *peer;	       /* n per endpoint: each rank's address there, as last
					* heard from there (ss_peer) */
	struct ss_answered *answered;  /* n per fragment */
	uint32_t comp_ppm;	       /* compressed pushes taken (ss_job_desc) */
	float *cacc, *resid;	       /* comp_ppm: frag_size / 4 floats per fragment each */
	void *scratch;		       /* comp_ppm: comp_scratch_bytes() of a fragment */
	uint8_t *stash;		       /* in order: n - 1 pushes of frag_size per fragment */
	uint32_t *applied;	       /* SS_ASYNC chunks: n per fragment, each rank's pushes
					* applied (NULL: the job has none) */
	uint64_t *wake;		       /* SS_ASYNC: words; the ranks an SS_RELEASE answers */
	uint32_t staleness;	       /* ss_job_desc.staleness */
	uint64_t (*clock_us)(void);    /* the transport's clock (ss_table's); NULL: unpaced */
	bool bound;		       /* peer IP and port fixed at registration (.ranks) */
	uint32_t ep_first[SS_MAX_EPS]; /* first fragment of each endpoint */
	uint32_t ep_chunks[SS_MAX_EPS];
	uint32_t ep_base[SS_MAX_EPS]; /* the job's chunk index of this segment's first */
	struct ss_job *next;	      /* the job's next segment (it grew), or NULL */
	struct nic_mac mac;	      /* checks every push, signs every reply */
	uint32_t n_frags;
	size_t bytes;
	struct ss_counters cnt;
};

/* What ss_push() asks the transport to do. */
struct ss_out {
	enum ss_drop why; /* SS_DROP verdicts */
	const void *buf;  /* SS_COMPLETE, SS_ANSWER: the result payload */
	uint16_t len;
	uint8_t dtype; /* SS_COMPLETE, SS_ANSWER: the results' dtype byte (its compressor) */
	uint32_t round;
	uint8_t mode; /* SS_COMPLETE, SS_ANSWER: the chunk's (ss_out_len()) */
	uint16_t root;
	/* SS_RELEASE: the ranks to answer and each one's round (read them with
	 * ss_out_to(), ss_out_round()); NULL for every other verdict. Valid
	 * until the next ss_push() on the job */
	const uint64_t *to;
	const uint32_t *applied;
	void *txref; /* the transport's reference slot for buf */
	/* every verdict: a retransmission it did not need (a duplicate, or
	 * answered with a result) */
	bool needless;
};

/* The payload bytes @out's result carries to rank @r: its length, or 0
 * where the chunk's mode gives @r none (a reduce's other ranks, a
 * broadcast's root): an empty RESULT, the round done. */
static inline uint16_t ss_out_len(const struct ss_out *out, unsigned r)
{
	if (out->mode == SS_REDUCE)
		return r == out->root ? out->len : 0;
	if (out->mode == SS_BCAST)
		return r == out->root ? 0 : out->len;
	return out->len;
}

/* Does rank @r get @out's result (SS_COMPLETE: every rank; SS_RELEASE:
 * those it names), and of which round: the verdict's, or for an SS_RELEASE
 * the rank's own (its pushes applied, less one: the answer to its latest). */
static inline bool ss_out_to(const struct ss_out *out, unsigned r)
{
	return !out->to || out->to[r / 64] >> (r % 64) & 1;
}

static inline uint32_t ss_out_round(const struct ss_out *out, unsigned r)
{
	return out->to ? out->applied[r] - 1 : out->round;
}

enum ss_verdict {
	SS_SUMMED,   /* taken in; nothing to send */
	SS_COMPLETE, /* round complete: send buf to each of the job's n ranks */
	SS_ANSWER,   /* send buf to the sender only */
	SS_DROP,     /* dropped, counted; why says why */
	SS_WAITING,  /* a probe, or an SS_ASYNC push held: the sender's part is in, the
		      * round (its answer) waits for others: ACK */
	SS_NACK,     /* a probe; the sender's part is not in: NACK (send it again) */
	SS_DONE,     /* a probe; the round is complete, its result sent: DONE */
	SS_RELEASE,  /* SS_ASYNC: send buf to each rank ss_out_to() names, rank r's
		      * with round ss_out_round(out, r) */
};

/* Check @d; returns NULL or a message saying what is wrong. */
const char *ss_job_desc_check(const struct ss_job_desc *d);

/* Bytes and alignment of the block ss_job_init() needs for @d. */
size_t ss_job_bytes(const struct ss_job_desc *d, size_t txref_size);
size_t ss_job_align(const struct ss_job_desc *d);

/* Lay the job (or a segment of it) out in @mem (ss_job_bytes() bytes, ss_job_align() aligned),
 * every fragment before its first round. Returns the job (at @mem). */
struct ss_job *ss_job_init(void *mem, const struct ss_job_desc *d, size_t txref_size,
			   const struct sum_ops *ops);

static inline void *ss_job_txref(const struct ss_job *j, uint32_t frag, unsigned which)
{
	return j->txref + ((size_t)frag * 2 + which) * j->txref_size;
}

static inline uint8_t *ss_job_res(const struct ss_job *j, uint32_t frag, unsigned which)
{
	return j->res + ((size_t)frag * 2 + which) * j->frag_size;
}

/*
 * One push, already validated by nic_wire_parse() (op, dtype number, length
 * within the fragment size) and addressed to the job's endpoint @ep of this
 * core. Checks what the wire cannot (MAC, dtype, rank, chunk, fragment,
 * the fragment's registered length), then runs the state machine. @from is remembered as the rank's
 * address on @ep for results, when the push adds the rank's part. Nothing is
 * touched before every check passed.
 */
enum ss_verdict ss_push(struct ss_job *j, unsigned ep, const struct pbox_hdr *h,
			const void *payload, const struct nic_addr *from, struct ss_out *out);

/*
 * ss_push() for every fragment a datagram stands for, each fragment's
 * verdict and out given to @each with that fragment's header (its frag,
 * no PBOX_F_REST); returns how many fragments it stood for (0: its header
 * refused). A push stands for its own fragment; an empty push flagged
 * PBOX_F_REST (a rooted chunk's turn, from a rank that is not its root)
 * for its fragment and every later one of its chunk that its tensor has:
 * a rank's turns in one header a chunk instead of one a fragment (an
 * all-gather's other n - 1 shards). Its header is checked once (a wrong
 * one: @each called once, with SS_DROP); each fragment then takes its turn
 * as if pushed alone (a duplicate, a stale round: that fragment's
 * verdict), and one refused for its length or compressor (no turn there:
 * not a broadcast's, or from its root) ends the walk. ss_push() refuses
 * PBOX_F_REST (SS_DROP_TURNS): the box, whose chunks are all-reduced,
 * calls it alone.
 */
typedef void ss_each_fn(void *ctx, const struct pbox_hdr *h, enum ss_verdict v, struct ss_out *out);
unsigned ss_push_each(struct ss_job *j, unsigned ep, const struct pbox_hdr *h, const void *payload,
		      const struct nic_addr *from, ss_each_fn *each, void *ctx);

/* The index in @j of fragment @frag of chunk @chunk (the wire's) on
 * endpoint @ep: both in range, as ss_push() checks them. */
static inline uint32_t ss_frag_of(const struct ss_job *j, unsigned ep, uint32_t chunk,
				  uint16_t frag)
{
	return j->ep_first[ep] + (chunk - j->ep_base[ep]) * j->frags_per_chunk + frag;
}

/*
 * Whether round @round is complete in every fragment of fragment @f's
 * chunk that its tensor has: a reduce's other ranks, whose results are
 * empty, then hear it for the whole chunk in one empty RESULT flagged
 * PBOX_F_REST (WIRE.md). No fragment of a chunk is ever a round ahead of
 * another: a rank pushes the next round once it has every result of this
 * one.
 */
bool ss_chunk_done(const struct ss_job *j, uint32_t f, uint32_t round);

/*
 * Rank @rank's address on endpoint @ep (< j->n_eps) of this core: where
 * results of that endpoint's chunks go. One per endpoint, because a worker
 * reaches each of the box's subnets from an address of its own there; one
 * core serving several endpoints must not send one endpoint's results to
 * the address another endpoint learnt.
 */
static inline struct nic_addr *ss_peer(const struct ss_job *j, unsigned ep, unsigned rank)
{
	return &j->peer[(size_t)ep * j->n + rank];
}

/*
 * A job that grew is a list of segments, each one ss_job block of its own
 * dtype, covering a range of the job's chunks on each endpoint (the wire's
 * chunk index counts across segments). The segment holding @chunk of
 * endpoint @ep, or NULL. Jobs grow a few times in their life (a framework
 * rebuilding its buckets): the list is short.
 */
static inline struct ss_job *ss_job_seg(struct ss_job *j, unsigned ep, uint32_t chunk)
{
	while (j && ep < j->n_eps && chunk - j->ep_base[ep] >= j->ep_chunks[ep])
		j = j->next;
	return j;
}

/* The jobs one core serves: a small table, searched linearly (a handful of
 * jobs at a time) with the last hit first. */
struct ss_table {
	uint32_t n, last;
	/* the transport's microseconds, read only to pace an answer (ss.c's
	 * pace()); set before the first job is added. NULL: unpaced */
	uint64_t (*clock_us)(void);
	uint32_t id[SS_MAX_JOBS];
	struct ss_job *job[SS_MAX_JOBS];
};

static inline struct ss_job *ss_table_find(struct ss_table *t, uint32_t id)
{
	uint32_t i;

	if (t->last < t->n && t->id[t->last] == id)
		return t->job[t->last];
	for (i = 0; i < t->n; i++)
		if (t->id[i] == id) {
			t->last = i;
			return t->job[i];
		}
	return NULL;
}

/* 0, or -EEXIST / -ENOSPC. */
int ss_table_add(struct ss_table *t, struct ss_job *j);
/* Append segment @seg to the job of its id: 0, or -ENOENT. */
int ss_table_grow(struct ss_table *t, struct ss_job *seg);
/* The removed job, or NULL when @id is not there. */
struct ss_job *ss_table_del(struct ss_table *t, uint32_t id);

#endif /* PBOX_SS_H */
