/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Local aggregation's tensors: the machine's table (by key, under mu), each
 * tensor's memfd regions and its pieces declared to the network job, the
 * CUDA side (device buffers shared by IPC, the GPU's sums and copies), and
 * the local thread's ops completed or failed.
 */
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_submit.h"
#include "wk_local_msg.h"
#include "wk_local_tensor.h"
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

uint64_t wk_lc_piece_key(uint64_t key, uint32_t i)
{
	return wk_cuda_piece_key(key ^ 0x6c6f63616c616767ull /* "localagg" */, i);
}

/* ---- tensors ------------------------------------------------------------ */

struct wk_ltensor *wk_lc_lt_find(const struct wk_local *lc, uint64_t key)
{
	uint32_t lo = 0, hi = lc->n_t;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (lc->t[mid]->key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < lc->n_t && lc->t[lo]->key == key ? lc->t[lo] : NULL;
}

struct wk_ltensor *wk_lc_lt_add(struct wk_local *lc, uint64_t key, uint64_t count, uint8_t dtype,
				int prio)
{
	size_t esz = sum_dtype_size((enum sum_dtype)dtype);
	struct wk_ltensor *t;
	uint32_t at = 0;

	if (lc->n_t == lc->cap_t) {
		uint32_t cap = lc->cap_t ? lc->cap_t * 2 : 64;
		struct wk_ltensor **v = realloc(lc->t, cap * sizeof(*v));

		if (!v)
			return NULL;
		lc->t = v;
		lc->cap_t = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->key = key;
	t->count = count;
	t->dtype = dtype;
	t->prio = prio;
	t->bytes = count * esz;
	t->stride = (t->bytes + 4095) & ~4095ull;
	t->piece_elems = lc->piece_bytes / esz;
	t->n_pieces = (uint32_t)((count + t->piece_elems - 1) / t->piece_elems);
	t->memfd = -1;
	t->comp = t->rcomp = -1;
	while (at < lc->n_t && lc->t[at]->key < key)
		at++;
	memmove(&lc->t[at + 1], &lc->t[at], (lc->n_t - at) * sizeof(*lc->t));
	lc->t[at] = t;
	lc->n_t++;
	return t;
}

void wk_lc_lt_free(struct wk_ltensor *t, uint32_t local_size)
{
	if (t->map)
		munmap(t->map, t->stride * local_size);
	if (t->memfd >= 0)
		close(t->memfd);
	free(t->in);
	free(t->taken);
	free(t->sub);
	free(t->st);
	free(t->dpeer);
	free(t->ev);
	free(t);
}

/* Leader: declare @t's pieces to the network job (under mu). */
int wk_lc_lt_net(struct pbox *px, struct wk_ltensor *t, const char *fn)
{
	for (uint32_t i = 0; i < t->n_pieces && !t->net; i++) {
		uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;
		struct wk_tensor *nt;
		int rc = wk_add_tensor(px, fn, wk_lc_piece_key(t->key, i),
				       n < t->piece_elems ? n : t->piece_elems,
				       (enum pbox_dtype)t->dtype, t->prio, &nt);

		if (rc)
			return rc;
		if (t->ckind) /* a shard's pieces: rooted at its root's machine */
			wk_tensor_rooted(nt, t->ckind, px->loc->mach_of[t->croot], t->grp);
		else if (t->comp >= 0 && nt->resid) { /* chosen before its pieces existed */
			nt->comp = (uint8_t)t->comp;
			nt->rcomp = (uint8_t)t->rcomp;
			nt->gather = t->gather;
		}
	}
	t->net = true;
	return PBOX_OK;
}

/*
 * pbox_set_compression() with local aggregation: a machine's leader pushes
 * its tensors' pieces, so its choice is the machine's (each rank calls it,
 * as it calls every collective); the others check it the same way.
 */
int wk_local_set_compression(struct pbox *px, const char *fn, uint64_t key, int comp, int rcomp,
			     bool gather)
{
	struct wk_ltensor *t;
	int rc = PBOX_OK;

	pthread_mutex_lock(&px->mu);
	t = wk_lc_lt_find(px->loc, key);
	if (!t) {
		rc = wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " is not declared or used yet", fn,
			    key);
	} else if (t->dtype != SUM_FP32) {
		rc = wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " is %s: only fp32 tensors compress",
			    fn, key, sum_dtype_name((enum sum_dtype)t->dtype));
	} else {
		t->comp = comp;
		t->rcomp = rcomp;
		t->gather = gather;
		for (uint32_t i = 0; t->net && i < t->n_pieces; i++) {
			struct wk_tensor *nt = wk_find_tensor(px, wk_lc_piece_key(key, i));

			if (nt && nt->resid) {
				nt->comp = (uint8_t)comp;
				nt->rcomp = (uint8_t)rcomp;
				nt->gather = gather;
			}
		}
	}
	pthread_mutex_unlock(&px->mu);
	return rc;
}

/* Map @t's memory (the leader creates it: @memfd < 0); 0 or -1 with errno. */
int wk_lc_lt_map(const struct wk_local *lc, struct wk_ltensor *t, int memfd)
{
	size_t len = t->stride * lc->local_size;

	if (memfd < 0) {
		memfd = memfd_create("pbox-local", MFD_CLOEXEC);
		if (memfd < 0)
			return -1;
		if (ftruncate(memfd, (off_t)len) != 0) {
			close(memfd);
			return -1;
		}
	} else {
		off_t end = lseek(memfd, 0, SEEK_END);

		if (end != (off_t)len) { /* the leader's tensor is another size */
			close(memfd);
			errno = EPROTO;
			return -1;
		}
	}
	t->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (t->map == MAP_FAILED) {
		t->map = NULL;
		close(memfd);
		return -1;
	}
	t->memfd = memfd;
	if (!leader(lc))
		return 0;
	t->in = calloc((size_t)lc->local_size * t->n_pieces, sizeof(uint32_t));
	t->taken = malloc(t->n_pieces * sizeof(uint32_t));
	t->sub = calloc(t->n_pieces, sizeof(*t->sub));
	t->st = calloc(t->n_pieces, 1);
	if (!t->in || !t->taken || !t->sub || !t->st) {
		errno = ENOMEM;
		return -1;
	}
	for (uint32_t i = 0; i < t->n_pieces; i++)
		t->taken[i] = lc->local_size - 1; /* nobody waits for an earlier result */
	return 0;
}

/* ---- CUDA tensors: the device side ---------------------------------------- */

const struct wk_cuda_ops *wk_lc_cu(const struct pbox *px)
{
	return px->cuda_ops;
}

/* @t's device side on this rank: its buffer and IPC handle, the table of
 * opened buffers, the pieces' events; the leader's region 0 (mapped
 * already) page-locked for the copies to and from the network. PBOX_OK, or
 * a PBOX_E* with the error set. */
int wk_lc_lt_gpu(struct pbox *px, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;
	int rc;

	if (t->dbuf)
		return PBOX_OK;
	if (!t->dpeer)
		t->dpeer = calloc(lc->local_size, sizeof(*t->dpeer));
	if (!t->ev)
		t->ev = calloc(t->n_pieces, sizeof(*t->ev));
	if (!t->dpeer || !t->ev)
		return wk_err(PBOX_ENOMEM, "key %" PRIu64 ": out of memory", t->key);
	rc = wk_lc_cu(px)->dev_alloc(px->cuda, t->bytes, &t->dbuf, &t->dh);
	if (rc)
		return rc;
	if (leader(lc) && wk_lc_cu(px)->host_pin(px->cuda, t->map, t->stride) == PBOX_OK)
		t->pinned = true;
	else if (leader(lc))
		wk_log(px, CFG_LOG_WARNING,
		       "key %" PRIu64 ": its host memory for the network is not page-locked "
		       "(%s): its copies to and from the GPU are slower",
		       t->key, pbox_last_error());
	return PBOX_OK;
}

/* Wait for @t's copies and sums in flight, and forget them. */
static void lt_gpu_quiet(const struct pbox *px, struct wk_ltensor *t)
{
	for (uint32_t i = 0; t->ev && i < t->n_pieces; i++)
		if (t->ev[i]) {
			wk_lc_cu(px)->drop(px->cuda, t->ev[i]);
			t->ev[i] = NULL;
		}
	if (t->ev_in) {
		wk_lc_cu(px)->drop(px->cuda, t->ev_in);
		t->ev_in = NULL;
	}
}

/* @t's device side given back (the local thread, at its end). */
void wk_lc_lt_gpu_free(const struct pbox *px, struct wk_ltensor *t)
{
	if (!t->dev || !wk_lc_cu(px))
		return;
	lt_gpu_quiet(px, t);
	for (uint32_t j = 0; t->dpeer && j < px->loc->local_size; j++)
		if (t->dpeer[j]) {
			wk_lc_cu(px)->dev_free(px->cuda, t->dpeer[j], 1);
			t->dpeer[j] = NULL;
		}
	if (t->dbuf)
		wk_lc_cu(px)->dev_free(px->cuda, t->dbuf, 0);
	t->dbuf = NULL;
	if (t->pinned)
		wk_lc_cu(px)->host_unpin(px->cuda, t->map);
	t->pinned = false;
}

/* Leader: piece @i of @op summed on the GPU (its own input first, then
 * every local rank's buffer) into its buffer, then copied to region 0 for
 * the network; t->ev[i] answers for both. */
int wk_lc_gpu_sum(struct pbox *px, struct pbox_handle *op, uint32_t i, uint64_t first, uint64_t n)
{
	const struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);
	const void *src[WK_CUDA_SUM_MAX];
	uint64_t off = first * esz;
	int rc;

	if (lc->local_size > WK_CUDA_SUM_MAX)
		return wk_err(PBOX_EINVAL,
			      "key %" PRIu64 ": %u ranks on this machine, and the GPU sums at most "
			      "%d: set [worker] local_cuda = host",
			      t->key, lc->local_size, WK_CUDA_SUM_MAX);
	src[0] = op->in + off;
	for (uint32_t j = 1; j < lc->local_size; j++)
		src[j] = (const uint8_t *)t->dpeer[j] + off;
	rc = wk_lc_cu(px)->sum(px->cuda, (uint8_t *)t->dbuf + off, src, lc->local_size, n,
			       (enum pbox_dtype)t->dtype, op->cev, NULL);
	return rc ? rc
		  : wk_lc_cu(px)->copy(px->cuda, t->map + off, (uint8_t *)t->dbuf + off, n * esz,
				       NULL, &t->ev[i]);
}

/* Leader: the network's sum of piece @i back to its buffer (whence the
 * others take it) and to its output; t->ev[i] answers for both. */
int wk_lc_gpu_back(struct pbox *px, struct pbox_handle *op, uint32_t i, uint64_t first, uint64_t n)
{
	struct wk_ltensor *t = op->lt;
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);
	uint64_t off = first * esz;
	uint8_t *d = (uint8_t *)t->dbuf + off;
	int rc = wk_lc_cu(px)->copy(px->cuda, d, t->map + off, n * esz, NULL, NULL);

	return rc ? rc : wk_lc_cu(px)->copy(px->cuda, op->out + off, d, n * esz, NULL, &t->ev[i]);
}

/* What a rank sums a key in, for the messages: "CUDA" or "host" memory. */
const char *wk_lc_mem_kind(bool dev)
{
	return dev ? "CUDA" : "host";
}

/* Complete @op (the local thread; takes mu). */
void wk_lc_op_done(struct pbox *px, struct pbox_handle *op, int status, const char *msg)
{
	if (op->cev) { /* long passed: the work that waited for it is over */
		wk_lc_cu(px)->drop(px->cuda, op->cev);
		op->cev = NULL;
	}
	pthread_mutex_lock(&px->mu);
	op->status = status;
	if (msg)
		snprintf(op->msg, sizeof(op->msg), "%s", msg);
	op->done = true;
	if (op->lt->busy == op)
		op->lt->busy = NULL;
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
}

/* ---- the local thread --------------------------------------------------- */

/* Fail this rank (the others: what the leader or the socket said). */
void wk_lc_raise(struct pbox *px, int code, const char *fmt, ...)
{
	char msg[WK_ERR_LEN];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* on the leader, the network job's failure: every rank hears it */
	wk_raise(px, WK_FK_LOCAL, code, 0, "%s", msg);
}

/* The push-pulls the API queued since the last look (the thread's now). */
struct pbox_handle *wk_lc_take_queue(struct pbox *px)
{
	struct pbox_handle *op;

	pthread_mutex_lock(&px->mu);
	op = px->loc->q;
	px->loc->q = px->loc->q_tail = NULL;
	pthread_mutex_unlock(&px->mu);
	return op;
}

/* @t's work still in flight once its op failed: the GPU's copies and sums
 * waited for (the caller's memory is not touched after its op ends); the
 * leader's pieces on the network end with the job's failure, or with
 * finalize (the engine still runs). */
void wk_lc_release(const struct pbox *px, struct wk_ltensor *t)
{
	if (t->dev)
		lt_gpu_quiet(px, t);
	for (uint32_t i = 0; t->sub && i < t->n_pieces; i++)
		if (t->sub[i]) {
			pbox_wait(t->sub[i]);
			t->sub[i] = NULL;
		}
}

/* Every op fails with @code and @msg; the leader tells its ranks, once,
 * and a rank whose own failure it is tells the leader. */
void wk_lc_fail_ops(struct pbox *px, int code, const char *msg)
{
	wk_lc_fail_taken(px, wk_lc_take_queue(px), code, msg);
}

void wk_lc_fail_taken(struct pbox *px, struct pbox_handle *op, int code, const char *msg)
{
	struct wk_local *lc = px->loc;
	bool left;

	while (op) {
		struct pbox_handle *next = op->next;

		wk_lc_op_done(px, op, code, msg);
		op = next;
	}
	pthread_mutex_lock(&px->mu);
	left = lc->left;
	pthread_mutex_unlock(&px->mu);
	for (uint32_t a = 0; a < lc->n_act; a++) {
		wk_lc_release(px, lc->act[a]->lt);
		wk_lc_op_done(px, lc->act[a], code, msg);
	}
	lc->n_act = 0;
	if (!lc->told && leader(lc))
		for (uint32_t j = 1; j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				wk_lc_say_fail(lc, lc->fd[j], code, left ? LMF_LEFT : 0, msg);
	if (!lc->told && !leader(lc) && lc->fd[0] >= 0)
		wk_lc_say_fail(lc, lc->fd[0], code, 0, msg);
	lc->told = true;
}

struct wk_ltensor *wk_lc_lt_get(struct pbox *px, uint64_t key)
{
	struct wk_ltensor *t;

	pthread_mutex_lock(&px->mu);
	t = wk_lc_lt_find(px->loc, key);
	pthread_mutex_unlock(&px->mu);
	return t;
}
