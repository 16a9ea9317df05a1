/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_SHARD_H
#define PBOX_WK_SHARD_H

#include "wk_ctx.h"

/* ---- shard.c: the sharded collectives (pbox.h's pbox_reduce_scatter(),
 * pbox_all_gather(), pbox_broadcast()); nothing of its own for libpbox --- */

#endif /* PBOX_WK_SHARD_H */
