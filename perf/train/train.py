# SPDX-License-Identifier: BSD-3-Clause
"""One rank of perf/train: a torchvision model trained on synthetic images by
an unmodified DDP loop (or pbox.torch.ScheduledOptimizer in its place),
under torchrun. Prints the time per step and saves the final parameters.

    torchrun ... perf/train/train.py MODE MODEL OUT_PREFIX

MODE: gloo (DDP on a Gloo group), pbox (DDP on the pbox backend), hook (DDP
on Gloo, its buckets summed by pbox.torch.allreduce_hook), sched
(pbox.torch.ScheduledOptimizer on the pbox group, no DDP), sched-fifo (the
same, first come, first served: priority=False), async (pbox.torch.AsyncOptimizer:
BytePS's asynchronous mode, no DDP), async-slow (the same, the last rank
at half speed: it sleeps as long as its step took). MODEL: a
torchvision model name (resnet18, resnet50, vgg16, ...), 10 classes, or
bert_base (a BERT-base-sized encoder from torch.nn, IMAGE tokens a sequence).
STEPS (12) steps, the first WARMUP (4) untimed (DDP lays out its buckets,
then its rebuilt ones, and the pbox backend lets go of the first at step
3: set-up, once per run); BATCH (8) images of IMAGE
(32) pixels a side per rank; SGD with momentum.

Prints "train: MODE MODEL step_ms=S grads_mb=G ..." from rank 0: the mean
time from one timed step's start to the next's (a long run's rate; the
scheduled optimizer's updates of a step land in the next step's forward,
and its last step's, applied once at the end, are tail_ms), where the
time went (fwd_ms, with the scheduled optimizer's waits for sums; bwd_ms,
with DDP's; opt_ms), then "train: MODE MODEL cpu_ms_per_step=C THREAD:MS ...":
rank 0's CPU time per timed step by thread (the main thread's is the
model's compute; the rest is communication), then "train: MODE MODEL
host_busy=F": the share of the host's CPUs busy over the timed steps
(every rank, pboxd and the emulated links; near 1, the host's CPUs bound
the step, not the links), and saves OUT_PREFIX-RANK.pt.
With TRAIN_STATS=1, rank 0 also prints its pbox_stats() at the end.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torchvision

import pbox.torch

mode, name, out = sys.argv[1:4]
steps = int(os.environ.get("STEPS", "12"))
warm = int(os.environ.get("WARMUP", "4"))
batch = int(os.environ.get("BATCH", "8"))
side = int(os.environ.get("IMAGE", "32"))
torch.set_num_threads(1)  # ranks share the host's cores
dist.init_process_group("gloo" if mode in ("gloo", "hook") else "pbox")
rank = dist.get_rank()
torch.manual_seed(0)


class BertBase(torch.nn.Module):
    """A BERT-base-sized encoder from torch.nn (12 layers of 768, 12 heads,
    3072 wide; BERT's 30522-token vocabulary and 512 positions: 109.5 M
    parameters) with a 10-class head on the first token."""

    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(30522, 768)
        self.pos = torch.nn.Embedding(512, 768)
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
        self.head = torch.nn.Linear(768, 10)

    def forward(self, x):
        h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
        return self.head(self.enc(h)[:, 0])


model = BertBase() if name == "bert_base" else getattr(torchvision.models, name)(num_classes=10)
opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
slow = mode == "async-slow" and rank == dist.get_world_size() - 1
if mode in ("sched", "sched-fifo"):
    net = model
    opt = pbox.torch.ScheduledOptimizer(opt, model, priority=mode == "sched")
elif mode.startswith("async"):
    net = model
    opt = pbox.torch.AsyncOptimizer(opt, model)
else:
    net = torch.nn.parallel.DistributedDataParallel(model)
    if mode == "hook":
        hs = pbox.torch.hook_state()
        net.register_comm_hook(hs, pbox.torch.allreduce_hook)


def thread_cpu():
    """This process's CPU time so far per thread name (ns, from schedstat;
    the main thread as "main"): where a step's CPU goes on a shared host."""
    cpu = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                st = f.read()
            with open("/proc/self/task/%s/schedstat" % tid) as f:
                ns = int(f.read().split()[0])
        except OSError:  # the thread ended meanwhile
            continue
        name = "main" if int(tid) == os.getpid() else st[st.index("(") + 1:st.rindex(")")]
        cpu[name] = cpu.get(name, 0) + ns
    return cpu


def host_cpu():
    """The host's CPU time (/proc/stat, every CPU, in its ticks) as (busy,
    all): /proc/stat is the host's in every network namespace, so it counts
    every rank, pboxd and the emulated links' kernel work alike."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle, iowait
    total = sum(v[:8])  # guest time is in user's already
    return total - idle, total


gen = torch.Generator().manual_seed(1000 + rank)
data = [(torch.randint(0, 30522, (batch, side), generator=gen) if name == "bert_base" else
         torch.randn(batch, 3, side, side, generator=gen),
         torch.randint(0, 10, (batch,), generator=gen)) for _ in range(steps)]
dist.barrier()
phase = [0.0, 0.0, 0.0]  # forward (with the scheduled optimizer's waits), backward, step
for step, (x, y) in enumerate(data):
    if step == warm:
        t0 = time.monotonic()
        phase = [0.0, 0.0, 0.0]
        cpu0 = thread_cpu()
        host0 = host_cpu()
    a = time.monotonic()
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(net(x), y)
    b = time.monotonic()
    loss.backward()
    c = time.monotonic()
    opt.step()
    d = time.monotonic()
    if slow:  # half speed: as long again as its step took
        time.sleep(d - a)
    for i, t in enumerate((b - a, c - b, d - c)):
        phase[i] += t
t1 = time.monotonic()
cpu1 = thread_cpu()
host1 = host_cpu()
if mode.startswith("sched") or mode.startswith("async"):  # once per run, not per step
    opt.synchronize()
tail = (time.monotonic() - t1) * 1000
ms = (t1 - t0) * 1000 / (steps - warm)
fwd, bwd, stp = (1000 * t / (steps - warm) for t in phase)
grads = sum(p.numel() * p.element_size() for p in model.parameters())
if rank == 0:
    print("train: %s %s step_ms=%.1f grads_mb=%.1f loss=%.4f fwd_ms=%.1f bwd_ms=%.1f "
          "opt_ms=%.1f tail_ms=%.1f" % (mode, name, ms, grads / 2**20, float(loss), fwd, bwd, stp,
                                        tail), flush=True)
    cpu = {k: (v - cpu0.get(k, 0)) / 1e6 / (steps - warm) for k, v in cpu1.items()}
    print("train: %s %s cpu_ms_per_step=%.1f %s" % (
        mode, name, sum(cpu.values()), " ".join("%s:%.1f" % kv for kv in
                                                sorted(cpu.items(), key=lambda kv: -kv[1]) if kv[1] >= 0.1)),
          flush=True)
    busy, total = host1[0] - host0[0], host1[1] - host0[1]
    print("train: %s %s host_busy=%.3f of %d CPUs" % (mode, name, busy / total if total else 0,
                                                       os.cpu_count()), flush=True)
# what pbox laid out (the keys' state on the SSes; the box's share), against
# which train.sh holds the box's state
pg = hs.group if mode == "hook" else None if mode == "gloo" else \
    dist.distributed_c10d._get_default_group()
if rank == 0 and isinstance(pg, pbox.torch.ProcessGroupPbox):
    li = pg._ctx.layout()
    print("train: %s %s laid_bytes=%d box_bytes=%d grads_bytes=%d chunk=%d" %
          (mode, name, li.total_bytes, li.box_bytes, grads, li.chunk_size), flush=True)
if rank == 0 and isinstance(pg, pbox.torch.ProcessGroupPbox) and os.environ.get("TRAIN_STATS"):
    print("train: %s %s stats %s" % (mode, name, pg._ctx.stats()), flush=True)
if slow:
    print("train: %s %s slow_rank_step_ms=%.1f (rank %d)" % (mode, name, ms, rank), flush=True)
torch.save([p.detach().float() for p in model.parameters()], "%s-%d.pt" % (out, rank))
dist.barrier()
dist.destroy_process_group()
