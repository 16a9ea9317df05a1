# SPDX-License-Identifier: BSD-3-Clause
"""The pbox backend's edges, 2 ranks under torchrun on loopback (run.sh):

- an op pbox does not sum (MAX) goes to the internal Gloo group, right,
  and says so once per process on stderr (run.sh counts the lines);
- Work.wait(timeout) honours its timeout while rank 1 is 1.5 s late
  (PboxError with pbox.ETIMEDOUT; the collective goes on and a later wait()
  has its sum);
- all_reduce_coalesced: SUM of float32 tensors summed by pbox, each on its
  own; MAX, and an int64 SUM, handed to Gloo's allreduce_coalesced (its
  plain allreduce would reduce the list's entries into each other);
- a sparse COO tensor goes to Gloo's sparse all-reduce;
- a call completes whoever completes it: the caller waiting for it, or,
  unwaited, once a later call is waited for, its is_completed() is asked,
  a later call of its tensor waits behind it, or its future is taken
  (AVG's division done in each), and the same for plain SUM calls (their
  futures made only when asked for);
- ScheduledOptimizer declares its parameters by layer, or in backward's
  order with priority=False (first come, first served);
- pbox.torch.stats() counts what the rank did (ops, bytes);
- a failure is a PboxError (torch's DistBackendError where torch has one)
  carrying libpbox's code: rank 1 leaves, rank 0's all_reduce raises with
  pbox.EPEER.
"""
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import pbox
import pbox.torch

dist.init_process_group("pbox")
rank = dist.get_rank()
fails = []

# MAX twice: Gloo's result, one line on stderr
for _ in range(2):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if float(t) != 2.0:
        fails.append("MAX through Gloo: %s" % float(t))

# Work.wait(timeout): rank 1 comes 1.5 s late
if rank == 1:
    time.sleep(1.5)
t = torch.ones(1000)
work = dist.all_reduce(t, async_op=True)
if rank == 0:
    t0 = time.monotonic()
    try:
        work.wait(timeout=timedelta(seconds=0.3))
        fails.append("wait(timeout=0.3 s) returned while rank 1 was late")
    except pbox.torch.PboxError as e:
        waited = time.monotonic() - t0
        if e.status != pbox.ETIMEDOUT or not 0.25 <= waited < 1.2:
            fails.append("wait(timeout): status %d after %.2f s" % (e.status, waited))
work.wait()
if float(t[0]) != 2.0:
    fails.append("the late all_reduce: %s" % float(t[0]))

# all_reduce_coalesced: each tensor summed on its own, whoever sums it
for op, dt, want in ((dist.ReduceOp.SUM, torch.float32, lambda a, b: a + b),
                     (dist.ReduceOp.MAX, torch.float32, max),
                     (dist.ReduceOp.SUM, torch.int64, lambda a, b: a + b)):
    ts = [torch.full((3,), rank * 10 + 1, dtype=dt), torch.full((5,), rank * 10 + 2, dtype=dt)]
    dist.all_reduce_coalesced(ts, op=op)
    for i, t in enumerate(ts):
        w = want(0 * 10 + i + 1, 1 * 10 + i + 1)
        if not bool((t == w).all()):
            fails.append("all_reduce_coalesced %s %s, tensor %d: %s, not %s" %
                         (op, dt, i, t.tolist(), w))

# a sparse COO tensor: Gloo's sparse all-reduce, summed as a dense one would be
sp = torch.sparse_coo_tensor([[rank, 2]], [1.0, float(rank + 1)], (4,))
dist.all_reduce(sp)
if sp.to_dense().tolist() != [1.0, 1.0, 3.0, 0.0]:
    fails.append("sparse all_reduce: %s" % sp.to_dense().tolist())

# who completes a call: the caller waiting for it, or the completion thread
# once something may need it complete without a wait. Each case hangs or
# leaves a stale tensor if the call is never handed over.
def poll(work, what):
    """is_completed() alone, up to 10 s: the call must complete unwaited."""
    end = time.monotonic() + 10
    while not work.is_completed():
        if time.monotonic() > end:
            fails.append("%s: not complete after 10 s without a wait()" % what)
            return False
        time.sleep(0.001)
    return True


def avg_of(v):  # an AVG all_reduce of v + rank on 2 ranks
    return v + 0.5


# never waited for, a later collective waited for: the first completes too
a, b = torch.full((300,), 4.0 + rank), torch.full((301,), 1.0)
wa = dist.all_reduce(a, op=dist.ReduceOp.AVG, async_op=True)
dist.all_reduce(b, async_op=True).wait()
if poll(wa, "an AVG call before a waited one") and not bool((a == avg_of(4.0)).all()):
    fails.append("an AVG call completed unwaited: %s, not %s" % (a[0].item(), avg_of(4.0)))
# the only call in flight, is_completed() asked: its AVG done
c = torch.full((302,), 6.0 + rank)
wc = dist.all_reduce(c, op=dist.ReduceOp.AVG, async_op=True)
if poll(wc, "a lone AVG call") and not bool((c == avg_of(6.0)).all()):
    fails.append("a lone AVG call, is_completed(): %s, not %s" % (c[0].item(), avg_of(6.0)))
# one tensor twice at once: the second waits behind the first, which nobody waits for
d = torch.ones(303)
dist.all_reduce(d, async_op=True)
dist.all_reduce(d, async_op=True).wait()
if not bool((d == 4.0).all()):
    fails.append("one tensor summed twice at once: %s, not 4.0" % d[0].item())
# its future taken: completed for whoever waits for the future
e = torch.full((304,), 1.0 + rank)
got = dist.all_reduce(e, async_op=True).get_future().wait()
if not bool((got[0] == 3.0).all()) or got[0] is not e:
    fails.append("all_reduce's future: %s" % got)
# the same for plain calls (one contiguous CPU tensor, SUM), whose Work
# makes its future only when asked for one
a, b = torch.full((310,), 1.0 + rank), torch.ones(311)
wa = dist.all_reduce(a, async_op=True)
dist.all_reduce(b, async_op=True).wait()
if poll(wa, "a SUM call before a waited one") and not bool((a == 3.0).all()):
    fails.append("a SUM call completed unwaited: %s, not 3.0" % a[0].item())
c = torch.full((312,), 1.0 + rank)
wc = dist.all_reduce(c, async_op=True)
if poll(wc, "a lone SUM call") and not bool((c == 3.0).all()):
    fails.append("a lone SUM call, is_completed(): %s, not 3.0" % c[0].item())
# waited twice, then its future asked for (made complete) and chained
f = torch.full((313,), 1.0 + rank)
wf = dist.all_reduce(f, async_op=True)
wf.wait()
wf.wait()
got = wf.get_future().then(lambda fut: fut.value()[0] * 2).wait()
if not bool((got == 6.0).all()) or not bool((f == 3.0).all()):
    fails.append("a SUM call's future after its wait(): %s, tensor %s" % (got[0].item(),
                                                                          f[0].item()))
# its future asked for before it completes, a callback chained on it
g = torch.full((314,), 1.0 + rank)
got = dist.all_reduce(g, async_op=True).get_future().then(
    lambda fut: fut.value()[0] + 1).wait()
if not bool((got == 4.0).all()):
    fails.append("a SUM call's future, chained: %s, not 4.0" % got[0].item())

# pbox.torch.stats(): the counters of what this rank did
st = pbox.torch.stats()
if st["ops"] < 1 or st["rx_bytes"] < 2000 or "srtt_ns" not in st:  # the 1000-float sum
    fails.append("stats(): %s" % st)

# ScheduledOptimizer's priorities (after stats(): its broadcast, let go of
# at once, begins a new incarnation, whose counters start at 0): by layer
# (parameter i at i), or first come, first served (priority=False: in
# backward's order, the last parameter's first), never one for all
# (libpbox would order a tie by key, a hash: a random order)
ctx = dist.distributed_c10d._get_default_group()._ctx
for by_layer in (True, False):
    said = []
    ctx.declare = lambda key, count, dtype, prio=0, said=said: said.append(prio)
    try:
        net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
        pbox.torch.ScheduledOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), net,
                                      priority=by_layer)
    finally:
        del ctx.declare
    want = [0, 1, 2, 3] if by_layer else [3, 2, 1, 0]
    if said != want:
        fails.append("ScheduledOptimizer(priority=%s) declared priorities %s, not %s" %
                     (by_layer, said, want))

# a failure carries its code: rank 1 leaves without a word
dist.barrier()
if rank == 1:
    print("edges: rank 1 ok" if not fails else "edges: rank 1: %s" % fails, flush=True)
    os._exit(0 if not fails else 1)
time.sleep(0.5)
try:
    dist.all_reduce(torch.ones(10))
    fails.append("all_reduce went on without rank 1")
except pbox.torch.PboxError as e:
    base = getattr(dist, "DistBackendError", RuntimeError)
    if e.status not in (pbox.EPEER, pbox.EFAILED) or not isinstance(e, base) or \
            "rank 1" not in str(e):
        fails.append("rank 1 gone: %s %d %s" % (type(e).__name__, e.status, e))
print("edges: rank 0 ok" if not fails else "edges: rank 0: %s" % fails, flush=True)
os._exit(0 if not fails else 1)
