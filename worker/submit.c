/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The network job's side of the API: the tensor index (sorted by key; a
 * tensor first seen after the start joins the order of new ones that
 * grow.c agrees on), a push-pull handed to the engine's submit queue, the
 * CUDA module loaded on first use, and the network job's layout. pbox.c
 * hands a call here, or to local aggregation (local.c), which hands its
 * machine's pieces here in turn.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layout.h"
#include "cuda/stage.h"
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_module.h"
#include "wk_resume.h"
#include "wk_submit.h"

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

int wk_check_tensor(const char *fn, uint64_t key, uint64_t count, enum pbox_dtype dtype)
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
	if (px->phase == WK_PH_STARTED && px->net.n_new == px->net.cap_new) {
		uint32_t cap = px->net.cap_new ? px->net.cap_new * 2 : 64;
		struct wk_tensor **v = realloc(px->net.newt, cap * sizeof(*v));

		if (!v)
			return wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
		px->net.newt = v;
		px->net.cap_new = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return wk_err(PBOX_ENOMEM, "%s: out of memory", fn);
	t->key = key;
	t->count = count;
	t->dtype = (uint8_t)dtype;
	t->bytes = count * sum_dtype_size((enum sum_dtype)dtype);
	t->prio = priority;
	if (wk_comp_ppm(px, (uint8_t)dtype)) {		 /* its segment takes compressed pushes */
		t->resid = calloc(count, sizeof(float)); /* error feedback starts at zero */
		if (!t->resid) {
			free(t);
			return wk_err(PBOX_ENOMEM,
				      "%s: out of memory for key %" PRIu64 "'s error feedback", fn,
				      key);
		}
		t->comp = (uint8_t)px->cfg.job.compression;
		t->rcomp = t->comp;
		t->gather = px->cfg.job.compression_sum == 1; /* gsum.c */
	}
	while (at < px->n_t && px->t[at]->key < key)
		at++;
	memmove(&px->t[at + 1], &px->t[at], (px->n_t - at) * sizeof(*px->t));
	px->t[at] = t;
	px->n_t++;
	if (px->phase == WK_PH_STARTED) {
		t->seq = px->net.n_new;
		t->late = true;
		t->call = UINT64_MAX; /* pbox_push_pull() says which, if it is the first user */
		px->net.newt[px->net.n_new++] = t;
	}
	*out = t;
	return PBOX_OK;
}

/* The context's failure as the calling thread's error. */
static int failed(struct pbox *px, const char *what)
{
	return wk_err(PBOX_EFAILED, "%s: the context failed earlier: %s", what, px->fail_msg);
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
				     .push_pull = px->cuda_submit,
				     .push_pull_as = wk_push_pull_as,
				     .test = pbox_test,
				     .last_error = pbox_last_error,
				     .mark_stage = wk_mark_stage_thread};
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

/* Where @key is, or would go, among the staged CUDA tensors (sorted). */
static uint32_t ckey_at(const struct pbox *px, uint64_t key)
{
	uint32_t lo = 0, hi = px->n_ckey;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (px->ckey[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct wk_ckey *wk_ckey_find(const struct pbox *px, uint64_t key)
{
	uint32_t at = ckey_at(px, key);

	return at < px->n_ckey && px->ckey[at].key == key ? &px->ckey[at] : NULL;
}

int wk_ckey_note(struct pbox *px, uint64_t key, enum pbox_dtype dtype, struct wk_cuda_comp *c)
{
	struct wk_ckey *k;
	int rc = PBOX_OK;

	pthread_mutex_lock(&px->mu);
	k = wk_find_tensor(px, key) ? NULL : wk_ckey_find(px, key);
	if (!k && px->n_ckey == px->cap_ckey) {
		uint32_t cap = px->cap_ckey ? px->cap_ckey * 2 : 64;
		struct wk_ckey *v = realloc(px->ckey, cap * sizeof(*v));

		if (v) {
			px->ckey = v;
			px->cap_ckey = cap;
		} else {
			rc = wk_err(PBOX_ENOMEM,
				    "pbox_push_pull_cuda: key %" PRIu64 ": out of memory", key);
		}
	}
	if (!k && rc == PBOX_OK) {
		uint32_t at = ckey_at(px, key);

		memmove(&px->ckey[at + 1], &px->ckey[at], (px->n_ckey - at) * sizeof(*px->ckey));
		k = &px->ckey[at];
		*k = (struct wk_ckey){.key = key, .dtype = (uint8_t)dtype};
		px->n_ckey++;
	}
	if (k && k->set) /* the pieces as pbox_set_compression() said */
		*c = (struct wk_cuda_comp){.scheme = k->comp,
					   .gpu = k->gpu,
					   .ppm = px->cfg.job.compression_ppm,
					   .frag_elems = px->net.frag_size / 4u};
	pthread_mutex_unlock(&px->mu);
	return rc == PBOX_OK && k && k->set ? 1 : rc;
}

void wk_tensor_rooted(struct wk_tensor *t, uint8_t kind, uint32_t root, uint64_t group)
{
	t->kind = kind;
	t->root = root;
	t->group = group;
	if (kind) { /* rooted pieces travel at full width */
		t->comp = t->rcomp = COMP_NONE;
		t->gather = false;
	}
}

int wk_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		 enum pbox_dtype dtype, struct pbox_handle **opp)
{
	if (!px || !in || !out || !opp)
		return wk_err(PBOX_EINVAL, "pbox_push_pull: key %" PRIu64 ": a NULL argument", key);
	return wk_collective(px, "pbox_push_pull", key, in, out, count, dtype, WK_ALLREDUCE, 0, 0,
			     opp);
}

/* Whether @t was first used as the collective @kind of root @root is. */
static bool same_kind(const struct wk_tensor *t, uint8_t kind, uint32_t root)
{
	return t->kind == kind && (kind == WK_ALLREDUCE || t->root == root);
}

/* A tensor's next push-pull checked against the context and its first
 * use, under mu: PBOX_OK with *@tp (NULL: first seen now), or the error. */
static int usable(struct pbox *px, const char *fn, uint64_t key, uint64_t count,
		  enum pbox_dtype dtype, uint8_t kind, uint32_t root, struct wk_tensor **tp)
{
	struct wk_tensor *t = *tp = wk_find_tensor(px, key);

	if (px->fail)
		return failed(px, fn);
	if (px->finalizing)
		return wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": the context is finalizing", fn,
			      key);
	if (t && (t->count != count || t->dtype != (uint8_t)dtype))
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": %" PRIu64 " elements of %s, but the "
			      "key was first used with %" PRIu64 " of %s",
			      fn, key, count, sum_dtype_name((enum sum_dtype)dtype), t->count,
			      sum_dtype_name((enum sum_dtype)t->dtype));
	if (t && !same_kind(t, kind, root))
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": first used by another collective (or root)", fn,
			      key);
	if (t && t->busy)
		return wk_err(PBOX_ESTATE,
			      "%s: key %" PRIu64 ": a push-pull of it is still in flight", fn, key);
	return PBOX_OK;
}

/* A collective's place in this rank's order of them (grow.c compares the
 * places where new tensors were first used, and names them). */
static void note_call(struct pbox *px, const struct wk_tensor *t, uint64_t key, uint64_t count,
		      enum pbox_dtype dtype, uint8_t kind, uint32_t root)
{
	px->net.hist[px->net.calls % WK_HIST] = (struct wk_call){.call = px->net.calls,
								 .key = key,
								 .count = count,
								 .seq = t->seq,
								 .dtype = (uint8_t)dtype,
								 .kind = kind,
								 .root = root,
								 .fresh = t->late && t->round == 0};
	px->net.calls++;
}

/* How the CUDA module's piece goes (wk_push_pull_as()): its compression,
 * and whether it comes compressed. */
struct coll_as {
	int scheme; /* enum comp_scheme; -1: the tensor's */
	bool pre;
};

static int collective(struct pbox *px, const char *fn, uint64_t key, const void *in, void *out,
		      uint64_t count, enum pbox_dtype dtype, uint8_t kind, uint32_t root,
		      uint64_t group, const struct coll_as *as, struct pbox_handle **opp)
{
	struct wk_tensor *t;
	struct pbox_handle *op;
	uint64_t one = 1;
	int rc;

	*opp = NULL;
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": before pbox_start()", fn, key);
	rc = wk_check_tensor(fn, key, count, dtype);
	/* after pbox_shrink(): what the box's loss interrupted goes on (a
	 * compressed piece is pushed again whole: its bytes are not sums) */
	if (rc == PBOX_OK && kind == WK_ALLREDUCE && !(as && as->pre))
		rc = wk_resume_apply(px, key, count, dtype, &in, out);
	if (rc)
		return rc;
	op = calloc(1, sizeof(*op));
	if (!op)
		return wk_err(PBOX_ENOMEM, "%s: key %" PRIu64 ": out of memory", fn, key);
	op->px = px;
	op->in = in;
	op->out = out;
	pthread_mutex_lock(&px->mu);
	rc = usable(px, fn, key, count, dtype, kind, root, &t);
	if (rc == PBOX_OK && !t) { /* first seen now: agreed with every rank before data moves */
		rc = wk_add_tensor(px, fn, key, count, dtype, 0, &t);
		if (rc == PBOX_OK) {
			t->call = px->net.calls;
			wk_tensor_rooted(t, kind, root, group);
		}
	}
	if (rc) {
		pthread_mutex_unlock(&px->mu);
		free(op);
		return rc;
	}
	op->t = t;
	t->busy = op;
	if (!wk_on_stage() || t->round == 0) /* the stager's known tensors: no place */
		note_call(px, t, key, count, dtype, kind, root);
	op->round = t->round++;
	px->net.pieces += wk_kind_sharded(kind);
	if (as && as->scheme >= 0 && t->resid) /* the CUDA tensor's, set by its key */
		t->comp = t->rcomp = (uint8_t)as->scheme;
	op->comp = t->comp; /* pbox_set_compression() changes it between push-pulls */
	op->rcomp = t->rcomp;
	op->pre = as && as->pre && op->comp != COMP_NONE;
	op->flush = !t->comp && t->held;
	t->held = t->comp != COMP_NONE;
	if (px->subq_tail)
		px->subq_tail->next = op;
	else
		px->subq = op;
	px->subq_tail = op;
	pthread_mutex_unlock(&px->mu);
	if (write(px->net.efd, &one, sizeof(one)) < 0) {
		/* the counter is saturated only if the engine is gone; it polls anyway */
	}
	*opp = op;
	return PBOX_OK;
}

int wk_collective(struct pbox *px, const char *fn, uint64_t key, const void *in, void *out,
		  uint64_t count, enum pbox_dtype dtype, uint8_t kind, uint32_t root,
		  uint64_t group, struct pbox_handle **opp)
{
	return collective(px, fn, key, in, out, count, dtype, kind, root, group, NULL, opp);
}

int wk_push_pull_as(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		    int scheme, int pre, struct pbox_handle **opp)
{
	const struct coll_as as = {scheme, pre != 0};

	if (!px || !in || !out || !opp)
		return wk_err(PBOX_EINVAL, "pbox_push_pull: key %" PRIu64 ": a NULL argument", key);
	if (scheme >= COMP_SCHEME_COUNT || (pre && scheme <= COMP_NONE))
		return wk_err(PBOX_EINVAL,
			      "pbox_push_pull: key %" PRIu64 ": compressed as scheme %d", key,
			      scheme);
	if (scheme >= 0 && !wk_comp_ppm(px, PBOX_FP32))
		return wk_err(PBOX_EINVAL,
			      "pbox_push_pull: key %" PRIu64 ": compressed, but [job] "
			      "compression is none",
			      key);
	return collective(px, "pbox_push_pull", key, in, out, count, PBOX_FP32, WK_ALLREDUCE, 0, 0,
			  &as, opp);
}

/* The network job's layout, as this rank laid it out (pbox_layout()). */
void wk_net_layout(const struct pbox *px, struct pbox_layout_info *o)
{
	o->world_size = px->net.n;
	o->rank = px->net.rank;
	o->k = px->net.k;
	o->box_endpoints = px->net.n_eps;
	o->fragment_size = px->net.frag_size;
	o->chunk_size = px->net.chunk_size;
	o->total_bytes = px->net.total_bytes;
	for (uint32_t e = 0; e < px->net.n_eps; e++)
		o->box_bytes += px->net.unit[e].bytes;
	o->ssgpu_bytes_mine = px->net.unit[px->net.self_unit].bytes;
	o->pace_mbps = (double)px->net.es.pace_kbps / 1000;
	o->box_share = lay_box_share(px->net.n, px->net.k, (enum lay_mode)px->cfg.tuning.layout);
	o->ssgpu_share =
		lay_ssgpu_share(px->net.n, px->net.k, (enum lay_mode)px->cfg.tuning.layout);
	snprintf(o->layout, sizeof(o->layout), "%s",
		 lay_mode_name((enum lay_mode)px->cfg.tuning.layout));
	px->net.tp->describe(px->net.tp_st, o->transport, sizeof(o->transport));
}
