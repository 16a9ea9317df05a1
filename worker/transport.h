/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * How datagrams leave and arrive: one table of operations, chosen once when
 * pbox_start() opens the transport ([transport] kind), so that the engine
 * never branches on the transport per datagram. The kernel's UDP sockets
 * (engine.c) and the DPDK port (dpdk.c, the module pbox-3/dpdk.so) are the
 * two.
 *
 * A module sees no libpbox structure: it gets a struct wk_tp_env (what it
 * needs of the configuration, libpbox's functions, and libpbox's context
 * as an opaque pointer), checked by version and size, and hands back its
 * operations with its own state, which libpbox passes back opaque. As
 * NCCL's ext-net plugins do: libpbox's internals change without
 * rebuilding a module, and a module of another interface is refused with
 * both versions named.
 */
#ifndef PBOX_WORKER_TRANSPORT_H
#define PBOX_WORKER_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nic_wire.h"

/* Bump on any change below (a module of another version is refused). */
#define WK_TP_VERSION 1u

struct sockaddr_in;

/* A received datagram (pbox header first) for libpbox's context @ctx. */
typedef void wk_dgram_fn(void *ctx, void *arg, const uint8_t *b, size_t len,
			 const struct sockaddr_in *from, uint64_t now);

/* A transport's operations on its state @st: tx() queues one datagram
 * (header @h, @len bytes at @payload; @gso lets the transport join it to
 * the previous one for the same destination), flush() sends what is
 * queued, rx() hands what arrived to @fn with @arg (how many). */
struct wk_transport {
	void (*tx)(void *st, void *eng, uint32_t ip_be, uint16_t port, const struct pbox_hdr *h,
		   const void *payload, uint16_t len, bool gso);
	void (*flush)(void *st, void *eng);
	int (*rx)(void *st, wk_dgram_fn *fn, void *arg, uint64_t now);
	/* before the engine runs: what the transport must learn (a DPDK
	 * port: every unit's MAC); 0 or a PBOX_E* with the error set */
	int (*ready)(void *st, uint64_t wait_ns);
	void (*describe)(const void *st, char *buf, size_t cap);
	void (*close)(void *st);
	uint64_t nap_ns; /* no descriptor to sleep on: the longest nap; 0: poll() the socket */
	bool gso;	 /* UDP GSO and GRO may be used */
};

/* What libpbox gives a transport module. */
struct wk_tp_env {
	uint32_t version; /* WK_TP_VERSION */
	uint32_t size;	  /* sizeof(struct wk_tp_env) */
	void *ctx;	  /* libpbox's context: passed back, never looked into */
	/* the configuration it needs */
	uint32_t rank;
	uint32_t mtu;
	uint32_t ip_be; /* [data] address and port: ours */
	uint16_t port;
	unsigned log_level;
	const char *dpdk_port, *dpdk_args, *dpdk_lcores; /* [transport] */
	/* libpbox's functions */
	int (*err)(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	void (*log)(const void *ctx, unsigned level, const char *fmt, ...)
		__attribute__((format(printf, 3, 4)));
	uint64_t (*now)(void);
	/* the summation services this rank addresses (after the bootstrap) */
	uint32_t (*n_units)(const void *ctx);
	uint32_t (*self_unit)(const void *ctx);
	uint32_t (*unit_ip)(const void *ctx, uint32_t u);
	const char *(*unit_name)(const void *ctx, uint32_t u);
	uint32_t (*unit_of)(const void *ctx, uint32_t ip_be, uint16_t port);
	/* frames the transport dropped on send (counted in the stats) */
	void (*dropped)(void *ctx, uint64_t frames);
};

/* The DPDK transport module's entry (dpdk.c): opens the port ([transport]
 * dpdk_port); its operations and state into @tp and @st. 0, or a PBOX_E*
 * with the error set through @env->err. */
typedef int wk_tp_open_fn(const struct wk_tp_env *env, const struct wk_transport **tp, void **st);
#define WK_DPDK_ENTRY "pbox_module_dpdk_open"

#endif /* PBOX_WORKER_TRANSPORT_H */
