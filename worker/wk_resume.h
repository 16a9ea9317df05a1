/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef PBOX_WK_RESUME_H
#define PBOX_WK_RESUME_H

#include "wk_ctx.h"

/* ---- resume.c: what the box's loss interrupted ------------------------------ */

/* Record the push-pulls in flight as the box is lost (under mu, before
 * they fail); drop every record. */
void wk_resume_capture(struct pbox *px);
void wk_resume_free(struct pbox *px);
/* pbox_push_pull() of a key pbox_shrink() resumes: the buffer made into this
 * rank's part of the resumed round (@in becomes @out); PBOX_EINVAL when the
 * buffers are not those of the push-pull interrupted. */
int wk_resume_apply(struct pbox *px, uint64_t key, uint64_t count, int dtype, const void **in,
		    void *out);
/* @v (@width words) appended to the growing array @run of @n (room @cap);
 * 0, or -1 out of memory. */
int wk_run_add(uint64_t **run, uint32_t *n, uint32_t *cap, unsigned width, const uint64_t *v);

#endif /* PBOX_WK_RESUME_H */
