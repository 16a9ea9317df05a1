/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pboxd: the box's summation service.
 *
 *   pboxd --check-config FILE   print the effective configuration, or every
 *                               error as file:line: message (exit 1)
 *   pboxd --plan FILE           also discover this machine and print where
 *                               each port queue, core and pool would go
 *   pboxd --config-reference    every key, as config/REFERENCE.md holds them
 *
 * Exit status: 0 success, 1 bad configuration or plan, 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg_box.h"
#include "numa_plan.h"
#include "numa_topo.h"
#include "sum.h"

#define BOX_BURST	32
#define MBUF_STRUCT	128 /* struct rte_mbuf */
#define MBUF_HEADROOM	128 /* RTE_PKTMBUF_HEADROOM */
#define MEMPOOL_OBJ_HDR 64

static void usage(FILE *f)
{
	fprintf(f, "usage: pboxd --check-config FILE\n"
		   "       pboxd --plan FILE\n"
		   "  --check-config FILE  validate FILE and print the effective configuration\n"
		   "  --plan FILE          validate FILE and print this machine's placement plan\n"
		   "  --config-reference   print every configuration key (Markdown)\n");
}

static int load(const char *path, struct box_cfg *cfg)
{
	struct cfg_errors errs;

	if (box_cfg_load(path, cfg, &errs) == 0)
		return 0;
	cfg_errors_print(&errs, stderr);
	fprintf(stderr, "pboxd: %s: %u error%s\n", path, errs.n, errs.n == 1 ? "" : "s");
	return -1;
}

/* Planner input from the configuration and this machine. Until the port
 * layer probes devices, PCI ports are assumed to steer flows (max_queues
 * auto = unlimited) and virtual devices to have one queue. */
static int plan_input(const struct box_cfg *cfg, const struct numa_topo *topo,
		      struct numa_plan_in *in)
{
	unsigned i;

	memset(in, 0, sizeof(*in));
	in->topo = topo;
	in->cores = cfg->cores.list;
	in->n_ports = cfg->n_ports;
	in->hugepage_budget = cfg->memory.hugepage_budget;
	in->rx_desc = cfg->data.rx_desc;
	in->tx_desc = cfg->data.tx_desc;
	in->burst = BOX_BURST;
	in->mbuf_bytes = MBUF_STRUCT + MBUF_HEADROOM + MEMPOOL_OBJ_HDR +
			 ((cfg->data.mtu + 18 + 63) / 64) * 64;
	for (i = 0; i < cfg->n_ports; i++) {
		const struct box_port_cfg *p = &cfg->port[i];
		struct numa_port_in *pi = &in->port[i];

		memcpy(pi->name, p->name, sizeof(pi->name));
		pi->mbps = p->bandwidth_mbps;
		pi->max_queues = p->max_queues ? p->max_queues : (p->pci[0] ? 0 : 1);
		pi->node = -1;
		if (p->pci[0]) {
			int node = numa_pci_node("/sys", p->pci);

			if (node == -ENOENT) {
				fprintf(stderr,
					"pboxd: [port %s] pci: no device %s on this machine\n",
					p->name, p->pci);
				return -1;
			}
			pi->node = node;
		}
	}
	return 0;
}

static int show_plan(const struct box_cfg *cfg)
{
	struct numa_topo *topo = malloc(sizeof(*topo));
	struct numa_plan *plan = malloc(sizeof(*plan));
	struct numa_plan_in in;
	int rc = -1, err;

	if (!topo || !plan) {
		fprintf(stderr, "pboxd: out of memory\n");
		goto out;
	}
	err = numa_topo_discover(topo);
	if (err) {
		fprintf(stderr, "pboxd: cannot discover the NUMA topology: %s\n", strerror(-err));
		goto out;
	}
	if (plan_input(cfg, topo, &in))
		goto out;
	if (numa_plan_build(&in, plan)) {
		fprintf(stderr, "pboxd: placement: %s\n", plan->error);
		goto out;
	}
	printf("machine: %u NUMA node%s, %u usable CPUs; summation kernels: %s\n", topo->n_nodes,
	       topo->n_nodes == 1 ? "" : "s", numa_topo_cpus(topo, -1), sum_ops_best()->name);
	numa_plan_print(plan, &in, stdout);
	rc = 0;
out:
	free(plan);
	free(topo);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"check-config", required_argument, NULL, 'c'},
		{"plan", required_argument, NULL, 'p'},
		{"config-reference", no_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *check = NULL, *plan = NULL;
	struct box_cfg *cfg;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			check = optarg;
			break;
		case 'p':
			plan = optarg;
			break;
		case 'r':
			cfg_print_reference(&box_cfg_schema, stdout);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || (!check && !plan) || (check && plan)) {
		usage(stderr);
		return 2;
	}
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg) {
		fprintf(stderr, "pboxd: out of memory\n");
		return 1;
	}
	rc = load(check ? check : plan, cfg);
	if (rc == 0) {
		if (check)
			cfg_print(&box_cfg_schema, cfg, stdout);
		else
			rc = show_plan(cfg);
	}
	free(cfg);
	return rc == 0 ? 0 : 1;
}
