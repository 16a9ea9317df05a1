/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Descriptor-driven configuration: parse (libinih) -> check each value ->
 * environment overrides -> required keys -> cross-field validation -> apply.
 * Control path only; allocation and stdio are fine here.
 */

#include "cfg.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* libinih's compiled line limit (INI_MAX_LINE in Debian's build). Longer
 * lines would be split silently, so the reader refuses them. */
#define CFG_LINE_MAX	200
#define CFG_MAX_HEADERS 256

enum cfg_src { SRC_UNSET = 0, SRC_FILE, SRC_ENV };

struct cfg_slot {
	uint32_t line;
	uint8_t src;
};

struct cfg_header {
	char name[64];
	uint32_t line;
	bool unknown_reported;
};

struct cfg_ctx {
	const struct cfg_schema *schema;
	const char *path;
	uint8_t *stage;
	struct cfg_errors *errs;
	struct cfg_slot *slots;
	unsigned *slot_base; /* first slot of each section */
	/* reader state */
	FILE *fp;
	char *linebuf;
	size_t linecap;
	uint32_t next_line, cur_line;
	struct cfg_header headers[CFG_MAX_HEADERS];
	unsigned n_headers;
};

static void cfg_err_add(struct cfg_errors *errs, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void cfg_err_add(struct cfg_errors *errs, const char *fmt, ...)
{
	if (errs->n < CFG_MAX_ERRORS) {
		va_list ap;

		va_start(ap, fmt);
		vsnprintf(errs->msg[errs->n], CFG_MSG_LEN, fmt, ap);
		va_end(ap);
	}
	errs->n++;
}

void cfg_errors_print(const struct cfg_errors *errs, FILE *f)
{
	for (unsigned i = 0; i < errs->n && i < CFG_MAX_ERRORS; i++)
		fprintf(f, "%s\n", errs->msg[i]);
	if (errs->n > CFG_MAX_ERRORS)
		fprintf(f, "(%u more errors not shown)\n", errs->n - CFG_MAX_ERRORS);
}

unsigned cfg_cores_count(const struct cfg_cores *c)
{
	unsigned i, n = 0;

	for (i = 0; i < CFG_MAX_CPUS / 64; i++)
		n += (unsigned)__builtin_popcountll(c->mask[i]);
	return n;
}

/* ---- value parsing ---------------------------------------------------- */

struct cfg_unit {
	const char *sfx;
	uint64_t mult;
};

static const struct cfg_unit units_size[] = {
	{"", 1},	   {"K", 1ull << 10}, {"M", 1ull << 20},
	{"G", 1ull << 30}, {"T", 1ull << 40}, {NULL, 0},
};
static const struct cfg_unit units_rate[] = {
	{"M", 1},
	{"G", 1000},
	{"T", 1000000},
	{NULL, 0},
};
static const struct cfg_unit units_dur[] = {
	{"us", 1},
	{"ms", 1000},
	{"s", 1000000},
	{NULL, 0},
};
static const struct cfg_unit units_none[] = {
	{"", 1},
	{NULL, 0},
};

/*
 * "12", "1.5G", "250ms": a decimal with up to 9 fraction digits and a unit
 * suffix. The scaled value must be a whole number of the stored unit.
 * Returns NULL or a static description of what is wrong.
 */
static const char *parse_scaled(const char *s, const struct cfg_unit *units, bool frac_ok,
				uint64_t *out)
{
	uint64_t mant = 0, div = 1, v;
	const struct cfg_unit *u;
	const char *p = s;
	bool digits = false;

	if (*p == '-')
		return "must not be negative";
	for (; isdigit((unsigned char)*p); p++, digits = true)
		if (__builtin_mul_overflow(mant, 10, &mant) ||
		    __builtin_add_overflow(mant, (uint64_t)(*p - '0'), &mant))
			return "is too large";
	if (*p == '.' && frac_ok) {
		if (!digits || !isdigit((unsigned char)p[1]))
			return "is not a number";
		for (p++; isdigit((unsigned char)*p); p++) {
			if (div >= 1000000000ull)
				return "has too many decimals";
			if (__builtin_mul_overflow(mant, 10, &mant) ||
			    __builtin_add_overflow(mant, (uint64_t)(*p - '0'), &mant))
				return "is too large";
			div *= 10;
		}
	}
	if (!digits)
		return "is not a number";
	for (u = units; u->sfx; u++)
		if (strcmp(p, u->sfx) == 0)
			break;
	if (!u->sfx) {
		if (*p == '\0' && mant == 0) /* a bare 0 needs no unit */
			u = units;
		else
			return units == units_none ? "is not a whole number"
						   : "has an unknown unit";
	}
	if (__builtin_mul_overflow(mant, u->mult, &v))
		return "is too large";
	if (v % div)
		return "is not a whole number of the unit it is kept in";
	*out = v / div;
	return NULL;
}

/* How each numeric type is written. */
static const struct num_kind {
	const struct cfg_unit *units;
	bool frac;
	const char *hint;
} num_kinds[] = {
	[CFG_UINT] = {units_none, false, ""},
	[CFG_SIZE] = {units_size, true, " (use a number with K, M, G or T)"},
	[CFG_RATE] = {units_rate, true, " (bits/s: use M, G or T, e.g. 100G)"},
	[CFG_DURATION] = {units_dur, true, " (use us, ms or s, e.g. 250ms)"},
};

const char *cfg_parse_num(enum cfg_type type, const char *s, uint64_t *out)
{
	if (type != CFG_UINT && type != CFG_SIZE && type != CFG_RATE && type != CFG_DURATION)
		return "is not of a numeric type";
	return parse_scaled(s, num_kinds[type].units, num_kinds[type].frac, out);
}

static const char *parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "yes", "on", "1"};
	static const char *const no[] = {"false", "no", "off", "0"};
	unsigned i;

	for (i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return NULL;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return NULL;
		}
	}
	return "is not a boolean (true/false, yes/no, on/off, 1/0)";
}

static const char *parse_ipv4(const char *s, uint32_t *be)
{
	struct in_addr a;

	if (inet_pton(AF_INET, s, &a) != 1)
		return "is not an IPv4 address (a.b.c.d)";
	if (a.s_addr == 0)
		return "must not be 0.0.0.0";
	*be = a.s_addr;
	return NULL;
}

/* A host name's first IPv4 address (the resolver's order: /etc/hosts, DNS).
 * "localhost" and names under it are the loopback address without asking
 * anyone (RFC 6761 6.3): a minimal root may have no /etc/hosts, and the
 * question must not leave the host. */
static int resolve_ipv4(const char *name, uint32_t *be)
{
	const struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	size_t n = strlen(name);

	if (!strcasecmp(name, "localhost") ||
	    (n > 10 && !strcasecmp(name + n - 10, ".localhost"))) {
		*be = htonl(INADDR_LOOPBACK);
		return 0;
	}

	if (getaddrinfo(name, NULL, &hints, &res) != 0 || !res)
		return -1;
	*be = ((const struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
	freeaddrinfo(res);
	return 0;
}

static const char *parse_hostport(const char *s, struct cfg_hostport *hp)
{
	char ip[256];
	const char *colon = strrchr(s, ':');
	uint64_t port;
	size_t n;

	if (!colon)
		return "is not address:port";
	n = (size_t)(colon - s);
	if (n == 0 || n >= sizeof(ip))
		return "is not address:port";
	memcpy(ip, s, n);
	ip[n] = '\0';
	/* a malformed dotted quad is an error, not a name to ask DNS about */
	if (parse_ipv4(ip, &hp->ip_be) &&
	    (strspn(ip, "0123456789.") == n || resolve_ipv4(ip, &hp->ip_be)))
		return "has a host that is neither an IPv4 address nor a name that resolves to one";
	if (parse_scaled(colon + 1, units_none, false, &port) || port == 0 || port > 65535)
		return "has a port that is not a number from 1 to 65535";
	hp->port = (uint16_t)port;
	return NULL;
}

const char *cfg_parse_hostport(const char *s, struct cfg_hostport *out)
{
	struct cfg_hostport hp;
	const char *err = parse_hostport(s, &hp);

	if (!err)
		*out = hp;
	return err;
}

/* "host:port, host:port": each as parse_hostport(), none twice. */
static const char *parse_hostports(const char *s, struct cfg_hostports *l)
{
	char item[300];

	l->n = 0;
	while (*s) {
		size_t n = strcspn(s, ",");
		const char *err;

		while (n && (*s == ' ' || *s == '\t'))
			s++, n--;
		while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
			n--;
		if (n == 0 || n >= sizeof(item))
			return "has an empty or overlong entry in its comma-separated list";
		if (l->n == CFG_MAX_HOSTPORTS)
			return "lists more than 8 address:port entries";
		memcpy(item, s, n);
		item[n] = '\0';
		err = parse_hostport(item, &l->hp[l->n]);
		if (err)
			return err;
		for (uint32_t i = 0; i < l->n; i++)
			if (l->hp[i].ip_be == l->hp[l->n].ip_be &&
			    l->hp[i].port == l->hp[l->n].port)
				return "lists one address:port twice";
		l->n++;
		s += strcspn(s, ",");
		if (*s == ',' && !*++s)
			return "ends with a comma";
	}
	return l->n ? NULL : "is empty";
}

static const char *parse_mac(const char *s, struct cfg_mac *m)
{
	unsigned i;

	if (strlen(s) != 17)
		return "is not a MAC address (aa:bb:cc:dd:ee:ff)";
	for (i = 0; i < 6; i++) {
		const char *p = s + 3 * i;

		if (!isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]) ||
		    (i < 5 && p[2] != ':'))
			return "is not a MAC address (aa:bb:cc:dd:ee:ff)";
		m->b[i] = (uint8_t)strtoul((char[3]){p[0], p[1], 0}, NULL, 16);
	}
	m->set = true;
	return NULL;
}

static const char *parse_cores(const char *s, struct cfg_cores *c)
{
	const char *p = s;

	memset(c, 0, sizeof(*c));
	if (strcmp(s, "auto") == 0) {
		c->autosel = true;
		return NULL;
	}
	for (;;) {
		char *end;
		unsigned long lo, hi, i;

		if (!isdigit((unsigned char)*p))
			return "is not 'auto' or a core list such as 0-3,8";
		lo = strtoul(p, &end, 10);
		hi = lo;
		if (*end == '-') {
			p = end + 1;
			if (!isdigit((unsigned char)*p))
				return "has a range with no end";
			hi = strtoul(p, &end, 10);
		}
		if (hi < lo)
			return "has a range that goes backwards";
		if (hi >= CFG_MAX_CPUS)
			return "names a CPU beyond 1023";
		for (i = lo; i <= hi; i++)
			c->mask[i / 64] |= 1ull << (i % 64);
		if (*end == '\0')
			return NULL;
		if (*end != ',')
			return "is not 'auto' or a core list such as 0-3,8";
		p = end + 1;
	}
}

static void store_uint(void *dst, size_t size, uint64_t v)
{
	if (size == sizeof(uint32_t)) {
		uint32_t w = (uint32_t)v;
		memcpy(dst, &w, sizeof(w));
	} else {
		memcpy(dst, &v, sizeof(v));
	}
}

static uint64_t load_uint(const void *src, size_t size)
{
	if (size == sizeof(uint32_t)) {
		uint32_t w;
		memcpy(&w, src, sizeof(w));
		return w;
	}
	uint64_t v;
	memcpy(&v, src, sizeof(v));
	return v;
}

static void fmt_bound(const struct cfg_key *k, uint64_t v, char *buf, size_t len)
{
	if (k->type == CFG_SIZE)
		cfg_fmt_size(buf, len, v);
	else if (k->type == CFG_RATE)
		cfg_fmt_rate(buf, len, v);
	else
		snprintf(buf, len, "%llu%s", (unsigned long long)v,
			 k->type == CFG_DURATION ? "us" : "");
}

/* The numeric types: units, bounds, powers of two, "auto". */
static int parse_number(const struct cfg_key *k, const char *val, void *dst, char *why,
			size_t whylen)
{
	const struct num_kind *nk = &num_kinds[k->type];
	const char *err;
	uint64_t v = 0;

	if ((k->flags & CFG_AUTO) && strcmp(val, "auto") == 0) {
		store_uint(dst, k->size, 0);
		return 0;
	}
	err = parse_scaled(val, nk->units, nk->frac, &v);
	if (err) {
		snprintf(why, whylen, "'%s' %s%s", val, err, nk->hint);
		return -1;
	}
	if (v < k->min || v > k->max) {
		char lo[32], hi[32];

		fmt_bound(k, k->min, lo, sizeof(lo));
		fmt_bound(k, k->max, hi, sizeof(hi));
		snprintf(why, whylen, "'%s' is out of range %s..%s", val, lo, hi);
		return -1;
	}
	if ((k->flags & CFG_POW2) && (v & (v - 1))) {
		snprintf(why, whylen, "'%s' is not a power of two", val);
		return -1;
	}
	store_uint(dst, k->size, v);
	return 0;
}

/*
 * Parse @val for @k into @dst. Returns 0, or -1 with @why set.
 * @dst is written only on success.
 */
static int parse_value(const struct cfg_key *k, const char *val, void *dst, char *why,
		       size_t whylen)
{
	const char *err = NULL;

	switch (k->type) {
	case CFG_UINT:
	case CFG_SIZE:
	case CFG_RATE:
	case CFG_DURATION:
		return parse_number(k, val, dst, why, whylen);
	case CFG_BOOL: {
		bool b;

		err = parse_bool(val, &b);
		if (!err)
			memcpy(dst, &b, sizeof(b));
		break;
	}
	case CFG_ENUM: {
		unsigned i;

		for (i = 0; k->enums[i]; i++)
			if (strcmp(val, k->enums[i]) == 0) {
				memcpy(dst, &i, sizeof(i));
				return 0;
			}
		int n = snprintf(why, whylen, "'%s' is not one of:", val);
		for (i = 0; k->enums[i] && n > 0 && (size_t)n < whylen; i++)
			n += snprintf(why + n, whylen - (size_t)n, " %s", k->enums[i]);
		return -1;
	}
	case CFG_IPV4: {
		struct cfg_ipv4 a;

		err = parse_ipv4(val, &a.be);
		if (!err)
			memcpy(dst, &a, sizeof(a));
		break;
	}
	case CFG_HOSTPORT: {
		struct cfg_hostport hp = {0};

		err = parse_hostport(val, &hp);
		if (!err)
			memcpy(dst, &hp, sizeof(hp));
		break;
	}
	case CFG_HOSTPORTS: {
		struct cfg_hostports l = {0};

		err = parse_hostports(val, &l);
		if (!err)
			memcpy(dst, &l, sizeof(l));
		break;
	}
	case CFG_MAC: {
		struct cfg_mac m = {0};

		err = parse_mac(val, &m);
		if (!err)
			memcpy(dst, &m, sizeof(m));
		break;
	}
	case CFG_STR: {
		size_t i, n = strlen(val);

		if (n == 0) {
			err = "is empty";
			break;
		}
		if (n >= k->size) {
			snprintf(why, whylen, "'%.40s...' is longer than %zu characters", val,
				 k->size - 1);
			return -1;
		}
		for (i = 0; i < n; i++)
			if (!isgraph((unsigned char)val[i]) &&
			    !((k->flags & CFG_SPACES) && val[i] == ' ')) {
				err = k->flags & CFG_SPACES
					      ? "contains a control character"
					      : "contains a space or a control character";
				break;
			}
		if (!err) {
			memset(dst, 0, k->size);
			memcpy(dst, val, n);
		}
		break;
	}
	case CFG_CORES: {
		struct cfg_cores *c = malloc(sizeof(*c));

		if (!c) {
			err = "cannot be parsed: out of memory";
			break;
		}
		err = parse_cores(val, c);
		if (!err)
			memcpy(dst, c, sizeof(*c));
		free(c);
		break;
	}
	}
	if (err) {
		snprintf(why, whylen, "'%s' %s", val, err);
		return -1;
	}
	return 0;
}

/* ---- schema lookup ---------------------------------------------------- */

static unsigned sec_slots(const struct cfg_section *s)
{
	switch (s->kind) {
	case CFG_SEC_MANY:
		return s->max * s->n_keys;
	case CFG_SEC_INDEXED:
		return s->max;
	case CFG_SEC_ONE:
		break;
	}
	return s->n_keys;
}

static unsigned *sec_count(const struct cfg_section *s, void *cfg)
{
	return (unsigned *)((uint8_t *)cfg + s->count_off);
}

static unsigned sec_n(const struct cfg_section *s, const void *cfg)
{
	unsigned n;

	memcpy(&n, (const uint8_t *)cfg + s->count_off, sizeof(n));
	return n;
}

static uint8_t *sec_elem(const struct cfg_section *s, const void *cfg, unsigned inst)
{
	return (uint8_t *)cfg + s->off + (size_t)inst * s->elem_size;
}

static int key_index(const struct cfg_section *s, const char *name)
{
	unsigned i;

	for (i = 0; i < s->n_keys; i++)
		if (strcmp(s->keys[i].name, name) == 0)
			return (int)i;
	return -1;
}

static const struct cfg_section *sec_find(const struct cfg_schema *sc, const char *name)
{
	unsigned i;

	for (i = 0; i < sc->n_sections; i++)
		if (strcmp(sc->sections[i].name, name) == 0)
			return &sc->sections[i];
	return NULL;
}

static unsigned edit_distance(const char *a, const char *b)
{
	unsigned la = (unsigned)strlen(a), lb = (unsigned)strlen(b), i, j;
	unsigned row[64];

	if (la >= 63 || lb >= 63)
		return 99;
	for (j = 0; j <= lb; j++)
		row[j] = j;
	for (i = 1; i <= la; i++) {
		unsigned prev = row[0];

		row[0] = i;
		for (j = 1; j <= lb; j++) {
			unsigned cur = row[j];
			unsigned sub = prev + (a[i - 1] != b[j - 1]);
			unsigned del = row[j] + 1, ins = row[j - 1] + 1;

			row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
			prev = cur;
		}
	}
	return row[lb];
}

static const char *suggest_key(const struct cfg_section *s, const char *name)
{
	const char *best = NULL;
	unsigned i, bestd = 3;

	for (i = 0; i < s->n_keys; i++) {
		unsigned d = edit_distance(name, s->keys[i].name);

		if (d < bestd) {
			bestd = d;
			best = s->keys[i].name;
		}
	}
	return best;
}

/* ---- parsing ---------------------------------------------------------- */

static void ctx_err(struct cfg_ctx *ctx, uint32_t line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void ctx_err(struct cfg_ctx *ctx, uint32_t line, const char *fmt, ...)
{
	char msg[CFG_MSG_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (line)
		cfg_err_add(ctx->errs, "%s:%u: %s", ctx->path, line, msg);
	else
		cfg_err_add(ctx->errs, "%s: %s", ctx->path, msg);
}

static struct cfg_header *header_find(struct cfg_ctx *ctx, const char *name)
{
	unsigned i;

	for (i = 0; i < ctx->n_headers; i++)
		if (strcmp(ctx->headers[i].name, name) == 0)
			return &ctx->headers[i];
	return NULL;
}

static void apply_defaults(struct cfg_ctx *ctx, const struct cfg_section *s, uint8_t *base)
{
	char why[CFG_MSG_LEN];
	unsigned i;

	for (i = 0; i < s->n_keys; i++) {
		const struct cfg_key *k = &s->keys[i];

		if (k->def && parse_value(k, k->def, base + k->off, why, sizeof(why)))
			cfg_err_add(ctx->errs, "%s: schema bug: default of [%s] %s: %s",
				    ctx->schema->what, s->name, k->name, why);
	}
}

/*
 * libinih reader: one physical line per call, so that ctx->cur_line is the
 * line the next handler call belongs to. Lines inih would misread (too long
 * to fit its buffer, indented continuations) are reported and handed to it
 * as blank lines so its own line count stays in step with ours.
 */
static char *cfg_reader(char *str, int num, void *stream)
{
	struct cfg_ctx *ctx = stream;
	ssize_t n = getline(&ctx->linebuf, &ctx->linecap, ctx->fp);
	const char *p;

	if (n < 0)
		return NULL;
	ctx->cur_line = ++ctx->next_line;
	for (p = ctx->linebuf; *p == ' ' || *p == '\t'; p++)
		;
	if ((size_t)n + 1 > (size_t)num || (size_t)n + 1 > CFG_LINE_MAX) {
		ctx_err(ctx, ctx->cur_line, "line is longer than %d characters", CFG_LINE_MAX - 2);
		goto blank;
	}
	if (p != ctx->linebuf && *p && *p != '\n' && *p != '\r' && *p != ';' && *p != '#') {
		ctx_err(ctx, ctx->cur_line,
			"indented line: continuation lines are not supported, start keys at column 1");
		goto blank;
	}
	if (*p == '[') {
		const char *end = strchr(p, ']');
		char name[64];
		size_t len;

		if (end) {
			for (p++; *p == ' ' || *p == '\t'; p++)
				;
			len = (size_t)(end - p);
			while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
				len--;
			if (len >= sizeof(name)) {
				ctx_err(ctx, ctx->cur_line, "section name is too long");
				goto blank;
			}
			memcpy(name, p, len);
			name[len] = '\0';
			const struct cfg_header *h = header_find(ctx, name);
			if (h) {
				ctx_err(ctx, ctx->cur_line,
					"section [%s] repeated (first at line %u)", name, h->line);
			} else if (ctx->n_headers < CFG_MAX_HEADERS) {
				struct cfg_header *nh = &ctx->headers[ctx->n_headers++];

				memcpy(nh->name, name, len + 1);
				nh->line = ctx->cur_line;
				nh->unknown_reported = false;
			}
		}
	}
	memcpy(str, ctx->linebuf, (size_t)n + 1);
	return str;
blank:
	str[0] = '\n';
	str[1] = '\0';
	return str;
}

static bool valid_iname(const char *s)
{
	size_t n = strlen(s), i;

	if (n == 0 || n >= CFG_INAME_LEN)
		return false;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' && s[i] != '.')
			return false;
	return true;
}

/* Find (or create) the section instance a [header] names. */
static const struct cfg_section *resolve_section(struct cfg_ctx *ctx, const char *header,
						 unsigned *inst)
{
	const struct cfg_schema *sc = ctx->schema;
	unsigned i;

	*inst = 0;
	for (i = 0; i < sc->n_sections; i++) {
		const struct cfg_section *s = &sc->sections[i];
		size_t n = strlen(s->name);

		if (s->kind != CFG_SEC_MANY) {
			if (strcmp(header, s->name) == 0)
				return s;
			continue;
		}
		if (strncmp(header, s->name, n) != 0 || (header[n] != ' ' && header[n] != '\0'))
			continue;
		const char *iname = header + n;
		while (*iname == ' ')
			iname++;
		struct cfg_header *h = header_find(ctx, header);
		if (!valid_iname(iname)) {
			if (h && !h->unknown_reported) {
				h->unknown_reported = true;
				ctx_err(ctx, h->line,
					"[%s] needs a name of 1..%d letters, digits, '_', '-' or '.', as in [%s eth0]",
					header, CFG_INAME_LEN - 1, s->name);
			}
			return NULL;
		}
		unsigned *cnt = sec_count(s, ctx->stage);
		for (*inst = 0; *inst < *cnt; (*inst)++)
			if (strcmp((char *)sec_elem(s, ctx->stage, *inst) + s->iname_off, iname) ==
			    0)
				return s;
		if (*cnt >= s->max) {
			if (h && !h->unknown_reported) {
				h->unknown_reported = true;
				ctx_err(ctx, h->line, "too many [%s ...] sections (at most %u)",
					s->name, s->max);
			}
			return NULL;
		}
		uint8_t *e = sec_elem(s, ctx->stage, *cnt);
		memcpy(e + s->iname_off, iname, strlen(iname) + 1);
		apply_defaults(ctx, s, e);
		*inst = (*cnt)++;
		return s;
	}
	struct cfg_header *h = header_find(ctx, header);
	if (!h || !h->unknown_reported) {
		if (h)
			h->unknown_reported = true;
		ctx_err(ctx, h ? h->line : ctx->cur_line,
			"unknown section [%s] in %s configuration", header, sc->what);
	}
	return NULL;
}

static int cfg_handler(void *user, const char *section, const char *name, const char *value)
{
	struct cfg_ctx *ctx = user;
	const struct cfg_section *s;
	const struct cfg_key *k;
	char why[CFG_MSG_LEN];
	unsigned inst, slot;
	uint8_t *dst;

	if (section[0] == '\0') {
		ctx_err(ctx, ctx->cur_line, "key '%s' is outside any [section]", name);
		return 1;
	}
	s = resolve_section(ctx, section, &inst);
	if (!s)
		return 1;
	if (s->kind == CFG_SEC_INDEXED) {
		uint64_t idx;

		if (parse_scaled(name, units_none, false, &idx) || idx >= s->max) {
			ctx_err(ctx, ctx->cur_line, "[%s] key '%s' must be a number 0..%u", s->name,
				name, s->max - 1);
			return 1;
		}
		k = &s->keys[0];
		slot = ctx->slot_base[s - ctx->schema->sections] + (unsigned)idx;
		dst = sec_elem(s, ctx->stage, (unsigned)idx) + k->off;
	} else {
		int ki = key_index(s, name);

		if (ki < 0) {
			const char *hint = suggest_key(s, name);

			ctx_err(ctx, ctx->cur_line, "unknown key '%s' in [%s]%s%s%s", name, section,
				hint ? " (did you mean '" : "", hint ? hint : "",
				hint ? "'?)" : "");
			return 1;
		}
		k = &s->keys[ki];
		slot = ctx->slot_base[s - ctx->schema->sections] + inst * s->n_keys + (unsigned)ki;
		dst = (s->kind == CFG_SEC_ONE ? ctx->stage : sec_elem(s, ctx->stage, inst)) +
		      k->off;
	}
	if (ctx->slots[slot].src != SRC_UNSET) {
		ctx_err(ctx, ctx->cur_line, "key '%s' in [%s] repeated (first set at line %u)",
			name, section, ctx->slots[slot].line);
		return 1;
	}
	ctx->slots[slot].src = SRC_FILE;
	ctx->slots[slot].line = ctx->cur_line;
	if (parse_value(k, value, dst, why, sizeof(why)))
		ctx_err(ctx, ctx->cur_line, "[%s] %s: %s", section, name, why);
	return 1;
}

/* ---- environment overrides -------------------------------------------- */

static void env_name(char *buf, size_t len, const char *prefix, const char *sec, const char *key)
{
	size_t i;

	snprintf(buf, len, "%s%s_%s", prefix, sec, key);
	for (i = 0; buf[i]; i++)
		buf[i] = buf[i] == '-' ? '_' : (char)toupper((unsigned char)buf[i]);
}

/* The value of variable @name in @envp, or NULL. */
static const char *env_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (; *envp; envp++)
		if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/* @name's other name under the schema's aliases into @name (the key's
 * variable); both names set with different values is an error. */
static void env_unalias(struct cfg_ctx *ctx, char *const *envp, char *name, size_t cap)
{
	const char *const *a = ctx->schema->env_alias;

	for (unsigned i = 0; a && a[i]; i += 2) {
		const char *other;

		if (strcmp(name, a[i]) != 0)
			continue;
		other = env_get(envp, a[i + 1]);
		if (other && strcmp(other, env_get(envp, a[i])) != 0)
			cfg_err_add(ctx->errs,
				    "env %s and %s: two names for one setting, with two values: "
				    "set one",
				    a[i], a[i + 1]);
		snprintf(name, cap, "%s", a[i + 1]);
		return;
	}
}

static void apply_env(struct cfg_ctx *ctx, char *const *envp)
{
	const struct cfg_schema *sc = ctx->schema;
	size_t plen = strlen(sc->env_prefix);
	char name[128], shown[128], why[CFG_MSG_LEN];
	char *const *all = envp;

	for (; *envp; envp++) {
		const char *eq = strchr(*envp, '=');
		size_t nlen;
		bool matched = false;
		unsigned si, ki;

		if (!eq || strncmp(*envp, sc->env_prefix, plen) != 0)
			continue;
		nlen = (size_t)(eq - *envp);
		if (nlen >= sizeof(name))
			nlen = sizeof(name) - 1;
		memcpy(name, *envp, nlen);
		name[nlen] = '\0';
		memcpy(shown, name, nlen + 1); /* what the messages say: the name as set */
		env_unalias(ctx, all, name, sizeof(name));
		for (ki = 0; sc->env_ignore && sc->env_ignore[ki]; ki += 2)
			if (strcmp(name, sc->env_ignore[ki]) == 0)
				matched = true;
		for (si = 0; si < sc->n_sections && !matched; si++) {
			const struct cfg_section *s = &sc->sections[si];
			char want[128];

			if (s->kind == CFG_SEC_MANY)
				continue;
			if (s->kind == CFG_SEC_INDEXED) {
				uint64_t idx;

				env_name(want, sizeof(want), sc->env_prefix, s->name, "");
				if (strncmp(name, want, strlen(want)) != 0 ||
				    parse_scaled(name + strlen(want), units_none, false, &idx))
					continue;
				matched = true;
				if (idx >= s->max) {
					cfg_err_add(ctx->errs, "env %s: index must be 0..%u", shown,
						    s->max - 1);
					continue;
				}
				if (parse_value(&s->keys[0], eq + 1,
						sec_elem(s, ctx->stage, (unsigned)idx) +
							s->keys[0].off,
						why, sizeof(why)))
					cfg_err_add(ctx->errs, "env %s: %s", shown, why);
				else
					ctx->slots[ctx->slot_base[si] + idx].src = SRC_ENV;
				continue;
			}
			for (ki = 0; ki < s->n_keys; ki++) {
				env_name(want, sizeof(want), sc->env_prefix, s->name,
					 s->keys[ki].name);
				if (strcmp(name, want) != 0)
					continue;
				matched = true;
				if (parse_value(&s->keys[ki], eq + 1, ctx->stage + s->keys[ki].off,
						why, sizeof(why)))
					cfg_err_add(ctx->errs, "env %s: %s", shown, why);
				else
					ctx->slots[ctx->slot_base[si] + ki].src = SRC_ENV;
			}
		}
		if (!matched)
			cfg_err_add(
				ctx->errs,
				"env %s: not a %s configuration key (overrides are named %sSECTION_KEY)",
				shown, sc->what, sc->env_prefix);
	}
}

/* ---- public ----------------------------------------------------------- */

static int slot_of(const struct cfg_ctx *ctx, const char *section, unsigned inst, const char *key)
{
	const struct cfg_section *s = sec_find(ctx->schema, section);
	unsigned base;
	int ki;

	if (!s)
		return -1;
	base = ctx->slot_base[s - ctx->schema->sections];
	if (s->kind == CFG_SEC_INDEXED)
		return inst < s->max ? (int)(base + inst) : -1;
	if (!key || (ki = key_index(s, key)) < 0)
		return -1;
	if (s->kind == CFG_SEC_MANY && inst >= s->max)
		return -1;
	return (int)(base + inst * s->n_keys + (unsigned)ki);
}

void cfg_error_at(struct cfg_ctx *ctx, const char *section, unsigned inst, const char *key,
		  const char *fmt, ...)
{
	const struct cfg_section *s = sec_find(ctx->schema, section);
	char msg[CFG_MSG_LEN];
	int slot = slot_of(ctx, section, inst, key);
	uint32_t line = 0;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (slot >= 0 && ctx->slots[slot].src == SRC_ENV) {
		char en[128];

		if (s && s->kind == CFG_SEC_INDEXED) {
			char idx[16];
			snprintf(idx, sizeof(idx), "%u", inst);
			env_name(en, sizeof(en), ctx->schema->env_prefix, section, idx);
		} else {
			env_name(en, sizeof(en), ctx->schema->env_prefix, section, key ? key : "");
		}
		cfg_err_add(ctx->errs, "env %s: %s", en, msg);
		return;
	}
	if (slot >= 0)
		line = ctx->slots[slot].line;
	if (!line && s) {
		const struct cfg_header *h;
		char hname[96];

		if (s->kind == CFG_SEC_MANY && inst < sec_n(s, ctx->stage))
			snprintf(hname, sizeof(hname), "%s %s", section,
				 (char *)sec_elem(s, ctx->stage, inst) + s->iname_off);
		else
			snprintf(hname, sizeof(hname), "%s", section);
		h = header_find(ctx, hname);
		line = h ? h->line : 0;
	}
	if (!line)
		line = ctx->next_line ? ctx->next_line : 1; /* the end of the file */
	ctx_err(ctx, line, "%s", msg);
}

static void check_required(struct cfg_ctx *ctx)
{
	const struct cfg_schema *sc = ctx->schema;
	unsigned si, ki, inst;

	for (si = 0; si < sc->n_sections; si++) {
		const struct cfg_section *s = &sc->sections[si];
		unsigned n = s->kind == CFG_SEC_MANY ? sec_n(s, ctx->stage) : 1;

		if (s->kind == CFG_SEC_MANY && n == 0 && (s->flags & CFG_REQUIRED)) {
			cfg_error_at(ctx, s->name, 0, NULL,
				     "missing section [%s NAME]: at least one is required",
				     s->name);
			continue;
		}
		if (s->kind == CFG_SEC_INDEXED)
			continue;
		if (s->kind == CFG_SEC_ONE && (s->flags & CFG_REQUIRED) &&
		    !header_find(ctx, s->name)) {
			cfg_error_at(ctx, s->name, 0, NULL, "missing required section [%s]",
				     s->name);
			continue;
		}
		for (inst = 0; inst < n; inst++)
			for (ki = 0; ki < s->n_keys; ki++) {
				const struct cfg_key *k = &s->keys[ki];
				int slot = slot_of(ctx, s->name, inst, k->name);

				if ((k->flags & CFG_REQUIRED) && ctx->slots[slot].src == SRC_UNSET)
					cfg_error_at(
						ctx, s->name, inst, NULL,
						"missing required key '%s' in [%s%s%s]", k->name,
						s->name, s->kind == CFG_SEC_MANY ? " " : "",
						s->kind == CFG_SEC_MANY
							? (char *)sec_elem(s, ctx->stage, inst) +
								  s->iname_off
							: "");
			}
	}
}

/* cfg_load() and cfg_load_text(): @path names the configuration in
 * messages; @given, where not NULL, is read instead of opening @path (and
 * closed here). */
static int load(const struct cfg_schema *sc, const char *path, FILE *given, char *const *envp,
		void *out, struct cfg_errors *errs)
{
	struct cfg_ctx *ctx;
	unsigned si, nslots = 0;
	int rc = -EINVAL, perr;

	memset(errs, 0, sizeof(*errs));
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx) {
		if (given)
			fclose(given);
		cfg_err_add(errs, "%s: out of memory", path);
		return -ENOMEM;
	}
	ctx->fp = given;
	ctx->schema = sc;
	ctx->path = path;
	ctx->errs = errs;
	ctx->stage = calloc(1, sc->size);
	ctx->slot_base = calloc(sc->n_sections, sizeof(*ctx->slot_base));
	for (si = 0; si < sc->n_sections; si++) {
		if (ctx->slot_base)
			ctx->slot_base[si] = nslots;
		nslots += sec_slots(&sc->sections[si]);
	}
	ctx->slots = calloc(nslots ? nslots : 1, sizeof(*ctx->slots));
	if (!ctx->stage || !ctx->slot_base || !ctx->slots) {
		cfg_err_add(errs, "%s: out of memory", path);
		rc = -ENOMEM;
		goto out;
	}
	for (si = 0; si < sc->n_sections; si++)
		if (sc->sections[si].kind == CFG_SEC_ONE)
			apply_defaults(ctx, &sc->sections[si], ctx->stage);

	if (!path && !given) { /* no file: the defaults and the environment */
		ctx->path = "(no file)";
	} else if (!given && !(ctx->fp = fopen(path, "r"))) {
		rc = -errno;
		cfg_err_add(errs, "%s: cannot open: %s", path, strerror(errno));
		goto out;
	} else {
		perr = ini_parse_stream(cfg_reader, ctx, cfg_handler, ctx);
		if (perr > 0)
			ctx_err(ctx, (uint32_t)perr,
				"syntax error: expected [section] or key = value");
		else if (perr < 0)
			ctx_err(ctx, 0, "cannot parse: out of memory");
		if (ferror(ctx->fp)) {
			rc = -EIO;
			ctx_err(ctx, 0, "read error");
		}
	}

	if (envp && sc->env_prefix)
		apply_env(ctx, envp);
	check_required(ctx);
	if (errs->n == 0 && sc->validate)
		sc->validate(ctx, ctx->stage);
	if (errs->n == 0) {
		memcpy(out, ctx->stage, sc->size);
		rc = 0;
	}
out:
	if (ctx->fp)
		fclose(ctx->fp);
	free(ctx->linebuf);
	free(ctx->slots);
	free(ctx->slot_base);
	free(ctx->stage);
	free(ctx);
	return rc;
}

int cfg_load(const struct cfg_schema *sc, const char *path, char *const *envp, void *out,
	     struct cfg_errors *errs)
{
	return load(sc, path, NULL, envp, out, errs);
}

int cfg_load_text(const struct cfg_schema *sc, const char *name, const char *text,
		  char *const *envp, void *out, struct cfg_errors *errs)
{
	FILE *fp;

	memset(errs, 0, sizeof(*errs));
	if (!text) {
		cfg_err_add(errs, "%s: no text", name);
		return -EINVAL;
	}
	/* read as a file is (fmemopen() of an empty text fails: a blank line) */
	fp = fmemopen((void *)(uintptr_t)(*text ? text : "\n"), *text ? strlen(text) : 1, "r");
	if (!fp) {
		cfg_err_add(errs, "%s: %s", name, strerror(errno));
		return -errno;
	}
	return load(sc, name, fp, envp, out, errs);
}

/* ---- printing --------------------------------------------------------- */

void cfg_fmt_size(char *buf, size_t len, uint64_t v)
{
	static const char sfx[] = "KMGT";
	int i = -1;

	while (v && i < 3 && (v & 1023) == 0) {
		v >>= 10;
		i++;
	}
	if (i < 0)
		snprintf(buf, len, "%llu", (unsigned long long)v);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)v, sfx[i]);
}

void cfg_fmt_rate(char *buf, size_t len, uint64_t mbps)
{
	if (mbps && mbps % 1000000 == 0)
		snprintf(buf, len, "%lluT", (unsigned long long)(mbps / 1000000));
	else if (mbps && mbps % 1000 == 0)
		snprintf(buf, len, "%lluG", (unsigned long long)(mbps / 1000));
	else
		snprintf(buf, len, "%lluM", (unsigned long long)mbps);
}

void cfg_fmt_ipv4(char *buf, size_t len, uint32_t be)
{
	struct in_addr a = {.s_addr = be};

	if (!inet_ntop(AF_INET, &a, buf, (socklen_t)len))
		snprintf(buf, len, "?");
}

/* Microseconds in the largest unit that keeps them whole: 250ms, 30s. */
static void fmt_duration(char *buf, size_t len, uint64_t us)
{
	if (us % 1000000 == 0)
		snprintf(buf, len, "%llus", (unsigned long long)(us / 1000000));
	else if (us % 1000 == 0)
		snprintf(buf, len, "%llums", (unsigned long long)(us / 1000));
	else
		snprintf(buf, len, "%lluus", (unsigned long long)us);
}

static void fmt_cores(char *buf, size_t len, const struct cfg_cores *c)
{
	size_t n = 0;
	unsigned i = 0;

	if (c->autosel) {
		snprintf(buf, len, "auto");
		return;
	}
	buf[0] = '\0';
	while (i < CFG_MAX_CPUS && n + 24 < len) {
		unsigned j;

		if (!cfg_cores_has(c, i)) {
			i++;
			continue;
		}
		for (j = i; j + 1 < CFG_MAX_CPUS && cfg_cores_has(c, j + 1); j++)
			;
		n += (size_t)snprintf(buf + n, len - n, "%s%u", n ? "," : "", i);
		if (j > i)
			n += (size_t)snprintf(buf + n, len - n, "-%u", j);
		i = j + 1;
	}
}

/* Format a field; returns false when the value is unset and has no text. */
static bool fmt_value(const struct cfg_key *k, const void *src, char *buf, size_t len)
{
	uint64_t v;

	switch (k->type) {
	case CFG_UINT:
	case CFG_SIZE:
	case CFG_RATE:
	case CFG_DURATION:
		v = load_uint(src, k->size);
		/* 0 below a key's minimum, and no default: the key was not set */
		if (v == 0 && k->min > 0 && !k->def && !(k->flags & CFG_AUTO))
			return false;
		if (v == 0 && (k->flags & CFG_AUTO))
			snprintf(buf, len, "auto");
		else if (k->type == CFG_SIZE)
			cfg_fmt_size(buf, len, v);
		else if (k->type == CFG_RATE)
			cfg_fmt_rate(buf, len, v);
		else if (k->type == CFG_DURATION)
			fmt_duration(buf, len, v);
		else
			snprintf(buf, len, "%llu", (unsigned long long)v);
		return true;
	case CFG_BOOL: {
		bool b;
		memcpy(&b, src, sizeof(b));
		snprintf(buf, len, "%s", b ? "true" : "false");
		return true;
	}
	case CFG_ENUM: {
		unsigned e;
		memcpy(&e, src, sizeof(e));
		snprintf(buf, len, "%s", k->enums[e]);
		return true;
	}
	case CFG_IPV4: {
		struct cfg_ipv4 a;
		memcpy(&a, src, sizeof(a));
		if (!a.be)
			return false;
		cfg_fmt_ipv4(buf, len, a.be);
		return true;
	}
	case CFG_HOSTPORT: {
		struct cfg_hostport hp;
		char ip[INET_ADDRSTRLEN];
		memcpy(&hp, src, sizeof(hp));
		if (!hp.port)
			return false;
		cfg_fmt_ipv4(ip, sizeof(ip), hp.ip_be);
		snprintf(buf, len, "%s:%u", ip, hp.port);
		return true;
	}
	case CFG_HOSTPORTS: {
		const struct cfg_hostports *l = src;
		size_t off = 0;

		if (!l->n)
			return false;
		for (uint32_t i = 0; i < l->n && off < len; i++) {
			char ip[INET_ADDRSTRLEN];

			cfg_fmt_ipv4(ip, sizeof(ip), l->hp[i].ip_be);
			off += (size_t)snprintf(buf + off, len - off, "%s%s:%u", i ? ", " : "", ip,
						l->hp[i].port);
		}
		return true;
	}
	case CFG_MAC: {
		const struct cfg_mac *m = src;
		if (!m->set)
			return false;
		snprintf(buf, len, "%02x:%02x:%02x:%02x:%02x:%02x", m->b[0], m->b[1], m->b[2],
			 m->b[3], m->b[4], m->b[5]);
		return true;
	}
	case CFG_STR:
		if (!((const char *)src)[0])
			return false;
		snprintf(buf, len, "%s", (const char *)src);
		return true;
	case CFG_CORES:
		fmt_cores(buf, len, src);
		return true;
	}
	return false;
}

static void print_keys(const struct cfg_section *s, const uint8_t *base, FILE *f)
{
	char buf[512], dbuf[512];
	unsigned ki;

	for (ki = 0; ki < s->n_keys; ki++) {
		const struct cfg_key *k = &s->keys[ki];
		bool isdef = false;

		if (!fmt_value(k, base + k->off, buf, sizeof(buf))) {
			fprintf(f, "; %s is not set\n", k->name);
			continue;
		}
		if (k->def) {
			union {
				uint8_t b[512];
				struct cfg_cores c;
				uint64_t align;
			} tmp = {{0}};
			char why[CFG_MSG_LEN];

			if (k->size <= sizeof(tmp) &&
			    !parse_value(k, k->def, &tmp, why, sizeof(why)) &&
			    fmt_value(k, &tmp, dbuf, sizeof(dbuf)))
				isdef = strcmp(buf, dbuf) == 0;
		}
		fprintf(f, "%s = %s%s\n", k->name, buf, isdef ? " ; default" : "");
	}
}

void cfg_print(const struct cfg_schema *sc, const void *cfg, FILE *f)
{
	unsigned si, inst;
	char buf[512];

	fprintf(f, "; effective %s configuration\n", sc->what);
	for (si = 0; si < sc->n_sections; si++) {
		const struct cfg_section *s = &sc->sections[si];

		switch (s->kind) {
		case CFG_SEC_ONE:
			fprintf(f, "\n[%s]\n", s->name);
			print_keys(s, cfg, f);
			break;
		case CFG_SEC_MANY:
			for (inst = 0; inst < sec_n(s, cfg); inst++) {
				const uint8_t *e = sec_elem(s, cfg, inst);

				fprintf(f, "\n[%s %s]\n", s->name, (const char *)e + s->iname_off);
				print_keys(s, e, f);
			}
			break;
		case CFG_SEC_INDEXED: {
			bool any = false;

			for (inst = 0; inst < s->max; inst++) {
				if (!fmt_value(&s->keys[0], sec_elem(s, cfg, inst) + s->keys[0].off,
					       buf, sizeof(buf)))
					continue;
				if (!any)
					fprintf(f, "\n[%s]\n", s->name);
				any = true;
				fprintf(f, "%u = %s\n", inst, buf);
			}
			break;
		}
		}
	}
}

/* ---- reference -------------------------------------------------------- */

static const char *type_name(const struct cfg_key *k)
{
	static const char *const names[] = {
		[CFG_UINT] = "integer",
		[CFG_SIZE] = "size (K, M, G, T)",
		[CFG_RATE] = "rate (M, G, T bits/s)",
		[CFG_DURATION] = "duration (us, ms, s)",
		[CFG_BOOL] = "boolean",
		[CFG_ENUM] = "one of",
		[CFG_IPV4] = "IPv4 address",
		[CFG_HOSTPORT] = "address:port",
		[CFG_HOSTPORTS] = "address:port list",
		[CFG_MAC] = "MAC address",
		[CFG_STR] = "string",
		[CFG_CORES] = "core list or auto",
	};
	return names[k->type];
}

static void print_ref_keys(const struct cfg_section *s, FILE *f)
{
	fprintf(f, "| key | type | default | range | meaning |\n|---|---|---|---|---|\n");
	for (unsigned ki = 0; ki < s->n_keys; ki++) {
		const struct cfg_key *k = &s->keys[ki];

		fprintf(f, "| `%s` | %s", s->kind == CFG_SEC_INDEXED ? "0..N-1" : k->name,
			type_name(k));
		for (unsigned e = 0; k->type == CFG_ENUM && k->enums[e]; e++)
			fprintf(f, "%s`%s`", e ? ", " : " ", k->enums[e]);
		if (k->flags & CFG_POW2)
			fprintf(f, ", power of two");
		fprintf(f, " | %s | ",
			(k->flags & CFG_REQUIRED) ? "**required**"
			: k->def		  ? k->def
						  : "unset");
		if (k->type <= CFG_DURATION && k->max) {
			char lo[32], hi[32];

			fmt_bound(k, k->min, lo, sizeof(lo));
			fmt_bound(k, k->max, hi, sizeof(hi));
			fprintf(f, "%s..%s", lo, hi);
		}
		fprintf(f, " | %s |\n", k->help ? k->help : "");
	}
}

/* Every PBOX_* variable: each key's, the aliases, and those that are not
 * keys, with what each does. */
static void print_ref_env(const struct cfg_schema *sc, FILE *f)
{
	char v[128];

	fprintf(f,
		"\n### Environment variables\n\nEvery `%s*` variable the %s configuration reads, and what it "
		"sets; any other `%s*` variable is an error naming it.\n\n| variable | "
		"sets |\n|---|---|\n",
		sc->env_prefix, sc->what, sc->env_prefix);
	for (unsigned si = 0; si < sc->n_sections; si++) {
		const struct cfg_section *s = &sc->sections[si];

		if (s->kind == CFG_SEC_MANY)
			continue;
		for (unsigned ki = 0; ki < s->n_keys; ki++) {
			env_name(v, sizeof(v), sc->env_prefix, s->name,
				 s->kind == CFG_SEC_INDEXED ? "" : s->keys[ki].name);
			fprintf(f, "| `%s%s` | `[%s] %s` |\n", v,
				s->kind == CFG_SEC_INDEXED ? "<i>" : "", s->name,
				s->kind == CFG_SEC_INDEXED ? "<i>" : s->keys[ki].name);
		}
	}
	for (unsigned a = 0; sc->env_alias && sc->env_alias[a]; a += 2)
		fprintf(f,
			"| `%s` | the same as `%s` (one name per thing: both set differently is "
			"an error) |\n",
			sc->env_alias[a], sc->env_alias[a + 1]);
	for (unsigned i = 0; sc->env_ignore && sc->env_ignore[i]; i += 2)
		fprintf(f, "| `%s` | not a key: %s |\n", sc->env_ignore[i], sc->env_ignore[i + 1]);
}

void cfg_print_reference(const struct cfg_schema *sc, FILE *f)
{
	fprintf(f, "## %s configuration\n", sc->what);
	if (sc->env_prefix)
		fprintf(f,
			"\nEvery key can be overridden from the environment as `%sSECTION_KEY` (for example `%sTUNING_CHUNK_SIZE=64K`; `%sPEERS_3=198.18.1.13:9700` for an indexed section).\n",
			sc->env_prefix, sc->env_prefix, sc->env_prefix);
	for (unsigned si = 0; si < sc->n_sections; si++) {
		const struct cfg_section *s = &sc->sections[si];

		fprintf(f, "\n### [%s%s]%s\n\n", s->name, s->kind == CFG_SEC_MANY ? " NAME" : "",
			(s->flags & CFG_REQUIRED) ? " (required)" : "");
		if (s->help)
			fprintf(f, "%c%s.%s\n\n", toupper((unsigned char)s->help[0]), s->help + 1,
				s->kind == CFG_SEC_MANY ? " Repeat the section for each one." : "");
		print_ref_keys(s, f);
	}
	if (sc->env_prefix)
		print_ref_env(sc, f);
}
