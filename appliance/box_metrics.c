/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The box's counters for Prometheus: GET /metrics on the management address
 * ([telemetry] metrics_port, 9571 by default), in the text exposition format
 * (version 0.0.4) with HELP and TYPE lines, served by libmicrohttpd on a
 * thread of its own. No DPDK telemetry socket is needed to read them.
 *
 *   pbox_core_*_total{core,cpu,node}       every per-core counter (box_stats.c)
 *   pbox_core_drops_total{...,layer,reason} every drop, by layer (wire, ss) and reason
 *   pbox_job_*{job}                        per job: geometry, counters, drops
 *   pbox_state_bytes_{budget,used}{node}   job memory against its budget
 *   pbox_port_*_total{port}                the ports' own ethdev counters
 *                                          (imissed, rx_nombuf, oerrors, ...)
 *
 * Control path. The cores' counters are read, never written; the job
 * registry is read under the control plane's lock, as telemetry does.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>

#include "box.h"

#define METRICS_MAX_DESCS 64

struct box_metrics {
	struct box *b;
	struct box_ctl *c;
	struct MHD_Daemon *d;
};

/* ---- the exposition -------------------------------------------------------- */

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newline escaped, as the format asks. */
static void label_value(FILE *f, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f);
		if (*v == '\n')
			fputs("\\n", f);
		else
			fputc(*v, f);
	}
}

/* The per-core counters, captured once per core so that each family can
 * be written whole (the format wants a family's samples together). */
struct core_rows {
	unsigned n;
	struct {
		char key[48];
		const char *help;
		enum box_stat_kind kind;
		const char *reason;
	} d[METRICS_MAX_DESCS];
	uint64_t v[METRICS_MAX_DESCS];
};

static void capture(void *arg, const struct box_stat_desc *d, uint64_t value)
{
	struct core_rows *r = arg;

	if (r->n == METRICS_MAX_DESCS)
		return;
	snprintf(r->d[r->n].key, sizeof(r->d[r->n].key), "%s", d->key);
	r->d[r->n].help = d->help;
	r->d[r->n].kind = d->kind;
	r->d[r->n].reason = d->reason;
	r->v[r->n++] = value;
}

static void core_labels(FILE *f, const struct box_lcore *lc, unsigned l)
{
	fprintf(f, "core=\"%u\",cpu=\"%u\",node=\"%u\"", l, lc->cpu, lc->node);
}

static void render_cores(FILE *f, const struct box *b)
{
	static struct core_rows rows[RTE_MAX_LCORE]; /* under the render lock */
	unsigned l, i, first = RTE_MAX_LCORE;
	char name[96];

	for (l = 0; l < RTE_MAX_LCORE; l++) {
		rows[l].n = 0;
		if (!b->lc[l] || !b->lc[l]->active)
			continue;
		box_stats_visit(&b->lc[l]->st, capture, &rows[l]);
		if (first == RTE_MAX_LCORE)
			first = l;
	}
	if (first == RTE_MAX_LCORE)
		return;
	for (i = 0; i < rows[first].n; i++) {
		if (rows[first].d[i].kind != BOX_STAT_CORE)
			continue;
		snprintf(name, sizeof(name), "pbox_core_%s_total", rows[first].d[i].key);
		family(f, name, "counter", rows[first].d[i].help);
		for (l = first; l < RTE_MAX_LCORE; l++) {
			if (!rows[l].n)
				continue;
			fprintf(f, "%s{", name);
			core_labels(f, b->lc[l], l);
			fprintf(f, "} %" PRIu64 "\n", rows[l].v[i]);
		}
	}
	family(f, "pbox_core_drops_total", "counter",
	       "Frames and pushes dropped by a data core, by layer (wire: nic_wire_parse; "
	       "ss: the summation service) and reason");
	for (l = first; l < RTE_MAX_LCORE; l++)
		for (i = 0; i < rows[l].n; i++) {
			if (rows[l].d[i].kind == BOX_STAT_CORE)
				continue;
			fprintf(f, "pbox_core_drops_total{");
			core_labels(f, b->lc[l], l);
			fprintf(f, ",layer=\"%s\",reason=\"%s\"} %" PRIu64 "\n",
				rows[l].d[i].kind == BOX_STAT_NIC_DROP ? "wire" : "ss",
				rows[l].d[i].reason, rows[l].v[i]);
		}
}

/* Per-job families; the registry is held locked by the caller. */
static void render_jobs(FILE *f, struct box_ctl *c)
{
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{"pbox_job_workers", "gauge", "Workers (n) of a registered job"},
		{"pbox_job_chunks", "gauge", "Chunks of a job over all endpoints"},
		{"pbox_job_state_bytes", "gauge", "Box memory a job holds (accumulators, results)"},
		{"pbox_job_fragment_bytes", "gauge", "A job's fragment size"},
		{"pbox_job_pushes_total", "counter", "Pushes that reached a job's state"},
		{"pbox_job_summed_total", "counter", "Contributions added into a job's sums"},
		{"pbox_job_completed_total", "counter", "Fragment rounds a job completed"},
		{"pbox_job_results_total", "counter", "Result frames sent for a job (n per round)"},
		{"pbox_job_answers_total", "counter", "Results re-sent to one worker of a job"},
		{"pbox_job_retransmissions_total", "counter",
		 "Pushes a job's workers flagged as retransmissions"},
		{"pbox_job_probes_total", "counter", "Probes a job's workers sent (timeouts)"},
		{"pbox_job_needless_resends_total", "counter",
		 "Retransmitted pushes a job's state already had (duplicates, answered)"},
	};
	/* each job's counters summed over its cores once, then written by family */
	static struct {
		struct box_job_view v;
		struct ss_counters s;
	} job[SS_MAX_JOBS]; /* under the render lock */
	unsigned n = box_ctl_n_jobs(c), i, k, r;

	for (i = 0; i < n && i < SS_MAX_JOBS; i++) {
		box_ctl_job(c, i, &job[i].v);
		box_job_counters(&job[i].v, &job[i].s);
	}
	family(f, "pbox_jobs", "gauge", "Jobs registered");
	fprintf(f, "pbox_jobs %u\n", n);
	for (k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		family(f, fam[k].name, fam[k].type, fam[k].help);
		for (i = 0; i < n; i++) {
			const struct box_job_view *v = &job[i].v;
			const struct ss_counters *q = &job[i].s;
			const uint64_t val[] = {v->n,	       v->chunks,  v->bytes,
						v->frag_size,  q->rx,	   q->summed,
						q->completed,  q->results, q->answers,
						q->retrans_rx, q->probes,  q->needless};

			fprintf(f, "%s{job=\"%u\",dtype=\"%s\"} %" PRIu64 "\n", fam[k].name, v->id,
				sum_dtype_name((enum sum_dtype)v->dtype), val[k]);
		}
	}
	family(f, "pbox_job_drops_total", "counter",
	       "Pushes to a job the summation service dropped, by reason");
	for (i = 0; i < n; i++)
		for (r = 0; r < SS_DROP_COUNT; r++)
			fprintf(f, "pbox_job_drops_total{job=\"%u\",reason=\"%s\"} %" PRIu64 "\n",
				job[i].v.id, ss_drop_id((enum ss_drop)r), job[i].s.drop[r]);
}

static void render_ports(FILE *f, const struct box *b)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} fam[] = {
		{"pbox_port_rx_packets_total", "Packets the port received (ethdev ipackets)",
		 offsetof(struct rte_eth_stats, ipackets)},
		{"pbox_port_tx_packets_total", "Packets the port sent (ethdev opackets)",
		 offsetof(struct rte_eth_stats, opackets)},
		{"pbox_port_rx_bytes_total", "Bytes the port received (ethdev ibytes)",
		 offsetof(struct rte_eth_stats, ibytes)},
		{"pbox_port_tx_bytes_total", "Bytes the port sent (ethdev obytes)",
		 offsetof(struct rte_eth_stats, obytes)},
		{"pbox_port_rx_missed_total",
		 "Packets the NIC dropped for want of room in an rx queue (ethdev imissed)",
		 offsetof(struct rte_eth_stats, imissed)},
		{"pbox_port_rx_errors_total", "Erroneous packets received (ethdev ierrors)",
		 offsetof(struct rte_eth_stats, ierrors)},
		{"pbox_port_tx_errors_total", "Packets the port failed to send (ethdev oerrors)",
		 offsetof(struct rte_eth_stats, oerrors)},
		{"pbox_port_rx_nombuf_total", "Receive mbuf allocation failures (ethdev rx_nombuf)",
		 offsetof(struct rte_eth_stats, rx_nombuf)},
	};
	struct rte_eth_stats st[BOX_MAX_PORTS];
	bool ok[BOX_MAX_PORTS];
	unsigned p, k;

	for (p = 0; p < b->n_ports; p++)
		ok[p] = rte_eth_stats_get(b->port[p].id, &st[p]) == 0;
	for (k = 0; k < sizeof(fam) / sizeof(fam[0]); k++) {
		family(f, fam[k].name, "counter", fam[k].help);
		for (p = 0; p < b->n_ports; p++) {
			if (!ok[p])
				continue;
			fprintf(f, "%s{port=\"", fam[k].name);
			label_value(f, b->port[p].name);
			fprintf(f, "\"} %" PRIu64 "\n",
				*(const uint64_t *)((const char *)&st[p] + fam[k].off));
		}
	}
}

char *box_metrics_render(struct box *b, struct box_ctl *c, size_t *len)
{
	static pthread_mutex_t render = PTHREAD_MUTEX_INITIALIZER; /* its static rows */
	char *out = NULL;
	FILE *f;
	unsigned node;

	f = open_memstream(&out, len);
	if (!f)
		return NULL;
	pthread_mutex_lock(&render);
	family(f, "pbox_info", "gauge", "pboxd: summation kernels in use (value 1)");
	fprintf(f, "pbox_info{simd=\"%s\"} 1\n", sum_ops_best()->name);
	family(f, "pbox_endpoints", "gauge", "Endpoints (port, queue) the box serves");
	fprintf(f, "pbox_endpoints %u\n", b->n_eps);
	family(f, "pbox_tsc_hz", "gauge", "TSC frequency: busy_cycles per second of a busy core");
	fprintf(f, "pbox_tsc_hz %" PRIu64 "\n", rte_get_tsc_hz());
	render_cores(f, b);
	box_ctl_lock(c);
	render_jobs(f, c);
	family(f, "pbox_state_bytes_budget", "gauge",
	       "Bytes of job state the box may hold on a NUMA node ([memory] hugepage_budget)");
	for (node = 0; node < NUMA_MAX_NODES; node++)
		if (b->node_budget[node])
			fprintf(f, "pbox_state_bytes_budget{node=\"%u\"} %" PRIu64 "\n", node,
				b->node_budget[node]);
	family(f, "pbox_state_bytes_used", "gauge", "Bytes of job state held on a NUMA node");
	for (node = 0; node < NUMA_MAX_NODES; node++)
		if (b->node_budget[node])
			fprintf(f, "pbox_state_bytes_used{node=\"%u\"} %" PRIu64 "\n", node,
				box_ctl_used(c, node));
	box_ctl_unlock(c);
	render_ports(f, b);
	pthread_mutex_unlock(&render);
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* ---- HTTP ------------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
			     char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result rc;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	rc = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **state)
{
	struct box_metrics *m = cls;
	char *body;
	size_t len = 0;

	(void)version;
	(void)upload;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
		static char not_allowed[] = "GET only\n";

		/* at once, from the headers: a body is not read */
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_allowed,
			     strlen(not_allowed), MHD_RESPMEM_PERSISTENT);
	}
	if (!*state) { /* first call: headers only; answer on the last */
		*state = m;
		return MHD_YES;
	}
	if (*upload_len) { /* a GET's body: read and let go */
		*upload_len = 0;
		return MHD_YES;
	}
	if (strcmp(url, "/metrics")) {
		static char not_found[] = "pboxd serves /metrics only\n";

		return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", not_found, strlen(not_found),
			     MHD_RESPMEM_PERSISTENT);
	}
	body = box_metrics_render(m->b, m->c, &len);
	if (!body)
		return MHD_NO;
	return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
		     MHD_RESPMEM_MUST_FREE);
}

struct box_metrics *box_metrics_start(struct box *b, struct box_ctl *c)
{
	struct box_metrics *m = calloc(1, sizeof(*m));
	struct sockaddr_in sa = {.sin_family = AF_INET};
	uint16_t port = (uint16_t)b->cfg->telemetry.metrics_port;
	char ip[INET_ADDRSTRLEN];

	if (!m)
		return NULL;
	m->b = b;
	m->c = c;
	sa.sin_addr.s_addr = b->cfg->mgmt.address.be;
	sa.sin_port = htons(port);
	inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
	/* Bounded like the control plane: at most 4 connections from one address
	 * (a few addresses cannot take every slot from a scrape), each closed
	 * after 2 s without a byte. */
	m->d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, port, NULL, NULL, on_request,
		m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, 256u,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, 4u, MHD_OPTION_CONNECTION_TIMEOUT, 2u,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536, MHD_OPTION_END);
	if (!m->d) {
		fprintf(stderr,
			"pboxd: [telemetry] metrics_port: cannot serve http://%s:%u/metrics "
			"(port in use?)\n",
			ip, port);
		free(m);
		return NULL;
	}
	printf("pboxd: Prometheus metrics on http://%s:%u/metrics\n", ip, port);
	return m;
}

void box_metrics_stop(struct box_metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
