/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libpbox's DPDK transport ([transport] kind = dpdk): the engine's datagrams
 * as Ethernet frames on one DPDK port, one queue pair driven by the engine
 * thread, built and checked by the box's wire code (nic_wire) and set up by
 * its port layer (nic_port). ARP finds the MACs of the summation services
 * and answers for our address; ICMP echo is answered as the box does.
 *
 * The bootstrap and control lines still run over kernel TCP on the data
 * address, so the kernel must share the port: a bifurcated NIC (mlx5), or
 * af_packet on a kernel interface. A guard UDP socket on the data port
 * keeps the kernel from answering our datagrams' copies with ICMP errors.
 *
 * The EAL is initialised once per process (it cannot be twice) and stays;
 * each context opens, and at the end closes, its own port.
 *
 * Built as a module (pbox-3/dpdk.so, see module.c), so that libpbox needs
 * no DPDK library. It sees no libpbox structure: what it needs of the
 * configuration and libpbox's functions come in a struct wk_tp_env
 * (transport.h), checked by version and size; libpbox's context is an
 * opaque pointer in it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "cfg.h"
#include "nic_host.h"
#include "nic_port.h"
#include "pbox.h"
#include "transport.h"

#define DP_MBUFS     8191
#define DP_DESC	     1024
#define DP_ARP_EVERY 100000000ull /* ns between ARP requests for one address */
#define DP_MAX_ARGS  32
#define DP_BATCH     64 /* frames per burst */

struct wk_dpdk {
	const struct wk_tp_env *env; /* libpbox's, for this context */
	struct nic_port port;
	struct rte_mempool *pool;
	struct rte_mbuf *tx[DP_BATCH];
	unsigned tn;
	struct nic_addr self;
	struct nic_wire_expect exp;
	struct dp_neigh {
		uint8_t mac[6];
		bool known;
		uint64_t asked; /* when we last asked ARP for it */
	} * nb;			/* per unit */
	uint32_t n_units;
	int guard; /* UDP socket on the data port: no ICMP port unreachable */
};

static pthread_mutex_t eal_mu = PTHREAD_MUTEX_INITIALIZER;
static int eal_state; /* 0 not yet, 1 up, -1 failed (for good) */
static unsigned pool_seq;

struct eal_argv {
	char store[1024];
	size_t off;
	int argc;
	char *argv[DP_MAX_ARGS + 1];
};

static void arg_add(struct eal_argv *a, const char *s)
{
	size_t n = strlen(s) + 1;

	if (a->argc >= DP_MAX_ARGS || a->off + n > sizeof(a->store))
		return;
	memcpy(a->store + a->off, s, n);
	a->argv[a->argc++] = a->store + a->off;
	a->argv[a->argc] = NULL;
	a->off += n;
}

/* EAL arguments: the port (-a for a PCI address, --vdev otherwise), the
 * lcores, then [transport] dpdk_args split at spaces. */
static void eal_args(const struct wk_tp_env *env, struct eal_argv *a)
{
	char dev[160], buf[256], *tok, *save = NULL;
	int cpu = sched_getcpu();
	bool pci;

	nic_port_dev_name(NULL, env->dpdk_port, dev, sizeof(dev));
	pci = strchr(dev, ':') != NULL;
	arg_add(a, "libpbox");
	arg_add(a, "--lcores");
	snprintf(buf, sizeof(buf), "0@%d", cpu < 0 ? 0 : cpu); /* the CPU we are on */
	arg_add(a, env->dpdk_lcores[0] ? env->dpdk_lcores : buf);
	arg_add(a, pci ? "-a" : "--vdev");
	arg_add(a, env->dpdk_port);
	if (!pci)
		arg_add(a, "--no-pci");
	arg_add(a, "--no-telemetry");
	snprintf(buf, sizeof(buf), "--file-prefix=libpbox-%d", (int)getpid()); /* one per process */
	arg_add(a, buf);
	arg_add(a, env->log_level >= CFG_LOG_DEBUG ? "--log-level=info" : "--log-level=error");
	snprintf(buf, sizeof(buf), "%s", env->dpdk_args);
	for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
		arg_add(a, tok);
}

/* The runtime directory the EAL made, if it left it empty (--in-memory
 * makes none; --no-shconf an empty one). */
static void eal_dir_gone(void)
{
	rmdir(rte_eal_get_runtime_dir());
}

/* The EAL, once per process. It pins the calling thread: the caller's
 * affinity is put back afterwards. */
static int eal_up(const struct wk_tp_env *env)
{
	struct eal_argv a = {.argc = 0};
	cpu_set_t mask;
	int rc = PBOX_OK, saved;

	pthread_mutex_lock(&eal_mu);
	if (eal_state == 1)
		goto out;
	if (eal_state < 0) {
		rc = env->err(PBOX_ENET, "pbox_start: DPDK's EAL failed earlier in this process");
		goto out;
	}
	eal_args(env, &a);
	saved = pthread_getaffinity_np(pthread_self(), sizeof(mask), &mask);
	if (rte_eal_init(a.argc, a.argv) < 0) {
		eal_state = -1;
		rc = env->err(PBOX_ENET,
			      "pbox_start: DPDK's EAL refused [transport] dpdk_port = %s, "
			      "dpdk_args = %s: %s",
			      env->dpdk_port, env->dpdk_args, rte_strerror(rte_errno));
	} else {
		eal_state = 1;
		atexit(eal_dir_gone);
	}
	if (saved == 0)
		pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask);
out:
	pthread_mutex_unlock(&eal_mu);
	return rc;
}

static int guard_open(const struct wk_tp_env *env)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(env->port)};
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), small = 4096;

	sa.sin_addr.s_addr = env->ip_be;
	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
		return fd;
	}
	if (fd >= 0) /* the kernel does not hold the address: nothing to guard */
		close(fd);
	return -1;
}

static const struct wk_transport dpdk_transport;

int pbox_module_dpdk_open(const struct wk_tp_env *env, const struct wk_transport **tp, void **st);
int pbox_module_dpdk_open(const struct wk_tp_env *env, const struct wk_transport **tp, void **st)
{
	struct wk_dpdk *d;
	char err[256], name[RTE_MEMPOOL_NAMESIZE];
	int rc;

	if (env->version != WK_TP_VERSION || env->size != sizeof(*env)) /* another build */
		return env->err(PBOX_ECONFIG,
				"pbox_start: the DPDK transport module speaks transport interface "
				"%u (%zu bytes), libpbox %u (%u bytes): install both from one "
				"release",
				WK_TP_VERSION, sizeof(*env), env->version, env->size);
	rc = eal_up(env);
	if (rc)
		return rc;
	d = calloc(1, sizeof(*d));
	if (!d)
		return env->err(PBOX_ENOMEM, "pbox_start: out of memory");
	d->env = env;
	d->guard = -1;
	snprintf(d->port.name, sizeof(d->port.name), "transport");
	nic_port_dev_name(NULL, env->dpdk_port, d->port.dev, sizeof(d->port.dev));
	if (nic_port_probe(&d->port, err, sizeof(err))) {
		free(d);
		return env->err(PBOX_ENET, "pbox_start: %s", err);
	}
	pthread_mutex_lock(&eal_mu);
	snprintf(name, sizeof(name), "pbox_w%u_%u", env->rank, pool_seq++);
	pthread_mutex_unlock(&eal_mu);
	/* as the box sizes them: room for a frame at the MTU, and the slack
	 * virtual devices (af_packet) ask for beyond it */
	d->pool = rte_pktmbuf_pool_create(
		name, DP_MBUFS, 0, 0,
		(uint16_t)(RTE_PKTMBUF_HEADROOM + RTE_ALIGN_CEIL(env->mtu + 18u, 1024u) + 1024),
		d->port.socket >= 0 ? d->port.socket : SOCKET_ID_ANY);
	if (!d->pool) {
		free(d);
		return env->err(PBOX_ENOMEM,
				"pbox_start: no DPDK memory for %u mbufs of %u bytes: %s", DP_MBUFS,
				env->mtu, rte_strerror(rte_errno));
	}
	if (nic_port_setup(&d->port, 1, env->mtu, DP_DESC, DP_DESC, &d->pool, err, sizeof(err))) {
		rte_mempool_free(d->pool);
		free(d);
		return env->err(PBOX_ENET, "pbox_start: %s", err);
	}
	if (!nic_port_link_wait(&d->port, 5000, NULL, NULL))
		env->log(env->ctx, CFG_LOG_WARNING, "DPDK port %s: link down; going on",
			 d->port.dev);
	memcpy(d->self.mac, d->port.mac, 6);
	d->self.ip_be = env->ip_be;
	d->self.port = env->port;
	d->exp = (struct nic_wire_expect){
		.ip_be = d->self.ip_be, .port_lo = d->self.port, .port_hi = d->self.port};
	d->guard = guard_open(env);
	*st = d;
	*tp = &dpdk_transport;
	return PBOX_OK;
}

static void dp_close(void *st)
{
	struct wk_dpdk *d = st;

	if (!d)
		return;
	rte_pktmbuf_free_bulk(d->tx, d->tn);
	nic_port_close(&d->port);
	rte_mempool_free(d->pool);
	if (d->guard >= 0)
		close(d->guard);
	free(d->nb);
	free(d);
}

static void dp_describe(const void *st, char *buf, size_t cap)
{
	const struct wk_dpdk *d = st;
	const uint8_t *m = d->port.mac;

	snprintf(buf, cap, "dpdk %s %02x:%02x:%02x:%02x:%02x:%02x", d->port.dev, m[0], m[1], m[2],
		 m[3], m[4], m[5]);
}

/* ---- neighbours: a MAC per unit ---------------------------------------- */

static void learn(struct wk_dpdk *d, uint32_t ip_be, const uint8_t mac[6])
{
	for (uint32_t u = 0; d->nb && u < d->n_units; u++)
		if (d->env->unit_ip(d->env->ctx, u) == ip_be) {
			memcpy(d->nb[u].mac, mac, 6);
			d->nb[u].known = true;
		}
}

static void tx_frame(struct wk_dpdk *d, struct rte_mbuf *m);
static void dp_flush(void *st, void *eng);
static int dp_rx(void *st, wk_dgram_fn *fn, void *arg, uint64_t now);

static void ask(struct wk_dpdk *d, uint32_t u, uint64_t now)
{
	struct rte_mbuf *m;

	if (d->nb[u].asked && now - d->nb[u].asked < DP_ARP_EVERY)
		return;
	d->nb[u].asked = now;
	m = rte_pktmbuf_alloc(d->pool);
	if (!m)
		return;
	m->data_len = m->pkt_len =
		(uint32_t)nic_host_arp_request(rte_pktmbuf_mtod(m, void *), d->self.mac,
					       d->self.ip_be, d->env->unit_ip(d->env->ctx, u));
	tx_frame(d, m);
}

static int dp_resolve(void *st, uint64_t wait_ns)
{
	struct wk_dpdk *d = st;
	const struct wk_tp_env *env = d->env;
	uint32_t u, missing = 0, self = env->self_unit(env->ctx);
	uint64_t t0 = env->now();

	d->n_units = env->n_units(env->ctx);
	d->nb = calloc(d->n_units + 1, sizeof(*d->nb));
	if (!d->nb)
		return env->err(PBOX_ENOMEM, "pbox_start: out of memory");
	for (;;) {
		uint64_t now = env->now();

		missing = 0;
		for (u = 0; u < d->n_units; u++)
			if (u != self && !d->nb[u].known) {
				missing++;
				ask(d, u, now);
			}
		dp_flush(d, NULL);
		if (!missing || now - t0 > wait_ns)
			break;
		usleep(1000);
		dp_rx(d, NULL, NULL, now);
	}
	for (u = 0; u < d->n_units && missing; u++)
		if (u != self && !d->nb[u].known)
			env->log(env->ctx, CFG_LOG_WARNING,
				 "DPDK transport: no ARP answer from %s yet; asking again as we go",
				 env->unit_name(env->ctx, u));
	return PBOX_OK;
}

/* ---- transmit ------------------------------------------------------------ */

static void tx_frame(struct wk_dpdk *d, struct rte_mbuf *m)
{
	if (d->tn == DP_BATCH)
		dp_flush(d, NULL);
	d->tx[d->tn++] = m;
}

static void dp_tx(void *st, void *eng, uint32_t ip_be, uint16_t port, const struct pbox_hdr *h,
		  const void *payload, uint16_t len, bool gso)
{
	struct wk_dpdk *d = st;
	const struct wk_tp_env *env = d->env;

	(void)eng; /* one frame per datagram: @h carries the length; no GSO */
	(void)len;
	(void)gso;
	uint32_t u = env->unit_of(env->ctx, ip_be, port);
	struct nic_addr dst = {.ip_be = ip_be, .port = port};
	struct rte_mbuf *m;
	size_t n;

	if (u >= d->n_units || !d->nb[u].known) { /* lost: resent once ARP answers */
		env->dropped(env->ctx, 1);
		if (u < d->n_units)
			ask(d, u, env->now());
		return;
	}
	m = rte_pktmbuf_alloc(d->pool);
	memcpy(dst.mac, d->nb[u].mac, 6);
	/* nic_wire_build() refuses what does not fit the mbuf */
	n = m ? nic_wire_build(rte_pktmbuf_mtod(m, void *), rte_pktmbuf_tailroom(m), &d->self, &dst,
			       h, payload)
	      : 0;
	if (!n) {
		rte_pktmbuf_free(m);
		env->dropped(env->ctx, 1);
		return;
	}
	m->data_len = m->pkt_len = (uint32_t)n;
	tx_frame(d, m);
}

static void dp_flush(void *st, void *eng)
{
	struct wk_dpdk *d = st;
	unsigned s = 0, spins = 0;

	(void)eng;
	/* the ring may be full for a moment: a few tries, then the rest is
	 * lost (and resent) rather than the engine stalled */
	while (s < d->tn && spins < 64) {
		uint16_t w = rte_eth_tx_burst(d->port.port_id, 0, d->tx + s, (uint16_t)(d->tn - s));

		s += w;
		spins = w ? 0 : spins + 1;
	}
	if (s < d->tn) {
		d->env->dropped(d->env->ctx, d->tn - s);
		rte_pktmbuf_free_bulk(d->tx + s, d->tn - s);
	}
	d->tn = 0;
}

/* ---- receive ------------------------------------------------------------ */

static int dp_rx(void *st, wk_dgram_fn *fn, void *arg, uint64_t now)
{
	struct wk_dpdk *d = st;
	struct rte_mbuf *pkts[DP_BATCH];
	uint16_t n = rte_eth_rx_burst(d->port.port_id, 0, pkts, DP_BATCH);

	for (uint16_t i = 0; i < n; i++) {
		struct rte_mbuf *m = pkts[i];
		uint8_t *f = rte_pktmbuf_mtod(m, uint8_t *);
		size_t len = m->data_len;
		struct nic_pkt p;
		uint8_t mac[6];
		uint32_t ip;

		if (m->nb_segs != 1) {
			rte_pktmbuf_free(m);
			continue;
		}
		if (nic_host_arp_sender(f, len, &ip, mac)) {
			learn(d, ip, mac);
			if (nic_host_arp_reply(f, len, d->self.mac, d->self.ip_be)) {
				tx_frame(d, m);
				continue;
			}
		} else if (nic_wire_parse(f, len, &d->exp, &p) == NIC_DROP_NONE) {
			if (p.kind == NIC_KIND_ICMP &&
			    nic_host_icmp_reply(f, len, &p, d->self.mac)) {
				tx_frame(d, m);
				continue;
			}
			if (p.kind == NIC_KIND_PBOX && fn) {
				struct sockaddr_in from = {.sin_family = AF_INET,
							   .sin_port = htons(p.src_port),
							   .sin_addr.s_addr = p.src_ip_be};

				fn(d->env->ctx, arg, f + p.payload_off - PBOX_HDR_LEN,
				   PBOX_HDR_LEN + (size_t)p.hdr.len, &from, now);
			}
		}
		rte_pktmbuf_free(m);
	}
	return n;
}

static const struct wk_transport dpdk_transport = {
	.tx = dp_tx,
	.flush = dp_flush,
	.rx = dp_rx,
	.ready = dp_resolve,
	.describe = dp_describe,
	.close = dp_close,
	.nap_ns = 50000, /* a port has no descriptor to sleep on */
	.gso = false,
};
