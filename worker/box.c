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
#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfg_box.h"
#include "layout.h"
#include "nic_ctl.h"
#include "pbox_int.h"

/* Box @b's control connection opened and authenticated into
 * px->box[b].fd: 0, or -1 with @msg. */
static int box_connect(struct pbox *px, uint32_t b, uint64_t deadline, char *msg, size_t cap)
{
	struct wk_box *bx = &px->box[b];
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
 * appended to @eps; the connection stays open in px->box[b].fd: the job
 * lives as long as it. */
static int box_endpoints(struct pbox *px, uint32_t b, struct wk_box_eps *eps, uint64_t deadline,
			 char *msg, size_t cap)
{
	struct wk_box *bx = &px->box[b];
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
		for (uint32_t e = 0; e < geo.n_eps; e++) {
			eps->ip[eps->n + e] = got[e].addr.ip_be;
			eps->port[eps->n + e] = got[e].addr.port;
			eps->kbps[eps->n + e] = got[e].weight_kbps;
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
	px->n_boxes = 0;
	for (uint32_t i = 0; i < px->cfg.box.control.n; i++) {
		struct wk_box *bx = &px->box[px->n_boxes];
		uint64_t by = deadline;

		*bx = (struct wk_box){.fd = -1, .addr = px->cfg.box.control.hp[i]};
		if (px->epoch && px->cfg.tuning.heartbeat_us &&
		    wk_now() + px->cfg.tuning.heartbeat_us * 1000 < by)
			by = wk_now() + px->cfg.tuning.heartbeat_us * 1000;
		if (box_endpoints(px, px->n_boxes, eps, by, msg, cap)) {
			if (bx->fd >= 0)
				close(bx->fd);
			bx->fd = -1;
			if (!px->epoch)
				return -1;
			wk_log(px, CFG_LOG_WARNING, "shrink: going on without it: %s", msg);
			msg[0] = 0;
			continue;
		}
		px->n_boxes++;
	}
	return 0;
}

void wk_boxes_close(struct pbox *px, bool unregister)
{
	for (uint32_t b = 0; b < px->n_boxes; b++) {
		struct wk_box *bx = &px->box[b];
		char bye[96];

		if (bx->fd < 0)
			continue;
		if (unregister && bx->registered &&
		    nic_ctl_format_unregister(bye, sizeof(bye), &bx->sess, px->job, px->jkey) > 0)
			nic_ctl_send(bx->fd, bye);
		close(bx->fd);
		bx->fd = -1;
	}
}

/* Box @bx's part of a segment: its endpoints' chunks. */
static int box_segment(struct pbox *px, struct wk_box *bx, uint8_t dtype, const uint32_t *base,
		       const uint32_t *count, uint64_t deadline, char *msg, size_t cap)
{
	struct nic_ctl_reg *r = calloc(1, sizeof(*r));
	struct ss_short *shorts = calloc(NIC_CTL_MAX_SHORTS, sizeof(*shorts));
	struct nic_ctl_reg_ok ok;
	const char *verb = bx->registered ? "grow" : "register";
	char err[512], ip[INET_ADDRSTRLEN];
	uint32_t e;
	int rc;

	if (!r || !shorts) {
		free(r);
		free(shorts);
		snprintf(msg, cap, "out of memory");
		return -1;
	}
	*r = (struct nic_ctl_reg){.grow = bx->registered,
				  .job = px->job,
				  .mac = px->mac.mode,
				  .n = px->n,
				  .dtype = dtype,
				  .frag = px->frag_size,
				  .chunk = px->chunk_size,
				  .n_eps = bx->n_eps,
				  .comp = wk_comp_ppm(px, dtype)};
	r->n_shorts = 0;
	for (e = 0; e < px->n; e++) { /* each rank's SS_GPU address is its data address */
		r->ranks[e].ip_be = px->unit[px->n_eps + e].ip_be;
		r->ranks[e].port = px->unit[px->n_eps + e].port;
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
				px->job, NIC_CTL_MAX_SHORTS);
			return -1;
		}
		for (k = 0; k < n; k++)
			r->shorts[r->n_shorts++] = (struct nic_ctl_short){
				.ep = e, .chunk = shorts[k].chunk, .bytes = shorts[k].bytes};
	}
	free(shorts);
	memcpy(r->key, px->jkey, sizeof(r->key));
	rc = nic_ctl_register(bx->fd, &bx->sess, r, &ok, deadline, err, sizeof(err));
	sodium_memzero(r->key, sizeof(r->key));
	free(r);
	wk_ipstr(bx->addr.ip_be, ip);
	if (rc == 0) {
		bx->registered = true;
		wk_log(px, CFG_LOG_INFO,
		       "job %u: %s with the box at %s:%u: %" PRIu64 " bytes of its memory in all",
		       px->job, verb, ip, bx->addr.port, ok.bytes);
		return 0;
	}
	if (rc > 0)
		snprintf(msg, cap, "the box at %s:%u refused to %s job %u: %.400s", ip,
			 bx->addr.port, verb, px->job, err);
	else
		snprintf(msg, cap, "%s job %u with the box at %s:%u: %.400s", verb, px->job, ip,
			 bx->addr.port, err);
	return -1;
}

int wk_box_segment(struct pbox *px, uint8_t dtype, const uint32_t *base, const uint32_t *count,
		   uint64_t deadline, char *msg, size_t cap)
{
	for (uint32_t b = 0; b < px->n_boxes; b++) {
		struct wk_box *bx = &px->box[b];
		uint32_t chunks = 0;

		for (uint32_t e = 0; e < bx->n_eps; e++)
			chunks += count[bx->ep0 + e];
		if (bx->fd >= 0 && chunks &&
		    box_segment(px, bx, dtype, base, count, deadline, msg, cap))
			return -1;
	}
	return 0;
}
