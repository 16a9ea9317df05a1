/* SPDX-License-Identifier: BSD-3-Clause */
/* config/: the descriptor engine, both schemas, every example. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg_box.h"
#include "nic_wire.h"
#include "cfg_worker.h"
#include "test.h"

/* A box configuration of one port at PCI address %s. */
#define BOX_ONE_PORT                                                                               \
	"[management]\naddress = 198.18.0.1\n[port p0]\npci = %s\nip = 198.18.1.1\n"               \
	"bandwidth = 10G\n"

/* ---- helpers ---------------------------------------------------------- */

static char *write_tmp(const char *text)
{
	static char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/pbox-cfg-XXXXXX");
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static bool is_box_file(const char *name)
{
	return strncmp(name, "box", 3) == 0;
}

static const struct cfg_schema *schema_for(const char *name)
{
	return is_box_file(name) ? &box_cfg_schema : &wrk_cfg_schema;
}

/* Calls @fn for every *.ini in @dir; returns how many. */
static unsigned each_ini(const char *dir, void (*fn)(const char *path, const char *name))
{
	struct dirent *de;
	unsigned n = 0;
	DIR *d = opendir(dir);

	ck_assert_msg(d != NULL, "cannot open %s", dir);
	while ((de = readdir(d)) != NULL) {
		size_t len = strlen(de->d_name);
		char path[1024];

		if (len < 5 || strcmp(de->d_name + len - 4, ".ini") != 0)
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path))
			ck_abort_msg("path too long: %s/%s", dir, de->d_name);
		fn(path, de->d_name);
		n++;
	}
	closedir(d);
	return n;
}

/* ---- every example ---------------------------------------------------- */

static unsigned n_box_good, n_wrk_good;

static void good_one(const char *path, const char *name)
{
	const struct cfg_schema *sc = schema_for(name);
	struct cfg_errors errs;
	void *a = calloc(1, sc->size), *b = calloc(1, sc->size);
	char *text = NULL;
	size_t len = 0;
	FILE *mem;
	int rc = cfg_load(sc, path, NULL, a, &errs);

	ck_assert_msg(rc == 0, "%s: rc %d, first error: %s", path, rc, errs.msg[0]);
	/* the effective configuration parses back to the same thing */
	mem = open_memstream(&text, &len);
	cfg_print(sc, a, mem);
	fclose(mem);
	char *tmp = write_tmp(text);
	rc = cfg_load(sc, tmp, NULL, b, &errs);
	ck_assert_msg(rc == 0, "%s reprinted: %s\n%s", path, errs.msg[0], text);
	ck_assert_msg(memcmp(a, b, sc->size) == 0, "%s: reprinted config differs", path);
	unlink(tmp);
	free(text);
	free(a);
	free(b);
	if (is_box_file(name))
		n_box_good++;
	else
		n_wrk_good++;
}

START_TEST(examples_parse_and_round_trip)
{
	char dir[1024];

	snprintf(dir, sizeof(dir), "%s/config/examples", test_src_dir());
	each_ini(dir, good_one);
	ck_assert_uint_ge(n_box_good, 2);
	ck_assert_uint_ge(n_wrk_good, 2);
}
END_TEST

/* Each bad example starts with "; expect: LINE: TEXT": the first error must
 * be "PATH:LINE: " followed by a message containing TEXT, and the output
 * struct must not have been touched. */
static void bad_one(const char *path, const char *name)
{
	const struct cfg_schema *sc = schema_for(name);
	struct cfg_errors errs;
	char first[256], want[1300];
	unsigned line;
	int off = 0;
	FILE *f = fopen(path, "r");
	uint8_t *out = malloc(sc->size);

	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(first, sizeof(first), f));
	fclose(f);
	first[strcspn(first, "\n")] = '\0';
	ck_assert_msg(sscanf(first, "; expect: %u: %n", &line, &off) == 1 && off > 0,
		      "%s: first line must be '; expect: LINE: TEXT'", path);
	memset(out, 0xa5, sc->size);
	ck_assert_int_eq(cfg_load(sc, path, NULL, out, &errs), -EINVAL);
	ck_assert_uint_ge(errs.n, 1);
	snprintf(want, sizeof(want), "%s:%u: ", path, line);
	ck_assert_msg(strncmp(errs.msg[0], want, strlen(want)) == 0 &&
			      strstr(errs.msg[0], first + off) != NULL,
		      "%s:\n  want %s...%s\n  got  %s", name, want, first + off, errs.msg[0]);
	for (size_t i = 0; i < sc->size; i++)
		ck_assert_msg(out[i] == 0xa5, "%s: output half-applied at byte %zu", name, i);
	free(out);
}

START_TEST(bad_examples_rejected_with_file_line)
{
	char dir[1024];

	snprintf(dir, sizeof(dir), "%s/config/examples/bad", test_src_dir());
	ck_assert_uint_ge(each_ini(dir, bad_one), 30);
}
END_TEST

/* ---- values ----------------------------------------------------------- */

struct t_cfg {
	uint64_t size, rate, dur, autosz;
	uint32_t n;
	bool b;
	struct cfg_ipv4 ip;
	struct cfg_hostport hp;
	struct cfg_hostports hps;
	struct cfg_mac mac;
	struct cfg_cores cores;
	char s[8];
};

static const struct cfg_key t_keys[] = {
	CFG_KEY(struct t_cfg, size, "size", CFG_SIZE, 0, 0, UINT64_MAX, "0", NULL),
	CFG_KEY(struct t_cfg, rate, "rate", CFG_RATE, 0, 0, UINT64_MAX, "0M", NULL),
	CFG_KEY(struct t_cfg, dur, "dur", CFG_DURATION, 0, 0, UINT64_MAX, "0", NULL),
	CFG_KEY(struct t_cfg, autosz, "autosz", CFG_SIZE, CFG_AUTO | CFG_POW2, 1, 1 << 20, "auto",
		NULL),
	CFG_KEY(struct t_cfg, n, "n", CFG_UINT, 0, 1, 100, "1", NULL),
	CFG_KEY(struct t_cfg, b, "b", CFG_BOOL, 0, 0, 0, "false", NULL),
	CFG_KEY(struct t_cfg, ip, "ip", CFG_IPV4, 0, 0, 0, NULL, NULL),
	CFG_KEY(struct t_cfg, hp, "hp", CFG_HOSTPORT, 0, 0, 0, NULL, NULL),
	CFG_KEY(struct t_cfg, hps, "hps", CFG_HOSTPORTS, 0, 0, 0, NULL, NULL),
	CFG_KEY(struct t_cfg, mac, "mac", CFG_MAC, 0, 0, 0, NULL, NULL),
	CFG_KEY(struct t_cfg, cores, "cores", CFG_CORES, 0, 0, 0, "auto", NULL),
	CFG_KEY(struct t_cfg, s, "s", CFG_STR, 0, 0, 0, NULL, NULL),
};

static const struct cfg_section t_sections[] = {
	{.name = "t", .kind = CFG_SEC_ONE, .keys = t_keys, .n_keys = CFG_NKEYS(t_keys)},
};

static const struct cfg_schema t_schema = {
	.what = "test",
	.sections = t_sections,
	.n_sections = 1,
	.size = sizeof(struct t_cfg),
};

/* Load "[t]\nKEY = VALUE\n"; returns 0 or the error text in @err. */
static int load_kv(const char *key, const char *value, struct t_cfg *out, char *err, size_t len)
{
	char text[512];
	struct cfg_errors errs;
	char *path;
	int rc;

	snprintf(text, sizeof(text), "[t]\n%s = %s\n", key, value);
	path = write_tmp(text);
	memset(out, 0, sizeof(*out));
	rc = cfg_load(&t_schema, path, NULL, out, &errs);
	snprintf(err, len, "%s", rc ? errs.msg[0] : "");
	unlink(path);
	return rc;
}

static const struct {
	const char *key, *value;
	uint64_t want;	 /* for numbers; ignored when an error is expected */
	const char *err; /* NULL: must parse */
} num_cases[] = {
	{"size", "0", 0, NULL},
	{"size", "32K", 32768, NULL},
	{"size", "1.5M", 1572864, NULL},
	{"size", "4G", 4ull << 30, NULL},
	{"size", "2T", 2ull << 40, NULL},
	{"size", "18446744073709551615", UINT64_MAX, NULL},
	{"size", "18446744073709551616", 0, "is too large"},
	{"size", "16777216T", 0, "is too large"},
	{"size", "0.5", 0, "is not a whole number"},
	{"size", "12KB", 0, "has an unknown unit"},
	{"size", "0x10", 0, "has an unknown unit"},
	{"size", "-1", 0, "must not be negative"},
	{"size", "K", 0, "is not a number"},
	{"size", "1.", 0, "is not a number"},
	{"size", ".5K", 0, "is not a number"},
	{"rate", "100G", 100000, NULL},
	{"rate", "2.5G", 2500, NULL},
	{"rate", "400M", 400, NULL},
	{"rate", "1.6T", 1600000, NULL},
	{"rate", "0.5M", 0, "is not a whole number"},
	{"rate", "100", 0, "has an unknown unit"},
	{"dur", "250ms", 250000, NULL},
	{"dur", "1.5s", 1500000, NULL},
	{"dur", "40us", 40, NULL},
	{"dur", "0", 0, NULL},
	{"dur", "5", 0, "has an unknown unit"},
	{"dur", "2m", 0, "has an unknown unit"},
	{"autosz", "auto", 0, NULL},
	{"autosz", "64K", 65536, NULL},
	{"autosz", "3K", 0, "is not a power of two"},
	{"autosz", "2M", 0, "is out of range 1..1M"},
	{"n", "100", 100, NULL},
	{"n", "0", 0, "is out of range 1..100"},
	{"n", "101", 0, "is out of range 1..100"},
	{"n", "1e2", 0, "is not a whole number"},
	{"n", "", 0, "is not a number"},
	{"n", "1.5", 0, "is not a whole number"},
};

/* [box] control's type: a comma-separated list of address:port. */
START_TEST(hostport_lists)
{
	static const struct {
		const char *value, *err;
		uint32_t n;
	} cases[] = {
		{"198.18.0.1:9570", NULL, 1},
		{"198.18.0.1:9570, 198.18.0.2:9570,198.18.0.1:9580", NULL, 3},
		{"localhost:1", NULL, 1},
		{"198.18.0.1:9570,", "ends with a comma", 0},
		{"198.18.0.1:9570,,198.18.0.2:1", "an empty or overlong entry", 0},
		{"198.18.0.1:9570, 198.18.0.1:9570", "lists one address:port twice", 0},
		{"198.18.0.1:0", "has a port that is not a number from 1 to 65535", 0},
		{"1.1.1.1:1,1.1.1.1:2,1.1.1.1:3,1.1.1.1:4,1.1.1.1:5,1.1.1.1:6,1.1.1.1:7,1.1.1.1:8,"
		 "1.1.1.1:9",
		 "lists more than 8", 0},
		{"198.18.0.999:1", "neither an IPv4 address", 0},
	};
	char err[CFG_MSG_LEN];
	struct t_cfg c;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = load_kv("hps", cases[i].value, &c, err, sizeof(err));

		if (cases[i].err) {
			ck_assert_msg(rc == -EINVAL && strstr(err, cases[i].err),
				      "'%s': want '%s', got rc %d '%s'", cases[i].value,
				      cases[i].err, rc, err);
			continue;
		}
		ck_assert_msg(rc == 0, "'%s': %s", cases[i].value, err);
		ck_assert_uint_eq(c.hps.n, cases[i].n);
	}
	ck_assert_int_eq(load_kv("hps", "198.18.0.1:9570, 198.18.0.2:9580", &c, err, sizeof(err)),
			 0);
	ck_assert_uint_eq(c.hps.hp[1].port, 9580);
	ck_assert_uint_eq(c.hps.hp[1].ip_be, htonl(0xc6120002));
}
END_TEST

/* The command lines' values: what a key of that type takes, and nothing
 * else; nothing written on a refusal. */
START_TEST(command_line_values)
{
	static const struct {
		enum cfg_type type;
		const char *value, *err;
		uint64_t want;
	} cases[] = {
		{CFG_UINT, "9570", NULL, 9570},
		{CFG_UINT, "010", NULL, 10}, /* decimal, never octal */
		{CFG_UINT, "0x10", "is not a whole number", 0},
		{CFG_UINT, "4x", "is not a whole number", 0},
		{CFG_UINT, "-1", "must not be negative", 0},
		{CFG_UINT, " 1", "is not a number", 0},
		{CFG_UINT, "18446744073709551616", "is too large", 0},
		{CFG_SIZE, "8M", NULL, 8ull << 20},
		{CFG_SIZE, "1.5K", NULL, 1536},
		{CFG_SIZE, "16Q", "has an unknown unit", 0},
		{CFG_SIZE, "17179869184G", "is too large", 0},
		{CFG_RATE, "10G", NULL, 10000},
		{CFG_DURATION, "250ms", NULL, 250000},
		{CFG_DURATION, "2", "has an unknown unit", 0},
		{CFG_BOOL, "1", "is not of a numeric type", 0},
	};
	struct cfg_hostport hp = {.ip_be = 7, .port = 7};
	uint64_t v;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *err;

		v = 42;
		err = cfg_parse_num(cases[i].type, cases[i].value, &v);
		if (cases[i].err) {
			ck_assert_msg(err && strcmp(err, cases[i].err) == 0 && v == 42,
				      "'%s': want '%s', got '%s' (%" PRIu64 ")", cases[i].value,
				      cases[i].err, err ? err : "taken", v);
			continue;
		}
		ck_assert_msg(!err, "'%s': %s", cases[i].value, err);
		ck_assert_uint_eq(v, cases[i].want);
	}
	ck_assert_ptr_null(cfg_parse_hostport("198.18.0.1:9570", &hp));
	ck_assert_uint_eq(hp.ip_be, htonl(0xc6120001));
	ck_assert_uint_eq(hp.port, 9570);
	ck_assert_ptr_null(cfg_parse_hostport("localhost:1", &hp));
	ck_assert_uint_eq(hp.ip_be, htonl(INADDR_LOOPBACK));
	hp = (struct cfg_hostport){.ip_be = 7, .port = 7};
	ck_assert_str_eq(cfg_parse_hostport("198.18.0.1:9570x", &hp),
			 "has a port that is not a number from 1 to 65535");
	ck_assert_str_eq(cfg_parse_hostport("198.18.0.1:65536", &hp),
			 "has a port that is not a number from 1 to 65535");
	ck_assert_str_eq(cfg_parse_hostport("198.18.0.1", &hp), "is not address:port");
	ck_assert_ptr_nonnull(cfg_parse_hostport("198.18.0.256:1", &hp));
	ck_assert_uint_eq(hp.ip_be, 7); /* untouched */
	ck_assert_uint_eq(hp.port, 7);
}
END_TEST

START_TEST(numbers_units_bounds)
{
	char err[CFG_MSG_LEN];
	struct t_cfg c;

	for (size_t i = 0; i < sizeof(num_cases) / sizeof(num_cases[0]); i++) {
		int rc = load_kv(num_cases[i].key, num_cases[i].value, &c, err, sizeof(err));
		uint64_t got = 0;

		if (num_cases[i].err) {
			ck_assert_msg(rc == -EINVAL && strstr(err, num_cases[i].err),
				      "%s = '%s': want error '%s', got rc %d '%s'",
				      num_cases[i].key, num_cases[i].value, num_cases[i].err, rc,
				      err);
			ck_assert_msg(strstr(err, ":2: "), "error lacks the line: %s", err);
			continue;
		}
		ck_assert_msg(rc == 0, "%s = '%s': %s", num_cases[i].key, num_cases[i].value, err);
		if (!strcmp(num_cases[i].key, "size"))
			got = c.size;
		else if (!strcmp(num_cases[i].key, "rate"))
			got = c.rate;
		else if (!strcmp(num_cases[i].key, "dur"))
			got = c.dur;
		else if (!strcmp(num_cases[i].key, "autosz"))
			got = c.autosz;
		else
			got = c.n;
		ck_assert_msg(got == num_cases[i].want, "%s = '%s': got %llu want %llu",
			      num_cases[i].key, num_cases[i].value, (unsigned long long)got,
			      (unsigned long long)num_cases[i].want);
	}
}
END_TEST

START_TEST(typed_values)
{
	char err[CFG_MSG_LEN];
	struct t_cfg c;

	ck_assert_int_eq(load_kv("b", "Yes", &c, err, sizeof(err)), 0);
	ck_assert(c.b);
	ck_assert_int_eq(load_kv("b", "off", &c, err, sizeof(err)), 0);
	ck_assert(!c.b);
	ck_assert_int_eq(load_kv("b", "2", &c, err, sizeof(err)), -EINVAL);

	ck_assert_int_eq(load_kv("ip", "198.18.0.1", &c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.ip.be, htonl(0xc6120001));
	ck_assert_int_eq(load_kv("ip", "198.18.0", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("ip", "0.0.0.0", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("ip", "198.18.0.1 x", &c, err, sizeof(err)), -EINVAL);

	ck_assert_int_eq(load_kv("hp", "198.18.0.1:9570", &c, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.hp.port, 9570);
	ck_assert_uint_eq(c.hp.ip_be, htonl(0xc6120001));
	ck_assert_int_eq(load_kv("hp", "198.18.0.1:", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("hp", "198.18.0.1:0", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("hp", ":80", &c, err, sizeof(err)), -EINVAL);

	ck_assert_int_eq(load_kv("mac", "02:aB:cd:00:11:ff", &c, err, sizeof(err)), 0);
	ck_assert(c.mac.set);
	ck_assert_uint_eq(c.mac.b[1], 0xab);
	ck_assert_uint_eq(c.mac.b[5], 0xff);
	ck_assert_int_eq(load_kv("mac", "02:ab:cd:00:11:fg", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("mac", "02-ab-cd-00-11-ff", &c, err, sizeof(err)), -EINVAL);

	ck_assert_int_eq(load_kv("cores", "1-3,8,10-11", &c, err, sizeof(err)), 0);
	ck_assert(!c.cores.autosel);
	ck_assert_uint_eq(cfg_cores_count(&c.cores), 6);
	ck_assert(cfg_cores_has(&c.cores, 3) && cfg_cores_has(&c.cores, 8) &&
		  !cfg_cores_has(&c.cores, 9) && cfg_cores_has(&c.cores, 11));
	ck_assert_int_eq(load_kv("cores", "auto", &c, err, sizeof(err)), 0);
	ck_assert(c.cores.autosel);
	ck_assert_int_eq(load_kv("cores", "1,,2", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("cores", "1-", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("cores", "1024", &c, err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(load_kv("cores", "0-1023", &c, err, sizeof(err)), 0);
	ck_assert_uint_eq(cfg_cores_count(&c.cores), 1024);

	ck_assert_int_eq(load_kv("s", "abcdefg", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.s, "abcdefg");
	ck_assert_int_eq(load_kv("s", "abcdefgh", &c, err, sizeof(err)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "longer than 7"));
	ck_assert_int_eq(load_kv("s", "a b", &c, err, sizeof(err)), -EINVAL);
}
END_TEST

START_TEST(all_errors_collected_in_order)
{
	struct cfg_errors errs;
	struct t_cfg c;
	char *path = write_tmp("[t]\nn = 0\nbogus = 1\nb = maybe\n[nope]\nx = 1\ny = 2\n");

	ck_assert_int_eq(cfg_load(&t_schema, path, NULL, &c, &errs), -EINVAL);
	ck_assert_uint_eq(errs.n, 4);
	ck_assert_ptr_nonnull(strstr(errs.msg[0], ":2: [t] n:"));
	ck_assert_ptr_nonnull(strstr(errs.msg[1], ":3: unknown key 'bogus'"));
	ck_assert_ptr_nonnull(strstr(errs.msg[2], ":4: [t] b:"));
	/* an unknown section is reported once, at its header */
	ck_assert_ptr_nonnull(strstr(errs.msg[3], ":5: unknown section [nope]"));
	unlink(path);
}
END_TEST

START_TEST(missing_file)
{
	struct cfg_errors errs;
	struct t_cfg c;

	ck_assert_int_eq(cfg_load(&t_schema, "/nonexistent/pbox.ini", NULL, &c, &errs), -ENOENT);
	ck_assert_ptr_nonnull(strstr(errs.msg[0], "/nonexistent/pbox.ini: cannot open"));
}
END_TEST

START_TEST(comments_and_blank_lines)
{
	struct cfg_errors errs;
	struct t_cfg c;
	char *path = write_tmp("; leading comment\n# hash comment\n\n[t]\n"
			       "n = 42   ; trailing comment\r\n\t\n  ; indented comment\n");

	ck_assert_int_eq(cfg_load(&t_schema, path, NULL, &c, &errs), 0);
	ck_assert_uint_eq(c.n, 42);
	unlink(path);
}
END_TEST

/* ---- the box schema --------------------------------------------------- */

START_TEST(box_defaults_and_derived)
{
	struct cfg_errors errs;
	struct box_cfg *c = calloc(1, sizeof(*c));
	char *path = write_tmp("[management]\naddress = 198.18.0.1\n"
			       "[port a]\nvdev = net_ring0\nip = 198.18.1.1\nbandwidth = 25G\n");

	ck_assert_int_eq(box_cfg_load(path, c, &errs), 0);
	ck_assert_uint_eq(c->mgmt.port, 9570);
	ck_assert(c->cores.list.autosel);
	ck_assert_uint_eq(c->data.chunk_size, 32768);
	ck_assert_uint_eq(c->data.mtu, 9000);
	ck_assert_uint_eq(c->data.fragment_size, 8192); /* auto at MTU 9000 */
	ck_assert_uint_eq(c->limits.job_memory, c->memory.hugepage_budget);
	ck_assert_uint_eq(c->n_ports, 1);
	ck_assert_str_eq(c->port[0].name, "a");
	ck_assert_uint_eq(c->port[0].bandwidth_mbps, 25000);
	ck_assert_uint_eq(c->polling.mode, BOX_POLL_BUSY);
	ck_assert_uint_eq(c->polling.idle_sleep_us, 50);
	ck_assert_uint_eq(c->polling.idle_sleep_first_us, 50); /* auto: idle_sleep, no backoff */
	ck_assert(c->telemetry.enabled);
	unlink(path);
	free(c);
}
END_TEST

START_TEST(box_auto_fragment)
{
	ck_assert_uint_eq(nic_frag_for_mtu(9000, 32768), 8192);
	ck_assert_uint_eq(nic_frag_for_mtu(1500, 32768), 1024);
	ck_assert_uint_eq(nic_frag_for_mtu(9000, 4096), 4096);
	ck_assert_uint_eq(nic_frag_for_mtu(576, 32768), 512);
	ck_assert_uint_eq(nic_frag_for_mtu(40, 32768), 0);
}
END_TEST

START_TEST(box_too_many_ports)
{
	char *text = malloc(64 * 1024);
	struct cfg_errors errs;
	struct box_cfg *c = calloc(1, sizeof(*c));
	size_t n = (size_t)sprintf(text, "[management]\naddress = 198.18.0.1\n");

	for (unsigned i = 0; i <= BOX_MAX_PORTS; i++)
		n += (size_t)sprintf(text + n,
				     "[port p%u]\nvdev = net_ring%u\nip = 198.18.%u.1\nbandwidth = "
				     "1G\n",
				     i, i, i + 1);
	char *path = write_tmp(text);
	ck_assert_int_eq(box_cfg_load(path, c, &errs), -EINVAL);
	ck_assert_ptr_nonnull(strstr(errs.msg[0], "too many [port ...] sections (at most 32)"));
	unlink(path);
	free(text);
	free(c);
}
END_TEST

/* ---- the worker schema and PBOX_* overrides --------------------------- */

static const char *wrk_text = "[worker]\nrank = 0\nworld_size = 2\n"
			      "[data]\naddress = 198.18.1.10\n"
			      "[peers]\n1 = 198.18.1.11:9700\n";

static int wrk_env(char *const *env, struct wrk_cfg *c, struct cfg_errors *errs)
{
	char *path = write_tmp(wrk_text);
	int rc = wrk_cfg_load(path, env, c, errs);

	unlink(path);
	return rc;
}

START_TEST(worker_env_overrides)
{
	struct cfg_errors errs;
	struct wrk_cfg *c = calloc(1, sizeof(*c));
	char *env[] = {"HOME=/root",
		       "PBOX_TUNING_CHUNK_SIZE=64K",
		       "PBOX_SIMD=scalar",
		       "PBOX_PEERS_1=198.18.1.99:9800",
		       "PBOX_TRANSPORT_KIND=dpdk",
		       "PBOX_TRANSPORT_DPDK_PORT=net_ring0",
		       "PBOX_TUNING_PACE_BURST=128K",
		       NULL};
	char *none[] = {NULL};

	ck_assert_int_eq(wrk_env(none, c, &errs), 0);
	ck_assert_uint_eq(c->tuning.pace_burst, 65536);
	ck_assert_int_eq(wrk_env(env, c, &errs), 0);
	ck_assert_uint_eq(c->tuning.chunk_size, 65536);
	ck_assert_uint_eq(c->tuning.pace_burst, 131072);
	ck_assert_uint_eq(c->peers[1].port, 9800);
	ck_assert_uint_eq(c->peers[1].ip_be, htonl(0xc6120163));
	ck_assert_uint_eq(c->transport.kind, WRK_TRANSPORT_DPDK);
	ck_assert_str_eq(c->transport.dpdk_port, "net_ring0");
	/* the own SS_GPU endpoint comes from [data] */
	ck_assert_uint_eq(c->peers[0].port, 9700);
	ck_assert_uint_eq(c->peers[0].ip_be, c->data.address.be);
	free(c);
}
END_TEST

/* A port's PCI address: as lspci writes it and nothing else, kept as sysfs
 * names the device (lower case, with its domain), so that two spellings of
 * one device are one device. */
START_TEST(box_pci_addresses)
{
	static const struct {
		const char *pci, *want;
	} good[] = {{"0000:3B:00.0", "0000:3b:00.0"},
		    {"3b:1f.7", "0000:3b:1f.7"},
		    {"ffff:ff:00.1", "ffff:ff:00.1"}};
	static const char *const bad[] = {"+3b:00.0",  "3b:00.8",	"3b:20.0",
					  "0x3b:00.0", "3b:00.0x",	"00000:3b:00.0",
					  "3b:0.0",    "0000:3b:00.0.", "-1:00.0"};
	struct box_cfg *c = calloc(1, sizeof(*c));
	struct cfg_errors errs;
	char text[512];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		snprintf(text, sizeof(text), BOX_ONE_PORT, good[i].pci);
		ck_assert_msg(cfg_load_text(&box_cfg_schema, "b.ini", text, NULL, c, &errs) == 0,
			      "%s: %s", good[i].pci, errs.msg[0]);
		ck_assert_str_eq(c->port[0].pci, good[i].want);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text), BOX_ONE_PORT, bad[i]);
		ck_assert_msg(cfg_load_text(&box_cfg_schema, "b.ini", text, NULL, c, &errs) ==
					      -EINVAL &&
				      strstr(errs.msg[0], "is not a PCI address"),
			      "%s: taken", bad[i]);
	}
	ck_assert_int_eq(
		cfg_load_text(&box_cfg_schema, "b.ini",
			      "[management]\naddress = 198.18.0.1\n"
			      "[port p0]\npci = 0000:18:00.0\nip = 198.18.1.1\nbandwidth = 10G\n"
			      "[port p1]\npci = 18:00.0\nip = 198.18.1.2\nbandwidth = 10G\n",
			      NULL, c, &errs),
		-EINVAL);
	ck_assert_msg(strstr(errs.msg[0], "b.ini:8: [port p1] names the same device as [port p0]"),
		      "%s", errs.msg[0]);
	free(c);
}
END_TEST

/* A key with no default and 0 out of its range (bandwidth) prints as not
 * set when it is not: printed as "0M" the configuration would not load
 * back (found by make fuzz). */
START_TEST(worker_unset_key_prints_back)
{
	struct cfg_errors errs;
	struct wrk_cfg *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
	char *text = NULL;
	size_t len = 0;
	FILE *mem;

	ck_assert_int_eq(wrk_cfg_load_text("w.ini",
					   "[worker]\nrank = 1\nworld_size = 2\n"
					   "[rendezvous]\naddress = 198.18.0.5:29600\n",
					   NULL, a, &errs),
			 0);
	ck_assert_uint_eq(a->data.bandwidth_mbps, 0);
	mem = open_memstream(&text, &len);
	cfg_print(&wrk_cfg_schema, a, mem);
	fclose(mem);
	ck_assert_msg(strstr(text, "; bandwidth is not set\n"), "%s", text);
	ck_assert_msg(wrk_cfg_load_text("printed.ini", text, NULL, b, &errs) == 0, "%s\n%s",
		      errs.msg[0], text);
	ck_assert_mem_eq(a, b, sizeof(*a));
	free(text);
	free(a);
	free(b);
}
END_TEST

START_TEST(worker_env_errors_name_the_variable)
{
	struct cfg_errors errs;
	struct wrk_cfg *c = calloc(1, sizeof(*c));
	char *bad_value[] = {"PBOX_DATA_MTU=abc", NULL};
	char *unknown[] = {"PBOX_DATA_MTUU=1500", NULL};
	char *cross[] = {"PBOX_TUNING_CREDIT_BYTES=1K", NULL};
	char *burst[] = {"PBOX_TUNING_PACE_BURST=8K", NULL};
	char *rank[] = {"PBOX_WORKER_RANK=7", NULL};
	char *gather[] = {"PBOX_JOB_COMPRESSION=randk", "PBOX_JOB_COMPRESSION_SUM=gather", NULL};

	ck_assert_int_eq(wrk_env(bad_value, c, &errs), -EINVAL);
	ck_assert_str_eq(errs.msg[0], "env PBOX_DATA_MTU: 'abc' is not a number");
	ck_assert_int_eq(wrk_env(unknown, c, &errs), -EINVAL);
	ck_assert_ptr_nonnull(
		strstr(errs.msg[0], "env PBOX_DATA_MTUU: not a worker configuration key"));
	ck_assert_int_eq(wrk_env(cross, c, &errs), -EINVAL);
	ck_assert_str_eq(
		errs.msg[0],
		"env PBOX_TUNING_CREDIT_BYTES: [tuning] credit_bytes: smaller than one chunk");
	ck_assert_int_eq(wrk_env(burst, c, &errs), -EINVAL);
	ck_assert_str_eq(errs.msg[0], "env PBOX_TUNING_PACE_BURST: '8K' is out of range 32K..64M");
	ck_assert_int_eq(wrk_env(rank, c, &errs), -EINVAL);
	ck_assert_str_eq(errs.msg[0],
			 "env PBOX_WORKER_RANK: [worker] rank: 7 is not below world_size 2");
	ck_assert_int_eq(wrk_env(gather, c, &errs), -EINVAL);
	ck_assert_ptr_nonnull(
		strstr(errs.msg[0], "[job] compression_sum: gather is not for randk"));
	free(c);
}
END_TEST

/* PBOX_BOX, the PyTorch backend's name, is [box] control for C as well:
 * one or several host:port; set beside PBOX_BOX_CONTROL it must agree. */
START_TEST(worker_env_box_one_name)
{
	struct cfg_errors errs;
	struct wrk_cfg *c = calloc(1, sizeof(*c));
	char *two[] = {"PBOX_BOX=198.18.0.1:9570, 198.18.0.2:9571", NULL};
	char *same[] = {"PBOX_BOX=198.18.0.1:9570", "PBOX_BOX_CONTROL=198.18.0.1:9570", NULL};
	char *differ[] = {"PBOX_BOX=198.18.0.1:9570", "PBOX_BOX_CONTROL=198.18.0.3:9570", NULL};
	char *bad[] = {"PBOX_BOX=198.18.0.1", NULL};

	ck_assert_int_eq(wrk_env(two, c, &errs), 0);
	ck_assert_uint_eq(c->box.control.n, 2);
	ck_assert_uint_eq(c->box.control.hp[1].ip_be, htonl(0xc6120002));
	ck_assert_uint_eq(c->box.control.hp[1].port, 9571);
	ck_assert_int_eq(wrk_env(same, c, &errs), 0);
	ck_assert_uint_eq(c->box.control.n, 1);
	ck_assert_int_eq(wrk_env(differ, c, &errs), -EINVAL);
	ck_assert_str_eq(errs.msg[0], "env PBOX_BOX and PBOX_BOX_CONTROL: two names for one "
				      "setting, with two values: set one");
	ck_assert_int_eq(wrk_env(bad, c, &errs), -EINVAL);
	ck_assert_ptr_nonnull(strstr(errs.msg[0], "env PBOX_BOX: "));
	free(c);
}
END_TEST

START_TEST(worker_peer_conflicts)
{
	struct cfg_errors errs;
	struct wrk_cfg *c = calloc(1, sizeof(*c));
	char *p1 = write_tmp("[worker]\nrank = 0\nworld_size = 3\n[data]\naddress = 198.18.1.10\n"
			     "[peers]\n0 = 198.18.1.10:9701\n1 = 198.18.1.11:9700\n"
			     "2 = 198.18.1.11:9700\n");

	ck_assert_int_eq(wrk_cfg_load(p1, NULL, c, &errs), -EINVAL);
	ck_assert_uint_eq(errs.n, 2);
	ck_assert_ptr_nonnull(strstr(errs.msg[0], ":7: [peers] 0: this is our own rank"));
	ck_assert_ptr_nonnull(strstr(errs.msg[1], ":9: [peers] 2: same endpoint as rank 1"));
	unlink(p1);
	free(c);
}
END_TEST

Suite *cfg_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("engine");

	tcase_add_test(tc, numbers_units_bounds);
	tcase_add_test(tc, hostport_lists);
	tcase_add_test(tc, command_line_values);
	tcase_add_test(tc, box_pci_addresses);
	tcase_add_test(tc, typed_values);
	tcase_add_test(tc, all_errors_collected_in_order);
	tcase_add_test(tc, missing_file);
	tcase_add_test(tc, comments_and_blank_lines);
	suite_add_tcase(s, tc);

	tc = tcase_create("schemas");
	tcase_add_test(tc, box_defaults_and_derived);
	tcase_add_test(tc, box_auto_fragment);
	tcase_add_test(tc, box_too_many_ports);
	tcase_add_test(tc, worker_env_overrides);
	tcase_add_test(tc, worker_env_errors_name_the_variable);
	tcase_add_test(tc, worker_env_box_one_name);
	tcase_add_test(tc, worker_unset_key_prints_back);
	tcase_add_test(tc, worker_peer_conflicts);
	suite_add_tcase(s, tc);

	tc = tcase_create("examples");
	tcase_add_test(tc, examples_parse_and_round_trip);
	tcase_add_test(tc, bad_examples_rejected_with_file_line);
	suite_add_tcase(s, tc);
	return s;
}
