# SPDX-License-Identifier: BSD-3-Clause
"""The sharded collectives through pbox (libpbox 3.8), 4 ranks under
torchrun on loopback (run.sh), each result against Gloo's on the same
inputs (integers in fp32, so every sum order gives the same bits):

- reduce_scatter (the list form, uneven shards) and reduce_scatter_tensor
  / _reduce_scatter_base, SUM and AVG, fp32, bf16 and fp16, against
  Gloo's all_reduce of the same tensor cut to this rank's shard (Gloo in
  torch 1.13 has no reduce_scatter of its own);
- all_gather (the list form, uneven shards) and all_gather_into_tensor /
  _all_gather_base, fp32, bf16 and int64, against Gloo's all_gather;
- broadcast of fp32, bf16, int64 and several tensors at once, from each
  root, against Gloo's broadcast;
- ZeroRedundancyOptimizer with DDP, on the pbox group and on a Gloo group
  from one start: the same parameters after a few steps (fp32 noise);
- the backend hands none of them to Gloo (nothing said on stderr:
  run.sh counts "goes to Gloo" lines).

Prints "shard: rank R ok" or the failures.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

import pbox.torch  # noqa: F401  (registers the backend)

dist.init_process_group("pbox")
rank, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
fails = []
rs_tensor = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
ag_tensor = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base


def ints(count, salt, dtype=torch.float32):
    """Small integers, this rank's: exact in every float dtype, any sum order."""
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randint(-20, 21, (count,), generator=g).to(dtype)


def same(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        diff = (got.double() - want.double()).abs().max().item() if got.shape == want.shape \
            else "shape %s, not %s" % (tuple(got.shape), tuple(want.shape))
        fails.append("%s: not Gloo's (largest difference %s)" % (what, diff))


def gloo_sum(t):
    """Gloo's all-reduce of @t (fp32 on the wire: torch 1.13's Gloo has no
    bf16), in @t's dtype."""
    w = t.float().clone()
    dist.all_reduce(w, group=gloo)
    return w.to(t.dtype)


sizes = [1000 + 777 * s for s in range(n)]  # uneven shards
offs = [sum(sizes[:s]) for s in range(n)]
for step in range(3):
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        name = "%s step %d" % (str(dt).replace("torch.", ""), step)
        # reduce_scatter, list form: this rank's shard of the sum
        whole = ints(sum(sizes), step, dt)
        out = torch.empty(sizes[rank], dtype=dt)
        dist.reduce_scatter(out, list(whole.split(sizes)))
        ref = gloo_sum(whole)
        same("reduce_scatter %s" % name, out, ref[offs[rank]:offs[rank] + sizes[rank]])
        # reduce_scatter_tensor, even shards, AVG where torch has it
        m = 4099
        whole = ints(n * m, step + 10, dt)
        out = torch.empty(m, dtype=dt)
        avg = hasattr(dist.ReduceOp, "AVG") and dt == torch.float32
        rs_tensor(out, whole, op=dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM)
        want = gloo_sum(whole)[rank * m:(rank + 1) * m]
        same("reduce_scatter_tensor %s%s" % (name, " AVG" if avg else ""), out,
             want / n if avg else want)
    for dt in (torch.float32, torch.bfloat16, torch.int64):
        name = "%s step %d" % (str(dt).replace("torch.", ""), step)
        mine = ints(sizes[rank], step + 20, dt)
        outs = [torch.empty(sizes[s], dtype=dt) for s in range(n)]
        dist.all_gather(outs, mine)
        # Gloo's all_gather takes even shards only: each padded to the
        # largest, cut after (and bf16, which Gloo (1.13) lacks, as fp32:
        # exact both ways)
        wire = mine.float() if dt == torch.bfloat16 else mine
        pad = torch.zeros(max(sizes), dtype=wire.dtype)
        pad[:sizes[rank]] = wire
        ref = [torch.empty(max(sizes), dtype=wire.dtype) for _ in range(n)]
        dist.all_gather(ref, pad, group=gloo)
        for s in range(n):
            same("all_gather %s shard %d" % (name, s), outs[s], ref[s][:sizes[s]].to(dt))
        whole = torch.empty(n * 3001, dtype=dt)
        mine = ints(3001, step + 30, dt)
        ag_tensor(whole, mine)
        wire = mine.float() if dt == torch.bfloat16 else mine
        ref = [torch.empty(3001, dtype=wire.dtype) for _ in range(n)]
        dist.all_gather(ref, wire, group=gloo)
        same("all_gather_into_tensor %s" % name, whole, torch.cat(ref).to(dt))
        for root in range(n):
            b = ints(50001, step + 40 + root, dt)
            ref = b.float() if dt == torch.bfloat16 else b.clone()
            dist.broadcast(b, root)
            dist.broadcast(ref, root, group=gloo)
            same("broadcast %s from %d" % (name, root), b, ref.to(dt))
    # several tensors in one broadcast (DDP's buffers at construction)
    ts = [ints(17, step + 50), ints(5, step + 51)]
    refs = [t.clone() for t in ts]
    for t in ts:
        dist.broadcast(t, 1)
    for t in refs:
        dist.broadcast(t, 1, group=gloo)
    for i, (t, r) in enumerate(zip(ts, refs)):
        same("broadcast of tensor %d of two, step %d" % (i, step), t, r)


def zero_run(group):
    """DDP with ZeroRedundancyOptimizer on @group: the final parameters."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    ddp = DDP(model, process_group=group)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD,
                                  process_group=group, lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(6):
        x = torch.randn(16, 32, generator=g)
        y = torch.randn(16, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


on_pbox, on_gloo = zero_run(None), zero_run(gloo)
worst = max((a - b).abs().max().item() for a, b in zip(on_pbox, on_gloo))
if worst > 1e-5:
    fails.append("ZeroRedundancyOptimizer: parameters %.3g from Gloo's" % worst)
print("shard: rank %d zero: largest difference from Gloo's %.3g" % (rank, worst), flush=True)
dist.barrier()
if fails:
    for f in fails[:8]:
        print("shard: rank %d FAIL %s" % (rank, f), flush=True)
    sys.exit(1)
print("shard: rank %d ok" % rank, flush=True)
dist.destroy_process_group()
os._exit(0)
