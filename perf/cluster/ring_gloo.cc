// SPDX-License-Identifier: BSD-3-Clause
//
// ring_gloo: the reference all-reduce of perf/cluster, Gloo's ring (a
// reduce-scatter then an all-gather, each rank sending 2(n-1)M/n bytes, over
// TCP) on the same hosts and links as pbox. Every rank runs one process,
// the ranks meet through a directory (Gloo's FileStore), and every sum is
// checked against the same integer pattern pbox-bench uses, so the two
// compare like for like: fp32, M bytes, warm-up then timed iterations.
//
//   ring_gloo --rank R --size N --iface IFACE --store DIR --bytes B
//             [--iters I] [--warmup W] [--op allreduce|reduce_scatter|allgather]
//
// --op (perf/shard): the ring's two halves on their own, each rank sending
// (n-1)/n of B: reduce_scatter, the ring's first half (n - 1 steps, each
// rank passing a shard's partial sum to the next, over Gloo's pairs: Gloo's
// own reduce-scatter is halving-doubling with a redistribution after), and
// allgather, Gloo's ring all-gather (each rank's B/n shard to every rank).
// B is the whole tensor; rank r's shard is its r-th n-th.
//
// Prints one line per iteration and last:
//   RESULT ring n=N bytes=B iters=I mean_ms=T goodput_gbps=G verified=yes op=OP
// Exit status: 0 every sum exact, 1 a failure or a wrong sum, 2 bad usage.
// C++ because Gloo's API is; the rest of pbox is C.

#include <getopt.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

namespace {

constexpr int kValMod = 61; // as pbox-bench: sums over up to 8 ranks stay exact

struct Opts {
	int rank = -1, size = 0;
	const char *iface = nullptr, *store = nullptr;
	uint64_t bytes = 0;
	unsigned iters = 5, warmup = 1;
	const char *op = "allreduce";
};

float value(uint64_t i, int rank, unsigned iter)
{
	return (float)((int)((7 * i + 13 * (uint64_t)rank + 3 * iter) % kValMod) - 30);
}

void usage()
{
	std::fprintf(stderr, "usage: ring_gloo --rank R --size N --iface IFACE --store DIR "
			     "--bytes B [--iters I] [--warmup W]\n");
}

int parse(int argc, char **argv, Opts *o)
{
	static const struct option lo[] = {
		{"rank", required_argument, nullptr, 'r'},  {"size", required_argument, nullptr, 'n'},
		{"iface", required_argument, nullptr, 'i'}, {"store", required_argument, nullptr, 's'},
		{"bytes", required_argument, nullptr, 'b'}, {"iters", required_argument, nullptr, 'I'},
		{"warmup", required_argument, nullptr, 'w'}, {"op", required_argument, nullptr, 'o'},
		{nullptr, 0, nullptr, 0}};
	int c;

	while ((c = getopt_long(argc, argv, "", lo, nullptr)) != -1) {
		switch (c) {
		case 'r': o->rank = std::atoi(optarg); break;
		case 'n': o->size = std::atoi(optarg); break;
		case 'i': o->iface = optarg; break;
		case 's': o->store = optarg; break;
		case 'b': o->bytes = std::strtoull(optarg, nullptr, 0); break;
		case 'I': o->iters = (unsigned)std::atoi(optarg); break;
		case 'w': o->warmup = (unsigned)std::atoi(optarg); break;
		case 'o': o->op = optarg; break;
		default: return -1;
		}
	}
	if (o->size < 2 || o->size > 8 || o->rank < 0 || o->rank >= o->size || !o->iface ||
	    !o->store || o->bytes < 4 * (uint64_t)o->size || o->iters == 0 ||
	    (std::strcmp(o->op, "allreduce") && std::strcmp(o->op, "reduce_scatter") &&
	     std::strcmp(o->op, "allgather")))
		return -1;
	return 0;
}

// The ring's first half: n - 1 steps; at step i rank r sends shard
// (r - i - 1) mod n's partial sum to r + 1 and adds r - 1's partial sum of
// shard (r - i - 2) mod n into its own, so that shard r ends summed at
// rank r. @buf holds the whole tensor (n shards of @shard elements).
void ring_reduce_scatter(const std::shared_ptr<gloo::Context> &ctx, float *buf, uint64_t shard,
			 std::vector<float> &tmp, uint32_t tag)
{
	const int n = ctx->size, r = ctx->rank;
	auto out = ctx->createUnboundBuffer(buf, shard * n * sizeof(float));
	auto in = ctx->createUnboundBuffer(tmp.data(), shard * sizeof(float));

	for (int i = 0; i < n - 1; i++) {
		const int send = ((r - i - 1) % n + n) % n, recv = ((r - i - 2) % n + n) % n;
		const uint64_t slot = ((uint64_t)tag << 8) | (uint64_t)i;

		out->send((r + 1) % n, slot, send * shard * sizeof(float), shard * sizeof(float));
		in->recv((r + n - 1) % n, slot, 0, shard * sizeof(float));
		in->waitRecv();
		out->waitSend();
		for (uint64_t j = 0; j < shard; j++)
			buf[recv * shard + j] += tmp[j];
	}
}

double now_ms()
{
	using namespace std::chrono;
	return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

} // namespace

int main(int argc, char **argv)
{
	Opts o;

	if (parse(argc, argv, &o)) {
		usage();
		return 2;
	}
	const uint64_t n_el = o.bytes / sizeof(float);
	std::vector<float> buf(n_el);
	double sum_ms = 0;

	try {
		gloo::transport::tcp::attr attr;
		attr.iface = o.iface;
		auto dev = gloo::transport::tcp::CreateDevice(attr);
		gloo::rendezvous::FileStore store(o.store);
		auto ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
		ctx->setTimeout(std::chrono::seconds(120));
		ctx->connectFullMesh(store, dev);

		const bool rs = !std::strcmp(o.op, "reduce_scatter"),
			   ag = !std::strcmp(o.op, "allgather");
		const uint64_t shard = n_el / o.size;
		std::vector<float> tmp(shard), mine(shard);

		for (unsigned v = 0; v < o.warmup + o.iters; v++) {
			for (uint64_t i = 0; i < n_el; i++)
				buf[i] = ag ? -1.0f : value(i, o.rank, v);
			for (uint64_t i = 0; ag && i < shard; i++)
				mine[i] = value(o.rank * shard + i, o.rank, v);
			double t0 = now_ms();
			if (rs) {
				ring_reduce_scatter(ctx, buf.data(), shard, tmp, v);
			} else if (ag) {
				gloo::AllgatherOptions opts(ctx);
				opts.setInput(mine.data(), shard);
				opts.setOutput(buf.data(), shard * o.size);
				opts.setTag(v);
				gloo::allgather(opts);
			} else {
				gloo::AllreduceOptions opts(ctx);
				opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
				opts.setOutput(buf.data(), n_el);
				opts.setReduceFunction(
					static_cast<void (*)(void *, const void *, const void *,
							     size_t)>(&gloo::sum<float>));
				opts.setTag(v);
				gloo::allreduce(opts);
			}
			double ms = now_ms() - t0;
			// what each op leaves: the whole sum; this rank's shard of it;
			// every rank's shard
			const uint64_t lo = rs ? o.rank * shard : 0, hi = rs ? lo + shard : ag ? shard * o.size : n_el;
			for (uint64_t i = lo; i < hi; i++) {
				float want = 0;
				if (ag)
					want = value(i, (int)(i / shard), v);
				else
					for (int r = 0; r < o.size; r++)
						want += value(i, r, v);
				if (buf[i] != want) {
					std::fprintf(stderr,
						     "ring_gloo: rank %d: iteration %u: WRONG %s at "
						     "element %" PRIu64 ": got %g, want %g\n",
						     o.rank, v, ag ? "VALUE" : "SUM", i, (double)buf[i],
						     (double)want);
					return 1;
				}
			}
			if (v >= o.warmup)
				sum_ms += ms;
			std::printf("ring: rank %d: iteration %u/%u%s: %.2f ms, verified\n", o.rank,
				    v + 1, o.warmup + o.iters, v < o.warmup ? " (warm-up)" : "", ms);
			std::fflush(stdout);
		}
	} catch (const std::exception &e) {
		std::fprintf(stderr, "ring_gloo: rank %d: %s\n", o.rank, e.what());
		return 1;
	}
	double mean = sum_ms / o.iters;
	std::printf("RESULT ring n=%d bytes=%" PRIu64 " iters=%u mean_ms=%.3f goodput_gbps=%.3f "
		    "verified=yes op=%s\n",
		    o.size, o.bytes, o.iters, mean, (double)o.bytes * 8 / (mean * 1e6), o.op);
	return 0;
}
