/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Who is who: the ranks' numbering and their names. With local aggregation
 * the ranks that share a data address are one machine (local.c sums among
 * them) and only the machines' leaders make the network job, whose ranks
 * are machines; a rank is always named by its world rank. Planned once at
 * pbox_start() (renumbered by local.c on a renewal); the log line's prefix.
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "local.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "sum.h"

void wk_log(const struct pbox *px, unsigned level, const char *fmt, ...)
{
	va_list ap;

	if (level > px->cfg.log.level)
		return;
	fprintf(stderr, "libpbox: rank %u: ", wk_local_world_rank(px, px->net.rank));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *wk_peer_name(const struct pbox *px, uint32_t rank, char *buf, size_t cap)
{
	char ip[INET_ADDRSTRLEN] = "?";

	if (rank < px->net.n)
		inet_ntop(AF_INET, &px->cfg.peers[rank].ip_be, ip, sizeof(ip));
	snprintf(buf, cap, "rank %u (%s:%u)", wk_local_world_rank(px, rank), ip,
		 rank < px->net.n ? (unsigned)px->cfg.peers[rank].port : 0u);
	return buf;
}

static bool groups(const struct pbox *px, uint32_t ip_be)
{
	unsigned mode = px->cfg.worker.local_aggregation;

	if (mode == WRK_LOCAL_OFF)
		return false;
	return mode == WRK_LOCAL_ON || (ntohl(ip_be) >> 24) != 127;
}

int wk_local_plan(struct pbox *px)
{
	uint32_t n = px->net.n, r, q, m = 0, *mach;
	struct wk_local *lc;
	bool any = false;

	mach = malloc(n * sizeof(*mach));
	if (!mach)
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	for (r = 0; r < n; r++) {
		mach[r] = UINT32_MAX;
		for (q = 0; q < r && groups(px, px->cfg.peers[r].ip_be); q++)
			if (px->cfg.peers[q].ip_be == px->cfg.peers[r].ip_be) {
				mach[r] = mach[q];
				any = true;
				break;
			}
		if (mach[r] == UINT32_MAX)
			mach[r] = m++;
	}
	if (!any) { /* a machine per rank: nothing to aggregate locally */
		free(mach);
		return PBOX_OK;
	}
	lc = calloc(1, sizeof(*lc));
	if (lc) {
		lc->leader_of = calloc(m, sizeof(uint32_t));
		lc->ranks = calloc(n, sizeof(uint32_t));
		lc->gone = calloc(m, sizeof(uint32_t));
		lc->world_peers = malloc(n * sizeof(*lc->world_peers));
	}
	if (!lc || !lc->leader_of || !lc->ranks || !lc->world_peers || !lc->gone) {
		if (lc) {
			free(lc->leader_of);
			free(lc->ranks);
			free(lc->world_peers);
			free(lc->gone);
		}
		free(lc);
		free(mach);
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	}
	lc->world_rank = px->net.rank;
	lc->world_n = n;
	lc->machines = m;
	lc->machine = mach[px->net.rank];
	lc->lfd = lc->efd = -1;
	memcpy(lc->world_peers, px->cfg.peers, n * sizeof(*lc->world_peers));
	for (r = n; r-- > 0;)
		lc->leader_of[mach[r]] = r;
	for (r = 0; r < n; r++)
		if (mach[r] == lc->machine) {
			if (r == px->net.rank)
				lc->local_rank = lc->local_size;
			lc->ranks[lc->local_size++] = r;
		}
	lc->mach_of = mach;
	lc->piece_bytes = px->cfg.tuning.partition_size;
	lc->ops = sum_ops_best();
	px->loc = lc;
	if (leader(lc)) { /* the network job is the machines' leaders */
		for (q = 0; q < m; q++)
			px->cfg.peers[q] = lc->world_peers[lc->leader_of[q]];
		px->net.n = px->cfg.worker.world_size = m;
		px->net.rank = px->cfg.worker.rank = lc->machine;
	}
	wk_log(px, CFG_LOG_INFO,
	       "rank %u: %u ranks on %u machines; this machine has %u (local rank %u%s)",
	       lc->world_rank, n, m, lc->local_size, lc->local_rank,
	       leader(lc) ? ", its leader" : "");
	return PBOX_OK;
}

uint32_t wk_local_world_rank(const struct pbox *px, uint32_t rank)
{
	const struct wk_local *lc = px->loc;

	/* a leader's network ranks are machines; the others have none */
	return lc && leader(lc) && rank < lc->machines ? lc->leader_of[rank] : rank;
}

uint32_t wk_world_n(const struct pbox *px)
{
	return px->loc ? px->loc->world_n : px->net.n;
}

uint32_t wk_world_rank(const struct pbox *px)
{
	return px->loc ? px->loc->world_rank : px->net.rank;
}

void wk_local_kick(const struct pbox *px)
{
	if (px->loc)
		kick(px->loc);
}

bool wk_local_led(const struct pbox *px)
{
	return px->loc && !leader(px->loc);
}
