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

const char *pbox_version(void)
{
	return "3.1";
}

const char *pbox_strerror(int status)
{
	switch (status) {
	case PBOX_OK:
		return "success";
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
	fprintf(stderr, "libpbox: rank %u: ", px->rank);
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
	snprintf(buf, cap, "rank %u (%s:%u)", rank, ip,
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
	/* until the bootstrap mixes in rank 0's nonce */
	nic_job_key(px->cfg.job.token, px->job, 0, px->jkey);
	nic_mac_init(&px->mac, px->cfg.job.mac, px->jkey);
	px->udp = px->efd = px->box_fd = -1;
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
static struct wk_tensor *find_tensor(const struct pbox *px, uint64_t key)
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
static int add_tensor(struct pbox *px, const char *fn, uint64_t key, uint64_t count,
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
	pthread_mutex_lock(&px->mu);
	if (find_tensor(px, key))
		rc = wk_err(PBOX_EINVAL, "pbox_declare: key %" PRIu64 " declared twice", key);
	else
		rc = add_tensor(px, "pbox_declare", key, count, dtype, priority, &t);
	pthread_mutex_unlock(&px->mu);
	return rc;
}

/* Source address -> unit, for results: open addressing on (ip, port). */
static uint32_t hash_slot(uint32_t ip_be, uint16_t port, uint32_t cap)
{
	return (uint32_t)(((uint64_t)ip_be * 0x9e3779b97f4a7c15ull ^ port * 0x2545f491u) >> 20) &
	       (cap - 1);
}

static int build_hash(struct pbox *px)
{
	uint32_t cap = 16, u;

	while (cap < 2 * px->n_units)
		cap *= 2;
	px->hash_cap = cap;
	px->hash_unit = malloc(cap * sizeof(uint32_t));
	if (!px->hash_unit)
		return -1;
	memset(px->hash_unit, 0xff, cap * sizeof(uint32_t));
	for (u = 0; u < px->n_units; u++) {
		uint32_t s = hash_slot(px->unit[u].ip_be, px->unit[u].port, cap);

		while (px->hash_unit[s] != UINT32_MAX)
			s = (s + 1) & (cap - 1);
		px->hash_unit[s] = u;
	}
	return 0;
}

uint32_t wk_unit_of(const struct pbox *px, uint32_t ip_be, uint16_t port)
{
	uint32_t s = hash_slot(ip_be, port, px->hash_cap), u;

	while ((u = px->hash_unit[s]) != UINT32_MAX) {
		if (px->unit[u].ip_be == ip_be && px->unit[u].port == port)
			return u;
		s = (s + 1) & (px->hash_cap - 1);
	}
	return UINT32_MAX;
}

uint32_t wk_unit_shorts(const struct pbox *px, uint32_t u, uint16_t ep, uint32_t from, uint32_t n,
			struct ss_short *out, uint32_t max)
{
	const struct wk_unit *un = &px->unit[u];
	uint32_t k, f, got = 0;

	for (k = from; k < from + n; k++) {
		uint32_t g = un->global[k], bytes = 0;

		for (f = 0; f < px->fpc; f++)
			bytes += px->frag[(size_t)g * px->fpc + f].len;
		if (bytes < px->chunk_size) {
			if (got == max)
				return UINT32_MAX;
			out[got++] = (struct ss_short){.ep = ep, .chunk = k - from, .bytes = bytes};
		}
	}
	return got;
}

/* This rank's SS_GPU grows by a segment: its chunks [base, base + count). */
static int ssgpu_add(struct pbox *px, uint8_t dtype, uint32_t base, uint32_t count)
{
	struct ss_job_desc d = {.id = px->job,
				.mac = px->mac,
				.n = (uint16_t)px->n,
				.dtype = dtype,
				.frag_size = px->frag_size,
				.chunk_size = px->chunk_size,
				.n_eps = 1};
	struct ss_short *shorts;
	struct nic_addr *ranks;
	struct ss_job *j, **tail;
	const char *why;
	size_t bytes, align;
	void *mem;

	if (!count)
		return PBOX_OK; /* nothing to serve: the box and the peers sum these */
	d.ep_chunks[0] = count;
	d.ep_base[0] = base;
	shorts = calloc(count, sizeof(*shorts));
	ranks = calloc(px->n, sizeof(*ranks));
	if (!shorts || !ranks) {
		free(shorts);
		free(ranks);
		return wk_err(PBOX_ENOMEM, "SS_GPU: out of memory");
	}
	for (uint32_t r = 0; r < px->n; r++) { /* pushes only from the ranks' own addresses */
		ranks[r].ip_be = px->unit[px->n_eps + r].ip_be;
		ranks[r].port = px->unit[px->n_eps + r].port;
	}
	d.ranks = ranks;
	d.shorts = shorts;
	d.n_shorts = wk_unit_shorts(px, px->self_unit, 0, base, count, shorts, count);
	why = ss_job_desc_check(&d);
	if (why) {
		free(shorts);
		free(ranks);
		return wk_err(PBOX_EINVAL, "SS_GPU: %s", why);
	}
	bytes = ss_job_bytes(&d, 0);
	align = ss_job_align(&d);
	mem = aligned_alloc(align, (bytes + align - 1) / align * align);
	if (!mem) {
		free(shorts);
		free(ranks);
		return wk_err(PBOX_ENOMEM, "SS_GPU: %zu bytes of state", bytes);
	}
	j = ss_job_init(mem, &d, 0, sum_ops_best());
	free(shorts);
	free(ranks);
	for (tail = &px->ssj; *tail; tail = &(*tail)->next)
		;
	*tail = j;
	return PBOX_OK;
}

/*
 * The rate this rank sends at: its line rate, or less where the layout
 * gives some box endpoint more than its bandwidth can take in the time our
 * own link needs (every rank sends each endpoint the same bytes). Then
 * every rank paces at the rate the slowest resource drains, and no queue
 * builds in front of it (where timers would run and fire). Our link
 * carries our pushes to others and our SS_GPU's results to the n-1 peers;
 * a peer's SS_GPU takes as much in as ours sends out. Under the unified
 * layout the box and the links finish together (Theorem 1): the line rate.
 * Under [tuning] layout = ps with k < n: k/n of it.
 */
static uint64_t pace_kbps(const struct pbox *px)
{
	uint64_t w = px->cfg.data.bandwidth_mbps * 1000;
	double own = (double)px->unit[px->self_unit].bytes;
	double t_link = ((double)px->total_bytes - own + (px->n - 1) * own) / (double)w, t = t_link;

	for (uint32_t e = 0; e < px->n_eps; e++)
		if (px->unit[e].kbps && px->unit[e].bytes) {
			double te = (double)px->n * (double)px->unit[e].bytes /
				    (double)px->unit[e].kbps;

			if (te > t)
				t = te;
		}
	return t > t_link && t_link > 0 ? (uint64_t)((double)w * t_link / t) + 1 : w;
}

int wk_layout_init(struct pbox *px, uint32_t frag_size, uint32_t n_eps, const uint32_t *ep_ip,
		   const uint16_t *ep_port, const uint64_t *ep_kbps)
{
	struct lay_in in = {.n = px->n,
			    .worker_kbps = px->cfg.data.bandwidth_mbps * 1000,
			    .n_eps = n_eps,
			    .ep_kbps = ep_kbps,
			    .mode = (enum lay_mode)px->cfg.tuning.layout};
	uint64_t *w, box_kbps = 0;
	uint32_t u;

	if (in.mode == LAY_PS && n_eps == 0)
		return wk_err(PBOX_EINVAL, "pbox_start: [tuning] layout = ps needs a box "
					   "([box] control)");
	px->frag_size = frag_size;
	px->chunk_size = (uint32_t)px->cfg.tuning.chunk_size;
	px->fpc = px->chunk_size / frag_size;
	px->n_eps = n_eps;
	px->n_units = n_eps + px->n;
	px->self_unit = n_eps + px->rank;
	px->unit = calloc(px->n_units, sizeof(*px->unit));
	w = calloc(px->n_units, sizeof(*w));
	if (!px->unit || !w) {
		free(w);
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory for the layout");
	}
	for (u = 0; u < n_eps; u++) {
		char ip[INET_ADDRSTRLEN];

		px->unit[u].ip_be = ep_ip[u];
		px->unit[u].port = ep_port[u];
		px->unit[u].kbps = ep_kbps[u];
		px->unit[u].rank = -1;
		box_kbps += ep_kbps[u];
		inet_ntop(AF_INET, &ep_ip[u], ip, sizeof(ip));
		snprintf(px->unit[u].name, sizeof(px->unit[u].name), "box endpoint %u (%s:%u)", u,
			 ip, ep_port[u]);
	}
	for (u = 0; u < px->n; u++) {
		struct wk_unit *un = &px->unit[n_eps + u];

		un->ip_be = px->cfg.peers[u].ip_be;
		un->port = px->cfg.peers[u].port;
		un->rank = (int32_t)u;
		wk_peer_name(px, u, un->name, sizeof(un->name));
	}
	px->k = (double)box_kbps / (double)in.worker_kbps;
	lay_weights(&in, w);
	for (u = 0; u < px->n_units; u++)
		px->unit[u].weight = w[u];
	free(w);
	px->pace_kbps = in.worker_kbps;
	if (build_hash(px))
		return wk_err(PBOX_ENOMEM, "pbox_start: out of memory");
	return PBOX_OK;
}

/* Grow *@p (of @old elements of @size) to @want elements; the new ones zero. */
static int grow_array(void *p, size_t size, size_t old, size_t want)
{
	void *v = realloc(*(void **)p, (want ? want : 1) * size);

	if (!v)
		return -1;
	memset((char *)v + old * size, 0, (want - old) * size);
	*(void **)p = v;
	return 0;
}

int wk_layout_add(struct pbox *px, struct wk_tensor *const *ts, uint32_t n, uint32_t *base,
		  uint32_t *count)
{
	uint64_t *w = NULL;
	uint32_t *bytes = NULL, *unit_of = NULL, *local = NULL, c, u, i, g, c0 = px->n_chunks,
		 added = 0;
	int rc = PBOX_ENOMEM;

	for (i = 0; i < n; i++) {
		uint64_t k = (ts[i]->bytes + px->chunk_size - 1) / px->chunk_size;

		if ((uint64_t)c0 + added + k > UINT32_MAX / px->fpc)
			return wk_err(PBOX_EINVAL,
				      "tensor key %" PRIu64 ": the tensors hold more than %u "
				      "fragments: raise [tuning] chunk_size",
				      ts[i]->key, UINT32_MAX);
		ts[i]->chunk0 = c0 + added;
		ts[i]->n_chunks = (uint32_t)k;
		ts[i]->n_frags = (uint32_t)((ts[i]->bytes + px->frag_size - 1) / px->frag_size);
		added += (uint32_t)k;
	}
	w = malloc(px->n_units * sizeof(*w));
	bytes = malloc((added ? added : 1) * sizeof(uint32_t));
	unit_of = malloc((added ? added : 1) * sizeof(uint32_t));
	local = malloc((added ? added : 1) * sizeof(uint32_t));
	if (!w || !bytes || !unit_of || !local ||
	    grow_array(&px->chunk_unit, sizeof(uint32_t), c0, (size_t)c0 + added) ||
	    grow_array(&px->chunk_local, sizeof(uint32_t), c0, (size_t)c0 + added) ||
	    grow_array(&px->frag, sizeof(*px->frag), (size_t)c0 * px->fpc,
		       ((size_t)c0 + added) * px->fpc)) {
		wk_err(rc, "out of memory for the layout of %u more chunks", added);
		goto out;
	}
	for (u = 0; u < px->n_units; u++)
		w[u] = px->unit[u].weight;
	for (i = 0; i < n; i++)
		for (c = 0; c < ts[i]->n_chunks; c++) {
			uint64_t left = ts[i]->bytes - (uint64_t)c * px->chunk_size;

			bytes[ts[i]->chunk0 - c0 + c] =
				(uint32_t)(left < px->chunk_size ? left : px->chunk_size);
		}
	if (lay_assign(w, px->n_units, bytes, added, unit_of, local, count)) {
		rc = wk_err(PBOX_EINVAL, "no summation service has any weight");
		goto out;
	}
	for (u = 0; u < px->n_units; u++) {
		struct wk_unit *un = &px->unit[u];

		base[u] = un->n_chunks;
		if (grow_array(&un->global, sizeof(uint32_t), un->n_chunks,
			       (size_t)un->n_chunks + count[u])) {
			wk_err(rc, "out of memory for the layout");
			goto out;
		}
	}
	for (c = 0; c < added; c++) {
		struct wk_unit *un = &px->unit[unit_of[c]];

		px->chunk_unit[c0 + c] = unit_of[c];
		px->chunk_local[c0 + c] = base[unit_of[c]] + local[c];
		un->global[un->n_chunks++] = c0 + c;
		un->bytes += bytes[c];
	}
	for (g = 0; g < added * px->fpc; g++) {
		uint32_t cb = bytes[g / px->fpc], off = (g % px->fpc) * px->frag_size;

		px->frag[(size_t)c0 * px->fpc + g].len =
			(uint16_t)(off >= cb		      ? 0
				   : cb - off < px->frag_size ? cb - off
							      : px->frag_size);
	}
	px->n_chunks = c0 + added;
	px->n_frags = px->n_chunks * px->fpc;
	for (i = 0; i < n; i++) {
		px->total_bytes += ts[i]->bytes;
		ts[i]->ready = true;
	}
	px->pace_kbps = pace_kbps(px);
	rc = n ? ssgpu_add(px, ts[0]->dtype, base[px->self_unit], count[px->self_unit]) : PBOX_OK;
out:
	free(w);
	free(bytes);
	free(unit_of);
	free(local);
	return rc;
}

int pbox_start(struct pbox *px)
{
	int rc;

	if (!px)
		return wk_err(PBOX_EINVAL, "pbox_start: context is NULL");
	if (px->phase != WK_PH_NEW)
		return wk_err(PBOX_ESTATE, "pbox_start: called twice");
	/* the phases: meet (with [rendezvous]), bootstrap and layout, engine */
	rc = px->cfg.rendezvous.address.port
		     ? wk_rendezvous(px, wk_now() + px->cfg.tuning.deadline_us * 1000)
		     : PBOX_OK;
	if (rc == PBOX_OK)
		rc = wk_boot(px);
	if (rc == PBOX_OK)
		rc = wk_engine_start(px);
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
	return rc ? rc : wk_push_pull(px, key, in, out, count, dtype, opp);
}

/* The CUDA module's operations, loaded on the first call (under mu). */
static int cuda_ops(struct pbox *px)
{
	wk_cuda_open_fn *open_cuda;
	struct wk_cuda_host host;
	int rc;

	if (px->cuda_ops)
		return PBOX_OK;
	if (px->cuda_failed) /* said once, the same each time */
		return wk_err(PBOX_ENODEV, "%s", px->cuda_why);
	open_cuda = (wk_cuda_open_fn *)wk_module_sym("pbox_push_pull_cuda", "cuda", WK_CUDA_ENTRY);
	host = (struct wk_cuda_host){.abi = WK_CUDA_ABI,
				     .size = sizeof(host),
				     .px = px,
				     .piece_bytes = px->cfg.tuning.partition_size,
				     .pool_bytes = WK_CUDA_POOL,
				     .err = wk_err,
				     .push_pull = wk_push_pull,
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
	pthread_mutex_lock(&px->cuda_mu);
	rc = cuda_ops(px);
	pthread_mutex_unlock(&px->cuda_mu);
	if (rc)
		return rc;
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
	if (rc)
		return rc;
	op = calloc(1, sizeof(*op));
	if (!op)
		return wk_err(PBOX_ENOMEM, "pbox_push_pull: key %" PRIu64 ": out of memory", key);
	op->px = px;
	op->in = in;
	op->out = out;
	pthread_mutex_lock(&px->mu);
	t = find_tensor(px, key);
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
		rc = add_tensor(px, "pbox_push_pull", key, count, dtype, 0, &t);
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
			free(op);
		return st;
	}
	pthread_mutex_lock(&px->mu);
	st = op->done ? reap(op) : PBOX_EAGAIN;
	pthread_mutex_unlock(&px->mu);
	return st;
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
		free(op);
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
	o->pace_mbps = (double)px->pace_kbps / 1000;
	o->box_share = lay_box_share(px->n, px->k, (enum lay_mode)px->cfg.tuning.layout);
	o->ssgpu_share = lay_ssgpu_share(px->n, px->k, (enum lay_mode)px->cfg.tuning.layout);
	snprintf(o->layout, sizeof(o->layout), "%s",
		 lay_mode_name((enum lay_mode)px->cfg.tuning.layout));
	px->tp->describe(px, o->transport, sizeof(o->transport));
	return PBOX_OK;
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

static void free_all(struct pbox *px)
{
	uint32_t u, i;

	for (i = 0; px->peer_fd && i < px->n; i++)
		if (px->peer_fd[i] >= 0)
			close(px->peer_fd[i]);
	for (i = 0; px->peer_buf && i < px->n; i++)
		free(px->peer_buf[i]);
	if (px->box_fd >= 0)
		close(px->box_fd);
	if (px->udp >= 0)
		close(px->udp);
	if (px->tp && px->tp->close)
		px->tp->close(px);
	if (px->efd >= 0)
		close(px->efd);
	for (u = 0; px->unit && u < px->n_units; u++) {
		free(px->unit[u].global);
		free(px->unit[u].sent.g);
		free(px->unit[u].sent.stamp);
	}
	for (i = 0; i < WK_LEVELS; i++) {
		free(px->ring[i].g);
		free(px->ring[i].stamp);
	}
	free(px->local.g);
	free(px->local.stamp);
	free(px->peer_fd);
	free(px->peer_buf);
	free(px->peer_len);
	free(px->peer_bye);
	free(px->unit);
	free(px->chunk_unit);
	free(px->chunk_local);
	free(px->frag);
	while (px->ssj) {
		struct ss_job *next = px->ssj->next;

		free(px->ssj);
		px->ssj = next;
	}
	free(px->heap);
	free(px->hash_unit);
	free(px->ss_pub);
	for (i = 0; i < px->n_t; i++)
		free(px->t[i]);
	free(px->t);
	free(px->newt);
	free(px->ag);
	pthread_cond_destroy(&px->cv);
	pthread_mutex_destroy(&px->mu);
	pthread_mutex_destroy(&px->cuda_mu);
	free(px);
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
