/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The failure machine (wk_fail.h): the one writer of a job's failure.
 * Whichever thread sees a failure first (the engine: a lost rank or box, a
 * deadline, a bad line; the local thread: its machine; the caller: a
 * bootstrap that failed) raises it here, under mu; the first holds. The
 * push-pulls fail with it: queued ones here, the engine's by the engine
 * itself on its next turn (it holds pointers into them) unless the raiser
 * is the engine or there is none. The engine tells the other ranks
 * (engine.c, control()), as the kind's row says.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "wk_ctx.h"
#include "wk_base.h"
#include "wk_ranks.h"
#include "wk_handle.h"
#include "wk_resume.h"
#include "wk_fail.h"

const struct wk_fail_kind wk_fail_kinds[WK_FK_COUNT] = {
#define WK_FK_ROW(k, c, g, v, t) [WK_FK_##k] = {.code = c, .gone = g, .verb = v, .told = t},
	WK_FAIL_KINDS(WK_FK_ROW)
#undef WK_FK_ROW
};

/* What the failure names gone, for pbox_shrink() to go on without it. */
static void mark_gone(struct pbox *px, enum wk_gone gone, uint32_t who)
{
	if (gone == WK_GONE_RANK && px->net.gone && who < px->net.n)
		px->net.gone[who] = true;
	else if (gone == WK_GONE_BOX && who < px->net.n_boxes)
		px->net.box[who].gone = true;
}

void wk_raise(struct pbox *px, enum wk_fkind kind, int code, uint32_t who, const char *fmt, ...)
{
	const struct wk_fail_kind *k = &wk_fail_kinds[kind];
	char msg[WK_ERR_LEN];
	bool engine_runs;
	va_list ap;

	if (k->code)
		code = k->code;
	if (code >= 0) /* a failure always has a code: a raiser that had none */
		code = PBOX_EFAILED;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&px->mu);
	if (px->fstate != WK_FS_RUNNING) {
		pthread_mutex_unlock(&px->mu);
		return;
	}
	px->fstate = k->told ? WK_FS_TOLD : WK_FS_FAILED;
	px->fail_kind = kind;
	px->fail_from = kind == WK_FK_HEARD ? who : UINT32_MAX;
	snprintf(px->fail_msg, sizeof(px->fail_msg), "%s", msg);
	mark_gone(px, k->gone, who);
	if (code == PBOX_EBOX)	       /* what of each push-pull is summed already: */
		wk_resume_capture(px); /* pbox_shrink() may resume them */
	px->fail = code;
	engine_runs = px->eng_live && !wk_on_engine();
	pthread_mutex_unlock(&px->mu);
	wk_log(px, CFG_LOG_ERROR, "%s", msg);
	if (engine_runs)
		wk_engine_kick(px); /* it fails its own ops */
	else
		wk_fail_ops(px);
	wk_local_kick(px);
}

void wk_fail_told(struct pbox *px)
{
	pthread_mutex_lock(&px->mu);
	if (px->fstate == WK_FS_FAILED)
		px->fstate = WK_FS_TOLD;
	pthread_mutex_unlock(&px->mu);
}

void wk_fail_reset(struct pbox *px)
{
	px->fstate = WK_FS_RUNNING;
	px->fail_kind = WK_FK_LOCAL;
	px->fail_from = UINT32_MAX;
	px->fail_msg[0] = '\0';
	px->fail = 0;
}
