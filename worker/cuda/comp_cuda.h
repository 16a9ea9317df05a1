/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The compressors of appliance/ss/comp.h for CUDA tensors (comp.cu): a
 * whole tensor of @n fp32 elements in fragments of @fsize, each fragment
 * compressed as comp_encode() compresses it, to the bit, with its residual
 * (error feedback) in @resid. Fragment f's payload starts at
 * f * comp_bytes(c, fsize) of @out (the last may be shorter);
 * comp_cuda_bytes() is the whole. RANDK: @seeds holds each fragment's
 * comp_seed(), in device memory. Asynchronous on @s; 0, or -EINVAL for a
 * bad spec or size, -EIO when a launch failed.
 */
#ifndef PBOX_COMP_CUDA_H
#define PBOX_COMP_CUDA_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* comp.h includes sum.h, whose kernel types are C99's restrict pointers */
#if defined(__cplusplus) && !defined(restrict)
#define restrict __restrict__
#endif
#include "comp.h"

#ifdef __cplusplus
extern "C" {
#endif

size_t comp_cuda_bytes(const struct comp_spec *c, size_t n, size_t fsize);
int comp_cuda_encode(const struct comp_spec *c, const float *g, float *resid, size_t n,
		     size_t fsize, void *out, const uint64_t *seeds, cudaStream_t s);
/* @acc += each fragment of @in decoded. TOPK's indices are bounded to the
 * fragment on the GPU too; comp_payload_check() says which are malformed. */
int comp_cuda_add(const struct comp_spec *c, float *acc, const void *in, size_t n, size_t fsize,
		  const uint64_t *seeds, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif /* PBOX_COMP_CUDA_H */
