/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The fuzzers' starting corpora, so that they begin past the checksums,
 * the magic and the keys' tags instead of searching for them:
 *
 *     gen_seeds WIRE_DIR CTL_DIR EXAMPLES_DIR
 *
 * WIRE_DIR: valid frames (fuzz_wire). CTL_DIR (fuzz_ctl): a valid line of
 * each rank verb and of each box line, written by their formatters where
 * there is one, and every configuration under EXAMPLES_DIR (good and
 * bad), each behind its fuzz_ctl.h selector byte. A seed that its own
 * parser refuses stops it: a corpus of refusals would fuzz nothing past
 * the first field.
 */
#include <dirent.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ctl.h"
#include "nic_ctl.h"
#include "nic_wire.h"
#include "rank_proto.h"

static const char *ctl_dir;
static unsigned n_ctl;

static int write_file(const char *path, const void *a, size_t na, const void *b, size_t nb)
{
	FILE *f = fopen(path, "wb");

	if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f)) {
		perror(path);
		return -1;
	}
	return 0;
}

static int wire_seeds(const char *dir)
{
	static uint8_t frame[NIC_HDRS_LEN + 8192], payload[8192];
	struct nic_addr a = {.mac = {2, 0, 0, 0, 0, 1}, .ip_be = 0x0112c6u, .port = 9700};
	struct nic_addr b = {.mac = {2, 0, 0, 0, 0, 2}, .ip_be = 0x0212c6u, .port = 9600};
	const uint16_t lens[] = {4, 64, 1024, 8192};

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

		if (h.op == PBOX_OP_ERROR)
			h.len = 2;
		memset(payload, (int)i, sizeof(payload));
		size_t n = nic_wire_build(frame, sizeof(frame), &a, &b, &h, payload);
		snprintf(path, sizeof(path), "%s/seed-%u", dir, i);
		if (write_file(path, frame, n, NULL, 0))
			return -1;
	}
	return 0;
}

/* One fuzz_ctl input: the selector byte, then @text. */
static int ctl_seed(enum fuzz_ctl_target t, const char *text, size_t len)
{
	char path[4096];
	uint8_t sel = (uint8_t)t;

	snprintf(path, sizeof(path), "%s/seed-%u-%u", ctl_dir, (unsigned)t, n_ctl++);
	return write_file(path, &sel, 1, text, len);
}

static int rank_seeds(void)
{
	static const char *const lines[] = {
		"NONCE nonce=00112233445566778899aabbccddeeff",
		"HELLO rank=1 world_size=4 job=7 token=123 chunk_size=32768 mtu=1500 "
		"bandwidth=25000 peers=0 layout=0 heartbeat=100000 compression=0 deterministic=0 "
		"leader_order=1 tensors=2",
		"T key=3 count=1000 dtype=fp16 prio=-2",
		"END",
		"ERR code=-5 gone=1,5,7 why=rank 1 is gone",
		"GO frag=8192 eps=4 nonce=0x1234abcd txref=512",
		"EP ip=198.18.0.1 port=9600 kbps=100000000 room=18446744073709551615",
		"JOIN rank=2 world_size=4 ep=198.18.0.3:9700 pk=abcdef0123",
		"JOINED job=7 token=0a0b0c",
		"PEER rank=3 ip=198.18.0.4 port=9701",
		"HB",
		"LOST rank=2 why=no heartbeat for 3 s",
		"FAIL origin=3 code=-7 why=rank 3 lost the box",
		"NEW seq=4 key=9 count=65536 dtype=bf16 prio=3 call=12 kind=1 root=0",
		"WAIT seq=4 call=12",
		"AT seq=4 call=12 key=9 count=65536 dtype=fp32 fresh=1",
		"PAST seq=4 call=11",
		"GREW from=4 to=6",
		"ORD key=9 round=3 row=1",
		"RESUME entries=2 broken=1 pieces=12",
		"R key=9 next=5 op=-1 runs=2",
		"D from=0 to=32768",
		"PLAN keys=1",
		"P key=9 op=4 owned=1",
		"O from=0 to=32768 rank=2",
		"REDO why=a rank resumed another round",
	};
	char copy[RP_LINE_MAX], err[256];
	struct rp_msg m;

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		snprintf(copy, sizeof(copy), "%s", lines[i]);
		if (rp_parse(copy, &m, err, sizeof(err))) {
			fprintf(stderr, "gen_seeds: '%s': %s\n", lines[i], err);
			return -1;
		}
		if (ctl_seed(FZ_RANK_LINE, lines[i], strlen(lines[i])))
			return -1;
	}
	return ctl_seed(FZ_RANK_LIST, "1,5,7", 5) || ctl_seed(FZ_RANK_LIST, "-", 1);
}

static int box_seeds(const struct nic_ctl_session *s)
{
	static struct nic_ctl_reg r;
	static char line[NIC_CTL_LINE_MAX];
	struct nic_ctl_ep ep = {
		.idx = 2,
		.addr = {.mac = {2, 0, 0, 0, 0, 9}, .ip_be = 0x0112c6u, .port = 9601},
		.weight_kbps = 25000000,
		.room = 1u << 30};
	struct nic_ctl_geometry g = {
		.n_eps = 4, .frag = 8192, .chunk = 32768, .mtu = 9000, .txref = 512};
	struct nic_ctl_reg_ok ok = {.job = 7, .bytes = 1u << 20, .frag = 8192, .chunk = 32768};
	char err[256];
	int n;

	for (int room = 0; room < 2; room++) {
		ep.room = room ? ep.room : NIC_CTL_ROOM_UNKNOWN;
		n = nic_ctl_format_ep(line, sizeof(line), &ep);
		if (n < 0 || ctl_seed(FZ_BOX_EP, line, (size_t)n))
			return -1;
	}
	n = nic_ctl_format_geometry(line, sizeof(line), &g);
	if (n < 0 || ctl_seed(FZ_BOX_GEOMETRY, line, (size_t)n))
		return -1;
	n = nic_ctl_format_auth_ok(line, sizeof(line), s);
	if (n < 0 || ctl_seed(FZ_BOX_AUTH_OK, line, (size_t)n))
		return -1;
	n = nic_ctl_format_reg_ok(line, sizeof(line), &ok);
	if (n < 0 || ctl_seed(FZ_BOX_REG_OK, line, (size_t)n))
		return -1;
	{
		uint8_t key[NIC_KEY_LEN] = {0x33};

		n = nic_ctl_format_unregister(line, sizeof(line), s, 7, key);
		if (n < 11 || ctl_seed(FZ_BOX_UNREGISTER, line + 11, (size_t)n - 11))
			return -1;
	}

	/* a registration of four ranks over the four endpoints, and its GROW;
	 * then one with every optional field */
	for (unsigned v = 0; v < 3; v++) {
		memset(&r, 0, sizeof(r));
		r.grow = v == 1;
		r.job = 7;
		memset(r.key, 0x33, sizeof(r.key));
		r.mac = NIC_MAC_HEADER;
		r.n = 4;
		r.dtype = v == 2 ? PBOX_DTYPE_FP32 : PBOX_DTYPE_FP16;
		r.n_eps = 4;
		for (unsigned e = 0; e < 4; e++)
			r.chunks[e] = 3 - (e == 3);
		for (unsigned k = 0; k < r.n; k++)
			r.ranks[k] = (struct nic_addr){.ip_be = (0x0a12c6u | (k + 1) << 24),
						       .port = (uint16_t)(9700 + k)};
		r.n_shorts = 1;
		r.shorts[0] = (struct nic_ctl_short){.ep = 3, .chunk = 1, .bytes = 4096};
		if (v == 2) {
			r.frag = 4096;
			r.chunk = 16384;
			r.comp = 10000;
			r.in_order = true;
			r.n_asyncs = 2;
			r.asyncs[0] =
				(struct nic_ctl_async){.ep = 0, .chunk = 1, .count = 2, .root = 0};
			r.asyncs[1] =
				(struct nic_ctl_async){.ep = 2, .chunk = 0, .count = 1, .root = 3};
			r.stale = 4;
		}
		n = nic_ctl_format_register(line, sizeof(line), s, &r);
		const char *args = n < 0 ? NULL : strchr(line, ' ');
		struct nic_ctl_reg *back = calloc(1, sizeof(*back));

		if (!args || !back) {
			free(back);
			return -1;
		}
		args++;
		back->grow = r.grow;
		int bad = nic_ctl_parse_register(args, &fuzz_ctl_limits, s, back, err, sizeof(err));
		free(back);
		if (bad) {
			fprintf(stderr, "gen_seeds: '%s': %s\n", line, err);
			return -1;
		}
		if (ctl_seed(r.grow ? FZ_BOX_GROW : FZ_BOX_REGISTER, args, strlen(args)))
			return -1;
	}
	return 0;
}

/* Every INI file under @dir (and its bad/), box-* for the box's schema. */
static int config_seeds(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int rc = 0;

	if (!d) {
		perror(dir);
		return -1;
	}
	while (!rc && (de = readdir(d))) {
		char path[4096];
		size_t len = strlen(de->d_name);

		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (depth == 0 && !strcmp(de->d_name, "bad")) {
			rc = config_seeds(path, 1);
			continue;
		}
		if (len < 5 || strcmp(de->d_name + len - 4, ".ini"))
			continue;
		FILE *f = fopen(path, "rb");
		static char text[65536];
		size_t n = f ? fread(text, 1, sizeof(text), f) : 0;

		if (!f || ferror(f) || n == sizeof(text)) {
			fprintf(stderr, "gen_seeds: %s: unreadable or over %zu bytes\n", path,
				sizeof(text) - 1);
			rc = -1;
		} else {
			rc = ctl_seed(strncmp(de->d_name, "box", 3) ? FZ_CFG_WORKER : FZ_CFG_BOX,
				      text, n);
		}
		if (f)
			fclose(f);
	}
	closedir(d);
	return rc;
}

int main(int argc, char **argv)
{
	struct nic_ctl_session s;

	if (argc != 4) {
		fprintf(stderr, "usage: gen_seeds WIRE_DIR CTL_DIR EXAMPLES_DIR\n");
		return 2;
	}
	if (sodium_init() < 0)
		return 1;
	fuzz_ctl_session(&s);
	ctl_dir = argv[2];
	if (wire_seeds(argv[1]) || rank_seeds() || box_seeds(&s) || config_seeds(argv[3], 0))
		return 1;
	printf("gen_seeds: %u control and configuration inputs\n", n_ctl);
	return 0;
}
