/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libpbox: the worker side of pbox, what training processes link.
 *
 * A context is one rank of one job; a process may hold several (each with
 * its own job id and data port: the unit tests run four ranks in one
 * process). It reads the worker configuration, agrees with every other
 * rank on the job, and then sums each tensor across all ranks on request.
 * Tensors are known by a 64-bit key of the caller's choosing, of fp32,
 * fp16 or bf16 (any mix in one context). They may be declared before
 * pbox_start(), or simply used: a tensor first seen after the start is
 * agreed with every rank (the same position in the order of new tensors,
 * the same count and dtype) before any of its data moves, and the box's
 * share of it is added to the job through the box's control plane. Each tensor
 * is cut into partitions (the unit of scheduling), chunks (the unit of
 * ownership) and fragments (one packet); every chunk is summed by the
 * summation service the BytePS unified layout assigns it to: one of the
 * box's endpoints, or the SS_GPU embedded in one of the workers (this
 * library serves its own while the context lives).
 *
 *   struct pbox *px;
 *   pbox_init("worker.ini", &px);                     // + PBOX_* overrides
 *   pbox_declare(px, key, count, PBOX_FP32, layer);   // optional: priority
 *   pbox_start(px);                                   // bootstrap, layout
 *   pbox_push_pull(px, key, grad, grad, count, PBOX_FP32, &op); // async
 *   pbox_wait(op);                                    // the sum is in grad
 *   pbox_finalize(px);
 *
 * Errors: every call returns PBOX_OK (0) or a negative PBOX_E* code; the
 * message of the last failure in the calling thread, naming the cause (the
 * file and line, the key, the peer rank and address, the box endpoint), is
 * pbox_last_error(). Nothing in the library aborts or exits the process.
 *
 * Threads: a context runs one progress thread of its own (it also serves
 * this worker's SS_GPU to its peers, whether or not the caller is inside a
 * pbox call). pbox_start() and pbox_finalize() are for one thread.
 * pbox_declare(), pbox_push_pull(), pbox_test(), pbox_wait(),
 * pbox_allreduce() and pbox_stats() may be called from any number of
 * threads at once (new tensors must still come in the same order on every
 * rank, as collectives do in every framework); a handle belongs to whoever holds it, and is
 * released by the pbox_test() or pbox_wait() that returns its result.
 *
 * After a failure of the transport or of a peer (a deadline, a lost rank,
 * an error from the box) the context is failed: every call in flight and
 * every later call returns PBOX_EFAILED with the first cause. Finalize it
 * and start again, or, where a rank or the box was lost, go on with the
 * survivors (pbox_shrink()); partial sums are never handed out as results.
 */
#ifndef PBOX_H
#define PBOX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The version of this header; pbox_version() says the library's. ABI
 * policy: within one major version (the soname, libpbox.so.3) a minor
 * version only adds: functions (each under a symbol version of its own,
 * worker/libpbox.map), enumerators at the end, and meanings for arguments
 * that were refused before. It never changes or removes what an earlier
 * minor version had, and no struct of this header changes its size or
 * layout but by a new major version. A program built against 3.x runs on
 * any 3.y with y >= x; test PBOX_VERSION_CODE >= PBOX_VERSION(3, 5) before
 * calling what 3.5 added.
 */
#define PBOX_VERSION_MAJOR   3
#define PBOX_VERSION_MINOR   16
#define PBOX_VERSION(ma, mi) ((ma)*1000 + (mi))
#define PBOX_VERSION_CODE    PBOX_VERSION(PBOX_VERSION_MAJOR, PBOX_VERSION_MINOR)

/* Element types, as the GPU holds them (little-endian). */
enum pbox_dtype {
	PBOX_FP32 = 0,
	PBOX_FP16 = 1,
	PBOX_BF16 = 2,
};

enum pbox_status {
	PBOX_OK = 0,
	PBOX_EAGAIN = -1,    /* pbox_test(): still in flight */
	PBOX_EINVAL = -2,    /* a bad argument (the message names it) */
	PBOX_ECONFIG = -3,   /* the configuration file or a PBOX_* override */
	PBOX_ENOMEM = -4,    /* out of memory */
	PBOX_ESTATE = -5,    /* wrong order of calls, or a tensor already in flight */
	PBOX_EMISMATCH = -6, /* ranks disagree (world size, tensors, chunk size, ...) */
	PBOX_EBOX = -7,	     /* the box refused or could not be reached */
	PBOX_ETIMEDOUT = -8, /* a deadline passed: the message names the silent party */
	PBOX_EPEER = -9,     /* a rank left the job */
	PBOX_ENET = -10,     /* a socket error */
	PBOX_EFAILED = -11,  /* the context failed earlier (see pbox_last_error()) */
	PBOX_ENODEV = -12,   /* CUDA asked for: no CUDA module, or no GPU (the message says) */
	PBOX_REDO =
		1, /* pbox_shrink() (3.3): the job goes on; redo the failed step from its inputs */
};

struct pbox;	    /* a context */
struct pbox_handle; /* one push-pull in flight */

/* Text of a status code. */
const char *pbox_strerror(int status);

/* The message of the last failed call in this thread ("" when none). */
const char *pbox_last_error(void);

/* The library's version, "3.3". */
const char *pbox_version(void);

/*
 * A context from the worker configuration @config (an INI file; NULL reads
 * the path from $PBOX_CONFIG, and without it no file is read: the defaults
 * and the environment). Any key can be set or overridden from the
 * environment as PBOX_SECTION_KEY (PBOX_WORKER_RANK=3). Nothing is sent
 * yet. With [rendezvous] address = host:port (PBOX_RENDEZVOUS_ADDRESS),
 * pbox_start() meets the other ranks there: rank 0 listens on that port,
 * draws the job id and its secret token, and hands every rank the others'
 * SS_GPU endpoints; no [peers] or [job] needed. Host names are resolved.
 * PBOX_OK with *@out; PBOX_ECONFIG naming the file, line and key (or the
 * variable); PBOX_EINVAL (@out NULL); PBOX_ENOMEM.
 */
int pbox_init(const char *config, struct pbox **out);

/*
 * The same from @config_text in memory, the contents an INI file would
 * have (libpbox 3.5): nothing touches the disk, so a job's secret token
 * need not either (PyTorch's backend passes it so). PBOX_SECTION_KEY
 * variables override it as they override a file; PBOX_CONFIG is not read.
 * Errors name "(pbox_init_text)" and the line. The codes of pbox_init()
 * (PBOX_ECONFIG, PBOX_EINVAL, PBOX_ENOMEM).
 */
int pbox_init_text(const char *config_text, struct pbox **out);

/*
 * A tensor of @count elements of @dtype, known to every rank by @key.
 * Lower @priority goes first when several tensors wait (give the layer
 * index: the front layers are needed first by the next forward pass); a
 * tensor first seen by pbox_push_pull() has priority 0. Before
 * pbox_start(), tensors are agreed by the bootstrap; after it, a
 * declaration is a new tensor, agreed as its first push-pull would be.
 * PBOX_OK; PBOX_EINVAL (a NULL context, an unknown dtype, a count of 0,
 * a key from 2^63 up, a key declared with another count or dtype);
 * PBOX_ESTATE (while finalizing).
 */
int pbox_declare(struct pbox *px, uint64_t key, uint64_t count, enum pbox_dtype dtype,
		 int priority);

/*
 * How fp32 tensor @key travels from its next push-pull on (libpbox 3.6):
 * "none", or a compressor of [job] compression's ("sign", "topk",
 * "randk", "bf16", "fp16"), at the job's compression_rate, with its error
 * feedback carried over (a tensor sent as it is after being compressed
 * sends what it held back first). After pbox_start() (PBOX_ESTATE
 * before), for a key declared or used before; the job's [job] compression must not be "none" (its
 * summation services take compressed pushes only then), and every rank must choose the same for the
 * same push-pull: a summation service takes a round's compressor from its first push and refuses
 * the others (PBOX_EBOX or PBOX_EPEER, "the dtype is not the job's"). ByteComp's decision algorithm
 * (worker/decide.h) says which tensors to compress: pbox_decide_compression().
 * With local aggregation every rank calls it, and the machine's leader's
 * choice is the machine's.
 *
 * "SCHEME:gather" (libpbox 3.11; not "none" or "randk"; with local
 * aggregation, libpbox 3.13, each machine's leader compresses the
 * machine's sum and the leaders gather): the tensor is summed by
 * all-gather, never compressed again ([job] compression_sum = gather
 * makes it every tensor's default). Each
 * rank compresses it with its error feedback inside pbox_push_pull(), in
 * blocks of a fragment's elements, every rank's compressed tensor goes to
 * every rank (pbox_all_gather()'s pieces), and pbox_wait() (or the
 * pbox_test() that completes the handle) decompresses them and adds them up
 * in rank order into @out: the same bits on every rank, every rank's k
 * largest (topk) or signs (sign) in the sum, where a summation service keeps
 * only the k largest of the sum. Each rank's link carries n - 1 compressed
 * tensors in. A peer's malformed block fails the handle with PBOX_EPEER
 * naming the rank, before it is decoded.
 *
 * A CUDA tensor of pbox_push_pull_cuda() (libpbox 3.14; without local
 * aggregation, used once before) takes its own compression too, where it
 * took the job's alone before: "SCHEME" or "SCHEME@cpu" compresses its
 * pieces on the CPU once staged in host memory, "SCHEME@gpu" (not randk)
 * on the GPU before the copy (the CUDA module's kernels, bit-exact with
 * the CPU's; the error feedback in device memory), so that only the
 * compressed bytes cross to the host and back, and the sums are
 * decompressed on the GPU. A tensor moved off the GPU sends the residual
 * the GPU held with its next push; one moved onto it leaves the CPU's to
 * the next push that compresses on the CPU or sends it as it is. Not
 * ":gather" (its pieces are summed by the services). "@gpu" for a host
 * tensor, or with local aggregation: PBOX_EINVAL.
 *
 * "PUSH>SUM" (libpbox 3.15; ByteComp's Dimension 4) compresses one
 * direction alone, or each its own way: "topk>none" pushes top-k and takes
 * the sum back as fp32 (a sum of sparse pushes is not sparse: the service
 * decodes each push into its sum and sends that, with no error feedback
 * of its own); "none>sign" pushes the fp32 gradient as it is (nothing
 * compressed on this worker) and the summation service alone compresses
 * the sum, with its error feedback ("leave it to the box"); "topk>bf16"
 * sends the sum narrowed. "sign" is "sign>sign". Each push names both
 * compressors (WIRE.md), and every rank must choose the same pair. Host
 * tensors only (a CUDA tensor's pieces: both ways or not at all), never
 * with ":gather": PBOX_EINVAL.
 */
int pbox_set_compression(struct pbox *px, uint64_t key, const char *scheme);

/* pbox_decide_compression()'s @chosen: where a tensor compresses, and
 * (libpbox 3.15) whether one direction alone does. */
#define PBOX_COMP_CPU	    1
#define PBOX_COMP_GPU	    2
#define PBOX_COMP_PUSH_ONLY 4 /* "SCHEME>none": its push compressed, its sum back as fp32 */
#define PBOX_COMP_SUM_ONLY  8 /* "none>SCHEME": its push as it is, its sum compressed */

/*
 * ByteComp's choice of which tensors to compress (libpbox 3.7): every rank
 * calls it at the same point with the same @n fp32 tensors (@keys, their
 * element @counts) in the order the backward pass makes them ready, and
 * @compute_ns, the backward computation before each is ready (the first's
 * from the pass's start, or 0), as this rank measured it. libpbox models
 * the step (Theorem 1's link at [data] bandwidth and the boxes' k, [job]
 * compression's compressor profiled on this CPU once), rank 0 decides
 * (ByteComp's Algorithm 1: tensors whose communication hides behind the
 * computation stay as they are), every rank takes rank 0's choice, and
 * each tensor's compression is set (pbox_set_compression(): the job's
 * scheme, or "none"). @chosen (n bytes, may be NULL): 0 where sent as it
 * is, PBOX_COMP_CPU where compressed on the CPU, PBOX_COMP_GPU on the GPU.
 * When every tensor is a CUDA tensor of pbox_push_pull_cuda() (libpbox
 * 3.14; not with randk, [job] compression_sum = gather or local
 * aggregation), the GPU is a resource of the model too, its compressor
 * profiled once by the CUDA module: ByteComp's Algorithm 1 compresses on
 * the GPU (its time taken from the backward pass), and Algorithm 2 moves
 * groups of those tensors to the CPU where that shortens the step.
 * Host tensors summed by the services (libpbox 3.15) may compress one
 * direction alone (ByteComp's Dimension 4; PBOX_COMP_CPU with
 * PBOX_COMP_PUSH_ONLY or PBOX_COMP_SUM_ONLY in @chosen): the model
 * takes the link as full duplex, each direction a queue of its own, so
 * that one direction pays only where the other has room (a push
 * compressed whose sum comes back while the next tensors' pushes go out
 * saves decoding it). A collective: nothing of these tensors in flight. PBOX_OK; PBOX_EINVAL
 * ([job] compression none, a key not declared or used yet); PBOX_ESTATE
 * (before pbox_start()); a failure of the job's.
 */
int pbox_decide_compression(struct pbox *px, uint32_t n, const uint64_t *keys,
			    const uint64_t *counts, const uint64_t *compute_ns, uint8_t *chosen);

/*
 * Bootstrap: every rank connects to rank 0 and sends what it declared;
 * rank 0 checks that all agree (world size, job, chunk size, MTU,
 * bandwidth, peers, each tensor's count and dtype), registers the job with
 * the box, and hands every rank the box's endpoints. Each rank then
 * computes the same layout. No tensor need be declared. Returns once all ranks are ready, or fails
 * with PBOX_EMISMATCH naming the ranks and the field, PBOX_EBOX, or PBOX_ETIMEDOUT naming the ranks
 * that never came ([tuning] deadline).
 */
int pbox_start(struct pbox *px);

/*
 * Start summing tensor @key of @count elements of @dtype across all ranks:
 * @in is this rank's contribution, @out receives the sum (it may be @in).
 * Both stay the caller's and must not be touched until the handle
 * completes. @count and @dtype must be those the key was declared or first
 * used with (PBOX_EINVAL naming both otherwise). A key not seen before is a
 * new tensor: its first push-pull waits for every rank to agree on it, and
 * a rank that disagrees (another count or dtype at the same position in
 * the order of new tensors) fails every rank with PBOX_EMISMATCH naming the
 * ranks, the position and what differs. One push-pull per tensor at a time
 * (PBOX_ESTATE otherwise). Keys from 2^63 up are libpbox's own (the pieces
 * of CUDA tensors): PBOX_EINVAL.
 */
int pbox_push_pull(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		   enum pbox_dtype dtype, struct pbox_handle **op);

/*
 * The same for a tensor in GPU memory (libpbox 3.1): @in and @out on one
 * CUDA device, equal or not overlapping; @stream a cudaStream_t (NULL: the
 * legacy default stream). The push-pull starts after the work queued on
 * @stream so far, without waiting for it on the host, and stages through
 * pinned host buffers allocated once per context: the tensor goes in pieces
 * of [tuning] partition_size, the copy of piece i + 1 to the host overlapping
 * the network of piece i and the copies of earlier results back. The handle
 * completes (pbox_test(), pbox_wait()) once every result is in @out; libpbox
 * touches neither buffer after that. Each piece is a tensor of its own to
 * the ranks (keys from 2^63 up), so every rank must split alike: the same
 * key, count and dtype, and [tuning] partition_size, on every rank.
 * PBOX_ENODEV when libpbox was built without CUDA (no nvcc), its CUDA module
 * does not load, or no GPU is present; the message says which.
 */
int pbox_push_pull_cuda(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
			enum pbox_dtype dtype, void *stream, struct pbox_handle **op);

/*
 * The sharded collectives (libpbox 3.8), for FSDP and ZeRO: asynchronous,
 * a handle for pbox_wait() or pbox_test() as a push-pull's. @counts has
 * one entry per rank of the job (pbox_layout()'s world size): shard r is
 * counts[r] elements (0 allowed) at offset counts[0] + ... + counts[r-1]
 * of the whole tensor. Host memory (GPU memory: the _cuda calls below).
 * With [worker] local_aggregation (libpbox 3.13) each shard meets the
 * machine's ranks in shared memory and the leaders carry it, rooted at its
 * owner's machine.
 * Each shard is summed (or starts) at its owner's SS_GPU, so each rank's
 * link carries the (n-1)/n of the tensor that is every placement's bound
 * (docs/workers.md). @key names the collective, as a push-pull's key
 * names its tensor: use one key per call site, the same on every rank.
 *
 * pbox_reduce_scatter(): @in, the whole tensor, summed over the ranks;
 * this rank's shard of the sum into @out (counts[rank] elements).
 * pbox_all_gather(): @in, this rank's shard (counts[rank] elements);
 * every rank's shard into @out, the whole tensor (@in may be @out's own
 * shard). pbox_broadcast(): @root's @buf (@count elements) into every
 * other rank's @buf.
 *
 * PBOX_OK with *@op; PBOX_EINVAL (a NULL argument, a key from 2^63 up, an
 * unknown dtype, @root not below the world size, the key first used by
 * another collective, count or dtype); PBOX_ESTATE
 * (before pbox_start(), or this call's pieces still in flight);
 * PBOX_ENOMEM; PBOX_EFAILED. What the handle returns: as pbox_wait().
 */
int pbox_reduce_scatter(struct pbox *px, uint64_t key, const void *in, void *out,
			const uint64_t *counts, enum pbox_dtype dtype, struct pbox_handle **op);
int pbox_all_gather(struct pbox *px, uint64_t key, const void *in, void *out,
		    const uint64_t *counts, enum pbox_dtype dtype, struct pbox_handle **op);
int pbox_broadcast(struct pbox *px, uint64_t key, void *buf, uint64_t count, enum pbox_dtype dtype,
		   uint32_t root, struct pbox_handle **op);

/*
 * Asynchronous training (libpbox 3.9; BytePS's asynchronous mode, its
 * Theorem 2). @key names a parameter store of @count elements, laid out
 * over the box and the ranks' SS_GPUs as a push-pull's tensor is, with no
 * round barrier: each call adds this rank's
 * @in to the store where it lands and returns the parameters right after
 * it in @out (with whatever other ranks' calls came before), as a push-pull
 * does (pbox_wait(), pbox_test()).
 *
 * Each rank's first call of @key carries its initial parameters: rank 0's
 * set the store, the others' are not added (each waits until rank 0's are
 * in, then gets them), and, as for any tensor's first use, the ranks agree
 * on the key before data moves. Every later call carries a delta (the
 * local update: new parameters less the ones the last call returned). Each
 * delta is added exactly once, whatever the network loses or repeats.
 * [job] staleness = S holds a rank's call while it is more than S calls
 * ahead of the slowest rank on the key (0: unbounded). Host memory (GPU
 * memory: pbox_push_pull_async_cuda()), the network job; not with local
 * aggregation; no compression (the store travels at full width). After
 * pbox_shrink() a key starts over: its next call is a first one. PBOX_OK
 * with *@op; PBOX_EINVAL (a NULL argument, a key from 2^63 up, local
 * aggregation on, the key first used otherwise or with another count or
 * dtype); PBOX_ESTATE (before pbox_start(), or the key's last call still
 * in flight); PBOX_ENOMEM; PBOX_EFAILED.
 */
int pbox_push_pull_async(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
			 enum pbox_dtype dtype, struct pbox_handle **op);

/*
 * The same calls for tensors in GPU memory (libpbox 3.12): @in, @out and
 * @buf on one CUDA device, @stream a cudaStream_t (NULL: the legacy default
 * stream), every other argument and rule as the host call's. The call
 * starts after the work queued on @stream so far: the input is copied to a
 * pinned host buffer of the key's (kept from one call to the next, freed
 * at pbox_finalize()), the host call runs on it, and its result is copied
 * back; a thread of libpbox's moves each call from step to step, and the
 * handle completes (pbox_test(), pbox_wait()) once the result is in GPU
 * memory. A key's first call, and its first after pbox_shrink(),
 * pbox_rejoin() or pbox_forget() or with other counts, dtype or root, waits
 * on the host for @stream's work and the copy before it returns: the ranks
 * agree on new tensors in the order each rank calls, which is then the
 * program's. An error the host call finds later (the job failed, a key
 * used by another collective) fails the handle, naming the call. One call
 * per key at a time (PBOX_ESTATE). PBOX_ENODEV as pbox_push_pull_cuda().
 */
int pbox_reduce_scatter_cuda(struct pbox *px, uint64_t key, const void *in, void *out,
			     const uint64_t *counts, enum pbox_dtype dtype, void *stream,
			     struct pbox_handle **op);
int pbox_all_gather_cuda(struct pbox *px, uint64_t key, const void *in, void *out,
			 const uint64_t *counts, enum pbox_dtype dtype, void *stream,
			 struct pbox_handle **op);
int pbox_broadcast_cuda(struct pbox *px, uint64_t key, void *buf, uint64_t count,
			enum pbox_dtype dtype, uint32_t root, void *stream,
			struct pbox_handle **op);
int pbox_push_pull_async_cuda(struct pbox *px, uint64_t key, const void *in, void *out,
			      uint64_t count, enum pbox_dtype dtype, void *stream,
			      struct pbox_handle **op);

/*
 * Go on after losing ranks or the box (libpbox 3.2), without restarting:
 * once a call failed with PBOX_EPEER (a rank left: its process died, or its
 * host fell silent for [tuning] heartbeat) or PBOX_EBOX (pboxd went away or
 * timed out), every survivor reaps its failed handles and calls
 * pbox_shrink(). The survivors become a new incarnation of the job: the
 * lost ranks left out and the others renumbered in order (pbox_layout()
 * gives the new rank and world size), without the box if the box was lost
 * (k = 0: its chunks on the survivors' SS_GPUs; a warning names it), every
 * tensor laid out before kept, the layout computed again.
 *
 * The push-pulls that failed (libpbox 3.3):
 *  - PBOX_OK: the box was lost and every rank is here. They resume: push
 *    each of them again, with the same key and buffers, untouched since
 *    (its @out holds what was summed before the loss; @in, if another
 *    buffer, the rest of this rank's part), and it completes with the exact
 *    sums, as if nothing had happened. The ranges one rank holds the sum of
 *    are given by that rank alone, the rest summed again from every rank's
 *    part; a tensor some rank had complete and went on from gets zeros
 *    from that rank's pbox_shrink(), which returns once the others resumed
 *    it. Push the others (not pushed before the loss) as usual.
 *  - PBOX_REDO: a rank was lost (its part of every sum is gone), or the
 *    survivors' push-pulls do not line up, or a sharded collective
 *    (pbox_reduce_scatter(), pbox_all_gather(), pbox_broadcast()) was in
 *    flight on some rank, or the ranks had called different numbers of
 *    them (the log says why): their @out may hold some sums already; redo
 *    the step from its inputs (a training loop recomputes the batch). A
 *    sharded collective is never resumed: had one rank its result and went
 *    on, only the others would call it again.
 * Returns once every survivor is in, or fails as pbox_start() does (a
 * survivor that counts other ranks lost: PBOX_EMISMATCH; one lost during
 * the shrink: PBOX_ETIMEDOUT at [tuning] deadline, naming it, and another
 * pbox_shrink() goes on without it). One thread,
 * nothing in flight; not after a failure that lost nobody (PBOX_ESTATE).
 * With local aggregation a machine is one failure domain: a machine that
 * loses a rank (its process, or its leader's) leaves the job, and its
 * other ranks' pbox_shrink() fails (PBOX_EFAILED, naming the loss); the
 * other machines go on without all of its ranks, PBOX_REDO, each rank with
 * its new world rank, the machine's leader renewing it for its ranks. Called before this context
 * failed (the loss seen first by another library on the same ranks), it
 * waits up to [tuning] heartbeat for the loss to be known here. A job where any rank pushes CUDA
 * tensors gets PBOX_REDO: their sums so far are in GPU memory.
 */
int pbox_shrink(struct pbox *px);

/*
 * pbox_shrink(), and the step to redo agreed by the survivors (libpbox
 * 3.16). The survivors need not have failed in the same step: a rank that
 * died after its SS_GPU answered one survivor's last push-pull of a step
 * and before it answered another's leaves the first one a step ahead, and
 * were each to redo its own, one rank's step 8 would be summed with
 * another's 7. Every survivor passes in *@step the step it failed in (the
 * caller's counter: an iteration, a batch); on PBOX_REDO *@step is the
 * earliest of all of them, and every survivor redoes that step from its
 * inputs (a rank that had gone past it goes back to it: keep the last
 * step's inputs until the next one completes). On PBOX_OK (resumed) each
 * rank goes on from its own step and *@step is as given. Every survivor
 * calls this one or every survivor pbox_shrink(), not some of each. The
 * agreement is a push-pull of 32 bytes a rank in the new incarnation; a
 * loss during it fails it as any call does (pbox_shrink_step() again, with
 * the same step). With local aggregation every rank of the surviving
 * machines takes part. The codes of pbox_shrink(); PBOX_EINVAL (@step
 * NULL), and those of pbox_push_pull() and pbox_wait().
 */
int pbox_shrink_step(struct pbox *px, uint64_t *step);

/*
 * Take back the boxes pbox_shrink() left out, once they are back (libpbox
 * 3.3): every rank calls it at the same point of its work (between steps),
 * with nothing in flight. The same ranks begin a new incarnation of the job
 * with every box of [box] control, k and the layout computed again; a box
 * that still does not answer within [tuning] heartbeat is left out again
 * (a warning names it: pbox_layout()'s k says what came back). PBOX_OK at
 * once where no box was left out. Not after a failure (pbox_shrink()
 * first), nor while a push-pull is in flight, of host or CUDA memory, one
 * whose handle was not yet answered by pbox_test() or pbox_wait()
 * (PBOX_ESTATE). With local aggregation every rank of a machine calls it;
 * its leader renews the machine.
 */
int pbox_rejoin(struct pbox *px);

/*
 * Let go of tensors the job is done with (libpbox 3.10): the state of the
 * @n @keys on the boxes and on every rank's SS_GPU is freed, and the box's
 * memory budget holds what the job still sums. A framework that rebuilds
 * its buckets (PyTorch's DDP, after its first iteration) leaves the old
 * ones' state behind otherwise: the job's state would be twice its model.
 * A collective: every rank calls it with the same keys at the same point
 * of its work, with nothing in flight. The same ranks begin a new
 * incarnation of the job with the same boxes (as pbox_rejoin() does), every
 * other tensor laid out anew and its rounds from 0; a forgotten key used
 * again is a new tensor. A key this rank does not hold is skipped; @n = 0
 * does nothing. Returns PBOX_OK; PBOX_EINVAL (keys NULL with n > 0; with
 * [worker] local_aggregation, whose machines' tensors are the leaders');
 * PBOX_ESTATE (not started; failed: pbox_shrink() first; a push-pull in
 * flight, of host or CUDA memory; the context holds asynchronous stores,
 * which it would drop); or as pbox_start() fails.
 */
int pbox_forget(struct pbox *px, uint32_t n, const uint64_t *keys);

/* PBOX_EAGAIN while @op is in flight; otherwise its result, and @op is
 * released. */
int pbox_test(struct pbox_handle *op);

/* Block until @op completes; its result: PBOX_OK, or the code of what
 * failed it (PBOX_EFAILED, PBOX_EPEER, PBOX_EBOX, PBOX_ETIMEDOUT,
 * PBOX_EMISMATCH, ...), with pbox_last_error() naming it. @op is
 * released; PBOX_EINVAL for a NULL handle. */
int pbox_wait(struct pbox_handle *op);

/* pbox_push_pull() and pbox_wait(), and their codes (PBOX_EINVAL,
 * PBOX_ESTATE, PBOX_EFAILED, ...). */
int pbox_allreduce(struct pbox *px, uint64_t key, const void *in, void *out, uint64_t count,
		   enum pbox_dtype dtype);

/* The layout this rank computed: pbox_layout() after pbox_start() (PBOX_ESTATE
 * before it, PBOX_EINVAL for a NULL argument). */
struct pbox_layout_info {
	uint32_t world_size, rank;
	double k;		/* box bandwidth / worker bandwidth */
	uint32_t box_endpoints; /* 0: no box */
	uint32_t fragment_size, chunk_size;
	uint64_t total_bytes;	   /* of all tensors laid out so far */
	uint64_t box_bytes;	   /* assigned to the box, all endpoints */
	uint64_t ssgpu_bytes_mine; /* assigned to this rank's SS_GPU */
	double box_share;	   /* Theorem 1 (or [tuning] layout's): the box's fraction of M */
	double ssgpu_share;	   /* the same for one SS_GPU */
	char layout[16];	   /* [tuning] layout: "unified", "ps" or "ssgpu" */
	double pace_mbps;   /* [data] bandwidth, or less where the layout overloads the box */
	char transport[96]; /* "udp, GSO and GRO", "dpdk net_af_packet0 02:..." */
};
int pbox_layout(const struct pbox *px, struct pbox_layout_info *out);

/*
 * Local aggregation (libpbox 3.2): ranks that share a data address are one
 * machine ([worker] local_aggregation; auto leaves loopback ranks apart).
 * They sum among themselves in shared memory first, and only the machine's
 * leader, its lowest rank, pushes to the layout, which counts machines
 * (pbox_layout()'s shares are those of n = machines; its world_size and
 * rank are still the ranks'). Without it, every rank is a machine.
 */
struct pbox_machine_info {
	uint32_t machines, machine;	 /* this rank's machine, 0..machines-1 */
	uint32_t local_rank, local_size; /* among the machine's ranks */
	uint32_t leader;		 /* the rank that pushes for the machine */
};
/* PBOX_OK, PBOX_ESTATE before pbox_start(), PBOX_EINVAL for NULL. */
int pbox_machine(const struct pbox *px, struct pbox_machine_info *out);
/* Payload bytes this rank moved, per summation service. */
struct pbox_ss_stats {
	char name[64];	  /* "box endpoint 1 (198.18.2.1:9600)", "rank 2 (...)" */
	uint64_t chunks;  /* assigned to it */
	uint64_t bytes;	  /* assigned to it */
	uint64_t tx, rx;  /* payload bytes this rank sent to it / got from it */
	uint64_t retrans; /* fragments sent again */
};
struct pbox_stats {
	uint64_t ops;		     /* push-pulls completed */
	uint64_t tx_bytes, rx_bytes; /* payload bytes on the network, all kinds */
	uint64_t tx_pkts, rx_pkts;
	uint64_t retransmits;
	uint64_t acks;		 /* retransmissions an SS said it did not need */
	uint64_t tx_gso;	 /* datagrams sent as segments of a UDP GSO send */
	uint64_t rx_gro;	 /* datagrams received coalesced by UDP GRO */
	uint64_t tx_dropped;	 /* DPDK: not sent (no MAC yet, no mbuf, ring full); resent */
	uint64_t ssgpu_summed;	 /* bytes this rank's SS_GPU took in (peers and own) */
	uint64_t ssgpu_results;	 /* result bytes it sent to peers */
	uint64_t bad_mac;	 /* datagrams for our job refused for their MAC */
	uint32_t n_ss;		 /* entries of @ss filled (box endpoints, then ranks) */
	uint64_t probes;	 /* timeouts that asked the SS (a header) instead of resending */
	uint64_t nacks;		 /* NACKs taken: the SS asked for our part again */
	uint64_t nacks_sent;	 /* probes its SS_GPU answered with a NACK (push not in) */
	uint64_t ssgpu_needless; /* resent pushes it already had (duplicates, answered) */
	uint64_t fast_probes;	 /* probes sent as a later fragment's result came first */
	uint64_t tail_probes;	 /* probes sent as an SS fell silent with ours in flight */
	uint64_t pulls;		 /* results asked for again: a DONE came, the result had not */
	uint64_t rto_ns, srtt_ns, probe_rtt_ns; /* the timeout, the time to a sum, a probe's
						 * round trip (smoothed) */
	uint64_t max_inflight; /* the most bytes in flight at once: at most the credit
				* ([tuning] credit_bytes) and one partition */
};
/* Fill @st and up to @max_ss entries of @ss (may be NULL): PBOX_OK,
 * PBOX_ESTATE before pbox_start(), PBOX_EINVAL for a NULL context or @st. */
int pbox_stats(struct pbox *px, struct pbox_stats *st, struct pbox_ss_stats *ss, uint32_t max_ss);

/*
 * The credit and partition size in use (libpbox 3.1). With [tuning]
 * autotune, the search's progress: it doubles, then halves, each of the two
 * while the goodput (bytes summed per second while busy) grows by 3%,
 * credit first, and then keeps the best (converged = 1).
 */
struct pbox_tuning {
	uint64_t credit_bytes, partition_bytes;
	int converged;
	uint32_t windows;			      /* measurement windows so far */
	double goodput_first_mbps, goodput_best_mbps; /* MB/s: at the start, the best */
};
/* PBOX_OK, PBOX_ESTATE before pbox_start(), PBOX_EINVAL for NULL. */
int pbox_tuning(struct pbox *px, struct pbox_tuning *out);

/*
 * The job's failure, without waiting, from any thread (libpbox 3.4; as
 * NCCL's ncclCommGetAsyncError): PBOX_OK while the job runs, else the first
 * failure's PBOX_E* code, the same on every rank for one failure, with its
 * message copied into @msg (@cap bytes; @msg may be NULL). A watchdog polls
 * it to learn that a rank or the box went away while the caller computes.
 * PBOX_EINVAL for a NULL context.
 */
int pbox_async_error(struct pbox *px, char *msg, size_t cap);

/*
 * End the job at once, from any thread (libpbox 3.4; as ncclCommAbort):
 * every push-pull in flight or queued completes with PBOX_EFAILED, later
 * calls fail the same way, and the progress threads stop without
 * pbox_finalize()'s barrier; the other ranks see this rank go as they see
 * a lost one. The context stays allocated: pbox_finalize() frees it and
 * returns at once (PBOX_EFAILED). PBOX_OK, or PBOX_EINVAL for NULL.
 */
int pbox_abort(struct pbox *px);

/*
 * Wait until every rank has finalized (serving this rank's SS_GPU to its
 * peers meanwhile, up to [tuning] deadline; at once after pbox_abort()),
 * unregister the job (rank 0), and free everything. Calls in flight fail
 * with PBOX_EFAILED. Returns the first failure of the context, or PBOX_OK;
 * @px is gone either way.
 */
int pbox_finalize(struct pbox *px);

#ifdef __cplusplus
}
#endif

#endif /* PBOX_H */
