/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The bottom of libpbox: what every other file may call and which calls
 * none of them. The calling thread's last error (wk_err(), one convention:
 * a negative PBOX_E* returned, its message set once where the failure is
 * first seen), the clock, the waits on the context's condition, the
 * engine's wake-up, and which thread is the engine's.
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wk_ctx.h"
#include "wk_base.h"

static _Thread_local char last_err[WK_ERR_LEN];

#define WK_STR_(x) #x
#define WK_STR(x)  WK_STR_(x)

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

void wk_engine_kick(const struct pbox *px)
{
	uint64_t one = 1;

	if (px->net.efd >= 0 && write(px->net.efd, &one, sizeof(one)) < 0) {
		/* saturated: the engine is awake anyway */
	}
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

const char *wk_ipstr(uint32_t ip_be, char *buf)
{
	inet_ntop(AF_INET, &ip_be, buf, INET_ADDRSTRLEN);
	return buf;
}

/* The engine thread's own: set as it starts. */
static _Thread_local bool on_engine;

void wk_mark_engine_thread(void)
{
	on_engine = true;
}

bool wk_on_engine(void)
{
	return on_engine;
}

static _Thread_local bool on_stage;

void wk_mark_stage_thread(void)
{
	on_stage = true;
}

bool wk_on_stage(void)
{
	return on_stage;
}

void wk_tensor_unwire(struct wk_tensor *t)
{
	free(t->wire);
	free(t->wire_round);
	t->wire = NULL;
	t->wire_round = NULL;
}

void wk_tensor_free(struct wk_tensor *t)
{
	if (!t)
		return;
	wk_tensor_unwire(t);
	free(t->resid);
	free(t);
}

void wk_net_reset(struct pbox *px, uint32_t rank, uint32_t n, uint32_t job)
{
	memset(&px->net, 0, sizeof(px->net));
	px->net.rank = rank;
	px->net.n = n;
	px->net.job = job;
	px->net.udp = px->net.efd = -1;
}
