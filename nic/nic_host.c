/* SPDX-License-Identifier: BSD-3-Clause */
/* ARP and ICMP echo replies, in place. See nic_host.h. */
#include <string.h>

#include "nic_host.h"

#define ARP_LEN 28

/* Ethernet hardware, IPv4 protocol, 6- and 4-byte addresses */
static int arp_ipv4(const uint8_t *a)
{
	return nic_be16(a) == 1 && nic_be16(a + 2) == 0x0800 && a[4] == 6 && a[5] == 4;
}

size_t nic_host_arp_reply(void *frame, size_t len, const uint8_t mac[6], uint32_t ip_be)
{
	uint8_t *f = frame, *a = f + NIC_ETH_LEN;

	if (len < NIC_ETH_LEN + ARP_LEN || nic_be16(f + 12) != 0x0806)
		return 0;
	/* Ethernet, IPv4, 6-byte and 4-byte addresses, a request, for us */
	if (!arp_ipv4(a) || nic_be16(a + 6) != 1 || memcmp(a + 24, &ip_be, 4) != 0)
		return 0;
	memcpy(f, a + 8, 6); /* to the sender's hardware address */
	memcpy(f + 6, mac, 6);
	nic_put16(a + 6, 2);
	memcpy(a + 18, a + 8, 10); /* target := sender (MAC and IP) */
	memcpy(a + 8, mac, 6);
	memcpy(a + 14, &ip_be, 4);
	return len;
}

size_t nic_host_arp_request(void *buf, const uint8_t mac[6], uint32_t ip_be, uint32_t target_be)
{
	uint8_t *f = buf, *a = f + NIC_ETH_LEN;

	memset(f, 0, NIC_ARP_FRAME_LEN);
	memset(f, 0xff, 6);
	memcpy(f + 6, mac, 6);
	nic_put16(f + 12, 0x0806);
	nic_put16(a, 1);
	nic_put16(a + 2, 0x0800);
	a[4] = 6;
	a[5] = 4;
	nic_put16(a + 6, 1);
	memcpy(a + 8, mac, 6);
	memcpy(a + 14, &ip_be, 4);
	memcpy(a + 24, &target_be, 4); /* target MAC stays zero */
	return NIC_ARP_FRAME_LEN;
}

int nic_host_arp_sender(const void *frame, size_t len, uint32_t *ip_be, uint8_t mac[6])
{
	const uint8_t *f = frame, *a = f + NIC_ETH_LEN;
	unsigned op;

	if (len < NIC_ETH_LEN + ARP_LEN || nic_be16(f + 12) != 0x0806 || !arp_ipv4(a))
		return 0;
	op = nic_be16(a + 6);
	if ((op != 1 && op != 2) || (a[8] & 1)) /* a multicast sender is no host */
		return 0;
	memcpy(mac, a + 8, 6);
	memcpy(ip_be, a + 14, 4);
	return 1;
}

size_t nic_host_icmp_reply(void *frame, size_t len, const struct nic_pkt *pkt, const uint8_t mac[6])
{
	uint8_t *f = frame, *ip = f + pkt->l3_off, *icmp = f + pkt->l4_off;
	size_t ihl, tot, n;
	uint8_t tmp[4];

	if (pkt->kind != NIC_KIND_ICMP || pkt->l4_off <= pkt->l3_off || pkt->l4_off >= len)
		return 0;
	ihl = (size_t)pkt->l4_off - pkt->l3_off;
	tot = nic_be16(ip + 2);
	if (pkt->l3_off + tot > len || tot < ihl + 8)
		return 0;
	n = tot - ihl;
	if (icmp[0] != 8 || icmp[1] != 0 || nic_csum_fold(icmp, n, 0) != 0xffff)
		return 0;
	icmp[0] = 0;
	nic_put16(icmp + 2, 0);
	nic_put16(icmp + 2, (uint16_t)~nic_csum_fold(icmp, n, 0));
	memcpy(tmp, ip + 12, 4);
	memcpy(ip + 12, ip + 16, 4);
	memcpy(ip + 16, tmp, 4);
	ip[8] = 64;
	nic_put16(ip + 10, 0);
	nic_put16(ip + 10, (uint16_t)~nic_csum_fold(ip, ihl, 0));
	memcpy(f, pkt->src_mac, 6);
	memcpy(f + 6, mac, 6);
	return pkt->l3_off + tot;
}
