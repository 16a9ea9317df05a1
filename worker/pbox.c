/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libpbox's API: the context, tensors, the layout, push-pull handles, stats
 * and finalize. The bootstrap is in boot.c, the progress engine (CS and
 * SS_GPU) in engine.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "cfg_box.h"
#include "layout.h"
#include "cuda/stage.h"
#include "pbox_int.h"

extern char **environ;

static _Thread_local char last_err[WK_ERR_LEN];

int wk_err(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_err, sizeof(last_err), fmt, ap);
	va_end(ap);
	return code;
}

const char *pbox_last_error(void)
{
	return last_err;
}

#define WK_STR_(x) #x
#define WK_STR(x)  WK_STR_(x)
const char *pbox_version(void)
{
	return WK_STR(PBOX_VERSION_MAJOR) "." WK_STR(PBOX_VERSION_MINOR);
}

const char *pbox_strerror(int status)
{
	switch (status) {
	case PBOX_OK:
		return "success";
	case PBOX_REDO:
		return "went on: redo the step";
	case PBOX_EAGAIN:
		return "still in flight";
	case PBOX_EINVAL:
		return "invalid argument";
	case PBOX_ECONFIG:
		return "bad configuration";
	case PBOX_ENOMEM:
		return "out of memory";
	case PBOX_ESTATE:
		return "call out of order";
	case PBOX_EMISMATCH:
		return "ranks disagree";
	case PBOX_EBOX:
		return "box error";
	case PBOX_ETIMEDOUT:
		return "deadline passed";
	case PBOX_EPEER:
		return "a rank left the job";
	case PBOX_ENET:
		return "network error";
	case PBOX_EFAILED:
		return "context failed earlier";
	case PBOX_ENODEV:
		return "no CUDA support or no GPU";
	default:
		return "unknown status";
	}
}

uint64_t wk_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void wk_log(const struct pbox *px, unsigned level, const char *fmt, ...)
{
	va_list ap;

	if (level > px->cfg.log.level)
		return;
	fprintf(stderr, "libpbox: rank %u: ", wk_local_world_rank(px, px->rank));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

const char *wk_peer_name(const struct pbox *px, uint32_t rank, char *buf, size_t cap)
{
	char ip[INET_ADDRSTRLEN] = "?";

	if (rank < px->n)
		inet_ntop(AF_INET, &px->cfg.peers[rank].ip_be, ip, sizeof(ip));
	snprintf(buf, cap, "rank %u (%s:%u)", wk_local_world_rank(px, rank), ip,
		 rank < px->n ? (unsigned)px->cfg.peers[rank].port : 0u);
	return buf;
}

int pbox_init(const char *config, struct pbox **out)
{
	struct cfg_errors errs;
	struct pbox *px;
	int rc;

	if (!out)
		return wk_err(PBOX_EINVAL, "pbox_init: out is NULL");
	*out = NULL;
	if (!config) /* neither: the defaults and PBOX_SECTION_KEY variables alone */
		config = getenv("PBOX_CONFIG");
	px = calloc(1, sizeof(*px));
	if (!px)
		return wk_err(PBOX_ENOMEM, "pbox_init: out of memory");
	if (wrk_cfg_load(config, environ, &px->cfg, &errs)) {
		size_t off = 0;

		/* every error, one per line, as the config engine wrote them */
		for (unsigned i = 0; i < errs.n && i < CFG_MAX_ERRORS && off < WK_ERR_LEN; i++)
			off += (size_t)snprintf(last_err + off, WK_ERR_LEN - off, "%s%s",
						i ? "\n" : "", errs.msg[i]);
		free(px);
		return PBOX_ECONFIG;
	}
	px->rank = px->cfg.worker.rank;
	px->n = px->cfg.worker.world_size;
	px->job = px->cfg.job.id;
	wk_set_key(px, 0); /* until the bootstrap mixes in rank 0's nonce */
	px->udp = px->efd = -1;
	wk_fail_reset(px);
	rc = pthread_mutex_init(&px->mu, NULL);
	if (rc == 0 && pthread_cond_init(&px->cv, NULL) != 0) {
		pthread_mutex_destroy(&px->mu);
		rc = -1;
	}
	if (rc == 0 && pthread_mutex_init(&px->cuda_mu, NULL) != 0) {
		pthread_cond_destroy(&px->cv);
		pthread_mutex_destroy(&px->mu);
		rc = -1;
	}
	if (rc) {
		free(px);
		return wk_err(PBOX_ENOMEM, "pbox_init: cannot create a mutex");
	}
	*out = px;
	return PBOX_OK;
}

/* The tensor of @key, or NULL (under mu once started). */
struct wk_tensor *wk_find_tensor(const struct pbox *px, uint64_t key)
{
	uint32_t lo = 0, hi = px->n_t;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (px->t[mid]->key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < px->n_t && px->t[lo]->key == key ? px->t[lo] : NULL;
}

static int check_tensor(const char *fn, uint64_t key, uint64_t count, enum pbox_dtype dtype)
{
	if ((unsigned)dtype >= SUM_DTYPE_COUNT)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": unknown dtype %d", fn, key,
			      (int)dtype);
	if (count == 0 || count > (1ull << 40) / sum_dtype_size((enum sum_dtype)dtype))
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": count %" PRIu64 " out of range",
			      fn, key, count);
	return PBOX_OK;
}

/* A new tensor into the sorted index (and, after start, the order of new
 * ones); under mu once started. */
int wk_add_tensor(struct pbox *px, const char *fn, uint64_t key, uint64_t count,
		  enum pbox_dtype dtype, int priority, struct wk_tensor **out)
{
	struct wk_tensor *t;
	uint32_t at = 0;

	if (px->n_t == px->cap_t) {
		uint32_t cap = px->cap_t ? px->cap_t * 2 : 64;
		struct wk_tensor **v = realloc(px->t, cap * sizeof(*v));

		if (!v)
			return wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
		px->t = v;
		px->cap_t = cap;
	}
	if (px->phase == WK_PH_STARTED && px->n_new == px->cap_new) {
		uint32_t cap = px->cap_new ? px->cap_new * 2 : 64;
		struct wk_tensor **v = realloc(px->newt, cap * sizeof(*v));

		if (!v)
			return wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
		px->newt = v;
		px->cap_new = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
	t->key = key;
	t->count = count;
	t->dtype = (uint8_t)dtype;
	t->bytes = count * sum_dtype_size((enum sum_dtype)dtype);
	t->prio = priority;
	while (at < px->n_t && px->t[at]->key < key)
		at++;
	memmove(&px->t[at + 1], &px->t[at], (px->n_t - at) * sizeof(*px->t));
	px->t[at] = t;
	px->n_t++;
	if (px->phase == WK_PH_STARTED) {
		t->seq = px->n_new;
		t->late = true;
		t->call = UINT64_MAX; /* pbox_push_pull() says which, if it is the first user */
		px->newt[px->n_new++] = t;
	}
	*out = t;
	return PBOX_OK;
}

int pbox_declare(struct pbox *px, uint64_t key, uint64_t count, enum pbox_dtype dtype, int priority)
{
	struct wk_tensor *t;
	int rc;

	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_declare: context is NULL");
	if (px->phase == WK_PH_DONE)
		return wk_err(PBOX_ESTATE, "pbox_declare: key %" PRIu64 ": the context is over",
			      key);
	rc = check_tensor("pbox_declare", key, count, dtype);
	if (rc)
		return rc;
	if (px->loc) /* started, with local aggregation */
		return wk_local_declare(px, "pbox_declare", key, count, dtype, priority);
	pthread_mutex_lock(&px->mu);
	if (wk_find_tensor(px, key))
		rc = wk_err(PBOX_EINVAL, "pbox_declare: key %" PRIu64 " declared twice", key);
	else
		rc = wk_add_tensor(px, "pbox_declare", key, count, dtype, priority, &t);
	pthread_mutex_unlock(&px->mu);
	return rc;
}

int pbox_start(struct pbox *px)
{
	uint64_t deadline;
	int rc;

	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_start: context is NULL");
	if (px->phase != WK_PH_NEW)
		return wk_err(PBOX_ESTATE, "pbox_start: called twice");
	/* the phases: meet (with [rendezvous]), bootstrap and layout, engine */
	deadline = wk_now() + px->cfg.tuning.deadline_us * 1000;
	rc = px->cfg.rendezvous.address.port ? wk_rendezvous(px, deadline) : PBOX_OK;
	/* the ranks of a machine meet; its leader alone joins the network job */
	if (rc == PBOX_OK)
		rc = wk_local_plan(px);
	if (rc == PBOX_OK && px->loc)
		rc = wk_local_adopt(px);
	if (rc == PBOX_OK && px->loc)
		rc = wk_local_start(px, deadline);
	if (rc == PBOX_OK && !wk_local_led(px))
		rc = wk_boot(px);
	if (rc == PBOX_OK && !wk_local_led(px))
		rc = wk_engine_start(px);
	if (rc == PBOX_OK)
		px->phase = WK_PH_STARTED;
	if (px->loc) /* READY (or FAIL) to the machine's ranks */
		rc = wk_local_ready(px, rc);
	/* a failed start leaves nothing to retry: pbox_finalize() cleans up */
	px->phase = rc == PBOX_OK ? WK_PH_STARTED : WK_PH_DONE;
	return rc;
}

/* The context's failure as the calling thread's error. */
static int failed(struct pbox *px, const char *what)
{
	return wk_err(PBOX_EFAILED, "%s: the context failed earlier: %s", what, px->fail_msg);
}

static int own_key(const char *fn, uint64_t key)
{
	return key >= WK_KEY_OWN
		       ? wk_err(PBOX_EINVAL,
				"%s: key %" PRIu64 ": keys from 2^63 up are libpbox's own", fn, key)
		       : PBOX_OK;
}

int pbox_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		   enum pbox_dtype dtype, struct pbox_handle **opp)
{
	int rc = own_key("pbox_push_pull", key);

	if (opp)
		*opp = NULL;
	return rc ? rc : wk_submit(px, key, in, out, count, dtype, opp);
}

int wk_submit(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
	      enum pbox_dtype dtype, struct pbox_handle **opp)
{
	int rc;

	if (!px || !px->loc)
		return wk_push_pull(px, key, in, out, count, dtype, opp);
	if (!in || !out || !opp)
		return wk_err(PBOX_EINVAL, "pbox_push_pull: key %" PRIu64 ": a NULL argument", key);
	*opp = NULL;
	rc = check_tensor("pbox_push_pull", key, count, dtype);
	return rc ? rc : wk_local_push_pull(px, key, in, out, count, dtype, false, NULL, opp);
}

void wk_engine_kick(const struct pbox *px)
{
	uint64_t one = 1;

	if (px->efd >= 0 && write(px->efd, &one, sizeof(one)) < 0) {
		/* saturated: the engine is awake anyway */
	}
}

/* The CUDA module's operations, loaded on the first call (under cuda_mu). */
static int cuda_ops(struct pbox *px, const char *fn)
{
	wk_cuda_open_fn *open_cuda;
	struct wk_cuda_host host;
	int rc;

	if (px->cuda_ops)
		return PBOX_OK;
	if (px->cuda_failed) /* said once, the same each time */
		return wk_err(PBOX_ENODEV, "%s", px->cuda_why);
	open_cuda = (wk_cuda_open_fn *)wk_module_sym(fn, "cuda", WK_CUDA_ENTRY);
	host = (struct wk_cuda_host){.abi = WK_CUDA_ABI,
				     .size = sizeof(host),
				     .px = px,
				     .piece_bytes = px->cfg.tuning.partition_size,
				     .pool_bytes = WK_CUDA_POOL,
				     .err = wk_err,
				     .push_pull = wk_submit,
				     .test = pbox_test,
				     .last_error = pbox_last_error};
	rc = open_cuda ? open_cuda(&host, &px->cuda, &px->cuda_ops) : PBOX_ENODEV;
	if (rc) {
		px->cuda_failed = true;
		snprintf(px->cuda_why, sizeof(px->cuda_why), "%s", pbox_last_error());
		return wk_err(PBOX_ENODEV, "%s", px->cuda_why);
	}
	return PBOX_OK;
}

int wk_cuda_load(struct pbox *px, const char *fn)
{
	int rc;

	pthread_mutex_lock(&px->cuda_mu);
	rc = cuda_ops(px, fn);
	pthread_mutex_unlock(&px->cuda_mu);
	return rc;
}

int pbox_push_pull_cuda(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
			enum pbox_dtype dtype, void *stream, struct pbox_handle **opp)
{
	struct pbox_handle *op;
	int rc;

	if (!px || !in || !out || !opp)
		return wk_err(PBOX_EINVAL, "pbox_push_pull_cuda: key %" PRIu64 ": a NULL argument",
			      key);
	*opp = NULL;
	rc = own_key("pbox_push_pull_cuda", key);
	if (rc == PBOX_OK)
		rc = check_tensor("pbox_push_pull_cuda", key, count, dtype);
	if (rc == PBOX_OK && px->phase != WK_PH_STARTED)
		rc = wk_err(PBOX_ESTATE,
			    "pbox_push_pull_cuda: key %" PRIu64 ": before pbox_start()", key);
	if (rc)
		return rc;
	rc = wk_cuda_load(px, "pbox_push_pull_cuda");
	if (rc)
		return rc;
	if (px->loc && px->cfg.worker.local_cuda == WRK_LOCAL_CUDA_IPC) { /* summed on the GPU */
		rc = px->cuda_ops->check(px->cuda, key, in, out, count, dtype);
		return rc ? rc
			  : wk_local_push_pull(px, key, in, out, count, dtype, true, stream, opp);
	}
	op = calloc(1, sizeof(*op));
	if (!op)
		return wk_err(PBOX_ENOMEM, "pbox_push_pull_cuda: key %" PRIu64 ": out of memory",
			      key);
	op->px = px;
	rc = px->cuda_ops->push_pull(px->cuda, key, in, out, count, dtype, stream, &op->cuda);
	if (rc) {
		free(op);
		return rc;
	}
	pthread_mutex_lock(&px->mu);
	px->cuda_jobs++;
	pthread_mutex_unlock(&px->mu);
	*opp = op;
	return PBOX_OK;
}

int wk_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		 enum pbox_dtype dtype, struct pbox_handle **opp)
{
	struct wk_tensor *t;
	struct pbox_handle *op;
	uint64_t one = 1;
	int rc;

	if (!px || !in || !out || !opp)
		return wk_err(PBOX_EINVAL, "pbox_push_pull: key %" PRIu64 ": a NULL argument", key);
	*opp = NULL;
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "pbox_push_pull: key %" PRIu64 ": before pbox_start()",
			      key);
	rc = check_tensor("pbox_push_pull", key, count, dtype);
	if (rc == PBOX_OK) /* after pbox_shrink(): what the box's loss interrupted goes on */
		rc = wk_resume_apply(px, key, count, dtype, &in, out);
	if (rc)
		return rc;
	op = calloc(1, sizeof(*op));
	if (!op)
		return wk_err(PBOX_ENOMEM, "pbox_push_pull: key %" PRIu64 ": out of memory", key);
	op->px = px;
	op->in = in;
	op->out = out;
	pthread_mutex_lock(&px->mu);
	t = wk_find_tensor(px, key);
	if (px->fail) {
		rc = failed(px, "pbox_push_pull");
	} else if (px->finalizing) {
		rc = wk_err(PBOX_ESTATE,
			    "pbox_push_pull: key %" PRIu64 ": the context is finalizing", key);
	} else if (t && (t->count != count || t->dtype != (uint8_t)dtype)) {
		rc = wk_err(PBOX_EINVAL,
			    "pbox_push_pull: key %" PRIu64 ": %" PRIu64 " elements of %s, but the "
			    "key was first used with %" PRIu64 " of %s",
			    key, count, sum_dtype_name((enum sum_dtype)dtype), t->count,
			    sum_dtype_name((enum sum_dtype)t->dtype));
	} else if (t && t->busy) {
		rc = wk_err(PBOX_ESTATE,
			    "pbox_push_pull: key %" PRIu64 ": a push-pull of it is still in flight",
			    key);
	} else if (!t) { /* first seen now: agreed with every rank before data moves */
		rc = wk_add_tensor(px, "pbox_push_pull", key, count, dtype, 0, &t);
		if (rc == PBOX_OK)
			t->call = px->calls;
	}
	if (rc) {
		pthread_mutex_unlock(&px->mu);
		free(op);
		return rc;
	}
	op->t = t;
	t->busy = op;
	px->hist[px->calls % WK_HIST] = (struct wk_call){.call = px->calls,
							 .key = key,
							 .count = count,
							 .seq = t->seq,
							 .dtype = (uint8_t)dtype,
							 .fresh = t->late && t->round == 0};
	px->calls++;
	op->round = t->round++;
	if (px->subq_tail)
		px->subq_tail->next = op;
	else
		px->subq = op;
	px->subq_tail = op;
	pthread_mutex_unlock(&px->mu);
	if (write(px->efd, &one, sizeof(one)) < 0) {
		/* the counter is saturated only if the engine is gone; it polls anyway */
	}
	*opp = op;
	return PBOX_OK;
}

/* A completed op's result; releases it. Called with mu held. */
static int reap(struct pbox_handle *op)
{
	int st = op->status;

	if (st != PBOX_OK)
		wk_err(st, "%s", op->msg);
	free(op->parts);
	free(op);
	return st;
}

/* A staged CUDA push-pull answered with its status: the module freed its
 * job; pbox_rejoin() counts what is still in flight. */
static void cuda_answered(struct pbox_handle *op)
{
	struct pbox *px = op->px;

	pthread_mutex_lock(&px->mu);
	px->cuda_jobs--;
	pthread_mutex_unlock(&px->mu);
	free(op);
}

int pbox_test(struct pbox_handle *op)
{
	struct pbox *px;
	int st;

	if (!op)
		return wk_err(PBOX_EINVAL, "pbox_test: handle is NULL");
	px = op->px;
	if (op->cuda) {
		st = px->cuda_ops->test(px->cuda, op->cuda);
		if (st != PBOX_EAGAIN)
			cuda_answered(op);
		return st;
	}
	pthread_mutex_lock(&px->mu);
	st = op->done ? reap(op) : PBOX_EAGAIN;
	pthread_mutex_unlock(&px->mu);
	return st;
}

/* Wait (no lock held) until @ok holds under mu, each change of state
 * broadcast on cv, or until @deadline; whether it held. */
bool wk_wait_cond(struct pbox *px, bool (*ok)(const struct pbox *), uint64_t deadline)
{
	bool held;

	pthread_mutex_lock(&px->mu);
	while (!(held = ok(px)) && wk_now() < deadline) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&px->cv, &px->mu, &ts);
	}
	pthread_mutex_unlock(&px->mu);
	return held;
}

int pbox_wait(struct pbox_handle *op)
{
	struct pbox *px;
	int st;

	if (!op)
		return wk_err(PBOX_EINVAL, "pbox_wait: handle is NULL");
	px = op->px;
	if (op->cuda) {
		st = px->cuda_ops->wait(px->cuda, op->cuda);
		cuda_answered(op);
		return st;
	}
	pthread_mutex_lock(&px->mu);
	while (!op->done)
		pthread_cond_wait(&px->cv, &px->mu);
	st = reap(op);
	pthread_mutex_unlock(&px->mu);
	return st;
}

int pbox_allreduce(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		   enum pbox_dtype dtype)
{
	struct pbox_handle *op;
	int rc = pbox_push_pull(px, key, in, out, count, dtype, &op);

	return rc ? rc : pbox_wait(op);
}

int pbox_layout(const struct pbox *px, struct pbox_layout_info *o)
{
	if (!px || !o)
		return wk_err(PBOX_EINVAL, "pbox_layout: a NULL argument");
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "pbox_layout: before pbox_start()");
	memset(o, 0, sizeof(*o));
	if (wk_local_led(px)) /* the leader's layout, as it said */
		return wk_local_layout(px, o);
	o->world_size = px->n;
	o->rank = px->rank;
	o->k = px->k;
	o->box_endpoints = px->n_eps;
	o->fragment_size = px->frag_size;
	o->chunk_size = px->chunk_size;
	o->total_bytes = px->total_bytes;
	for (uint32_t e = 0; e < px->n_eps; e++)
		o->box_bytes += px->unit[e].bytes;
	o->ssgpu_bytes_mine = px->unit[px->self_unit].bytes;
	o->pace_mbps = (double)px->es.pace_kbps / 1000;
	o->box_share = lay_box_share(px->n, px->k, (enum lay_mode)px->cfg.tuning.layout);
	o->ssgpu_share = lay_ssgpu_share(px->n, px->k, (enum lay_mode)px->cfg.tuning.layout);
	snprintf(o->layout, sizeof(o->layout), "%s",
		 lay_mode_name((enum lay_mode)px->cfg.tuning.layout));
	px->tp->describe(px->tp_st, o->transport, sizeof(o->transport));
	return px->loc ? wk_local_layout(px, o) : PBOX_OK;
}

int pbox_stats(struct pbox *px, struct pbox_stats *st, struct pbox_ss_stats *ss, uint32_t max_ss)
{
	if (!px || !st)
		return wk_err(PBOX_EINVAL, "pbox_stats: a NULL argument");
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "pbox_stats: before pbox_start()");
	pthread_mutex_lock(&px->mu);
	*st = px->st_pub;
	if (ss && px->ss_pub)
		memcpy(ss, px->ss_pub, (max_ss < px->n_units ? max_ss : px->n_units) * sizeof(*ss));
	pthread_mutex_unlock(&px->mu);
	st->n_ss = max_ss < px->n_units ? max_ss : px->n_units;
	if (!ss)
		st->n_ss = 0;
	return PBOX_OK;
}

/* Everything of one incarnation of the job: its connections, transport,
 * layout and engine state (the engine stopped); the tensors stay. */
void wk_free_net(struct pbox *px)
{
	uint32_t u, i;

	for (i = 0; px->peer_fd && i < px->n; i++)
		if (px->peer_fd[i] >= 0)
			close(px->peer_fd[i]);
	for (i = 0; px->peer_buf && i < px->n; i++)
		free(px->peer_buf[i]);
	wk_boxes_close(px, false);
	if (px->udp >= 0)
		close(px->udp);
	if (px->tp && px->tp->close)
		px->tp->close(px->tp_st);
	px->tp_st = NULL;
	if (px->efd >= 0)
		close(px->efd);
	for (u = 0; px->unit && u < px->n_units; u++) {
		free(px->unit[u].global);
		free(px->unit[u].sent.g);
		free(px->unit[u].sent.stamp);
	}
	for (i = 0; i < WK_LEVELS; i++) {
		free(px->es.ring[i].g);
		free(px->es.ring[i].stamp);
	}
	free(px->es.local.g);
	free(px->es.local.stamp);
	free(px->peer_fd);
	free(px->peer_buf);
	free(px->peer_len);
	free(px->peer_bye);
	free(px->peer_heard);
	free(px->gone);
	px->gone = NULL;
	free(px->unit);
	free(px->chunk_unit);
	free(px->chunk_local);
	free(px->es.frag);
	while (px->es.ssj) {
		struct ss_job *next = px->es.ssj->next;

		free(px->es.ssj);
		px->es.ssj = next;
	}
	free(px->es.heap);
	free(px->es.hash_unit);
	free(px->ss_pub);
	free(px->newt);
	free(px->ag);
	free(px->es.eng);
}

static void free_all(struct pbox *px)
{
	wk_free_net(px);
	wk_resume_free(px);
	for (uint32_t i = 0; i < px->n_t; i++)
		free(px->t[i]);
	free(px->t);
	wk_local_free(px);
	pthread_cond_destroy(&px->cv);
	pthread_mutex_destroy(&px->mu);
	pthread_mutex_destroy(&px->cuda_mu);
	free(px);
}

int pbox_tuning(struct pbox *px, struct pbox_tuning *out)
{
	if (!px || !out)
		return wk_err(PBOX_EINVAL, "pbox_tuning: a NULL argument");
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "pbox_tuning: before pbox_start()");
	pthread_mutex_lock(&px->mu);
	*out = px->tune_pub;
	pthread_mutex_unlock(&px->mu);
	return PBOX_OK;
}

int pbox_async_error(struct pbox *px, char *msg, size_t cap)
{
	int rc;

	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_async_error: context is NULL");
	pthread_mutex_lock(&px->mu);
	rc = px->fail;
	if (msg && cap)
		snprintf(msg, cap, "%s", rc ? px->fail_msg : "");
	pthread_mutex_unlock(&px->mu);
	return rc;
}

int pbox_abort(struct pbox *px)
{
	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_abort: context is NULL");
	wk_raise(px, WK_FK_ABORTED, 0, 0, "pbox_abort() was called: the context ends here");
	pthread_mutex_lock(&px->mu);
	px->aborted = true;
	pthread_cond_broadcast(&px->cv);
	pthread_mutex_unlock(&px->mu);
	wk_engine_kick(px);
	wk_local_kick(px);
	return PBOX_OK;
}

int pbox_finalize(struct pbox *px)
{
	uint64_t one = 1;
	int rc;

	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_finalize: context is NULL");
	pthread_mutex_lock(&px->mu);
	px->finalizing = true;
	pthread_mutex_unlock(&px->mu);
	wk_local_stop(px); /* the leader: once its machine's ranks said BYE */
	if (px->thr_started) {
		if (write(px->efd, &one, sizeof(one)) < 0) {
			/* the engine polls its eventfd with a timeout as well */
		}
		wk_engine_join(px);
	}
	/* after the engine: no result lands in the pinned pool any more */
	if (px->cuda_ops)
		px->cuda_ops->close(px->cuda);
	rc = px->fail;
	if (rc)
		wk_err(rc, "%s", px->fail_msg);
	free_all(px);
	return rc;
}
