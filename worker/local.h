/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Local aggregation's state (local.c): the machine's numbering, planned at
 * pbox_start() (ranks.c), and what its thread keeps. Only local.c and
 * ranks.c see it; the rest of libpbox holds a struct wk_local * and asks
 * through wk_local.h's functions.
 */
#ifndef PBOX_WORKER_LOCAL_H
#define PBOX_WORKER_LOCAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <unistd.h>

#include "wk_ctx.h"
#include "cuda/stage.h"

struct wk_ltensor;
struct sum_ops;

struct wk_local {
	uint32_t world_rank, world_n, machines, machine, local_rank, local_size;
	uint32_t *leader_of; /* machine -> the world rank of its leader */
	uint32_t *ranks;     /* local rank -> world rank */
	uint32_t *mach_of;   /* world rank -> its machine */
	struct cfg_hostport *world_peers;
	int lfd, efd;
	int *fd;	/* leader: [j] local rank j's connection; others: [0] the leader's */
	bool *bye;	/* leader: [j] said BYE (written under mu) */
	uint32_t n_bye; /* leader, under mu: how many */
	/* pbox_rejoin(): the others say REJOIN once they called it, with nothing
	 * in flight; the leader renews the machine only once all have, so that
	 * no rank still finishing its last step sees its push-pulls failed */
	bool *rejoin;	   /* leader, under mu: [j] said REJOIN in this incarnation */
	uint32_t n_rejoin; /* leader, under mu: how many */
	bool rejoin_say;   /* the others, under mu: the thread is to say REJOIN */
	pid_t *pid;	   /* leader: [j] its process */
	bool stop;	   /* under mu: finalizing */
	bool told;	   /* the failure passed on */
	pthread_t thr;
	bool thr_started;
	bool aborted;		    /* the thread's: pbox_abort() was called */
	struct pbox_layout_info li; /* the others: the leader's layout */
	/* tensors by key (under mu) */
	struct wk_ltensor **t;
	uint32_t n_t, cap_t;
	/* push-pulls: queued by the API (under mu), then the thread's own */
	struct pbox_handle *q, *q_tail;
	struct pbox_handle **act;
	uint32_t n_act, cap_act;
	float *acc; /* fp32 accumulator of one piece (fp16, bf16) */
	const struct sum_ops *ops;
	uint64_t piece_bytes;
	uint32_t n_dev; /* ops in act on CUDA memory: the thread polls their events */
	/*
	 * Renewal (pbox_shrink(), pbox_rejoin()): the leader renews its network
	 * job, then its thread renumbers the world without the machines gone,
	 * starts the tensors' rounds over and tells the others (GONE, then
	 * RENEW, or FAIL with LMF_RENEW); their threads do the same on RENEW.
	 * A machine is one failure domain: one that lost a rank leaves the job.
	 */
	uint32_t epoch;	 /* local thread; messages carry it */
	bool left;	 /* under mu: this machine left the job (or lost its leader) */
	bool renew_req;	 /* under mu, leader: its thread is to renew (below) */
	int renew_rc;	 /* under mu: the renewal's result (the others: as told) */
	bool renew_got;	 /* under mu, the others: a renewal was told (RENEW or FAIL) */
	bool resumed;	 /* under mu, the others: pbox_shrink() took it; tell again */
	bool quiet;	 /* under mu: its thread failed every op of the failure */
	uint32_t *gone;	 /* the machines gone (before the renewal's numbers) */
	uint32_t n_gone; /* under mu with gone */
	char renew_msg[WK_ERR_LEN];
};

/* Whether world rank @r is on this machine: its local rank, or -1. */
static inline int local_of(const struct wk_local *lc, uint32_t r)
{
	for (uint32_t j = 0; j < lc->local_size; j++)
		if (lc->ranks[j] == r)
			return (int)j;
	return -1;
}

/* Whether this rank leads its machine (its lowest rank). */
static inline bool leader(const struct wk_local *lc)
{
	return lc->local_rank == 0;
}

/* Wake the machine's thread up. */
static inline void kick(const struct wk_local *lc)
{
	uint64_t one = 1;

	if (lc->efd >= 0 && write(lc->efd, &one, sizeof(one)) < 0) {
		/* saturated: the thread is awake anyway */
	}
}

/* ---- what local aggregation's files share (local_*.c) ---------------------- */

enum {
	LM_HELLO = 1,
	LM_READY,
	LM_FAIL,
	LM_TENSOR,
	LM_TENSOR_OK,
	LM_IN,
	LM_OUT,
	LM_TAKEN,
	LM_BYE,
	LM_GONE,
	LM_RENEW,
	LM_REJOIN
};

enum {
	LMF_DEV = 1,   /* TENSOR, TENSOR_OK: a CUDA tensor; u.ipc the sender's buffer */
	LMF_LEFT = 2,  /* FAIL: this machine left the job; its ranks cannot go on */
	LMF_RENEW = 4, /* FAIL: the renewal (pbox_shrink(), pbox_rejoin()) failed */
};

#define LM_GONE_MAX 64 /* machines named by one GONE */

/* A piece at the leader: waiting for its parts, on the network, its result
 * out; CUDA tensors: summed on the GPU and copied for the network, its
 * result copied back to the GPU. */
enum { PC_WAIT, PC_NET, PC_DONE, PC_SUM, PC_BACK };

#define LM_PROOF 16

/* One message; the short ones end before @u. */
struct lmsg {
	uint8_t type;
	uint8_t dtype;
	uint16_t flags; /* LMF_* */
	int32_t code;	/* FAIL */
	uint32_t epoch; /* the machine's incarnation: others' messages are stale */
	uint32_t round, piece;
	uint64_t key, count; /* GONE: count the machines in u.gone */
	union {
		struct {
			uint32_t rank, world, mode, pid;
			uint64_t piece_bytes;
			uint8_t proof[LM_PROOF];
		} hello;
		struct pbox_layout_info ready;
		struct wk_cuda_ipc ipc;
		uint32_t gone[LM_GONE_MAX];
		char text[WK_ERR_LEN];
	} u;
};
#define LM_SHORT offsetof(struct lmsg, u)

/* A tensor as the machine holds it. */
struct wk_ltensor {
	uint64_t key, count, bytes, stride; /* stride: a region's size, page-aligned */
	uint8_t dtype;
	int prio;
	uint32_t n_pieces;
	uint64_t piece_elems;
	int memfd;
	uint8_t *map;		  /* local_size regions; the leader's, 0, takes the sum */
	bool net;		  /* leader: its pieces declared to the network job */
	bool declared;		  /* by pbox_declare() on this rank */
	int comp, rcomp;	  /* pbox_set_compression() here (-1: the job's) */
	bool gather;		  /* and summed by all-gather (gsum.c) */
	bool asked;		  /* the others: the memfd asked for */
	struct pbox_handle *busy; /* this rank's push-pull of it (under mu) */
	uint32_t round;		  /* this rank's next */
	/* a sharded collective's shard (shard.c): its kind (WK_REDUCE, WK_GATHER,
	 * WK_BCAST; WK_ALLREDUCE for push-pulls), the world rank at its root
	 * (reduce: the one rank that takes the sum; gather and broadcast: the one
	 * that gives the data) and its pieces' group on the network */
	uint8_t ckind;
	bool cset; /* ckind, croot, grp set by this rank's first call */
	uint32_t croot;
	uint64_t grp;
	/* leader, local thread only */
	uint32_t *in;		  /* [j * n_pieces + i]: rank j's round in piece i, + 1 */
	uint32_t *taken;	  /* [i]: ranks that took the last result of piece i */
	struct pbox_handle **sub; /* [i]: its network push-pull */
	uint8_t *st;		  /* [i]: this rank's op: PC_* */
	/* CUDA tensors summed on the GPU */
	bool kind;	       /* dev below is settled (by a push-pull or a TENSOR) */
	bool dev;	       /* CUDA memory, summed on the GPU */
	bool pinned;	       /* leader: region 0 page-locked */
	void *dbuf;	       /* this rank's device buffer (the leader's takes the sum) */
	struct wk_cuda_ipc dh; /* its IPC handle */
	void **dpeer;	       /* leader: [j] rank j's buffer; the others: [0] the leader's */
	void **ev;	       /* [i]: piece i's copy or sum in flight */
	void *ev_in;	       /* the others: the copy of the input into dbuf */
};

/* Whether this rank's data goes into @t's sums (a rooted shard's: only its
 * root's) and whether it takes @t's result (a reduce's: only its root). */
static inline bool lt_gives(const struct wk_ltensor *t, uint32_t world_rank)
{
	return t->ckind == WK_ALLREDUCE || t->ckind == WK_REDUCE || t->croot == world_rank;
}

static inline bool lt_takes(const struct wk_ltensor *t, uint32_t world_rank)
{
	return t->ckind == WK_ALLREDUCE || (t->ckind == WK_REDUCE) == (t->croot == world_rank);
}

#endif
