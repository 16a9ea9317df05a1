/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The placement planner, a pure function: topology + configuration -> for
 * every data core its (port, queue) endpoints, for every node its mbuf pool
 * and its share of the hugepage budget.
 *
 * Rules (PHub's: keep every byte on the node of the NIC that carries it):
 *  - A port is served by the data cores of its own node. A port whose node
 *    has no data core is served by the nearest node that has one, and the
 *    plan says so in a warning (cross-NUMA traffic, slower, but it runs).
 *  - A port whose node is unknown (virtual devices, single-node VMs) takes
 *    the node of the first data core.
 *  - A port gets min(max_queues, data cores of its node) queues; each queue
 *    is an endpoint weighing bandwidth / queues. Endpoints go to the least
 *    loaded core of the node that has no queue of that port yet, heaviest
 *    first (LPT). With flow steering (max_queues 0 = unlimited) every core
 *    gets one queue of every local port and the node's cores are exactly
 *    balanced; with one queue per port, cores own whole ports.
 *  - Memory: each node's mbuf pool is sized from its queues; what is left
 *    of the budget is split across nodes by the bandwidth they serve, since
 *    chunks (so accumulators) follow endpoint weights.
 */
#ifndef PBOX_NUMA_PLAN_H
#define PBOX_NUMA_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cfg.h"
#include "numa_topo.h"

#define NUMA_MAX_PORTS	   32
#define NUMA_MAX_CORES	   256
#define NUMA_MAX_WARNINGS  8
#define NUMA_MSG_LEN	   192
#define NUMA_MEMPOOL_CACHE 256 /* per-core mbuf cache of each pool */

struct numa_port_in {
	char name[CFG_INAME_LEN];
	int node;	     /* OS node id, or -1 when unknown */
	uint64_t mbps;	     /* line rate */
	unsigned max_queues; /* 0: unlimited (flow steering); 1: whole port */
};

struct numa_plan_in {
	const struct numa_topo *topo;
	struct cfg_cores cores; /* "auto" or an explicit list */
	unsigned n_ports;
	struct numa_port_in port[NUMA_MAX_PORTS];
	uint64_t hugepage_budget;
	unsigned rx_desc, tx_desc, burst;
	unsigned mbuf_bytes; /* one mbuf with its headroom and data room */
};

struct numa_ep {
	uint8_t port;
	uint16_t queue;
	uint64_t weight_kbps; /* port rate / its queues */
};

struct numa_core_plan {
	unsigned cpu;
	unsigned node; /* node index */
	unsigned n_eps;
	struct numa_ep ep[NUMA_MAX_PORTS];
	uint64_t load_kbps;
};

struct numa_node_plan {
	unsigned n_cores, n_queues;
	uint64_t mbps;	     /* bandwidth served by this node's cores */
	uint64_t pool_mbufs; /* 0 when the node serves no port */
	uint64_t pool_bytes;
	uint64_t state_bytes; /* share of the budget for job state */
};

struct numa_plan {
	unsigned control_cpu;
	bool control_shared; /* the control plane shares a data core */
	unsigned n_cores;
	struct numa_core_plan core[NUMA_MAX_CORES];
	unsigned n_nodes;
	struct numa_node_plan node[NUMA_MAX_NODES];
	unsigned port_queues[NUMA_MAX_PORTS];
	unsigned port_node[NUMA_MAX_PORTS]; /* node index serving each port */
	unsigned n_warnings;
	char warning[NUMA_MAX_WARNINGS][NUMA_MSG_LEN];
	char error[NUMA_MSG_LEN];
};

/* Build the plan. Returns 0, or -EINVAL with plan->error saying why. */
int numa_plan_build(const struct numa_plan_in *in, struct numa_plan *plan);

/* Print the plan for people (pboxd --plan). */
void numa_plan_print(const struct numa_plan *p, const struct numa_plan_in *in, FILE *f);

#endif /* PBOX_NUMA_PLAN_H */
