/* SPDX-License-Identifier: BSD-3-Clause */
/* Placement planner: see numa_plan.h for the rules. Pure: no I/O but
 * numa_plan_print(), no global state. */
#include "numa_plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int plan_fail(struct numa_plan *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int plan_fail(struct numa_plan *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->error, sizeof(p->error), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static void plan_warn(struct numa_plan *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void plan_warn(struct numa_plan *p, const char *fmt, ...)
{
	va_list ap;

	if (p->n_warnings >= NUMA_MAX_WARNINGS)
		return;
	va_start(ap, fmt);
	vsnprintf(p->warning[p->n_warnings++], NUMA_MSG_LEN, fmt, ap);
	va_end(ap);
}

/* Pick the data cores: the explicit list, or every usable CPU but the first
 * (kept for the control plane and the OS) when there is more than one. */
static int pick_cores(const struct numa_plan_in *in, struct numa_plan *p)
{
	const struct numa_topo *t = in->topo;
	unsigned c, first = NUMA_MAX_CPUS;

	for (c = 0; c < NUMA_MAX_CPUS; c++)
		if (t->cpu_node[c] >= 0) {
			first = c;
			break;
		}
	if (first == NUMA_MAX_CPUS)
		return plan_fail(p, "no usable CPU");

	for (c = 0; c < NUMA_MAX_CPUS; c++) {
		bool want = in->cores.autosel ? (t->cpu_node[c] >= 0 &&
						 (c != first || numa_topo_cpus(t, -1) == 1))
					      : cfg_cores_has(&in->cores, c);

		if (!want)
			continue;
		if (t->cpu_node[c] < 0)
			return plan_fail(
				p,
				"[cores] list: CPU %u is not online or not in this process's CPU affinity",
				c);
		if (p->n_cores == NUMA_MAX_CORES)
			return plan_fail(p, "[cores] list: more than %d data cores",
					 NUMA_MAX_CORES);
		p->core[p->n_cores].cpu = c;
		p->core[p->n_cores].node = (unsigned)t->cpu_node[c];
		p->n_cores++;
	}
	/* the control plane: the first usable CPU that is not a data core */
	p->control_shared = true;
	p->control_cpu = p->core[0].cpu;
	for (c = 0; c < NUMA_MAX_CPUS; c++)
		if (t->cpu_node[c] >= 0 && (in->cores.autosel ? c == first && p->core[0].cpu != c
							      : !cfg_cores_has(&in->cores, c))) {
			p->control_cpu = c;
			p->control_shared = false;
			break;
		}
	return 0;
}

/* The node index serving port @i: its own when it has data cores, else the
 * nearest that has. */
static int serving_node(const struct numa_plan_in *in, struct numa_plan *p, unsigned i,
			const unsigned *cores_on)
{
	const struct numa_topo *t = in->topo;
	const struct numa_port_in *port = &in->port[i];
	int own = port->node < 0 ? (int)p->core[0].node : numa_topo_node_index(t, port->node);
	unsigned n, best = 0, bestd = 256;

	if (own < 0)
		return plan_fail(p, "[port %s]: NUMA node %d does not exist on this machine",
				 port->name, port->node);
	if (cores_on[own])
		return own;
	for (n = 0; n < t->n_nodes; n++)
		if (cores_on[n] && t->dist[own][n] < bestd) {
			bestd = t->dist[own][n];
			best = n;
		}
	plan_warn(
		p,
		"port %s is on node %d, which has no data core: served from node %d (cross-NUMA; add cores of node %d to [cores] list)",
		port->name, t->node_id[own], t->node_id[best], t->node_id[own]);
	return (int)best;
}

struct ep_order {
	unsigned port, queue;
	uint64_t w;
};

static int ep_cmp(const void *a, const void *b)
{
	const struct ep_order *x = a, *y = b;

	if (x->w != y->w)
		return x->w > y->w ? -1 : 1;
	if (x->port != y->port)
		return x->port < y->port ? -1 : 1;
	return x->queue < y->queue ? -1 : (x->queue > y->queue);
}

static bool core_has_port(const struct numa_core_plan *c, unsigned port)
{
	for (unsigned e = 0; e < c->n_eps; e++)
		if (c->ep[e].port == port)
			return true;
	return false;
}

static int place_endpoints(const struct numa_plan_in *in, struct numa_plan *p,
			   const unsigned *cores_on)
{
	struct ep_order *eps;
	unsigned i, q, n_eps = 0, total = 0;

	for (i = 0; i < in->n_ports; i++) {
		unsigned avail = cores_on[p->port_node[i]];

		p->port_queues[i] = in->port[i].max_queues && in->port[i].max_queues < avail
					    ? in->port[i].max_queues
					    : avail;
		total += p->port_queues[i];
	}
	eps = calloc(total, sizeof(*eps));
	if (!eps)
		return plan_fail(p, "out of memory");
	for (i = 0; i < in->n_ports; i++)
		for (q = 0; q < p->port_queues[i]; q++) {
			eps[n_eps].port = i;
			eps[n_eps].queue = q;
			eps[n_eps].w = in->port[i].mbps * 1000 / p->port_queues[i];
			n_eps++;
		}
	qsort(eps, n_eps, sizeof(*eps), ep_cmp);

	for (i = 0; i < n_eps; i++) {
		unsigned node = p->port_node[eps[i].port], c, best = NUMA_MAX_CORES;

		for (c = 0; c < p->n_cores; c++) {
			const struct numa_core_plan *cc = &p->core[c];

			if (cc->node != node || core_has_port(cc, eps[i].port))
				continue;
			if (best == NUMA_MAX_CORES || cc->load_kbps < p->core[best].load_kbps)
				best = c;
		}
		/* cannot fail: a port has at most as many queues as its node has cores */
		struct numa_core_plan *bc = &p->core[best];
		bc->ep[bc->n_eps].port = (uint8_t)eps[i].port;
		bc->ep[bc->n_eps].queue = (uint16_t)eps[i].queue;
		bc->ep[bc->n_eps].weight_kbps = eps[i].w;
		bc->n_eps++;
		bc->load_kbps += eps[i].w;
	}
	free(eps);
	return 0;
}

static int size_memory(const struct numa_plan_in *in, struct numa_plan *p)
{
	uint64_t pools = 0, mbps = 0, left;
	unsigned n, i;

	for (i = 0; i < in->n_ports; i++) {
		struct numa_node_plan *np = &p->node[p->port_node[i]];

		np->n_queues += p->port_queues[i];
		np->mbps += in->port[i].mbps;
		mbps += in->port[i].mbps;
	}
	for (i = 0; i < p->n_cores; i++)
		if (p->core[i].n_eps)
			p->node[p->core[i].node].n_cores++;
	for (n = 0; n < p->n_nodes; n++) {
		struct numa_node_plan *np = &p->node[n];

		if (!np->n_queues)
			continue;
		/* every descriptor filled, a burst in hand per queue, the caches */
		np->pool_mbufs =
			(uint64_t)np->n_queues * (in->rx_desc + in->tx_desc + 2 * in->burst) +
			(uint64_t)np->n_cores * NUMA_MEMPOOL_CACHE * 2;
		np->pool_bytes = np->pool_mbufs * in->mbuf_bytes;
		pools += np->pool_bytes;
	}
	if (pools >= in->hugepage_budget)
		return plan_fail(
			p,
			"[memory] hugepage_budget: %llu MB is too small; the mbuf pools alone need %llu MB",
			(unsigned long long)(in->hugepage_budget >> 20),
			(unsigned long long)((pools + (1u << 20) - 1) >> 20));
	left = in->hugepage_budget - pools;
	for (n = 0; n < p->n_nodes; n++)
		if (p->node[n].mbps)
			p->node[n].state_bytes =
				(uint64_t)((double)left * (double)p->node[n].mbps / (double)mbps);
	return 0;
}

int numa_plan_build(const struct numa_plan_in *in, struct numa_plan *p)
{
	unsigned cores_on[NUMA_MAX_NODES] = {0};
	unsigned i;
	int rc;

	memset(p, 0, sizeof(*p));
	if (in->n_ports == 0)
		return plan_fail(p, "no data port: add a [port NAME] section");
	if (in->n_ports > NUMA_MAX_PORTS)
		return plan_fail(p, "%u data ports; at most %d", in->n_ports, NUMA_MAX_PORTS);
	if (in->topo->n_nodes == 0 || in->topo->n_nodes > NUMA_MAX_NODES)
		return plan_fail(p, "topology has %u NUMA nodes", in->topo->n_nodes);
	p->n_nodes = in->topo->n_nodes;
	rc = pick_cores(in, p);
	if (rc)
		return rc;
	if (p->n_cores == 0)
		return plan_fail(p, "no data core");
	for (i = 0; i < p->n_cores; i++)
		cores_on[p->core[i].node]++;
	for (i = 0; i < in->n_ports; i++) {
		int n = serving_node(in, p, i, cores_on);

		if (n < 0)
			return n;
		p->port_node[i] = (unsigned)n;
	}
	rc = place_endpoints(in, p, cores_on);
	if (rc)
		return rc;

	unsigned idle = 0;
	for (i = 0; i < p->n_cores; i++)
		idle += p->core[i].n_eps == 0;
	if (idle)
		plan_warn(
			p,
			"%u of %u data cores serve no queue and will stay idle (no local port, or ports limited to fewer queues than cores)",
			idle, p->n_cores);
	return size_memory(in, p);
}

void numa_plan_print(const struct numa_plan *p, const struct numa_plan_in *in, FILE *f)
{
	unsigned i, e;

	fprintf(f, "placement: %u data cores, %u ports, control plane on cpu %u%s\n", p->n_cores,
		in->n_ports, p->control_cpu, p->control_shared ? " (shared with a data core)" : "");
	for (i = 0; i < p->n_cores; i++) {
		const struct numa_core_plan *c = &p->core[i];

		fprintf(f, "  cpu %-4u node %-2d load %8.2f Gb/s:", c->cpu,
			in->topo->node_id[c->node], (double)c->load_kbps / 1e6);
		if (!c->n_eps)
			fprintf(f, " idle");
		for (e = 0; e < c->n_eps; e++)
			fprintf(f, " %s/q%u", in->port[c->ep[e].port].name, c->ep[e].queue);
		fprintf(f, "\n");
	}
	for (i = 0; i < p->n_nodes; i++) {
		const struct numa_node_plan *n = &p->node[i];

		if (!n->n_queues)
			continue;
		fprintf(f,
			"  node %-2d %u cores, %u queues, %.1f Gb/s, pool %llu mbufs (%llu MB), state %llu MB\n",
			in->topo->node_id[i], n->n_cores, n->n_queues, (double)n->mbps / 1e3,
			(unsigned long long)n->pool_mbufs,
			(unsigned long long)(n->pool_bytes >> 20),
			(unsigned long long)(n->state_bytes >> 20));
	}
	for (i = 0; i < p->n_warnings; i++)
		fprintf(f, "  warning: %s\n", p->warning[i]);
}
