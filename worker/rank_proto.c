/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The rank protocol's codec (rank_proto.h): the field tables the verb table
 * generates, one formatter and one parser over them, and the line sender.
 * Control path only.
 */
#include "rank_proto.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nic_ctl.h"
#include "nic_wire.h"

struct rp_field {
	const char *name;
	char type;
	size_t off; /* in struct rp_msg */
};

#define RP_DESC(s, name, T) {#name, #T[0], offsetof(struct rp_msg, s.name)},
#define RP_FIELDS(V, m, F)                                                                         \
	static const struct rp_field rp_fields_##m[] = {F(RP_DESC, m){NULL, 0, 0}};
RP_VERBS(RP_FIELDS)
#undef RP_FIELDS
#undef RP_DESC

static const struct {
	const char *name;
	const struct rp_field *fields;
} verbs[RP_VERB_COUNT] = {
#define RP_ROW(V, m, F) [RP_##V] = {#V, rp_fields_##m},
	RP_VERBS(RP_ROW)
#undef RP_ROW
};

const char *rp_verb_name(enum rp_verb v)
{
	return (unsigned)v < RP_VERB_COUNT ? verbs[v].name : "?";
}

/* ---- formatting -------------------------------------------------------------- */

/* Field @f of @m as text into @out (cap 64; w and t fields: the pointer
 * into @m, in @*s, and "" in @out); 0, or -1 when it cannot be written. */
static int value_of(const struct rp_msg *m, const struct rp_field *f, char out[64], const char **s)
{
	const char *p = (const char *)m + f->off;
	char ip[INET_ADDRSTRLEN];
	const struct rp_addr *ad;

	*s = out;
	out[0] = '\0';
	switch (f->type) {
	case 'u':
		snprintf(out, 64, "%" PRIu32, *(const uint32_t *)(const void *)p);
		return 0;
	case 'U':
		snprintf(out, 64, "%" PRIu64, *(const uint64_t *)(const void *)p);
		return 0;
	case 'i':
		snprintf(out, 64, "%" PRId32, *(const int32_t *)(const void *)p);
		return 0;
	case 'I':
		snprintf(out, 64, "%" PRId64, *(const int64_t *)(const void *)p);
		return 0;
	case 'x':
		snprintf(out, 64, "0x%" PRIx64, *(const uint64_t *)(const void *)p);
		return 0;
	case 'y':
		if (*(const uint8_t *)p >= PBOX_DTYPE_COUNT)
			return -1;
		snprintf(out, 64, "%s", nic_dtype_name(*(const uint8_t *)p));
		return 0;
	case 'a':
		return inet_ntop(AF_INET, p, out, 64) ? 0 : -1;
	case 'p':
		if (!*(const uint16_t *)(const void *)p)
			return -1;
		snprintf(out, 64, "%u", *(const uint16_t *)(const void *)p);
		return 0;
	case 'e':
		ad = (const struct rp_addr *)(const void *)p;
		if (!ad->port || !inet_ntop(AF_INET, &ad->ip_be, ip, sizeof(ip)))
			return -1;
		snprintf(out, 64, "%s:%u", ip, ad->port);
		return 0;
	case 'w':
		*s = *(const char *const *)(const void *)p;
		return *s && **s && !strpbrk(*s, " \r\n") ? 0 : -1;
	case 't':
		*s = *(const char *const *)(const void *)p;
		if (!*s)
			*s = "";
		return 0;
	}
	return -1;
}

int rp_format(char *buf, size_t cap, const struct rp_msg *m)
{
	const struct rp_field *f;
	size_t off;
	int n;

	if ((unsigned)m->verb >= RP_VERB_COUNT || !cap)
		return -1;
	n = snprintf(buf, cap, "%s", verbs[m->verb].name);
	if (n < 0 || (size_t)n >= cap)
		return -1;
	off = (size_t)n;
	for (f = verbs[m->verb].fields; f->name; f++) {
		char num[64];
		const char *s;

		if (value_of(m, f, num, &s))
			return -1;
		if (f->type == 't') {
			size_t room = cap - off, head = strlen(f->name) + 2,
			       len = strcspn(s, "\r\n");

			if (room <= head)
				return -1;
			len = len < RP_TEXT_MAX ? len : RP_TEXT_MAX;
			len = len < room - head - 1 ? len : room - head - 1;
			n = snprintf(buf + off, room, " %s=%.*s", f->name, (int)len, s);
		} else {
			n = snprintf(buf + off, cap - off, " %s=%s", f->name, s);
		}
		if (n < 0 || (size_t)n >= cap - off)
			return -1;
		off += (size_t)n;
	}
	return (int)off;
}

int rp_send_text(int fd, const char *line)
{
	size_t n = strlen(line);

	if (n + 1 > RP_LINE_MAX || memchr(line, '\n', n))
		return -1;
	return nic_ctl_send(fd, line);
}

int rp_send(int fd, const struct rp_msg *m)
{
	char buf[RP_LINE_MAX];

	return rp_format(buf, sizeof(buf) - 1, m) < 0 ? -1 : rp_send_text(fd, buf);
}

int rp_send_verb(int fd, enum rp_verb v)
{
	struct rp_msg m;

	memset(&m, 0, sizeof(m));
	m.verb = v;
	return rp_send(fd, &m);
}

/* ---- parsing ----------------------------------------------------------------- */

/* Decimal digits of @s into @v, at most @max: 0, or -1 (none, a sign, a
 * digit too many). */
static int decimal(const char *s, uint64_t max, uint64_t *v)
{
	uint64_t x = 0;

	if (*s < '0' || *s > '9')
		return -1;
	for (; *s; s++) {
		unsigned d = (unsigned)(*s - '0');

		if (*s < '0' || *s > '9' || x > (max - d) / 10)
			return -1;
		x = x * 10 + d;
	}
	*v = x;
	return 0;
}

static int hex64(const char *s, uint64_t *v)
{
	uint64_t x = 0;
	size_t n = 0;

	if (s[0] != '0' || s[1] != 'x')
		return -1;
	for (s += 2; *s; s++, n++) {
		int d = *s >= '0' && *s <= '9'	 ? *s - '0'
			: *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
			: *s >= 'A' && *s <= 'F' ? *s - 'A' + 10
						 : -1;

		if (d < 0 || n == 16)
			return -1;
		x = x << 4 | (uint64_t)d;
	}
	*v = x;
	return n ? 0 : -1;
}

static int signed_of(const char *s, int64_t min, int64_t max, int64_t *v)
{
	uint64_t mag;

	if (*s == '-') {
		if (decimal(s + 1, (uint64_t) - (min + 1) + 1, &mag))
			return -1;
		*v = mag ? -(int64_t)(mag - 1) - 1 : 0;
		return 0;
	}
	if (decimal(s, (uint64_t)max, &mag))
		return -1;
	*v = (int64_t)mag;
	return 0;
}

static int ipv4(const char *s, uint32_t *ip_be)
{
	struct in_addr a;

	if (inet_pton(AF_INET, s, &a) != 1)
		return -1;
	*ip_be = a.s_addr;
	return 0;
}

/* Value @v (NUL-terminated) of field @f into @m: NULL, or what is wrong. */
static const char *store(struct rp_msg *m, const struct rp_field *f, char *v)
{
	void *p = (char *)m + f->off;
	uint64_t u;
	int64_t i;
	char *colon;
	int d;

	switch (f->type) {
	case 'u':
		if (decimal(v, UINT32_MAX, &u))
			return "not a number from 0 to 4294967295";
		*(uint32_t *)p = (uint32_t)u;
		return NULL;
	case 'U':
		if (decimal(v, UINT64_MAX, &u))
			return "not a number from 0 to 2^64 - 1";
		*(uint64_t *)p = u;
		return NULL;
	case 'i':
		if (signed_of(v, INT32_MIN, INT32_MAX, &i))
			return "not a 32-bit signed number";
		*(int32_t *)p = (int32_t)i;
		return NULL;
	case 'I':
		if (signed_of(v, INT64_MIN, INT64_MAX, &i))
			return "not a 64-bit signed number";
		*(int64_t *)p = i;
		return NULL;
	case 'x':
		if (hex64(v, &u))
			return "not 0x and 1 to 16 hex digits";
		*(uint64_t *)p = u;
		return NULL;
	case 'y':
		if ((d = nic_dtype_parse(v)) < 0)
			return "not fp32, fp16 or bf16";
		*(uint8_t *)p = (uint8_t)d;
		return NULL;
	case 'a':
		return ipv4(v, (uint32_t *)p) ? "not an IPv4 address" : NULL;
	case 'p':
		if (decimal(v, 65535, &u) || !u)
			return "not a port from 1 to 65535";
		*(uint16_t *)p = (uint16_t)u;
		return NULL;
	case 'e':
		colon = strrchr(v, ':');
		if (!colon)
			return "not ADDRESS:PORT";
		*colon = '\0';
		if (ipv4(v, &((struct rp_addr *)p)->ip_be))
			return "not an IPv4 address and a port";
		if (decimal(colon + 1, 65535, &u) || !u)
			return "not an address and a port from 1 to 65535";
		((struct rp_addr *)p)->port = (uint16_t)u;
		return NULL;
	case 'w':
		if (!*v)
			return "empty";
		/* what the formatter would refuse to write (a word is one) */
		if (strpbrk(v, "\r\n"))
			return "not one word (a line break in it)";
		/* fall through */
	case 't':
		*(const char **)p = v;
		return NULL;
	}
	return "of no known type";
}

/* Printable: at most @n bytes of @s, what a refusal quotes. */
static const char *quote(const char *s, size_t n, char *out, size_t cap)
{
	size_t i;

	for (i = 0; i < n && i + 1 < cap && s[i]; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	out[i] = '\0';
	return out;
}

int rp_parse(char *line, struct rp_msg *m, char *err, size_t cap)
{
	const struct rp_field *f;
	size_t n = strcspn(line, " ");
	bool sep = line[n] == ' '; /* a field follows (its space is a NUL once read) */
	char q[48], *p;
	unsigned v;

	memset(m, 0, sizeof(*m));
	for (v = 0; v < RP_VERB_COUNT; v++)
		if (strlen(verbs[v].name) == n && !strncmp(line, verbs[v].name, n))
			break;
	if (v == RP_VERB_COUNT) {
		snprintf(err, cap, "unknown verb '%s'", quote(line, n, q, sizeof(q)));
		return -1;
	}
	m->verb = (enum rp_verb)v;
	p = line + n;
	for (f = verbs[v].fields; f->name; f++) {
		size_t k = strlen(f->name);
		const char *why;
		char *val, *end;

		if (!sep || strncmp(p + 1, f->name, k) || p[1 + k] != '=') {
			snprintf(err, cap, "%s: no %s= where '%s' is", verbs[v].name, f->name,
				 sep ? quote(p + 1, 24, q, sizeof(q)) : "the end of the line");
			return -1;
		}
		val = p + 2 + k;
		end = f->type == 't' ? val + strlen(val) : val + strcspn(val, " ");
		sep = *end == ' ';
		*end = '\0';
		why = store(m, f, val);
		if (why) {
			snprintf(err, cap, "%s: %s=%s is %s", verbs[v].name, f->name,
				 quote(val, 40, q, sizeof(q)), why);
			return -1;
		}
		p = end;
	}
	if (sep) {
		snprintf(err, cap, "%s: '%s' after its last field", verbs[v].name,
			 quote(p + 1, 24, q, sizeof(q)));
		return -1;
	}
	return 0;
}

int rp_expect(char *line, enum rp_verb want, struct rp_msg *m, char *err, size_t cap)
{
	if (rp_parse(line, m, err, cap))
		return -1;
	if (m->verb != want) {
		snprintf(err, cap, "%s where %s was due", rp_verb_name(m->verb),
			 rp_verb_name(want));
		return -1;
	}
	return 0;
}

/* ---- rank lists ---------------------------------------------------------------- */

void rp_ranks_format(char *buf, size_t cap, const bool *gone, uint32_t n)
{
	size_t off = 0;

	snprintf(buf, cap, "-");
	for (uint32_t r = 0; gone && r < n; r++) {
		char one[16];
		int w;

		if (!gone[r])
			continue;
		w = snprintf(one, sizeof(one), "%s%u", off ? "," : "", r);
		if ((size_t)w >= cap - off)
			break;
		memcpy(buf + off, one, (size_t)w + 1);
		off += (size_t)w;
	}
}

int rp_ranks_parse(const char *list, bool *gone, uint32_t n)
{
	if (!strcmp(list, "-"))
		return 0;
	for (const char *p = list;;) {
		char one[16];
		size_t k = strcspn(p, ",");
		uint64_t r;

		if (!k || k >= sizeof(one))
			return -1;
		memcpy(one, p, k);
		one[k] = '\0';
		if (decimal(one, UINT32_MAX, &r))
			return -1;
		if (r < n && gone)
			gone[r] = true;
		if (!p[k])
			return 0;
		p += k + 1;
	}
}
