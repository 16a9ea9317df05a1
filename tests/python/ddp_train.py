# SPDX-License-Identifier: BSD-3-Clause
"""An unmodified DDP training script but for two lines (import pbox.torch, and
the backend's name from argv): a small model, fp32 or with a bf16 layer
(mixed), trained for 8 steps on each rank's own data; DDP rebuilds its
buckets after the first iteration. Saves the final parameters for run.sh to
compare across ranks and with the same run on Gloo (fp32 only: Gloo in
torch 1.13 has no bf16).

    torchrun ... ddp_train.py MODE OUT_PREFIX fp32|mixed

DDP_DIE=R:S: rank R dies at step S of torchrun's first attempt (its elastic
restart then trains from the start; each attempt prints when its group was
up, in seconds since the epoch, and the death's time).

MODE: pbox or gloo (the process group's backend, DDP's default
allreduce); hook (a Gloo group for DDP, its buckets summed by pbox through
pbox.torch.allreduce_hook); powersgd (torch's own PowerSGD comm hook on the
pbox group: compressed gradients, summed by pbox); sched (no DDP:
pbox.torch.ScheduledOptimizer on the pbox group, each parameter's sum
started as its gradient is ready, applied before its module's next
forward).

pboxhook: DDP on the pbox backend, the hook on its default group
(compression="auto" choosing which buckets take the group's [job]
compression).

DDP_HOOK_COMPRESSION: the hook's hook_state(compression=...) ("sign",
"auto", ...); DDP_HOOK_REDECIDE: with "auto", decide again every so many
steps (100).

DDP_STEPS=S: S steps rather than 8 (the time per step is over those after
the first 3).

DDP_ACCUM=A: each step is A micro-batches, all but the last under
no_sync(); DDP_CLIP=C: the gradients' norm clipped to C before each step
(torch.nn.utils.clip_grad_norm_ under DDP, the optimizer's own under sched).
"""
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist

import pbox.torch  # noqa: F401  (registers the "pbox" backend)

mode, out = sys.argv[1], sys.argv[2]
backend = {"hook": "gloo", "pboxhook": "pbox", "powersgd": "pbox", "sched": "pbox"}.get(mode, mode)
mixed = sys.argv[3] == "mixed"
steps = int(os.environ.get("DDP_STEPS", "8"))  # more: a steadier time per step
# DDP_WIDTH: the hidden layers' width (256); at 512 DDP's rebuilt buckets
# differ from its first step's
W = int(os.environ.get("DDP_WIDTH", "256"))
dist.init_process_group(backend)
rank = dist.get_rank()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if rank == 0:
    print("%s: attempt %d: group up at %.3f" % (mode, attempt, time.time()), flush=True)
die = [int(v) for v in os.environ["DDP_DIE"].split(":")] if os.environ.get("DDP_DIE") else None


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, W)
        self.dt = torch.bfloat16 if mixed else torch.float32
        self.b = torch.nn.Linear(W, W).to(self.dt)
        self.c = torch.nn.Linear(W, 10)

    def forward(self, x):
        h = torch.relu(self.a(x)).to(self.dt)
        h = torch.relu(self.b(h)).to(torch.float32)
        return self.c(h)


# DDP_DEVICE=cuda: the model and its gradients on the GPU (every rank on
# cuda:0 here: ranks may share one GPU), the same data as on the CPU
dev = torch.device(os.environ.get("DDP_DEVICE", "cpu"))
torch.manual_seed(0)
model = Net().to(dev)
accum = int(os.environ.get("DDP_ACCUM", "1"))
clip = float(os.environ["DDP_CLIP"]) if os.environ.get("DDP_CLIP") else None
sched = mode == "sched"
ddp = model if sched else torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.1)
group = dist.distributed_c10d._get_default_group()
if mode in ("hook", "pboxhook"):  # pboxhook: the hook on the default pbox group
    hs = pbox.torch.hook_state(group=group if mode == "pboxhook" else None,
                               compression=os.environ.get("DDP_HOOK_COMPRESSION") or None,
                               redecide_every=int(os.environ.get("DDP_HOOK_REDECIDE", "100")))
    group = hs.group
    ddp.register_comm_hook(hs, pbox.torch.allreduce_hook)
elif mode == "powersgd":
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

    psgd = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                       start_powerSGD_iter=2, min_compression_rate=0.5)
    ddp.register_comm_hook(psgd, powerSGD_hook.powerSGD_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
if sched:
    opt = pbox.torch.ScheduledOptimizer(opt, model)
gen = torch.Generator().manual_seed(1000 + rank)
# the steps that set up: DDP's buckets laid out (step 0), its rebuilt ones
# (step 1), and its first ones and its broadcast let go as a bucket comes
# back a second time (the pbox backend's pbox_forget(): step 2, or step 3
# where the rebuilt buckets differ from the first, DDP_WIDTH=512)
SETUP = 3
t0 = time.monotonic()
t2 = t0
for step in range(steps):
    if step == SETUP:  # DDP's buckets laid out, then its rebuilt ones, the first let go
        t2 = time.monotonic()
    if die and attempt == 0 and rank == die[0] and step == die[1]:
        print("%s: rank %d dies at step %d at %.3f" % (mode, rank, step, time.time()), flush=True)
        os._exit(3)
    opt.zero_grad()
    for a in range(accum):
        x = torch.randn(64, 64, generator=gen).to(dev)
        y = torch.randint(0, 10, (64,), generator=gen).to(dev)
        with (opt.no_sync() if sched else ddp.no_sync()) if a < accum - 1 else \
                contextlib.nullcontext():
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
    if clip is not None:
        if sched:
            opt.clip_grad_norm_(clip)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    if rank == 0:
        print("%s step %d loss %.4f" % (mode, step, float(loss)), flush=True)
if rank == 0:
    t_end = time.monotonic()
    print("%s: %.1f ms per step after the first %d; %.1f ms with them (they agree on and "
          "lay out DDP's buckets, then its rebuilt ones, and let go of the first)" %
          (mode, (t_end - t2) * 1000 / (steps - SETUP), SETUP, (t_end - t0) * 1000 / steps),
          flush=True)
if rank == 0 and mode != "gloo":
    # what pbox laid out (keys' state on the SSes) against the gradients' size:
    # DDP's rebuilt buckets (the first ones and its broadcast let go)
    li = group._ctx.layout()
    grads = sum(p.numel() * p.element_size() for p in model.parameters())
    print("%s: laid out %d bytes (box %d) for %d bytes of gradients, in chunks of %d" %
          (mode, li.total_bytes, li.box_bytes, grads, li.chunk_size), flush=True)
if sched:
    opt.synchronize()  # the last step's updates applied
torch.save([p.detach().float().cpu() for p in model.parameters()], "%s-%d.pt" % (out, rank))
dist.barrier()
dist.destroy_process_group()
