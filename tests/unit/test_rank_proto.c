/* SPDX-License-Identifier: BSD-3-Clause */
/* The rank protocol's codec: every verb of the table round-trips, every
 * field of every verb refused when missing, malformed or out of range with
 * the field named, and the edges of each type. Driven by the same table as
 * the codec (RP_VERBS), so a new verb is tested without a line here. */
#include <arpa/inet.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "nic_wire.h"
#include "rank_proto.h"
#include "test.h"

/* ---- a value per type, from a seed, and its comparison ---------------------- */

static char words[64][40];

static void fill_u(uint32_t *v, unsigned k)
{
	*v = k % 3 == 0 ? UINT32_MAX - k : k * 7919u;
}
static void fill_U(uint64_t *v, unsigned k)
{
	*v = k % 3 == 0 ? UINT64_MAX - k : (uint64_t)k << 40 | k;
}
static void fill_i(int32_t *v, unsigned k)
{
	*v = k % 3 == 0 ? INT32_MIN + (int32_t)k : -(int32_t)k * 3;
}
static void fill_I(int64_t *v, unsigned k)
{
	*v = k % 3 == 0 ? INT64_MIN + k : -1 - (int64_t)k;
}
static void fill_x(uint64_t *v, unsigned k)
{
	*v = k % 3 == 0 ? UINT64_MAX : k % 3 == 1 ? 0 : 0x1234abcdull * k;
}
static void fill_y(uint8_t *v, unsigned k)
{
	*v = (uint8_t)(k % PBOX_DTYPE_COUNT);
}
static void fill_a(uint32_t *v, unsigned k)
{
	*v = htonl(0xc6120000u | k); /* 198.18.0.0/15 */
}
static void fill_p(uint16_t *v, unsigned k)
{
	*v = (uint16_t)(k % 2 ? 65535 : 1 + k);
}
static void fill_e(struct rp_addr *v, unsigned k)
{
	fill_a(&v->ip_be, k);
	fill_p(&v->port, k + 1);
}
static void fill_w(const char **v, unsigned k)
{
	snprintf(words[k % 64], sizeof(words[0]), "w%u,%x-=:%u", k, k * 31, k);
	*v = words[k % 64];
}
static void fill_t(const char **v, unsigned k)
{
	snprintf(words[k % 64], sizeof(words[0]), "text %u with spaces, = and : ", k);
	*v = words[k % 64];
}

#define FILL(s, name, T) fill_##T((void *)&m->s.name, k++);
#define SAME(s, name, T)                                                                           \
	ck_assert_msg(same_##T(&a->s.name, &b->s.name), "%s: field %s changed", #s, #name);

static bool same_u(const uint32_t *a, const uint32_t *b)
{
	return *a == *b;
}
static bool same_U(const uint64_t *a, const uint64_t *b)
{
	return *a == *b;
}
static bool same_i(const int32_t *a, const int32_t *b)
{
	return *a == *b;
}
static bool same_I(const int64_t *a, const int64_t *b)
{
	return *a == *b;
}
#define same_x same_U
static bool same_y(const uint8_t *a, const uint8_t *b)
{
	return *a == *b;
}
#define same_a same_u
static bool same_p(const uint16_t *a, const uint16_t *b)
{
	return *a == *b;
}
static bool same_e(const struct rp_addr *a, const struct rp_addr *b)
{
	return a->ip_be == b->ip_be && a->port == b->port;
}
static bool same_w(const char *const *a, const char *const *b)
{
	return strcmp(*a, *b) == 0;
}
#define same_t same_w

/* Message @v with every field from seed @k. */
static void fill(struct rp_msg *m, enum rp_verb v, unsigned k)
{
	memset(m, 0, sizeof(*m));
	m->verb = v;
	switch (v) {
#define CASE(V, mm, F)                                                                             \
	case RP_##V:                                                                               \
		F(FILL, mm) break;
		RP_VERBS(CASE)
#undef CASE
	default:
		break;
	}
}

static void same(const struct rp_msg *a, const struct rp_msg *b)
{
	ck_assert_int_eq(a->verb, b->verb);
	switch (a->verb) {
#define CASE(V, mm, F)                                                                             \
	case RP_##V:                                                                               \
		F(SAME, mm) break;
		RP_VERBS(CASE)
#undef CASE
	default:
		break;
	}
}

/* Each verb's fields, by name and type, as the table has them. */
struct field {
	const char *name;
	char type;
};
#define NAME(s, name, T) {#name, #T[0]},
#define LIST(V, mm, F)	 static const struct field fields_##mm[] = {F(NAME, mm){NULL, 0}};
RP_VERBS(LIST)
#undef LIST
static const struct field *const fields_of[RP_VERB_COUNT] = {
#define ROW(V, mm, F) [RP_##V] = fields_##mm,
	RP_VERBS(ROW)
#undef ROW
};

/* ---- every verb, both ways ------------------------------------------------------ */

START_TEST(test_rp_round_trip)
{
	for (unsigned k = 0; k < 6; k++) {
		struct rp_msg m, back;
		char line[RP_LINE_MAX], err[160];
		int n;

		fill(&m, (enum rp_verb)_i, 1 + k * 17);
		n = rp_format(line, sizeof(line), &m);
		ck_assert_msg(n > 0, "%s: not formatted", rp_verb_name(m.verb));
		ck_assert_uint_eq(strlen(line), (size_t)n);
		ck_assert_ptr_null(strchr(line, '\n'));
		ck_assert_msg(rp_parse(line, &back, err, sizeof(err)) == 0, "%s: %s",
			      rp_verb_name(m.verb), err);
		same(&m, &back);
		ck_assert_int_eq(rp_format(line, sizeof(line), &back), n); /* the same line again */
	}
}
END_TEST

/* Line @line of verb @v with field @f's value replaced by @val (NULL: the
 * field left out) into @out. */
static void with_field(const struct rp_msg *m, unsigned f, const char *val, char *out, size_t cap)
{
	char line[RP_LINE_MAX], *p, *end;
	const struct field *fl = fields_of[m->verb];
	char pat[40];

	ck_assert_int_gt(rp_format(line, sizeof(line), m), 0);
	snprintf(pat, sizeof(pat), " %s=", fl[f].name);
	p = strstr(line, pat);
	ck_assert_ptr_nonnull(p);
	end = fl[f].type == 't' ? p + strlen(p) : strchr(p + 1, ' ');
	if (!end)
		end = p + strlen(p);
	if (val)
		snprintf(out, cap, "%.*s%s%s%s", (int)(p - line), line, pat, val, end);
	else
		snprintf(out, cap, "%.*s%s", (int)(p - line), line, end);
}

/* A value no field of type @t takes (several per type). */
static const char *const bad_of[][5] = {
	['u'] = {"", "-1", "4294967296", "12a", "+5"},
	['U'] = {"", "-1", "18446744073709551616", "0x10", " 1"},
	['i'] = {"", "2147483648", "-2147483649", "--1", "1.5"},
	['I'] = {"", "9223372036854775808", "-9223372036854775809", "-", "1e3"},
	['x'] = {"", "0x", "12", "0x10000000000000000", "0xg"},
	['y'] = {"", "fp64", "FP32", "f", "int8"},
	['a'] = {"", "198.18.0", "198.18.0.256", "host", "::1"},
	['p'] = {"", "0", "65536", "-1", "80x"},
	['e'] = {"", "198.18.0.1", "198.18.0.1:0", "198.18.0.1:65536", "x:1"},
	['w'] = {"", "ab\rcd", "ab\r", NULL, NULL}, /* a line break: refused (make fuzz) */
	['t'] = {NULL, NULL, NULL, NULL, NULL},
};

START_TEST(test_rp_refusals_name_the_field)
{
	const enum rp_verb v = (enum rp_verb)_i;
	const struct field *fl = fields_of[v];
	struct rp_msg m, back;
	char line[RP_LINE_MAX], err[200];

	fill(&m, v, 5);
	for (unsigned f = 0; fl[f].name; f++) {
		char want[40];

		snprintf(want, sizeof(want), "%s", fl[f].name);
		with_field(&m, f, NULL, line, sizeof(line)); /* left out */
		ck_assert_msg(rp_parse(line, &back, err, sizeof(err)) == -1, "%s without %s taken",
			      rp_verb_name(v), fl[f].name);
		ck_assert_msg(strstr(err, want) && strstr(err, rp_verb_name(v)), "'%s' for '%s'",
			      err, line);
		for (unsigned b = 0; b < 5; b++) {
			const char *bad = bad_of[(unsigned char)fl[f].type][b];

			if (!bad)
				continue;
			with_field(&m, f, bad, line, sizeof(line));
			ck_assert_msg(rp_parse(line, &back, err, sizeof(err)) == -1, "%s taken",
				      line);
			ck_assert_msg(strstr(err, want), "'%s' for '%s'", err, line);
		}
	}
	/* trailing text, an unknown field in front, the verb misspelt */
	ck_assert_int_gt(rp_format(line, sizeof(line), &m), 0);
	{
		const struct field *last = fl;

		while (last->name && last[1].name)
			last++;
		if (last->type != 't') { /* text takes the rest of the line */
			char more[RP_LINE_MAX + 8];

			snprintf(more, sizeof(more), "%s extra=1", line);
			ck_assert_int_eq(rp_parse(more, &back, err, sizeof(err)), -1);
			ck_assert_ptr_nonnull(strstr(err, "after its last field"));
		}
	}
	{
		char lower[RP_LINE_MAX];

		snprintf(lower, sizeof(lower), "%sX%s", rp_verb_name(v),
			 line + strlen(rp_verb_name(v)));
		ck_assert_int_eq(rp_parse(lower, &back, err, sizeof(err)), -1);
		ck_assert_ptr_nonnull(strstr(err, "unknown verb"));
	}
}
END_TEST

/* ---- the edges ------------------------------------------------------------------------ */

START_TEST(test_rp_text_and_words)
{
	struct rp_msg m = {.verb = RP_FAIL, .fail = {.origin = 3, .code = -7}}, back;
	char line[RP_LINE_MAX], big[3 * RP_TEXT_MAX], err[160], small[30];

	/* text: spaces kept, cut at a newline and to RP_TEXT_MAX, and to fit */
	m.fail.why = "rank 3 lost the box\nFAIL origin=0 code=0 why=forged";
	ck_assert_int_gt(rp_format(line, sizeof(line), &m), 0);
	ck_assert_str_eq(line, "FAIL origin=3 code=-7 why=rank 3 lost the box");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), 0);
	ck_assert_str_eq(back.fail.why, "rank 3 lost the box");
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	m.fail.why = big;
	ck_assert_int_gt(rp_format(line, sizeof(line), &m), 0);
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), 0);
	ck_assert_uint_eq(strlen(back.fail.why), RP_TEXT_MAX);
	ck_assert_int_eq(rp_format(small, 24, &m), -1); /* not even why= fits */
	ck_assert_int_eq(rp_format(small, sizeof(small), &m), 29);
	ck_assert_str_eq(small, "FAIL origin=3 code=-7 why=aaa");
	m.fail.why = "";
	ck_assert_int_gt(rp_format(line, sizeof(line), &m), 0);
	ck_assert_str_eq(line, "FAIL origin=3 code=-7 why=");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), 0);
	ck_assert_str_eq(back.fail.why, "");
	/* a word: never empty, never a space */
	m = (struct rp_msg){.verb = RP_JOINED, .joined = {.job = 1, .token = "ab cd"}};
	ck_assert_int_eq(rp_format(line, sizeof(line), &m), -1);
	m.joined.token = "";
	ck_assert_int_eq(rp_format(line, sizeof(line), &m), -1);
	m.joined.token = NULL;
	ck_assert_int_eq(rp_format(line, sizeof(line), &m), -1);
	/* fields out of order, twice, or a bare verb with a space */
	strcpy(line, "GREW to=2 from=1");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), -1);
	ck_assert_ptr_nonnull(strstr(err, "no from="));
	strcpy(line, "GREW from=1 from=1");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), -1);
	strcpy(line, "HB ");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), -1);
	strcpy(line, "GREW from=1  to=2");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), -1);
	strcpy(line, "");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), -1);
	strcpy(line, "HB");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), 0);
	ck_assert_int_eq(back.verb, RP_HB);
	/* a refusal quotes only printable bytes */
	strcpy(line, "\x01\x7f\x1b[2J");
	ck_assert_int_eq(rp_parse(line, &back, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "unknown verb '???[2J'");
	/* rp_expect */
	strcpy(line, "BYE");
	ck_assert_int_eq(rp_expect(line, RP_END, &back, err, sizeof(err)), -1);
	ck_assert_str_eq(err, "BYE where END was due");
	m = (struct rp_msg){.verb = 99};
	ck_assert_int_eq(rp_format(line, sizeof(line), &m), -1);
	ck_assert_str_eq(rp_verb_name(99), "?");
}
END_TEST

START_TEST(test_rp_rank_lists)
{
	bool gone[8] = {false}, back[8] = {false};
	char list[16];

	rp_ranks_format(list, sizeof(list), NULL, 0);
	ck_assert_str_eq(list, "-");
	rp_ranks_format(list, sizeof(list), gone, 8);
	ck_assert_str_eq(list, "-");
	gone[1] = gone[5] = gone[7] = true;
	rp_ranks_format(list, sizeof(list), gone, 8);
	ck_assert_str_eq(list, "1,5,7");
	ck_assert_int_eq(rp_ranks_parse(list, back, 8), 0);
	ck_assert_int_eq(memcmp(gone, back, sizeof(gone)), 0);
	rp_ranks_format(list, 5, gone, 8); /* what fits */
	ck_assert_str_eq(list, "1,5");
	ck_assert_int_eq(rp_ranks_parse("-", back, 8), 0);
	ck_assert_int_eq(rp_ranks_parse("3,900", back, 8), 0); /* past the world: ignored */
	ck_assert(back[3]);
	ck_assert_int_eq(rp_ranks_parse("", back, 8), -1);
	ck_assert_int_eq(rp_ranks_parse("1,", back, 8), -1);
	ck_assert_int_eq(rp_ranks_parse("1,,2", back, 8), -1);
	ck_assert_int_eq(rp_ranks_parse("a", back, 8), -1);
	ck_assert_int_eq(rp_ranks_parse("-1", back, 8), -1);
	ck_assert_int_eq(rp_ranks_parse("99999999999", back, 8), -1);
}
END_TEST

Suite *rank_proto_suite(void)
{
	Suite *s = suite_create("rank_proto");
	TCase *tc = tcase_create("codec");

	tcase_add_loop_test(tc, test_rp_round_trip, 0, RP_VERB_COUNT);
	tcase_add_loop_test(tc, test_rp_refusals_name_the_field, 0, RP_VERB_COUNT);
	tcase_add_test(tc, test_rp_text_and_words);
	tcase_add_test(tc, test_rp_rank_lists);
	suite_add_tcase(s, tc);
	return s;
}
