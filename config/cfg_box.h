/* SPDX-License-Identifier: BSD-3-Clause */
/* The box (pboxd) configuration: schema in cfg_box.c, examples in examples/. */
#ifndef PBOX_CFG_BOX_H
#define PBOX_CFG_BOX_H

#include "cfg.h"

#define BOX_MAX_PORTS	32
#define BOX_MAX_WORKERS 1024 /* the contributor bitmap of a fragment */

enum box_poll_mode { BOX_POLL_BUSY, BOX_POLL_ADAPTIVE };

struct box_port_cfg {
	char name[CFG_INAME_LEN];
	char pci[32];	/* PCI address, or */
	char vdev[160]; /* a DPDK vdev string */
	struct cfg_ipv4 ip;
	struct cfg_mac gateway_mac; /* optional: send results here instead of to the sender */
	uint64_t bandwidth_mbps;
	uint32_t max_queues; /* 0 = as many as the device and flow steering allow */
};

struct box_cfg {
	struct {
		struct cfg_ipv4 address;
		uint32_t port;
		char key_file[256];
	} mgmt;
	struct {
		struct cfg_cores list;
	} cores;
	struct {
		uint64_t hugepage_budget;
	} memory;
	struct {
		uint64_t chunk_size;
		uint64_t fragment_size; /* resolved from mtu when "auto" */
		uint32_t mtu;
		uint32_t udp_port; /* queue q of a port listens on udp_port + q */
		uint32_t rx_desc, tx_desc;
	} data;
	struct {
		uint32_t jobs;
		uint32_t workers;
		uint64_t job_memory; /* resolved to the whole budget when "auto" */
	} limits;
	struct {
		unsigned mode;
		uint64_t idle_sleep_us;
		uint64_t idle_sleep_first_us; /* resolved to idle_sleep when "auto" */
		uint32_t idle_polls;
	} polling;
	struct {
		bool enabled;
		uint32_t metrics_port; /* 0: no Prometheus endpoint */
	} telemetry;
	struct {
		unsigned level;
	} log;
	unsigned n_ports;
	struct box_port_cfg port[BOX_MAX_PORTS];
};

extern const struct cfg_schema box_cfg_schema;

/* Load and validate; see cfg_load(). */
int box_cfg_load(const char *path, struct box_cfg *out, struct cfg_errors *errs);

#endif /* PBOX_CFG_BOX_H */
