/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The control plane of pboxd: a TCP listener on the management address
 * speaking the protocol of nic/nic_ctl.h (one request per line, one reply
 * per request), whose codec parses REGISTER here and formats the replies
 * the clients parse. Besides ENDPOINTS, REGISTER and UNREGISTER:
 *
 *   LIST
 *       JOB id=ID n=N dtype=T[+T...] frag=F chunk=C chunks=K bytes=B segments=S
 *       OK jobs=N
 *   GROW job=ID ...   (REGISTER's fields but key and mac: a segment of new chunks)
 *       EP lines, then OK job=ID bytes=B frag=F chunk=C   (B: the whole job's)
 *   STATS
 *       STAT key=value    one per box counter (pboxctl stats, summed over
 *                         the data cores), then OK stats=N jobs=J state_bytes=B
 *
 * A connection is served nothing but ENDPOINTS until it has proved it holds
 * the box key (AUTH, PROVE: nic_ctl.h); a wrong proof closes it.
 *
 * A job lives as long as the connection that registered it: when the
 * registering process goes away, the box frees the job and its memory.
 * The same connection may grow the job (GROW: tensors a framework hands over
 * after the start): each growth is one more segment of the job on every
 * core, of its own dtype, whose chunks follow the job's earlier ones on each
 * endpoint, admitted against the same budget as a registration.
 * Job state is allocated here, on the node of each owning core, and handed
 * to the cores through their request rings; cores never allocate.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rte_malloc.h>
#include <rte_ring.h>
#include <sodium.h>

#include "box.h"
#include "nic_ctl.h"

/*
 * No client can stall the control plane: sockets are non-blocking and each
 * connection's replies wait in a bounded buffer of its own; a client that
 * lets CTL_OUT_MAX pile up, or does not read for CTL_STALL_NS, is dropped.
 * A connection that has not proved the box key holds a slot for at most
 * CTL_PROVE_NS from its accept, with lines of at most CTL_UNPROVED_LINE
 * bytes; at most CTL_MAX_UNPROVED such are open, CTL_UNPROVED_PER_SOURCE
 * from one address, and a new one takes the place of the oldest (from its
 * own address first) when they are full: one that never proves cannot keep
 * a key holder out. Proved connections keep the other slots for themselves,
 * at most CTL_PER_SOURCE from one address, and may wait as long as they
 * like (a job's rank 0 holds its connection through a whole run). Every connection
 * has TCP keepalive (probes after CTL_KA_IDLE s idle, CTL_KA_CNT of them
 * CTL_KA_INTVL s apart) and a TCP user timeout, so the job of a registrar
 * whose host died or was cut off is freed within CTL_DEAD_S seconds.
 */
#define CTL_MAX_CONNS		256
#define CTL_PER_SOURCE		16 /* proved */
#define CTL_MAX_UNPROVED	64
#define CTL_UNPROVED_PER_SOURCE 4
#define CTL_PROVE_NS		(2ull * 1000000000ull)
#define CTL_UNPROVED_LINE	256 /* AUTH's line is 37 bytes, PROVE's 71 */
#define CTL_LINE_MAX		NIC_CTL_LINE_MAX
#define CTL_REPLY_MAX		256
#define CTL_OUT_MAX		(4u << 20) /* ENDPOINTS of 8192 endpoints is ~650 KB */
#define CTL_OUT_LOW		(64u << 10)
#define CTL_STALL_NS		(10ull * 1000000000ull)
#define CTL_UNREAD_NS		(1000000000ull)
#define CTL_ACCEPT_BURST	256 /* accepts a turn of the loop */
#define CTL_KA_IDLE		5
#define CTL_KA_INTVL		2
#define CTL_KA_CNT		3
#define CTL_DEAD_S		(CTL_KA_IDLE + CTL_KA_INTVL * CTL_KA_CNT) /* 11 s */

struct ctl_job {
	uint32_t id;
	uint8_t key[NIC_KEY_LEN]; /* the job's: UNREGISTER proves it */
	int owner;		  /* connection slot that registered it */
	struct ss_job_desc desc;  /* n_eps, ep_chunks unused: per lcore below */
	uint64_t chunks, bytes;
	uint64_t node_bytes[NUMA_MAX_NODES];
	struct ss_job *state[RTE_MAX_LCORE]; /* each core's first segment; ->next the others */
	uint32_t *ep_total;		     /* chunks on each endpoint, all segments */
	unsigned segments;
	uint8_t dtypes; /* bit per dtype its segments hold */
};

struct ctl_conn {
	int fd;
	size_t len;
	char *buf; /* the request being read */
	char *out; /* replies not yet taken by the client */
	size_t out_len, out_off;
	bool drop;		     /* over CTL_OUT_MAX: close once the loop comes round */
	const char *bye;	     /* why it goes once its ERR is sent; NULL: it stays */
	uint32_t src_be;	     /* the client's address, for the per-source caps */
	uint64_t born_ns;	     /* accepted: CTL_PROVE_NS from here to proved */
	uint64_t stalled_ns;	     /* since when replies wait and none is taken; 0 */
	int outq;		     /* replies in the kernel's send queue, last look */
	uint64_t backlog_ns;	     /* since when replies wait, ours or the kernel's
				      * (taken in part or not); 0: both queues empty */
	bool unread;		     /* replies sat untaken over CTL_UNREAD_NS since the
				      * queues were last empty: why it goes, whoever ends it */
	unsigned jobs;		     /* jobs this connection registered */
	struct nic_ctl_session sess; /* authed once the client proved the box key */
	char peer[48];
};

struct box_ctl {
	struct box *b;
	uint8_t key[NIC_KEY_LEN]; /* the box key ([management] key_file) */
	pthread_mutex_t lock;	  /* the registry, against telemetry readers */
	int lfd;
	struct ctl_conn conn[CTL_MAX_CONNS];
	unsigned n_jobs;
	struct ctl_job *job[SS_MAX_JOBS];
	/* Jobs off the cores whose results may still be on the wire (or whose
	 * cores never said they let go): their memory, still counted in used[],
	 * is freed and credited back once nothing refers to it. */
	unsigned n_zombies;
	struct ctl_job *zombie[SS_MAX_JOBS];
	uint64_t used[NUMA_MAX_NODES];
};

static uint64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void box_ctl_lock(struct box_ctl *c)
{
	pthread_mutex_lock(&c->lock);
}

void box_ctl_unlock(struct box_ctl *c)
{
	pthread_mutex_unlock(&c->lock);
}

unsigned box_ctl_n_jobs(const struct box_ctl *c)
{
	return c->n_jobs;
}

uint64_t box_ctl_used(const struct box_ctl *c, unsigned node)
{
	return node < NUMA_MAX_NODES ? c->used[node] : 0;
}

void box_ctl_job(const struct box_ctl *c, unsigned i, struct box_job_view *v)
{
	const struct ctl_job *j = c->job[i];

	v->id = j->id;
	v->n = j->desc.n;
	v->dtype = j->desc.dtype;
	v->frag_size = j->desc.frag_size;
	v->chunk_size = j->desc.chunk_size;
	v->chunks = j->chunks;
	v->bytes = j->bytes;
	v->per_lcore = j->state;
}

/* ---- replies -------------------------------------------------------------- */

static struct ctl_conn *conn_of(struct box_ctl *c, int fd)
{
	unsigned i;

	for (i = 0; i < CTL_MAX_CONNS; i++)
		if (c->conn[i].fd == fd)
			return &c->conn[i];
	return NULL;
}

/* One reply line into the connection's output buffer; the control loop
 * sends it as the client takes it. Never blocks. */
static int say(struct box_ctl *c, int fd, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int say(struct box_ctl *c, int fd, const char *fmt, ...)
{
	struct ctl_conn *cn = conn_of(c, fd);
	char line[CTL_REPLY_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || !cn || cn->drop)
		return -1;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (cn->out_len + (size_t)n > CTL_OUT_MAX) {
		cn->drop = true; /* it does not read: it goes, nobody waits for it */
		return -1;
	}
	if (!cn->out) {
		cn->out = malloc(CTL_OUT_MAX);
		if (!cn->out) {
			cn->drop = true;
			return -1;
		}
	}
	memcpy(cn->out + cn->out_len, line, (size_t)n);
	cn->out_len += (size_t)n;
	return 0;
}

/*
 * The bytes of job state endpoint @g would still take for a new job: its
 * node's free budget, less BOX_ROOM_RESERVE of the budget (the segments'
 * headers, which a worker cannot cost without knowing the cores), shared
 * among the node's endpoints by weight, and at most its weight's part of
 * limits.job_memory. Called with the lock held.
 */
#define BOX_ROOM_RESERVE 256 /* 1/256 of the node's budget */
static uint64_t ep_room(const struct box_ctl *c, unsigned g)
{
	const struct box *b = c->b;
	unsigned node = b->lc[b->ep[g].lcore]->node, e;
	uint64_t w_node = 0, w_all = 0, budget = b->node_budget[node],
		 keep = budget / BOX_ROOM_RESERVE, free_b, room, job;

	for (e = 0; e < b->n_eps; e++) {
		w_all += b->ep[e].weight_kbps;
		if (b->lc[b->ep[e].lcore]->node == node)
			w_node += b->ep[e].weight_kbps;
	}
	free_b = c->used[node] + keep < budget ? budget - c->used[node] - keep : 0;
	room = (uint64_t)((unsigned __int128)free_b * b->ep[g].weight_kbps / w_node);
	job = (uint64_t)((unsigned __int128)b->cfg->limits.job_memory * b->ep[g].weight_kbps /
			 w_all);
	return room < job ? room : job;
}

/* The EP lines; with @rooms (a proved connection's ENDPOINTS), each
 * endpoint's room. */
static void say_endpoints(struct box_ctl *c, int fd, bool rooms)
{
	struct box *b = c->b;
	char line[160];
	unsigned g;

	for (g = 0; g < b->n_eps; g++) {
		const struct box_ep *ep = &b->lc[b->ep[g].lcore]->ep[b->ep[g].slot];
		const struct nic_ctl_ep e = {.idx = g,
					     .addr = ep->self,
					     .weight_kbps = b->ep[g].weight_kbps,
					     .room = rooms ? ep_room(c, g) : NIC_CTL_ROOM_UNKNOWN};

		if (nic_ctl_format_ep(line, sizeof(line), &e) > 0)
			say(c, fd, "%s", line);
	}
}

/* ---- talking to the cores ----------------------------------------------- */

/* Send one message to every active lcore and collect the replies. Returns
 * 0, or -ETIMEDOUT when a core did not answer within 5 s. */
static int to_cores(struct box_ctl *c, struct box_msg *msgs)
{
	struct box *b = c->b;
	unsigned l, pending = 0;
	struct timespec ts = {0, 100 * 1000};
	int waited_us = 0;

	for (l = 0; l < RTE_MAX_LCORE; l++) {
		if (!b->lc[l] || !b->lc[l]->active)
			continue;
		if (rte_ring_enqueue(b->lc[l]->req, &msgs[l]) != 0)
			return -ENOBUFS;
		pending++;
	}
	while (pending) {
		for (l = 0; l < RTE_MAX_LCORE; l++) {
			void *m;

			if (b->lc[l] && b->lc[l]->active &&
			    rte_ring_dequeue(b->lc[l]->resp, &m) == 0)
				pending--;
		}
		if (!pending)
			break;
		if (waited_us > 5 * 1000 * 1000)
			return -ETIMEDOUT;
		nanosleep(&ts, NULL);
		waited_us += 100;
	}
	return 0;
}

static bool job_busy(const struct ss_job *s)
{
	uint32_t f;

	for (; s; s = s->next)
		for (f = 0; f < s->n_frags * 2; f++)
			if (box_txref_inflight(ss_job_txref(s, f / 2, f % 2)))
				return true;
	return false;
}

static void segs_free(struct ss_job *s)
{
	while (s) {
		struct ss_job *next = s->next;

		rte_free(s);
		s = next;
	}
}

static void job_free_state(struct ctl_job *j)
{
	unsigned l;

	for (l = 0; l < RTE_MAX_LCORE; l++) {
		segs_free(j->state[l]);
		j->state[l] = NULL;
	}
}

static bool job_in_flight(const struct ctl_job *j)
{
	unsigned l;

	for (l = 0; l < RTE_MAX_LCORE; l++)
		if (j->state[l] && job_busy(j->state[l]))
			return true;
	return false;
}

/* Memory and budget go back together: only once nothing refers to it. */
static void job_free(struct box_ctl *c, struct ctl_job *j)
{
	unsigned l;

	job_free_state(j);
	for (l = 0; l < NUMA_MAX_NODES; l++)
		c->used[l] -= j->node_bytes[l];
	free(j->ep_total);
	free(j);
}

/* Take @j off every core and off the registry. Its memory is freed now if
 * no result of it is on the wire, or later (zombies_reap) when none is any
 * more; a job a core did not let go of is never freed, and its memory stays
 * counted against the budget. Called with the lock held. */
static void job_remove(struct box_ctl *c, unsigned idx)
{
	struct ctl_job *j = c->job[idx];
	static struct box_msg msgs[RTE_MAX_LCORE];
	unsigned l;

	c->job[idx] = c->job[--c->n_jobs];
	if (j->owner >= 0 && c->conn[j->owner].jobs)
		c->conn[j->owner].jobs--;
	for (l = 0; l < RTE_MAX_LCORE; l++)
		msgs[l] = (struct box_msg){.type = BOX_MSG_DEL, .job_id = j->id};
	if (to_cores(c, msgs) != 0) {
		fprintf(stderr,
			"pboxd: job %u: a core did not answer; its memory (%" PRIu64
			" bytes) stays held and counted\n",
			j->id, j->bytes);
		j->owner = -2; /* never freed: a core may still hold it */
		c->zombie[c->n_zombies++] = j;
		return;
	}
	/* Transmit completions are reaped by the cores (DEL flushes them). */
	if (!job_in_flight(j)) {
		job_free(c, j);
		return;
	}
	j->owner = -1;
	c->zombie[c->n_zombies++] = j;
}

/* Free the removed jobs whose results have left the NIC (lock held). */
static void zombies_reap(struct box_ctl *c)
{
	unsigned i;

	for (i = c->n_zombies; i-- > 0;) {
		struct ctl_job *j = c->zombie[i];

		if (j->owner == -2 || job_in_flight(j))
			continue;
		c->zombie[i] = c->zombie[--c->n_zombies];
		job_free(c, j);
	}
}

static int find_job(const struct box_ctl *c, uint32_t id)
{
	unsigned i;

	for (i = 0; i < c->n_jobs; i++)
		if (c->job[i]->id == id)
			return (int)i;
	return -1;
}

/* ---- requests ------------------------------------------------------------ */

static void human(uint64_t b, char *out, size_t len)
{
	if (b >= (1ull << 30))
		snprintf(out, len, "%.1f GiB", (double)b / (1ull << 30));
	else
		snprintf(out, len, "%.1f MiB", (double)b / (1ull << 20));
}

/*
 * REGISTER, in five steps: parse (the codec, strict), admit (id, job slots,
 * what each core would hold and whether the budget has room), allocate (on
 * each core's node), install (through the cores' rings), reply. A failed
 * step undoes what the earlier ones did and answers ERR saying why.
 */
struct reg {
	struct nic_ctl_reg req;
	const struct ctl_job *grow;		/* GROW: the job it adds a segment to */
	struct ss_job_desc desc[RTE_MAX_LCORE]; /* what each active core holds */
	uint64_t need[NUMA_MAX_NODES];
	struct box_msg msg[RTE_MAX_LCORE];
	struct ss_job *seg[RTE_MAX_LCORE]; /* GROW: the new segments, until installed */
};

static int reg_parse(struct box_ctl *c, int slot, const char *args, struct nic_ctl_reg *r)
{
	int fd = c->conn[slot].fd;
	const struct box_cfg *cfg = c->b->cfg;
	const struct nic_ctl_reg_limits lim = {.max_workers = cfg->limits.workers,
					       .max_frag = (uint32_t)cfg->data.fragment_size,
					       .dflt_frag = (uint32_t)cfg->data.fragment_size,
					       .dflt_chunk = (uint32_t)cfg->data.chunk_size,
					       .n_eps = c->b->n_eps};
	char err[CTL_REPLY_MAX - 8];

	if (nic_ctl_parse_register(args, &lim, &c->conn[slot].sess, r, err, sizeof(err)) == 0)
		return 0;
	say(c, fd, "ERR %s", err);
	return -1;
}

/* Core @l's async chunks of request @r (its runs on the core's endpoints),
 * one ss_root each on the core's own endpoint numbering, into a new array
 * (NULL where it has none): 0, or -1 out of memory. */
static int core_roots(const struct box *b, const struct nic_ctl_reg *r, unsigned l,
		      struct ss_job_desc *d)
{
	uint32_t total = 0, k, i, got = 0;
	struct ss_root *a;

	d->roots = NULL;
	d->n_roots = 0;
	for (k = 0; k < r->n_asyncs; k++)
		if (b->ep[r->asyncs[k].ep].lcore == l)
			total += r->asyncs[k].count;
	if (!total)
		return 0;
	a = malloc(total * sizeof(*a));
	if (!a)
		return -1;
	for (k = 0; k < r->n_asyncs; k++) {
		const struct nic_ctl_async *q = &r->asyncs[k];

		for (i = 0; b->ep[q->ep].lcore == l && i < q->count; i++)
			a[got++] = (struct ss_root){.ep = (uint16_t)b->ep[q->ep].slot,
						    .chunk = q->chunk + i,
						    .mode = SS_ASYNC,
						    .root = (uint16_t)q->root};
	}
	d->roots = a;
	d->n_roots = got;
	return 0;
}

static void core_roots_free(struct ss_job_desc *d)
{
	free((void *)(uintptr_t)d->roots);
	d->roots = NULL;
	d->n_roots = 0;
}

static int reg_admit(struct box_ctl *c, int fd, struct reg *g)
{
	struct box *b = c->b;
	const struct box_cfg *cfg = b->cfg;
	const struct nic_ctl_reg *r = &g->req;
	uint64_t total = 0;
	unsigned e, l;
	char a[32], z[32];

	if (!g->grow && find_job(c, r->job) >= 0) {
		say(c, fd, "ERR job %u: id in use", r->job);
		return -1;
	}
	if (!g->grow && c->n_jobs + c->n_zombies >= cfg->limits.jobs) {
		say(c, fd, "ERR job %u: the box holds %u jobs already ([limits] jobs)", r->job,
		    cfg->limits.jobs);
		return -1;
	}
	memset(g->need, 0, sizeof(g->need));
	for (l = 0; l < RTE_MAX_LCORE; l++) {
		struct box_lcore *lc = b->lc[l];
		struct ss_job_desc *d = &g->desc[l];
		const char *why;

		if (!lc || !lc->active)
			continue;
		*d = (struct ss_job_desc){.id = r->job,
					  .n = (uint16_t)r->n,
					  .dtype = r->dtype,
					  .frag_size = r->frag,
					  .chunk_size = r->chunk,
					  .n_eps = (uint16_t)lc->n_eps,
					  .ranks = r->ranks,
					  .comp_ppm = r->comp,
					  .in_order = r->in_order,
					  .staleness = r->stale};
		if (g->grow) /* the job's key and MAC mode, as registered */
			d->mac = g->grow->desc.mac;
		else
			nic_mac_init(&d->mac, r->mac, r->key);
		for (e = 0; e < b->n_eps; e++)
			if (b->ep[e].lcore == l) {
				d->ep_chunks[b->ep[e].slot] = r->chunks[e];
				d->ep_base[b->ep[e].slot] = g->grow ? g->grow->ep_total[e] : 0;
			}
		if (core_roots(b, r, l, d)) {
			say(c, fd, "ERR job %u: out of memory", r->job);
			return -1;
		}
		why = ss_job_desc_check(d);
		if (why) {
			core_roots_free(d);
			say(c, fd, "ERR job %u: %s", r->job, why);
			return -1;
		}
		g->need[lc->node] += ss_job_bytes(d, box_txref_size()); /* the stores' counts too */
		core_roots_free(d);
	}
	for (l = 0; l < NUMA_MAX_NODES; l++) {
		total += g->need[l];
		if (c->used[l] + g->need[l] > b->node_budget[l]) {
			human(g->need[l], a, sizeof(a));
			human(b->node_budget[l] - c->used[l], z, sizeof(z));
			say(c, fd,
			    "ERR job %u: over the memory budget: needs %s of state on node %u, %s "
			    "free there (memory.hugepage_budget)",
			    r->job, a, l, z);
			return -1;
		}
	}
	if (g->grow)
		total += g->grow->bytes;
	if (total > cfg->limits.job_memory) {
		human(total, a, sizeof(a));
		human(cfg->limits.job_memory, z, sizeof(z));
		say(c, fd, "ERR job %u: needs %s of state, over limits.job_memory %s", r->job, a,
		    z);
		return -1;
	}
	return 0;
}

/* Each core's share on its node, laid out and its transmit references set. */
static int reg_allocate(struct box_ctl *c, int fd, struct reg *g, struct ctl_job *j)
{
	struct box *b = c->b;
	unsigned l;
	uint32_t f;
	char a[32];

	for (l = 0; l < RTE_MAX_LCORE; l++) {
		static struct ss_short shorts[NIC_CTL_MAX_SHORTS];
		struct box_lcore *lc = b->lc[l];
		struct ss_job_desc *d = &g->desc[l];
		struct ss_job *s;
		size_t bytes;
		uint32_t k;

		if (!lc || !lc->active)
			continue;
		/* this core's short chunks, on its own endpoint numbering */
		d->shorts = shorts;
		d->n_shorts = 0;
		for (k = 0; k < g->req.n_shorts; k++) {
			const struct nic_ctl_short *q = &g->req.shorts[k];

			if (b->ep[q->ep].lcore == l)
				shorts[d->n_shorts++] =
					(struct ss_short){.ep = (uint16_t)b->ep[q->ep].slot,
							  .chunk = q->chunk,
							  .bytes = q->bytes};
		}
		if (core_roots(b, &g->req, l, d)) {
			say(c, fd, "ERR job %u: out of memory", j->id);
			return -1;
		}
		bytes = ss_job_bytes(d, box_txref_size());
		s = rte_malloc_socket("pbox_job", bytes, ss_job_align(d), b->node_socket[lc->node]);
		if (!s) {
			core_roots_free(d);
			human(bytes, a, sizeof(a));
			say(c, fd,
			    "ERR job %u: cannot allocate %s on node %u (hugepages exhausted?)",
			    j->id, a, lc->node);
			return -1;
		}
		s = ss_job_init(s, d, box_txref_size(), sum_ops_best());
		if (!j->state[l]) {
			j->state[l] = s;
		} else { /* a GROW: the core links it in when it takes the message */
			g->seg[l] = s;
		}
		d->shorts = NULL; /* the array is reused by the next core */
		d->n_shorts = 0;
		core_roots_free(d);
		s->busy = box_txref_busy;
		for (f = 0; f < s->n_frags; f++) {
			box_txref_init(ss_job_txref(s, f, 0), lc, ss_job_res(s, f, 0));
			box_txref_init(ss_job_txref(s, f, 1), lc, ss_job_res(s, f, 1));
		}
		g->msg[l] = (struct box_msg){
			.type = g->grow ? BOX_MSG_GROW : BOX_MSG_ADD, .job_id = j->id, .job = s};
		j->node_bytes[lc->node] += bytes;
		j->bytes += bytes;
	}
	return 0;
}

static int reg_install(struct box_ctl *c, int fd, struct reg *g, const struct ctl_job *j)
{
	struct box *b = c->b;
	unsigned l;

	if (to_cores(c, g->msg) != 0) {
		say(c, fd, "ERR job %u: a data core did not take it", j->id);
		return -1;
	}
	for (l = 0; l < RTE_MAX_LCORE; l++)
		if (b->lc[l] && b->lc[l]->active && g->msg[l].rc != 0) {
			say(c, fd, "ERR job %u: core %u refused it: %s", j->id, l,
			    strerror(-g->msg[l].rc));
			return -1;
		}
	return 0;
}

static void reg_reply(struct box_ctl *c, int fd, const struct ctl_job *j)
{
	const struct nic_ctl_reg_ok ok = {.job = j->id,
					  .bytes = j->bytes,
					  .frag = j->desc.frag_size,
					  .chunk = j->desc.chunk_size};
	char line[CTL_REPLY_MAX];

	say_endpoints(c, fd, false);
	if (nic_ctl_format_reg_ok(line, sizeof(line), &ok) > 0)
		say(c, fd, "%s", line);
}

static void do_register(struct box_ctl *c, int slot, const char *args)
{
	static struct reg g; /* the control thread's; ~100 KB, not on its stack */
	int fd = c->conn[slot].fd;
	struct ctl_job *j;
	unsigned l;

	memset(g.msg, 0, sizeof(g.msg));
	g.grow = NULL;
	g.req.grow = false;
	if (reg_parse(c, slot, args, &g.req) || reg_admit(c, fd, &g))
		return;
	j = calloc(1, sizeof(*j));
	if (j)
		j->ep_total = calloc(c->b->n_eps ? c->b->n_eps : 1, sizeof(uint32_t));
	if (!j || !j->ep_total) {
		free(j);
		say(c, fd, "ERR out of memory");
		return;
	}
	j->id = g.req.job;
	memcpy(j->key, g.req.key, sizeof(j->key));
	j->owner = slot;
	for (l = 0; l < RTE_MAX_LCORE; l++)
		if (g.desc[l].n) {
			j->desc = g.desc[l];
			break;
		}
	for (l = 0; l < g.req.n_eps; l++) {
		j->chunks += g.req.chunks[l];
		j->ep_total[l] = g.req.chunks[l];
	}
	j->segments = 1;
	j->dtypes = (uint8_t)(1u << g.req.dtype);
	if (reg_allocate(c, fd, &g, j) || reg_install(c, fd, &g, j))
		goto fail;
	for (l = 0; l < NUMA_MAX_NODES; l++)
		c->used[l] += j->node_bytes[l];
	c->job[c->n_jobs++] = j;
	c->conn[slot].jobs++;
	printf("pboxd: job %u registered by %s: n=%u %s, %" PRIu64 " chunks, %" PRIu64
	       " bytes of state\n",
	       j->id, c->conn[slot].peer, j->desc.n, nic_dtype_name(j->desc.dtype), j->chunks,
	       j->bytes);
	reg_reply(c, fd, j);
	return;
fail:
	/* Cores that installed it must drop it before the memory goes. */
	for (l = 0; l < RTE_MAX_LCORE; l++)
		g.msg[l] = (struct box_msg){.type = BOX_MSG_DEL, .job_id = j->id};
	if (to_cores(c, g.msg) == 0)
		job_free_state(j);
	free(j->ep_total);
	free(j);
}

/* GROW's fields must describe the job as registered, but for its new chunks. */
static int grow_check(struct box_ctl *c, int slot, const struct nic_ctl_reg *r, int *idx)
{
	int fd = c->conn[slot].fd;
	const struct ctl_job *j;
	const struct ss_job *first = NULL;

	*idx = find_job(c, r->job);
	if (*idx < 0) {
		say(c, fd, "ERR job %u: not registered", r->job);
		return -1;
	}
	j = c->job[*idx];
	if (j->owner != slot) {
		say(c, fd, "ERR job %u: only its registrar's connection may grow it", r->job);
		return -1;
	}
	if (r->n != j->desc.n || r->frag != j->desc.frag_size || r->chunk != j->desc.chunk_size) {
		say(c, fd,
		    "ERR job %u: n, frag and chunk must be the job's (n=%u frag=%u chunk=%u)",
		    r->job, j->desc.n, j->desc.frag_size, j->desc.chunk_size);
		return -1;
	}
	for (unsigned l = 0; l < RTE_MAX_LCORE && !first; l++)
		first = j->state[l]; /* its addresses are bound, the same on every core */
	for (uint32_t q = 0; first && q < r->n; q++)
		if (r->ranks[q].ip_be != ss_peer(first, 0, q)->ip_be ||
		    r->ranks[q].port != ss_peer(first, 0, q)->port) {
			say(c, fd, "ERR job %u: ranks= differs from the registration at rank %u",
			    r->job, q);
			return -1;
		}
	return 0;
}

/*
 * GROW: parse, check against the job, admit, allocate and install as a
 * REGISTER does, but as one more segment of the job (BOX_MSG_GROW links it
 * behind the core's others). A refusal before the install leaves the job
 * as it was; a core that does not take its segment ends the job.
 */
static void do_grow(struct box_ctl *c, int slot, const char *args)
{
	static struct reg g;
	int fd = c->conn[slot].fd, idx;
	uint64_t node0[NUMA_MAX_NODES], bytes0, chunks = 0;
	struct ctl_job *j;
	unsigned l;

	memset(g.msg, 0, sizeof(g.msg));
	memset(g.seg, 0, sizeof(g.seg));
	g.grow = NULL;
	g.req.grow = true;
	if (reg_parse(c, slot, args, &g.req) || grow_check(c, slot, &g.req, &idx))
		return;
	j = c->job[idx];
	g.grow = j;
	if (reg_admit(c, fd, &g))
		return;
	memcpy(node0, j->node_bytes, sizeof(node0));
	bytes0 = j->bytes;
	if (reg_allocate(c, fd, &g, j)) {
		for (l = 0; l < RTE_MAX_LCORE; l++)
			rte_free(g.seg[l]);
		memcpy(j->node_bytes, node0, sizeof(node0));
		j->bytes = bytes0;
		return;
	}
	if (reg_install(c, fd, &g, j)) {
		/* some core may hold its segment, some not: the job cannot go on */
		for (l = 0; l < RTE_MAX_LCORE; l++)
			if (g.msg[l].type == BOX_MSG_GROW && g.msg[l].rc != 0)
				rte_free(g.seg[l]);
		for (l = 0; l < NUMA_MAX_NODES; l++)
			c->used[l] += j->node_bytes[l] - node0[l];
		printf("pboxd: job %u: a segment was not installed; the job is removed\n", j->id);
		job_remove(c, (unsigned)idx);
		return;
	}
	for (l = 0; l < NUMA_MAX_NODES; l++)
		c->used[l] += j->node_bytes[l] - node0[l];
	for (l = 0; l < g.req.n_eps; l++) {
		chunks += g.req.chunks[l];
		j->ep_total[l] += g.req.chunks[l];
	}
	j->chunks += chunks;
	j->segments++;
	j->dtypes |= (uint8_t)(1u << g.req.dtype);
	printf("pboxd: job %u grew by %" PRIu64 " %s chunks (segment %u): %" PRIu64
	       " bytes of state\n",
	       j->id, chunks, nic_dtype_name(g.req.dtype), j->segments, j->bytes);
	reg_reply(c, fd, j);
}

/* STATS: one "STAT key=value" line per box counter. */
struct stat_out {
	struct box_ctl *c;
	int fd;
	unsigned n;
};

static void say_stat(void *arg, const struct box_stat_desc *d, uint64_t value)
{
	struct stat_out *so = arg;

	say(so->c, so->fd, "STAT %s=%" PRIu64, d->key, value);
	so->n++;
}

/* The oldest connection yet to prove the box key, from @src_be (0: from
 * anywhere); CTL_MAX_CONNS when there is none. */
static unsigned oldest_unproved(const struct box_ctl *c, uint32_t src_be)
{
	unsigned i, old = CTL_MAX_CONNS;

	for (i = 0; i < CTL_MAX_CONNS; i++) {
		const struct ctl_conn *cn = &c->conn[i];

		if (cn->fd >= 0 && !cn->sess.authed && (!src_be || cn->src_be == src_be) &&
		    (old == CTL_MAX_CONNS || cn->born_ns < c->conn[old].born_ns))
			old = i;
	}
	return old;
}

/* Connections from @src_be: proved (@proved) or not. */
static unsigned count_from(const struct box_ctl *c, uint32_t src_be, bool proved)
{
	unsigned i, n = 0;

	for (i = 0; i < CTL_MAX_CONNS; i++)
		n += c->conn[i].fd >= 0 && (!src_be || c->conn[i].src_be == src_be) &&
		     c->conn[i].sess.authed == proved;
	return n;
}

/* AUTH <client nonce>: the box's proof; PROVE <proof>: the client's. */
static void do_auth(struct box_ctl *c, int slot, const char *verb, const char *arg)
{
	struct ctl_conn *cn = &c->conn[slot];
	struct nic_ctl_session *s = &cn->sess;
	uint8_t proof[32];
	size_t got = 0;

	if (s->authed) {
		say(c, cn->fd, "ERR %s: this connection has authenticated already", verb);
		return;
	}
	if (verb[0] == 'A') {
		char ok[160];

		if (!arg || strlen(arg) != 2 * NIC_CTL_NONCE_LEN ||
		    sodium_hex2bin(s->nc, sizeof(s->nc), arg, strlen(arg), NULL, &got, NULL) ||
		    got != sizeof(s->nc)) {
			say(c, cn->fd, "ERR AUTH: expected AUTH and a nonce of %u hex digits",
			    2 * NIC_CTL_NONCE_LEN);
			return;
		}
		randombytes_buf(s->nb, sizeof(s->nb));
		nic_ctl_session_derive(s, c->key);
		if (nic_ctl_format_auth_ok(ok, sizeof(ok), s) > 0)
			say(c, cn->fd, "%s", ok);
		return;
	}
	if (!sodium_is_zero(s->nb, sizeof(s->nb)) && arg && strlen(arg) == 64 &&
	    sodium_hex2bin(proof, sizeof(proof), arg, 64, NULL, &got, NULL) == 0 &&
	    got == sizeof(proof) && sodium_memcmp(proof, s->client_proof, sizeof(proof)) == 0) {
		if (count_from(c, cn->src_be, true) >= CTL_PER_SOURCE) {
			say(c, cn->fd, "ERR too many control connections from this address");
			cn->bye = "had one proved connection too many from its address";
			return;
		}
		s->authed = true;
		say(c, cn->fd, "OK");
		return;
	}
	say(c, cn->fd, "ERR PROVE: wrong proof: this client does not hold the box key");
	printf("pboxd: control connection from %s failed the box key proof\n", cn->peer);
	cn->bye = "failed the box key proof";
}

/* AUTH's or PROVE's argument: exactly one word of hex digits after one
 * space, nothing else (as strict as REGISTER's fields); NULL otherwise. */
static const char *auth_arg(const char *line)
{
	const char *a = strchr(line, ' ');

	if (!a || (strncmp(line, "AUTH ", 5) && strncmp(line, "PROVE ", 6)))
		return NULL;
	a++;
	return *a && strspn(a, "0123456789abcdefABCDEF") == strlen(a) ? a : NULL;
}

/* UNREGISTER job=ID proof=P: the job's key proved on this connection. */
static void do_unregister(struct box_ctl *c, int slot, const char *args)
{
	int fd = c->conn[slot].fd, idx;
	char proof[65], why[160];
	uint32_t id;

	if (nic_ctl_parse_unregister(args, &id, proof, why, sizeof(why))) {
		say(c, fd, "ERR %s", why);
		return;
	}
	box_ctl_lock(c);
	idx = find_job(c, id);
	if (idx < 0) {
		say(c, fd, "ERR job %" PRIu32 ": not registered", id);
	} else {
		char want[65];

		nic_ctl_unreg_proof(&c->conn[slot].sess, id, c->job[idx]->key, want);
		if (sodium_memcmp(proof, want, 64)) {
			say(c, fd,
			    "ERR job %" PRIu32 ": proof wrong (HMAC of the job's key on this "
			    "connection)",
			    id);
		} else {
			job_remove(c, (unsigned)idx);
			printf("pboxd: job %" PRIu32 " unregistered\n", id);
			say(c, fd, "OK");
		}
	}
	box_ctl_unlock(c);
}

static void do_request(struct box_ctl *c, int slot, char *line)
{
	int fd = c->conn[slot].fd;
	const char *strict = auth_arg(line); /* before strtok_r() cuts the line */
	char *save = NULL, *verb = strtok_r(line, " \t", &save);
	char *rest = strtok_r(NULL, "", &save);
	unsigned i;

	if (c->conn[slot].bye)
		return;
	if (!verb) { /* one reply per request, this one too */
		say(c, fd,
		    "ERR an empty request (ENDPOINTS, AUTH, PROVE, REGISTER, GROW, "
		    "UNREGISTER, LIST, STATS)");
		return;
	}
	if (strcmp(verb, "AUTH") == 0 || strcmp(verb, "PROVE") == 0) {
		do_auth(c, slot, verb, strict);
		return;
	}
	if (!c->conn[slot].sess.authed && strcmp(verb, "ENDPOINTS") != 0) {
		say(c, fd, "ERR %.20s: authenticate first (AUTH, PROVE with the box key)", verb);
		return;
	}
	if (strcmp(verb, "REGISTER") == 0 || strcmp(verb, "GROW") == 0) {
		box_ctl_lock(c);
		if (verb[0] == 'R')
			do_register(c, slot, rest ? rest : "");
		else
			do_grow(c, slot, rest ? rest : "");
		box_ctl_unlock(c);
		return;
	}
	if (strcmp(verb, "UNREGISTER") == 0) {
		do_unregister(c, slot, rest ? rest : "");
		return;
	}
	if (rest && rest[strspn(rest, " \t")]) { /* the requests left take no fields */
		say(c, fd, "ERR %.20s takes no fields ('%.40s')", verb, rest);
		return;
	}
	if (strcmp(verb, "ENDPOINTS") == 0) {
		const struct nic_ctl_geometry geo = {
			.n_eps = c->b->n_eps,
			.frag = (uint32_t)c->b->cfg->data.fragment_size,
			.chunk = (uint32_t)c->b->cfg->data.chunk_size,
			.mtu = c->b->cfg->data.mtu,
			.txref = c->conn[slot].sess.authed ? (uint32_t)box_txref_size() : 0};
		char ok[128];

		box_ctl_lock(c);
		say_endpoints(c, fd, c->conn[slot].sess.authed);
		box_ctl_unlock(c);
		if (nic_ctl_format_geometry(ok, sizeof(ok), &geo) > 0)
			say(c, fd, "%s", ok);
	} else if (strcmp(verb, "LIST") == 0) {
		box_ctl_lock(c);
		for (i = 0; i < c->n_jobs; i++) {
			const struct ctl_job *j = c->job[i];

			char dt[32] = "";
			size_t off = 0;

			for (unsigned d = 0; d < SUM_DTYPE_COUNT; d++)
				if (j->dtypes >> d & 1)
					off += (size_t)snprintf(dt + off, sizeof(dt) - off, "%s%s",
								off ? "+" : "",
								sum_dtype_name((enum sum_dtype)d));
			say(c, fd,
			    "JOB id=%u n=%u dtype=%s frag=%u chunk=%u chunks=%" PRIu64
			    " bytes=%" PRIu64 " segments=%u",
			    j->id, j->desc.n, dt, j->desc.frag_size, j->desc.chunk_size, j->chunks,
			    j->bytes, j->segments);
		}
		say(c, fd, "OK jobs=%u", c->n_jobs);
		box_ctl_unlock(c);
	} else if (strcmp(verb, "STATS") == 0) {
		struct box_core_stats tot;
		struct stat_out so = {.c = c, .fd = fd};
		uint64_t used = 0;

		box_stats_total(c->b, &tot);
		box_stats_visit(&tot, say_stat, &so);
		box_ctl_lock(c);
		for (i = 0; i < NUMA_MAX_NODES; i++)
			used += c->used[i];
		say(c, fd, "OK stats=%u jobs=%u state_bytes=%" PRIu64, so.n, c->n_jobs, used);
		box_ctl_unlock(c);
	} else {
		say(c, fd,
		    "ERR unknown request '%.40s' (ENDPOINTS, AUTH, PROVE, REGISTER, GROW, "
		    "UNREGISTER, LIST, STATS)",
		    verb);
	}
}

/* ---- connections ---------------------------------------------------------- */

static void conn_close(struct box_ctl *c, int slot, const char *why)
{
	struct ctl_conn *cn = &c->conn[slot];
	unsigned i;

	/* whatever came last, this is why it goes: also when the kernel's user
	 * timeout (CTL_DEAD_S) ended it first while its replies sat unread (in
	 * our buffer, or for over a second in the kernel's queue, which a
	 * receiver that never reads may still shrink now and then) */
	if (cn->drop || cn->unread || (cn->stalled_ns && cn->out_len)) {
		why = "was dropped: it did not read its replies";
		printf("pboxd: control connection from %s %s\n", cn->peer, why);
	}
	box_ctl_lock(c);
	for (i = c->n_jobs; i-- > 0;)
		if (c->job[i]->owner == slot) {
			printf("pboxd: job %u freed: %s %s\n", c->job[i]->id, cn->peer, why);
			job_remove(c, i);
		}
	box_ctl_unlock(c);
	close(cn->fd);
	free(cn->buf);
	free(cn->out);
	*cn = (struct ctl_conn){.fd = -1};
}

static void conn_read(struct box_ctl *c, int slot)
{
	struct ctl_conn *cn = &c->conn[slot];
	char *nl;
	ssize_t r;

	if (!cn->buf) {
		cn->buf = malloc(CTL_LINE_MAX + 1);
		if (!cn->buf) {
			conn_close(c, slot, "was dropped (out of memory)");
			return;
		}
	}
	r = recv(cn->fd, cn->buf + cn->len, CTL_LINE_MAX - cn->len, MSG_DONTWAIT);
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
		conn_close(c, slot,
			   r == 0 ? "closed its control connection"
				  : "lost its control connection (keepalive or user timeout)");
		return;
	}
	if (r < 0)
		return;
	cn->len += (size_t)r;
	cn->buf[cn->len] = '\0';
	/* requests are answered while the replies fit: the rest waits in the
	 * socket until the client takes what it was sent */
	while (cn->out_len - cn->out_off < CTL_OUT_LOW &&
	       (nl = memchr(cn->buf, '\n', cn->len)) != NULL) {
		size_t used = (size_t)(nl - cn->buf) + 1;

		*nl = '\0';
		if (nl > cn->buf && nl[-1] == '\r')
			nl[-1] = '\0';
		if (memchr(cn->buf, '\0', (size_t)(nl - cn->buf)))
			say(c, cn->fd, "ERR a request holds a NUL byte");
		else
			do_request(c, slot, cn->buf);
		memmove(cn->buf, cn->buf + used, cn->len - used);
		cn->len -= used;
		cn->buf[cn->len] = '\0';
	}
	if (cn->len == CTL_LINE_MAX) {
		say(c, cn->fd, "ERR request longer than %d bytes", CTL_LINE_MAX);
		cn->drop = true;
	} else if (!cn->sess.authed && cn->len > CTL_UNPROVED_LINE) {
		say(c, cn->fd, "ERR request longer than %d bytes before the box key is proved",
		    CTL_UNPROVED_LINE);
		cn->bye = "sent a line too long before proving the box key";
	}
}

/* Replies wait for the client (@now): since when, whatever it takes of them
 * meanwhile, as long as it still acknowledges what reaches it (its window
 * closed: it does not read). A client that reads empties both queues within
 * a round trip; one that does not is named for it when it goes, whether we
 * drop it for the stall, the kernel's user timeout ends it first (a
 * receiver that never reads may still take a little now and then, which
 * restarts the stall but not this), or it goes by itself. A host that no
 * longer acknowledges anything was cut off or died: not counted. */
static void backlog(struct ctl_conn *cn, uint64_t now)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);

	if (getsockopt(cn->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) != 0 ||
	    ti.tcpi_last_ack_recv > CTL_UNREAD_NS / 1000000) {
		cn->backlog_ns = 0;
		return;
	}
	if (!cn->backlog_ns)
		cn->backlog_ns = now;
	if (now - cn->backlog_ns > CTL_UNREAD_NS)
		cn->unread = true;
}

/* Send what the client will take now; 0, or -1 when it is to be dropped. */
static int conn_write(struct ctl_conn *cn, uint64_t now)
{
	while (cn->out_off < cn->out_len) {
		ssize_t w = send(cn->fd, cn->out + cn->out_off, cn->out_len - cn->out_off,
				 MSG_DONTWAIT | MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if (!cn->stalled_ns)
				cn->stalled_ns = now;
			if (now - cn->stalled_ns > CTL_UNREAD_NS)
				cn->unread = true;
			backlog(cn, now);
			return now - cn->stalled_ns > CTL_STALL_NS ? -1 : 0;
		}
		if (w <= 0)
			return -1;
		cn->out_off += (size_t)w;
		cn->stalled_ns = 0;
	}
	cn->out_len = cn->out_off = 0;
	cn->stalled_ns = 0;
	return 0;
}

/* Replies the client does not take may all sit in the kernel's send queue:
 * they stall too while the queue does not shrink, and are dropped as those
 * in ours are (1), so that the kernel's user timeout does not end it first
 * under another name. */
static int kernel_stall(struct ctl_conn *cn, uint64_t now)
{
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	int q = 0;

	/* ended by the kernel (its queue purged): conn_read() closes it, named */
	if (getsockopt(cn->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_CLOSE)
		return 0;
	if (ioctl(cn->fd, SIOCOUTQ, &q) != 0 || q <= 0) {
		cn->stalled_ns = 0;
		cn->outq = 0;
		cn->backlog_ns = 0;
		cn->unread = false;
		return 0;
	}
	if (!cn->stalled_ns || q < cn->outq)
		cn->stalled_ns = now;
	cn->outq = q;
	backlog(cn, now);
	return now - cn->stalled_ns > CTL_STALL_NS;
}

static void conn_options(int fd)
{
	int one = 1, idle = CTL_KA_IDLE, intvl = CTL_KA_INTVL, cnt = CTL_KA_CNT;
	unsigned user_ms = CTL_DEAD_S * 1000;

	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ERR @why to a connection about to go: one try, never waited for. */
static void say_last(int fd, const char *why)
{
	char line[160];
	int n = snprintf(line, sizeof(line), "ERR %s\n", why);

	if (send(fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		/* it goes either way */
	}
}

/* A refusal to a connection that gets no slot. */
static void refuse(int fd, const char *why)
{
	say_last(fd, why);
	close(fd);
}

/* A new connection, yet to prove the box key: it takes the place of the
 * oldest unproved one where those are full, from its own address first.
 * False when none was waiting. */
static bool conn_accept(struct box_ctl *c, uint64_t now)
{
	struct sockaddr_in peer;
	socklen_t pl = sizeof(peer);
	int fd = accept4(c->lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
	uint32_t src = peer.sin_addr.s_addr;
	unsigned i, free_slot = CTL_MAX_CONNS, old = CTL_MAX_CONNS;
	struct ctl_conn *cn;

	if (fd < 0)
		return false;
	if (count_from(c, src, true) >= CTL_PER_SOURCE) {
		refuse(fd, "too many control connections from this address");
		return true;
	}
	if (count_from(c, src, false) >= CTL_UNPROVED_PER_SOURCE)
		old = oldest_unproved(c, src);
	else if (count_from(c, 0, false) >= CTL_MAX_UNPROVED)
		old = oldest_unproved(c, 0);
	if (old < CTL_MAX_CONNS) {
		say_last(c->conn[old].fd, "a newer connection took this one's place: prove the "
					  "box key within 2 s of connecting");
		conn_close(c, (int)old,
			   "gave its place to a newer one: it had not proved the box key");
	}
	for (i = 0; i < CTL_MAX_CONNS && free_slot == CTL_MAX_CONNS; i++)
		if (c->conn[i].fd < 0)
			free_slot = i;
	if (free_slot == CTL_MAX_CONNS) { /* every other slot holds a proved one */
		refuse(fd, "too many control connections");
		return true;
	}
	conn_options(fd);
	cn = &c->conn[free_slot];
	*cn = (struct ctl_conn){.fd = fd, .src_be = src, .born_ns = now};
	inet_ntop(AF_INET, &peer.sin_addr, cn->peer, sizeof(cn->peer));
	snprintf(cn->peer + strlen(cn->peer), sizeof(cn->peer) - strlen(cn->peer), ":%u",
		 ntohs(peer.sin_port));
	return true;
}

struct box_ctl *box_ctl_create(struct box *b, const uint8_t key[NIC_KEY_LEN])
{
	struct box_ctl *c = calloc(1, sizeof(*c));
	struct sockaddr_in sa = {.sin_family = AF_INET};
	char ip[INET_ADDRSTRLEN];
	int one = 1, i;

	if (!c)
		return NULL;
	c->b = b;
	memcpy(c->key, key, NIC_KEY_LEN);
	pthread_mutex_init(&c->lock, NULL);
	for (i = 0; i < CTL_MAX_CONNS; i++)
		c->conn[i].fd = -1;
	sa.sin_addr.s_addr = b->cfg->mgmt.address.be;
	sa.sin_port = htons((uint16_t)b->cfg->mgmt.port);
	inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
	c->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->lfd < 0 || setsockopt(c->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(c->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(c->lfd, SOMAXCONN)) {
		fprintf(stderr, "pboxd: [management] %s:%u: cannot listen: %s\n", ip,
			b->cfg->mgmt.port, strerror(errno));
		if (c->lfd >= 0)
			close(c->lfd);
		free(c);
		return NULL;
	}
	printf("pboxd: control plane on %s:%u (a dead registrar's jobs freed within %d s)\n", ip,
	       b->cfg->mgmt.port, CTL_DEAD_S);
	return c;
}

int box_ctl_run(struct box_ctl *c)
{
	static struct pollfd pfd[CTL_MAX_CONNS + 1];
	static int slot[CTL_MAX_CONNS + 1];

	while (!c->b->quit) {
		uint64_t now = now_ns();
		unsigned n = 0, i;
		int r;

		/* bounded output, stalls, idle connections, freed memory */
		for (i = 0; i < CTL_MAX_CONNS; i++) {
			struct ctl_conn *cn = &c->conn[i];

			if (cn->fd < 0)
				continue;
			if (cn->out_len && conn_write(cn, now) != 0)
				cn->drop = true;
			if (!cn->out_len && kernel_stall(cn, now)) /* all with the kernel */
				cn->drop = true;
			if (cn->drop)
				conn_close(c, (int)i, "was dropped: it did not read its replies");
			else if (cn->bye && !cn->out_len)
				conn_close(c, (int)i, cn->bye);
			else if (!cn->sess.authed && now - cn->born_ns > CTL_PROVE_NS) {
				say_last(cn->fd, "this connection did not prove the box key within "
						 "2 s of connecting");
				conn_close(c, (int)i, "did not prove the box key in time");
			}
		}
		if (c->n_zombies) {
			box_ctl_lock(c);
			zombies_reap(c);
			box_ctl_unlock(c);
		}
		pfd[n] = (struct pollfd){.fd = c->lfd, .events = POLLIN};
		slot[n++] = -1;
		for (i = 0; i < CTL_MAX_CONNS; i++) {
			const struct ctl_conn *cn = &c->conn[i];
			short ev = 0;

			if (cn->fd < 0)
				continue;
			if (cn->out_len - cn->out_off < CTL_OUT_LOW)
				ev |= POLLIN; /* no new requests while replies pile up */
			if (cn->out_len)
				ev |= POLLOUT;
			pfd[n] = (struct pollfd){.fd = cn->fd, .events = ev};
			slot[n++] = (int)i;
		}
		r = poll(pfd, n, 100);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		now = now_ns();
		for (i = 1; i < n; i++) {
			struct ctl_conn *cn = &c->conn[slot[i]];

			if (cn->fd < 0)
				continue;
			if ((pfd[i].revents & POLLOUT) && conn_write(cn, now) != 0)
				cn->drop = true;
			if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR))
				conn_read(c, slot[i]);
		}
		/* every connection waiting, not one a turn: a queue left full
		 * drops a key holder's handshake ACK, and the box then accepts it
		 * on its own SYN-ACK's retransmit while the client's first line
		 * backs off past CTL_PROVE_NS (drips churn the queue all along) */
		if (pfd[0].revents & POLLIN)
			for (i = 0; i < CTL_ACCEPT_BURST; i++)
				if (!conn_accept(c, now))
					break;
	}
	return 0;
}

void box_ctl_destroy(struct box_ctl *c)
{
	int i;

	if (!c)
		return;
	for (i = 0; i < CTL_MAX_CONNS; i++)
		if (c->conn[i].fd >= 0)
			conn_close(c, i, "is gone: pboxd is stopping");
	box_ctl_lock(c);
	while (c->n_jobs)
		job_remove(c, c->n_jobs - 1);
	for (i = 0; i < 200 && c->n_zombies; i++) { /* results leave within moments */
		zombies_reap(c);
		usleep(10000);
	}
	box_ctl_unlock(c);
	close(c->lfd);
	pthread_mutex_destroy(&c->lock);
	sodium_memzero(c->key, sizeof(c->key));
	free(c);
}
