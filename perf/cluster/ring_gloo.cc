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
//             [--iters I] [--warmup W]
//
// Prints one line per iteration and last:
//   RESULT ring n=N bytes=B iters=I mean_ms=T goodput_gbps=G verified=yes
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
		{"warmup", required_argument, nullptr, 'w'}, {nullptr, 0, nullptr, 0}};
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
		default: return -1;
		}
	}
	if (o->size < 2 || o->size > 8 || o->rank < 0 || o->rank >= o->size || !o->iface ||
	    !o->store || o->bytes < 4 * (uint64_t)o->size || o->iters == 0)
		return -1;
	return 0;
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

		for (unsigned v = 0; v < o.warmup + o.iters; v++) {
			for (uint64_t i = 0; i < n_el; i++)
				buf[i] = value(i, o.rank, v);
			gloo::AllreduceOptions opts(ctx);
			opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
			opts.setOutput(buf.data(), n_el);
			opts.setReduceFunction(static_cast<void (*)(void *, const void *, const void *,
								    size_t)>(&gloo::sum<float>));
			opts.setTag(v);
			double t0 = now_ms();
			gloo::allreduce(opts);
			double ms = now_ms() - t0;
			for (uint64_t i = 0; i < n_el; i++) {
				float want = 0;
				for (int r = 0; r < o.size; r++)
					want += value(i, r, v);
				if (buf[i] != want) {
					std::fprintf(stderr,
						     "ring_gloo: rank %d: iteration %u: WRONG SUM at "
						     "element %" PRIu64 ": got %g, want %g\n",
						     o.rank, v, i, (double)buf[i], (double)want);
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
		    "verified=yes\n",
		    o.size, o.bytes, o.iters, mean, (double)o.bytes * 8 / (mean * 1e6));
	return 0;
}
