/* SPDX-License-Identifier: BSD-3-Clause */
/* DPDK ports for the box: see nic_port.h. Control path only. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rte_ethdev.h>
#include <rte_flow.h>

#include "nic_port.h"

void nic_port_dev_name(const char *pci, const char *vdev, char *out, size_t len)
{
	const char *s = pci && *pci ? pci : vdev;
	size_t n = strcspn(s, ",");

	if (n >= len)
		n = len - 1;
	memcpy(out, s, n);
	out[n] = '\0';
}

int nic_port_probe(struct nic_port *p, char *err, size_t errlen)
{
	struct rte_eth_dev_info info;
	struct rte_ether_addr mac;
	int rc;

	if (rte_eth_dev_get_port_by_name(p->dev, &p->port_id) != 0) {
		snprintf(err, errlen, "[port %s]: no DPDK device %s (not probed: check the %s)",
			 p->name, p->dev,
			 strchr(p->dev, ':') ? "PCI address and its driver binding"
					     : "vdev string");
		return -ENODEV;
	}
	rc = rte_eth_dev_info_get(p->port_id, &info);
	if (rc == 0)
		rc = rte_eth_macaddr_get(p->port_id, &mac);
	if (rc != 0) {
		snprintf(err, errlen, "[port %s]: %s: cannot read device info: %s", p->name, p->dev,
			 strerror(-rc));
		return rc;
	}
	p->socket = rte_eth_dev_socket_id(p->port_id);
	p->max_queues =
		info.max_rx_queues < info.max_tx_queues ? info.max_rx_queues : info.max_tx_queues;
	p->multiseg = (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) != 0;
	memcpy(p->mac, mac.addr_bytes, 6);
	return 0;
}

int nic_port_setup(struct nic_port *p, unsigned n_queues, uint32_t mtu, unsigned rx_desc,
		   unsigned tx_desc, struct rte_mempool *const *pools, char *err, size_t errlen)
{
	struct rte_eth_conf conf;
	struct rte_eth_dev_info info;
	struct rte_eth_txconf txc;
	uint16_t nrx = (uint16_t)rx_desc, ntx = (uint16_t)tx_desc;
	unsigned q;
	int rc;

	memset(&conf, 0, sizeof(conf));
	conf.rxmode.mtu = mtu;
	rc = rte_eth_dev_info_get(p->port_id, &info);
	if (rc)
		goto fail;
	if (mtu > info.max_mtu) {
		snprintf(err, errlen, "[port %s]: mtu %u is above the device's %u", p->name, mtu,
			 info.max_mtu);
		return -EINVAL;
	}
	/* Some virtual devices (net_af_packet) state a 1518-byte frame limit
	 * yet pass whatever fits the mbuf: configure what they accept, say so. */
	if (info.max_rx_pktlen &&
	    mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN > info.max_rx_pktlen) {
		conf.rxmode.mtu = info.max_rx_pktlen - RTE_ETHER_HDR_LEN - RTE_ETHER_CRC_LEN;
		printf("pbox: [port %s] %s: device frame limit %u; ethdev MTU set to %u, frames "
		       "up to the mbuf size (mtu %u) still pass\n",
		       p->name, p->dev, info.max_rx_pktlen, conf.rxmode.mtu, mtu);
	}
	if (p->multiseg)
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
	rc = rte_eth_dev_configure(p->port_id, (uint16_t)n_queues, (uint16_t)n_queues, &conf);
	if (rc)
		goto fail;
	rc = rte_eth_dev_adjust_nb_rx_tx_desc(p->port_id, &nrx, &ntx);
	if (rc)
		goto fail;
	txc = info.default_txconf;
	txc.offloads = conf.txmode.offloads;
	for (q = 0; q < n_queues; q++) {
		int sid = p->socket >= 0 ? p->socket : SOCKET_ID_ANY;
		unsigned sock = (unsigned)sid;

		rc = rte_eth_rx_queue_setup(p->port_id, (uint16_t)q, nrx, sock, NULL, pools[q]);
		if (rc)
			goto fail;
		rc = rte_eth_tx_queue_setup(p->port_id, (uint16_t)q, ntx, sock, &txc);
		if (rc)
			goto fail;
	}
	rc = rte_eth_dev_start(p->port_id);
	if (rc)
		goto fail;
	p->n_queues = n_queues;
	p->started = true;
	return 0;
fail:
	snprintf(err, errlen, "[port %s]: %s: cannot set up %u queue%s at mtu %u: %s", p->name,
		 p->dev, n_queues, n_queues == 1 ? "" : "s", mtu, strerror(rc < 0 ? -rc : rc));
	return rc < 0 ? rc : -rc;
}

int nic_port_steer(struct nic_port *p, uint32_t ip_be, uint16_t udp_base, char *err, size_t errlen)
{
	struct rte_flow_attr attr = {.ingress = 1};
	struct rte_flow_error ferr;
	unsigned q;

	for (q = 0; q < p->n_queues; q++) {
		struct rte_flow_item_ipv4 ip_spec = {.hdr.dst_addr = ip_be};
		struct rte_flow_item_ipv4 ip_mask = {.hdr.dst_addr = UINT32_MAX};
		struct rte_flow_item_udp udp_spec = {
			.hdr.dst_port = rte_cpu_to_be_16((uint16_t)(udp_base + q))};
		struct rte_flow_item_udp udp_mask = {.hdr.dst_port = UINT16_MAX};
		struct rte_flow_item pattern[] = {
			{.type = RTE_FLOW_ITEM_TYPE_ETH},
			{.type = RTE_FLOW_ITEM_TYPE_IPV4, .spec = &ip_spec, .mask = &ip_mask},
			{.type = RTE_FLOW_ITEM_TYPE_UDP, .spec = &udp_spec, .mask = &udp_mask},
			{.type = RTE_FLOW_ITEM_TYPE_END},
		};
		struct rte_flow_action_queue to = {.index = (uint16_t)q};
		struct rte_flow_action actions[] = {
			{.type = RTE_FLOW_ACTION_TYPE_QUEUE, .conf = &to},
			{.type = RTE_FLOW_ACTION_TYPE_END},
		};

		memset(&ferr, 0, sizeof(ferr));
		if (rte_flow_validate(p->port_id, &attr, pattern, actions, &ferr) != 0 ||
		    !rte_flow_create(p->port_id, &attr, pattern, actions, &ferr)) {
			snprintf(err, errlen, "[port %s]: no flow steering to queue %u: %s",
				 p->name, q, ferr.message ? ferr.message : "not supported");
			rte_flow_flush(p->port_id, &ferr);
			return -ENOTSUP;
		}
	}
	p->steered = p->n_queues > 0;
	return 0;
}

bool nic_port_link_wait(const struct nic_port *p, unsigned timeout_ms, uint32_t *speed_mbps,
			bool *full_duplex)
{
	struct rte_eth_link link;
	unsigned waited = 0;

	for (;;) {
		memset(&link, 0, sizeof(link));
		if (rte_eth_link_get_nowait(p->port_id, &link) == 0 && link.link_status)
			break;
		if (waited >= timeout_ms)
			break;
		usleep(100 * 1000);
		waited += 100;
	}
	if (speed_mbps)
		*speed_mbps = link.link_speed;
	if (full_duplex)
		*full_duplex = link.link_duplex != 0;
	return link.link_status != 0;
}

void nic_port_stop(struct nic_port *p)
{
	struct rte_flow_error ferr;

	if (p->steered)
		rte_flow_flush(p->port_id, &ferr);
	p->steered = false;
	if (p->started)
		rte_eth_dev_stop(p->port_id);
	p->started = false;
}

void nic_port_close(struct nic_port *p)
{
	nic_port_stop(p);
	rte_eth_dev_close(p->port_id);
}
