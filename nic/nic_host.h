/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Host duties of a data port: answer ARP requests and ICMP echo requests for
 * the port's address, so that workers and routers can find and ping the box.
 * Both rewrite the received frame in place into the reply, which goes back
 * to the sender's MAC (right for an L2 neighbour and for a router alike).
 * libpbox's DPDK transport also asks with ARP for the MACs it sends to.
 * Pure functions on a frame: no EAL.
 */
#ifndef PBOX_NIC_HOST_H
#define PBOX_NIC_HOST_H

#include <stddef.h>
#include <stdint.h>

#include "nic_wire.h"

/* An ARP request for @ip_be becomes our reply. Returns the reply's length,
 * or 0 when @frame is no such request (left unchanged). */
size_t nic_host_arp_reply(void *frame, size_t len, const uint8_t mac[6], uint32_t ip_be);

/* An ARP request from @mac/@ip_be for @target_be into @buf (at least
 * NIC_ARP_FRAME_LEN bytes), broadcast. Returns its length. */
#define NIC_ARP_FRAME_LEN 60 /* padded to Ethernet's minimum */
size_t nic_host_arp_request(void *buf, const uint8_t mac[6], uint32_t ip_be, uint32_t target_be);

/* The sender of a well-formed ARP request or reply (Ethernet, IPv4):
 * returns 1 with its addresses in @ip_be and @mac, or 0. */
int nic_host_arp_sender(const void *frame, size_t len, uint32_t *ip_be, uint8_t mac[6]);

/* An ICMP echo request (nic_wire_parse() said NIC_KIND_ICMP, @pkt) becomes
 * the echo reply. Returns its length, or 0 when @frame is not an echo request
 * with a correct checksum (left unchanged). */
size_t nic_host_icmp_reply(void *frame, size_t len, const struct nic_pkt *pkt,
			   const uint8_t mac[6]);

#endif /* PBOX_NIC_HOST_H */
