/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The box's client (nic_ctl.h's protocol): rank 0's control connection to
 * each box of [box] control, authenticated with the box key; its
 * endpoints asked for, the job registered at the bootstrap (boot.c) and
 * grown by a segment when tensors come after the start (grow.c), and
 * unregistered (or merely closed) at the end.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cfg_box.h"
#include "layout.h"
#include "nic_ctl.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_units.h"
#include "wk_link.h"
#include "wk_box.h"

/* Box @b's control connection opened and authenticated into
 * px->net.box[b].fd: 0, or -1 with @msg. */
static int box_connect(struct pbox *px, uint32_t b, uint64_t deadline, char *msg, size_t cap)
{
	struct wk_box *bx = &px->net.box[b];
	const struct cfg_hostport *bc = &bx->addr;
	char ip[INET_ADDRSTRLEN], err[512];
	uint8_t key[NIC_KEY_LEN];
	int rc;

	if (nic_ctl_key_load(px->cfg.box.key_file, key, err, sizeof(err))) {
		snprintf(msg, cap, "[box] key_file: %.400s", err);
		return -1;
	}
	bx->fd = nic_ctl_connect(bc->ip_be, bc->port, deadline);
	if (bx->fd >= 0)
		wk_tcp_dead_after(bx->fd, px->cfg.tuning.heartbeat_us);
	if (bx->fd < 0) {
		sodium_memzero(key, sizeof(key));
		snprintf(msg, cap,
			 "cannot reach the box's control plane at %s:%u ([box] control): %s",
			 wk_ipstr(bc->ip_be, ip), bc->port, strerror(errno));
		return -1;
	}
	rc = nic_ctl_auth(bx->fd, key, &bx->sess, deadline, err, sizeof(err));
	sodium_memzero(key, sizeof(key));
	if (rc) {
		snprintf(msg, cap, "the box at %s:%u: %.300s ([box] key_file %.100s)",
			 wk_ipstr(bc->ip_be, ip), bc->port, err, px->cfg.box.key_file);
		return -1;
	}
	return 0;
}

/* Box @b's endpoints and geometry, through the control-protocol client,
 * appended to @eps; the connection stays open in px->net.box[b].fd: the job
 * lives as long as it. */
static int box_endpoints(struct pbox *px, uint32_t b, struct wk_box_eps *eps, uint64_t deadline,
			 char *msg, size_t cap)
{
	struct wk_box *bx = &px->net.box[b];
	const struct cfg_hostport *bc = &bx->addr;
	struct nic_ctl_ep *got;
	struct nic_ctl_geometry geo;
	char ip[INET_ADDRSTRLEN], err[512];
	int rc = -1;

	if (box_connect(px, b, deadline, msg, cap))
		return -1;
	got = calloc(WK_MAX_EPS, sizeof(*got));
	if (!got) {
		snprintf(msg, cap, "out of memory");
		return -1;
	}
	wk_ipstr(bc->ip_be, ip);
	if (nic_ctl_endpoints(bx->fd, got, WK_MAX_EPS, &geo, deadline, err, sizeof(err)))
		snprintf(msg, cap, "the box at %s:%u: %.400s", ip, bc->port, err);
	else if (geo.n_eps > WK_MAX_EPS - eps->n)
		snprintf(msg, cap, "the boxes have more than %d endpoints in all", WK_MAX_EPS);
	else if (eps->n && geo.chunk != eps->chunk)
		snprintf(msg, cap, "the box at %s:%u has chunk size %u, the first box %u", ip,
			 bc->port, geo.chunk, eps->chunk);
	else
		rc = 0;
	if (rc == 0) {
		bx->ep0 = eps->n;
		bx->n_eps = geo.n_eps;
		if (!eps->n || geo.frag < eps->frag) /* the fragment every box takes */
			eps->frag = geo.frag;
		eps->chunk = geo.chunk;
		if (geo.txref > eps->txref)
			eps->txref = geo.txref;
		for (uint32_t e = 0; e < geo.n_eps; e++) {
			eps->ip[eps->n + e] = got[e].addr.ip_be;
			eps->port[eps->n + e] = got[e].addr.port;
			eps->kbps[eps->n + e] = got[e].weight_kbps;
			/* a box that says no transmit reference size cannot be costed */
			eps->room[eps->n + e] = geo.txref ? got[e].room : NIC_CTL_ROOM_UNKNOWN;
		}
		eps->n += geo.n_eps;
	}
	free(got);
	return rc;
}

/* Rank 0: every box of [box] control, but those pbox_shrink() left out;
 * after a shrink a box that does not answer within [tuning] heartbeat is
 * left out too, with a warning. */
int wk_boxes_endpoints(struct pbox *px, struct wk_box_eps *eps, uint64_t deadline, char *msg,
		       size_t cap)
{
	px->net.n_boxes = 0;
	for (uint32_t i = 0; i < px->cfg.box.control.n; i++) {
		struct wk_box *bx = &px->net.box[px->net.n_boxes];
		uint64_t by = deadline;

		*bx = (struct wk_box){.fd = -1, .addr = px->cfg.box.control.hp[i]};
		if (px->epoch && px->cfg.tuning.heartbeat_us &&
		    wk_now() + px->cfg.tuning.heartbeat_us * 1000 < by)
			by = wk_now() + px->cfg.tuning.heartbeat_us * 1000;
		if (box_endpoints(px, px->net.n_boxes, eps, by, msg, cap)) {
			if (bx->fd >= 0)
				close(bx->fd);
			bx->fd = -1;
			if (!px->epoch)
				return -1;
			wk_log(px, CFG_LOG_WARNING, "shrink: going on without it: %s", msg);
			msg[0] = 0;
			continue;
		}
		px->net.n_boxes++;
	}
	return 0;
}

void wk_boxes_close(struct pbox *px, bool unregister)
{
	for (uint32_t b = 0; b < px->net.n_boxes; b++) {
		struct wk_box *bx = &px->net.box[b];
		char bye[96];

		if (bx->fd < 0)
			continue;
		if (unregister && bx->registered &&
		    nic_ctl_format_unregister(bye, sizeof(bye), &bx->sess, px->net.job,
					      px->net.jkey) > 0)
			nic_ctl_send(bx->fd, bye);
		close(bx->fd);
		bx->fd = -1;
	}
}

/* Box @bx's part of a segment, its endpoints' chunks, as a request for
 * it (REGISTER its first, GROW the others); NULL with @msg. */
static struct nic_ctl_reg *box_request(struct pbox *px, const struct wk_box *bx, uint8_t dtype,
				       const uint32_t *base, const uint32_t *count, char *msg,
				       size_t cap)
{
	struct nic_ctl_reg *r = calloc(1, sizeof(*r));
	struct ss_short *shorts = calloc(NIC_CTL_MAX_SHORTS, sizeof(*shorts));
	uint32_t e;

	if (!r || !shorts) {
		free(r);
		free(shorts);
		snprintf(msg, cap, "out of memory");
		return NULL;
	}
	*r = (struct nic_ctl_reg){.grow = bx->registered,
				  .job = px->net.job,
				  .mac = px->net.mac.mode,
				  .n = px->net.n,
				  .dtype = dtype,
				  .frag = px->net.frag_size,
				  .chunk = px->net.chunk_size,
				  .n_eps = bx->n_eps,
				  .comp = wk_comp_ppm(px, dtype),
				  .in_order = px->cfg.job.deterministic,
				  .stale = px->cfg.job.staleness};
	for (e = 0; e < px->net.n; e++) { /* each rank's SS_GPU address is its data address */
		r->ranks[e].ip_be = px->net.unit[px->net.n_eps + e].ip_be;
		r->ranks[e].port = px->net.unit[px->net.n_eps + e].port;
	}
	for (e = 0; e < bx->n_eps; e++) {
		uint32_t k, n, u = bx->ep0 + e;

		r->chunks[e] = count[u];
		n = wk_unit_shorts(px, u, (uint16_t)e, base[u], count[u], shorts,
				   NIC_CTL_MAX_SHORTS - r->n_shorts);
		if (n == UINT32_MAX) {
			free(r);
			free(shorts);
			snprintf(
				msg, cap,
				"job %u: more than %u tensors ending mid-chunk on the box at once: "
				"more than one request can carry",
				px->net.job, NIC_CTL_MAX_SHORTS);
			return NULL;
		}
		for (k = 0; k < n; k++)
			r->shorts[r->n_shorts++] = (struct nic_ctl_short){
				.ep = e, .chunk = shorts[k].chunk, .bytes = shorts[k].bytes};
		n = wk_unit_asyncs(px, u, e, base[u], count[u], r->asyncs + r->n_asyncs,
				   NIC_CTL_MAX_ASYNC - r->n_asyncs);
		if (n == UINT32_MAX) {
			free(r);
			free(shorts);
			snprintf(
				msg, cap,
				"job %u: more than %u runs of async chunks on the box at once: more "
				"than one request can carry",
				px->net.job, NIC_CTL_MAX_ASYNC);
			return NULL;
		}
		r->n_asyncs += n;
	}
	free(shorts);
	memcpy(r->key, px->net.jkey, sizeof(r->key));
	return r;
}

/* Request @r to box @bx, answered before @deadline (the key in it wiped,
 * @r freed): 0, or -1 with @msg. Whichever thread owns the box's
 * connection: the caller's at the bootstrap, the box client's after. */
static int box_exchange(const struct pbox *px, struct wk_box *bx, struct nic_ctl_reg *r,
			uint64_t deadline, char *msg, size_t cap)
{
	const char *verb = r->grow ? "grow" : "register";
	struct nic_ctl_reg_ok ok;
	char err[512], ip[INET_ADDRSTRLEN];
	uint32_t job = r->job;
	int rc;

	rc = nic_ctl_register(bx->fd, &bx->sess, r, &ok, deadline, err, sizeof(err));
	sodium_memzero(r->key, sizeof(r->key));
	free(r);
	wk_ipstr(bx->addr.ip_be, ip);
	if (rc == 0) {
		bx->registered = true;
		wk_log(px, CFG_LOG_INFO,
		       "job %u: %s with the box at %s:%u: %" PRIu64 " bytes of its memory in all",
		       job, verb, ip, bx->addr.port, ok.bytes);
		return 0;
	}
	if (rc > 0)
		snprintf(msg, cap, "the box at %s:%u refused to %s job %u: %.400s", ip,
			 bx->addr.port, verb, job, err);
	else
		snprintf(msg, cap, "%s job %u with the box at %s:%u: %.400s", verb, job, ip,
			 bx->addr.port, err);
	return -1;
}

int wk_box_segment(struct pbox *px, uint8_t dtype, const uint32_t *base, const uint32_t *count,
		   struct wk_box_batch *later, uint64_t deadline, char *msg, size_t cap)
{
	for (uint32_t b = 0; b < px->net.n_boxes; b++) {
		struct wk_box *bx = &px->net.box[b];
		struct nic_ctl_reg *r;
		uint32_t chunks = 0;

		for (uint32_t e = 0; e < bx->n_eps; e++)
			chunks += count[bx->ep0 + e];
		if (bx->fd < 0 || !chunks)
			continue;
		r = box_request(px, bx, dtype, base, count, msg, cap);
		if (!r)
			return -1;
		if (!later) {
			if (box_exchange(px, bx, r, deadline, msg, cap))
				return -1;
			continue;
		}
		if (later->n == later->cap) {
			uint32_t c = later->cap ? later->cap * 2 : 4;
			struct wk_box_req *v = realloc(later->req, c * sizeof(*v));

			if (!v) {
				sodium_memzero(r->key, sizeof(r->key));
				free(r);
				snprintf(msg, cap, "out of memory");
				return -1;
			}
			later->req = v;
			later->cap = c;
		}
		/* a GROW after this one's REGISTER: the box is registered by then */
		bx->registered = true;
		later->req[later->n++] = (struct wk_box_req){.box = b, .r = r};
	}
	return 0;
}

void wk_box_batch_free(struct wk_box_batch *bb)
{
	for (uint32_t i = 0; i < bb->n; i++)
		if (bb->req[i].r) {
			sodium_memzero(bb->req[i].r->key, sizeof(bb->req[i].r->key));
			free(bb->req[i].r);
		}
	free(bb->req);
	*bb = (struct wk_box_batch){0};
}

/*
 * ---- the box client's thread: rank 0's requests after the start (a box
 * GROW, a blocking exchange of up to [tuning] deadline) leave the engine
 * thread free to move every other tensor meanwhile. The engine hands it a
 * batch and reads the outcome on a later turn (wk_box_async_poll()); the
 * thread owns the connections of the batch's boxes until then, and the
 * engine leaves them alone (boxes_poll() waits).
 */
struct wk_boxc {
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	enum { WK_BC_IDLE, WK_BC_QUEUED, WK_BC_DONE } state;
	bool stop;
	struct wk_box_batch batch; /* QUEUED: the thread's */
	uint64_t deadline;
	int rc;
	char msg[WK_ERR_LEN];
};

static void *box_client(void *arg)
{
	struct pbox *px = arg;
	struct wk_boxc *bc = px->net.boxc;

	pthread_setname_np(pthread_self(), "pbox-box");
	pthread_mutex_lock(&bc->mu);
	for (;;) {
		struct wk_box_batch bb;
		char msg[WK_ERR_LEN] = "";
		uint64_t deadline;
		int rc = 0;

		while (bc->state != WK_BC_QUEUED && !bc->stop)
			pthread_cond_wait(&bc->cv, &bc->mu);
		if (bc->state != WK_BC_QUEUED)
			break;
		bb = bc->batch;
		bc->batch = (struct wk_box_batch){0};
		deadline = bc->deadline;
		pthread_mutex_unlock(&bc->mu);
		for (uint32_t i = 0; i < bb.n && rc == 0; i++) { /* box_exchange() frees each */
			struct wk_box_req *q = &bb.req[i];

			rc = box_exchange(px, &px->net.box[q->box], q->r, deadline, msg,
					  sizeof(msg));
			q->r = NULL;
		}
		wk_box_batch_free(&bb); /* those after a failure */
		pthread_mutex_lock(&bc->mu);
		bc->rc = rc;
		snprintf(bc->msg, sizeof(bc->msg), "%s", msg);
		bc->state = WK_BC_DONE;
		wk_engine_kick(px);
	}
	pthread_mutex_unlock(&bc->mu);
	return NULL;
}

int wk_box_async(struct pbox *px, struct wk_box_batch *bb, uint64_t deadline)
{
	struct wk_boxc *bc = px->net.boxc;

	if (!bc) {
		bc = calloc(1, sizeof(*bc));
		if (!bc)
			return wk_err(PBOX_ENOMEM, "out of memory for the box client");
		pthread_mutex_init(&bc->mu, NULL);
		pthread_cond_init(&bc->cv, NULL);
		px->net.boxc = bc;
		if (pthread_create(&bc->thr, NULL, box_client, px)) {
			px->net.boxc = NULL;
			pthread_mutex_destroy(&bc->mu);
			pthread_cond_destroy(&bc->cv);
			free(bc);
			return wk_err(PBOX_ENOMEM, "cannot start the box client's thread");
		}
	}
	pthread_mutex_lock(&bc->mu);
	bc->batch = *bb;
	*bb = (struct wk_box_batch){0};
	bc->deadline = deadline;
	bc->state = WK_BC_QUEUED;
	pthread_cond_signal(&bc->cv);
	pthread_mutex_unlock(&bc->mu);
	return PBOX_OK;
}

int wk_box_async_poll(struct pbox *px, char *msg, size_t cap)
{
	struct wk_boxc *bc = px->net.boxc;
	int rc = 0;

	if (!bc)
		return 1;
	pthread_mutex_lock(&bc->mu);
	if (bc->state == WK_BC_DONE) {
		rc = bc->rc ? -1 : 1;
		snprintf(msg, cap, "%s", bc->msg);
		bc->state = WK_BC_IDLE;
	} else if (bc->state == WK_BC_IDLE) {
		rc = 1;
	}
	pthread_mutex_unlock(&bc->mu);
	return rc;
}

void wk_box_client_stop(struct pbox *px, bool now)
{
	struct wk_boxc *bc = px->net.boxc;

	if (!bc)
		return;
	pthread_mutex_lock(&bc->mu);
	/* an exchange under way ends at once: its box connections shut down
	 * (the job fails or is over; wk_free_net() closes them) */
	if (now && bc->state == WK_BC_QUEUED)
		for (uint32_t b = 0; b < px->net.n_boxes; b++)
			if (px->net.box[b].fd >= 0)
				shutdown(px->net.box[b].fd, SHUT_RDWR);
	bc->stop = true;
	pthread_cond_signal(&bc->cv);
	pthread_mutex_unlock(&bc->mu);
	pthread_join(bc->thr, NULL);
	wk_box_batch_free(&bc->batch);
	pthread_mutex_destroy(&bc->mu);
	pthread_cond_destroy(&bc->cv);
	free(bc);
	px->net.boxc = NULL;
}
