/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Telemetry through DPDK's library (dpdk-telemetry.py, pboxctl):
 *   /pbox/stats   box totals: every core counter and drop reason summed
 *   /pbox/cores   the same per data core
 *   /pbox/jobs    per job: its geometry and its counters summed over cores
 * Runs on DPDK's telemetry thread. Core counters are read, never written,
 * from here; the job registry is read under the control plane's lock.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_telemetry.h>

#include "box.h"

static struct box *tb;
static struct box_ctl *tc;

static const char *const core_cnt_names[] = {
#define BOX__CNT_NAME(n, s) #n,
	BOX_FOREACH_CORE_CNT(BOX__CNT_NAME)
#undef BOX__CNT_NAME
};
#define N_CORE_CNT (sizeof(core_cnt_names) / sizeof(core_cnt_names[0]))

static const char *const nic_drop_ids[NIC_DROP_COUNT] = {[NIC_DROP_NONE] = "none",
#define BOX__NIC_ID(n, s) [NIC_DROP_##n] = #n,
							 NIC_FOREACH_DROP(BOX__NIC_ID)
#undef BOX__NIC_ID
};

static const char *const ss_drop_ids[SS_DROP_COUNT] = {
#define BOX__SS_ID(n, s) [SS_DROP_##n] = #n,
	SS_FOREACH_DROP(BOX__SS_ID)
#undef BOX__SS_ID
};

/* "prefix_name" in lower case: the key of a drop counter. */
static void key(char *out, size_t len, const char *prefix, const char *name)
{
	size_t i;

	snprintf(out, len, "%s_%s", prefix, name);
	for (i = 0; out[i]; i++)
		out[i] = (char)tolower((unsigned char)out[i]);
}

void box_stats_each(const struct box_core_stats *st,
		    void (*fn)(void *arg, const char *key, uint64_t value), void *arg)
{
	const uint64_t *v = (const uint64_t *)st; /* the struct is a run of uint64_t */
	char k[64];
	unsigned i;

	for (i = 0; i < N_CORE_CNT; i++)
		fn(arg, core_cnt_names[i], v[i]);
	fn(arg, "summed", st->summed);
	fn(arg, "completed", st->completed);
	for (i = 1; i < NIC_DROP_COUNT; i++) {
		key(k, sizeof(k), "drop", nic_drop_ids[i]);
		fn(arg, k, st->nic_drop[i]);
	}
	for (i = 0; i < SS_DROP_COUNT; i++) {
		key(k, sizeof(k), "ss", ss_drop_ids[i]);
		fn(arg, k, st->ss_drop[i]);
	}
}

static void add_u64(void *d, const char *k, uint64_t v)
{
	rte_tel_data_add_dict_u64(d, k, v);
}

/* The counters of @st into @d. */
static void add_core_stats(struct rte_tel_data *d, const struct box_core_stats *st)
{
	box_stats_each(st, add_u64, d);
}

static void sum_stats(struct box_core_stats *t, const struct box_core_stats *s)
{
	uint64_t *a = (uint64_t *)t;
	const uint64_t *b = (const uint64_t *)s;
	size_t i;

	for (i = 0; i < sizeof(*t) / sizeof(uint64_t); i++)
		a[i] += b[i];
}

void box_stats_total(const struct box *b, struct box_core_stats *tot)
{
	unsigned l;

	memset(tot, 0, sizeof(*tot));
	for (l = 0; l < RTE_MAX_LCORE; l++)
		if (b->lc[l] && b->lc[l]->active)
			sum_stats(tot, &b->lc[l]->st);
}

static int tel_stats(const char *cmd, const char *params, struct rte_tel_data *d)
{
	struct box_core_stats tot;
	uint64_t used = 0, budget = 0;
	unsigned l, n;

	(void)cmd;
	(void)params;
	box_stats_total(tb, &tot);
	rte_tel_data_start_dict(d);
	add_core_stats(d, &tot);
	box_ctl_lock(tc);
	n = box_ctl_n_jobs(tc);
	for (l = 0; l < NUMA_MAX_NODES; l++) {
		used += box_ctl_used(tc, l);
		budget += tb->node_budget[l];
	}
	box_ctl_unlock(tc);
	rte_tel_data_add_dict_u64(d, "jobs", n);
	rte_tel_data_add_dict_u64(d, "state_bytes_used", used);
	rte_tel_data_add_dict_u64(d, "state_bytes_budget", budget);
	rte_tel_data_add_dict_u64(d, "endpoints", tb->n_eps);
	rte_tel_data_add_dict_u64(d, "tsc_hz", rte_get_tsc_hz());
	return 0;
}

static int tel_cores(const char *cmd, const char *params, struct rte_tel_data *d)
{
	unsigned l;
	char name[32];

	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	for (l = 0; l < RTE_MAX_LCORE; l++) {
		const struct box_lcore *lc = tb->lc[l];
		struct rte_tel_data *c;

		if (!lc || !lc->active)
			continue;
		c = rte_tel_data_alloc();
		if (!c)
			return -ENOMEM;
		rte_tel_data_start_dict(c);
		rte_tel_data_add_dict_u64(c, "cpu", lc->cpu);
		rte_tel_data_add_dict_u64(c, "node", lc->node);
		rte_tel_data_add_dict_u64(c, "endpoints", lc->n_eps);
		add_core_stats(c, &lc->st);
		snprintf(name, sizeof(name), "lcore%u", l);
		rte_tel_data_add_dict_container(d, name, c, 0);
	}
	return 0;
}

static int tel_jobs(const char *cmd, const char *params, struct rte_tel_data *d)
{
	unsigned i, l, r, n;
	char name[32], k[64];

	(void)cmd;
	(void)params;
	rte_tel_data_start_dict(d);
	box_ctl_lock(tc);
	n = box_ctl_n_jobs(tc);
	for (i = 0; i < n; i++) {
		struct box_job_view v;
		struct ss_counters sum;
		struct rte_tel_data *c = rte_tel_data_alloc();

		if (!c)
			break;
		box_ctl_job(tc, i, &v);
		memset(&sum, 0, sizeof(sum));
		for (l = 0; l < RTE_MAX_LCORE; l++) {
			const struct ss_job *s = v.per_lcore[l];

			if (!s)
				continue;
			sum.rx += s->cnt.rx;
			sum.summed += s->cnt.summed;
			sum.completed += s->cnt.completed;
			sum.results += s->cnt.results;
			sum.answers += s->cnt.answers;
			sum.retrans_rx += s->cnt.retrans_rx;
			for (r = 0; r < SS_DROP_COUNT; r++)
				sum.drop[r] += s->cnt.drop[r];
		}
		rte_tel_data_start_dict(c);
		rte_tel_data_add_dict_u64(c, "n", v.n);
		rte_tel_data_add_dict_string(c, "dtype", sum_dtype_name((enum sum_dtype)v.dtype));
		rte_tel_data_add_dict_u64(c, "frag_size", v.frag_size);
		rte_tel_data_add_dict_u64(c, "chunk_size", v.chunk_size);
		rte_tel_data_add_dict_u64(c, "chunks", v.chunks);
		rte_tel_data_add_dict_u64(c, "state_bytes", v.bytes);
		rte_tel_data_add_dict_u64(c, "rx", sum.rx);
		rte_tel_data_add_dict_u64(c, "summed", sum.summed);
		rte_tel_data_add_dict_u64(c, "completed", sum.completed);
		rte_tel_data_add_dict_u64(c, "results", sum.results);
		rte_tel_data_add_dict_u64(c, "answers", sum.answers);
		rte_tel_data_add_dict_u64(c, "retrans_rx", sum.retrans_rx);
		for (r = 0; r < SS_DROP_COUNT; r++) {
			key(k, sizeof(k), "ss", ss_drop_ids[r]);
			rte_tel_data_add_dict_u64(c, k, sum.drop[r]);
		}
		snprintf(name, sizeof(name), "job%u", v.id);
		rte_tel_data_add_dict_container(d, name, c, 0);
	}
	box_ctl_unlock(tc);
	return 0;
}

int box_telemetry_register(struct box *b, struct box_ctl *c)
{
	int rc;

	tb = b;
	tc = c;
	rc = rte_telemetry_register_cmd("/pbox/stats", tel_stats,
					"Box totals: frames, sums, results, drops by reason");
	if (!rc)
		rc = rte_telemetry_register_cmd("/pbox/cores", tel_cores, "Per data core counters");
	if (!rc)
		rc = rte_telemetry_register_cmd("/pbox/jobs", tel_jobs,
						"Per job geometry and counters");
	return rc;
}
