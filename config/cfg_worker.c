/* SPDX-License-Identifier: BSD-3-Clause */
/* The worker's configuration schema, PBOX_* overrides and cross-field checks. */
#include "cfg_worker.h"

#include <string.h>

#define KB (1ull << 10)
#define MB (1ull << 20)

typedef struct wrk_cfg W;

static const char *const transports[] = {"udp", "dpdk", NULL};
static const char *const locals[] = {"auto", "on", "off", NULL}; /* enum wrk_local */
static const char *const local_cudas[] = {"ipc", "host", NULL};	 /* enum wrk_local_cuda */
/* In enum lay_mode's order (worker/layout.h). */
const char *const cfg_layout_names[] = {"unified", "ps", "ssgpu", NULL};

/* appliance/ss/comp.h's enum comp_scheme, in order (worker/base.c checks). */
const char *const cfg_comp_names[] = {"none", "sign", "topk", "randk", "bf16", "fp16", NULL};

/* enum nic_mac_mode's names, in order. */
static const char *const mac_names[] = {"off", "header", "payload", NULL};
static const char *const comp_sum_names[] = {"service", "gather", NULL};

/* PBOX_* variables that are not configuration keys: pairs (name, what it
 * does), NULL-ended; the reference lists them. */
static const char *const env_ignore[] = {
	"PBOX_CONFIG",
	"the worker's configuration file, which the PyTorch backend reads before its own lines",
	"PBOX_LIB",
	"the libpbox.so.3 the Python package loads (before the wheel's, the build tree's and "
	"the system's)",
	"PBOX_MODULE_DIR",
	"where libpbox looks for its modules (dpdk.so, cuda.so); unset: pbox-3 beside "
	"libpbox.so.3",
	"PBOX_SIMD",
	"the widest summation and MAC kernels used: scalar, avx2 or avx512 (tests, and "
	"measuring one ISA against another); unset: the best the CPU has",
	"PBOX_FORGET",
	"0: the PyTorch backend keeps every tensor's state (unset or 1: it lets go of tensors the "
	"job no longer sums, pbox_forget())",
	"PBOX_CUDA_STAGE_ONLY",
	"1: the CUDA module stages each piece there and back and skips the network (make "
	"perf-gpu's staging figure)",
	NULL};

/* PBOX_BOX, as the PyTorch backend has always read it, is [box] control
 * for C too: one or several host:port. */
static const char *const env_alias[] = {"PBOX_BOX", "PBOX_BOX_CONTROL", NULL};

static const struct cfg_key worker_keys[] = {
	CFG_KEY(W, worker.rank, "rank", CFG_UINT, CFG_REQUIRED, 0, WRK_MAX_WORKERS - 1, NULL,
		"this worker's rank, 0..world_size-1"),
	CFG_KEY(W, worker.world_size, "world_size", CFG_UINT, CFG_REQUIRED, 1, WRK_MAX_WORKERS,
		NULL, "number of workers in the job"),
	CFG_KEY_ENUM(W, worker.local_aggregation, "local_aggregation", locals, "auto",
		     "ranks that share a data address are one machine: they sum in shared "
		     "memory first and one of them pushes for all (auto: not on loopback; "
		     "on: loopback too; off: a machine per rank); the same on every rank"),
	CFG_KEY_ENUM(W, worker.local_cuda, "local_cuda", local_cudas, "ipc",
		     "how a machine's ranks sum CUDA tensors: ipc (on the GPU, each rank's "
		     "device memory shared by CUDA IPC: ranks sharing a GPU, or GPUs that "
		     "reach each other by NVLink or PCIe peer access) or host (staged through "
		     "pinned host memory and summed by the CPU: GPUs that cannot); the same "
		     "on every rank of a machine"),
};

static const struct cfg_key job_keys[] = {
	CFG_KEY(W, job.id, "id", CFG_UINT, 0, 1, UINT32_MAX, "1", "job id at the box"),
	CFG_KEY(W, job.token, "token", CFG_UINT, 0, 0, UINT64_MAX, "0",
		"the job's 64-bit secret, the same on every rank: each start derives the key "
		"that signs every datagram from it (never sent)"),
	CFG_KEY_ENUM(W, job.mac, "mac", mac_names, "payload",
		     "what the MAC covers: payload (every datagram's pbox header and payload), "
		     "header (the header only) or off"),
	CFG_KEY_ENUM(W, job.compression, "compression", cfg_comp_names, "none",
		     "how fp32 gradients travel (ByteComp's compressors, with error feedback "
		     "on the workers and on the summation service): none, sign (EFSignSGD: 1 bit "
		     "an element and a scale), topk (the largest, with their indices), randk "
		     "(at indices every rank draws alike), bf16 or fp16; the same on every rank"),
	CFG_KEY(W, job.compression_ppm, "compression_rate", CFG_UINT, 0, 1, 500000, "10000",
		"topk and randk: the share of each fragment's elements sent, in parts per "
		"million (10000: 1%); the same on every rank"),
	CFG_KEY_ENUM(W, job.compression_sum, "compression_sum", comp_sum_names, "service",
		     "how compressed tensors are summed: service (each summation service "
		     "decompresses the pushes, sums them and compresses the sum again, with its "
		     "own error feedback) or gather (every rank's compressed tensor goes to "
		     "every rank, which sums them all in rank order: no sum compressed again, "
		     "n - 1 compressed tensors in per rank; not randk, whose sums are exact "
		     "anyway; with local aggregation the machines' leaders gather their "
		     "machines' sums); the same on every rank"),
	CFG_KEY(W, job.deterministic, "deterministic", CFG_BOOL, 0, 0, 0, "off",
		"on: every sum is added in rank order, whatever order the pushes arrive in, "
		"so that it is bitwise the same on every run (each summation service keeps "
		"n - 1 more buffers per fragment for the pushes that come early); the same on "
		"every rank"),
	CFG_KEY(W, job.leader_order, "leader_order", CFG_BOOL, 0, 0, 0, "off",
		"on: rank 0 decides the order in which every rank sends its all-reduces' "
		"partitions and tells the others (ByteScheduler's master Core), so that a "
		"later, more urgent tensor overtakes at the same point on every rank and no "
		"rank holds sends that wait for the others; off: each rank its own order, by "
		"priority; not with local aggregation; the same on every rank"),
	CFG_KEY(W, job.staleness, "staleness", CFG_UINT, 0, 0, 1000000, "0",
		"asynchronous training (pbox_push_pull_async()): the most calls a rank may be "
		"ahead of the slowest rank on a key before its answers wait for the slowest "
		"(bounded staleness); 0: unbounded; the same on every rank"),
};

static const struct cfg_key box_keys[] = {
	CFG_KEY(W, box.control, "control", CFG_HOSTPORTS, 0, 0, 0, NULL,
		"the box's management address:port, or several boxes' (comma-separated): "
		"k is the sum of their bandwidths over B, each box's share of the chunks by "
		"its bandwidth; unset: no box"),
	CFG_KEY(W, box.key_file, "key_file", CFG_STR, 0, 0, 0, "/etc/pbox/box.key",
		"the box key (rank 0 proves it holds it to the box's control plane)"),
};

static const struct cfg_key data_keys[] = {
	CFG_KEY(W, data.address, "address", CFG_IPV4, 0, 0, 0, NULL,
		"this worker's data address; with [rendezvous], unset: the local address of "
		"the route to the rendezvous host"),
	CFG_KEY(W, data.port, "port", CFG_UINT, 0, 0, 65535, "9700",
		"UDP port of this worker's SS_GPU (rank 0: TCP too, for the bootstrap); "
		"0 with [rendezvous]: a free one"),
	CFG_KEY(W, data.bandwidth_mbps, "bandwidth", CFG_RATE, 0, 1, 10000000, NULL,
		"this worker's line rate, the B of the layout and of the pacing; unset: the "
		"link speed of the interface holding [data] address (100G where it reports "
		"none, with a warning)"),
	CFG_KEY(W, data.mtu, "mtu", CFG_UINT, 0, 576, 9216, "9000", "IP MTU of the data link"),
};

static const struct cfg_key tuning_keys[] = {
	CFG_KEY(W, tuning.partition_size, "partition_size", CFG_SIZE, 0, 32 * KB, 1024 * MB, "4M",
		"unit of scheduling"),
	CFG_KEY(W, tuning.chunk_size, "chunk_size", CFG_SIZE, CFG_POW2, 1 * KB, 1 * MB, "32K",
		"unit of ownership; must match the box"),
	CFG_KEY(W, tuning.credit_bytes, "credit_bytes", CFG_SIZE, 0, 1 * KB, 1ull << 40, "4M",
		"bytes in flight at once (ByteScheduler's credit)"),
	CFG_KEY(W, tuning.retransmit_us, "retransmit_timeout", CFG_DURATION, 0, 10, 10000000,
		"50ms",
		"floor of the retransmission timeout (it follows the measured time to a sum)"),
	CFG_KEY(W, tuning.deadline_us, "deadline", CFG_DURATION, 0, 1000, 3600000000ull, "30s",
		"a call fails, naming the silent summation service, after this"),
	CFG_KEY(W, tuning.heartbeat_us, "heartbeat", CFG_DURATION, 0, 0, 3600000000ull, "3s",
		"a rank (or the box) whose host crashed or was cut off is named after this "
		"long silent: heartbeats on the bootstrap connections, TCP keepalive on the "
		"box's; the same on every rank; 0: off (the deadline only)"),
	CFG_KEY(W, tuning.pacing, "pacing", CFG_BOOL, 0, 0, 0, "true",
		"send no faster than bandwidth: the queue stays in the priority scheduler, "
		"not in the NIC"),
	CFG_KEY(W, tuning.pace_burst, "pace_burst", CFG_SIZE, 0, 32 * KB, 64 * MB, "64K",
		"bytes the pacing lets go at once after a pause, its link booked that far "
		"ahead of the line (at least 500us of bandwidth: the thread wakes no more "
		"precisely); a shaped link's token bucket (tbf burst) takes its size at once"),
	CFG_KEY(W, tuning.autotune, "autotune", CFG_BOOL, 0, 0, 0, "false",
		"tune credit_bytes, then partition_size, online (ByteScheduler): doubled or "
		"halved while goodput grows by 3%, then kept"),
	CFG_KEY(W, tuning.priority, "priority", CFG_UINT, 0, 0, 99, "0",
		"real-time priority (SCHED_FIFO, 1-99) of the progress thread, so that no "
		"other thread of the host delays a send it has timed; 0: the default "
		"scheduling. Needs CAP_SYS_NICE (or an rtprio limit)"),
	CFG_KEY_ENUM(W, tuning.layout, "layout", cfg_layout_names, "unified",
		     "unified (Theorem 1), ps (every chunk to the box) or ssgpu (the workers' "
		     "SS_GPUs only); the same on every rank"),
};

static const struct cfg_key transport_keys[] = {
	CFG_KEY_ENUM(W, transport.kind, "kind", transports, "udp",
		     "udp (kernel sockets) or dpdk (a DPDK port)"),
	CFG_KEY(W, transport.dpdk_port, "dpdk_port", CFG_STR, 0, 0, 0, NULL,
		"dpdk: PCI address or vdev string of the port"),
	CFG_KEY(W, transport.dpdk_lcores, "dpdk_lcores", CFG_STR, 0, 0, 0, NULL,
		"dpdk: EAL --lcores value; unset: the CPU pbox_start() runs on"),
	CFG_KEY(W, transport.dpdk_args, "dpdk_args", CFG_STR, CFG_SPACES, 0, 0, "--in-memory",
		"dpdk: more EAL arguments, space-separated (e.g. --no-huge -m 256)"),
	CFG_KEY(W, transport.gso, "gso", CFG_BOOL, 0, 0, 0, "true",
		"udp: use UDP GSO/GRO where the kernel has it"),
};

static const struct cfg_key rendezvous_keys[] = {
	CFG_KEY(W, rendezvous.address, "address", CFG_HOSTPORT, 0, 0, 0, NULL,
		"host:port where the ranks meet (rank 0 listens there): the job id, its token "
		"and every rank's SS_GPU endpoint are drawn and handed out there; unset: "
		"[job] and [peers] say them"),
	CFG_KEY(W, rendezvous.secret, "secret", CFG_STR, 0, 0, 0, NULL,
		"a secret every rank knows (16 to 127 characters; best from the environment, "
		"PBOX_RENDEZVOUS_SECRET): every JOIN proves it, so nobody without it takes a "
		"rank or stops the job; unset: whoever joins first as a rank is that rank"),
};

static const struct cfg_key log_keys[] = {
	CFG_KEY_ENUM(W, log.level, "level", cfg_log_levels, "warning",
		     "error, warning, info, debug"),
};

static const struct cfg_key peer_keys[] = {
	{.name = "N",
	 .type = CFG_HOSTPORT,
	 .size = sizeof(struct cfg_hostport),
	 .help = "SS_GPU endpoint address:port of rank N"},
};

#define SEC_ONE(nm, fl, tbl, h)                                                                    \
	{                                                                                          \
		.name = (nm), .kind = CFG_SEC_ONE, .flags = (fl), .keys = (tbl),                   \
		.n_keys = CFG_NKEYS(tbl), .help = (h)                                              \
	}

static const struct cfg_section wrk_sections[] = {
	SEC_ONE("worker", 0, worker_keys, "who this worker is"),
	SEC_ONE("job", 0, job_keys, "the job at the box"),
	SEC_ONE("box", 0, box_keys,
		"where the box is; without it the workers sum among themselves"),
	SEC_ONE("rendezvous", 0, rendezvous_keys,
		"where the ranks meet, instead of a static [peers] list"),
	SEC_ONE("data", 0, data_keys, "this worker's data link and SS_GPU"),
	SEC_ONE("tuning", 0, tuning_keys, "partitioning, scheduling, loss recovery"),
	SEC_ONE("transport", 0, transport_keys, "how packets leave the worker"),
	SEC_ONE("log", 0, log_keys, "logging"),
	{
		.name = "peers",
		.kind = CFG_SEC_INDEXED,
		.keys = peer_keys,
		.n_keys = 1,
		.off = offsetof(W, peers),
		.elem_size = sizeof(struct cfg_hostport),
		.max = WRK_MAX_WORKERS,
		.help = "the SS_GPU endpoint of every rank (the own one defaults to [data])",
	},
};

static void validate_common(struct cfg_ctx *ctx, const struct wrk_cfg *c);

static void wrk_validate(struct cfg_ctx *ctx, void *v)
{
	struct wrk_cfg *c = v;
	const struct cfg_hostport self = {.ip_be = c->data.address.be,
					  .port = (uint16_t)c->data.port};
	unsigned r, q;

	if (c->worker.rank >= c->worker.world_size)
		cfg_error_at(ctx, "worker", 0, "rank",
			     "[worker] rank: %u is not below world_size %u", c->worker.rank,
			     c->worker.world_size);
	for (r = c->worker.world_size; r < WRK_MAX_WORKERS; r++)
		if (c->peers[r].port)
			cfg_error_at(ctx, "peers", r, NULL,
				     "[peers] %u: no such rank in a world of %u", r,
				     c->worker.world_size);
	if (c->rendezvous.address.port) { /* drawn there: nothing of it configured */
		for (r = 0; r < c->worker.world_size && r < WRK_MAX_WORKERS; r++)
			if (c->peers[r].port)
				cfg_error_at(ctx, "peers", r, NULL,
					     "[peers] %u: the rendezvous hands out every rank's "
					     "endpoint: leave [peers] out",
					     r);
		if (c->job.token)
			cfg_error_at(ctx, "job", 0, "token",
				     "[job] token: rank 0 draws a fresh one at the rendezvous: "
				     "leave it unset");
		if (c->rendezvous.secret[0] && strlen(c->rendezvous.secret) < 16)
			cfg_error_at(ctx, "rendezvous", 0, "secret",
				     "[rendezvous] secret: %zu characters; at least 16 (the value "
				     "is not repeated here)",
				     strlen(c->rendezvous.secret));
		validate_common(ctx, c);
		return;
	}
	if (c->rendezvous.secret[0])
		cfg_error_at(ctx, "rendezvous", 0, "secret",
			     "[rendezvous] secret: there is no rendezvous; the static set-up's "
			     "HELLOs prove [job] token instead");
	if (!c->data.address.be)
		cfg_error_at(ctx, "data", 0, "address",
			     "[data] address: required without [rendezvous]");
	if (!c->data.port)
		cfg_error_at(ctx, "data", 0, "port",
			     "[data] port: 0 (a free port) needs [rendezvous] to tell the others");
	if (c->worker.rank < c->worker.world_size) {
		struct cfg_hostport *own = &c->peers[c->worker.rank];

		if (own->port && (own->ip_be != self.ip_be || own->port != self.port))
			cfg_error_at(
				ctx, "peers", c->worker.rank, NULL,
				"[peers] %u: this is our own rank and differs from [data] address:port",
				c->worker.rank);
		*own = self;
	}
	for (r = 0; r < c->worker.world_size; r++) {
		if (!c->peers[r].port) {
			cfg_error_at(ctx, "peers", r, NULL,
				     "[peers] %u: missing: every rank's SS_GPU endpoint is needed "
				     "(or meet at a [rendezvous] address)",
				     r);
			continue;
		}
		for (q = 0; q < r; q++)
			if (c->peers[q].port == c->peers[r].port &&
			    c->peers[q].ip_be == c->peers[r].ip_be)
				cfg_error_at(ctx, "peers", r, NULL,
					     "[peers] %u: same endpoint as rank %u", r, q);
	}
	validate_common(ctx, c);
}

/* What holds with and without a rendezvous. */
static void validate_common(struct cfg_ctx *ctx, const struct wrk_cfg *c)
{
	if (c->tuning.partition_size % c->tuning.chunk_size)
		cfg_error_at(ctx, "tuning", 0, "partition_size",
			     "[tuning] partition_size: not a multiple of chunk_size");
	if (c->tuning.credit_bytes < c->tuning.chunk_size)
		cfg_error_at(ctx, "tuning", 0, "credit_bytes",
			     "[tuning] credit_bytes: smaller than one chunk");
	if (c->tuning.retransmit_us >= c->tuning.deadline_us)
		cfg_error_at(ctx, "tuning", 0, "retransmit_timeout",
			     "[tuning] retransmit_timeout: not below the deadline");
	if (c->transport.kind == WRK_TRANSPORT_DPDK && !c->transport.dpdk_port[0])
		cfg_error_at(ctx, "transport", 0, "kind",
			     "[transport] kind = dpdk needs dpdk_port");
	if (c->job.compression_sum && !strcmp(cfg_comp_names[c->job.compression], "randk"))
		cfg_error_at(ctx, "job", 0, "compression_sum",
			     "[job] compression_sum: gather is not for randk, whose sums the "
			     "summation services take exactly (every rank draws the same indices)");
	for (uint32_t i = 0; i < c->box.control.n; i++)
		if (c->box.control.hp[i].ip_be == c->data.address.be &&
		    c->box.control.hp[i].port == c->data.port)
			cfg_error_at(ctx, "box", 0, "control",
				     "[box] control: same address:port as this worker's [data]");
}

const struct cfg_schema wrk_cfg_schema = {
	.what = "worker",
	.env_prefix = "PBOX_",
	.env_ignore = env_ignore,
	.env_alias = env_alias,
	.sections = wrk_sections,
	.n_sections = CFG_NKEYS(wrk_sections),
	.size = sizeof(struct wrk_cfg),
	.validate = wrk_validate,
};

int wrk_cfg_load(const char *path, char *const *envp, struct wrk_cfg *out, struct cfg_errors *errs)
{
	return cfg_load(&wrk_cfg_schema, path, envp, out, errs);
}

int wrk_cfg_load_text(const char *name, const char *text, char *const *envp, struct wrk_cfg *out,
		      struct cfg_errors *errs)
{
	return cfg_load_text(&wrk_cfg_schema, name, text, envp, out, errs);
}
