/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * pboxd: the box's summation service.
 *
 *   pboxd [--file-prefix P] FILE [-- EAL...]
 *                               serve: take the configured ports, plan the
 *                               cores, run until SIGINT or SIGTERM
 *   pboxd --check-config FILE   print the effective configuration, or every
 *                               error as file:line: message (exit 1)
 *   pboxd --plan FILE           also discover this machine and print where
 *                               each port queue, core and pool would go
 *   pboxd --config-reference    every key, as config/REFERENCE.md holds them
 *
 * Exit status: 0 success, 1 bad configuration, plan or start, 2 bad usage.
 *
 * Serving, main() reads as the ordered list it is: configuration, placement
 * from numa/, EAL (its lcores are the planned CPUs), signals, ports probed,
 * the plan redone with what they can do, mbuf pools per node, ports set up
 * and steered, link check, per-core state, control plane and telemetry,
 * lcores launched, serve, then the same in reverse.
 */
#include <errno.h>
#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <sodium.h>

#include "box.h"
#include "cfg_box.h"
#include "nic_ctl.h"
#include "nic_port.h"
#include "numa_plan.h"
#include "numa_topo.h"
#include "sum.h"

#define MBUF_STRUCT	128 /* struct rte_mbuf */
#define MBUF_HEADROOM	128 /* RTE_PKTMBUF_HEADROOM */
#define MEMPOOL_OBJ_HDR 64

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pboxd [--file-prefix P] FILE [-- EAL options]\n"
		"       pboxd --check-config FILE\n"
		"       pboxd --plan FILE\n"
		"  FILE                 serve with this configuration until SIGINT/SIGTERM\n"
		"  --file-prefix P      DPDK runtime prefix (default pboxd): pboxctl --prefix P\n"
		"  --check-config FILE  validate FILE and print the effective configuration\n"
		"  --plan FILE          validate FILE and print this machine's placement plan\n"
		"  --config-reference   print every configuration key (Markdown)\n");
}

static int load(const char *path, struct box_cfg *cfg)
{
	struct cfg_errors errs;

	if (box_cfg_load(path, cfg, &errs) == 0)
		return 0;
	cfg_errors_print(&errs, stderr);
	fprintf(stderr, "pboxd: %s: %u error%s\n", path, errs.n, errs.n == 1 ? "" : "s");
	return -1;
}

/* Planner input from the configuration and this machine. Until the port
 * layer probes devices, PCI ports are assumed to steer flows (max_queues
 * auto = unlimited) and virtual devices to have one queue. */
static int plan_input(const struct box_cfg *cfg, const struct numa_topo *topo,
		      struct numa_plan_in *in)
{
	unsigned i;

	memset(in, 0, sizeof(*in));
	in->topo = topo;
	in->cores = cfg->cores.list;
	in->n_ports = cfg->n_ports;
	in->hugepage_budget = cfg->memory.hugepage_budget;
	in->rx_desc = cfg->data.rx_desc;
	in->tx_desc = cfg->data.tx_desc;
	in->burst = BOX_BURST;
	in->mbuf_bytes = MBUF_STRUCT + MBUF_HEADROOM + MEMPOOL_OBJ_HDR +
			 ((cfg->data.mtu + 18 + 63) / 64) * 64;
	for (i = 0; i < cfg->n_ports; i++) {
		const struct box_port_cfg *p = &cfg->port[i];
		struct numa_port_in *pi = &in->port[i];

		memcpy(pi->name, p->name, sizeof(pi->name));
		pi->mbps = p->bandwidth_mbps;
		pi->max_queues = p->max_queues ? p->max_queues : (p->pci[0] ? 0 : 1);
		pi->node = -1;
		if (p->pci[0]) {
			int node = numa_pci_node("/sys", p->pci);

			if (node == -ENOENT) {
				fprintf(stderr,
					"pboxd: [port %s] pci: no device %s on this machine\n",
					p->name, p->pci);
				return -1;
			}
			pi->node = node;
		}
	}
	return 0;
}

static int show_plan(const struct box_cfg *cfg)
{
	struct numa_topo *topo = malloc(sizeof(*topo));
	struct numa_plan *plan = malloc(sizeof(*plan));
	struct numa_plan_in in;
	int rc = -1, err;

	if (!topo || !plan) {
		fprintf(stderr, "pboxd: out of memory\n");
		goto out;
	}
	err = numa_topo_discover(topo);
	if (err) {
		fprintf(stderr, "pboxd: cannot discover the NUMA topology: %s\n", strerror(-err));
		goto out;
	}
	if (plan_input(cfg, topo, &in))
		goto out;
	if (numa_plan_build(&in, plan)) {
		fprintf(stderr, "pboxd: placement: %s\n", plan->error);
		goto out;
	}
	printf("machine: %u NUMA node%s, %u usable CPUs; summation kernels: %s\n", topo->n_nodes,
	       topo->n_nodes == 1 ? "" : "s", numa_topo_cpus(topo, -1), sum_ops_best()->name);
	numa_plan_print(plan, &in, stdout);
	rc = 0;
out:
	free(plan);
	free(topo);
	return rc;
}

/* ---- serving ---------------------------------------------------------------- */

static struct box *the_box;

static void on_signal(int sig)
{
	(void)sig;
	if (the_box)
		the_box->quit = true; /* the control loop notices within 100 ms */
}

/* Everything serving owns, released by teardown() in reverse. */
struct serve {
	struct box_cfg *cfg;
	struct numa_topo topo;
	struct numa_plan_in in;
	struct numa_plan plan;
	struct box box;
	struct nic_port port[BOX_MAX_PORTS];
	struct rte_mempool *rx_pool[NUMA_MAX_NODES], *hdr_pool[NUMA_MAX_NODES];
	struct box_ctl *ctl;
	struct box_metrics *metrics;
	bool eal, launched;
	unsigned lcore_cpu[RTE_MAX_LCORE];
	uint8_t key[NIC_KEY_LEN]; /* the box key, read once; the control plane's */
};

static const char *const eal_log_level[] = {"4", "5", "6", "8"}; /* by cfg_log_level */

/* EAL arguments: lcore 0 (main, control plane) on the control CPU, lcore
 * k + 1 on data core k, the ports, then whatever followed "--". */
static int eal_args(struct serve *s, const char *prefix, int n_extra, char **extra, char **argv,
		    char *store, size_t cap)
{
	const struct box_cfg *cfg = s->cfg;
	int argc = 0;
	size_t used = 0;
	unsigned i;
	bool pci = false;

#define ARG(...)                                                                                   \
	do {                                                                                       \
		int n_ = snprintf(store + used, cap - used, __VA_ARGS__);                          \
		if (n_ < 0 || (size_t)n_ >= cap - used || argc > 250)                              \
			return -1;                                                                 \
		argv[argc++] = store + used;                                                       \
		used += (size_t)n_ + 1;                                                            \
	} while (0)
	ARG("pboxd");
	{
		char lc[2048];
		size_t o = 0;

		o += (size_t)snprintf(lc, sizeof(lc), "0@%u", s->plan.control_cpu);
		for (i = 0; i < s->plan.n_cores && o < sizeof(lc); i++)
			o += (size_t)snprintf(lc + o, sizeof(lc) - o, ",%u@%u", i + 1,
					      s->plan.core[i].cpu);
		if (o >= sizeof(lc))
			return -1;
		ARG("--lcores=%s", lc);
	}
	ARG("--main-lcore=0");
	ARG("--file-prefix=%s", prefix);
	ARG("--log-level=%s", eal_log_level[cfg->log.level]);
	if (!cfg->telemetry.enabled)
		ARG("--no-telemetry");
	for (i = 0; i < cfg->n_ports; i++) {
		if (cfg->port[i].pci[0]) {
			ARG("-a");
			ARG("%s", cfg->port[i].pci);
			pci = true;
		} else {
			ARG("--vdev=%s", cfg->port[i].vdev);
		}
	}
	if (!pci)
		ARG("--no-pci");
	for (i = 0; i < (unsigned)n_extra; i++)
		ARG("%s", extra[i]);
#undef ARG
	argv[argc] = NULL;
	return argc;
}

static int make_plan(struct serve *s)
{
	if (numa_plan_build(&s->in, &s->plan)) {
		fprintf(stderr, "pboxd: placement: %s\n", s->plan.error);
		return -1;
	}
	return 0;
}

/* Pools of the nodes that serve ports: receive buffers at the MTU, and
 * small ones for result headers and the external-buffer mbufs that carry
 * result payloads by reference. */
static int make_pools(struct serve *s)
{
	unsigned n;
	char name[RTE_MEMPOOL_NAMESIZE];
	/* A frame at the MTU, rounded up, and 1 KB to spare for virtual devices
	 * that want the whole of their frame slot (net_af_packet framesz). */
	uint16_t room = (uint16_t)(RTE_PKTMBUF_HEADROOM +
				   RTE_ALIGN_CEIL(s->cfg->data.mtu + 18u, 1024u) + 1024);

	for (n = 0; n < s->plan.n_nodes; n++) {
		const struct numa_node_plan *np = &s->plan.node[n];
		int sock = s->topo.node_id[n];

		if (!np->pool_mbufs)
			continue;
		snprintf(name, sizeof(name), "pbox_rx_%u", n);
		s->rx_pool[n] = rte_pktmbuf_pool_create(name, (unsigned)np->pool_mbufs,
							NUMA_MEMPOOL_CACHE, 0, room, sock);
		snprintf(name, sizeof(name), "pbox_hdr_%u", n);
		s->hdr_pool[n] = rte_pktmbuf_pool_create(
			name, (unsigned)(2 * np->pool_mbufs + 8192), NUMA_MEMPOOL_CACHE, 0,
			RTE_PKTMBUF_HEADROOM + 128, sock);
		if (!s->rx_pool[n] || !s->hdr_pool[n]) {
			fprintf(stderr,
				"pboxd: node %d: cannot create mbuf pools (%" PRIu64
				" mbufs of %u bytes): %s\n",
				sock, np->pool_mbufs, room, rte_strerror(rte_errno));
			return -1;
		}
	}
	return 0;
}

/* Set up every port with its planned queues; where steering fails, that
 * port falls back to one queue (cores own it whole) and the plan is redone. */
static int setup_ports(struct serve *s)
{
	const struct box_cfg *cfg = s->cfg;
	char err[256];
	unsigned i, q, attempt;

	for (attempt = 0; attempt < 2; attempt++) {
		bool redo = false;

		for (i = 0; i < cfg->n_ports; i++) {
			struct nic_port *p = &s->port[i];
			struct rte_mempool *pools[1024];
			unsigned nq = s->plan.port_queues[i];

			for (q = 0; q < nq && q < 1024; q++)
				pools[q] = s->rx_pool[s->plan.port_node[i]];
			if (nic_port_setup(p, nq, cfg->data.mtu, cfg->data.rx_desc,
					   cfg->data.tx_desc, pools, err, sizeof(err))) {
				fprintf(stderr, "pboxd: %s\n", err);
				return -1;
			}
			if (nq > 1 &&
			    nic_port_steer(p, cfg->port[i].ip.be, (uint16_t)cfg->data.udp_port, err,
					   sizeof(err))) {
				fprintf(stderr, "pboxd: %s; cores will own the port whole\n", err);
				s->in.port[i].max_queues = 1;
				redo = true;
			}
		}
		if (!redo)
			return 0;
		for (i = 0; i < cfg->n_ports; i++)
			nic_port_stop(&s->port[i]);
		if (make_plan(s))
			return -1;
	}
	fprintf(stderr, "pboxd: ports: could not settle the queue layout\n");
	return -1;
}

static int make_lcores(struct serve *s)
{
	const struct box_cfg *cfg = s->cfg;
	struct box *b = &s->box;
	unsigned k, e, i, first[BOX_MAX_PORTS], g = 0;
	char name[RTE_RING_NAMESIZE];

	for (i = 0; i < cfg->n_ports; i++) {
		first[i] = g;
		g += s->plan.port_queues[i];
	}
	b->n_eps = g;
	for (k = 0; k < s->plan.n_cores; k++) {
		const struct numa_core_plan *cp = &s->plan.core[k];
		unsigned l = k + 1, node = cp->node;
		int sock = s->topo.node_id[node];
		struct box_lcore *lc =
			rte_zmalloc_socket("pbox_lcore", sizeof(*lc), RTE_CACHE_LINE_SIZE, sock);

		if (!lc) {
			fprintf(stderr, "pboxd: lcore %u: out of memory on node %d\n", l, sock);
			return -1;
		}
		b->lc[l] = lc;
		lc->lcore = l;
		lc->cpu = cp->cpu;
		lc->node = node;
		lc->pool = s->hdr_pool[node] ? s->hdr_pool[node] : s->rx_pool[node];
		lc->adaptive = cfg->polling.mode == BOX_POLL_ADAPTIVE;
		lc->idle_polls = cfg->polling.idle_polls;
		lc->idle_sleep_us = (uint32_t)cfg->polling.idle_sleep_us;
		lc->idle_sleep_first_us = (uint32_t)cfg->polling.idle_sleep_first_us;
		lc->n_eps = cp->n_eps;
		for (e = 0; e < cp->n_eps; e++) {
			const struct numa_ep *pe = &cp->ep[e];
			const struct box_port_cfg *pc = &cfg->port[pe->port];
			struct box_ep *ep = &lc->ep[e];
			uint16_t udp = (uint16_t)(cfg->data.udp_port + pe->queue);

			ep->port_id = s->port[pe->port].port_id;
			ep->queue = pe->queue;
			ep->port_idx = pe->port;
			ep->multiseg = s->port[pe->port].multiseg;
			ep->gateway = pc->gateway_mac.set;
			memcpy(ep->gw_mac, pc->gateway_mac.b, 6);
			memcpy(ep->self.mac, s->port[pe->port].mac, 6);
			ep->self.ip_be = pc->ip.be;
			ep->self.port = udp;
			ep->exp = (struct nic_wire_expect){
				.ip_be = pc->ip.be,
				.port_lo = udp,
				.port_hi = udp,
				.max_payload = (uint16_t)cfg->data.fragment_size,
				.accept_ops = PBOX_OPS_TO_SS};
			ep->global = first[pe->port] + pe->queue;
			b->ep[ep->global] = (struct box_ep_ref){
				.lcore = l, .slot = e, .weight_kbps = pe->weight_kbps};
		}
		snprintf(name, sizeof(name), "pbox_req_%u", l);
		lc->req = rte_ring_create(name, BOX_RING_SIZE, sock, RING_F_SP_ENQ | RING_F_SC_DEQ);
		snprintf(name, sizeof(name), "pbox_resp_%u", l);
		lc->resp =
			rte_ring_create(name, BOX_RING_SIZE, sock, RING_F_SP_ENQ | RING_F_SC_DEQ);
		if (!lc->req || !lc->resp) {
			fprintf(stderr, "pboxd: lcore %u: cannot create its rings: %s\n", l,
				rte_strerror(rte_errno));
			return -1;
		}
		lc->active = lc->n_eps > 0;
	}
	for (k = 0; k < s->plan.n_nodes; k++) {
		b->node_budget[k] = s->plan.node[k].state_bytes;
		b->node_socket[k] = s->topo.node_id[k];
	}
	return 0;
}

static void teardown(struct serve *s)
{
	unsigned i;

	box_metrics_stop(s->metrics); /* it reads the registry and the cores */
	if (s->ctl)
		box_ctl_destroy(s->ctl); /* jobs leave the cores, which still run */
	s->box.stop = true;
	if (s->launched)
		rte_eal_mp_wait_lcore();
	if (!s->eal)
		return;
	for (i = 0; i < s->cfg->n_ports; i++)
		if (s->port[i].dev[0] && s->port[i].port_id != UINT16_MAX)
			nic_port_close(&s->port[i]);
	for (i = 0; i < RTE_MAX_LCORE; i++) {
		struct box_lcore *lc = s->box.lc[i];

		if (!lc)
			continue;
		rte_ring_free(lc->req);
		rte_ring_free(lc->resp);
		rte_free(lc);
	}
	for (i = 0; i < NUMA_MAX_NODES; i++) {
		rte_mempool_free(s->rx_pool[i]);
		rte_mempool_free(s->hdr_pool[i]);
	}
	rte_eal_cleanup();
}

static int serve(const char *path, const char *prefix, int n_extra, char **extra)
{
	struct serve *s = calloc(1, sizeof(*s));
	static char *eargv[256];
	static char store[16384];
	char err[256];
	unsigned i;
	int eargc, rc = 1;

	setvbuf(stdout, NULL, _IOLBF, 0); /* a log: whole lines, as they happen */
	if (!s || !(s->cfg = calloc(1, sizeof(*s->cfg)))) {
		fprintf(stderr, "pboxd: out of memory\n");
		goto out;
	}
	/* configuration and a first plan, for the CPUs */
	if (load(path, s->cfg))
		goto out;
	/* the box key, before anything is set up: no key, no box */
	if (sodium_init() < 0) {
		fprintf(stderr, "pboxd: libsodium did not start\n");
		goto out;
	}
	{
		char kerr[512];

		if (nic_ctl_key_load(s->cfg->mgmt.key_file, s->key, kerr, sizeof(kerr))) {
			fprintf(stderr, "pboxd: %s: [management] key_file: %s\n", path, kerr);
			goto out;
		}
	}
	if (numa_topo_discover(&s->topo)) {
		fprintf(stderr, "pboxd: cannot discover the NUMA topology\n");
		goto out;
	}
	if (plan_input(s->cfg, &s->topo, &s->in) || make_plan(s))
		goto out;
	/* EAL */
	eargc = eal_args(s, prefix, n_extra, extra, eargv, store, sizeof(store));
	if (eargc < 0) {
		fprintf(stderr, "pboxd: too many EAL arguments\n");
		goto out;
	}
	if (rte_eal_init(eargc, eargv) < 0) {
		fprintf(stderr, "pboxd: EAL: %s\n", rte_strerror(rte_errno));
		goto out;
	}
	s->eal = true;
	/* signals */
	s->box.cfg = s->cfg;
	s->box.plan = &s->plan;
	the_box = &s->box;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	/* ports: what each can do, then the plan again with it */
	for (i = 0; i < s->cfg->n_ports; i++) {
		struct nic_port *p = &s->port[i];
		const struct box_port_cfg *pc = &s->cfg->port[i];
		unsigned cap;

		p->port_id = UINT16_MAX;
		snprintf(p->name, sizeof(p->name), "%s", pc->name);
		nic_port_dev_name(pc->pci, pc->vdev, p->dev, sizeof(p->dev));
		if (nic_port_probe(p, err, sizeof(err))) {
			fprintf(stderr, "pboxd: %s\n", err);
			goto out;
		}
		cap = p->max_queues;
		if (pc->max_queues && pc->max_queues < cap)
			cap = pc->max_queues;
		s->in.port[i].max_queues = cap ? cap : 1;
		if (s->in.port[i].node < 0 && p->socket >= 0)
			s->in.port[i].node = p->socket;
	}
	if (make_plan(s) || make_pools(s) || setup_ports(s))
		goto out;
	for (i = 0; i < s->plan.n_warnings; i++)
		fprintf(stderr, "pboxd: warning: %s\n", s->plan.warning[i]);
	/* link check: report, do not fail (a cable may come later) */
	for (i = 0; i < s->cfg->n_ports; i++) {
		const struct nic_port *p = &s->port[i];
		unsigned wait_ms = i == 0 ? 3000 : 500;
		uint32_t mbps;
		bool full, up = nic_port_link_wait(p, wait_ms, &mbps, &full);

		if (up && (mbps == 0 || mbps == RTE_ETH_SPEED_NUM_UNKNOWN)) /* virtio, vdevs */
			printf("pboxd: [port %s] %s: link up, speed not reported (using the "
			       "configured bandwidth)\n",
			       p->name, p->dev);
		else if (up)
			printf("pboxd: [port %s] %s: link up, %u Mb/s, %s-duplex\n", p->name,
			       p->dev, mbps, full ? "full" : "half");
		else
			printf("pboxd: [port %s] %s: link down after %u ms (serving anyway)\n",
			       p->name, p->dev, wait_ms);
	}
	if (make_lcores(s))
		goto out;
	for (i = 0; i < s->cfg->n_ports; i++) {
		s->box.port[i].id = s->port[i].port_id;
		s->box.port[i].name = s->port[i].name;
	}
	s->box.n_ports = s->cfg->n_ports;
	s->ctl = box_ctl_create(&s->box, s->key);
	sodium_memzero(s->key, sizeof(s->key)); /* the control plane holds it now */
	if (!s->ctl)
		goto out;
	if (s->cfg->telemetry.enabled && box_telemetry_register(&s->box, s->ctl))
		fprintf(stderr, "pboxd: telemetry commands not registered\n");
	if (s->cfg->telemetry.metrics_port && !(s->metrics = box_metrics_start(&s->box, s->ctl)))
		goto out;
	numa_plan_print(&s->plan, &s->in, stdout);
	printf("pboxd: serving %u endpoints on %u data cores; summation kernels %s; "
	       "telemetry prefix %s\n",
	       s->box.n_eps, s->plan.n_cores, sum_ops_best()->name, prefix);
	fflush(stdout);
	/* launch, serve */
	rte_eal_mp_remote_launch(box_lcore_main, &s->box, SKIP_MAIN);
	s->launched = true;
	if (box_ctl_run(s->ctl) == 0)
		rc = 0;
	printf("pboxd: stopping\n");
out:
	if (s) {
		teardown(s);
		free(s->cfg);
		sodium_memzero(s->key, sizeof(s->key));
	}
	free(s);
	fflush(stdout);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"check-config", required_argument, NULL, 'c'},
		{"plan", required_argument, NULL, 'p'},
		{"config-reference", no_argument, NULL, 'r'},
		{"file-prefix", required_argument, NULL, 'f'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	const char *check = NULL, *plan = NULL, *prefix = "pboxd";
	struct box_cfg *cfg;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			check = optarg;
			break;
		case 'p':
			plan = optarg;
			break;
		case 'f':
			prefix = optarg;
			break;
		case 'r':
			cfg_print_reference(&box_cfg_schema, stdout);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!check && !plan && optind < argc) {
		/* serve FILE [-- EAL...]: "+" made getopt stop at FILE */
		const char *path = argv[optind++];

		if (optind < argc && strcmp(argv[optind], "--") == 0)
			optind++;
		return serve(path, prefix, argc - optind, argv + optind);
	}
	if (optind != argc || (!check && !plan) || (check && plan)) {
		usage(stderr);
		return 2;
	}
	cfg = calloc(1, sizeof(*cfg));
	if (!cfg) {
		fprintf(stderr, "pboxd: out of memory\n");
		return 1;
	}
	rc = load(check ? check : plan, cfg);
	if (rc == 0) {
		if (check)
			cfg_print(&box_cfg_schema, cfg, stdout);
		else
			rc = show_plan(cfg);
	}
	free(cfg);
	return rc == 0 ? 0 : 1;
}
