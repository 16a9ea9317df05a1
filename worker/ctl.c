/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control side of the engine's turn: the ranks' bootstrap connections
 * (their lines through the rank protocol's codec: heartbeats, FAIL, LOST,
 * LEAVE, REJOIN, BYE and a new tensor's agreement), the boxes' control
 * connections, a failure told to the ranks that do not know it yet, and
 * pbox_finalize()'s barrier. The engine thread's alone.
 */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_link.h"
#include "wk_box.h"
#include "wk_grow.h"
#include "wk_ctl.h"

/* ---- control connections: lost ranks, the finalize barrier ---------------- */

static void lost(struct pbox *px, uint32_t r, const char *how)
{
	char name[96];

	wk_peer_name(px, r, name, sizeof(name));
	/* rank 0 tells the others first: once this rank's calls fail, its
	 * process may exit at once, and they would blame rank 0 instead */
	if (px->net.rank == 0)
		for (uint32_t q = 1; q < px->net.n; q++)
			if (q != r && px->net.peer_fd[q] >= 0)
				RP_SEND(px->net.peer_fd[q], LOST, lost, .rank = r, .why = how);
	if (px->net.rank == 0 &&
	    px->net.peer_fd[r] >= 0) { /* silent: finalize waits for it no more */
		close(px->net.peer_fd[r]);
		px->net.peer_fd[r] = -1;
	}
	/* gone, and told by LOST: pbox_shrink() leaves it out */
	wk_raise(px, WK_FK_RANK_LOST, 0, r, "%s left the job (%s)", name, how);
	if (px->net.rank == 0) /* the job is over: its memory back to the boxes */
		wk_boxes_close(px, false);
}

/*
 * A failure known to one rank reaches every rank at once, with its cause:
 * a rank tells rank 0 (FAIL <origin> <code> <message>), rank 0 tells every
 * other rank, and each fails with "rank R says: ...". Without this, when
 * pboxd went away only rank 0 (which holds the box's control connection)
 * knew; the others waited for their deadline and then blamed rank 0. A lost
 * rank is told by LOST instead, a disagreement found by rank 0 by its own
 * lines (their kinds are told as they are raised: wk_fail_kinds[]); only a
 * rank's first failure is told, and a told one is not told back.
 */
static void tell_failure(struct pbox *px, uint32_t from)
{
	if (px->net.rank == 0) {
		for (uint32_t q = 1; q < px->net.n; q++)
			if (q != from && px->net.peer_fd[q] >= 0)
				RP_SEND(px->net.peer_fd[q], FAIL, fail, .origin = from,
					.code = px->fail, .why = px->fail_msg);
	} else if (from == px->net.rank && px->net.peer_fd[0] >= 0) {
		RP_SEND(px->net.peer_fd[0], FAIL, fail, .origin = from, .code = px->fail,
			.why = px->fail_msg);
	}
}

/*
 * This rank leaves the job (local aggregation: its machine lost one of its
 * ranks, and a machine goes on whole or not at all): the others are to
 * count it gone, as if its process had died, and go on without it after
 * pbox_shrink(). Rank 0 is told (LEAVE), and tells the others as it tells
 * a lost rank; rank 0 itself tells every other that rank 0 is lost.
 */
static void tell_leaving(struct pbox *px)
{
	if (px->net.rank != 0 && px->net.peer_fd[0] >= 0)
		RP_SEND(px->net.peer_fd[0], LEAVE, leave, .why = px->fail_msg);
	for (uint32_t q = 1; px->net.rank == 0 && q < px->net.n; q++)
		if (px->net.peer_fd[q] >= 0)
			RP_SEND(px->net.peer_fd[q], LOST, lost, .rank = 0, .why = px->fail_msg);
}

/* FAIL from rank @r's connection: fail as the origin did, named. */
static void told_failure(struct pbox *px, uint32_t r, const struct rp_fail *f)
{
	int code = f->code;

	if (px->fail || f->origin >= px->net.n || (px->net.rank != 0 && r != 0) ||
	    (px->net.rank == 0 && f->origin != r))
		return;
	if (code >= 0 || code < PBOX_ENODEV)
		code = PBOX_EFAILED;
	wk_raise(px, WK_FK_HEARD, code, f->origin, "rank %u says: %s",
		 wk_local_world_rank(px, f->origin), f->why);
}

/*
 * Heartbeats: every bootstrap connection carries a line at least every
 * [tuning] heartbeat / 4 both ways (rank 0 to each rank, each rank to rank
 * 0). A process that dies closes its connections at once; a host that
 * crashes or is cut off closes nothing, and its connection falls silent:
 * rank 0 names that rank to every other after [tuning] heartbeat (LOST),
 * and a rank that hears nothing from rank 0 names rank 0. Far sooner than
 * the data deadline, and it does not depend on data being in flight.
 */
static void heartbeat(struct pbox *px, uint64_t now)
{
	uint64_t limit = px->cfg.tuning.heartbeat_us * 1000;
	char name[96];

	if (!limit || px->fail || px->net.n == 1)
		return;
	if (!px->net.hb_sent_ns) { /* the engine's first turn: everyone heard now */
		for (uint32_t r = 0; r < px->net.n; r++)
			px->net.peer_heard[r] = now;
	}
	if (now - px->net.hb_sent_ns >= limit / 4) {
		for (uint32_t r = 0; r < px->net.n; r++)
			if (px->net.peer_fd[r] >= 0 && (px->net.rank == 0) != (r == 0))
				rp_send_verb(px->net.peer_fd[r], RP_HB);
		px->net.hb_sent_ns = now;
	}
	for (uint32_t r = 0; r < px->net.n; r++) {
		double s = (double)(now - px->net.peer_heard[r]) / 1e9;

		if (px->net.peer_fd[r] < 0 || px->net.peer_bye[r] ||
		    now - px->net.peer_heard[r] <= limit)
			continue;
		if (px->net.rank == 0) {
			char how[128];

			snprintf(how, sizeof(how),
				 "silent for %.1f s: its host crashed or was cut off", s);
			lost(px, r, how);
		} else { /* gone: pbox_shrink() leaves it out */
			wk_raise(
				px, WK_FK_SILENT, 0, 0,
				"%s fell silent for %.1f s: its host crashed or was cut off (or this "
				"one was)",
				wk_peer_name(px, 0, name, sizeof(name)), s);
		}
		return;
	}
}

/* Rank 0 starts a partition ([job] leader_order): into our FIFO of its
 * order (flow.c sends in it). */
static void ord_heard(struct pbox *px, uint32_t r, const struct rp_ord *o)
{
	struct wk_eng_state *es = &px->net.es;

	if (r != 0 || px->net.rank == 0 || !px->cfg.job.leader_order)
		return;
	if (es->annq_head && es->annq_head == es->annq_n)
		es->annq_head = es->annq_n = 0;
	if (es->annq_n == es->annq_cap) {
		uint32_t c = es->annq_cap ? es->annq_cap * 2 : 256;
		struct wk_ord *v;

		if (es->annq_head) { /* room at the front first */
			memmove(es->annq, es->annq + es->annq_head,
				(es->annq_n - es->annq_head) * sizeof(*es->annq));
			es->annq_n -= es->annq_head;
			es->annq_head = 0;
		}
		if (es->annq_n == es->annq_cap) {
			v = realloc(es->annq, c * sizeof(*v));
			if (!v) {
				wk_raise(px, WK_FK_LOCAL, PBOX_ENOMEM, 0,
					 "out of memory for rank 0's order of sends");
				return;
			}
			es->annq = v;
			es->annq_cap = c;
		}
	}
	es->annq[es->annq_n++] = (struct wk_ord){.key = o->key, .round = o->round, .row = o->row};
}

/* One control line from rank @r's connection. A line this rank cannot
 * read fails the job (the ranks proved they run one job: a garbled line is
 * a fault, not something to guess at); one of a verb this rank is not
 * party to is dropped. */
static void control_line(struct pbox *px, uint32_t r, char *line)
{
	char err[160];
	struct rp_msg m;

	if (rp_parse(line, &m, err, sizeof(err))) {
		wk_raise(px, WK_FK_PROTOCOL, 0, 0, "rank %u sent a line this rank cannot read: %s",
			 wk_local_world_rank(px, r), err);
		return;
	}
	switch (m.verb) {
	case RP_HB: /* a heartbeat: heard */
		break;
	case RP_BYE:
		px->net.peer_bye[r] = true;
		if (px->net.rank != 0)
			px->net.es.bye_done = true;
		break;
	case RP_LOST:
		if (px->net.rank != 0 && m.lost.rank < px->net.n)
			lost(px, m.lost.rank, m.lost.why); /* as rank 0 saw it */
		break;
	case RP_REJOIN:
		if (px->net.rank != 0 || r == 0)
			break;
		px->net.peer_bye[r] = true; /* its connection closes next, not lost */
		pthread_mutex_lock(&px->mu);
		px->rejoins++;
		pthread_cond_broadcast(&px->cv);
		pthread_mutex_unlock(&px->mu);
		break;
	case RP_LEAVE:
		if (px->net.rank == 0 && r != 0)
			lost(px, r, m.leave.why); /* its machine lost a rank: it is gone */
		break;
	case RP_FAIL:
		told_failure(px, r, &m.fail);
		break;
	case RP_ORD:
		ord_heard(px, r, &m.ord);
		break;
	default:
		wk_grow_line(px, r, &m); /* a new tensor's agreement, or nothing */
		break;
	}
}

/* Every rank's connection: its lines (how many), and whether it closed. */
static int peers_poll(struct pbox *px, uint64_t now)
{
	char line[RP_LINE_MAX];
	int lines = 0;

	for (uint32_t r = 0; r < px->net.n; r++) {
		int fd = px->net.peer_fd[r], rc = 0;

		while (fd >= 0 && (rc = wk_line_poll(fd, px->net.peer_buf[r], &px->net.peer_len[r],
						     WK_LINEBUF, line, sizeof(line))) == 1) {
			px->net.peer_heard[r] = now;
			control_line(px, r, line);
			lines++;
		}
		if (fd >= 0 && rc < 0) {
			close(fd);
			px->net.peer_fd[r] = -1;
			if (!px->net.peer_bye[r] && !(px->net.rank != 0 && px->net.es.bye_done))
				lost(px, r,
				     px->net.rank == 0 ? "its connection to rank 0 closed"
						       : "our connection to it closed");
			if (px->net.rank != 0)
				px->net.es.bye_done = true;
		}
	}
	return lines;
}

/* The boxes' control connections: a box that closed or timed out its
 * connection, or that says it knows the job no more, fails the job. */
static void boxes_poll(struct pbox *px, uint64_t now)
{
	/* a growth under way: the box client's thread has their connections */
	for (uint32_t b = 0; b < px->net.n_boxes && !px->net.es.grow_ts; b++) {
		struct wk_box *bx = &px->net.box[b];
		char buf[256], ip[INET_ADDRSTRLEN];
		ssize_t got;

		if (bx->fd < 0)
			continue;
		got = recv(bx->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (got > 0 ||
		    (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
			continue;
		close(bx->fd);
		bx->fd = -1;
		wk_ipstr(bx->addr.ip_be, ip);
		/* gone, the failure's cause: pbox_shrink() leaves it out */
		if (got < 0 && errno == ETIMEDOUT) /* keepalive: wk_tcp_dead_after() */
			wk_raise(
				px, WK_FK_BOX_LOST, 0, b,
				"the box at %s:%u: its control connection timed out (no answer for "
				"%.1f s): pboxd's host crashed or was cut off",
				ip, bx->addr.port, (double)px->cfg.tuning.heartbeat_us / 1e6);
		else
			wk_raise(px, WK_FK_BOX_LOST, 0, b,
				 "the box at %s:%u closed its control connection: pboxd went away",
				 ip, bx->addr.port);
	}
	if (px->net.es.nojob_since && now - px->net.es.nojob_since > 500000000ull)
		wk_raise(px, WK_FK_BOX_LOST, 0, UINT32_MAX,
			 "the box says job %u is not registered: pboxd restarted, or the job was "
			 "unregistered",
			 px->net.job);
}

/* pbox_finalize()'s barrier: each rank says BYE to rank 0, which answers
 * every rank once all have (or are gone), up to the deadline. */
static void finalize_barrier(struct pbox *px, uint64_t now)
{
	if (!px->net.es.bye_deadline)
		px->net.es.bye_deadline = now + px->net.es.deadline_ns;
	if (px->net.n == 1) {
		px->net.es.bye_done = true;
	} else if (px->net.rank != 0) {
		if (!px->net.es.bye_sent && px->net.peer_fd[0] >= 0)
			rp_send_verb(px->net.peer_fd[0], RP_BYE);
		px->net.es.bye_sent = true;
		if (px->net.peer_fd[0] < 0)
			px->net.es.bye_done = true;
	} else {
		bool all = true;

		for (uint32_t r = 1; r < px->net.n; r++)
			all &= px->net.peer_bye[r] || px->net.peer_fd[r] < 0;
		if (all) {
			for (uint32_t r = 1; r < px->net.n; r++)
				if (px->net.peer_fd[r] >= 0)
					rp_send_verb(px->net.peer_fd[r], RP_BYE);
			px->net.es.bye_done = true;
		}
	}
	if (!px->net.es.bye_done && now >= px->net.es.bye_deadline) {
		wk_log(px, CFG_LOG_WARNING,
		       "finalize: not every rank said BYE within the deadline");
		px->net.es.bye_done = true;
	}
	if (px->net.es.bye_done && px->net.rank == 0)
		wk_boxes_close(px, true);
}

/* A failure raised here, or heard on rank 0 from another rank, to the
 * ranks that do not know it yet, by the line its kind says (FAIL or
 * LEAVE); then TOLD. */
static void tell(struct pbox *px)
{
	enum wk_fkind kind;
	uint32_t from;
	bool due;

	pthread_mutex_lock(&px->mu);
	due = px->fstate == WK_FS_FAILED;
	kind = px->fail_kind;
	from = px->fail_from == UINT32_MAX ? px->net.rank : px->fail_from;
	pthread_mutex_unlock(&px->mu);
	if (!due)
		return;
	if (wk_fail_kinds[kind].verb == RP_LEAVE)
		tell_leaving(px);
	else
		tell_failure(px, from);
	wk_fail_told(px);
}

/* The control side of one engine turn: the ranks' lines, the boxes'
 * connections, REJOIN, heartbeats, telling a failure, the BYE barrier. */
int wk_ctl_turn(struct pbox *px, uint64_t now, bool finalizing)
{
	int lines = peers_poll(px, now);

	boxes_poll(px, now);
	if (px->net.rank != 0 && px->net.peer_fd[0] >= 0) { /* pbox_rejoin(): REJOIN, once */
		pthread_mutex_lock(&px->mu);
		if (px->rejoin_req && !px->rejoin_sent) {
			rp_send_verb(px->net.peer_fd[0], RP_REJOIN);
			px->rejoin_sent = true;
			pthread_cond_broadcast(&px->cv);
		}
		pthread_mutex_unlock(&px->mu);
	}
	heartbeat(px, now);
	tell(px); /* before this rank's caller can exit */
	if (finalizing)
		finalize_barrier(px, now);
	return lines;
}
