/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control protocol's codec (nic/nic_ctl.c): what pboxd writes, the
 * clients read back, and REGISTER parsed strictly, every refusal naming
 * its field and bounds.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nic_ctl.h"
#include "test.h"

/* The control plane's EP line: what pboxd writes, the workers read back;
 * anything malformed is refused whole. */
START_TEST(ctl_ep_line_round_trip_and_refusals)
{
	const struct nic_ctl_ep e = {.idx = 3,
				     .addr = {.mac = {0x02, 0x00, 0x5b, 0x0a, 0xff, 0x01},
					      .ip_be = htonl(0xc6120401u),
					      .port = 9603},
				     .weight_kbps = 100000000,
				     .room = NIC_CTL_ROOM_UNKNOWN};
	static const char *const bad[] = {
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603",		     /* no weight */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=0",	     /* no share */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=0 weight=5",	     /* port 0 */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=70000 weight=5",	     /* port */
		"EP 3 ip=198.18.4.256 mac=02:00:5b:0a:ff:01 port=9603 weight=5",     /* address */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff port=9603 weight=5",	     /* short MAC */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:101 port=9603 weight=5",	     /* MAC byte */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5 x",     /* trailing */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5 room=", /* empty */
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5 room=-1",
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5 room=1x",
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5 room=18446744073709551615",
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5 room=99999999999999999999",
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5 rooms=1",
		/* numbers and MACs only as the formatter writes them: no sign, no
		 * space, no leading zero, no wrap past 32 bits, lower-case hex */
		"EP -3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5",
		"EP +3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5",
		"EP  3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5",
		"EP 03 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5",
		"EP 4294967299 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=5",
		"EP 3 ip=198.18.4.1 mac=02:00:5B:0a:ff:01 port=9603 weight=5",
		"EP 3 ip=198.18.4.1 mac=2:00:5b:0a:ff:01 port=9603 weight=5",
		"EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=18446744073709551616",
		"OK endpoints=4 frag=8192 chunk=32768 mtu=9000", ""};
	struct nic_ctl_ep got, e2;
	char line[128];
	unsigned i;

	ck_assert_int_gt(nic_ctl_format_ep(line, sizeof(line), &e), 0);
	ck_assert_str_eq(line,
			 "EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 weight=100000000");
	ck_assert_int_eq(nic_ctl_parse_ep(line, &got), 0);
	ck_assert_uint_eq(got.idx, 3);
	ck_assert_uint_eq(got.addr.ip_be, e.addr.ip_be);
	ck_assert_uint_eq(got.addr.port, 9603);
	ck_assert_mem_eq(got.addr.mac, e.addr.mac, 6);
	ck_assert_uint_eq(got.weight_kbps, 100000000);
	ck_assert(got.room == NIC_CTL_ROOM_UNKNOWN);
	ck_assert_int_eq(nic_ctl_format_ep(line, 20, &e), -1); /* does not fit */
	/* a proved connection's line: the endpoint's room */
	e2 = e;
	e2.room = 487587840;
	ck_assert_int_gt(nic_ctl_format_ep(line, sizeof(line), &e2), 0);
	ck_assert_str_eq(line, "EP 3 ip=198.18.4.1 mac=02:00:5b:0a:ff:01 port=9603 "
			       "weight=100000000 room=487587840");
	ck_assert_int_eq(nic_ctl_parse_ep(line, &got), 0);
	ck_assert(got.room == 487587840 && got.weight_kbps == 100000000 && got.idx == 3);
	e2.room = 0; /* a full box */
	ck_assert_int_gt(nic_ctl_format_ep(line, sizeof(line), &e2), 0);
	ck_assert_int_eq(nic_ctl_parse_ep(line, &got), 0);
	ck_assert(got.room == 0);
	ck_assert_int_eq(nic_ctl_format_ep(line, 70, &e2), -1); /* room does not fit */
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(nic_ctl_parse_ep(bad[i], &got) == -1, "taken: '%s'", bad[i]);
}
END_TEST

/* Both ends of a control connection after the handshake: the box key and
 * the nonces fixed, so the tests can wrap keys for the parser. */
static void test_session(struct nic_ctl_session *s, uint8_t fill)
{
	uint8_t box_key[NIC_KEY_LEN];

	memset(s, 0, sizeof(*s));
	memset(box_key, 0x42, sizeof(box_key));
	memset(s->nc, fill, sizeof(s->nc));
	memset(s->nb, 0x77, sizeof(s->nb));
	nic_ctl_session_derive(s, box_key);
	s->authed = true;
}

static const struct nic_ctl_reg_limits lim = {
	.max_workers = 1024, .max_frag = 8192, .dflt_frag = 8192, .dflt_chunk = 32768, .n_eps = 3};

/* async= and stale=: asynchronous training's stores (runs of async chunks,
 * each with the rank whose first push sets it) and their staleness bound,
 * formatted and parsed back; runs past an endpoint's chunks, out of order
 * or overlapping, a root past n, an empty run or a malformed entry refused
 * naming the entry. */
START_TEST(register_async)
{
	static struct nic_ctl_reg r, got;
	struct nic_ctl_session sess;
	static char line[4096], bad[4200];
	char err[256];
	static const struct {
		const char *list, *why;
	} refused[] = {
		{"0:6+2:0", "endpoint 0 has no chunks [6, 6 + 2)"},
		{"1:0+1:0", "endpoint 1 has no chunks"},
		{"0:0+0:0", "has no chunks [0, 0 + 0)"},
		{"0:0+1:4", "root 4 is not below n = 4"},
		{"0:2+3:0,0:4+1:1", "entry 1: not in (endpoint, chunk) order, or overlapping"},
		{"2:0+1:0,0:0+1:0", "entry 1: not in (endpoint, chunk) order"},
		{"0:2-3:0", "entry 0: '0:2-3:0' is not ENDPOINT:CHUNK+COUNT:ROOT"},
		{"0:2+3:0,", "missing after the last comma"},
	};

	test_session(&sess, 1);
	r = (struct nic_ctl_reg){.grow = true,
				 .job = 9,
				 .n = 4,
				 .dtype = PBOX_DTYPE_FP32,
				 .frag = 1024,
				 .chunk = 4096,
				 .n_eps = 3,
				 .stale = 3};
	r.chunks[0] = 7, r.chunks[1] = 0, r.chunks[2] = 5;
	for (unsigned k = 0; k < 4; k++)
		r.ranks[k] = (struct nic_addr){.ip_be = htonl(0xc6126401u + k), .port = 9700};
	r.asyncs[0] = (struct nic_ctl_async){.ep = 0, .chunk = 2, .count = 3, .root = 0};
	r.asyncs[1] = (struct nic_ctl_async){.ep = 2, .chunk = 0, .count = 5, .root = 1};
	r.n_asyncs = 2;
	ck_assert_int_gt(nic_ctl_format_register(line, sizeof(line), &sess, &r), 0);
	ck_assert_msg(strstr(line, " stale=3 ") && strstr(line, " async=0:2+3:0,2:0+5:1"), "%s",
		      line);
	got.grow = true;
	ck_assert_int_eq(nic_ctl_parse_register(line + 5, &lim, &sess, &got, err, sizeof(err)), 0);
	ck_assert_uint_eq(got.stale, 3);
	ck_assert_uint_eq(got.n_asyncs, 2);
	ck_assert(got.asyncs[1].ep == 2 && got.asyncs[1].chunk == 0 && got.asyncs[1].count == 5 &&
		  got.asyncs[1].root == 1);
	/* none given: none, unbounded */
	r.n_asyncs = 0;
	r.stale = 0;
	ck_assert_int_gt(nic_ctl_format_register(line, sizeof(line), &sess, &r), 0);
	ck_assert_ptr_null(strstr(line, "async="));
	ck_assert_ptr_null(strstr(line, "stale="));
	got.grow = true;
	ck_assert_int_eq(nic_ctl_parse_register(line + 5, &lim, &sess, &got, err, sizeof(err)), 0);
	ck_assert_uint_eq(got.n_asyncs + got.stale, 0);
	for (size_t k = 0; k < sizeof(refused) / sizeof(refused[0]); k++) {
		snprintf(bad, sizeof(bad), "%s async=%s", line + 5, refused[k].list);
		got.grow = true;
		ck_assert_int_eq(nic_ctl_parse_register(bad, &lim, &sess, &got, err, sizeof(err)),
				 -1);
		ck_assert_msg(strstr(err, refused[k].why), "%s: %s", refused[k].list, err);
	}
}
END_TEST

/* A REGISTER formatted by a client is parsed by the box into the same
 * request, the box's defaults filling what it leaves out. */
START_TEST(register_round_trip)
{
	static struct nic_ctl_reg r, got;
	struct nic_ctl_session sess;
	char line[1024], err[256], key[NIC_CTL_WRAP_HEX + 1], args[512];

	test_session(&sess, 1);
	r = (struct nic_ctl_reg){.job = 42,
				 .mac = NIC_MAC_PAYLOAD,
				 .n = 4,
				 .dtype = PBOX_DTYPE_BF16,
				 .frag = 1024,
				 .chunk = 4096,
				 .n_eps = 3};
	r.chunks[0] = 7, r.chunks[1] = 0, r.chunks[2] = 16777216;
	for (unsigned k = 0; k < 4; k++)
		r.ranks[k] = (struct nic_addr){.ip_be = htonl(0xc6126401u + k), .port = 9700};
	r.shorts[0] = (struct nic_ctl_short){.ep = 0, .chunk = 6, .bytes = 1000};
	r.shorts[1] = (struct nic_ctl_short){.ep = 2, .chunk = 9, .bytes = 2};
	r.n_shorts = 2;
	for (unsigned k = 0; k < NIC_KEY_LEN; k++)
		r.key[k] = (uint8_t)(k * 37 + 1);
	ck_assert_int_gt(nic_ctl_format_register(line, sizeof(line), &sess, &r), 0);
	/* the key is on the line only wrapped: not in clear, not in hex */
	ck_assert(strncmp(line, "REGISTER job=42 key=", 20) == 0);
	ck_assert(!memmem(line, strlen(line), r.key, 8));
	ck_assert_str_eq(line + 20 + NIC_CTL_WRAP_HEX,
			 " mac=payload n=4 dtype=bf16 "
			 "frag=1024 chunk=4096 chunks=7,0,16777216 ranks=198.18.100.1:9700,"
			 "198.18.100.2:9700,198.18.100.3:9700,198.18.100.4:9700 "
			 "short=0:6:1000,2:9:2");
	got.grow = false;
	ck_assert_int_eq(nic_ctl_parse_register(line + 9, &lim, &sess, &got, err, sizeof(err)), 0);
	ck_assert_uint_eq(got.job, 42);
	ck_assert_mem_eq(got.key, r.key, NIC_KEY_LEN);
	ck_assert_uint_eq(got.mac, NIC_MAC_PAYLOAD);
	ck_assert_uint_eq(got.n, 4);
	ck_assert_uint_eq(got.dtype, PBOX_DTYPE_BF16);
	ck_assert_uint_eq(got.frag, 1024);
	ck_assert_uint_eq(got.chunk, 4096);
	ck_assert_uint_eq(got.n_eps, 3);
	ck_assert_uint_eq(got.chunks[2], 16777216);
	ck_assert_uint_eq(got.n_shorts, 2);
	ck_assert(got.ranks[3].ip_be == r.ranks[3].ip_be && got.ranks[3].port == 9700);
	ck_assert(got.shorts[1].ep == 2 && got.shorts[1].chunk == 9 && got.shorts[1].bytes == 2);
	/* the same wrapped key on another connection, or for another job: refused */
	{
		struct nic_ctl_session other;

		test_session(&other, 2);
		ck_assert_int_eq(
			nic_ctl_parse_register(line + 9, &lim, &other, &got, err, sizeof(err)), -1);
		ck_assert_msg(strstr(err, "key: not the job's key wrapped on this connection"),
			      "%s", err);
	}
	/* defaults: the box's sizes, a payload MAC */
	nic_ctl_wrap_key(&sess, 1, r.key, key);
	snprintf(args, sizeof(args),
		 "job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 key);
	ck_assert_int_eq(nic_ctl_parse_register(args, &lim, &sess, &got, err, sizeof(err)), 0);
	ck_assert_uint_eq(got.frag, 8192);
	ck_assert_uint_eq(got.chunk, 32768);
	ck_assert_uint_eq(got.mac, NIC_MAC_PAYLOAD);
	ck_assert_uint_eq(got.comp, 0); /* no compressed pushes unless asked */
	{ /* comp=: compressed fp32 pushes at a top-k rate, formatted and parsed back */
		struct nic_ctl_reg c = got;

		c.comp = 10000;
		ck_assert_int_gt(nic_ctl_format_register(line, sizeof(line), &sess, &c), 0);
		ck_assert_ptr_nonnull(strstr(line, " comp=10000"));
		ck_assert_int_eq(
			nic_ctl_parse_register(line + 9, &lim, &sess, &got, err, sizeof(err)), 0);
		ck_assert_uint_eq(got.comp, 10000);
		ck_assert(!got.in_order); /* arrival order unless asked */
		/* order=rank: [job] deterministic */
		c.in_order = true;
		ck_assert_int_gt(nic_ctl_format_register(line, sizeof(line), &sess, &c), 0);
		ck_assert_ptr_nonnull(strstr(line, " order=rank"));
		ck_assert_int_eq(
			nic_ctl_parse_register(line + 9, &lim, &sess, &got, err, sizeof(err)), 0);
		ck_assert(got.in_order);
	}
	args[strlen("job=1 key=") + 5] ^= 1; /* one wrapped bit flipped: the tag says so */
	ck_assert_int_eq(nic_ctl_parse_register(args, &lim, &sess, &got, err, sizeof(err)), -1);
	ck_assert_int_eq(nic_ctl_format_register(line, 40, &sess, &r), -1); /* does not fit */
	/* GROW: the same fields but key and mac, for a segment of new chunks */
	r.grow = true;
	ck_assert_int_gt(nic_ctl_format_register(line, sizeof(line), &sess, &r), 0);
	ck_assert(strncmp(line, "GROW job=42 n=4 dtype=bf16 ", 27) == 0);
	got.grow = true;
	ck_assert_int_eq(nic_ctl_parse_register(line + 5, &lim, &sess, &got, err, sizeof(err)), 0);
	ck_assert_uint_eq(got.chunks[0], 7);
	got.grow = true;
	ck_assert_int_eq(nic_ctl_parse_register(args, &lim, &sess, &got, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "key: GROW keeps the job's key and MAC mode");
}
END_TEST

/* Everything REGISTER got away with before: each refused, and the message
 * names the field and what it may be. */
START_TEST(register_strict)
{
	static const struct {
		const char *args, *err;
	} bad[] = {
		{"job=1 key=%s n=2 dtype=fp32 fragment=1024 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "unknown key 'fragment' (REGISTER takes job, key, mac, n, dtype, frag, chunk, chunks, ranks, short, comp, order, async, stale)"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 order=ranks",
		 "order: 'ranks' is not arrival or rank"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 order=rank order=rank",
		 "order: given twice"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 comp=0",
		 "comp: '0' is not a number from 1 to 1000000"},
		{"job=1 key=%s n=2 dtype=bf16 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 comp=10000",
		 "comp: compressed pushes are of fp32 data only"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=0:2:100",
		 "short: entry 0: endpoint 0 has no chunk 2"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=0:1:32768",
		 "short: entry 0: 32768 bytes is not a whole number of 4-byte elements from 1 to 32767"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=0:1:6",
		 "short: entry 0: 6 bytes"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=1:0:8,0:1:8",
		 "short: entry 1: not in (endpoint, chunk) order, or twice"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=0:1:8,0:1:8",
		 "short: entry 1: not in (endpoint, chunk) order, or twice"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=0:1",
		 "short: entry 0: '0:1' is not"},
		/* a number past 32 bits is refused, not wrapped to a chunk that exists */
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=0:4294967297:8",
		 "short: entry 0: '0:4294967297:8' is not"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 short=0:+1:8",
		 "short: entry 0: '0:+1:8' is not"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700 async=4294967296:0+1:0",
		 "async: entry 0: '4294967296:0+1:0' is not"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:-9700",
		 "ranks: entry 1: '198.18.0.11:-9700' is not"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=2,1,1 ranks=198.18.0.10:9700,198.18.0.11:75236",
		 "ranks: entry 1: '198.18.0.11:75236' is not"},
		{"job=01 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "job: '01' is not a number"},
		{"job=1 job=2 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "job: given twice"},
		{"job=0 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "job: '0' is not a number from 1 to 4294967295"},
		{"job=1 key=%s n=1 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700",
		 "n: '1' is not a number from 2 to 1024"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=0,0,0 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "chunks: the job has no chunk on any endpoint"},
		{"job=1 key=%s n=2 dtype=fp32 chunk=3000 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "chunk: '3000' is not a power of two from 8192 to 1048576"},
		{"job=1 key=%s n=2 dtype=fp32 frag=16384 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "frag: '16384' is not a power of two from 64 to 8192"},
		{"job=1 key=%s n=2 dtype=fp64 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "dtype: 'fp64' is not fp32, fp16 or bf16"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "chunks: 2 counts for 3 endpoints"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "chunks: more than one count per endpoint (3 endpoints)"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,x,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "chunks: entry 1: 'x' is not a count"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1, ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "chunks: a count is missing"},
		{"job=1 key=00ff n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "key: not the job's key wrapped on this connection"},
		{"job=2 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "key: not the job's key wrapped on this connection"},
		{"job=1 key=%s mac=sha1 n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "mac: 'sha1' is not header, payload or off"},
		{"job=1 n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:9700",
		 "key: missing"},
		{"job=1 key=%s n=2 dtype=fp32", "chunks: missing"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1", "ranks: missing"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700",
		 "ranks: 1 addresses for n = 2 ranks"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.10:9700",
		 "ranks: ranks 0 and 1 have the same address"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,255.255.255.255:9700",
		 "ranks: entry 1: '255.255.255.255:9700' is not a host's"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 ranks=198.18.0.10:9700,198.18.0.11:0",
		 "ranks: entry 1: '198.18.0.11:0' is not a host's"},
		{"job=1 key=%s n=2 dtype=fp32 chunks=1,1,1 extra", "'extra': expected key=value"},
	};
	static struct nic_ctl_reg got;
	struct nic_ctl_session sess;
	uint8_t k[NIC_KEY_LEN] = {9};
	char err[256], key[NIC_CTL_WRAP_HEX + 1], args[512];
	unsigned i;

	test_session(&sess, 1);
	nic_ctl_wrap_key(&sess, 1, k, key); /* a good key for job 1 */
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		{ /* the template's %s: the good key */
			const char *at = strstr(bad[i].args, "%s");

			if (at)
				snprintf(args, sizeof(args), "%.*s%s%s", (int)(at - bad[i].args),
					 bad[i].args, key, at + 2);
			else
				snprintf(args, sizeof(args), "%s", bad[i].args);
		}
		got.grow = false;
		ck_assert_msg(nic_ctl_parse_register(args, &lim, &sess, &got, err, sizeof(err)) ==
				      -1,
			      "taken: '%s'", bad[i].args);
		ck_assert_msg(strncmp(err, bad[i].err, strlen(bad[i].err)) == 0,
			      "'%s': said '%s', want '%s...'", bad[i].args, err, bad[i].err);
	}
}
END_TEST

START_TEST(ok_lines_round_trip)
{
	const struct nic_ctl_geometry g = {.n_eps = 4, .frag = 8192, .chunk = 32768, .mtu = 9000};
	const struct nic_ctl_reg_ok ok = {
		.job = 7, .bytes = 1ull << 40, .frag = 1024, .chunk = 4096};
	static const char *const bad_geo[] = {
		"OK endpoints=4 frag=8192 chunk=32768 mtu=9000 txref=0",
		"OK endpoints=4 frag=8192 chunk=32768 mtu=9000 txref=4097",
		"OK endpoints=4 frag=8192 chunk=32768 mtu=9000 txref=",
		"OK endpoints=4 frag=8192 chunk=32768 mtu=9000 txref=48 x",
		"OK endpoints=4 frag=8192 chunk=32768 mtu=9000 tx=48",
		"OK endpoints=4 frag=8192 chunk=32768 mtu=-1",
		"OK endpoints=4294967300 frag=8192 chunk=32768 mtu=9000",
		"OK endpoints=4 frag=8192 chunk=32768 mtu=09000"};
	struct nic_ctl_geometry g2, g3;
	struct nic_ctl_reg_ok ok2;
	unsigned i;
	char line[128];

	ck_assert_int_gt(nic_ctl_format_geometry(line, sizeof(line), &g), 0);
	ck_assert_str_eq(line, "OK endpoints=4 frag=8192 chunk=32768 mtu=9000");
	ck_assert_int_eq(nic_ctl_parse_geometry(line, &g2), 0);
	ck_assert(g2.n_eps == g.n_eps && g2.frag == g.frag && g2.chunk == g.chunk &&
		  g2.mtu == g.mtu);
	ck_assert_int_eq(g2.txref, 0); /* not said */
	ck_assert_int_eq(
		nic_ctl_parse_geometry("OK endpoints=4 frag=8192 chunk=4096 mtu=9000", &g2),
		-1); /* chunk smaller than the fragment */
	g3 = g;
	g3.txref = 48; /* a proved connection's: the transmit reference size */
	ck_assert_int_gt(nic_ctl_format_geometry(line, sizeof(line), &g3), 0);
	ck_assert_str_eq(line, "OK endpoints=4 frag=8192 chunk=32768 mtu=9000 txref=48");
	ck_assert_int_eq(nic_ctl_parse_geometry(line, &g2), 0);
	ck_assert_uint_eq(g2.txref, 48);
	for (i = 0; i < sizeof(bad_geo) / sizeof(bad_geo[0]); i++)
		ck_assert_msg(nic_ctl_parse_geometry(bad_geo[i], &g2) == -1, "taken: '%s'",
			      bad_geo[i]);
	ck_assert_int_gt(nic_ctl_format_reg_ok(line, sizeof(line), &ok), 0);
	ck_assert_str_eq(line, "OK job=7 bytes=1099511627776 frag=1024 chunk=4096");
	ck_assert_int_eq(nic_ctl_parse_reg_ok(line, &ok2), 0);
	ck_assert(ok2.job == ok.job && ok2.bytes == ok.bytes && ok2.frag == ok.frag &&
		  ok2.chunk == ok.chunk);
	ck_assert_int_eq(nic_ctl_parse_reg_ok("OK job=7 bytes=5", &ok2), -1);
	ck_assert_int_eq(
		nic_ctl_parse_reg_ok("OK job=4294967303 bytes=5 frag=1024 chunk=4096", &ok2), -1);
	ck_assert_int_eq(nic_ctl_parse_reg_ok("OK job=7 bytes= 5 frag=1024 chunk=4096", &ok2), -1);
}
END_TEST

/* The handshake: both ends derive the same proofs and session key from the
 * box key and both nonces; another key or another nonce, other ones. */
START_TEST(handshake_and_proofs)
{
	struct nic_ctl_session a, b, c;
	uint8_t other[NIC_KEY_LEN], jkey[NIC_KEY_LEN] = {1, 2, 3};
	char p1[65], p2[65], line[200];

	test_session(&a, 1);
	test_session(&b, 1);
	ck_assert_mem_eq(a.ks, b.ks, sizeof(a.ks));
	ck_assert(memcmp(a.box_proof, a.client_proof, 32) != 0); /* no reflection */
	c = a;
	memset(other, 0x43, sizeof(other));
	nic_ctl_session_derive(&c, other);
	ck_assert(memcmp(c.box_proof, a.box_proof, 32) != 0);
	ck_assert(memcmp(c.ks, a.ks, 32) != 0);
	test_session(&c, 2);
	ck_assert(memcmp(c.ks, a.ks, 32) != 0);
	/* UNREGISTER's proof: bound to the job's key and to the session */
	nic_ctl_unreg_proof(&a, 7, jkey, p1);
	nic_ctl_unreg_proof(&c, 7, jkey, p2);
	ck_assert_str_ne(p1, p2);
	nic_ctl_unreg_proof(&a, 8, jkey, p2);
	ck_assert_str_ne(p1, p2);
	ck_assert_int_gt(nic_ctl_format_unregister(line, sizeof(line), &a, 7, jkey), 0);
	ck_assert(strncmp(line, "UNREGISTER job=7 proof=", 23) == 0);
	ck_assert_str_eq(line + 23, p1);
	/* and what the box takes of it: exactly that, job and proof */
	{
		static const char *const bad[][2] = {/* before and after the proof */
						     {"job=7", NULL},
						     {"proof=", " job=7"},
						     {"job=0 proof=", ""},
						     {"job=07 proof=", ""},
						     {"job=0x7 proof=", ""},
						     {"job=+7 proof=", ""},
						     {"job=4294967303 proof=", ""},
						     {"job=7 proof=", " extra=1"},
						     {"job=7  proof=", ""},
						     {"job=7 proof=", "a"}};
		char got[65], err[160], req[200];
		uint32_t job = 0;

		ck_assert_int_eq(nic_ctl_parse_unregister(line + 11, &job, got, err, sizeof(err)),
				 0);
		ck_assert_uint_eq(job, 7);
		ck_assert_str_eq(got, p1);
		for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
			snprintf(req, sizeof(req), "%s%s%s", bad[k][0], bad[k][1] ? p1 : "",
				 bad[k][1] ? bad[k][1] : "");
			ck_assert_msg(nic_ctl_parse_unregister(req, &job, got, err, sizeof(err)) ==
					      -1,
				      "taken: %s", req);
			ck_assert_msg(strstr(err, "is not job=ID (1 to 4294967295) proof=P"), "%s",
				      err);
		}
		p1[10] = 'G'; /* hex, lower case, as the proof is written */
		snprintf(req, sizeof(req), "job=7 proof=%s", p1);
		ck_assert_int_eq(nic_ctl_parse_unregister(req, &job, got, err, sizeof(err)), -1);
	}
	/* AUTH's reply: the box's nonce and proof, exactly as written */
	{
		char ok[160], bad[200];
		uint8_t nb[NIC_CTL_NONCE_LEN], proof[32];

		ck_assert_int_eq(nic_ctl_format_auth_ok(ok, sizeof(ok), &a), 112);
		ck_assert(strncmp(ok, "OK nonce=", 9) == 0 && strstr(ok, " proof="));
		ck_assert_int_eq(nic_ctl_parse_auth_ok(ok, nb, proof), 0);
		ck_assert_mem_eq(nb, a.nb, sizeof(nb));
		ck_assert_mem_eq(proof, a.box_proof, sizeof(proof));
		ck_assert_int_eq(nic_ctl_format_auth_ok(ok, 112, &a), -1); /* no room for the NUL */
		snprintf(bad, sizeof(bad), "%s extra", ok);
		ck_assert_int_eq(nic_ctl_parse_auth_ok(bad, nb, proof), -1);
		snprintf(bad, sizeof(bad), "%s", ok);
		bad[9] = 'A'; /* upper case */
		ck_assert_int_eq(nic_ctl_parse_auth_ok(bad, nb, proof), -1);
		snprintf(bad, sizeof(bad), "%.39s%s", ok, ok + 41); /* a nonce one byte short */
		ck_assert_int_eq(nic_ctl_parse_auth_ok(bad, nb, proof), -1);
		snprintf(bad, sizeof(bad), "%.41s", ok); /* no proof */
		ck_assert_int_eq(nic_ctl_parse_auth_ok(bad, nb, proof), -1);
	}
}
END_TEST

/* A key file: 64 hex digits; refused, naming the file, when it is missing,
 * malformed, or others may read it. */
START_TEST(key_files)
{
	char path[] = "/tmp/pbox-test-key.XXXXXX", err[512];
	uint8_t key[NIC_KEY_LEN];
	int fd = mkstemp(path);
	FILE *f;

	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "w");
	fprintf(f, "%s\n", "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
	fclose(f);
	chmod(path, 0600);
	ck_assert_int_eq(nic_ctl_key_load(path, key, err, sizeof(err)), 0);
	ck_assert_uint_eq(key[0], 0);
	ck_assert_uint_eq(key[31], 0x1f);
	chmod(path, 0644);
	ck_assert_int_eq(nic_ctl_key_load(path, key, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, path) && strstr(err, "others may read"), "%s", err);
	f = fopen(path, "w");
	fprintf(f, "0001\n");
	fclose(f);
	chmod(path, 0600);
	ck_assert_int_eq(nic_ctl_key_load(path, key, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "not a key: 64 hex digits"), "%s", err);
	unlink(path);
	ck_assert_int_eq(nic_ctl_key_load(path, key, err, sizeof(err)), -1);
	ck_assert_msg(strstr(err, "No such file") && strstr(err, "pbox-setup --keygen"), "%s", err);
}
END_TEST

Suite *ctl_suite(void)
{
	Suite *s = suite_create("ctl");
	TCase *tc = tcase_create("codec");

	tcase_add_test(tc, ctl_ep_line_round_trip_and_refusals);
	tcase_add_test(tc, register_round_trip);
	tcase_add_test(tc, register_async);
	tcase_add_test(tc, register_strict);
	tcase_add_test(tc, ok_lines_round_trip);
	tcase_add_test(tc, handshake_and_proofs);
	tcase_add_test(tc, key_files);
	suite_add_tcase(s, tc);
	return s;
}
