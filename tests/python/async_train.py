# SPDX-License-Identifier: BSD-3-Clause
"""Asynchronous training through pbox (libpbox 3.9, pbox.torch.AsyncOptimizer),
4 ranks under torchrun on loopback (run.sh), on a convex problem: least
squares, each rank with its own shard of the data.

- sync: SGD on the ranks' averaged gradients (an all_reduce on Gloo), lr;
- async: each rank's own SGD step, lr / n, its delta added to the store
  with no barrier, rank 3 slowed (a sleep per step), [job] staleness = 4;
- both from one start (rank 0's), the same number of updates in all.

Checks: every rank ends with parameters the store gave it (a last call of
nothing: every rank's equal); the async run's loss on the whole data is
within 2% of the sync run's, and both well below the start's.

ASYNC_DEVICE=cuda (make test-gpu): the models, and so AsyncOptimizer's
parameters, on the GPU (the data and the sync run's Gloo sums on the CPU).

Prints "async: rank R ok loss sync=... async=..." or the failures.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import pbox.torch  # noqa: F401  (registers the backend)

dist.init_process_group("pbox")
rank, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
fails = []
D, PER, STEPS, LR = 16, 256, 150, 0.05

g = torch.Generator().manual_seed(7)
w_true = torch.randn(D, generator=g)
X = torch.randn(n * PER, D, generator=g)
y = X @ w_true + 0.1 * torch.randn(n * PER, generator=g)
mine = slice(rank * PER, (rank + 1) * PER)
dev = torch.device(os.environ.get("ASYNC_DEVICE", "cpu"))
Xd, yd = X[mine].to(dev), y[mine].to(dev)


def loss_of(w):
    return float(((X @ w - y) ** 2).mean())


def model():
    m = torch.nn.Linear(D, 1, bias=False).to(dev)
    with torch.no_grad():
        m.weight.zero_()
    return m


def grad_step(m, opt):
    opt.zero_grad()
    loss = ((m(Xd).squeeze(1) - yd) ** 2).mean()
    loss.backward()


start = loss_of(torch.zeros(D))
# sync SGD on the averaged gradient (Gloo)
ms = model()
opt = torch.optim.SGD(ms.parameters(), lr=LR)
for _ in range(STEPS):
    grad_step(ms, opt)
    g = ms.weight.grad.cpu()
    dist.all_reduce(g, group=gloo)
    ms.weight.grad.copy_(g / n)
    opt.step()
sync_loss = loss_of(ms.weight.detach().reshape(-1).cpu())
# async: n times the updates, each lr / n
ma = model()
aopt = pbox.torch.AsyncOptimizer(torch.optim.SGD(ma.parameters(), lr=LR / n), ma)
for _ in range(STEPS):
    if rank == n - 1:
        time.sleep(0.002)
    grad_step(ma, aopt)
    aopt.step()
dist.barrier(group=gloo)  # every rank's last delta is in
aopt.zero_grad()
for p in ma.parameters():
    p.grad = torch.zeros_like(p)
aopt.step()  # a step of nothing: the store as it ends
w = ma.weight.detach().reshape(-1).cpu().clone()
ref = w.clone()
dist.broadcast(ref, 0, group=gloo)
if not torch.equal(w, ref):
    fails.append("the ranks' final parameters differ (%g)" % float((w - ref).abs().max()))
async_loss = loss_of(w)
if abs(async_loss - sync_loss) > 0.02 * sync_loss:
    fails.append("async loss %.6f is not within 2%% of sync's %.6f" % (async_loss, sync_loss))
if sync_loss > 0.01 * start:
    fails.append("sync did not converge: %.6f from %.6f" % (sync_loss, start))
if fails:
    print("async: rank %d FAILED: %s" % (rank, "; ".join(fails)))
    sys.exit(1)
print("async: rank %d ok loss sync=%.6f async=%.6f start=%.3f" % (rank, sync_loss, async_loss,
                                                                   start))
dist.destroy_process_group()
