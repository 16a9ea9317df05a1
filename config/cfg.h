/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Configuration engine: a schema is a table of section and key descriptors
 * (name, type, bounds, default, target offset), as in redis' config.c.
 *
 * A file is parsed with libinih into a zeroed staging struct, every value is
 * checked against its descriptor, the schema's cross-field validator runs,
 * and only when no error was found is the staging struct copied to the
 * caller's: nothing is ever half-applied. Every error reads "file:line:
 * message" (or "env NAME: message" for an environment override), and all of
 * them are collected, not only the first.
 *
 * Syntax accepted (inih, as packaged by Debian):
 *   [section]            one instance
 *   [port eth0]          a named instance of a repeated section
 *   key = value          ';' starts a comment anywhere, '#' at line start
 * Indented continuation lines are refused (they read as a silent append).
 */
#ifndef PBOX_CFG_H
#define PBOX_CFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CFG_MAX_CPUS   1024 /* CPU ids accepted in a core list */
#define CFG_MAX_ERRORS 32   /* errors kept per parse; the rest are counted */
#define CFG_MSG_LEN    256

enum cfg_type {
	CFG_UINT,      /* decimal integer, uint64_t or uint32_t by field size */
	CFG_SIZE,      /* bytes, with K/M/G/T (binary) suffix; uint64_t */
	CFG_RATE,      /* bits per second with K/M/G/T (decimal) suffix, kept in Mb/s */
	CFG_DURATION,  /* with us/ms/s suffix, kept in microseconds; uint64_t */
	CFG_BOOL,      /* true/false, yes/no, on/off, 1/0; bool */
	CFG_ENUM,      /* one of key->enums; unsigned int index */
	CFG_IPV4,      /* dotted quad; struct cfg_ipv4 */
	CFG_HOSTPORT,  /* a.b.c.d:port; struct cfg_hostport */
	CFG_HOSTPORTS, /* host:port, host:port, ...; struct cfg_hostports */
	CFG_MAC,       /* aa:bb:cc:dd:ee:ff; struct cfg_mac */
	CFG_STR,       /* printable, no spaces; char[key->size] */
	CFG_CORES,     /* "auto" or "0-3,8"; struct cfg_cores */
};

/* Key flags. */
#define CFG_REQUIRED 0x1u /* must be given (no default) */
#define CFG_POW2     0x2u /* numbers: must be a power of two */
#define CFG_AUTO     0x4u /* numbers: "auto" accepted, stored as 0 */
#define CFG_SPACES   0x8u /* strings: single spaces between words accepted */

enum cfg_log_level { CFG_LOG_ERROR, CFG_LOG_WARNING, CFG_LOG_INFO, CFG_LOG_DEBUG };

struct cfg_ipv4 {
	uint32_t be; /* network byte order; 0 = unset */
};

struct cfg_hostport {
	uint32_t ip_be; /* network byte order */
	uint16_t port;	/* host byte order; 0 = unset */
};

#define CFG_MAX_HOSTPORTS 8
struct cfg_hostports {
	uint32_t n; /* 0 = unset */
	struct cfg_hostport hp[CFG_MAX_HOSTPORTS];
};

struct cfg_mac {
	uint8_t b[6];
	bool set;
};

struct cfg_cores {
	bool autosel;
	uint64_t mask[CFG_MAX_CPUS / 64];
};

struct cfg_key {
	const char *name;
	enum cfg_type type;
	unsigned flags;
	uint64_t min, max;	  /* numbers, in the stored unit */
	const char *def;	  /* default as text; NULL = none (zero/unset) */
	size_t off;		  /* ONE: offset in the config; MANY/INDEXED: in the element */
	size_t size;		  /* sizeof the field */
	const char *const *enums; /* CFG_ENUM: NULL-terminated */
	const char *help;
};

/* A key descriptor for field @fld of struct type @st. */
#define CFG_KEY(st, fld, nm, ty, fl, lo, hi, d, h)                                                 \
	{                                                                                          \
		.name = (nm), .type = (ty), .flags = (fl), .min = (lo), .max = (hi), .def = (d),   \
		.off = offsetof(st, fld), .size = sizeof(((st *)0)->fld), .help = (h)              \
	}
#define CFG_KEY_ENUM(st, fld, nm, names, d, h)                                                     \
	{                                                                                          \
		.name = (nm), .type = CFG_ENUM, .def = (d), .off = offsetof(st, fld),              \
		.size = sizeof(((st *)0)->fld), .enums = (names), .help = (h)                      \
	}
#define CFG_NKEYS(a) ((unsigned)(sizeof(a) / sizeof((a)[0])))

enum cfg_sec_kind {
	CFG_SEC_ONE,	 /* [name] */
	CFG_SEC_MANY,	 /* [name INSTANCE], up to max instances */
	CFG_SEC_INDEXED, /* [name] whose keys are 0..max-1, all of keys[0]'s type */
};

struct cfg_section {
	const char *name;
	enum cfg_sec_kind kind;
	unsigned flags; /* CFG_REQUIRED: the section (or one instance) must exist */
	const struct cfg_key *keys;
	unsigned n_keys;
	size_t off;	  /* MANY/INDEXED: element 0 of the array (ONE: unused, its
			     keys hold offsets into the whole config struct) */
	size_t elem_size; /* MANY/INDEXED: array stride */
	unsigned max;	  /* MANY/INDEXED: array capacity */
	size_t count_off; /* MANY: unsigned instance count */
	size_t iname_off; /* MANY: char[CFG_INAME_LEN] instance name in the element */
	const char *help;
};

#define CFG_INAME_LEN 32

struct cfg_errors {
	unsigned n; /* errors recorded (may exceed CFG_MAX_ERRORS) */
	char msg[CFG_MAX_ERRORS][CFG_MSG_LEN];
};

struct cfg_ctx;

struct cfg_schema {
	const char *what;	/* "pboxd", "worker": for messages */
	const char *env_prefix; /* "PBOX_" to enable overrides, or NULL */
	/* pairs (PBOX_* name that is not a config key, what it does), NULL-ended */
	const char *const *env_ignore;
	/* pairs (short name, the key's variable), NULL-ended: one thing, two
	 * names; both set with different values is an error naming both */
	const char *const *env_alias;
	const struct cfg_section *sections;
	unsigned n_sections;
	size_t size; /* sizeof the whole config struct */
	/* Cross-field checks and derived values; report with cfg_error_at(). */
	void (*validate)(struct cfg_ctx *ctx, void *cfg);
};

/*
 * Parse @path into @out according to @schema, then apply PBOX_* overrides
 * from @envp (NULL-terminated, may be NULL). Returns 0 and fills @out, or
 * -EINVAL with @errs filled and @out untouched; -errno when the file cannot
 * be read (also described in @errs).
 */
int cfg_load(const struct cfg_schema *schema, const char *path, char *const *envp, void *out,
	     struct cfg_errors *errs);
/* The same from @text in memory (an INI file's contents), named @name in
 * its messages ("name:LINE: ..."); nothing is written anywhere. */
int cfg_load_text(const struct cfg_schema *schema, const char *name, const char *text,
		  char *const *envp, void *out, struct cfg_errors *errs);

/* Print every key with its effective value and where it came from. The
 * output parses back to the same configuration. */
void cfg_print(const struct cfg_schema *schema, const void *cfg, FILE *f);

/* Print the schema as a Markdown key reference (config/REFERENCE.md). */
void cfg_print_reference(const struct cfg_schema *schema, FILE *f);

/* A command line's values, read as the configuration reads them. @type:
 * CFG_UINT, CFG_SIZE, CFG_RATE or CFG_DURATION (kept in the same unit as a
 * key of that type). Each returns NULL, or what is wrong ("has an unknown
 * unit") to follow the option's name; @out is written only on success. */
const char *cfg_parse_num(enum cfg_type type, const char *s, uint64_t *out);
const char *cfg_parse_hostport(const char *s, struct cfg_hostport *out);

/* Print all errors, one per line, and a count of those not kept. */
void cfg_errors_print(const struct cfg_errors *errs, FILE *f);

/* For validators: report an error at the line where a key was set (or the
 * section's line, or the file's end when it was never set). @inst is the
 * instance index of a MANY/INDEXED section, else 0. @key may be NULL. */
void cfg_error_at(struct cfg_ctx *ctx, const char *section, unsigned inst, const char *key,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Core list helpers. */
static inline bool cfg_cores_has(const struct cfg_cores *c, unsigned cpu)
{
	return cpu < CFG_MAX_CPUS && (c->mask[cpu / 64] >> (cpu % 64) & 1u);
}
unsigned cfg_cores_count(const struct cfg_cores *c);

/* Names of enum cfg_log_level, for the [log] level key of both schemas. */
extern const char *const cfg_log_levels[];

/* Value formatters, shared by cfg_print and by programs that log settings. */
void cfg_fmt_size(char *buf, size_t len, uint64_t bytes);
void cfg_fmt_rate(char *buf, size_t len, uint64_t mbps);
void cfg_fmt_ipv4(char *buf, size_t len, uint32_t be);

#endif /* PBOX_CFG_H */
