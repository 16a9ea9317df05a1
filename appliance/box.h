/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pboxd internals shared by its files:
 *   box_lcore.c      the data path: one polling loop per data core
 *   box_ctl.c        the control plane: job registry, TCP requests, rings
 *   box_telemetry.c  /pbox/stats, /pbox/cores, /pbox/jobs
 *   pboxd.c          main(): the ordered bring-up and teardown
 *   nic/nic_port.c   DPDK ports: configure, queues, flow rules, link
 *
 * A data core touches only its struct box_lcore: its endpoints (port,
 * queue), their transmit buffers, its job table and its counters. The
 * control plane reaches it through two single-producer single-consumer rings
 * (requests in, replies out) that the core checks every BOX_CTL_EVERY loops;
 * it reads the core's counters without writing them.
 */
#ifndef PBOX_BOX_H
#define PBOX_BOX_H

#include <stdbool.h>
#include <stdint.h>

#include <rte_common.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "cfg_box.h"
#include "nic_wire.h"
#include "numa_plan.h"
#include "ss.h"

#define BOX_BURST     32
#define BOX_TX_MAX    512 /* frames queued per endpoint before a forced flush */
#define BOX_CTL_EVERY 64  /* loops between checks of the control ring */
#define BOX_RING_SIZE 64

/* Per-core counters beyond the jobs' own (struct ss_counters). */
#define BOX_FOREACH_CORE_CNT(_)                                                                    \
	_(rx_pkts, "frames received")                                                              \
	_(rx_bytes, "bytes received")                                                              \
	_(tx_pkts, "frames sent")                                                                  \
	_(tx_bytes, "bytes sent")                                                                  \
	_(tx_drops, "frames the NIC would not take")                                               \
	_(tx_nombuf, "frames not sent for want of an mbuf")                                        \
	_(tx_payload_copies, "result payloads copied per destination (0 with multi-segment tx)")   \
	_(results, "result frames sent (n per completed fragment round)")                          \
	_(answers, "results re-sent to one worker")                                                \
	_(errors_sent, "error replies sent")                                                       \
	_(acks_sent, "duplicate pushes and probes acknowledged")                                   \
	_(probes, "probes received (a worker's timer ran out)")                                    \
	_(nacks_sent, "probes answered with a NACK: the prober's push is not in")                  \
	_(dones_sent, "probes answered with a DONE: the round is complete, its result sent")       \
	_(needless, "retransmitted pushes the SS already had (duplicates, answered)")              \
	_(arp_replies, "ARP requests answered")                                                    \
	_(icmp_replies, "ICMP echo requests answered")                                             \
	_(foreign, "valid frames not for us (ARP for others, ICMP not echo)")                      \
	_(multiseg, "received frames in several segments (dropped)")                               \
	_(busy_cleanups, "tx completions reaped to free a result buffer")                          \
	_(busy_cycles, "TSC cycles in loops that received frames (cost per frame: / rx_pkts)")     \
	_(idle_sleeps, "adaptive polling naps")                                                    \
	_(ctl_msgs, "control requests handled")

struct box_core_stats {
#define BOX__CNT_FIELD(n, s) uint64_t n;
	BOX_FOREACH_CORE_CNT(BOX__CNT_FIELD)
#undef BOX__CNT_FIELD
	uint64_t nic_drop[NIC_DROP_COUNT];
	uint64_t ss_drop[SS_DROP_COUNT]; /* including pushes for unknown jobs */
	uint64_t summed, completed;	 /* also counted per job */
} __rte_cache_aligned;

/* One endpoint: a (port, queue) pair this core owns. */
struct box_ep {
	uint16_t port_id, queue;
	uint16_t n_tx;
	uint8_t port_idx; /* index in the configuration */
	bool multiseg;	  /* the port sends chained mbufs */
	bool gateway;	  /* results go to gw_mac, not to the sender's MAC */
	uint8_t gw_mac[6];
	uint32_t global; /* index in the box's endpoint list */
	struct nic_addr self;
	struct nic_wire_expect exp;
	struct rte_mbuf *tx[BOX_TX_MAX];
};

enum box_msg_type { BOX_MSG_ADD, BOX_MSG_GROW, BOX_MSG_DEL };

/* A control request; the core answers by returning it on its reply ring. */
struct box_msg {
	enum box_msg_type type;
	uint32_t job_id;
	struct ss_job *job; /* ADD: to install; DEL: the one removed */
	int rc;
};

struct box_lcore {
	/* accessed on the data path */
	unsigned n_eps;
	struct box_ep ep[NUMA_MAX_PORTS];
	struct rte_mempool *pool; /* the node's */
	struct ss_table jobs;
	struct rte_ring *req, *resp;
	bool adaptive;
	uint32_t idle_polls;
	uint32_t idle_sleep_us;	      /* the longest nap */
	uint32_t idle_sleep_first_us; /* the first after traffic, doubled at each */
	struct box_core_stats st;
	/* not accessed on the data path */
	unsigned lcore, cpu, node;
	bool active;
} __rte_cache_aligned;

/* Where the box's endpoint e lives, for the control plane. */
struct box_ep_ref {
	unsigned lcore, slot; /* owner and its index there */
	uint64_t weight_kbps;
};

struct box {
	const struct box_cfg *cfg;
	const struct numa_plan *plan;
	unsigned n_lcores;
	struct box_lcore *lc[RTE_MAX_LCORE];
	unsigned n_eps;
	struct box_ep_ref ep[NUMA_MAX_PORTS * NUMA_MAX_CORES];
	unsigned n_ports; /* for the ports' own counters (rte_eth_stats) */
	struct {
		uint16_t id;
		const char *name; /* the [port NAME] section */
	} port[BOX_MAX_PORTS];
	uint64_t node_budget[NUMA_MAX_NODES]; /* bytes of job state per node */
	int node_socket[NUMA_MAX_NODES];      /* OS node id, for rte_malloc_socket */
	volatile bool quit;		      /* control plane: stop serving (signals) */
	volatile bool stop;		      /* data cores: leave the loop (after quit) */
};

/* box_lcore.c: the data path */
int box_lcore_main(void *arg); /* rte_eal_remote_launch() target */
/* One pass of the loop: a burst from each endpoint, every frame handled,
 * queued frames sent. Returns the frames received. (Tests drive it.) */
unsigned box_lcore_poll(struct box_lcore *lc);
/* Push this core's queued frames out and reap transmit completions. */
void box_lcore_tx_reap(struct box_lcore *lc);

/* box_txref.c: the transmit reference of one result buffer, DPDK's shared
 * info of an external buffer. Its count is 1 (the job's) plus one per mbuf
 * in flight; the result buffer is reused only at 1. */
struct box_txref {
	struct rte_mbuf_ext_shared_info sh;
	rte_iova_t iova; /* of the buffer, looked up once at registration */
};
bool box_txref_busy(void *txref);	    /* on the owning core: reaps before saying yes */
bool box_txref_inflight(const void *txref); /* anywhere: read only */
size_t box_txref_size(void);
void box_txref_init(void *txref, struct box_lcore *lc, const void *buf);

/* box_ctl.c */
struct box_ctl;
/* @key: the box key ([management] key_file), copied */
struct box_ctl *box_ctl_create(struct box *b, const uint8_t key[NIC_KEY_LEN]);
void box_ctl_destroy(struct box_ctl *c);
/* Serve control connections until b->quit; returns 0 or -errno. */
int box_ctl_run(struct box_ctl *c);

/* box_stats.c: the counters as their readers (STATS, telemetry, metrics) see them */
enum box_stat_kind { BOX_STAT_CORE, BOX_STAT_NIC_DROP, BOX_STAT_SS_DROP };
struct box_stat_desc {
	const char *key;  /* STATS and telemetry key: "rx_pkts", "drop_ip_csum", "ss_dup" */
	const char *help; /* what it counts */
	enum box_stat_kind kind;
	const char *reason; /* drops: the reason alone ("ip_csum"); else NULL */
};
typedef void box_stat_fn(void *arg, const struct box_stat_desc *d, uint64_t value);
/* Every counter of @st, in one fixed order. */
void box_stats_visit(const struct box_core_stats *st, box_stat_fn *fn, void *arg);
/* Every active data core's counters summed into @tot. */
void box_stats_total(const struct box *b, struct box_core_stats *tot);

/* A registered job, for the readers: copied from the registry under its
 * lock (box_ctl_lock), valid until the lock is released. */
struct box_job_view {
	uint32_t id;
	uint16_t n;
	uint8_t dtype;
	uint32_t frag_size, chunk_size;
	uint64_t chunks, bytes;
	struct ss_job *const *per_lcore; /* RTE_MAX_LCORE entries, NULL where none */
};
/* @v's counters summed over the cores that serve it. */
void box_job_counters(const struct box_job_view *v, struct ss_counters *sum);

/* box_telemetry.c: /pbox/stats, /pbox/cores, /pbox/jobs on DPDK's socket */
int box_telemetry_register(struct box *b, struct box_ctl *c);

/* box_metrics.c: Prometheus text format over HTTP (libmicrohttpd) */
struct box_metrics;
/* Serve GET /metrics on [management] address:[telemetry] metrics_port from
 * a thread of libmicrohttpd's; NULL (and a message) when it cannot listen. */
struct box_metrics *box_metrics_start(struct box *b, struct box_ctl *c);
void box_metrics_stop(struct box_metrics *m);
/* The whole exposition into a malloc'd string (for tests and for GET). */
char *box_metrics_render(struct box *b, struct box_ctl *c, size_t *len);

/* box_ctl.c: the job registry, read under its lock */
void box_ctl_lock(struct box_ctl *c);
void box_ctl_unlock(struct box_ctl *c);
unsigned box_ctl_n_jobs(const struct box_ctl *c);
uint64_t box_ctl_used(const struct box_ctl *c, unsigned node);
/* The i-th registered job, i < box_ctl_n_jobs(). */
void box_ctl_job(const struct box_ctl *c, unsigned i, struct box_job_view *v);

#endif /* PBOX_BOX_H */
