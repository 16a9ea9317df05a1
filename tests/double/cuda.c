/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A stand-in for libpbox's CUDA module (pbox-3/cuda.so) in host memory, so
 * that the unit tests drive local aggregation's GPU path (local.c, [worker]
 * local_cuda = ipc) on machines without a GPU. Built as
 * build/tests/double/cuda.so and loaded through PBOX_MODULE_DIR; never
 * installed. It is not a GPU: the CUDA code itself (worker/cuda/stage.cu)
 * is checked by make test-gpu.
 *
 * What it keeps of CUDA's contract, so that local.c's mistakes show here:
 *  - "device memory" is shared memory (shm_open) that another process or
 *    context opens only by its 64-byte handle, as cudaIpcOpenMemHandle();
 *  - a stager's stream runs its copies and sums only when one of its
 *    events is asked about or dropped, in the order they were queued, and
 *    an event answers "not yet" the first time: code that reads a buffer
 *    before it waits for the event sees the old bytes;
 *  - sums accumulate in fp32 in the order given and round once.
 * The staged path (push_pull()) keeps the module's contract with libpbox,
 * not its pipeline: pieces of [tuning] partition_size under the module's
 * keys (wk_cuda_piece_key()), each a host push-pull of a staging copy of
 * @in, @out written only once every piece has its sum and never after the
 * job is answered; a job answers "not yet" the first time it is tested.
 * A tensor compressed "on the GPU" (struct wk_cuda_comp's gpu) is
 * compressed here as comp.cu compresses it, with the C compressors (which
 * comp.cu matches bit for bit: make test-gpu), each piece's error feedback
 * kept here, pushed compressed (push_pull_as(), pre) and decompressed into
 * @out; a tensor moved off it sends its residual with its next push.
 * pbox_double_gpu_pieces and pbox_double_host_bytes count what was
 * compressed here and what crossed to "the host", for the tests.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comp.h"
#include "cuda/stage.h"

#define HDR 64 /* a mapping's header: its name and length, then the memory */

struct hdr {
	char name[48];
	uint64_t len;
};

enum { OP_COPY, OP_SUM };

struct op {
	int kind;
	void *dst;
	const void *src[WK_CUDA_SUM_MAX];
	uint32_t n;
	uint64_t count, bytes;
	enum pbox_dtype dtype;
};

/* A piece's error feedback, compressed "on the GPU" */
struct dresid {
	uint64_t key, count;
	float *r;
	bool held;
};

struct dbl {
	struct wk_cuda_host host;
	pthread_mutex_t mu;
	struct dresid *res; /* under mu, sorted by key */
	uint32_t n_res, cap_res;
	struct op *q; /* the stream: queued, not yet run */
	uint64_t q_head, q_tail, q_cap;
};

struct ev {
	struct dbl *d;
	uint64_t upto; /* the stream's work before it */
	int asked;
};

static atomic_uint serial;

static float from_f16(uint16_t h)
{
	_Float16 v;

	memcpy(&v, &h, 2);
	return (float)v;
}

static uint16_t to_f16(float f)
{
	_Float16 v = (_Float16)f; /* round to nearest even */
	uint16_t h;

	memcpy(&h, &v, 2);
	return h;
}

static float from_bf16(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* nearest even */
}

static float load(const void *p, uint64_t k, enum pbox_dtype dt)
{
	uint16_t h;
	float f;

	if (dt == PBOX_FP32) {
		memcpy(&f, (const char *)p + 4 * k, 4);
		return f;
	}
	memcpy(&h, (const char *)p + 2 * k, 2);
	return dt == PBOX_FP16 ? from_f16(h) : from_bf16(h);
}

static void store(void *p, uint64_t k, enum pbox_dtype dt, float f)
{
	uint16_t h;

	if (dt == PBOX_FP32) {
		memcpy((char *)p + 4 * k, &f, 4);
		return;
	}
	h = dt == PBOX_FP16 ? to_f16(f) : to_bf16(f);
	memcpy((char *)p + 2 * k, &h, 2);
}

/* Under mu: run the stream up to @upto. */
static void run_to(struct dbl *d, uint64_t upto)
{
	for (; d->q_head < upto; d->q_head++) {
		const struct op *o = &d->q[d->q_head % d->q_cap];

		if (o->kind == OP_COPY) {
			memmove(o->dst, o->src[0], o->bytes);
			continue;
		}
		for (uint64_t k = 0; k < o->count; k++) {
			float acc = load(o->src[0], k, o->dtype);

			for (uint32_t j = 1; j < o->n; j++)
				acc += load(o->src[j], k, o->dtype);
			store(o->dst, k, o->dtype, acc);
		}
	}
}

static int enqueue(struct dbl *d, const struct op *o, void **evp)
{
	struct ev *e = NULL;

	pthread_mutex_lock(&d->mu);
	if (d->q_tail - d->q_head == d->q_cap) /* full: run what is queued */
		run_to(d, d->q_tail);
	if (evp) {
		e = calloc(1, sizeof(*e));
		if (!e) {
			pthread_mutex_unlock(&d->mu);
			return d->host.err(PBOX_ENOMEM, "cuda double: out of memory");
		}
	}
	d->q[d->q_tail++ % d->q_cap] = *o;
	if (e) {
		*e = (struct ev){.d = d, .upto = d->q_tail};
		*evp = e;
	}
	pthread_mutex_unlock(&d->mu);
	return PBOX_OK;
}

/* Host memory stands for device memory here: any pointer will do, and
 * pbox_push_pull_cuda() has refused NULL already. */
static int dbl_check(void *s, const char *fn, uint64_t key, const void *in, void *out,
		     uint64_t count, enum pbox_dtype dtype)
{
	(void)s;
	(void)fn;
	(void)key;
	(void)in;
	(void)out;
	(void)count;
	(void)dtype;
	return PBOX_OK;
}

static int dbl_mark(void *s, void *stream, void **evp)
{
	struct dbl *d = s;
	struct ev *e = calloc(1, sizeof(*e));

	(void)stream; /* the caller's work is done: host memory */
	if (!e)
		return d->host.err(PBOX_ENOMEM, "cuda double: out of memory");
	pthread_mutex_lock(&d->mu);
	*e = (struct ev){.d = d, .upto = d->q_tail};
	pthread_mutex_unlock(&d->mu);
	*evp = e;
	return PBOX_OK;
}

static int dbl_dev_alloc(void *s, uint64_t bytes, void **dptr, struct wk_cuda_ipc *h)
{
	struct dbl *d = s;
	struct hdr hd = {.len = bytes + HDR};
	char *m;
	int fd;

	_Static_assert(sizeof(hd) <= WK_CUDA_IPC_LEN && sizeof(hd) <= HDR, "header");
	snprintf(hd.name, sizeof(hd.name), "/pbox-cuda-double-%d-%u", (int)getpid(),
		 atomic_fetch_add(&serial, 1));
	fd = shm_open(hd.name, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (fd < 0)
		return d->host.err(PBOX_ENOMEM, "cuda double: shm_open %s: failed", hd.name);
	if (ftruncate(fd, (off_t)hd.len) != 0) {
		close(fd);
		shm_unlink(hd.name);
		return d->host.err(PBOX_ENOMEM, "cuda double: ftruncate: failed");
	}
	m = mmap(NULL, hd.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		shm_unlink(hd.name);
		return d->host.err(PBOX_ENOMEM, "cuda double: mmap: failed");
	}
	memcpy(m, &hd, sizeof(hd));
	memset(h, 0, sizeof(*h));
	memcpy(h->b, &hd, sizeof(hd));
	*dptr = m + HDR;
	return PBOX_OK;
}

static int dbl_dev_open(void *s, const struct wk_cuda_ipc *h, void **dptr)
{
	struct dbl *d = s;
	struct hdr hd;
	struct stat st;
	char *m;
	int fd;

	memcpy(&hd, h->b, sizeof(hd));
	hd.name[sizeof(hd.name) - 1] = 0;
	fd = shm_open(hd.name, O_RDWR, 0);
	if (fd < 0)
		return d->host.err(PBOX_ENODEV, "cuda double: no memory by the handle %s", hd.name);
	if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != hd.len) {
		close(fd);
		return d->host.err(PBOX_ENODEV, "cuda double: %s is another size", hd.name);
	}
	m = mmap(NULL, hd.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return d->host.err(PBOX_ENOMEM, "cuda double: mmap: failed");
	*dptr = m + HDR;
	return PBOX_OK;
}

static void dbl_dev_free(void *s, void *dptr, int opened)
{
	struct hdr hd;
	char *m = (char *)dptr - HDR;

	(void)s;
	memcpy(&hd, m, sizeof(hd));
	if (!opened)
		shm_unlink(hd.name);
	munmap(m, hd.len);
}

static int dbl_host_pin(void *s, void *p, uint64_t bytes)
{
	(void)s;
	(void)p;
	(void)bytes;
	return PBOX_OK;
}

static void dbl_host_unpin(void *s, void *p)
{
	(void)s;
	(void)p;
}

/* @after: a mark; the caller's work before it is done already (host memory). */
static int dbl_copy(void *s, void *dst, const void *src, uint64_t bytes, void *after, void **ev)
{
	struct op o = {.kind = OP_COPY, .dst = dst, .src = {src}, .n = 1, .bytes = bytes};

	(void)after;
	return enqueue(s, &o, ev);
}

static int dbl_sum(void *s, void *dst, const void *const *src, uint32_t n, uint64_t count,
		   enum pbox_dtype dtype, void *after, void **ev)
{
	struct dbl *d = s;
	struct op o = {.kind = OP_SUM, .dst = dst, .n = n, .count = count, .dtype = dtype};

	(void)after;
	if (n == 0 || n > WK_CUDA_SUM_MAX)
		return d->host.err(PBOX_EINVAL, "cuda double: %u buffers to sum", n);
	memcpy(o.src, src, n * sizeof(*src));
	return enqueue(s, &o, ev);
}

static int dbl_done(void *s, void *evp)
{
	struct ev *e = evp;

	(void)s;
	if (!e->asked++)
		return 0; /* not yet: the caller must come back */
	pthread_mutex_lock(&e->d->mu);
	run_to(e->d, e->upto);
	pthread_mutex_unlock(&e->d->mu);
	free(e);
	return 1;
}

static void dbl_drop(void *s, void *evp)
{
	struct ev *e = evp;

	(void)s;
	pthread_mutex_lock(&e->d->mu);
	run_to(e->d, e->upto);
	pthread_mutex_unlock(&e->d->mu);
	free(e);
}

/* What the tests read of the stand-in (dlsym()). */
extern _Atomic uint64_t pbox_double_gpu_pieces, pbox_double_host_bytes;
_Atomic uint64_t pbox_double_gpu_pieces, pbox_double_host_bytes;

/* A staged push-pull: the staging copy ("the pinned pool") and its
 * pieces' host push-pulls. */
struct sjob {
	char *stage, *out;
	uint64_t bytes, count, per;
	uint32_t n, asked;
	struct pbox_handle **h; /* NULL once answered */
	int rc;			/* the first failure */
	char msg[256];
	bool has_comp; /* its compression set (pbox_set_compression()) */
	bool gpu;      /* compressed "on the GPU": stage holds each piece's compressed bytes */
	struct wk_cuda_comp comp;
};

static size_t dt_size(enum pbox_dtype dt)
{
	return dt == PBOX_FP32 ? 4 : 2;
}

static void sjob_fail(struct sjob *j, int rc, const char *msg)
{
	if (j->rc)
		return;
	j->rc = rc;
	snprintf(j->msg, sizeof(j->msg), "%s", msg);
}

/* Piece @key's error feedback (under mu; @make: zero at first), or NULL. */
static struct dresid *dresid_of(struct dbl *d, uint64_t key, uint64_t count, bool make)
{
	uint32_t at = 0;
	struct dresid *r;

	while (at < d->n_res && d->res[at].key < key)
		at++;
	if (at < d->n_res && d->res[at].key == key)
		return d->res[at].count == count ? &d->res[at] : NULL;
	if (!make)
		return NULL;
	if (d->n_res == d->cap_res) {
		uint32_t cap = d->cap_res ? d->cap_res * 2 : 64;
		struct dresid *v = realloc(d->res, cap * sizeof(*v));

		if (!v)
			return NULL;
		d->res = v;
		d->cap_res = cap;
	}
	r = &d->res[at];
	memmove(r + 1, r, (d->n_res - at) * sizeof(*r));
	*r = (struct dresid){key, count, calloc(count, sizeof(float)), false};
	if (!r->r) {
		memmove(r, r + 1, (d->n_res - at) * sizeof(*r));
		return NULL;
	}
	d->n_res++;
	return r;
}

/* A piece "on the GPU" (@in, @c elements) compressed into @w, comp.cu's
 * layout: each fragment of frag_elems at its index times a whole one's
 * bytes. Its compressed bytes, or 0: out of memory. */
static uint64_t encode_piece(struct dbl *d, const struct sjob *j, uint64_t key, const float *in,
			     uint64_t c, uint8_t *w)
{
	const struct comp_spec cs = {j->comp.scheme, j->comp.ppm};
	const uint64_t fe = j->comp.frag_elems, stride = comp_bytes(&cs, fe);
	void *scratch = malloc(comp_scratch_bytes(fe));
	struct dresid *r;
	uint64_t at = 0;

	pthread_mutex_lock(&d->mu);
	r = scratch ? dresid_of(d, key, c, true) : NULL;
	for (uint64_t f = 0; r && f * fe < c; f++) {
		uint64_t len = c - f * fe < fe ? c - f * fe : fe;

		comp_encode(&cs, in + f * fe, r->r + f * fe, len, w + f * stride, 0, scratch);
		at = f * stride + comp_bytes(&cs, len);
	}
	if (r)
		r->held = true;
	pthread_mutex_unlock(&d->mu);
	free(scratch);
	return r ? at : 0;
}

/* A piece not compressed here whose residual is: added to its staged
 * copy @p (fp32), the residual zero again. */
static void flush_piece(struct dbl *d, uint64_t key, float *p, uint64_t c)
{
	struct dresid *r;

	pthread_mutex_lock(&d->mu);
	r = d->n_res ? dresid_of(d, key, c, false) : NULL;
	for (uint64_t k = 0; r && r->held && k < c; k++) {
		p[k] += r->r[k];
		r->r[k] = 0;
	}
	if (r)
		r->held = false;
	pthread_mutex_unlock(&d->mu);
}

/* Piece @i of job @j to the host: its push-pull submitted. */
static int push_piece(struct dbl *d, struct sjob *j, uint64_t key, const char *in,
		      enum pbox_dtype dtype, uint32_t i)
{
	const uint64_t c = i + 1 < j->n ? j->per : j->count - i * j->per;
	char *p = j->stage + i * j->per * dt_size(dtype);
	const uint64_t pk = wk_cuda_piece_key(key, i);
	uint64_t wb = c * dt_size(dtype);

	if (j->gpu) {
		wb = encode_piece(d, j, pk, (const float *)(const void *)(in + (p - j->stage)), c,
				  (uint8_t *)p);
		if (!wb)
			return d->host.err(PBOX_ENOMEM, "cuda double: out of memory");
		pbox_double_gpu_pieces++;
	} else {
		memcpy(p, in + (p - j->stage), wb);
		if (dtype == PBOX_FP32)
			flush_piece(d, pk, (float *)(void *)p, c);
	}
	pbox_double_host_bytes += wb;
	if (j->has_comp)
		return d->host.push_pull_as(d->host.px, pk, p, p, c, j->comp.scheme, j->gpu,
					    &j->h[i]);
	return d->host.push_pull(d->host.px, pk, p, p, c, dtype, &j->h[i]);
}

static int dbl_push_pull(void *s, uint64_t key, const void *in, void *out, uint64_t count,
			 enum pbox_dtype dtype, void *stream, const struct wk_cuda_comp *comp,
			 void **job)
{
	struct dbl *d = s;
	uint64_t per = d->host.piece_bytes / dt_size(dtype), n = (count + per - 1) / per;
	struct sjob *j = calloc(1, sizeof(*j));

	(void)stream; /* the caller's work is done: host memory */
	if (j) {
		j->bytes = count * dt_size(dtype);
		j->stage = malloc(j->bytes);
		j->h = calloc(n, sizeof(*j->h));
	}
	if (!j || !j->stage || !j->h) {
		if (j)
			free(j->stage);
		free(j ? j->h : NULL);
		free(j);
		return d->host.err(PBOX_ENOMEM, "cuda double: out of memory");
	}
	j->out = out;
	j->n = (uint32_t)n;
	j->count = count;
	j->per = per;
	if (comp && dtype == PBOX_FP32) { /* as stage.cu takes it */
		j->has_comp = true;
		j->comp = *comp;
		j->gpu = comp->gpu && comp->scheme != COMP_NONE && comp->scheme != COMP_RANDK &&
			 comp->frag_elems;
	}
	for (uint32_t i = 0; i < j->n && !j->rc; i++) {
		int rc = push_piece(d, j, key, in, dtype, i);

		if (rc)
			sjob_fail(j, rc, d->host.last_error());
	}
	*job = j;
	return PBOX_OK;
}

/* Every piece's compressed sum decompressed into @out, as comp.cu's
 * comp_cuda_add() onto zeros. */
static void decode_job(const struct sjob *j)
{
	const struct comp_spec cs = {j->comp.scheme, j->comp.ppm};
	const uint64_t fe = j->comp.frag_elems, stride = comp_bytes(&cs, fe);
	void *scratch = malloc(comp_scratch_bytes(fe));
	float *o = (float *)(void *)j->out;

	for (uint32_t i = 0; scratch && i < j->n; i++) {
		const uint64_t c = i + 1 < j->n ? j->per : j->count - i * j->per;
		const uint8_t *w = (const uint8_t *)j->stage + i * j->per * 4;

		for (uint64_t f = 0; f * fe < c; f++) {
			uint64_t len = c - f * fe < fe ? c - f * fe : fe;
			float *at = o + i * j->per + f * fe;

			memset(at, 0, len * 4);
			comp_add(&cs, at, w + f * stride, len, 0, scratch);
		}
	}
	free(scratch);
}

/* PBOX_EAGAIN, or the job's status with the job freed (the error set). */
static int dbl_test(void *s, void *job)
{
	const struct dbl *d = s;
	struct sjob *j = job;
	int rc;

	if (!j->asked++)
		return PBOX_EAGAIN;
	for (uint32_t i = 0; i < j->n; i++) {
		if (!j->h[i])
			continue;
		rc = d->host.test(j->h[i]);
		if (rc == PBOX_EAGAIN)
			return PBOX_EAGAIN;
		j->h[i] = NULL;
		if (rc)
			sjob_fail(j, rc, d->host.last_error());
	}
	if (!j->rc && j->gpu) /* every piece summed: decompressed "on the GPU" */
		decode_job(j);
	else if (!j->rc) /* the result to "device memory" */
		memcpy(j->out, j->stage, j->bytes);
	rc = j->rc ? d->host.err(j->rc, "%s", j->msg) : PBOX_OK;
	free(j->stage);
	free(j->h);
	free(j);
	return rc;
}

static int dbl_wait(void *s, void *job)
{
	int rc;

	while ((rc = dbl_test(s, job)) == PBOX_EAGAIN)
		usleep(100);
	return rc;
}

static void dbl_close(void *s)
{
	struct dbl *d = s;

	pthread_mutex_lock(&d->mu);
	run_to(d, d->q_tail);
	pthread_mutex_unlock(&d->mu);
	pthread_mutex_destroy(&d->mu);
	for (uint32_t i = 0; i < d->n_res; i++)
		free(d->res[i].r);
	free(d->res);
	free(d->q);
	free(d);
}

/* The compressor's cost "on the GPU": the C compressor's on this CPU over
 * 1 MiB in the layout's fragments, the least of 20 runs, as stage.cu times
 * comp.cu's. */
static int dbl_profile(void *s, const struct wk_cuda_comp *comp, double *enc_b, double *dec_b)
{
	const struct dbl *d = s;
	const struct comp_spec cs = {comp->scheme, comp->ppm};
	const uint64_t n = 1u << 18, fe = comp->frag_elems, stride = comp_bytes(&cs, fe);
	float *g = calloc(3 * n, sizeof(float));
	uint8_t *w = malloc(n * 4);
	void *scratch = fe ? malloc(comp_scratch_bytes(fe)) : NULL;
	double best[2] = {1e30, 1e30};

	if (!g || !w || !scratch || cs.scheme == COMP_NONE || cs.scheme == COMP_RANDK) {
		free(g);
		free(w);
		free(scratch);
		return d->host.err(PBOX_EINVAL, "cuda double: no profile of scheme %u", cs.scheme);
	}
	for (uint64_t k = 0; k < n; k++)
		g[k] = (float)((int)(k * 7 % 61) - 30) / 64;
	for (int r = 0; r < 20; r++) {
		struct timespec t[3];

		clock_gettime(CLOCK_MONOTONIC, &t[0]);
		for (uint64_t f = 0; f * fe < n; f++)
			comp_encode(&cs, g + f * fe, g + n + f * fe,
				    n - f * fe < fe ? n - f * fe : fe, w + f * stride, 0, scratch);
		clock_gettime(CLOCK_MONOTONIC, &t[1]);
		for (uint64_t f = 0; f * fe < n; f++)
			comp_decode(&cs, g + 2 * n + f * fe, w + f * stride,
				    n - f * fe < fe ? n - f * fe : fe, 0, scratch);
		clock_gettime(CLOCK_MONOTONIC, &t[2]);
		for (int k = 0; k < 2; k++) {
			double x = (double)(t[k + 1].tv_sec - t[k].tv_sec) +
				   (double)(t[k + 1].tv_nsec - t[k].tv_nsec) * 1e-9;

			best[k] = x < best[k] ? x : best[k];
		}
	}
	*enc_b = best[0] / (4.0 * (double)n);
	*dec_b = best[1] / (4.0 * (double)n);
	free(g);
	free(w);
	free(scratch);
	return PBOX_OK;
}

static const struct wk_cuda_ops ops = {
	.push_pull = dbl_push_pull,
	.test = dbl_test,
	.wait = dbl_wait,
	.close = dbl_close,
	.check = dbl_check,
	.mark = dbl_mark,
	.dev_alloc = dbl_dev_alloc,
	.dev_open = dbl_dev_open,
	.dev_free = dbl_dev_free,
	.host_pin = dbl_host_pin,
	.host_unpin = dbl_host_unpin,
	.copy = dbl_copy,
	.sum = dbl_sum,
	.done = dbl_done,
	.drop = dbl_drop,
	.profile = dbl_profile,
};

int pbox_module_cuda_open(const struct wk_cuda_host *host, void **out,
			  const struct wk_cuda_ops **opsp);

int pbox_module_cuda_open(const struct wk_cuda_host *host, void **out,
			  const struct wk_cuda_ops **opsp)
{
	struct dbl *d;

	if (host->abi != WK_CUDA_ABI || host->size != sizeof(*host))
		return host->err(PBOX_ENODEV, "cuda double: built with another libpbox");
	d = calloc(1, sizeof(*d));
	if (!d)
		return host->err(PBOX_ENOMEM, "cuda double: out of memory");
	d->host = *host;
	d->q_cap = 4096;
	d->q = calloc(d->q_cap, sizeof(*d->q));
	if (!d->q) {
		free(d);
		return host->err(PBOX_ENOMEM, "cuda double: out of memory");
	}
	pthread_mutex_init(&d->mu, NULL);
	*out = d;
	*opsp = &ops;
	return PBOX_OK;
}
