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
#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_datalink.h"
#include "wk_resume.h"
#include "wk_fail.h"
#include "wk_link.h"
#include "wk_engine.h"
#include "wk_submit.h"
#include "wk_local_msg.h"
#include "wk_local_tensor.h"
#include "wk_local.h"
#include "wk_boot.h"
#include "wk_rdv.h"
#include "wk_pbox.h"

extern char **environ;

/* A context of configuration @text (in memory: its name in messages
 * @name) or of the file @path (NULL: the defaults and the environment). */
static int init(const char *path, const char *name, const char *text, struct pbox **out)
{
	struct cfg_errors errs;
	struct pbox *px;
	int rc;

	if (!out)
		return wk_err(PBOX_EINVAL, "pbox_init: out is NULL");
	*out = NULL;
	px = calloc(1, sizeof(*px));
	if (!px)
		return wk_err(PBOX_ENOMEM, "pbox_init: out of memory");
	rc = text ? wrk_cfg_load_text(name, text, environ, &px->cfg, &errs)
		  : wrk_cfg_load(path, environ, &px->cfg, &errs);
	if (rc) {
		char all[WK_ERR_LEN] = "";
		size_t off = 0;

		/* every error, one per line, as the config engine wrote them */
		for (unsigned i = 0; i < errs.n && i < CFG_MAX_ERRORS && off < sizeof(all); i++)
			off += (size_t)snprintf(all + off, sizeof(all) - off, "%s%s", i ? "\n" : "",
						errs.msg[i]);
		free(px);
		return wk_err(PBOX_ECONFIG, "%s", all);
	}
	wk_net_reset(px, px->cfg.worker.rank, px->cfg.worker.world_size, px->cfg.job.id);
	wk_set_key(px, 0); /* until the bootstrap mixes in rank 0's nonce */
	px->cuda_submit = wk_submit;
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

int pbox_init(const char *config, struct pbox **out)
{
	if (!config) /* neither: the defaults and PBOX_SECTION_KEY variables alone */
		config = getenv("PBOX_CONFIG");
	return init(config, NULL, NULL, out);
}

int pbox_init_text(const char *config_text, struct pbox **out)
{
	if (!config_text)
		return wk_err(PBOX_EINVAL, "pbox_init_text: config_text is NULL");
	return init(NULL, "(pbox_init_text)", config_text, out);
}

/* pbox_declare() of any key, libpbox's own too (wk_own_sum()). */
static int declare(struct pbox *px, uint64_t key, uint64_t count, enum pbox_dtype dtype,
		   int priority)
{
	struct wk_tensor *t;
	int rc;

	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_declare: context is NULL");
	if (px->phase == WK_PH_DONE)
		return wk_err(PBOX_ESTATE, "pbox_declare: key %" PRIu64 ": the context is over",
			      key);
	rc = wk_check_tensor("pbox_declare", key, count, dtype);
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

int pbox_declare(struct pbox *px, uint64_t key, uint64_t count, enum pbox_dtype dtype, int priority)
{
	int rc = wk_own_key("pbox_declare", key);

	return rc ? rc : declare(px, key, count, dtype, priority);
}

/* What pbox_set_compression() was told. */
struct scheme_as {
	int c, rc;   /* the pushes' compressor and the sums' */
	bool gather; /* ":gather": summed by all-gather, not by the services */
	int where;   /* "@gpu": 1, "@cpu": 0, no '@': -1 */
};

/* @scheme's compressors: "topk" (pushes and sums alike), "topk>none" (its
 * sums sent back as fp32), "none>sign" (the pushes as they are, the sums
 * compressed by their summation service alone); whether it is summed by
 * all-gather ("topk:gather") and where it compresses ("topk@gpu"). 0, or
 * -1 where it says none of these. */
static int scheme_parse(const char *scheme, struct scheme_as *as)
{
	char name[40];
	const char *at = scheme ? strchr(scheme, '@') : NULL;
	size_t len = scheme ? (at ? (size_t)(at - scheme) : strlen(scheme)) : 0;
	char *colon, *arrow;

	*as = (struct scheme_as){.c = -1,
				 .rc = -1,
				 .where = !at			? -1
					  : !strcmp(at, "@gpu") ? 1
					  : !strcmp(at, "@cpu") ? 0
								: -2};
	if (!scheme || as->where == -2 || len >= sizeof(name))
		return -1;
	memcpy(name, scheme, len);
	name[len] = '\0';
	colon = strchr(name, ':');
	if (colon && strcmp(colon + 1, "gather"))
		return -1;
	if (colon) {
		*colon = '\0';
		as->gather = true;
	}
	arrow = strchr(name, '>');
	if (arrow)
		*arrow++ = '\0';
	as->c = comp_scheme_parse(name);
	as->rc = arrow ? comp_scheme_parse(arrow) : as->c;
	return as->c < 0 || as->rc < 0 || (arrow && as->gather) ? -1 : 0;
}

/* pbox_set_compression() of a CUDA tensor of the staged path (@k, under
 * mu): the module compresses its pieces on the GPU (@where 1) or libpbox
 * on the CPU. */
static int set_cuda(const char *fn, struct wk_ckey *k, const struct scheme_as *as)
{
	const char *why = k->dtype != PBOX_FP32 ? "only fp32 tensors compress"
			  : as->gather ? "a CUDA tensor's pieces are summed by the services"
			  : as->rc != as->c
				  ? "a CUDA tensor's pieces are compressed both ways or not at all"
			  : as->where == 1 && as->c == COMP_RANDK
				  ? "randk's indices come from the layout: it compresses on the CPU"
				  : NULL;

	if (why)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 ": %s", fn, k->key, why);
	k->set = true;
	k->comp = (uint8_t)as->c;
	k->gpu = as->where == 1 && as->c != COMP_NONE;
	return PBOX_OK;
}

/* pbox_set_compression() of a host tensor (@t, under mu). */
static int set_host(const char *fn, uint64_t key, struct wk_tensor *t, const struct scheme_as *as)
{
	if (!t)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " is not declared or used yet", fn,
			      key);
	if (!t->resid)
		return wk_err(PBOX_EINVAL, "%s: key %" PRIu64 " is %s: only fp32 tensors compress",
			      fn, key, sum_dtype_name((enum sum_dtype)t->dtype));
	if (as->where == 1)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": '@gpu': it is in host memory, not a CUDA "
			      "tensor of pbox_push_pull_cuda()",
			      fn, key);
	if (t->gsum_busy)
		return wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": its push-pull is in flight", fn,
			      key);
	t->comp = (uint8_t)as->c; /* its next push-pull takes it (submit.c, gsum.c) */
	t->rcomp = (uint8_t)as->rc;
	t->gather = as->gather;
	return PBOX_OK;
}

int pbox_set_compression(struct pbox *px, uint64_t key, const char *scheme)
{
	const char *fn = "pbox_set_compression";
	struct scheme_as as;
	int bad = scheme_parse(scheme, &as), rc;
	struct wk_tensor *t;
	struct wk_ckey *k;

	if (!px)
		return wk_err(PBOX_EINVAL, "%s: context is NULL", fn);
	if (bad)
		return wk_err(
			PBOX_EINVAL,
			"%s: key %" PRIu64
			": '%s' is not none, sign, topk, randk, bf16 or fp16, nor two of "
			"them as PUSH>SUM (one direction compressed: 'topk>none', "
			"'none>sign'), nor sign, topk, bf16 or fp16 followed by :gather, each "
			"maybe followed by @gpu or @cpu",
			fn, key, scheme ? scheme : "(null)");
	if (as.gather && (as.c == COMP_NONE || as.c == COMP_RANDK))
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": '%s': %s, so the summation services sum it "
			      "as it is: set '%s'",
			      fn, key, scheme,
			      as.c == COMP_NONE
				      ? "nothing is compressed"
				      : "a sum of randk pushes is the randk push of the sum",
			      comp_scheme_name((unsigned)as.c));
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "%s: key %" PRIu64 ": call it after pbox_start()", fn,
			      key);
	if (px->cfg.job.compression == COMP_NONE)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": [job] compression is none, so the summation "
			      "services take no compressed push: set it (any scheme) on every rank",
			      fn, key);
	if (px->loc && as.where == 1)
		return wk_err(PBOX_EINVAL,
			      "%s: key %" PRIu64 ": '@gpu' with local aggregation: the machine's "
			      "leader compresses its sum on the CPU",
			      fn, key);
	if (px->loc) /* the machine's leader pushes: its choice is the machine's */
		return wk_local_set_compression(px, fn, key, as.c, as.rc, as.gather);
	pthread_mutex_lock(&px->mu);
	t = wk_find_tensor(px, key);
	k = t ? NULL : wk_ckey_find(px, key);
	rc = k ? set_cuda(fn, k, &as) : set_host(fn, key, t, &as);
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
	if (rc == PBOX_OK) {
		wk_data_link(px); /* B, where [data] bandwidth leaves it to the link */
		rc = wk_local_plan(px);
	}
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

int wk_own_key(const char *fn, uint64_t key)
{
	return key >= WK_KEY_OWN
		       ? wk_err(PBOX_EINVAL,
				"%s: key %" PRIu64 ": keys from 2^63 up are libpbox's own", fn, key)
		       : PBOX_OK;
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
	rc = wk_check_tensor("pbox_push_pull", key, count, dtype);
	return rc ? rc : wk_local_push_pull(px, key, in, out, count, dtype, false, NULL, opp);
}

int wk_own_sum(struct pbox *px, uint64_t key, float *x, uint32_t n)
{
	struct pbox_handle *op = NULL;
	int rc = declare(px, key, n, PBOX_FP32, 0);

	if (rc == PBOX_EINVAL) /* declared by an earlier call */
		rc = PBOX_OK;
	if (rc == PBOX_OK && px->cfg.job.compression != COMP_NONE)
		rc = pbox_set_compression(px, key, "none");
	if (rc == PBOX_OK)
		rc = wk_submit(px, key, x, x, n, PBOX_FP32, &op);
	return rc == PBOX_OK ? pbox_wait(op) : rc;
}

int pbox_push_pull_cuda(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
			enum pbox_dtype dtype, void *stream, struct pbox_handle **opp)
{
	struct wk_cuda_comp comp;
	struct pbox_handle *op;
	int rc;

	if (!px || !in || !out || !opp)
		return wk_err(PBOX_EINVAL, "pbox_push_pull_cuda: key %" PRIu64 ": a NULL argument",
			      key);
	*opp = NULL;
	rc = wk_own_key("pbox_push_pull_cuda", key);
	if (rc == PBOX_OK)
		rc = wk_check_tensor("pbox_push_pull_cuda", key, count, dtype);
	if (rc == PBOX_OK && px->phase != WK_PH_STARTED)
		rc = wk_err(PBOX_ESTATE,
			    "pbox_push_pull_cuda: key %" PRIu64 ": before pbox_start()", key);
	if (rc)
		return rc;
	rc = wk_cuda_load(px, "pbox_push_pull_cuda");
	if (rc)
		return rc;
	if (px->loc && px->cfg.worker.local_cuda == WRK_LOCAL_CUDA_IPC) { /* summed on the GPU */
		rc = px->cuda_ops->check(px->cuda, "pbox_push_pull_cuda", key, in, out, count,
					 dtype);
		return rc ? rc
			  : wk_local_push_pull(px, key, in, out, count, dtype, true, stream, opp);
	}
	op = calloc(1, sizeof(*op));
	if (!op)
		return wk_err(PBOX_ENOMEM, "pbox_push_pull_cuda: key %" PRIu64 ": out of memory",
			      key);
	op->px = px;
	rc = wk_ckey_note(px, key, dtype, &comp);
	if (rc >= 0)
		rc = px->cuda_ops->push_pull(px->cuda, key, in, out, count, dtype, stream,
					     rc ? &comp : NULL, &op->cuda);
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

int pbox_layout(const struct pbox *px, struct pbox_layout_info *o)
{
	if (!px || !o)
		return wk_err(PBOX_EINVAL, "pbox_layout: a NULL argument");
	if (px->phase != WK_PH_STARTED)
		return wk_err(PBOX_ESTATE, "pbox_layout: before pbox_start()");
	memset(o, 0, sizeof(*o));
	if (wk_local_led(px)) /* the leader's layout, as it said */
		return wk_local_layout(px, o);
	wk_net_layout(px, o);
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
	if (ss && px->net.ss_pub)
		memcpy(ss, px->net.ss_pub,
		       (max_ss < px->net.n_units ? max_ss : px->net.n_units) * sizeof(*ss));
	pthread_mutex_unlock(&px->mu);
	st->n_ss = max_ss < px->net.n_units ? max_ss : px->net.n_units;
	if (!ss)
		st->n_ss = 0;
	return PBOX_OK;
}

static void free_all(struct pbox *px)
{
	wk_free_net(px);
	wk_resume_free(px);
	for (uint32_t i = 0; i < px->n_t; i++)
		wk_tensor_free(px->t[i]);
	free(px->t);
	free(px->ckey);
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
		if (write(px->net.efd, &one, sizeof(one)) < 0) {
			/* the engine polls its eventfd with a timeout as well */
		}
		wk_engine_join(px);
	}
	/* after the engine: no result lands in the pinned pool any more */
	if (px->cst_stop)
		px->cst_stop(px);
	if (px->cuda_ops)
		px->cuda_ops->close(px->cuda);
	rc = px->fail;
	if (rc)
		wk_err(rc, "%s", px->fail_msg);
	free_all(px);
	return rc;
}
