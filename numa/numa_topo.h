/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The machine as the placement planner sees it: NUMA nodes, the CPUs this
 * process may run on and their nodes, memory per node, node distances.
 * Built by numa_topo_discover() from libnuma and sysfs, or by hand in tests
 * (numa_topo_synth()).
 */
#ifndef PBOX_NUMA_TOPO_H
#define PBOX_NUMA_TOPO_H

#include <stdint.h>

#define NUMA_MAX_NODES 64
#define NUMA_MAX_CPUS  1024

struct numa_topo {
	unsigned n_nodes;
	int node_id[NUMA_MAX_NODES];		      /* OS node number of each node index */
	uint64_t node_mem[NUMA_MAX_NODES];	      /* bytes, 0 when unknown */
	uint8_t dist[NUMA_MAX_NODES][NUMA_MAX_NODES]; /* ACPI SLIT: 10 local */
	int16_t cpu_node[NUMA_MAX_CPUS];	      /* node index of each usable CPU, else -1 */
};

/*
 * Discover this machine. CPUs outside the process's affinity mask are not
 * usable. Without NUMA support the machine is one node. Returns 0 or -errno.
 */
int numa_topo_discover(struct numa_topo *t);

/*
 * Synthetic topology: @n_nodes nodes of @cpus_per_node consecutive CPUs
 * each (node 0 holds CPUs 0..cpus_per_node-1), distance 10 local, 20 remote.
 */
void numa_topo_synth(struct numa_topo *t, unsigned n_nodes, unsigned cpus_per_node);

/* Usable CPUs, in all or on node index @node (-1: all). */
unsigned numa_topo_cpus(const struct numa_topo *t, int node);

/* Node index of OS node @id, or -1. */
int numa_topo_node_index(const struct numa_topo *t, int id);

/*
 * The NUMA node (OS id) of a PCI device, read from
 * @sysfs/bus/pci/devices/<pci>/numa_node; @sysfs is "/sys" outside tests.
 * "3b:00.0" means domain 0000. Returns the node, -1 when the device has no
 * node (single-node machines, some VMs), or -ENOENT when there is no such
 * device.
 */
int numa_pci_node(const char *sysfs, const char *pci);

#endif /* PBOX_NUMA_TOPO_H */
