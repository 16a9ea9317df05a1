# SPDX-License-Identifier: BSD-3-Clause
"""An all_reduce latency sweep through torch.distributed, nccl-tests style,
one backend per run (sweep.sh runs it for pbox and for Gloo):

    torchrun --nproc_per_node N sweep.py BACKEND OUT.csv [ITERS]

For each size from 1 KiB to 16 MiB (fp32, SUM, in place), 5 warm-up calls,
then ITERS timed ones, each after a barrier on a side Gloo group (not
timed) so that every rank starts together; a call's time is the slowest
rank's. The ranks leave each barrier a little apart (on a loaded host, up
to milliseconds), and a call's time is counted from each rank's own
start: the minimum is what is left of that skew. Then ITERS calls back to
back, as nccl-tests times them (a training step's calls come so): each
call's time is from the previous call's end to its own on each rank, the
slowest rank's, free of the barrier's skew (the ranks leave a call
together, as its sum reaches them). Writes
size_bytes,median_ms,p90_ms,min_ms,b2b_median_ms,b2b_p90_ms,cpu_us,caller_us,
engine_us,first_ms rows (rank 0; first_ms: the size's first call, after a
barrier, which to pbox is a new tensor: agreed by the ranks and laid out
before its data moves), and checks every sum."""
import csv
import os
import statistics
import sys
import threading
import time

import torch
import torch.distributed as dist

import pbox.torch  # noqa: F401  (registers the "pbox" backend)

backend, out = sys.argv[1], sys.argv[2]
iters = int(sys.argv[3]) if len(sys.argv) > 3 else 30
dist.init_process_group(backend)
rank, n = dist.get_rank(), dist.get_world_size()
side = dist.new_group(backend="gloo")  # barriers and the times' maximum
rows = []


def cpu_ns():
    """(every thread's, the calling thread's, libpbox engines') CPU time so
    far, in ns: what the threads alive now have run (a thread that ended
    since the last reading drops out; none does during a size's calls)."""
    every = caller = engine = 0
    me = threading.get_native_id()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/schedstat" % tid) as f:
                ns = int(f.read().split()[0])
            with open("/proc/self/task/%s/comm" % tid) as f:
                name = f.read().strip()
        except OSError:  # the thread ended between the listing and the read
            continue
        every += ns
        caller += ns if int(tid) == me else 0
        engine += ns if name == "pbox-engine" else 0
    return every, caller, engine


def pct90(v):
    """The 90th percentile of sorted @v."""
    return v[min(len(v) - 1, int(0.9 * len(v)))]


# SWEEP_FROM=K, SWEEP_TO=L: from 2^K bytes (10: 1 KiB) to 2^L (24: 16 MiB)
for shift in range(int(os.environ.get("SWEEP_FROM", "10")), int(os.environ.get("SWEEP_TO", "24")) + 1):
    size = 1 << shift
    count = size // 4
    t = torch.empty(count, dtype=torch.float32)
    want = float(n * (n + 1) // 2)
    times = []
    for i in range(5 + iters):
        t.fill_(float(rank + 1))
        dist.barrier(group=side)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        dt = torch.tensor([time.perf_counter() - t0])
        if not bool((t == want).all()):
            sys.exit("sweep: rank %d: %s, %d bytes: a wrong sum" % (rank, backend, size))
        dist.all_reduce(dt, op=dist.ReduceOp.MAX, group=side)
        if i == 0:  # the size's first call: a new tensor to pbox (agreed, laid out)
            first = float(dt) * 1e3
        if i >= 5:
            times.append(float(dt) * 1e3)
    # back to back: one call untimed (it leaves the barrier), then ITERS;
    # each multiplies the tensor by n, so it starts small (n^-ITERS/2) to
    # end in fp32's range: every sum is checked by the last
    scale = float(n) ** (-iters / 2)
    t.fill_((rank + 1) * scale)
    dist.barrier(group=side)
    dist.all_reduce(t)
    ends = [time.perf_counter()]
    cpu0 = cpu_ns()
    for i in range(iters):
        dist.all_reduce(t)
        ends.append(time.perf_counter())
    cpu = [(b - a) / iters / 1e3 for a, b in zip(cpu0, cpu_ns())]  # us a call
    if not torch.allclose(t, torch.full_like(t, want * scale * float(n) ** iters), rtol=1e-5):
        sys.exit("sweep: rank %d: %s, %d bytes: a wrong sum back to back" % (rank, backend, size))
    mine = torch.tensor([b - a for a, b in zip(ends, ends[1:])], dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(every, mine, group=side)
    b2b = sorted(float(x) * 1e3 for x in torch.stack(every).max(dim=0).values)
    mean_cpu = torch.tensor(cpu, dtype=torch.float64)
    dist.all_reduce(mean_cpu, group=side)
    times.sort()
    rows.append((size, statistics.median(times), pct90(times), times[0],
                 statistics.median(b2b), pct90(b2b)) + tuple(float(x) / n for x in mean_cpu)
                + (first,))
    if rank == 0:
        print("sweep: %s %9d bytes: median %8.3f ms, p90 %8.3f ms, min %8.3f ms; "
              "back to back median %8.3f ms, p90 %8.3f ms; CPU a call (a rank's) %.1f us, "
              "the caller %.1f, the engine %.1f; the first call %.3f ms" % ((backend,) + rows[-1]),
              flush=True)
if rank == 0:
    with open(out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")  # join and awk read these: no CR
        w.writerow(["size_bytes", "median_ms", "p90_ms", "min_ms", "b2b_median_ms", "b2b_p90_ms",
                    "cpu_us", "caller_us", "engine_us", "first_ms"])
        w.writerows(rows)
dist.destroy_process_group()
