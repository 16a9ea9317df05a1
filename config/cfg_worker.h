/* SPDX-License-Identifier: BSD-3-Clause */
/* The worker (libpbox) configuration: schema in cfg_worker.c. */
#ifndef PBOX_CFG_WORKER_H
#define PBOX_CFG_WORKER_H

#include "cfg.h"

#define WRK_MAX_WORKERS 1024

enum wrk_transport { WRK_TRANSPORT_UDP, WRK_TRANSPORT_DPDK };
enum wrk_local { WRK_LOCAL_AUTO, WRK_LOCAL_ON, WRK_LOCAL_OFF };
enum wrk_local_cuda { WRK_LOCAL_CUDA_IPC, WRK_LOCAL_CUDA_HOST };

struct wrk_cfg {
	struct {
		uint32_t rank;
		uint32_t world_size;
		unsigned local_aggregation; /* enum wrk_local */
		unsigned local_cuda;	    /* enum wrk_local_cuda */
	} worker;
	struct {
		uint32_t id;
		uint64_t token;
		unsigned mac;		  /* enum nic_mac_mode: cfg_mac_names[mac] */
		unsigned compression;	  /* enum comp_scheme: cfg_comp_names[compression] */
		uint32_t compression_ppm; /* topk, randk: the rate */
		unsigned compression_sum; /* 0: by the summation services; 1: by all-gather */
		bool deterministic;	  /* sums in rank order (ss_job_desc.in_order) */
		bool leader_order;	  /* rank 0 orders every rank's sends (flow.c) */
		uint32_t staleness;	  /* async stores: ss_job_desc.staleness */
	} job;
	struct {
		struct cfg_hostports control; /* the boxes; none: k = 0 */
		char key_file[256];
	} box;
	struct {
		struct cfg_hostport address; /* unset: a static [job] and [peers] */
		char secret[128];	     /* "": JOINs prove nothing */
	} rendezvous;
	struct {
		struct cfg_ipv4 address; /* 0 with a rendezvous: the route's */
		uint32_t port;		 /* 0 with a rendezvous: a free one */
		uint64_t bandwidth_mbps;
		uint32_t mtu;
	} data;
	struct {
		uint64_t partition_size;
		uint64_t chunk_size;
		uint64_t credit_bytes;
		uint64_t retransmit_us;
		uint64_t deadline_us;
		uint64_t heartbeat_us;
		bool pacing;
		uint64_t pace_burst; /* bytes; the burst is at least 500 us of the line */
		bool autotune;
		uint32_t priority; /* SCHED_FIFO priority of the progress thread; 0: none */
		unsigned layout;   /* enum lay_mode: cfg_layout_names[layout] */
	} tuning;
	struct {
		unsigned kind;
		char dpdk_port[160];
		char dpdk_lcores[64];
		char dpdk_args[256];
		bool gso;
	} transport;
	struct {
		unsigned level;
	} log;
	/* The SS_GPU endpoint of every rank ([peers] N = ip:port); the own
	 * entry is filled from [data] when not given. */
	struct cfg_hostport peers[WRK_MAX_WORKERS];
};

extern const struct cfg_schema wrk_cfg_schema;

/* Load, apply PBOX_* overrides from @envp (may be NULL), validate. */
int wrk_cfg_load(const char *path, char *const *envp, struct wrk_cfg *out, struct cfg_errors *errs);
int wrk_cfg_load_text(const char *name, const char *text, char *const *envp, struct wrk_cfg *out,
		      struct cfg_errors *errs);

/* [tuning] layout's names, in enum lay_mode's order (worker/layout.h), NULL-ended. */
extern const char *const cfg_layout_names[];
extern const char *const cfg_comp_names[];

#endif /* PBOX_CFG_WORKER_H */
