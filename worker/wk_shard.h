/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_SHARD_H
#define PBOX_WK_SHARD_H

#include "wk_ctx.h"

/* ---- shard.c: the sharded collectives (pbox.h's pbox_reduce_scatter(),
 * pbox_all_gather(), pbox_broadcast()) ---------------------------------- */

/* pbox_all_gather() among the network job's ranks: with local aggregation,
 * a leader's among the machines' leaders (gsum.c's gathered pieces) */
int wk_all_gather_net(struct pbox *px, const char *fn, uint64_t key, const void *in, void *out,
		      const uint64_t *counts, enum pbox_dtype dtype, struct pbox_handle **opp);

#endif /* PBOX_WK_SHARD_H */
