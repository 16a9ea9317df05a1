/* SPDX-License-Identifier: BSD-3-Clause */
/* numa/: discovery on this machine, the planner on synthetic machines. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "numa_plan.h"
#include "numa_topo.h"
#include "test.h"

static struct numa_topo topo;
static struct numa_plan plan;
static struct numa_plan_in in;

static void setup(unsigned nodes, unsigned cpus_per_node)
{
	numa_topo_synth(&topo, nodes, cpus_per_node);
	memset(&in, 0, sizeof(in));
	in.topo = &topo;
	in.cores.autosel = true;
	in.hugepage_budget = 16ull << 30;
	in.rx_desc = 1024;
	in.tx_desc = 1024;
	in.burst = 32;
	in.mbuf_bytes = 2432;
}

static void add_port(const char *name, int node, uint64_t gbps, unsigned max_queues)
{
	struct numa_port_in *p = &in.port[in.n_ports++];

	snprintf(p->name, sizeof(p->name), "%s", name);
	p->node = node;
	p->mbps = gbps * 1000;
	p->max_queues = max_queues;
}

static void set_cores(unsigned lo, unsigned hi)
{
	memset(&in.cores, 0, sizeof(in.cores));
	for (unsigned c = lo; c <= hi; c++)
		in.cores.mask[c / 64] |= 1ull << (c % 64);
}

/* What every plan must satisfy, whatever the machine. */
static void check_invariants(void)
{
	unsigned seen[NUMA_MAX_PORTS][64] = {{0}};
	uint64_t pools = 0, state = 0;

	for (unsigned i = 0; i < plan.n_cores; i++) {
		const struct numa_core_plan *c = &plan.core[i];
		uint64_t load = 0;

		ck_assert_int_eq(topo.cpu_node[c->cpu], (int)c->node);
		for (unsigned e = 0; e < c->n_eps; e++) {
			const struct numa_ep *ep = &c->ep[e];

			ck_assert_uint_lt(ep->port, in.n_ports);
			ck_assert_uint_lt(ep->queue, plan.port_queues[ep->port]);
			ck_assert_uint_lt(ep->queue, 64);
			seen[ep->port][ep->queue]++;
			/* a core serves ports of the node that serves them */
			ck_assert_uint_eq(plan.port_node[ep->port], c->node);
			for (unsigned f = 0; f < e; f++)
				ck_assert_msg(c->ep[f].port != ep->port,
					      "cpu %u holds two queues of port %u", c->cpu,
					      ep->port);
			ck_assert_uint_eq(ep->weight_kbps, in.port[ep->port].mbps * 1000 /
								   plan.port_queues[ep->port]);
			load += ep->weight_kbps;
		}
		ck_assert_uint_eq(load, c->load_kbps);
	}
	for (unsigned p = 0; p < in.n_ports; p++) {
		ck_assert_uint_ge(plan.port_queues[p], 1);
		if (in.port[p].max_queues)
			ck_assert_uint_le(plan.port_queues[p], in.port[p].max_queues);
		for (unsigned q = 0; q < plan.port_queues[p]; q++)
			ck_assert_msg(seen[p][q] == 1, "port %u queue %u placed %u times", p, q,
				      seen[p][q]);
	}
	for (unsigned n = 0; n < plan.n_nodes; n++) {
		pools += plan.node[n].pool_bytes;
		state += plan.node[n].state_bytes;
		ck_assert_uint_eq(plan.node[n].pool_bytes, plan.node[n].pool_mbufs * in.mbuf_bytes);
	}
	ck_assert_uint_le(pools + state, in.hugepage_budget);
	ck_assert_uint_ge(pools + state + plan.n_nodes, in.hugepage_budget);
}

static void build_ok(void)
{
	int rc = numa_plan_build(&in, &plan);

	ck_assert_msg(rc == 0, "plan failed: %s", plan.error);
	check_invariants();
}

static uint64_t core_load(unsigned cpu)
{
	for (unsigned i = 0; i < plan.n_cores; i++)
		if (plan.core[i].cpu == cpu)
			return plan.core[i].load_kbps;
	ck_abort_msg("cpu %u is not a data core", cpu);
	return 0;
}

static void pbox_ports(unsigned max_queues)
{
	static const char *const names[] = {"nic0", "nic1", "nic2", "nic3", "nic4",
					    "nic5", "nic6", "nic7", "nic8", "nic9"};

	for (unsigned i = 0; i < 10; i++)
		add_port(names[i], i < 5 ? 0 : 1, 100, max_queues);
}

/* The PBox: 2 nodes x 16 cores, 5 x 100G per node, flow steering. */
START_TEST(pbox_flow_steering)
{
	setup(2, 16);
	pbox_ports(0);
	build_ok();
	ck_assert_uint_eq(plan.control_cpu, 0);
	ck_assert(!plan.control_shared);
	ck_assert_uint_eq(plan.n_cores, 31);
	for (unsigned i = 0; i < plan.n_cores; i++)
		ck_assert_uint_eq(plan.core[i].n_eps, 5);
	for (unsigned p = 0; p < 10; p++) {
		ck_assert_uint_eq(plan.port_queues[p], p < 5 ? 15 : 16);
		ck_assert_uint_eq(plan.port_node[p], p < 5 ? 0 : 1);
	}
	/* exactly balanced inside each node */
	for (unsigned c = 2; c < 16; c++)
		ck_assert_uint_eq(core_load(c), core_load(1));
	for (unsigned c = 17; c < 32; c++)
		ck_assert_uint_eq(core_load(c), core_load(16));
	ck_assert_uint_eq(plan.node[0].n_queues, 75);
	ck_assert_uint_eq(plan.node[1].n_queues, 80);
	/* equal bandwidth, equal share of what the pools leave */
	uint64_t s0 = plan.node[0].state_bytes, s1 = plan.node[1].state_bytes;
	ck_assert_uint_le(s0 > s1 ? s0 - s1 : s1 - s0, 1);
	ck_assert_uint_eq(plan.n_warnings, 0);
}
END_TEST

/* The PBox without flow steering: cores own whole ports, the rest idle. */
START_TEST(pbox_whole_ports)
{
	unsigned busy[2] = {0, 0};

	setup(2, 16);
	pbox_ports(1);
	build_ok();
	for (unsigned i = 0; i < plan.n_cores; i++) {
		ck_assert_uint_le(plan.core[i].n_eps, 1);
		busy[plan.core[i].node] += plan.core[i].n_eps;
	}
	ck_assert_uint_eq(busy[0], 5);
	ck_assert_uint_eq(busy[1], 5);
	ck_assert_uint_eq(plan.n_warnings, 1);
	ck_assert_ptr_nonnull(strstr(plan.warning[0], "21 of 31 data cores serve no queue"));
	ck_assert_uint_eq(plan.node[0].n_cores, 5);
}
END_TEST

/* This machine: 1 node, 2 cores, 2 virtual ports (node unknown). */
START_TEST(this_machine)
{
	setup(1, 2);
	add_port("p0", -1, 10, 1);
	add_port("p1", -1, 10, 1);
	build_ok(); /* auto: cpu 0 keeps the control plane, cpu 1 serves both */
	ck_assert_uint_eq(plan.n_cores, 1);
	ck_assert_uint_eq(plan.core[0].cpu, 1);
	ck_assert_uint_eq(plan.core[0].n_eps, 2);
	ck_assert_uint_eq(plan.control_cpu, 0);

	set_cores(0, 1); /* both cores: one port each, control shares a core */
	build_ok();
	ck_assert_uint_eq(plan.n_cores, 2);
	ck_assert_uint_eq(plan.core[0].n_eps, 1);
	ck_assert_uint_eq(plan.core[1].n_eps, 1);
	ck_assert(plan.control_shared);

	in.port[0].max_queues = in.port[1].max_queues = 0; /* with flow steering */
	build_ok();
	ck_assert_uint_eq(plan.core[0].n_eps, 2);
	ck_assert_uint_eq(plan.core[1].n_eps, 2);
	ck_assert_uint_eq(plan.core[0].load_kbps, 10000000);
	ck_assert_uint_eq(plan.core[1].load_kbps, 10000000);
}
END_TEST

/* Uneven: 3 NICs (100G, 100G, 25G) on node 0, one 100G on node 1. */
START_TEST(uneven_nodes)
{
	setup(2, 8);
	set_cores(0, 15);
	add_port("a", 0, 100, 0);
	add_port("b", 0, 100, 0);
	add_port("c", 0, 25, 0);
	add_port("d", 1, 100, 0);
	build_ok();
	for (unsigned c = 0; c < 8; c++)
		ck_assert_uint_eq(core_load(c), 225000000 / 8);
	for (unsigned c = 8; c < 16; c++)
		ck_assert_uint_eq(core_load(c), 100000000 / 8);
	/* job state follows bandwidth: 225 : 100 */
	double ratio = (double)plan.node[0].state_bytes / (double)plan.node[1].state_bytes;
	ck_assert_double_eq_tol(ratio, 2.25, 0.01);

	/* whole ports on 2 cores of node 0: LPT puts 100 | 100 + 25 */
	setup(2, 8);
	set_cores(0, 1);
	in.cores.mask[0] |= 1ull << 8;
	add_port("a", 0, 100, 1);
	add_port("b", 0, 100, 1);
	add_port("c", 0, 25, 1);
	add_port("d", 1, 100, 1);
	build_ok();
	uint64_t l0 = core_load(0), l1 = core_load(1);
	ck_assert_uint_eq(l0 > l1 ? l0 : l1, 125000000);
	ck_assert_uint_eq(l0 > l1 ? l1 : l0, 100000000);
	ck_assert_uint_eq(core_load(8), 100000000);
}
END_TEST

START_TEST(more_ports_than_cores)
{
	uint64_t hi = 0, lo = UINT64_MAX;

	setup(1, 2);
	set_cores(0, 1);
	for (unsigned i = 0; i < 5; i++) {
		char name[8];

		snprintf(name, sizeof(name), "p%u", i);
		add_port(name, 0, 100, 1);
	}
	build_ok();
	for (unsigned i = 0; i < 2; i++) {
		hi = plan.core[i].load_kbps > hi ? plan.core[i].load_kbps : hi;
		lo = plan.core[i].load_kbps < lo ? plan.core[i].load_kbps : lo;
	}
	ck_assert_uint_eq(hi, 300000000);
	ck_assert_uint_eq(lo, 200000000);
}
END_TEST

/* A NIC on a node with no allowed core: served from the nearest node that
 * has one, with a warning that names it. */
START_TEST(nic_on_node_without_cores)
{
	setup(2, 4);
	set_cores(0, 3);
	add_port("near", 0, 100, 0);
	add_port("far", 1, 100, 0);
	build_ok();
	ck_assert_uint_eq(plan.port_node[1], 0);
	ck_assert_uint_eq(plan.n_warnings, 1);
	ck_assert_ptr_nonnull(strstr(plan.warning[0], "port far is on node 1, which has no data "
						      "core: served from node 0"));
	ck_assert_uint_eq(plan.node[1].pool_mbufs, 0);

	/* three nodes: the nearest by SLIT distance wins, not the lowest */
	setup(3, 4);
	topo.dist[2][0] = topo.dist[0][2] = 30;
	topo.dist[2][1] = topo.dist[1][2] = 15;
	set_cores(0, 7);
	add_port("x", 2, 100, 0);
	build_ok();
	ck_assert_uint_eq(plan.port_node[0], 1);
}
END_TEST

START_TEST(plan_errors)
{
	setup(2, 16);
	ck_assert_int_eq(numa_plan_build(&in, &plan), -EINVAL);
	ck_assert_ptr_nonnull(strstr(plan.error, "no data port"));

	add_port("p", 0, 100, 0);
	set_cores(30, 40);
	ck_assert_int_eq(numa_plan_build(&in, &plan), -EINVAL);
	ck_assert_ptr_nonnull(strstr(plan.error, "CPU 32 is not online"));

	set_cores(0, 3);
	in.port[0].node = 5;
	ck_assert_int_eq(numa_plan_build(&in, &plan), -EINVAL);
	ck_assert_ptr_nonnull(strstr(plan.error, "[port p]: NUMA node 5 does not exist"));

	in.port[0].node = 0;
	in.hugepage_budget = 8ull << 20;
	ck_assert_int_eq(numa_plan_build(&in, &plan), -EINVAL);
	ck_assert_ptr_nonnull(strstr(plan.error, "hugepage_budget: 8 MB is too small"));
}
END_TEST

START_TEST(discover_this_machine)
{
	struct numa_topo *t = malloc(sizeof(*t));
	cpu_set_t set;

	ck_assert_int_eq(numa_topo_discover(t), 0);
	ck_assert_uint_ge(t->n_nodes, 1);
	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	ck_assert_uint_eq(numa_topo_cpus(t, -1), (unsigned)CPU_COUNT(&set));
	for (unsigned c = 0; c < NUMA_MAX_CPUS; c++) {
		ck_assert_int_eq(t->cpu_node[c] >= 0, c < CPU_SETSIZE && CPU_ISSET(c, &set));
		ck_assert_int_lt(t->cpu_node[c], (int)t->n_nodes);
	}
	for (unsigned n = 0; n < t->n_nodes; n++) {
		ck_assert_uint_eq(t->dist[n][n], 10);
		ck_assert_int_eq(numa_topo_node_index(t, t->node_id[n]), (int)n);
	}
	free(t);
}
END_TEST

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(pci_node_from_sysfs)
{
	char root[] = "/tmp/pbox-sysfs-XXXXXX", path[256], cmd[640];

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/bus/pci/devices/0000:3b:00.0", root);
	snprintf(cmd, sizeof(cmd), "mkdir -p %s %s/bus/pci/devices/0000:5e:00.1", path, root);
	ck_assert_int_eq(system(cmd), 0);
	strcat(path, "/numa_node");
	put(path, "1\n");
	snprintf(path, sizeof(path), "%s/bus/pci/devices/0000:5e:00.1/numa_node", root);
	put(path, "-1\n");

	ck_assert_int_eq(numa_pci_node(root, "0000:3b:00.0"), 1);
	ck_assert_int_eq(numa_pci_node(root, "3b:00.0"), 1);
	ck_assert_int_eq(numa_pci_node(root, "0000:5e:00.1"), -1);
	ck_assert_int_eq(numa_pci_node(root, "0000:99:00.0"), -ENOENT);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *numa_suite(void)
{
	Suite *s = suite_create("numa");
	TCase *tc = tcase_create("planner");

	tcase_add_test(tc, pbox_flow_steering);
	tcase_add_test(tc, pbox_whole_ports);
	tcase_add_test(tc, this_machine);
	tcase_add_test(tc, uneven_nodes);
	tcase_add_test(tc, more_ports_than_cores);
	tcase_add_test(tc, nic_on_node_without_cores);
	tcase_add_test(tc, plan_errors);
	suite_add_tcase(s, tc);

	tc = tcase_create("discovery");
	tcase_add_test(tc, discover_this_machine);
	tcase_add_test(tc, pci_node_from_sysfs);
	suite_add_tcase(s, tc);
	return s;
}
