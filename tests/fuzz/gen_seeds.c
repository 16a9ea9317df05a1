/* SPDX-License-Identifier: BSD-3-Clause */
/* Writes a few valid frames into DIR as the fuzzer's starting corpus, so it
 * begins past the checksums and magic instead of searching for them. */
#include <stdio.h>
#include <string.h>

#include "nic_wire.h"

int main(int argc, char **argv)
{
	static uint8_t frame[NIC_HDRS_LEN + 8192], payload[8192];
	struct nic_addr a = {.mac = {2, 0, 0, 0, 0, 1}, .ip_be = 0x0112c6u, .port = 9700};
	struct nic_addr b = {.mac = {2, 0, 0, 0, 0, 2}, .ip_be = 0x0212c6u, .port = 9600};
	const uint16_t lens[] = {4, 64, 1024, 8192};

	if (argc != 2) {
		fprintf(stderr, "usage: gen_seeds DIR\n");
		return 2;
	}
	for (unsigned i = 0; i < 12; i++) {
		struct pbox_hdr h = {.op = (uint8_t)(1 + i % 3),
				     .dtype = (uint8_t)(i % 3),
				     .rank = (uint16_t)i,
				     .job = 7,
				     .chunk = i * 3,
				     .frag = 1,
				     .len = lens[i % 4],
				     .round = i,
				     .mac = 0x9e3779b97f4a7c15ull * (i + 1)};
		char path[4096];
		FILE *f;

		if (h.op == PBOX_OP_ERROR)
			h.len = 2;
		memset(payload, (int)i, sizeof(payload));
		size_t n = nic_wire_build(frame, sizeof(frame), &a, &b, &h, payload);
		snprintf(path, sizeof(path), "%s/seed-%u", argv[1], i);
		f = fopen(path, "wb");
		if (!f || fwrite(frame, 1, n, f) != n || fclose(f) != 0) {
			perror(path);
			return 1;
		}
	}
	return 0;
}
