/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The DPDK port layer of the box (control path only): find a configured
 * port among the probed devices, read what it can do, configure its queues
 * on the right NUMA node, steer UDP destination port udp_port + q to queue q
 * with rte_flow, and report its link.
 *
 * Errors: 0 or -errno, with a message in the caller's buffer naming the port.
 */
#ifndef PBOX_NIC_PORT_H
#define PBOX_NIC_PORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rte_mempool.h>

struct nic_port {
	char name[32]; /* the configuration's [port NAME] */
	char dev[160]; /* DPDK device name (PCI address or vdev name) */
	uint16_t port_id;
	int socket;	     /* NUMA node of the device, -1 unknown */
	unsigned max_queues; /* what the device offers, before flow steering */
	bool multiseg;	     /* can transmit chained mbufs */
	uint8_t mac[6];
	unsigned n_queues; /* configured */
	bool steered;	   /* flow rules installed */
	bool started;
};

/* The DPDK device name a port string means: a PCI address as is, a vdev
 * string up to its first comma. */
void nic_port_dev_name(const char *pci, const char *vdev, char *out, size_t len);

/* Find the probed device of @p->dev and fill what it can do. */
int nic_port_probe(struct nic_port *p, char *err, size_t errlen);

/* Configure @n_queues rx/tx queue pairs (descriptors, MTU), queue q's
 * receive buffers from pools[q], and start the port. */
int nic_port_setup(struct nic_port *p, unsigned n_queues, uint32_t mtu, unsigned rx_desc,
		   unsigned tx_desc, struct rte_mempool *const *pools, char *err, size_t errlen);

/* Steer IPv4 to @ip_be, UDP destination port @udp_base + q, to queue q, for
 * every queue. -ENOTSUP when the port cannot (rules removed again). */
int nic_port_steer(struct nic_port *p, uint32_t ip_be, uint16_t udp_base, char *err, size_t errlen);

/* Wait up to @timeout_ms for the link; true when it is up. @speed_mbps and
 * @full_duplex (either may be NULL) get what the device reports. */
bool nic_port_link_wait(const struct nic_port *p, unsigned timeout_ms, uint32_t *speed_mbps,
			bool *full_duplex);

void nic_port_stop(struct nic_port *p);
void nic_port_close(struct nic_port *p);

#endif /* PBOX_NIC_PORT_H */
