/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_LOCAL_H
#define PBOX_WK_LOCAL_H

#include "wk_ctx.h"

/*
 * ---- local.c: local aggregation. adopt() takes the tensors declared so
 * far; start() meets the machine's ranks (the leader before its bootstrap,
 * the others instead of it); ready() after the bootstrap: READY or FAIL to
 * the machine, and its thread. With px->loc, declarations and push-pulls
 * go to local.c, and the leader's network job sees pieces.
 */
int wk_local_adopt(struct pbox *px);
int wk_local_start(struct pbox *px, uint64_t deadline);
int wk_local_ready(struct pbox *px, int rc);
int wk_local_declare(struct pbox *px, const char *fn, uint64_t key, uint64_t count,
		     enum pbox_dtype dtype, int prio);
/* @dev: CUDA memory (pbox_push_pull_cuda(), [worker] local_cuda = ipc), after
 * the work on @stream so far */
int wk_local_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		       enum pbox_dtype dtype, bool dev, void *stream, struct pbox_handle **op);
/* A sharded collective's shard (shard.c) as a machine's tensor: each rank
 * calls it; the leader's pieces go to the network job rooted at @root's
 * machine. @in: this rank's data where it gives some (NULL where not),
 * @out: where it takes the result (NULL where not). */
struct wk_lcoll {
	const char *fn;
	uint8_t kind;  /* WK_ALLREDUCE (a push-pull), WK_REDUCE, WK_GATHER, WK_BCAST */
	uint32_t root; /* a world rank */
	uint64_t grp;  /* the network pieces' group (wk_collective()) */
};
int wk_local_collective(struct pbox *px, const struct wk_lcoll *c, uint64_t key, const void *in,
			void *out, uint64_t count, enum pbox_dtype dtype, bool dev, void *stream,
			struct pbox_handle **opp);
void wk_local_stop(struct pbox *px);
void wk_local_free(struct pbox *px);

#endif /* PBOX_WK_LOCAL_H */
