/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_BASE_H
#define PBOX_WK_BASE_H

#include "wk_ctx.h"

/* ---- base.c: what every file may call ------------------------------------ */

/* The message of the calling thread's last failure; returns @code. */
int wk_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t wk_now(void);
/* @ip_be as a.b.c.d in @buf (INET_ADDRSTRLEN bytes). */
const char *wk_ipstr(uint32_t ip_be, char *buf);
/* Wait (no lock held) until @ok holds under mu, each change of state
 * broadcast on cv, or until @deadline; whether it held. */
bool wk_wait_cond(struct pbox *px, bool (*ok)(const struct pbox *), uint64_t deadline);
/* wakes the engine (new tensors declared); nothing before the start */
void wk_engine_kick(const struct pbox *px);
/* Whether the calling thread is an engine's; the engine's thread says so
 * as it starts. */
bool wk_on_engine(void);
void wk_mark_engine_thread(void);
/* Whether the calling thread is libpbox's stager of CUDA memory
 * (cstage.c): its collectives of tensors already agreed take no place in
 * the rank's order of collectives, which is then the program's on every
 * rank whenever the stager submits them. */
bool wk_on_stage(void);
void wk_mark_stage_thread(void);
/* SplitMix64's finaliser (Steele, Lea and Flood): libpbox's own keys and
 * job ids derived from what names them (shard.c, gsum.c, survive.c,
 * cstage.c); the SS core's comp.c and the CUDA module's stage.h keep their
 * own, apart from libpbox. */
static inline uint64_t wk_mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}
/* @x with word @w mixed in. */
static inline uint64_t wk_mix_in(uint64_t x, uint64_t w)
{
	return wk_mix64(x ^ (w + 0x9e3779b97f4a7c15ull));
}
/* What a segment of @dtype registers as its summation services' compressed
 * pushes ([job] compression: fp32 segments take them, at the job's rate;
 * 0: none). */
static inline uint32_t wk_comp_ppm(const struct pbox *px, uint8_t dtype)
{
	return dtype == PBOX_FP32 && px->cfg.job.compression != COMP_NONE
		       ? px->cfg.job.compression_ppm
		       : 0;
}
/* A closed incarnation of the network job (struct wk_net) of rank @rank of
 * @n, job id @job, as a whole. */
void wk_net_reset(struct pbox *px, uint32_t rank, uint32_t n, uint32_t job);
/* A tensor's memory, its compression state with it; wk_tensor_unwire()
 * frees only what one incarnation's layout shaped (its wire slots). */
void wk_tensor_free(struct wk_tensor *t);
void wk_tensor_unwire(struct wk_tensor *t);

#endif /* PBOX_WK_BASE_H */
