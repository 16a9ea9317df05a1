/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Asynchronous training (BytePS's asynchronous mode, its Theorem 2): a key
 * is a parameter store, laid out over the box's endpoints and the ranks'
 * SS_GPUs as a push-pull's tensor is (units.c's assign()), kept by the SS
 * core's SS_ASYNC chunks (ss.h) there.
 * Each rank's first push-pull of the key carries its initial parameters
 * (rank 0's set the store); every later one a delta, added where it lands
 * with no round barrier, the parameters right after it coming back to
 * that rank alone. The engine moves these push-pulls as any other: a
 * round is the rank's own count of its calls, so a lost push is resent,
 * a lost answer pulled, and the store adds each delta once ([job]
 * staleness bounds how far a rank runs ahead). Host memory, the network
 * job.
 */
#include <inttypes.h>

#include "sum.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_submit.h"
#include "wk_async.h"

int pbox_push_pull_async(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
			 enum pbox_dtype dtype, struct pbox_handle **opp)
{
	static const char fn[] = "pbox_push_pull_async";

	if (!px || !in || !out || !opp)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": a NULL argument", fn, key);
	*opp = NULL;
	if (key >= WK_KEY_OWN)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": keys from 2^63 up are libpbox's own", fn, key);
	if (px->loc)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": not with local aggregation ([worker] "
			      "local_aggregation = off for asynchronous training)",
			      fn, key);
	return wk_collective(px, fn, key, in, out, count, dtype, WK_ASYNC, 0, 0, opp);
}
