/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The progress engine: one thread per context runs the communication
 * service (CS) and this worker's SS_GPU over one UDP socket.
 *
 *   loop:  take new push-pulls (their partitions into the priority heap)
 *          receive a batch: results for us, pushes for our SS_GPU
 *          retransmit what expired (one FIFO per backoff level: only heads
 *          are looked at, no timer per packet)
 *          send new fragments, highest priority first, within the credit
 *          and no faster than the link (pacing)
 *          flush the batch (sendmmsg); read the control connections
 *          nothing to do: ppoll() until the next expiry or pacing slot
 *
 * A fragment whose SS is this worker's own SS_GPU never touches the
 * network: it goes straight into ss_push(), and our own result is copied
 * out of the SS_GPU's buffer.
 *
 * The loop's parts, bottom up: frag.c (our fragments: FIFOs, the transmit
 * path, credit and window, delivery), serve.c (this rank's SS_GPU),
 * flow.c (the send schedule and loss recovery), ctl.c (the control
 * connections). This file is the loop, the receive dispatch and the
 * thread's start and end.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_units.h"
#include "wk_handle.h"
#include "wk_fail.h"
#include "wk_link.h"
#include "wk_box.h"
#include "wk_sched.h"
#include "wk_tune.h"
#include "wk_grow.h"
#include "wk_udp.h"
#include "wk_frag.h"
#include "wk_serve.h"
#include "wk_flow.h"
#include "wk_ctl.h"
#include "wk_engine.h"

#define WK_RX_DRAIN 64 /* receive batches taken before timers are judged */

/* One received datagram, pbox header first (from the socket or, through
 * the DPDK transport, from a frame); @arg is the engine's struct eng. */
static void on_datagram(void *ctx, void *arg, const uint8_t *b, size_t len,
			const struct sockaddr_in *from, uint64_t now)
{
	struct pbox *px = ctx;
	struct eng *e = arg;
	const struct nic_wire_expect exp = {.max_payload = (uint16_t)px->net.frag_size,
					    .accept_ops = PBOX_OPS_TO_SS | PBOX_OPS_TO_WORKER};
	struct pbox_hdr h;

	px->net.es.st.rx_pkts++;
	if (nic_wire_parse_hdr(b, len, &exp, &h) != NIC_DROP_NONE || h.job != px->net.job)
		return;
	px->net.es.st.rx_bytes += h.len;
	if (h.op == PBOX_OP_PUSH || h.op == PBOX_OP_PROBE)
		wk_serve_push(px, e, &h, b + PBOX_HDR_LEN, from);
	else if (!px->fail)
		wk_flow_result(px, e, &h, b + PBOX_HDR_LEN, from, now);
}

static int receive(struct pbox *px, struct eng *e, uint64_t now)
{
	return px->net.tp->rx(px->net.tp_st, on_datagram, e, now);
}

/* ---- stats -------------------------------------------------------------------- */

static void publish(struct pbox *px, uint64_t now)
{
	pthread_mutex_lock(&px->mu);
	wk_stats_locked(px);
	for (uint32_t u = 0; u < px->net.n_units; u++) {
		const struct wk_unit *un = &px->net.unit[u];
		struct pbox_ss_stats *s = &px->net.ss_pub[u];

		snprintf(s->name, sizeof(s->name), "%s", un->name);
		s->chunks = un->n_chunks;
		s->bytes = un->bytes;
		s->tx = un->tx;
		s->rx = un->rx;
		s->retrans = un->retrans;
	}
	px->tune_pub = (struct pbox_tuning){
		.credit_bytes = px->net.es.credit,
		.partition_bytes = px->net.es.part_bytes,
		.converged = px->net.es.tune.phase == WK_TUNE_DONE,
		.windows = px->net.es.tune.windows,
		.goodput_first_mbps = px->net.es.tune.first * 1e3,
		.goodput_best_mbps = px->net.es.tune.best * 1e3,
	};
	pthread_mutex_unlock(&px->mu);
	px->net.es.published_ns = now;
}

/* ---- the thread ---------------------------------------------------------------- */

/*
 * Nothing to do: wait for a datagram, a wake-up (a new push-pull), a line
 * from a rank, the next expiry or pacing slot, or rank 0's agreement on
 * new tensors. A line wakes the engine for the control turn at once: a
 * new tensor's agreement is a few of them (NEW, GREW), and each would
 * otherwise wait out a nap (20 ms).
 */
static void nap(struct pbox *px, uint64_t now, bool fin)
{
	struct pollfd two[2], *p = px->net.es.nap_fds;
	/* a DPDK port has no descriptor to wait on: nap briefly */
	uint64_t cnt,
		wait_ns = wk_grow_wait(px, now,
				       wk_flow_next_expiry(px, now,
							   px->net.tp->nap_ns ? px->net.tp->nap_ns
							   : fin	      ? 5000000ull
									      : 20000000ull));
	struct timespec ts = {.tv_sec = (time_t)(wait_ns / 1000000000ull),
			      .tv_nsec = (long)(wait_ns % 1000000000ull)};
	nfds_t n = 2;

	if (!p && !(p = px->net.es.nap_fds = calloc(px->net.n + 2, sizeof(*p))))
		p = two; /* out of memory: the lines wait for the next turn */
	p[0] = (struct pollfd){.fd = px->net.udp, .events = POLLIN};
	p[1] = (struct pollfd){.fd = px->net.efd, .events = POLLIN};
	for (uint32_t r = 0; p != two && r < px->net.n; r++) /* -1: not polled */
		p[n++] = (struct pollfd){.fd = px->net.peer_fd[r], .events = POLLIN};
	if (!wait_ns || ppoll(p, n, &ts, NULL) <= 0)
		return;
	if ((p[1].revents & POLLIN) && read(px->net.efd, &cnt, sizeof(cnt)) < 0) {
		/* nothing: the counter was read by an earlier wake-up */
	}
	for (nfds_t i = 2; i < n; i++)
		if (p[i].revents)
			px->net.es.control_ns = 0; /* the control turn, next */
}

/* How often a busy engine reads the connections: every 2 ms (a syscall
 * per connection); every 100 us while it has all-reduce partitions waiting
 * for rank 0's word ([job] leader_order: a line per partition rank 0
 * starts, and a tensor's small partitions go out one after another). */
static uint64_t control_gap(const struct pbox *px)
{
	return px->net.es.ord_n ? 100000ull : 2000000ull;
}

static void *engine(void *arg)
{
	struct pbox *px = arg;
	struct eng *e = px->net.es.eng;

	pthread_setname_np(pthread_self(), "pbox-engine");
	wk_mark_engine_thread();

	for (;;) {
		uint64_t now = px->net.es.now_ns = wk_now();
		int work = 0;
		bool fin, ab;

		pthread_mutex_lock(&px->mu);
		fin = px->finalizing;
		ab = px->aborting || px->aborted;
		pthread_mutex_unlock(&px->mu);
		if (px->fail && !px->net.es.eng_failed) /* raised on another thread */
			wk_fail_ops(px);
		if (ab) /* pbox_shrink() or pbox_abort(): it ends here, no BYE */
			break;
		if (fin && !px->fail) {
			/* whatever is still in flight ends here */
			pthread_mutex_lock(&px->mu);
			wk_fail_all_locked(px, PBOX_EFAILED,
					   "pbox_finalize() was called while it was in flight");
			pthread_mutex_unlock(&px->mu);
			wk_drop_schedule(px);
		}
		if (!px->fail) {
			wk_flow_take_new(px);
			wk_grow_poll(px);
		}
		/* Whatever has arrived is taken in before any timer is judged: after
		 * this thread was off the CPU, a result waiting in the socket (or the
		 * port's ring) must not look lost and be asked for again. */
		for (unsigned b = 0; b < WK_RX_DRAIN; b++) {
			int got = receive(px, e, now);

			work += got;
			if (got < WK_BATCH)
				break;
		}
		if (!px->fail) {
			work += wk_flow_retransmit(px, e, now);
			wk_flow_tail_probe(px, e, now);
			work += wk_flow_send_new(px, e, now);
			wk_tune_turn(px, now);
		}
		wk_tx_flush(px, e);
		if (fin || now - px->net.es.control_ns > control_gap(px)) {
			work += wk_ctl_turn(px, now, fin);
			px->net.es.control_ns = now;
		}
		if (px->net.es.n_early && !px->fail) /* a growth laid out: its held pushes */
			work += wk_serve_early(px, e);
		if (now - px->net.es.published_ns > 20000000ull)
			publish(px, now);
		if (fin && px->net.es.bye_done)
			break;
		if (!work)
			nap(px, now, fin);
	}
	publish(px, wk_now());
	return NULL;
}

/*
 * The progress thread, at real-time priority when [tuning] priority asks.
 * It paces our sends to the microsecond: a thread kept off the CPU for a
 * few milliseconds leaves the link idle for as long, time an evenly loaded
 * layout never makes up. On a host whose cores are shared (the emulated
 * cluster: the ranks and a box on 2 cores, where the kernel's memory
 * monitor, kdamond, takes a core for 5-20 ms twice a second), Fig. 12 at n
 * = 4, k = 0 lost 3-7% to such waits at the default priority, 1.4-1.6% at
 * priority 10.
 */
static int start_thread(struct pbox *px)
{
	pthread_attr_t a;
	struct sched_param sp = {.sched_priority = (int)px->cfg.tuning.priority};
	int err;

	if (!sp.sched_priority)
		err = pthread_create(&px->thr, NULL, engine, px);
	else if ((err = pthread_attr_init(&a)) == 0) {
		if (!(err = pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED)) &&
		    !(err = pthread_attr_setschedpolicy(&a, SCHED_FIFO)) &&
		    !(err = pthread_attr_setschedparam(&a, &sp)))
			err = pthread_create(&px->thr, &a, engine, px);
		pthread_attr_destroy(&a);
	}
	if (err == EPERM && sp.sched_priority)
		return wk_err(PBOX_EINVAL,
			      "pbox_start: [tuning] priority = %d: cannot run the progress thread "
			      "at that real-time priority: %s (it needs CAP_SYS_NICE or an "
			      "rtprio limit; 0 keeps the default scheduling)",
			      sp.sched_priority, strerror(err));
	if (err)
		return wk_err(PBOX_ENOMEM, "pbox_start: cannot start the progress thread: %s",
			      strerror(err));
	return PBOX_OK;
}

int wk_engine_start(struct pbox *px)
{
	struct eng *e = wk_udp_batch_new(px);
	int rc;

	px->net.es.eng = e;
	px->net.ss_pub = calloc(px->net.n_units, sizeof(*px->net.ss_pub));
	px->net.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!e || !px->net.ss_pub || px->net.efd < 0) {
		wk_udp_batch_free(e);
		px->net.es.eng = NULL;
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	}
	if (px->net.tp->ready && px->net.tp->ready(px->net.tp_st, 3000000000ull)) {
		wk_udp_batch_free(e);
		px->net.es.eng = NULL;
		return PBOX_ENOMEM;
	}
	px->net.es.part_bytes = px->cfg.tuning.partition_size;
	wk_set_credit(px, px->cfg.tuning.credit_bytes); /* and the timeout, at its floor */
	px->net.es.deadline_ns = px->cfg.tuning.deadline_us * 1000;
	/* a burst: [tuning] pace_burst's link time, or half a millisecond, the
	 * longer (the thread cannot count on waking up more precisely than that) */
	px->net.es.pace_burst_ns = px->cfg.tuning.pace_burst * 8000000ull / px->net.es.pace_kbps;
	if (px->net.es.pace_burst_ns < 500000)
		px->net.es.pace_burst_ns = 500000;
	px->net.es.pace_quantum_ns =
		32 * 1024 * 8000000ull / px->net.es.pace_kbps; /* a chunk's worth */
	if (px->net.es.pace_quantum_ns > px->net.es.pace_burst_ns / 2)
		px->net.es.pace_quantum_ns = px->net.es.pace_burst_ns / 2;
	publish(px, wk_now());
	px->net.es.eng_failed = false;
	pthread_mutex_lock(&px->mu);
	px->eng_live = true; /* from now on a failure raised elsewhere leaves its ops to it */
	pthread_mutex_unlock(&px->mu);
	rc = start_thread(px);
	if (rc) {
		pthread_mutex_lock(&px->mu);
		px->eng_live = false;
		pthread_mutex_unlock(&px->mu);
		wk_udp_batch_free(e);
		px->net.es.eng = NULL;
		return rc;
	}
	px->thr_started = true;
	return PBOX_OK;
}

void wk_engine_join(struct pbox *px)
{
	struct eng *e = px->net.es.eng;
	bool now;

	pthread_join(px->thr, NULL);
	pthread_mutex_lock(&px->mu);
	px->eng_live = false;
	now = px->aborting || px->aborted || px->fail;
	pthread_mutex_unlock(&px->mu);
	wk_box_client_stop(px, now);
	if (px->fail && !px->net.es.eng_failed) /* raised as it stopped: its ops fail here */
		wk_fail_ops(px);
	px->thr_started = false;
	wk_udp_batch_free(e);
	px->net.es.eng = NULL;
}
