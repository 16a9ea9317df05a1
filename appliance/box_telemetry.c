/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Telemetry through DPDK's library (dpdk-telemetry.py, pboxctl):
 *   /pbox/stats   box totals: every core counter and drop reason summed
 *   /pbox/cores   the same per data core
 *   /pbox/jobs    per job: its geometry and its counters summed over cores
 * Runs on DPDK's telemetry thread. Core counters are read, never written,
 * from here; the job registry is read under the control plane's lock.
 */
#include <stdio.h>
#include <string.h>

#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_telemetry.h>

#include "box.h"

static struct box *tb;
static struct box_ctl *tc;

static void add_u64(void *d, const struct box_stat_desc *k, uint64_t v)
{
	rte_tel_data_add_dict_u64(d, k->key, v);
}

/* The counters of @st into @d. */
static void add_core_stats(struct rte_tel_data *d, const struct box_core_stats *st)
{
	box_stats_visit(st, add_u64, d);
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
	unsigned i, r, n;
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
		box_job_counters(&v, &sum);
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
		rte_tel_data_add_dict_u64(c, "probes", sum.probes);
		rte_tel_data_add_dict_u64(c, "needless", sum.needless);
		for (r = 0; r < SS_DROP_COUNT; r++) {
			snprintf(k, sizeof(k), "ss_%s", ss_drop_id((enum ss_drop)r));
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
