# SPDX-License-Identifier: BSD-3-Clause
"""Calls of one shape in flight at once on the pbox backend (run.sh, under
torchrun, 4 ranks): six async all_reduces of one (dtype, count) started
without waiting, another shape's between them, then all waited. Every sum
exact, in the order started; and one key per shape, so the state laid out
is each shape's once, however many of its calls were in flight. Then two
calls of one shape and a new shape's after them, rank 1 pausing before the
third: there the first is complete before the third is made, elsewhere
not; every rank's calls still reach libpbox in the order made (the third
waits behind the second), or the ranks would disagree on their order.

    torchrun --nproc_per_node 4 same_shape.py
"""
import sys
import time

import torch
import torch.distributed as dist

import pbox.torch  # noqa: F401  (registers the "pbox" backend)

dist.init_process_group("pbox")
rank, size = dist.get_rank(), dist.get_world_size()
n, m, calls = 70000, 1000, 6
bufs, works = [], []
for c in range(calls):
    for count in (n, m) if c % 2 else (n,):
        # each rank's values exact in fp32: (rank + 1) * (c + 1) * (i % 7)
        t = (torch.arange(count, dtype=torch.float32) % 7) * ((rank + 1) * (c + 1))
        bufs.append((t, c, count))
        works.append(dist.all_reduce(t, async_op=True))
for w in works:
    w.wait()
ranks = size * (size + 1) // 2
bad = [(c, count) for t, c, count in bufs
       if not torch.equal(t, (torch.arange(count, dtype=torch.float32) % 7) * (ranks * (c + 1)))]
late = 2 * m + 3
more = [torch.full((count,), float((rank + 1) * (c + 1))) for c, count in
        enumerate((n, n, late))]
works = [dist.all_reduce(more[0], async_op=True), dist.all_reduce(more[1], async_op=True)]
if rank == 1:
    time.sleep(0.5)  # its first call is complete by its third
works.append(dist.all_reduce(more[2], async_op=True))
for w in works:
    w.wait()
bad += [("paused", c) for c, t in enumerate(more) if not bool((t == ranks * (c + 1)).all())]
li = dist.distributed_c10d._get_default_group()._ctx.layout()
want = 4 * (n + m + late)
print("rank %d: %d calls in flight, %d wrong; laid out %d bytes (one key per shape: %d)" %
      (rank, len(works), len(bad), li.total_bytes, want), flush=True)
dist.barrier()
dist.destroy_process_group()
sys.exit(1 if bad or li.total_bytes != want else 0)
