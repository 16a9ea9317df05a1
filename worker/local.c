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
 */
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_fail.h"
#include "wk_submit.h"
#include "wk_local.h"
#include "local.h"
#include "cuda/stage.h"
#include "sum.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sodium.h>
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

enum {
	LM_HELLO = 1,
	LM_READY,
	LM_FAIL,
	LM_TENSOR,
	LM_TENSOR_OK,
	LM_IN,
	LM_OUT,
	LM_TAKEN,
	LM_BYE,
	LM_GONE,
	LM_RENEW,
	LM_REJOIN
};

enum {
	LMF_DEV = 1,   /* TENSOR, TENSOR_OK: a CUDA tensor; u.ipc the sender's buffer */
	LMF_LEFT = 2,  /* FAIL: this machine left the job; its ranks cannot go on */
	LMF_RENEW = 4, /* FAIL: the renewal (pbox_shrink(), pbox_rejoin()) failed */
};

#define LM_GONE_MAX 64 /* machines named by one GONE */

/* A piece at the leader: waiting for its parts, on the network, its result
 * out; CUDA tensors: summed on the GPU and copied for the network, its
 * result copied back to the GPU. */
enum { PC_WAIT, PC_NET, PC_DONE, PC_SUM, PC_BACK };

#define LM_PROOF 16

/* One message; the short ones end before @u. */
struct lmsg {
	uint8_t type;
	uint8_t dtype;
	uint16_t flags; /* LMF_* */
	int32_t code;	/* FAIL */
	uint32_t epoch; /* the machine's incarnation: others' messages are stale */
	uint32_t round, piece;
	uint64_t key, count; /* GONE: count the machines in u.gone */
	union {
		struct {
			uint32_t rank, world, mode, pid;
			uint64_t piece_bytes;
			uint8_t proof[LM_PROOF];
		} hello;
		struct pbox_layout_info ready;
		struct wk_cuda_ipc ipc;
		uint32_t gone[LM_GONE_MAX];
		char text[WK_ERR_LEN];
	} u;
};
#define LM_SHORT offsetof(struct lmsg, u)

/* A tensor as the machine holds it. */
struct wk_ltensor {
	uint64_t key, count, bytes, stride; /* stride: a region's size, page-aligned */
	uint8_t dtype;
	int prio;
	uint32_t n_pieces;
	uint64_t piece_elems;
	int memfd;
	uint8_t *map;		  /* local_size regions; the leader's, 0, takes the sum */
	bool net;		  /* leader: its pieces declared to the network job */
	bool declared;		  /* by pbox_declare() on this rank */
	int comp;		  /* pbox_set_compression() here (-1: the job's) */
	bool asked;		  /* the others: the memfd asked for */
	struct pbox_handle *busy; /* this rank's push-pull of it (under mu) */
	uint32_t round;		  /* this rank's next */
	/* leader, local thread only */
	uint32_t *in;		  /* [j * n_pieces + i]: rank j's round in piece i, + 1 */
	uint32_t *taken;	  /* [i]: ranks that took the last result of piece i */
	struct pbox_handle **sub; /* [i]: its network push-pull */
	uint8_t *st;		  /* [i]: this rank's op: PC_* */
	/* CUDA tensors summed on the GPU */
	bool kind;	       /* dev below is settled (by a push-pull or a TENSOR) */
	bool dev;	       /* CUDA memory, summed on the GPU */
	bool pinned;	       /* leader: region 0 page-locked */
	void *dbuf;	       /* this rank's device buffer (the leader's takes the sum) */
	struct wk_cuda_ipc dh; /* its IPC handle */
	void **dpeer;	       /* leader: [j] rank j's buffer; the others: [0] the leader's */
	void **ev;	       /* [i]: piece i's copy or sum in flight */
	void *ev_in;	       /* the others: the copy of the input into dbuf */
};

static uint64_t local_piece_key(uint64_t key, uint32_t i)
{
	return wk_cuda_piece_key(key ^ 0x6c6f63616c616767ull /* "localagg" */, i);
}

static void proof(const struct pbox *px, uint8_t *out)
{
	uint8_t in[24] = "pbox-local";

	memcpy(in + 8, &px->cfg.job.token, 8);
	memcpy(in + 16, &px->cfg.job.id, 4);
	crypto_generichash(out, LM_PROOF, in, sizeof(in), NULL, 0);
}

/* The socket's abstract name: the job and the leader's endpoint. */
static socklen_t sock_name(const struct pbox *px, struct sockaddr_un *a)
{
	const struct cfg_hostport *l = &px->loc->world_peers[px->loc->ranks[0]];
	char ip[INET_ADDRSTRLEN];
	int n;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "pbox/%u/%s:%u", px->cfg.job.id,
		     wk_ipstr(l->ip_be, ip), l->port);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* ---- messages ----------------------------------------------------------- */

static int msg_send(int fd, const struct lmsg *m, size_t len, int memfd)
{
	struct iovec iov = {.iov_base = (void *)m, .iov_len = len};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (memfd >= 0) {
		struct cmsghdr *c;

		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = sizeof(cm.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &memfd, sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -1;
}

static int say(const struct wk_local *lc, int fd, uint8_t type, uint64_t key, uint32_t round,
	       uint32_t piece)
{
	struct lmsg m = {
		.type = type, .epoch = lc->epoch, .key = key, .round = round, .piece = piece};

	return msg_send(fd, &m, LM_SHORT, -1);
}

static int say_fail(const struct wk_local *lc, int fd, int code, uint16_t flags, const char *msg)
{
	struct lmsg m = {.type = LM_FAIL, .flags = flags, .code = code, .epoch = lc->epoch};

	snprintf(m.u.text, sizeof(m.u.text), "%s", msg);
	return msg_send(fd, &m, LM_SHORT + strlen(m.u.text) + 1, -1);
}

/* A message (and a passed descriptor into *@memfd, else -1): its length,
 * 0 the peer closed, -1 an error or nothing yet (non-blocking). */
static ssize_t msg_recv(int fd, struct lmsg *m, int *memfd, int flags)
{
	struct iovec iov = {.iov_base = m, .iov_len = sizeof(*m)};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cm;
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cm.buf,
			    .msg_controllen = sizeof(cm.buf)};
	ssize_t n;

	*memfd = -1;
	memset(m, 0, LM_SHORT);
	n = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len == CMSG_LEN(sizeof(int)))
			memcpy(memfd, CMSG_DATA(c), sizeof(int));
	if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (size_t)n < LM_SHORT) {
		if (*memfd >= 0)
			close(*memfd);
		*memfd = -1;
		errno = EPROTO;
		return -1;
	}
	if ((m->type == LM_TENSOR || m->type == LM_TENSOR_OK) && (m->flags & LMF_DEV) &&
	    (size_t)n < LM_SHORT + sizeof(m->u.ipc)) {
		if (*memfd >= 0)
			close(*memfd);
		*memfd = -1;
		errno = EPROTO; /* a CUDA tensor's message without its handle */
		return -1;
	}
	if (m->type == LM_FAIL || m->type == LM_HELLO)
		m->u.text[sizeof(m->u.text) - 1] = 0; /* FAIL: bounded; HELLO: fixed fields */
	return n;
}

/* A message within @deadline (blocking): as msg_recv(), 0 also on timeout. */
static ssize_t msg_wait(int fd, struct lmsg *m, int *memfd, uint64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	uint64_t now = wk_now();

	*memfd = -1;
	if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
		return 0;
	return msg_recv(fd, m, memfd, 0);
}

/* ---- the plan: which ranks share a machine ------------------------------- */

/* The leader's layout, told to its machine's ranks (READY, RENEW): the
 * network job's, in the world's numbers. */
static int leader_layout(const struct pbox *px, struct pbox_layout_info *o)
{
	memset(o, 0, sizeof(*o));
	wk_net_layout(px, o);
	return wk_local_layout(px, o);
}

/* ---- tensors ------------------------------------------------------------ */

static struct wk_ltensor *lt_find(const struct wk_local *lc, uint64_t key)
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

static struct wk_ltensor *lt_add(struct wk_local *lc, uint64_t key, uint64_t count, uint8_t dtype,
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
	t->comp = -1;
	while (at < lc->n_t && lc->t[at]->key < key)
		at++;
	memmove(&lc->t[at + 1], &lc->t[at], (lc->n_t - at) * sizeof(*lc->t));
	lc->t[at] = t;
	lc->n_t++;
	return t;
}

static void lt_free(struct wk_ltensor *t, uint32_t local_size)
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
static int lt_net(struct pbox *px, struct wk_ltensor *t, const char *fn)
{
	for (uint32_t i = 0; i < t->n_pieces && !t->net; i++) {
		uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;
		struct wk_tensor *nt;
		int rc = wk_add_tensor(px, fn, local_piece_key(t->key, i),
				       n < t->piece_elems ? n : t->piece_elems,
				       (enum pbox_dtype)t->dtype, t->prio, &nt);

		if (rc)
			return rc;
		if (t->comp >= 0 && nt->resid) /* chosen before its pieces existed */
			nt->comp = (uint8_t)t->comp;
	}
	t->net = true;
	return PBOX_OK;
}

/*
 * pbox_set_compression() with local aggregation: a machine's leader pushes
 * its tensors' pieces, so its choice is the machine's (each rank calls it,
 * as it calls every collective); the others check it the same way.
 */
int wk_local_set_compression(struct pbox *px, const char *fn, uint64_t key, int comp)
{
	struct wk_ltensor *t;
	int rc = PBOX_OK;

	pthread_mutex_lock(&px->mu);
	t = lt_find(px->loc, key);
	if (!t) {
		rc = wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " is not declared or used yet", fn,
			    key);
	} else if (t->dtype != SUM_FP32) {
		rc = wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " is %s: only fp32 tensors compress",
			    fn, key, sum_dtype_name((enum sum_dtype)t->dtype));
	} else {
		t->comp = comp;
		for (uint32_t i = 0; t->net && i < t->n_pieces; i++) {
			struct wk_tensor *nt = wk_find_tensor(px, local_piece_key(key, i));

			if (nt && nt->resid)
				nt->comp = (uint8_t)comp;
		}
	}
	pthread_mutex_unlock(&px->mu);
	return rc;
}

/* Map @t's memory (the leader creates it: @memfd < 0); 0 or -1 with errno. */
static int lt_map(const struct wk_local *lc, struct wk_ltensor *t, int memfd)
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

static const struct wk_cuda_ops *cu(const struct pbox *px)
{
	return px->cuda_ops;
}

/* @t's device side on this rank: its buffer and IPC handle, the table of
 * opened buffers, the pieces' events; the leader's region 0 (mapped
 * already) page-locked for the copies to and from the network. PBOX_OK, or
 * a PBOX_E* with the error set. */
static int lt_gpu(struct pbox *px, struct wk_ltensor *t)
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
	rc = cu(px)->dev_alloc(px->cuda, t->bytes, &t->dbuf, &t->dh);
	if (rc)
		return rc;
	if (leader(lc) && cu(px)->host_pin(px->cuda, t->map, t->stride) == PBOX_OK)
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
			cu(px)->drop(px->cuda, t->ev[i]);
			t->ev[i] = NULL;
		}
	if (t->ev_in) {
		cu(px)->drop(px->cuda, t->ev_in);
		t->ev_in = NULL;
	}
}

/* @t's device side given back (the local thread, at its end). */
static void lt_gpu_free(const struct pbox *px, struct wk_ltensor *t)
{
	if (!t->dev || !cu(px))
		return;
	lt_gpu_quiet(px, t);
	for (uint32_t j = 0; t->dpeer && j < px->loc->local_size; j++)
		if (t->dpeer[j]) {
			cu(px)->dev_free(px->cuda, t->dpeer[j], 1);
			t->dpeer[j] = NULL;
		}
	if (t->dbuf)
		cu(px)->dev_free(px->cuda, t->dbuf, 0);
	t->dbuf = NULL;
	if (t->pinned)
		cu(px)->host_unpin(px->cuda, t->map);
	t->pinned = false;
}

/* Leader: piece @i of @op summed on the GPU (its own input first, then
 * every local rank's buffer) into its buffer, then copied to region 0 for
 * the network; t->ev[i] answers for both. */
static int gpu_sum(struct pbox *px, struct pbox_handle *op, uint32_t i, uint64_t first, uint64_t n)
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
	rc = cu(px)->sum(px->cuda, (uint8_t *)t->dbuf + off, src, lc->local_size, n,
			 (enum pbox_dtype)t->dtype, op->cev, NULL);
	return rc ? rc
		  : cu(px)->copy(px->cuda, t->map + off, (uint8_t *)t->dbuf + off, n * esz, NULL,
				 &t->ev[i]);
}

/* Leader: the network's sum of piece @i back to its buffer (whence the
 * others take it) and to its output; t->ev[i] answers for both. */
static int gpu_back(struct pbox *px, struct pbox_handle *op, uint32_t i, uint64_t first, uint64_t n)
{
	struct wk_ltensor *t = op->lt;
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);
	uint64_t off = first * esz;
	uint8_t *d = (uint8_t *)t->dbuf + off;
	int rc = cu(px)->copy(px->cuda, d, t->map + off, n * esz, NULL, NULL);

	return rc ? rc : cu(px)->copy(px->cuda, op->out + off, d, n * esz, NULL, &t->ev[i]);
}

static void local_fail(struct pbox *px, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* What a rank sums a key in, for the messages: "CUDA" or "host" memory. */
static const char *mem_kind(bool dev)
{
	return dev ? "CUDA" : "host";
}

/* ---- the API side ------------------------------------------------------- */

int wk_local_declare(struct pbox *px, const char *fn, uint64_t key, uint64_t count,
		     enum pbox_dtype dtype, int prio)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t;
	int rc = PBOX_OK;

	pthread_mutex_lock(&px->mu);
	t = lt_find(lc, key);
	if (t && t->declared)
		rc = wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " declared twice", fn, key);
	else if (!t && !(t = lt_add(lc, key, count, (uint8_t)dtype, prio)))
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
			rc = lt_net(px, t, fn);
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
	const char *fn = dev ? "pbox_push_pull_cuda" : "pbox_push_pull";
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
	if (dev && (rc = cu(px)->mark(px->cuda, stream, &op->cev)) != PBOX_OK) {
		free(op);
		return rc;
	}
	pthread_mutex_lock(&px->mu);
	t = lt_find(lc, key);
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
			    fn, key, lc->world_rank, mem_kind(dev), mem_kind(t->dev));
	} else if (t && t->busy) {
		rc = wk_err(PBOX_ESTATE,
			    "%s: key %" PRIu64 ": a push-pull of it is still in flight", fn, key);
	} else if (!t && !(t = lt_add(lc, key, count, (uint8_t)dtype, 0))) {
		rc = wk_err(PBOX_ENOMEM, "%s: key %" PRIu64 ": out of memory", fn, key);
	}
	/* the leader's first use puts the pieces into the order of new tensors */
	if (rc == PBOX_OK && leader(lc) && !t->net)
		rc = lt_net(px, t, fn);
	if (rc) {
		pthread_mutex_unlock(&px->mu);
		if (op->cev)
			cu(px)->drop(px->cuda, op->cev);
		free(op);
		if (rc == PBOX_EMISMATCH) {
			char msg[WK_ERR_LEN];

			snprintf(msg, sizeof(msg), "%s", pbox_last_error());
			local_fail(px, rc, "%s", msg);
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

/* Complete @op (the local thread; takes mu). */
static void op_done(struct pbox *px, struct pbox_handle *op, int status, const char *msg)
{
	if (op->cev) { /* long passed: the work that waited for it is over */
		cu(px)->drop(px->cuda, op->cev);
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
static void local_fail(struct pbox *px, int code, const char *fmt, ...)
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
static struct pbox_handle *take_queue(struct pbox *px)
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
static void release(const struct pbox *px, struct wk_ltensor *t)
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
static void fail_ops(struct pbox *px, int code, const char *msg)
{
	struct wk_local *lc = px->loc;
	struct pbox_handle *op = take_queue(px);
	bool left;

	while (op) {
		struct pbox_handle *next = op->next;

		op_done(px, op, code, msg);
		op = next;
	}
	pthread_mutex_lock(&px->mu);
	left = lc->left;
	pthread_mutex_unlock(&px->mu);
	for (uint32_t a = 0; a < lc->n_act; a++) {
		release(px, lc->act[a]->lt);
		op_done(px, lc->act[a], code, msg);
	}
	lc->n_act = 0;
	if (!lc->told && leader(lc))
		for (uint32_t j = 1; j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				say_fail(lc, lc->fd[j], code, left ? LMF_LEFT : 0, msg);
	if (!lc->told && !leader(lc) && lc->fd[0] >= 0)
		say_fail(lc, lc->fd[0], code, 0, msg);
	lc->told = true;
}

static struct wk_ltensor *lt_get(struct pbox *px, uint64_t key)
{
	struct wk_ltensor *t;

	pthread_mutex_lock(&px->mu);
	t = lt_find(px->loc, key);
	pthread_mutex_unlock(&px->mu);
	return t;
}

/* ---- renewal: pbox_shrink(), pbox_rejoin() --------------------------------- */

/* Whether @m belongs to another incarnation of the machine (dropped):
 * GONE and RENEW open the next one. */
static bool stale(const struct wk_local *lc, const struct lmsg *m)
{
	switch (m->type) {
	case LM_HELLO:
	case LM_BYE:
		return false;
	case LM_GONE:
	case LM_RENEW:
		return m->epoch != lc->epoch + 1;
	default:
		return m->epoch != lc->epoch;
	}
}

/*
 * The world without the machines in lc->gone (their numbers before): the
 * ranks keep their order and are renumbered from 0, as the network job's
 * leaders are (survive.c). -1 where one is no machine this rank knows, or
 * is its own. Under mu.
 */
static int renumber(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	uint32_t *newm = calloc(lc->machines, sizeof(uint32_t)), m2 = 0, n2 = 0, me = 0, j = 0;

	if (!newm)
		return -1;
	for (uint32_t g = 0; g < lc->n_gone; g++) {
		if (lc->gone[g] >= lc->machines || lc->gone[g] == lc->machine) {
			free(newm);
			return -1;
		}
		newm[lc->gone[g]] = UINT32_MAX;
	}
	for (uint32_t m = 0; m < lc->machines; m++)
		if (newm[m] != UINT32_MAX)
			newm[m] = m2++;
	for (uint32_t r = 0; r < lc->world_n; r++) {
		uint32_t nm = newm[lc->mach_of[r]];

		if (nm == UINT32_MAX)
			continue;
		if (r == lc->world_rank)
			me = n2;
		lc->world_peers[n2] = lc->world_peers[r];
		lc->mach_of[n2++] = nm;
	}
	lc->machine = newm[lc->machine];
	lc->machines = m2;
	lc->world_n = n2;
	lc->world_rank = me;
	for (uint32_t r = n2; r-- > 0;)
		lc->leader_of[lc->mach_of[r]] = r;
	for (uint32_t r = 0; r < n2; r++)
		if (lc->mach_of[r] == lc->machine && j < lc->local_size)
			lc->ranks[j++] = r;
	lc->n_gone = 0;
	if (!leader(lc)) { /* its own numbers are the world's */
		px->net.n = px->cfg.worker.world_size = n2;
		px->net.rank = px->cfg.worker.rank = me;
		memcpy(px->cfg.peers, lc->world_peers, n2 * sizeof(*px->cfg.peers));
	}
	free(newm);
	return 0;
}

/* Every tensor's rounds start over; its memory stays (the machine is the
 * same). Under mu; its ops are over. */
static void restart_all(struct wk_local *lc)
{
	for (uint32_t k = 0; k < lc->n_t; k++) {
		struct wk_ltensor *t = lc->t[k];

		t->round = 0;
		t->busy = NULL;
		if (t->in)
			memset(t->in, 0, (size_t)lc->local_size * t->n_pieces * sizeof(uint32_t));
		for (uint32_t i = 0; t->taken && i < t->n_pieces; i++)
			t->taken[i] = lc->local_size - 1;
		if (t->sub)
			memset(t->sub, 0, t->n_pieces * sizeof(*t->sub));
		if (t->st)
			memset(t->st, PC_WAIT, t->n_pieces);
	}
}

/* Leader's thread: the network job was renewed (or not: renew_rc); the
 * machine follows, and its ranks are told. */
static void leader_renew(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	struct lmsg m = {.type = LM_RENEW};
	char msg[WK_ERR_LEN];
	int rc;

	pthread_mutex_lock(&px->mu);
	rc = lc->renew_rc;
	snprintf(msg, sizeof(msg), "%s", lc->renew_msg);
	pthread_mutex_unlock(&px->mu);
	if (rc == PBOX_OK) {
		struct lmsg g = {.type = LM_GONE, .epoch = lc->epoch + 1};

		for (uint32_t j = 1; j < lc->local_size; j++)
			for (uint32_t at = 0; lc->fd[j] >= 0 && at < lc->n_gone;
			     at += LM_GONE_MAX) {
				g.count = lc->n_gone - at < LM_GONE_MAX ? lc->n_gone - at
									: LM_GONE_MAX;
				memcpy(g.u.gone, lc->gone + at, g.count * sizeof(uint32_t));
				msg_send(lc->fd[j], &g, LM_SHORT + g.count * sizeof(uint32_t), -1);
			}
		pthread_mutex_lock(&px->mu);
		rc = renumber(px) ? PBOX_ENOMEM : PBOX_OK;
		restart_all(lc);
		pthread_mutex_unlock(&px->mu);
		if (rc)
			snprintf(msg, sizeof(msg), "the machine's new numbers: out of memory");
	}
	if (rc == PBOX_OK) {
		lc->epoch++;
		lc->told = false;
		rc = leader_layout(px, &m.u.ready);
		m.epoch = lc->epoch;
		for (uint32_t j = 1; rc == PBOX_OK && j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				msg_send(lc->fd[j], &m, LM_SHORT + sizeof(m.u.ready), -1);
	}
	if (rc != PBOX_OK)
		for (uint32_t j = 1; j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				say_fail(lc, lc->fd[j], rc, LMF_RENEW, msg);
	pthread_mutex_lock(&px->mu);
	lc->renew_req = false;
	memset(lc->rejoin, 0, lc->local_size * sizeof(bool)); /* the next renewal's */
	lc->n_rejoin = 0;
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
}

/* The others' thread: what pbox_shrink() (or pbox_rejoin()) here waits for. */
static void told_renewal(struct pbox *px, int code, const char *msg)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	lc->renew_got = true;
	lc->renew_rc = code;
	lc->n_gone = 0;
	snprintf(lc->renew_msg, sizeof(lc->renew_msg), "%s", msg);
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
}

/* The others' thread, RENEW: the machine's next incarnation @epoch, the
 * world without the machines GONE named; -1 where they make no sense. */
static int renew_here(struct pbox *px, uint32_t epoch)
{
	struct wk_local *lc = px->loc;
	int rc;

	lc->told = true; /* whatever was in flight was failed already */
	fail_ops(px, PBOX_EFAILED, "the job was renewed while this push-pull was in flight");
	pthread_mutex_lock(&px->mu);
	rc = renumber(px);
	if (rc == 0)
		restart_all(lc);
	pthread_mutex_unlock(&px->mu);
	if (rc)
		return rc;
	lc->epoch = epoch;
	told_renewal(px, PBOX_OK, "");
	return 0;
}

static bool is_quiet(const struct pbox *px)
{
	return px->loc->quiet || !px->loc->thr_started;
}

static bool renewal_told(const struct pbox *px)
{
	return px->loc->renew_got || px->loc->left;
}

static bool failed_or_told(const struct pbox *px)
{
	return px->fail || renewal_told(px);
}

/* pbox_shrink() and pbox_rejoin() (@fn): refused where this machine left
 * the job (a rank of it was lost), or, for a rejoin (@idle), while any of
 * its push-pulls is in flight. */
int wk_local_can_renew(struct pbox *px, const char *fn, bool idle)
{
	struct wk_local *lc = px->loc;
	char why[WK_ERR_LEN];
	bool left, busy = false;

	pthread_mutex_lock(&px->mu);
	left = lc->left;
	snprintf(why, sizeof(why), "%s", px->fail_msg);
	for (uint32_t i = 0; i < lc->n_t; i++)
		busy |= lc->t[i]->busy != NULL;
	pthread_mutex_unlock(&px->mu);
	if (left)
		return wk_err(PBOX_EFAILED,
			      "%s: this rank's machine left the job, as a machine does when it "
			      "loses a rank (%s): its ranks cannot go on",
			      fn, why);
	if (idle && busy)
		return wk_err(PBOX_ESTATE, "%s: push-pulls are in flight", fn);
	return PBOX_OK;
}

/* Leader, before its network job stops: the local thread failed every op
 * (their network parts waited for), so none is left to touch it. */
void wk_local_quiet(struct pbox *px)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	lc->quiet = false;
	pthread_mutex_unlock(&px->mu);
	kick(lc);
	wk_wait_cond(px, is_quiet, wk_now() + 5000000000ull);
}

/* Leader, after keep_tensors(): a tensor whose pieces are not all kept
 * (some were not laid out yet) declares them again on its next use. */
void wk_local_renet(struct pbox *px)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	for (uint32_t k = 0; k < lc->n_t; k++) {
		struct wk_ltensor *t = lc->t[k];
		uint32_t kept = 0;

		for (uint32_t i = 0; t->net && i < t->n_pieces; i++)
			kept += wk_find_tensor(px, local_piece_key(t->key, i)) != NULL;
		if (!t->net || kept == t->n_pieces)
			continue;
		t->net = false;
		for (uint32_t i = 0; i < t->n_pieces; i++) { /* its kept pieces go too */
			struct wk_tensor *nt = wk_find_tensor(px, local_piece_key(t->key, i));
			uint32_t x = 0;

			if (!nt)
				continue;
			while (px->t[x] != nt)
				x++;
			memmove(&px->t[x], &px->t[x + 1], (--px->n_t - x) * sizeof(*px->t));
			wk_tensor_free(nt);
		}
	}
	pthread_mutex_unlock(&px->mu);
}

/* Leader: the network job's renewal ended with @rc (@gone: the machines it
 * went on without, their numbers before); its thread renews the machine
 * and tells its ranks. @rc. */
static bool renewed(const struct pbox *px)
{
	return !px->loc->renew_req || !px->loc->thr_started;
}

/* wk_local_renew(), the others told @msg where @rc is an error. */
static int renew_as(struct pbox *px, int rc, const char *msg, const uint32_t *gone, uint32_t n_gone)
{
	struct wk_local *lc = px->loc;

	pthread_mutex_lock(&px->mu);
	lc->renew_rc = rc;
	snprintf(lc->renew_msg, sizeof(lc->renew_msg), "%s", rc ? msg : "");
	if (n_gone)
		memcpy(lc->gone, gone, n_gone * sizeof(uint32_t));
	lc->n_gone = n_gone;
	lc->renew_req = true;
	pthread_mutex_unlock(&px->mu);
	kick(lc);
	wk_wait_cond(px, renewed, UINT64_MAX);
	return rc;
}

int wk_local_renew(struct pbox *px, int rc, const uint32_t *gone, uint32_t n_gone)
{
	char msg[WK_ERR_LEN];

	pthread_mutex_lock(&px->mu);
	snprintf(msg, sizeof(msg), "%s", px->fail_msg);
	pthread_mutex_unlock(&px->mu);
	return renew_as(px, rc, msg, gone, n_gone);
}

static bool all_rejoin(const struct pbox *px)
{
	const struct wk_local *lc = px->loc;

	return lc->n_rejoin + 1 >= lc->local_size || lc->n_bye || lc->left || px->fail;
}

/*
 * Leader, pbox_rejoin(): every other rank of the machine called it too
 * (REJOIN), so that none is still finishing its last step when the
 * machine is renewed; up to [tuning] deadline. Where one did not, the
 * others are told and nothing is renewed.
 */
int wk_local_rejoin_wait(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	char late[256] = "", msg[WK_ERR_LEN];
	size_t off = 0;
	bool met = wk_wait_cond(px, all_rejoin, wk_now() + px->cfg.tuning.deadline_us * 1000);

	pthread_mutex_lock(&px->mu);
	if (lc->left || px->fail) { /* pbox_shrink() takes it from here */
		snprintf(msg, sizeof(msg), "%s", px->fail_msg);
		pthread_mutex_unlock(&px->mu);
		return wk_err(PBOX_ESTATE,
			      "pbox_rejoin: the context failed (%s): pbox_shrink() first", msg);
	}
	if (met && !lc->n_bye) {
		pthread_mutex_unlock(&px->mu);
		return PBOX_OK;
	}
	for (uint32_t j = 1; j < lc->local_size && off < sizeof(late); j++)
		if (lc->n_bye ? lc->bye[j] : !lc->rejoin[j])
			off += (size_t)snprintf(late + off, sizeof(late) - off, "%s%u",
						off ? ", " : "", lc->ranks[j]);
	if (lc->n_bye)
		snprintf(msg, sizeof(msg),
			 "pbox_rejoin: rank %s of this machine finalized (every rank of a machine "
			 "calls it at the same point)",
			 late);
	else
		snprintf(msg, sizeof(msg),
			 "pbox_rejoin: rank %s of this machine did not call it within %.1f s "
			 "(every rank of a machine calls it at the same point)",
			 late, (double)px->cfg.tuning.deadline_us / 1e6);
	pthread_mutex_unlock(&px->mu);
	renew_as(px, PBOX_ETIMEDOUT, msg, NULL, 0);
	return wk_err(PBOX_ETIMEDOUT, "%s", msg);
}

/*
 * The others: pbox_shrink() (@shrink) or pbox_rejoin() waits for the
 * leader's renewal of the machine: PBOX_REDO (a shrink: the failed
 * iteration again, from its inputs), PBOX_OK (a rejoin), or the leader's
 * error. A machine that left the job (or lost its leader) cannot go on.
 */
int wk_local_follow_renew(struct pbox *px, const char *fn, bool shrink)
{
	struct wk_local *lc = px->loc;
	uint64_t wait_ns = px->cfg.tuning.deadline_us * 1000 + px->cfg.tuning.heartbeat_us * 1000 +
			   1000000000ull;
	int rc;

	/* a shrink without a failure here yet: one is known within a heartbeat */
	if (shrink && !wk_wait_cond(px, failed_or_told,
				    wk_now() + px->cfg.tuning.heartbeat_us * 1000 + 500000000ull))
		return wk_err(PBOX_ESTATE, "%s: the job lost no rank and not its box", fn);
	if (!shrink) { /* the leader renews once every rank of the machine is here */
		pthread_mutex_lock(&px->mu);
		lc->rejoin_say = true;
		pthread_mutex_unlock(&px->mu);
		kick(lc);
	}
	if (!wk_wait_cond(px, renewal_told, wk_now() + wait_ns) || lc->left) {
		if ((rc = wk_local_can_renew(px, fn, !shrink)))
			return rc;
		return wk_err(PBOX_ETIMEDOUT,
			      "%s: rank %u, this machine's leader, renewed nothing within %.1f s "
			      "(it must call %s too)",
			      fn, lc->ranks[0], (double)wait_ns / 1e9, fn);
	}
	pthread_mutex_lock(&px->mu);
	lc->renew_got = false;
	rc = lc->renew_rc;
	if (rc == PBOX_OK) {
		wk_fail_reset(px);
		lc->resumed = true; /* its thread tells the leader of failures again */
	}
	pthread_mutex_unlock(&px->mu);
	if (rc)
		return wk_err(rc, "%s: rank %u, this machine's leader: %s", fn, lc->ranks[0],
			      lc->renew_msg);
	kick(lc);
	wk_log(px, CFG_LOG_INFO, "%s: rank %u of %u on %u machines (local rank %u)", fn,
	       lc->world_rank, lc->world_n, lc->machines, lc->local_rank);
	return shrink ? PBOX_REDO : PBOX_OK;
}

/* Leader: sum piece @i of @t (its own part @own and every local one) into region 0. */
static void sum_piece(struct wk_local *lc, const struct wk_ltensor *t, uint32_t i,
		      const uint8_t *own)
{
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);
	uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;
	uint8_t *dst = t->map + first * esz;

	if (n > t->piece_elems)
		n = t->piece_elems;
	if (t->dtype == SUM_FP32) {
		memcpy(dst, own + first * esz, n * esz);
		for (uint32_t j = 1; j < lc->local_size; j++)
			lc->ops->add[SUM_FP32](dst, t->map + j * t->stride + first * esz, n);
		return;
	}
	lc->ops->load[t->dtype](lc->acc, own + first * esz, n);
	for (uint32_t j = 1; j < lc->local_size; j++)
		lc->ops->add[t->dtype](lc->acc, t->map + j * t->stride + first * esz, n);
	lc->ops->store[t->dtype](dst, lc->acc, n);
}

/* Leader: @op ends with @rc (and the message it set), its work in flight
 * waited for first; true. */
static bool lead_over(struct pbox *px, struct pbox_handle *op, int rc)
{
	char msg[WK_ERR_LEN];

	snprintf(msg, sizeof(msg), "%s", pbox_last_error());
	release(px, op->lt);
	op_done(px, op, rc, msg);
	return true;
}

/* A copy or sum on the GPU failed (the error set): every rank of the
 * machine waits on it, so the machine's job fails, every op with it; false. */
static bool gpu_fail(struct pbox *px)
{
	local_fail(px, PBOX_ENODEV, "%s", pbox_last_error());
	return false;
}

/* Whether the GPU's work behind *@ev has landed (1: the event gone; also
 * when there is none), 0 not yet, -1 it failed (the job with it). */
static int ev_landed(struct pbox *px, void **ev)
{
	int rc;

	if (!*ev)
		return 1;
	rc = cu(px)->done(px->cuda, *ev);
	if (rc)
		*ev = NULL;
	if (rc < 0)
		gpu_fail(px);
	return rc < 0 ? -1 : rc;
}

/* ev_landed() for piece @i of @t (host tensors have no events). */
static int landed(struct pbox *px, struct wk_ltensor *t, uint32_t i)
{
	return t->ev ? ev_landed(px, &t->ev[i]) : 1;
}

/* Leader: piece @i's result is in @op's output: the others told; true when
 * that was the op's last. */
static bool piece_out(struct pbox *px, struct pbox_handle *op, uint32_t i)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;

	t->taken[i] = 0;
	t->st[i] = PC_DONE;
	for (uint32_t j = 1; j < lc->local_size; j++)
		say(lc, lc->fd[j], LM_OUT, t->key, op->round, i);
	if (--op->left)
		return false;
	op_done(px, op, PBOX_OK, NULL);
	return true;
}

/* Leader: whether piece @i of @op may be summed: every local part of this
 * round is in, and every rank took the piece's last result. */
static bool piece_ready(const struct wk_local *lc, const struct pbox_handle *op, uint32_t i)
{
	const struct wk_ltensor *t = op->lt;

	for (uint32_t j = 1; j < lc->local_size; j++)
		if (t->in[j * t->n_pieces + i] != op->round + 1)
			return false;
	return t->taken[i] == lc->local_size - 1;
}

#define LEAD_NEXT (-1) /* lead_piece(): on to the next piece */

/* Piece @i of the leader's @op one step on its way: its parts summed
 * (WAIT to SUM), pushed to the network once landed (NET), its sum back
 * (BACK) and out to the ranks. LEAD_NEXT, or what lead() returns. */
static int lead_piece(struct pbox *px, struct pbox_handle *op, uint32_t i)
{
	struct wk_ltensor *t = op->lt;
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);
	uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;
	uint8_t *host = t->map + first * esz;
	int rc;

	if (n > t->piece_elems)
		n = t->piece_elems;
	if (t->st[i] == PC_WAIT) {
		if (!piece_ready(px->loc, op, i))
			return LEAD_NEXT;
		if (!op->dev)
			sum_piece(px->loc, t, i, op->in);
		else if (gpu_sum(px, op, i, first, n))
			return gpu_fail(px);
		t->st[i] = PC_SUM;
	}
	if (t->st[i] == PC_SUM) { /* summed; on the GPU: once here for the network */
		rc = landed(px, t, i);
		if (rc <= 0)
			return rc < 0 ? false : LEAD_NEXT;
		rc = wk_push_pull(px, local_piece_key(t->key, i), host, host, n,
				  (enum pbox_dtype)t->dtype, &t->sub[i]);
		if (rc)
			return lead_over(px, op, rc);
		t->st[i] = PC_NET;
	}
	if (t->st[i] == PC_NET) {
		rc = pbox_test(t->sub[i]);
		if (rc == PBOX_EAGAIN)
			return LEAD_NEXT;
		t->sub[i] = NULL;
		if (rc)
			return lead_over(px, op, rc);
		if (op->dev) {
			if (gpu_back(px, op, i, first, n))
				return gpu_fail(px);
			t->st[i] = PC_BACK;
			return LEAD_NEXT;
		}
		memcpy(op->out + first * esz, host, n * esz);
		return piece_out(px, op, i) ? true : LEAD_NEXT;
	}
	if (t->st[i] == PC_BACK && landed(px, t, i) > 0 && piece_out(px, op, i))
		return true;
	return LEAD_NEXT;
}

/* Leader: move @op on as far as it goes; true when it is over. */
static bool lead(struct pbox *px, struct pbox_handle *op)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;

	if (!t->map) {
		if (lt_map(lc, t, -1)) {
			local_fail(px, PBOX_ENOMEM,
				   "key %" PRIu64 ": the machine's memory for it: %s", t->key,
				   strerror(errno));
			return false;
		}
	}
	if (op->dev && lt_gpu(px, t) != PBOX_OK)
		return gpu_fail(px);
	for (uint32_t j = 1; lc->n_bye && j < lc->local_size; j++) /* its part cannot come */
		if (lc->bye[j]) {
			local_fail(px, PBOX_EPEER,
				   "key %" PRIu64
				   ": rank %u (on this machine) finalized: a push-pull "
				   "needs every rank of the machine",
				   t->key, lc->ranks[j]);
			return false;
		}
	if (!op->lstarted) { /* first look: every piece waits */
		memset(t->st, PC_WAIT, t->n_pieces);
		op->left = t->n_pieces;
		op->lstarted = true;
	}
	for (uint32_t i = 0; i < t->n_pieces; i++) {
		int r = lead_piece(px, op, i);

		if (r != LEAD_NEXT)
			return r;
	}
	return false;
}

/* The others: start @op (its part in, the leader told); true when it waits
 * for results, false while the tensor's memory is not here yet or its
 * input is still on its way to the GPU buffer. */
static bool follow(struct pbox *px, struct pbox_handle *op)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;
	size_t esz = sum_dtype_size((enum sum_dtype)t->dtype);

	if (!t->asked) {
		struct lmsg m = {.type = LM_TENSOR,
				 .epoch = lc->epoch,
				 .key = t->key,
				 .count = t->count,
				 .dtype = t->dtype};
		size_t len = LM_SHORT;

		if (t->dev) { /* its buffer, shared with the leader */
			if (lt_gpu(px, t))
				return gpu_fail(px);
			m.flags = LMF_DEV;
			m.u.ipc = t->dh;
			len += sizeof(m.u.ipc);
		}
		msg_send(lc->fd[0], &m, len, -1);
		t->asked = true;
	}
	if (!t->map || (t->dev && !t->dpeer[0]))
		return false;
	if (t->dev) { /* the input to the shared buffer first, after the caller's stream */
		if (!t->ev_in &&
		    cu(px)->copy(px->cuda, t->dbuf, op->in, t->bytes, op->cev, &t->ev_in))
			return gpu_fail(px);
		if (ev_landed(px, &t->ev_in) <= 0) /* not yet, or the job failed */
			return false;
	}
	op->left = t->n_pieces;
	for (uint32_t i = 0; i < t->n_pieces; i++) { /* the leader sums piece i meanwhile */
		uint64_t first = (uint64_t)i * t->piece_elems, n = t->count - first;

		if (n > t->piece_elems)
			n = t->piece_elems;
		if (!t->dev)
			memcpy(t->map + lc->local_rank * t->stride + first * esz,
			       op->in + first * esz, n * esz);
		say(lc, lc->fd[0], LM_IN, t->key, op->round, i);
	}
	return true;
}

/* The others, CUDA tensors: the pieces of @op copied from the leader's
 * buffer that have landed; true when it ended. */
static bool follow_back(struct pbox *px, struct pbox_handle *op)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = op->lt;

	for (uint32_t i = 0; i < t->n_pieces; i++) {
		int rc;

		if (!t->ev[i])
			continue;
		rc = landed(px, t, i);
		if (rc < 0)
			return false;
		if (rc == 0)
			continue;
		say(lc, lc->fd[0], LM_TAKEN, t->key, op->round, i);
		if (--op->left == 0) {
			op_done(px, op, PBOX_OK, NULL);
			return true;
		}
	}
	return false;
}

static int act_add(struct wk_local *lc, struct pbox_handle *op)
{
	if (lc->n_act == lc->cap_act) {
		uint32_t cap = lc->cap_act ? lc->cap_act * 2 : 64;
		struct pbox_handle **v = realloc(lc->act, cap * sizeof(*v));

		if (!v)
			return -1;
		lc->act = v;
		lc->cap_act = cap;
	}
	lc->act[lc->n_act++] = op;
	return 0;
}

/* The op of @t's round @round in flight here, or NULL. */
static struct pbox_handle *op_of(const struct wk_local *lc, const struct wk_ltensor *t,
				 uint32_t round)
{
	for (uint32_t a = 0; a < lc->n_act; a++)
		if (lc->act[a]->lt == t && lc->act[a]->round == round)
			return lc->act[a];
	return NULL;
}

/* Rank @j's tensor @m as the machine's (@t: NULL on its first word): its
 * shape and memory kind the same on every rank; NULL with the machine
 * failed when not. */
static struct wk_ltensor *rank_tensor_agrees(struct pbox *px, uint32_t j, const struct lmsg *m,
					     struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;
	uint32_t r = lc->ranks[j];
	bool dev;

	if ((unsigned)m->dtype >= SUM_DTYPE_COUNT || m->count == 0 ||
	    m->count > (1ull << 40) / sum_dtype_size((enum sum_dtype)m->dtype)) {
		local_fail(px, PBOX_EINVAL,
			   "rank %u on this machine asked for key %" PRIu64 " of %" PRIu64
			   " elements of dtype %u",
			   r, m->key, m->count, m->dtype);
		return NULL;
	}
	if (!t) {
		pthread_mutex_lock(&px->mu);
		t = lt_add(lc, m->key, m->count, m->dtype, 0);
		pthread_mutex_unlock(&px->mu);
		if (!t) {
			local_fail(px, PBOX_ENOMEM, "key %" PRIu64 ": out of memory", m->key);
			return NULL;
		}
	}
	if (t->count != m->count || t->dtype != m->dtype) {
		local_fail(px, PBOX_EMISMATCH,
			   "key %" PRIu64 ": rank %u uses %" PRIu64 " elements of %s, rank %u "
			   "(on the same machine) %" PRIu64 " of %s",
			   m->key, r, m->count, sum_dtype_name((enum sum_dtype)m->dtype),
			   lc->world_rank, t->count, sum_dtype_name((enum sum_dtype)t->dtype));
		return NULL;
	}
	pthread_mutex_lock(&px->mu);
	if (!t->kind) { /* the first word on it: the kind every rank must use */
		t->kind = true;
		t->dev = m->flags & LMF_DEV;
	}
	dev = t->dev; /* this rank's own push-pull sets it too (under mu) */
	pthread_mutex_unlock(&px->mu);
	if (dev != !!(m->flags & LMF_DEV)) {
		local_fail(px, PBOX_EMISMATCH,
			   "key %" PRIu64 ": rank %u sums %s memory, rank %u (on the same "
			   "machine) %s memory; [worker] local_cuda must be the same on "
			   "both",
			   m->key, r, mem_kind(m->flags & LMF_DEV), lc->world_rank, mem_kind(dev));
		return NULL;
	}
	return t;
}

/* LM_TENSOR from rank @j: the tensor mapped (and, in GPU memory, the
 * rank's buffer opened here), and TENSOR_OK back with the machine's. */
static void rank_tensor(struct pbox *px, uint32_t j, const struct lmsg *m, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;
	struct lmsg ok = {.type = LM_TENSOR_OK, .epoch = lc->epoch, .key = m->key};
	size_t len = LM_SHORT;
	uint32_t r = lc->ranks[j];

	t = rank_tensor_agrees(px, j, m, t);
	if (!t)
		return;
	if (!t->map && lt_map(lc, t, -1)) {
		local_fail(px, PBOX_ENOMEM, "key %" PRIu64 ": the machine's memory for it: %s",
			   m->key, strerror(errno));
		return;
	}
	if (t->dev) { /* its buffer opened here, the leader's sent back */
		if (t->dpeer && t->dpeer[j]) {
			local_fail(px, PBOX_EINVAL,
				   "rank %u on this machine asked for key %" PRIu64 " twice", r,
				   m->key);
			return;
		}
		if (wk_cuda_load(px, "local aggregation") || lt_gpu(px, t) ||
		    cu(px)->dev_open(px->cuda, &m->u.ipc, &t->dpeer[j])) {
			local_fail(px, PBOX_ENODEV, "key %" PRIu64 ": rank %u's GPU memory: %s",
				   m->key, r, pbox_last_error());
			return;
		}
		ok.flags = LMF_DEV;
		ok.u.ipc = t->dh;
		len += sizeof(ok.u.ipc);
	}
	msg_send(lc->fd[j], &ok, len, t->memfd);
}

/* LM_IN (its part of a piece is in) or LM_TAKEN (it took the sum) from rank @j. */
static void rank_piece(struct pbox *px, uint32_t j, const struct lmsg *m, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;

	if (!t || !t->map || m->piece >= t->n_pieces || (t->dev && !t->dpeer[j])) {
		local_fail(px, PBOX_EINVAL,
			   "rank %u on this machine sent %s for key %" PRIu64 " piece %u, "
			   "which it was never given",
			   lc->ranks[j], m->type == LM_IN ? "IN" : "TAKEN", m->key, m->piece);
		return;
	}
	if (m->type == LM_IN)
		t->in[j * t->n_pieces + m->piece] = m->round + 1;
	else if (t->taken[m->piece] < lc->local_size - 1)
		t->taken[m->piece]++;
}

/* Leader: a message from local rank @j. */
static void from_rank(struct pbox *px, uint32_t j, const struct lmsg *m)
{
	struct wk_local *lc = px->loc;
	uint32_t r = lc->ranks[j];
	struct wk_ltensor *t = lt_get(px, m->key);

	switch (m->type) {
	case LM_TENSOR:
		rank_tensor(px, j, m, t);
		return;
	case LM_IN:
	case LM_TAKEN:
		rank_piece(px, j, m, t);
		return;
	case LM_FAIL:
		local_fail(px, m->code ? m->code : PBOX_EPEER, "rank %u (on this machine): %s", r,
			   m->u.text);
		return;
	case LM_REJOIN:
		pthread_mutex_lock(&px->mu);
		if (!lc->rejoin[j]) {
			lc->rejoin[j] = true;
			lc->n_rejoin++;
			pthread_cond_broadcast(&px->cv);
		}
		pthread_mutex_unlock(&px->mu);
		return;
	case LM_BYE:
		pthread_mutex_lock(&px->mu);
		lc->bye[j] = true;
		lc->n_bye++;
		pthread_cond_broadcast(&px->cv); /* a pbox_rejoin() waiting for it */
		pthread_mutex_unlock(&px->mu);
		return; /* lead() fails the ops in flight, which need its part */
	default:
		local_fail(px, PBOX_EINVAL, "rank %u on this machine sent message type %u", r,
			   m->type);
	}
}

/* TENSOR_OK from the leader: the machine's memory for tensor @t (@memfd)
 * mapped here, and its GPU buffer opened. */
static void leader_tensor(struct pbox *px, const struct lmsg *m, int memfd, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;

	if (!t || t->map || memfd < 0 || lt_map(lc, t, memfd)) {
		if (memfd >= 0 && (!t || t->map))
			close(memfd);
		local_fail(px, PBOX_EPEER,
			   "key %" PRIu64 ": the machine's memory for it from rank %u: %s", m->key,
			   lc->ranks[0], memfd < 0 ? "none came" : strerror(errno));
		return;
	}
	if (t->dev != !!(m->flags & LMF_DEV)) {
		local_fail(px, PBOX_EPEER,
			   "key %" PRIu64 ": rank %u (this machine's leader) answered for %s "
			   "memory, this rank sums %s memory",
			   m->key, lc->ranks[0], mem_kind(m->flags & LMF_DEV), mem_kind(t->dev));
		return;
	}
	if (t->dev && cu(px)->dev_open(px->cuda, &m->u.ipc, &t->dpeer[0]))
		local_fail(px, PBOX_ENODEV,
			   "key %" PRIu64 ": the GPU memory of rank %u (this machine's "
			   "leader): %s",
			   m->key, lc->ranks[0], pbox_last_error());
}

/* OUT from the leader: a piece's sum, copied out of the machine's memory
 * (from GPU memory: TAKEN once the copy lands), and the op done with its
 * last piece. */
static void leader_out(struct pbox *px, const struct lmsg *m, struct wk_ltensor *t)
{
	struct wk_local *lc = px->loc;
	struct pbox_handle *op = t ? op_of(lc, t, m->round) : NULL;
	uint64_t first, n;
	size_t esz;

	if (!op || !t->map || m->piece >= t->n_pieces || op->left == 0) {
		local_fail(px, PBOX_EPEER,
			   "rank %u (this machine's leader) sent a result of key %" PRIu64
			   " round %u piece %u, which is not in flight here",
			   lc->ranks[0], m->key, m->round, m->piece);
		return;
	}
	esz = sum_dtype_size((enum sum_dtype)t->dtype);
	first = (uint64_t)m->piece * t->piece_elems;
	n = t->count - first < t->piece_elems ? t->count - first : t->piece_elems;
	if (t->dev) { /* TAKEN once its copy from the leader's buffer landed */
		if (t->ev[m->piece] || cu(px)->copy(px->cuda, op->out + first * esz,
						    (const uint8_t *)t->dpeer[0] + first * esz,
						    n * esz, NULL, &t->ev[m->piece]))
			local_fail(px, PBOX_EPEER,
				   "key %" PRIu64 " round %u piece %u from rank %u "
				   "(this machine's leader): %s",
				   m->key, m->round, m->piece, lc->ranks[0],
				   t->ev[m->piece] ? "its result came twice" : pbox_last_error());
		return;
	}
	memcpy(op->out + first * esz, t->map + first * esz, n * esz);
	say(lc, lc->fd[0], LM_TAKEN, t->key, m->round, m->piece);
	if (--op->left == 0) {
		for (uint32_t a = 0; a < lc->n_act; a++)
			if (lc->act[a] == op)
				lc->act[a] = lc->act[--lc->n_act];
		op_done(px, op, PBOX_OK, NULL);
	}
}

/* FAIL from the leader: the machine's failure, a renewal's outcome, or
 * this rank left out. */
static void leader_fail(struct pbox *px, const struct lmsg *m)
{
	struct wk_local *lc = px->loc;

	lc->told = true;	    /* the leader's word: not echoed back */
	if (m->flags & LMF_RENEW) { /* pbox_shrink() waits for this */
		told_renewal(px, m->code < 0 ? m->code : PBOX_EPEER, m->u.text);
		return;
	}
	if (m->flags & LMF_LEFT) {
		pthread_mutex_lock(&px->mu);
		lc->left = true;
		pthread_cond_broadcast(&px->cv);
		pthread_mutex_unlock(&px->mu);
	}
	local_fail(px, m->code ? m->code : PBOX_EPEER, "%s", m->u.text);
}

/* The others: a message from the leader. */
static void from_leader(struct pbox *px, const struct lmsg *m, int memfd)
{
	struct wk_local *lc = px->loc;
	struct wk_ltensor *t = lt_get(px, m->key);

	if (memfd >= 0 && m->type != LM_TENSOR_OK)
		close(memfd); /* only TENSOR_OK carries one */
	switch (m->type) {
	case LM_TENSOR_OK:
		leader_tensor(px, m, memfd, t);
		return;
	case LM_OUT:
		leader_out(px, m, t);
		return;
	case LM_FAIL:
		leader_fail(px, m);
		return;
	case LM_GONE:
		if (m->count > LM_GONE_MAX || lc->n_gone + m->count >= lc->machines) {
			local_fail(px, PBOX_EPEER,
				   "rank %u (this machine's leader) named more machines gone than "
				   "there are (%u)",
				   lc->ranks[0], lc->machines);
			return;
		}
		pthread_mutex_lock(&px->mu);
		memcpy(lc->gone + lc->n_gone, m->u.gone, m->count * sizeof(uint32_t));
		lc->n_gone += (uint32_t)m->count;
		pthread_mutex_unlock(&px->mu);
		return;
	case LM_RENEW:
		lc->li = m->u.ready;
		if (renew_here(px, m->epoch))
			local_fail(px, PBOX_EPEER,
				   "rank %u (this machine's leader) renewed the job without "
				   "machines this rank does not know",
				   lc->ranks[0]);
		return;
	default:
		local_fail(px, PBOX_EPEER, "rank %u (this machine's leader) sent message type %u",
			   lc->ranks[0], m->type);
	}
}

/* Every message waiting on connection @j. */
static void drain(struct pbox *px, uint32_t j)
{
	struct wk_local *lc = px->loc;
	struct lmsg m;
	int memfd;

	while (lc->fd[j] >= 0) {
		ssize_t n = msg_recv(lc->fd[j], &m, &memfd, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return;
		if (n <= 0) {
			bool bye = leader(lc) && lc->bye[j];

			close(lc->fd[j]);
			lc->fd[j] = -1;
			if (bye)
				return;
			pthread_mutex_lock(&px->mu);
			lc->left = true; /* the machine is one failure domain */
			pthread_cond_broadcast(&px->cv);
			pthread_mutex_unlock(&px->mu);
			if (leader(lc)) /* the others count this machine gone */
				wk_raise(
					px, WK_FK_LEAVE, 0, px->net.rank,
					"rank %u (pid %d, on rank %u's machine) went away: %s; the "
					"machine leaves the job",
					lc->ranks[j], (int)lc->pid[j], lc->world_rank,
					n == 0 ? "its connection closed" : strerror(errno));
			else
				local_fail(px, PBOX_EPEER,
					   "rank %u (this machine's leader) went away: %s",
					   lc->ranks[0],
					   n == 0 ? "its connection closed" : strerror(errno));
			return;
		}
		if (stale(lc, &m)) { /* of an earlier incarnation: its ops are over */
			if (memfd >= 0)
				close(memfd);
			continue;
		}
		if (leader(lc)) {
			if (memfd >= 0)
				close(memfd);
			from_rank(px, j, &m);
		} else {
			from_leader(px, &m, memfd);
		}
	}
}

/* Take the queued ops; move every op on. */
static void progress(struct pbox *px)
{
	struct wk_local *lc = px->loc;
	struct pbox_handle *op = take_queue(px);

	while (op) {
		struct pbox_handle *next = op->next;

		op->next = NULL;
		if (act_add(lc, op))
			op_done(px, op, PBOX_ENOMEM, "pbox_push_pull: out of memory");
		op = next;
	}
	lc->n_dev = 0;
	for (uint32_t a = 0; a < lc->n_act;) {
		op = lc->act[a];
		if (leader(lc) && lead(px, op)) {
			lc->act[a] = lc->act[--lc->n_act];
			continue;
		}
		if (!leader(lc) && !op->lstarted) /* then its results come as OUT */
			op->lstarted = follow(px, op);
		else if (!leader(lc) && op->dev && follow_back(px, op)) {
			lc->act[a] = lc->act[--lc->n_act];
			continue;
		}
		lc->n_dev += op->dev;
		a++;
	}
}

static bool all_bye(const struct wk_local *lc)
{
	for (uint32_t j = 1; j < lc->local_size; j++)
		if (lc->fd[j] >= 0 && !lc->bye[j])
			return false;
	return true;
}

/* One turn's word from the other threads: stop, a failure (its ops failed
 * and the thread quiet), a renewal to lead, a REJOIN to say; @stop and
 * @fail: what it found. */
static void local_turn(struct pbox *px, bool *stop, int *fail)
{
	struct wk_local *lc = px->loc;
	char msg[WK_ERR_LEN];
	bool renew, rejoin;

	pthread_mutex_lock(&px->mu);
	*stop = lc->stop || px->aborted;
	lc->aborted = px->aborted;
	*fail = px->fail;
	renew = lc->renew_req;
	snprintf(msg, sizeof(msg), "%s", px->fail_msg);
	if (lc->resumed) { /* pbox_shrink() took the renewal: a new failure is told */
		lc->resumed = false;
		lc->told = false;
	}
	rejoin = lc->rejoin_say;
	lc->rejoin_say = false;
	pthread_mutex_unlock(&px->mu);
	if (rejoin && !leader(lc) && lc->fd[0] >= 0)
		say(lc, lc->fd[0], LM_REJOIN, 0, 0, 0);
	if (*fail) {
		fail_ops(px, *fail, msg);
		pthread_mutex_lock(&px->mu);
		lc->quiet = true;
		pthread_cond_broadcast(&px->cv);
		pthread_mutex_unlock(&px->mu);
	}
	if (renew)
		leader_renew(px);
}

/* Wait for a message or a kick (the GPU's events are polled: a short nap
 * while any is out) and read what came: -1 when poll() failed. */
static int local_wait(struct pbox *px, struct pollfd *p, uint32_t nfd)
{
	struct wk_local *lc = px->loc;
	uint64_t v;
	int r;

	p[0] = (struct pollfd){.fd = lc->efd, .events = POLLIN};
	if (leader(lc))
		for (uint32_t j = 1; j < lc->local_size; j++)
			p[j] = (struct pollfd){.fd = lc->fd[j], .events = POLLIN};
	else
		p[1] = (struct pollfd){.fd = lc->fd[0], .events = POLLIN};
	if (lc->n_dev) {
		const struct timespec nap = {0, 20000};

		r = poll(p, nfd, 0);
		if (r == 0)
			nanosleep(&nap, NULL);
	} else {
		r = poll(p, nfd, 100);
	}
	if (r < 0 && errno != EINTR)
		return -1;
	if (p[0].revents & POLLIN && read(lc->efd, &v, sizeof(v)) < 0) {
		/* read by an earlier turn */
	}
	for (uint32_t j = 1; j < nfd; j++)
		if (p[j].revents)
			drain(px, leader(lc) ? j : 0);
	return 0;
}

static void *local_main(void *arg)
{
	struct pbox *px = arg;
	struct wk_local *lc = px->loc;
	uint32_t nfd = leader(lc) ? lc->local_size : 2;
	struct pollfd *p = calloc(nfd, sizeof(*p));
	uint64_t stop_by = 0;

	if (!p) {
		local_fail(px, PBOX_ENOMEM, "the local aggregation thread: out of memory");
		fail_ops(px, PBOX_ENOMEM, "the local aggregation thread: out of memory");
		return NULL;
	}
	for (;;) {
		bool stop;
		int fail;

		local_turn(px, &stop, &fail);
		if (stop && !stop_by)
			stop_by = wk_now() + px->cfg.tuning.deadline_us * 1000;
		if (stop && (!leader(lc) || all_bye(lc) || wk_now() > stop_by || lc->aborted))
			break; /* pbox_abort(): no waiting for the machine's BYE */
		if (!fail)
			progress(px);
		if (local_wait(px, p, nfd))
			break;
	}
	lc->told = true; /* the leader's ranks said BYE: nothing to tell */
	fail_ops(px, PBOX_EFAILED, "the context was finalized with this push-pull in flight");
	/* GPU memory given back before BYE: the leader frees its buffer once
	 * every rank has closed what it opened of it */
	for (uint32_t i = 0; i < lc->n_t; i++)
		lt_gpu_free(px, lc->t[i]);
	if (!leader(lc) && lc->fd[0] >= 0)
		say(lc, lc->fd[0], LM_BYE, 0, 0, 0);
	free(p);
	return NULL;
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
	n = msg_wait(fd, &m, &memfd, deadline);
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
	say_fail(lc, fd, PBOX_EMISMATCH, 0, msg);
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
	socklen_t alen = sock_name(px, &a);
	uint32_t seen = 1;
	char who[256] = "";
	size_t off = 0;

	proof(px, want);
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
	socklen_t alen = sock_name(px, &a);
	struct lmsg m = {.type = LM_HELLO};
	int memfd;
	ssize_t n;

	m.u.hello.rank = lc->world_rank;
	m.u.hello.world = lc->world_n;
	m.u.hello.mode = px->cfg.worker.local_aggregation;
	m.u.hello.pid = (uint32_t)getpid();
	m.u.hello.piece_bytes = lc->piece_bytes;
	proof(px, m.u.hello.proof);
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
	if (msg_send(lc->fd[0], &m, sizeof(m), -1))
		return wk_err(PBOX_ENET, "pbox_start: to rank %u, this machine's leader: %s",
			      lc->ranks[0], strerror(errno));
	n = msg_wait(lc->fd[0], &m, &memfd, deadline);
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
		rc = leader_layout(px, &m.u.ready);
		if (rc == PBOX_OK)
			for (uint32_t j = 1; j < lc->local_size; j++)
				if (msg_send(lc->fd[j], &m, LM_SHORT + sizeof(m.u.ready), -1))
					rc = wk_err(PBOX_ENET,
						    "pbox_start: to rank %u on this machine: %s",
						    lc->ranks[j], strerror(errno));
	}
	if (rc != PBOX_OK && leader(lc)) {
		char msg[WK_ERR_LEN];

		snprintf(msg, sizeof(msg), "%s", pbox_last_error());
		for (uint32_t j = 1; j < lc->local_size; j++)
			if (lc->fd[j] >= 0)
				say_fail(lc, lc->fd[j], rc, 0, msg);
		wk_err(rc, "%s", msg);
	}
	if (rc == PBOX_OK) {
		int e = pthread_create(&lc->thr, NULL, local_main, px);

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
		lt_free(lc->t[i], lc->local_size);
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

int wk_local_layout(const struct pbox *px, struct pbox_layout_info *o)
{
	const struct wk_local *lc = px->loc;

	if (!leader(lc))
		*o = lc->li;
	o->world_size = lc->world_n;
	o->rank = lc->world_rank;
	return PBOX_OK;
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
