/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Local aggregation (BytePS §4.2, CPU-assisted): the ranks of one machine
 * sum among themselves first, and only the machine's leader (its lowest
 * rank) takes part in the network job, with one push per machine. The
 * layout then counts machines, as Theorem 1 assumes: n = machines, B = the
 * machine's NIC.
 *
 * A machine is the ranks that share a data address ([worker]
 * local_aggregation: auto leaves loopback ranks apart, on groups them too,
 * off never groups). The leader listens on an abstract unix socket named
 * after the job and its endpoint (its network namespace's, so only its own
 * machine sees it; the peer's uid checked, and a proof of [job] token);
 * the others connect there instead of joining the network job.
 *
 * Memory: each tensor has one memfd, mapped by every rank of the machine,
 * with a region per local rank; the leader's region takes the sum. The
 * leader passes the memfd over the socket (SCM_RIGHTS) when a rank first
 * uses the tensor. Control: small messages on the socket (SOCK_SEQPACKET),
 * per piece of [tuning] partition_size:
 *
 *   rank j -> leader  IN key round piece     its part is in its region
 *   leader -> rank j  OUT key round piece    the machine's sum is in region 0
 *   rank j -> leader  TAKEN key round piece  it copied the sum out
 *
 * The leader sums a piece (the AVX kernels) as soon as every local part is
 * in, and pushes it to the network job as a tensor of its own (keys from
 * 2^63 up, declared with the tensor so that every leader agrees on them in
 * the order of first use); piece i + 1 is summed while piece i is on the
 * network. The socket is also each side's life line: a rank whose
 * connection closes without BYE has left, and the job fails naming it; a
 * failure of the leader's job reaches every local rank as FAIL.
 *
 * CUDA tensors ([worker] local_cuda = ipc, BytePS §4.2's path for GPUs that
 * reach each other) are summed on the GPU instead, through the CUDA module:
 * each rank has a device buffer per tensor, allocated once and shared by
 * CUDA IPC (its handle in TENSOR, the leader's in TENSOR_OK). A rank copies
 * its input into its buffer (after the caller's stream reached the call)
 * and says IN once the copy has landed; the leader's kernel sums its own
 * input and every buffer into its own, piece by piece, copies the piece to
 * region 0 of the memfd (page-locked) for the network, and the network's
 * sum back to its buffer and its output; then OUT, and each rank copies
 * the piece from the leader's buffer to its output before TAKEN. Messages
 * order the processes; events, polled by this thread, order the device.
 * Host memory in that path carries only what goes on the network.
 *
 * The files, bottom up: local_msg.c (the socket and its messages),
 * local_tensor.c (the tensors, their memory, the ops), local_renew.c
 * (pbox_shrink() and pbox_rejoin() on a machine), local_lead.c (the
 * thread: the leader's pieces and the others' side). This one is the API
 * side and the start and end: the machine's ranks meet, READY or FAIL.
 */

#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_submit.h"
#include "wk_local_msg.h"
#include "wk_local_tensor.h"
#include "wk_local_renew.h"
#include "wk_local_lead.h"
#include "wk_local.h"
#include "local.h"
#include "cuda/stage.h"
#include "sum.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* ---- the API side ------------------------------------------------------- */

int wk_local_declare(struct pbox *px, const char *fn, uint64_t key, uint64_t count,
		     enum pbox_dtype dtype, int prio)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t;
	int rc = PBOX_OK;

	pthread_mutex_lock(&px->mu);
	t = wk_lc_lt_find(lc, key);
	if (t && t->declared)
		rc = wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " declared twice", fn, key);
	else if (!t && !(t = wk_lc_lt_add(lc, key, count, (uint8_t)dtype, prio)))
		rc = wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
	if (rc == PBOX_OK && (t->count != count || t->dtype != (uint8_t)dtype))
		rc = wk_err(PBOX_EMISMATCH, /* first asked for by another rank of the machine */
			    "%s: key %" PRIu64 ": %" PRIu64 " elements of %s, but another rank on "
			    "this machine uses %" PRIu64 " of %s",
			    fn, key, count, sum_dtype_name((enum sum_dtype)dtype), t->count,
			    sum_dtype_name((enum sum_dtype)t->dtype));
	if (rc == PBOX_OK) {
		t->prio = prio;
		t->declared = true;
		if (leader(lc))
			rc = wk_lc_lt_net(px, t, fn);
	}
	pthread_mutex_unlock(&px->mu);
	wk_engine_kick(px);
	return rc;
}

/* Move the tensors declared before the start into the machine's table;
 * the leader declares their pieces to the network job instead. */
int wk_local_adopt(struct pbox *px)
{
	uint32_t n = px->n_t;
	struct wk_tensor **old = px->t;
	int rc = PBOX_OK;

	px->t = NULL;
	px->n_t = px->cap_t = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (rc == PBOX_OK)
			rc = wk_local_declare(px, "pbox_declare", old[i]->key, old[i]->count,
					      (enum pbox_dtype)old[i]->dtype, old[i]->prio);
		wk_tensor_free(old[i]);
	}
	free(old);
	return rc;
}

int wk_local_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		       enum pbox_dtype dtype, bool dev, void *stream, struct pbox_handle **opp)
{
	const struct wk_lcoll c = {.fn = dev ? "pbox_push_pull_cuda" : "pbox_push_pull"};

	return wk_local_collective(px, &c, key, in, out, count, dtype, dev, stream, opp);
}

/* @t's shard kind and root, set by this rank's first call of it: PBOX_OK,
 * or the error (under mu). */
static int same_collective(struct wk_ltensor *t, const struct wk_lcoll *c, uint64_t key)
{
	if (!t->cset) {
		t->ckind = c->kind;
		t->croot = c->root;
		t->grp = c->grp;
		t->cset = true;
		return PBOX_OK;
	}
	if (t->ckind != c->kind || (c->kind && t->croot != c->root))
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": first used by another collective (or root)",
			      c->fn, key);
	return PBOX_OK;
}

int wk_local_collective(struct pbox *px, const struct wk_lcoll *c, uint64_t key, const void *in,
			void *out, uint64_t count, enum pbox_dtype dtype, bool dev, void *stream,
			struct pbox_handle **opp)
{
	const char *fn = c->fn;
	struct wk_local *lc = px->loc;
	struct pbox_handle *op = calloc(1, sizeof(*op));
	struct wk_ltensor *t;
	int rc = PBOX_OK;

	if (!op)
		return wk_err(PBOX_ENOMEM, "%s: key %" PRIu64 ": out of memory", fn, key);
	op->px = px;
	op->in = in;
	op->out = out;
	op->dev = dev;
	/* where the caller's stream is now: the GPU work waits for it */
	if (dev && (rc = wk_lc_cu(px)->mark(px->cuda, stream, &op->cev)) != PBOX_OK) {
		free(op);
		return rc;
	}
	pthread_mutex_lock(&px->mu);
	t = wk_lc_lt_find(lc, key);
	if (px->fail) {
		rc = wk_err(PBOX_EFAILED, "%s: the context failed earlier: %s", fn, px->fail_msg);
	} else if (lc->stop) {
		rc = wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": the context is finalizing", fn, key);
	} else if (t && (t->count != count || t->dtype != (uint8_t)dtype)) {
		rc = wk_err(PBOX_EINVAL,
			    "%s: key %" PRIu64 ": %" PRIu64 " elements of %s, but the "
			    "key was first used with %" PRIu64 " of %s",
			    fn, key, count, sum_dtype_name((enum sum_dtype)dtype), t->count,
			    sum_dtype_name((enum sum_dtype)t->dtype));
	} else if (t && t->kind && t->dev != dev) { /* the machine disagrees: all fail */
		rc = wk_err(PBOX_EMISMATCH,
			    "%s: key %" PRIu64 ": rank %u sums %s memory, but the key is summed "
			    "on this machine as %s memory ([worker] local_cuda, and host or CUDA "
			    "tensors, must be the same on every rank of a machine)",
			    fn, key, lc->world_rank, wk_lc_mem_kind(dev), wk_lc_mem_kind(t->dev));
	} else if (t && t->busy) {
		rc = wk_err(PBOX_ESTATE,
			    "%s: key %" PRIu64 ": a push-pull of it is still in flight", fn, key);
	} else if (!t && !(t = wk_lc_lt_add(lc, key, count, (uint8_t)dtype, 0))) {
		rc = wk_err(PBOX_ENOMEM, "%s: key %" PRIu64 ": out of memory", fn, key);
	}
	if (rc == PBOX_OK)
		rc = same_collective(t, c, key);
	/* the leader's first use puts the pieces into the order of new tensors */
	if (rc == PBOX_OK && leader(lc) && !t->net)
		rc = wk_lc_lt_net(px, t, fn);
	if (rc) {
		pthread_mutex_unlock(&px->mu);
		if (op->cev)
			wk_lc_cu(px)->drop(px->cuda, op->cev);
		free(op);
		if (rc == PBOX_EMISMATCH) {
			char msg[WK_ERR_LEN];

			snprintf(msg, sizeof(msg), "%s", pbox_last_error());
			wk_lc_raise(px, rc, "%s", msg);
			kick(lc);
			wk_err(rc, "%s", msg);
		}
		return rc;
	}
	if (!t->kind) { /* the first word: its kind for good (the thread reads it then) */
		t->kind = true;
		t->dev = dev;
	}
	op->lt = t;
	t->busy = op;
	op->round = t->round++;
	*(lc->q_tail ? &lc->q_tail->next : &lc->q) = op;
	lc->q_tail = op;
	pthread_mutex_unlock(&px->mu);
	wk_engine_kick(px);
	kick(lc);
	*opp = op;
	return PBOX_OK;
}

/* ---- start and end ------------------------------------------------------ */

/* A connection @fd to the leader's socket: its HELLO read and checked.
 * The rank's place (1 to local_size - 1) once in; 0 when it is no rank of
 * this job (closed); -1 when a rank of it disagrees (told, closed, and the
 * start failed by wk_err()). */
static int take_rank(struct pbox *px, int fd, const uint8_t *want, uint64_t deadline)
{
	struct wk_local *lc = px->loc;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	char msg[WK_ERR_LEN];
	struct lmsg m;
	uint32_t j;
	int memfd;
	ssize_t n;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) || cr.uid != geteuid()) {
		close(fd); /* another user's process: not ours to serve */
		return 0;
	}
	n = wk_lc_msg_wait(fd, &m, &memfd, deadline);
	if (memfd >= 0)
		close(memfd);
	for (j = 1; j < lc->local_size && n > 0 && m.type == LM_HELLO; j++)
		if (lc->ranks[j] == m.u.hello.rank)
			break;
	if (n <= 0 || m.type != LM_HELLO || memcmp(m.u.hello.proof, want, LM_PROOF)) {
		close(fd); /* not a rank of this job */
		return 0;
	}
	if (j < lc->local_size && lc->fd[j] < 0 && m.u.hello.world == lc->world_n &&
	    m.u.hello.mode == px->cfg.worker.local_aggregation &&
	    m.u.hello.piece_bytes == lc->piece_bytes) {
		lc->fd[j] = fd;
		lc->pid[j] = (pid_t)m.u.hello.pid;
		return (int)j;
	}
	snprintf(msg, sizeof(msg),
		 "rank %u on this machine disagrees with rank %u, its leader: "
		 "world_size %u/%u, local_aggregation %u/%u, partition_size %" PRIu64 "/%" PRIu64
		 "%s",
		 m.u.hello.rank, lc->world_rank, m.u.hello.world, lc->world_n, m.u.hello.mode,
		 px->cfg.worker.local_aggregation, m.u.hello.piece_bytes, lc->piece_bytes,
		 j == lc->local_size ? " (and it is not a rank of this machine)"
		 : lc->fd[j] >= 0    ? " (and it came twice)"
				     : "");
	wk_lc_say_fail(lc, fd, PBOX_EMISMATCH, 0, msg);
	close(fd);
	wk_err(PBOX_EMISMATCH, "pbox_start: %s", msg);
	return -1;
}

/* Leader: every local rank's HELLO, before the network job starts. */
static int accept_ranks(struct pbox *px, uint64_t deadline)
{
	struct wk_local *lc = px->loc;
	uint8_t want[LM_PROOF];
	struct sockaddr_un a;
	socklen_t alen = wk_lc_sock_name(px, &a);
	uint32_t seen = 1;
	char who[256] = "";
	size_t off = 0;

	wk_lc_proof(px, want);
	lc->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (lc->lfd < 0 || bind(lc->lfd, (struct sockaddr *)&a, alen) || listen(lc->lfd, 64))
		return wk_err(PBOX_ENET, "pbox_start: the machine's socket @%s: %s", a.sun_path + 1,
			      strerror(errno));
	while (seen < lc->local_size) {
		struct pollfd p = {.fd = lc->lfd, .events = POLLIN};
		uint64_t now = wk_now();
		int fd, j;

		if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
			break;
		fd = accept4(lc->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		j = take_rank(px, fd, want, deadline);
		if (j < 0)
			return PBOX_EMISMATCH;
		seen += j > 0;
	}
	close(lc->lfd);
	lc->lfd = -1;
	if (seen == lc->local_size)
		return PBOX_OK;
	for (uint32_t j = 1; j < lc->local_size; j++)
		if (lc->fd[j] < 0 && off < sizeof(who) - 16)
			off += (size_t)snprintf(who + off, sizeof(who) - off, "%s%u",
						off ? ", " : "", lc->ranks[j]);
	return wk_err(PBOX_ETIMEDOUT,
		      "pbox_start: rank%s %s on this machine never came to its leader, "
		      "rank %u",
		      strchr(who, ',') ? "s" : "", who, lc->world_rank);
}

/* The others: HELLO to the leader, then its READY (or FAIL). */
static int join_leader(struct pbox *px, uint64_t deadline)
{
	struct wk_local *lc = px->loc;
	struct sockaddr_un a;
	socklen_t alen = wk_lc_sock_name(px, &a);
	struct lmsg m = {.type = LM_HELLO};
	int memfd;
	ssize_t n;

	m.u.hello.rank = lc->world_rank;
	m.u.hello.world = lc->world_n;
	m.u.hello.mode = px->cfg.worker.local_aggregation;
	m.u.hello.pid = (uint32_t)getpid();
	m.u.hello.piece_bytes = lc->piece_bytes;
	wk_lc_proof(px, m.u.hello.proof);
	for (;;) { /* until the leader listens */
		lc->fd[0] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
		if (lc->fd[0] < 0)
			return wk_err(PBOX_ENET, "pbox_start: socket: %s", strerror(errno));
		if (connect(lc->fd[0], (struct sockaddr *)&a, alen) == 0)
			break;
		close(lc->fd[0]);
		lc->fd[0] = -1;
		if (wk_now() >= deadline)
			return wk_err(PBOX_ETIMEDOUT,
				      "pbox_start: rank %u, this machine's leader, never listened "
				      "at @%s",
				      lc->ranks[0], a.sun_path + 1);
		usleep(20000);
	}
	if (wk_lc_msg_send(lc->fd[0], &m, sizeof(m), -1))
		return wk_err(PBOX_ENET, "pbox_start: to rank %u, this machine's leader: %s",
			      lc->ranks[0], strerror(errno));
	n = wk_lc_msg_wait(lc->fd[0], &m, &memfd, deadline);
	if (memfd >= 0)
		close(memfd);
	if (n > 0 && m.type == LM_READY && (size_t)n == LM_SHORT + sizeof(m.u.ready)) {
		lc->li = m.u.ready;
		return PBOX_OK;
	}
	if (n > 0 && m.type == LM_FAIL)
		return wk_err(m.code < 0 ? m.code : PBOX_EPEER,
			      "pbox_start: rank %u, this "
			      "machine's leader: %s",
			      lc->ranks[0], m.u.text);
	return wk_err(n == 0 ? PBOX_ETIMEDOUT : PBOX_EPEER,
		      "pbox_start: rank %u, this machine's leader, %s", lc->ranks[0],
		      n == 0 ? "said nothing before the deadline" : "closed its connection");
}

int wk_local_start(struct pbox *px, uint64_t deadline)
{
	struct wk_local *lc = px->loc;
	uint32_t nfd = leader(lc) ? lc->local_size : 1;

	lc->fd = malloc(nfd * sizeof(int));
	lc->bye = calloc(nfd, sizeof(bool));
	lc->rejoin = calloc(nfd, sizeof(bool));
	lc->pid = calloc(nfd, sizeof(pid_t));
	lc->acc = malloc(lc->piece_bytes / 2 * sizeof(float) + 64);
	lc->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!lc->fd || !lc->bye || !lc->rejoin || !lc->pid || !lc->acc || lc->efd < 0)
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	for (uint32_t j = 0; j < nfd; j++)
		lc->fd[j] = -1;
	return leader(lc) ? accept_ranks(px, deadline) : join_leader(px, deadline);
}

int wk_local_ready(struct pbox *px, int rc)
{
	struct wk_local *lc = px->loc;
	struct lmsg m = {.type = LM_READY};

	if (rc == PBOX_OK && leader(lc)) {
		rc = wk_lc_leader_layout(px, &m.u.ready);
		if (rc == PBOX_OK)
			for (uint32_t j = 1; j < lc->local_size; j++)
				if (wk_lc_msg_send(lc->fd[j], &m, LM_SHORT + sizeof(m.u.ready), -1))
					rc = wk_err(PBOX_ENET,
						    "pbox_start: to rank %u on this machine: %s",
						    lc->ranks[j], strerror(errno));
	}
	if (rc != PBOX_OK && leader(lc)) {
		char msg[WK_ERR_LEN];

		snprintf(msg, sizeof(msg), "%s", pbox_last_error());
		for (uint32_t j = 1; j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				wk_lc_say_fail(lc, lc->fd[j], rc, 0, msg);
		wk_err(rc, "%s", msg);
	}
	if (rc == PBOX_OK) {
		int e = pthread_create(&lc->thr, NULL, wk_lc_thread, px);

		if (e)
			return wk_err(PBOX_ENOMEM, "pbox_start: the local aggregation thread: %s",
				      strerror(e));
		lc->thr_started = true;
	}
	return rc;
}

void wk_local_stop(struct pbox *px)
{
	struct wk_local *lc = px->loc;

	if (!lc || !lc->thr_started)
		return;
	pthread_mutex_lock(&px->mu);
	lc->stop = true;
	pthread_mutex_unlock(&px->mu);
	kick(lc);
	pthread_join(lc->thr, NULL);
	lc->thr_started = false;
}

void wk_local_free(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	uint32_t nfd;

	if (!lc)
		return;
	nfd = leader(lc) ? lc->local_size : 1;
	for (uint32_t j = 0; lc->fd && j < nfd; j++)
		if (lc->fd[j] >= 0)
			close(lc->fd[j]);
	if (lc->lfd >= 0)
		close(lc->lfd);
	if (lc->efd >= 0)
		close(lc->efd);
	for (uint32_t i = 0; i < lc->n_t; i++)
		wk_lc_lt_free(lc->t[i], lc->local_size);
	free(lc->t);
	free(lc->act);
	free(lc->fd);
	free(lc->bye);
	free(lc->rejoin);
	free(lc->pid);
	free(lc->acc);
	free(lc->leader_of);
	free(lc->ranks);
	free(lc->mach_of);
	free(lc->gone);
	free(lc->world_peers);
	free(lc);
	px->loc = NULL;
}

int pbox_machine(const struct pbox *px, struct pbox_machine_info *o)
{
	if (!px || !o)
		return wk_err(PBOX_EINVAL, "pbox_machine: a NULL argument");
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "pbox_machine: before pbox_start()");
	memset(o, 0, sizeof(*o));
	if (!px->loc) {
		o->machines = px->net.n;
		o->machine = px->net.rank;
		o->local_size = 1;
		o->leader = px->net.rank;
		return PBOX_OK;
	}
	o->machines = px->loc->machines;
	o->machine = px->loc->machine;
	o->local_rank = px->loc->local_rank;
	o->local_size = px->loc->local_size;
	o->leader = px->loc->ranks[0];
	return PBOX_OK;
}
