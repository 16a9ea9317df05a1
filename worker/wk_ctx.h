/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libpbox internals: the context and the types every file of worker/
 * shares (the API, the bootstrap, the engine, local aggregation:
 * worker/README.md says which owns what). Each file's functions are in its
 * own header, wk_<file>.h, which a file includes only for the files below
 * it in LIBPBOX_LAYERS (tests/lint-calls.sh). Not installed.
 *
 * Ownership: after pbox_start() the engine thread owns everything below
 * "engine only"; the API threads and the engine meet under px->mu only for
 * the submission queue, op completion, the failure and the published stats.
 */
#ifndef PBOX_WK_CTX_H
#define PBOX_WK_CTX_H

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "cfg_worker.h"
#include "nic_ctl.h"
#include "pbox.h"
#include "rank_proto.h"
#include "transport.h"
#include "ss.h"

#define WK_LEVELS  5   /* retransmission backoff levels: rto << 0..4 */
#define WK_BATCH   64  /* datagrams per sendmmsg/recvmmsg */
#define WK_MAX_EPS 256 /* box endpoints a job can use */
#define WK_ERR_LEN 512
#define WK_LINEBUF 8192 /* control-line buffer per connection */
/* Keys from here up are libpbox's own: the pieces of CUDA tensors. */
#define WK_KEY_OWN	 (1ull << 63)
#define WK_L2L4_OVERHEAD 42 /* Ethernet, IPv4 and UDP headers: what pacing adds */

/* tune.c: the online search of the credit and the partition size. */
enum wk_tune_phase { WK_TUNE_CREDIT, WK_TUNE_PARTITION, WK_TUNE_DONE };
struct wk_tune {
	unsigned phase;			     /* enum wk_tune_phase */
	int dir;			     /* 0 the coordinate's start, 1 up, -1 down */
	uint64_t start, best_val;	     /* the coordinate's values */
	double best, first;		     /* goodput (bytes/ns): the best, the first window's */
	uint64_t bytes, busy_ns, busy_since; /* the window so far */
	unsigned windows;
};

/* A FIFO of (fragment, stamp): one per backoff level, monotone in expiry;
 * one per SS, in the order of our last sends to it. */
struct wk_ring {
	uint32_t *g, *stamp;
	uint32_t head, tail, cap; /* cap a power of two; head == tail: empty */
};

/* A summation service instance: one box endpoint or one rank's SS_GPU. */
struct wk_unit {
	uint32_t ip_be;
	uint16_t port;
	int32_t rank;	   /* SS_GPU of this rank; -1: a box endpoint */
	uint64_t weight;   /* in the layout */
	uint64_t kbps;	   /* a box endpoint's bandwidth */
	uint64_t room;	   /* a box endpoint's state left to lay out (UINT64_MAX: no cap) */
	uint32_t n_chunks; /* assigned */
	uint64_t bytes;
	uint32_t *global; /* local chunk index -> global chunk */
	char name[64];
	uint64_t tx, rx, retrans; /* engine's counters */
	uint64_t heard_ns;	  /* the last signed answer from it (result, ACK, NACK) */
	struct wk_ring sent;	  /* our fragments in flight here, by their last send */
};

/*
 * A tensor: declared before pbox_start(), or first seen after it (by
 * pbox_declare() or its first push-pull), when it is agreed with every rank
 * before any of its data moves (grow.c). Its address never changes.
 */
/* What a tensor's push-pulls compute (agreed at its first use, like its
 * count and dtype): the sum to every rank, or a sharded collective's piece
 * (pbox_reduce_scatter(), pbox_all_gather(), pbox_broadcast()): the sum to
 * its root alone, or its root's data to every other rank; or an async
 * store's parameters, each rank's deltas added with no round barrier. */
enum wk_kind {
	WK_ALLREDUCE = 0,
	WK_REDUCE, /* a reduce-scatter's shard: summed at its root's SS_GPU */
	WK_GATHER, /* an all-gather's shard: from its root's SS_GPU to the others */
	WK_BCAST,  /* a broadcast: spread over the other ranks' SS_GPUs */
	WK_ASYNC,  /* an async store (pbox_push_pull_async()): laid out as an all-reduce */
	WK_KIND_COUNT
};

struct wk_tensor {
	uint64_t key, count, bytes;
	int prio;
	uint8_t dtype;
	uint8_t kind;  /* enum wk_kind */
	uint32_t root; /* WK_REDUCE, WK_GATHER, WK_BCAST: the root rank */
	/* a sharded collective's pieces: its collective (0: none), sent
	 * interleaved with its other pieces, chunk by chunk (sched.c) */
	uint64_t group;
	bool ready;    /* laid out: its chunks exist (engine) */
	uint32_t seq;  /* after start: its place in the order of new tensors */
	bool late;     /* first seen after pbox_start() */
	uint64_t call; /* late: the collective that first used it (UINT64_MAX: declared) */
	uint32_t chunk0, n_chunks;  /* its chunks in the global order */
	uint32_t n_frags;	    /* fragments with payload */
	uint32_t round;		    /* of the next push-pull */
	struct pbox_handle *busy;   /* the push-pull in flight (under mu) */
	struct pbox_handle *parked; /* engine: its push-pull, waiting for the agreement */
	/* [job] compression (fp32 tensors): how its fragments travel (enum
	 * comp_scheme), its error feedback (count floats, kept from one
	 * incarnation to the next), and, the engine's, each fragment's
	 * compressed push of its round, sent again as it is when resent */
	uint8_t comp;  /* what its next push-pull takes (under mu) */
	uint8_t rcomp; /* and its sums: comp, or pbox_set_compression()'s "PUSH>SUM" */
	bool held;     /* its residual may hold something: a push-pull as it is sends it */
	/* "SCHEME:gather" (gsum.c): its push-pulls all-gather every rank's
	 * compressed tensor and sum them at each rank; gsum_busy: one of them
	 * in flight (under mu) */
	bool gather, gsum_busy;
	float *resid;
	uint8_t *wire;
	uint32_t *wire_round; /* the round + 1 each wire slot holds */
};

/* Whether a tensor of @kind is a sharded collective's piece (rooted at one
 * rank; dropped at a shrink, never resumed). */
static inline bool wk_kind_sharded(uint8_t kind)
{
	return kind == WK_REDUCE || kind == WK_GATHER || kind == WK_BCAST;
}

/* Whether tensor @t's data starts at its root alone (an all-gather's
 * shard, a broadcast): the others push empty turns, the root gets an empty
 * result. */
static inline bool wk_root_sends(const struct wk_tensor *t)
{
	return t->kind == WK_GATHER || t->kind == WK_BCAST;
}

/*
 * A push-pull the box's loss interrupted (survive.c): which bytes of its
 * @out hold their sum already (@run: [run[2i], run[2i+1]), ascending), and,
 * once pbox_shrink() agreed it with every survivor, which rank gives each
 * such range to the resumed push-pull (@own: [a, b, owner] triples; the
 * others give zeros there, and their input everywhere else).
 */
struct wk_resume {
	uint64_t key, count, bytes;
	uint8_t dtype;
	uint32_t round; /* its round in the incarnation that failed */
	uint8_t *out;
	uint64_t *run, *own;
	uint32_t n_run, n_own;
};

/* pbox_shrink(): what one survivor said of a tensor: its next round, the
 * round of its push-pull the box's loss interrupted (-1: none), and which
 * byte ranges of that one hold their sum ([run[2i], run[2i+1])). */
struct wk_rs_ent {
	uint64_t key;
	uint32_t next;
	int64_t op;
	uint64_t *run;
	uint32_t n_run;
};

/* Why a rank cannot resume what the box's loss interrupted, as its
 * account says (pbox_shrink() then redoes the step). */
enum wk_rs_broken {
	WK_RS_FINE = 0,
	WK_RS_CUDA,   /* its results already in GPU memory: not known here */
	WK_RS_NOMEM,  /* out of memory recording them */
	WK_RS_PIECES, /* a sharded collective in flight: its pieces are dropped */
	WK_RS_BROKEN_COUNT
};

/* One survivor's account: its entries by key; @broken why it cannot tell
 * (enum wk_rs_broken); @pieces the sharded collectives' pieces it had
 * submitted in the incarnation that failed. */
struct wk_rs_rank {
	struct wk_rs_ent *e;
	uint32_t n;
	uint8_t broken;
	uint64_t pieces;
};

/* A tensor's plan: the round resumed, and who gives the sum where
 * (@own: [a, b, rank] triples, ascending). */
struct wk_rs_plan {
	uint64_t key;
	int64_t op;
	uint64_t *own;
	uint32_t n_own, cap;
};

/* Rank 0's record of what each rank said of one new tensor (grow.c). */
struct wk_ag {
	uint64_t key, count;
	uint64_t call; /* the collective that first used it (UINT64_MAX: declared) */
	int prio;
	uint8_t dtype;
	uint8_t kind; /* enum wk_kind */
	uint32_t root;
	bool have;
};

/* One of a rank's recent collectives (push-pulls, in call order): what rank
 * 0 asks about when the ranks' new tensors do not line up (grow.c). */
#define WK_HIST 1024
struct wk_call {
	uint64_t call, key, count;
	uint32_t seq; /* fresh: the new tensor's */
	uint8_t dtype;
	uint8_t kind; /* enum wk_kind */
	uint32_t root;
	bool fresh; /* the first use of a tensor first seen after the start */
};

/* ---- the failure machine (fail.c) ----------------------------------------
 *
 * A job's failure moves one way: RUNNING, then FAILED (raised here, the
 * other ranks not yet told) or TOLD (they know: it came from them, or its
 * own line told them), then TOLD once the engine has told them. Only a new
 * incarnation (pbox_shrink(), pbox_rejoin(): wk_fail_reset()) starts again.
 * wk_raise() is the only writer, from any thread; the first failure holds.
 *
 * Each kind is a row: its code (0: the raiser's), what it says is gone
 * (a rank, a box, or this rank leaving), the line that tells the other
 * ranks (FAIL; LEAVE; LOST or MISMATCH, which tell as they are raised).
 * Whether pbox_shrink() may go on is not a kind's: it is what the failure
 * names gone and its code (PBOX_EBOX), the same on every rank, also on
 * those that only heard of it (HEARD carries the origin's code).
 */
enum wk_fstate { WK_FS_RUNNING, WK_FS_FAILED, WK_FS_TOLD };
enum wk_gone { WK_GONE_NONE, WK_GONE_RANK, WK_GONE_BOX, WK_GONE_SELF };

#define WK_FAIL_KINDS(X)                                                                           \
	/* kind       code            gone          told by     told */                            \
	X(LOCAL, 0, WK_GONE_NONE, RP_FAIL, false) /* this rank's own (memory, socket) */           \
	X(TIMEOUT, PBOX_ETIMEDOUT, WK_GONE_NONE, RP_FAIL, false) /* [tuning] deadline */           \
	X(PROTOCOL, PBOX_EPEER, WK_GONE_NONE, RP_FAIL, false)	 /* a rank broke it */             \
	X(REFUSED, 0, WK_GONE_NONE, RP_FAIL, false) /* a service refused our pushes */             \
	X(HEARD, 0, WK_GONE_NONE, RP_FAIL, false)   /* FAIL from a rank (rank 0 relays) */         \
	X(RANK_LOST, PBOX_EPEER, WK_GONE_RANK, RP_LOST, true)	     /* rank 0 says LOST */        \
	X(SILENT, PBOX_EPEER, WK_GONE_RANK, RP_FAIL, false)	     /* rank 0 fell silent */      \
	X(LEAVE, PBOX_EPEER, WK_GONE_SELF, RP_LEAVE, false)	     /* this rank leaves */        \
	X(BOX_LOST, PBOX_EBOX, WK_GONE_BOX, RP_FAIL, false)	     /* a box went away */         \
	X(MISMATCH, PBOX_EMISMATCH, WK_GONE_NONE, RP_MISMATCH, true) /* ranks disagree */          \
	X(ABORTED, PBOX_EFAILED, WK_GONE_NONE, RP_FAIL, true)	     /* pbox_abort(): untold */

enum wk_fkind {
#define WK_FK_ENUM(k, code, gone, verb, told) WK_FK_##k,
	WK_FAIL_KINDS(WK_FK_ENUM)
#undef WK_FK_ENUM
		WK_FK_COUNT
};

struct wk_fail_kind {
	int code;	   /* 0: the raiser's */
	enum wk_gone gone; /* what @who names */
	enum rp_verb verb; /* how the others hear it */
	bool told;	   /* raising it is the telling */
};
extern const struct wk_fail_kind wk_fail_kinds[WK_FK_COUNT];

/* A partition of an op: fragments [g, g_end) still to be sent first. */
struct wk_part {
	struct pbox_handle *op;
	uint32_t g, g_end;
	int prio;
	uint32_t row; /* its place among its push-pull's partitions */
	uint64_t seq;
	bool told; /* [job] leader_order, rank 0: its start said to the others */
};

struct pbox_handle {
	struct pbox *px;
	struct wk_tensor *t;
	const uint8_t *in;
	uint8_t *out;
	uint32_t round;
	uint8_t comp;  /* its tensor's compressor for this push-pull (enum comp_scheme) */
	uint8_t rcomp; /* and for its sums (comp's, or one direction alone compressed) */
	bool flush;    /* none, but its tensor's residual is sent with it */
	bool pre;      /* comp: in and out hold the fragments compressed (the CUDA module's) */
	uint32_t left; /* fragments without their sum yet */
	uint32_t n_parts;
	struct wk_part *parts;
	struct pbox_handle *next;	   /* submission queue */
	struct pbox_handle *anext, *aprev; /* engine: ops with bytes (or turns) in flight */
	uint32_t turns_out;		   /* engine: its turns in flight */
	const struct wk_part *tlast;	   /* engine: its partition of turns started last */
	uint64_t inflight;		   /* engine: their bytes */
	bool done;			   /* under mu */
	int status;
	char msg[WK_ERR_LEN];
	void *cuda; /* pbox_push_pull_cuda(): the CUDA module's job (no tensor, never queued) */
	struct wk_ltensor *lt; /* local aggregation (local.c): the machine's tensor, no t */
	bool lstarted;	       /* local.c: its pieces under way */
	bool dev;	       /* local.c: CUDA memory, summed on the GPU (local_cuda = ipc) */
	void *cev;	       /* local.c, dev: the caller's stream where the call was made */
	/* a sharded collective (shard.c): its pieces' ops, each NULL once reaped */
	struct pbox_handle **kids;
	uint32_t n_kids;
	/* once reaped, outside mu (gsum.c's sum of the gathered pushes): the
	 * handle's status becomes finish(finish_arg, status) */
	int (*finish)(void *arg, int status);
	void *finish_arg;
};

enum wk_frag_state { WK_IDLE, WK_INFLIGHT, WK_DONE };

struct wk_frag {
	uint16_t len; /* 0: past the tensor's end */
	uint8_t state;
	uint8_t level;	/* backoff level of its last send */
	uint8_t acked;	/* the SS said it has our part (PBOX_OP_ACK) */
	uint8_t probed; /* our last probe is unanswered */
	uint8_t probes; /* probes since our last push */
	uint8_t fast;	/* our last probe was a fast one (a later push's result came first) */
	uint32_t tries, stamp;
	uint64_t sent;	 /* its last send (push or probe): its timer runs from here */
	uint64_t pushed; /* its last push left (the time to a sum runs from here) */
	uint64_t first;	 /* its first push: the deadline runs from here */
	struct pbox_handle *op;
};

/* Requests for the boxes, to be sent by the box client's thread (box.c):
 * which box, and what. */
struct nic_ctl_reg;
struct wk_box_batch {
	struct wk_box_req {
		uint32_t box;
		struct nic_ctl_reg *r;
	} * req;
	uint32_t n, cap;
};

/* A box's endpoints, as its control plane lists them (box.c). */
struct wk_box_eps {
	uint32_t n, frag, chunk;
	uint32_t txref; /* the boxes' largest transmit reference (0: not said) */
	uint32_t ip[WK_MAX_EPS];
	uint16_t port[WK_MAX_EPS];
	uint64_t kbps[WK_MAX_EPS];
	uint64_t room[WK_MAX_EPS]; /* bytes of state it would take (UINT64_MAX: not said) */
};

/* A peer's push for a chunk this rank has not laid out yet: a tensor the
 * others agreed on before this rank read rank 0's GREW (serve.c holds it,
 * and sums it once the chunk is laid out, where it would otherwise wait
 * for the sender's retransmission timeout). */
struct wk_early {
	struct pbox_hdr h;
	struct sockaddr_in from;
	uint8_t *p; /* h.len bytes */
};

/*
 * One incarnation of the network job: who this rank is and with whom, the
 * key, the boxes, the layout, the connections and the transport, the
 * growth agreed after the start, and the engine's state. The bootstrap
 * (wk_boot()) opens it, wk_free_net() closes it, and wk_net_reset() makes
 * it a closed one of a rank @rank of @n as a whole: pbox_shrink() and
 * pbox_rejoin() close one and open the next. Which thread owns what is
 * said field by field; past pbox_start() the engine owns all but what
 * says "under mu".
 */
struct wk_net {
	uint32_t rank, n, job;
	/* this incarnation's key: nic_job_key([job] token, job, rank 0's nonce) */
	uint8_t jkey[NIC_KEY_LEN];
	struct nic_mac mac; /* signs and checks every datagram ([job] mac) */
	/* rank 0: the boxes ([box] control): each one's control connection
	 * (the job's life there), session and endpoints among the units */
	struct wk_box {
		int fd;
		struct nic_ctl_session sess;
		struct cfg_hostport addr;
		uint32_t ep0, n_eps;
		bool registered; /* the job is on this box */
		bool gone;	 /* it went away: pbox_shrink() goes on without it */
	} box[CFG_MAX_HOSTPORTS];
	uint32_t n_boxes;
	struct wk_boxc *boxc; /* rank 0: the box client's thread (box.c), from a growth on */
	/* tensors first seen after pbox_start(), by seq (under mu) */
	struct wk_tensor **newt;
	uint32_t n_new, cap_new;
	/* engine: new tensors told to rank 0 (announced) and laid out (applied);
	 * rank 0: what every rank said of seqs [applied, applied + ag_rows) */
	uint32_t announced, applied;
	struct wk_ag *ag;
	uint32_t ag_rows, ag_cap;
	uint64_t ag_last_ns; /* the last NEW recorded */
	uint32_t probed;     /* rank 0: rows asked about (WAIT) are those below applied + probed */
	/* every rank: its collectives (under mu), and rank 0's question about one */
	uint64_t calls;
	struct wk_call hist[WK_HIST];
	uint64_t pieces; /* of those, the sharded collectives' pieces */
	bool probe_on;
	uint32_t probe_seq;
	uint64_t probe_call;
	uint32_t segments; /* of the job: one per dtype per growth */

	/* the layout */
	uint32_t n_eps, n_units, self_unit;
	uint32_t box_txref; /* the boxes' transmit reference size, to cost their chunks */
	struct wk_unit *unit;
	uint32_t frag_size, chunk_size, fpc, n_chunks, n_frags;
	uint32_t *chunk_unit, *chunk_local;
	uint32_t *chunk_mode; /* a rooted chunk's ss_mode << 16 | its root; 0: all-reduce */
	uint64_t total_bytes;
	double k;

	/* sockets: data (UDP), control (TCP to rank 0 / from the others, box) */
	int udp, efd;
	bool gro;		       /* the socket takes GRO-coalesced datagrams (UDP_GRO) */
	const struct wk_transport *tp; /* the transport's operations (transport.h) */
	void *tp_st;		       /* and its state: the context itself with UDP */
	struct wk_tp_env tp_env;       /* what a module transport was given */
	int *peer_fd;		       /* rank 0: each rank's bootstrap connection; others: [0] */
	char **peer_buf;
	uint32_t *peer_len;
	bool *peer_bye;
	bool *gone;	      /* engine: ranks lost as this incarnation failed (survive.c) */
	uint64_t *peer_heard; /* engine: the last line from each connection (heartbeats) */
	uint64_t hb_sent_ns;  /* engine: our last heartbeat */
	struct pbox_ss_stats *ss_pub; /* the SS_GPU's counters, as published (under mu) */

	/* The engine's: its thread's alone while it runs */
	struct wk_eng_state {
		bool eng_failed; /* it failed its ops for this incarnation's failure */
		struct wk_frag *frag;
		struct ss_job *ssj;	    /* this rank's SS_GPU: its segments, ->next */
		struct pbox_handle *active; /* ops with bytes in flight */
		struct wk_part **heap;
		uint32_t heap_n, heap_cap;
		/* empty pushes (a rooted tensor's turns: headers, no data), in the
		 * same order but apart from the heap: they wait for no pacing slot
		 * and no credit, only for a window of their own (sched.c) */
		struct wk_part **turns;
		uint32_t turns_n, turns_cap, turns_out;
		struct pbox_handle *tactive; /* ops with turns in flight (their anext, aprev) */
		uint64_t seq;
		struct wk_ring ring[WK_LEVELS], local;
		uint64_t credit, credit_used;
		uint64_t part_bytes;  /* the partition size in use ([tuning] partition_size, or
					 tuned) */
		struct wk_tune tune;  /* [tuning] autotune (tune.c) */
		struct wk_part *over; /* the partition going out beyond the credit (engine.c) */
		/* [job] leader_order (flow.c): the partition being sent, sent to its
		 * end first; on the other ranks, the all-reduces' partitions (not in
		 * the heap) and rank 0's order of them (ORD lines, a FIFO) */
		struct wk_part *cur;
		struct wk_part **ord;
		uint32_t ord_n, ord_cap;
		struct wk_ord {
			uint64_t key;
			uint32_t round, row;
		} * annq;
		uint32_t annq_head, annq_n, annq_cap;
		uint64_t cwnd, ssthresh, cwnd_cut_ns; /* congestion window */
		uint64_t rto_ns, rto_min_ns, deadline_ns;
		uint64_t srtt_ns, rttvar_ns; /* time to a sum, smoothed */
		uint64_t
			probe_rtt_ns; /* a probe's answer, smoothed: the network's own round trip */
		uint64_t reo_ns;      /* fast probes' reordering window (flow.c) */
		uint64_t tail_next_ns; /* tail_probe()'s next look */
		uint32_t stamp;
		uint64_t now_ns;	  /* the loop's clock, read once per turn */
		uint64_t tx_clock_ns;	  /* pacing: when our link has sent all we gave it */
		uint64_t pace_burst_ns;	  /* how far ahead of now the link may be booked */
		uint64_t pace_quantum_ns; /* the room new fragments wait for (send_new) */
		uint64_t pace_kbps;	  /* the rate we pace at: see pace_kbps() in pbox.c */
		struct pbox_stats st;
		uint64_t published_ns, control_ns;
		bool bye_sent, bye_done;
		uint64_t bye_deadline;
		uint32_t *hash_unit, hash_cap; /* unit by source address */
		uint64_t nojob_since;	       /* the box said "no such job" first */
		void *eng;		       /* udp.c's batch buffers (struct eng) */
		struct pollfd *nap_fds;	       /* the nap's: the socket, the wake-up, the ranks' */
		void *comp_scratch;	       /* [job] compression: comp_scratch_bytes() */
		/* rank 0: new tensors [grow_a, grow_b) laid out (@grow_ts, NULL
		 * but meanwhile), the box client growing the boxes (grow.c): the
		 * boxes' connections are its */
		uint32_t grow_a, grow_b;
		struct wk_tensor **grow_ts;
		/* pushes for chunks not laid out here yet, held (serve.c) */
		struct wk_early *early;
		uint32_t n_early, cap_early;
		uint64_t early_bytes;
	} es;
};

/*
 * The context: what the caller configured and declared, and what lasts
 * from one incarnation to the next (the tensors, the CUDA module, local
 * aggregation, what a lost box interrupted); the incarnation in @net; and
 * the few places the threads meet, under mu.
 */
/* A CUDA tensor of the staged path (pbox_push_pull_cuda() without local
 * aggregation): the module pushes its pieces; libpbox keeps its
 * compression (pbox_set_compression()). */
struct wk_ckey {
	uint64_t key;
	uint8_t dtype;
	bool set;     /* pbox_set_compression() named it: comp and gpu say how */
	uint8_t comp; /* enum comp_scheme */
	bool gpu;     /* compressed on the GPU, before the copy to the host */
};

struct pbox {
	struct wrk_cfg cfg;
	enum { WK_PH_NEW, WK_PH_STARTED, WK_PH_DONE } phase;
	struct wk_net net;		/* this incarnation's */
	uint32_t epoch;			/* incarnations after the first (pbox_shrink()) */
	struct cfg_hostports boxes_all; /* [box] control before a shrink left boxes out */

	/* tensors, sorted by key (under mu after pbox_start()) */
	struct wk_tensor **t;
	uint32_t n_t, cap_t;
	/* push-pulls the box's loss interrupted (under mu) */
	struct wk_resume *res;
	uint32_t n_res;
	bool res_ok;	     /* pbox_shrink() agreed on them: their next push-pull resumes them */
	uint8_t res_broken;  /* enum wk_rs_broken: none can be resumed, and why */
	uint64_t res_pieces; /* the sharded collectives' pieces submitted before the loss */

	/* the CUDA module's stager, from the first CUDA push-pull */
	void *cuda;
	uint32_t cuda_jobs; /* under mu: its push-pulls not yet answered (pbox_test/wait) */
	const struct wk_cuda_ops *cuda_ops; /* worker/cuda/stage.h */
	/* the CUDA tensors of the staged path, sorted by key (under mu): each
	 * one's compression, as pbox_set_compression() set it */
	struct wk_ckey *ckey;
	uint32_t n_ckey, cap_ckey;
	/* the stager's push-pulls: pbox.c's wk_submit() (through local
	 * aggregation where it is on), set by pbox_init() */
	int (*cuda_submit)(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
			   enum pbox_dtype dtype, struct pbox_handle **opp);
	/* gsum.c's gathered sum of a local aggregation leader's piece (its
	 * tensor's comp and gather say whether), set (under mu) by the first
	 * pbox_push_pull(); PBOX_EAGAIN: push-pull it */
	int (*gsum_net)(struct pbox *px, struct wk_tensor *t, const void *in, void *out,
			struct pbox_handle **opp);
	/* cstage.c's stager of the whole-buffer calls in CUDA memory, from the
	 * first (under cuda_mu); pbox_finalize() stops it through cst_stop */
	struct wk_cstage *cst;
	void (*cst_stop)(struct pbox *px);
	pthread_mutex_t cuda_mu; /* loading the module */
	bool cuda_failed;	 /* it did not load, or found no GPU: */
	char cuda_why[WK_ERR_LEN];

	struct wk_local *loc; /* local aggregation (local.c): NULL with a machine per rank */
	/* pbox_decide_compression() (autocomp.c): [job] compression's cost per
	 * fp32 byte on this CPU, encoding and decoding (0: not profiled yet),
	 * and on the GPU (the CUDA module's profile; gpu_enc_b < 0: none) */
	double comp_enc_b, comp_dec_b, gpu_enc_b, gpu_dec_b;

	/* between threads, under mu */
	pthread_t thr;
	bool thr_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct pbox_handle *subq, *subq_tail;
	bool finalizing;
	bool aborting; /* pbox_shrink(): the engine stops at once */
	bool aborted;  /* pbox_abort(): the engine and the local thread stop at once */
	/* the failure machine (fail.c): written by wk_raise() alone, under mu;
	 * fail is read anywhere (atomic), the rest under mu */
	_Atomic int fail;	   /* the failure's PBOX_E* code, 0 while running */
	enum wk_fstate fstate;	   /* only forward, to a new incarnation */
	enum wk_fkind fail_kind;   /* valid past WK_FS_RUNNING */
	uint32_t fail_from;	   /* the rank that saw it first (UINT32_MAX: this one) */
	char fail_msg[WK_ERR_LEN]; /* written once, before fail */
	bool eng_live;		   /* the engine thread runs: it fails its own ops */
	/* pbox_rejoin()'s barrier (under mu): the other ranks say REJOIN to rank 0,
	 * which closes its connections only once all have */
	bool rejoin_req, rejoin_sent;
	uint32_t rejoins;
	struct pbox_stats st_pub;
	struct pbox_tuning tune_pub;
};

#endif /* PBOX_WK_CTX_H */
