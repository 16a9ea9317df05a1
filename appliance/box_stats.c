/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The box's counters as the readers see them: one list of every per-core
 * counter and drop reason with its key and its meaning, totals over the
 * data cores, and a job's counters summed over the cores that serve it.
 * Read by the control plane (STATS), DPDK telemetry (/pbox/stats ...) and the
 * Prometheus endpoint alike, so the three say the same. Control path: the
 * cores' counters are read here, never written.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "box.h"

static const struct box_stat_desc core_descs[] = {
#define BOX__CNT_DESC(n, s) {#n, s, BOX_STAT_CORE, NULL},
	BOX_FOREACH_CORE_CNT(BOX__CNT_DESC)
#undef BOX__CNT_DESC
		{"summed", "contributions added into accumulators", BOX_STAT_CORE, NULL},
	{"completed", "fragment rounds completed (each sent to all n workers)", BOX_STAT_CORE,
	 NULL},
};
#define N_CORE_DESCS (sizeof(core_descs) / sizeof(core_descs[0]))

/* Both counter structs are runs of uint64_t: the core counters first. */
_Static_assert(offsetof(struct box_core_stats, summed) == (N_CORE_DESCS - 2) * sizeof(uint64_t) +
								  sizeof(uint64_t[NIC_DROP_COUNT]) +
								  sizeof(uint64_t[SS_DROP_COUNT]),
	       "struct box_core_stats and core_descs disagree");

void box_stats_visit(const struct box_core_stats *st, box_stat_fn *fn, void *arg)
{
	const uint64_t *v = (const uint64_t *)st;
	struct box_stat_desc d;
	char k[64];
	unsigned i;

	for (i = 0; i < N_CORE_DESCS - 2; i++)
		fn(arg, &core_descs[i], v[i]);
	fn(arg, &core_descs[N_CORE_DESCS - 2], st->summed);
	fn(arg, &core_descs[N_CORE_DESCS - 1], st->completed);
	for (i = 1; i < NIC_DROP_COUNT; i++) {
		snprintf(k, sizeof(k), "drop_%s", nic_drop_id((enum nic_drop)i));
		d = (struct box_stat_desc){k, nic_drop_name((enum nic_drop)i), BOX_STAT_NIC_DROP,
					   nic_drop_id((enum nic_drop)i)};
		fn(arg, &d, st->nic_drop[i]);
	}
	for (i = 0; i < SS_DROP_COUNT; i++) {
		snprintf(k, sizeof(k), "ss_%s", ss_drop_id((enum ss_drop)i));
		d = (struct box_stat_desc){k, ss_drop_name((enum ss_drop)i), BOX_STAT_SS_DROP,
					   ss_drop_id((enum ss_drop)i)};
		fn(arg, &d, st->ss_drop[i]);
	}
}

void box_stats_total(const struct box *b, struct box_core_stats *tot)
{
	unsigned l;
	size_t i;

	memset(tot, 0, sizeof(*tot));
	for (l = 0; l < RTE_MAX_LCORE; l++) {
		const uint64_t *s;
		uint64_t *a = (uint64_t *)tot;

		if (!b->lc[l] || !b->lc[l]->active)
			continue;
		s = (const uint64_t *)&b->lc[l]->st;
		for (i = 0; i < sizeof(*tot) / sizeof(uint64_t); i++)
			a[i] += s[i];
	}
}

void box_job_counters(const struct box_job_view *v, struct ss_counters *sum)
{
	unsigned l, r;

	memset(sum, 0, sizeof(*sum));
	for (l = 0; l < RTE_MAX_LCORE; l++)
		for (const struct ss_job *s = v->per_lcore[l]; s; s = s->next) {
			sum->rx += s->cnt.rx;
			sum->summed += s->cnt.summed;
			sum->completed += s->cnt.completed;
			sum->results += s->cnt.results;
			sum->answers += s->cnt.answers;
			sum->retrans_rx += s->cnt.retrans_rx;
			sum->probes += s->cnt.probes;
			sum->needless += s->cnt.needless;
			for (r = 0; r < SS_DROP_COUNT; r++)
				sum->drop[r] += s->cnt.drop[r];
		}
}
