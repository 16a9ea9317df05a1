/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the wire parser (make fuzz). Any input: the parser
 * must not read outside it (ASan), must not invoke undefined behaviour
 * (UBSan), and what it accepts must be self-consistent and survive being
 * built again and parsed again.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nic_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t again[NIC_HDRS_LEN + 65536];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nic_wire_expect any = {0}, strict = {.port_lo = 9600,
						    .port_hi = 9663,
						    .max_payload = 8192,
						    .accept_ops = PBOX_OPS_TO_SS};
	struct nic_pkt p, q;
	struct pbox_hdr h;

	(void)nic_wire_parse(data, size, &strict, &p);
	(void)nic_wire_parse_hdr(data, size, &any, &h);
	if (nic_wire_parse(data, size, &any, &p) != NIC_DROP_NONE || p.kind != NIC_KIND_PBOX)
		return 0;
	if ((size_t)p.payload_off + p.hdr.len > size)
		abort();

	struct nic_addr src = {.ip_be = p.src_ip_be, .port = p.src_port};
	struct nic_addr dst = {.ip_be = p.dst_ip_be, .port = p.dst_port};
	memcpy(src.mac, p.src_mac, 6);
	memcpy(dst.mac, data, 6);
	size_t n = nic_wire_build(again, sizeof(again), &src, &dst, &p.hdr, data + p.payload_off);
	if (n == 0 || nic_wire_parse(again, n, &any, &q) != NIC_DROP_NONE)
		abort();
	if (q.hdr.op != p.hdr.op || q.hdr.job != p.hdr.job || q.hdr.chunk != p.hdr.chunk ||
	    q.hdr.frag != p.hdr.frag || q.hdr.len != p.hdr.len || q.hdr.round != p.hdr.round ||
	    q.hdr.mac != p.hdr.mac || q.hdr.rank != p.hdr.rank ||
	    memcmp(again + q.payload_off, data + p.payload_off, p.hdr.len) != 0)
		abort();
	return 0;
}
