# SPDX-License-Identifier: BSD-3-Clause
"""An all_reduce latency sweep through torch.distributed, nccl-tests style,
one backend per run (sweep.sh runs it for pbox and for Gloo):

    torchrun --nproc_per_node N sweep.py BACKEND OUT.csv [ITERS]

For each size from 1 KiB to 16 MiB (fp32, SUM, in place), 5 warm-up calls,
then ITERS timed ones, each after a barrier on a side Gloo group (not
timed) so that every rank starts together; a call's time is the slowest
rank's. Writes size_bytes,median_ms,p90_ms,min_ms rows (rank 0), and
checks every sum. The ranks leave each barrier a little apart (on a loaded
host, up to milliseconds), and a call's time is counted from each rank's
own start: the minimum is what is left of that skew."""
import csv
import os
import statistics
import sys
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
# SWEEP_FROM=K: from 2^K bytes (10: 1 KiB) to 16 MiB; a profile of the large sizes
for shift in range(int(os.environ.get("SWEEP_FROM", "10")), 25, 1):
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
        if i >= 5:
            times.append(float(dt) * 1e3)
    times.sort()
    rows.append((size, statistics.median(times), times[min(len(times) - 1,
                                                           int(0.9 * len(times)))], times[0]))
    if rank == 0:
        print("sweep: %s %9d bytes: median %8.3f ms, p90 %8.3f ms, min %8.3f ms"
              % ((backend,) + rows[-1]), flush=True)
if rank == 0:
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["size_bytes", "median_ms", "p90_ms", "min_ms"])
        w.writerows(rows)
dist.destroy_process_group()
