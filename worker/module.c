/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libpbox's modules: the parts a job may ask for that most hosts cannot
 * load (the DPDK transport needs DPDK's libraries, the CUDA stager the
 * CUDA runtime), kept out of libpbox.so so that the library itself loads on
 * any host: a GPU machine without DPDK, a CPU machine without CUDA.
 *
 * A module is "<dir>/<name>.so", <dir> being $PBOX_MODULE_DIR or the
 * directory "pbox-<major>" beside the file libpbox's code was loaded from
 * (build/lib/pbox-3 in a checkout, $(PREFIX)/lib/pbox-3 installed). It is
 * loaded on first use and stays loaded: DPDK's EAL, once up, cannot be torn
 * down and brought up again in one process.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_units.h"
#include "wk_module.h"

/* ---- what a transport module is given (transport.h) ---------------------- */

static void tp_log(const void *ctx, unsigned level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void tp_log(const void *ctx, unsigned level, const char *fmt, ...)
{
	const struct pbox *px = ctx;
	char msg[WK_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	wk_log(px, level, "%s", msg);
}

static uint32_t tp_n_units(const void *ctx)
{
	return ((const struct pbox *)ctx)->net.n_units;
}

static uint32_t tp_self_unit(const void *ctx)
{
	return ((const struct pbox *)ctx)->net.self_unit;
}

static uint32_t tp_unit_ip(const void *ctx, uint32_t u)
{
	return ((const struct pbox *)ctx)->net.unit[u].ip_be;
}

static const char *tp_unit_name(const void *ctx, uint32_t u)
{
	return ((const struct pbox *)ctx)->net.unit[u].name;
}

static uint32_t tp_unit_of(const void *ctx, uint32_t ip_be, uint16_t port)
{
	return wk_unit_of(ctx, ip_be, port);
}

/* engine thread: the transport's sends happen on it */
static void tp_dropped(void *ctx, uint64_t frames)
{
	((struct pbox *)ctx)->net.es.st.tx_dropped += frames;
}

void wk_tp_env_init(struct pbox *px, struct wk_tp_env *env)
{
	*env = (struct wk_tp_env){.version = WK_TP_VERSION,
				  .size = sizeof(*env),
				  .ctx = px,
				  .rank = px->net.rank,
				  .mtu = (uint32_t)px->cfg.data.mtu,
				  .ip_be = px->cfg.data.address.be,
				  .port = (uint16_t)px->cfg.data.port,
				  .log_level = px->cfg.log.level,
				  .dpdk_port = px->cfg.transport.dpdk_port,
				  .dpdk_args = px->cfg.transport.dpdk_args,
				  .dpdk_lcores = px->cfg.transport.dpdk_lcores,
				  .err = wk_err,
				  .log = tp_log,
				  .now = wk_now,
				  .n_units = tp_n_units,
				  .self_unit = tp_self_unit,
				  .unit_ip = tp_unit_ip,
				  .unit_name = tp_unit_name,
				  .unit_of = tp_unit_of,
				  .dropped = tp_dropped};
}

#define STR_(x) #x
#define STR(x)	STR_(x)

static int module_dir(char *buf, size_t cap)
{
	const char *env = getenv("PBOX_MODULE_DIR");
	Dl_info info;
	const char *slash;

	if (env && *env)
		return snprintf(buf, cap, "%s", env) < (int)cap ? 0 : -1;
	if (!dladdr((void *)module_dir, &info) || !info.dli_fname)
		return -1;
	slash = strrchr(info.dli_fname, '/');
	if (!slash)
		return snprintf(buf, cap, "pbox-" STR(PBOX_VERSION_MAJOR)) < (int)cap ? 0 : -1;
	return snprintf(buf, cap, "%.*s/pbox-" STR(PBOX_VERSION_MAJOR),
			(int)(slash - info.dli_fname), info.dli_fname) < (int)cap
		       ? 0
		       : -1;
}

void *wk_module_sym(const char *fn, const char *name, const char *sym)
{
	char dir[PATH_MAX], path[PATH_MAX + 64];
	void *h, *entry;

	if (module_dir(dir, sizeof(dir))) {
		wk_err(PBOX_ECONFIG,
		       "%s: cannot tell where libpbox's modules are: set PBOX_MODULE_DIR", fn);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s/%s.so", dir, name);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *why = dlerror();

		wk_err(PBOX_ECONFIG,
		       "%s: the %s module %s did not load (%s); it is built when %s is "
		       "installed, and found in PBOX_MODULE_DIR or pbox-" STR(
			       PBOX_VERSION_MAJOR) " beside libpbox",
		       fn, name, path, why ? why : "?",
		       strcmp(name, "dpdk") ? "nvcc (the CUDA toolkit)" : "DPDK (libdpdk-dev)");
		return NULL;
	}
	entry = dlsym(h, sym);
	if (!entry)
		wk_err(PBOX_ECONFIG, "%s: %s has no %s: a module from another build?", fn, path,
		       sym);
	return entry;
}
