/* SPDX-License-Identifier: BSD-3-Clause */
/* Topology discovery: libnuma for nodes, CPUs, memory and distances; sysfs
 * for the node of each PCI device. Control path only. */
#include "numa_topo.h"

#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void topo_reset(struct numa_topo *t)
{
	memset(t, 0, sizeof(*t));
	for (unsigned c = 0; c < NUMA_MAX_CPUS; c++)
		t->cpu_node[c] = -1;
}

void numa_topo_synth(struct numa_topo *t, unsigned n_nodes, unsigned cpus_per_node)
{
	unsigned n, c;

	topo_reset(t);
	t->n_nodes = n_nodes;
	for (n = 0; n < n_nodes; n++) {
		t->node_id[n] = (int)n;
		t->node_mem[n] = 64ull << 30;
		for (c = 0; c < n_nodes; c++)
			t->dist[n][c] = n == c ? 10 : 20;
		for (c = 0; c < cpus_per_node && n * cpus_per_node + c < NUMA_MAX_CPUS; c++)
			t->cpu_node[n * cpus_per_node + c] = (int16_t)n;
	}
}

unsigned numa_topo_cpus(const struct numa_topo *t, int node)
{
	unsigned c, n = 0;

	for (c = 0; c < NUMA_MAX_CPUS; c++)
		if (t->cpu_node[c] >= 0 && (node < 0 || t->cpu_node[c] == node))
			n++;
	return n;
}

int numa_topo_node_index(const struct numa_topo *t, int id)
{
	for (unsigned n = 0; n < t->n_nodes; n++)
		if (t->node_id[n] == id)
			return (int)n;
	return -1;
}

int numa_topo_discover(struct numa_topo *t)
{
	cpu_set_t allowed;
	struct bitmask *cpus;
	int id, max_node;
	unsigned c;

	topo_reset(t);
	CPU_ZERO(&allowed);
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
		return -errno;

	if (numa_available() < 0) {
		t->n_nodes = 1;
		t->dist[0][0] = 10;
		for (c = 0; c < NUMA_MAX_CPUS && c < CPU_SETSIZE; c++)
			if (CPU_ISSET(c, &allowed))
				t->cpu_node[c] = 0;
		return 0;
	}
	cpus = numa_allocate_cpumask();
	if (!cpus)
		return -ENOMEM;
	max_node = numa_max_node();
	for (id = 0; id <= max_node && t->n_nodes < NUMA_MAX_NODES; id++) {
		long long mem;
		unsigned n;

		if (!numa_bitmask_isbitset(numa_all_nodes_ptr, (unsigned)id))
			continue;
		n = t->n_nodes++;
		t->node_id[n] = id;
		mem = numa_node_size64(id, NULL);
		t->node_mem[n] = mem > 0 ? (uint64_t)mem : 0;
		if (numa_node_to_cpus(id, cpus) != 0)
			continue;
		for (c = 0; c < NUMA_MAX_CPUS && c < CPU_SETSIZE && c < cpus->size; c++)
			if (numa_bitmask_isbitset(cpus, c) && CPU_ISSET(c, &allowed))
				t->cpu_node[c] = (int16_t)n;
	}
	numa_free_cpumask(cpus);
	for (unsigned a = 0; a < t->n_nodes; a++)
		for (unsigned b = 0; b < t->n_nodes; b++) {
			int d = numa_distance(t->node_id[a], t->node_id[b]);

			t->dist[a][b] = (uint8_t)(d > 0 && d < 256 ? d : (a == b ? 10 : 20));
		}
	return t->n_nodes ? 0 : -ENODEV;
}

int numa_pci_node(const char *sysfs, const char *pci)
{
	char path[512], buf[32];
	FILE *f;
	long node;
	char *end;

	/* sysfs names devices with their domain: 0000:3b:00.0 */
	snprintf(path, sizeof(path), "%s/bus/pci/devices/%s%s/numa_node", sysfs,
		 strlen(pci) == 7 ? "0000:" : "", pci);
	f = fopen(path, "r");
	if (!f)
		return -ENOENT;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return -1;
	}
	fclose(f);
	node = strtol(buf, &end, 10);
	if (end == buf || node < 0 || node >= NUMA_MAX_NODES)
		return -1;
	return (int)node;
}
