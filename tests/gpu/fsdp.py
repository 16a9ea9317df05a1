# SPDX-License-Identifier: BSD-3-Clause
"""FSDP on the pbox group, CUDA tensors (tests/gpu/run.sh, torch 2.x on a
GPU host; 4 ranks under torchrun sharing one GPU, which pbox allows and
NCCL does not):

- reduce_scatter_tensor, all_gather_into_tensor, all_gather (uneven) and
  broadcast of CUDA tensors through pbox, each element exact (integers);
- a small model wrapped in FullyShardedDataParallel (full sharding: its
  gradients reduce-scattered, its parameters all-gathered, every step)
  trains to the parameters of the same steps taken on one process over
  every rank's batch (FSDP's average of the ranks' gradients), within fp32
  noise; and nothing is handed to Gloo (run.sh counts "goes to Gloo").

Prints "fsdp: rank R ok, largest difference D" or the failures.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

import pbox.torch  # noqa: F401  (registers the backend)

dist.init_process_group("pbox")
rank, n = dist.get_rank(), dist.get_world_size()
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
fails = []


def ints(count, salt, r=None):
    g = torch.Generator().manual_seed(1000 * salt + (rank if r is None else r))
    return torch.randint(-20, 21, (count,), generator=g).float()


m = 3001
whole = ints(n * m, 1).to(dev)
out = torch.empty(m, device=dev)
dist.reduce_scatter_tensor(out, whole)
want = sum(ints(n * m, 1, r) for r in range(n))[rank * m:(rank + 1) * m]
if not torch.equal(out.cpu(), want):
    fails.append("reduce_scatter_tensor of CUDA tensors")
full = torch.empty(n * m, device=dev)
dist.all_gather_into_tensor(full, ints(m, 2).to(dev))
if not torch.equal(full.cpu(), torch.cat([ints(m, 2, r) for r in range(n)])):
    fails.append("all_gather_into_tensor of CUDA tensors")
sizes = [500 + 300 * r for r in range(n)]
outs = [torch.empty(s, device=dev) for s in sizes]
dist.all_gather(outs, ints(sizes[rank], 3).to(dev))
for r in range(n):
    if not torch.equal(outs[r].cpu(), ints(sizes[r], 3, r)):
        fails.append("all_gather of uneven CUDA shards, shard %d" % r)
b = ints(10007, 4).to(dev)
dist.broadcast(b, 2)
if not torch.equal(b.cpu(), ints(10007, 4, 2)):
    fails.append("broadcast of a CUDA tensor")


def model():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                               torch.nn.Linear(128, 16)).to(dev)


def batch(r, step):
    g = torch.Generator().manual_seed(100 * step + r)
    return torch.randn(32, 64, generator=g).to(dev), torch.randn(32, 16, generator=g).to(dev)


steps = 5
fsdp = FSDP(model(), device_id=dev, sync_module_states=True)
opt = torch.optim.SGD(fsdp.parameters(), lr=0.05, momentum=0.9)
for step in range(steps):
    x, y = batch(rank, step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(fsdp(x), y).backward()
    opt.step()
with FSDP.summon_full_params(fsdp):
    got = [p.detach().clone() for p in fsdp.parameters()]

ref = model()  # one process, every rank's batch: the mean of their gradients
ropt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
for step in range(steps):
    ropt.zero_grad()
    loss = sum(torch.nn.functional.mse_loss(ref(x), y) for x, y in
               (batch(r, step) for r in range(n))) / n
    loss.backward()
    ropt.step()
want = [p.detach().reshape(-1) for p in ref.parameters()]
flat = torch.cat([g.reshape(-1) for g in got])
worst = (flat - torch.cat(want)).abs().max().item() if flat.numel() == sum(
    w.numel() for w in want) else float("inf")
if worst > 1e-5:
    fails.append("FSDP: parameters %.3g from the one-process reference" % worst)
dist.barrier()
if fails:
    for f in fails:
        print("fsdp: rank %d FAIL %s" % (rank, f), flush=True)
    sys.exit(1)
print("fsdp: rank %d ok, largest difference %.3g" % (rank, worst), flush=True)
dist.destroy_process_group()
os._exit(0)
