# SPDX-License-Identifier: BSD-3-Clause
"""What a training job sees when a rank is late or dies, on the pbox backend.

    faults.py late SECONDS PORT    rank 0 starts its second allreduce SECONDS
        after the others (a checkpoint or an evaluation on rank 0 alone):
        every rank must finish, every sum exact (the group's timeout, 30
        minutes by default, is what counts, not libpbox's 30 s)
    faults.py kill PORT            rank 2 dies before its second allreduce:
        every other rank must get an error naming rank 2, at once
    faults.py size PORT            rank 3's second allreduce is of another
        size than the others': every rank must raise, naming rank 3
    faults.py survive PORT         a training loop (a linear model, SGD,
        gradients summed by all_reduce on the pbox group); rank 2 dies at
        step 3: the others catch the error, go on with pbox.torch.shrink()
        as ranks 0..2 of 3, redo the step and finish all STEPS steps, with
        equal parameters (after the box's loss the step resumes instead:
        the all_reduce that raised is complete, on with the next); then a
        reduce_scatter_tensor, an all_gather_into_tensor and a broadcast
        on the group it ends with, each exact
    faults.py survive-ddp PORT     the same loop with DistributedDataParallel:
        the others catch the error from backward(), shrink, build DDP again
        on the new group (its construction allgathers and broadcasts through
        pbox) and finish as ranks 0..2 of 3
    faults.py rank survive-box -   one rank of that loop, started by the
        harness on every host (tests/python/cluster.sh), which kills pboxd
        once every rank printed step 3: every rank goes on without the box,
        and takes it back (pbox.torch.rejoin()) at step 8, the harness
        having started pboxd again

Starts the 4 ranks itself (torchrun would end the others when one dies),
with torchrun's environment; prints one line per rank, "RANK r ok ..." or
"RANK r error after S s: MESSAGE"; exit 0 when every rank did what it must.
"""
import os
import subprocess
import sys
import time

WORLD = 4
COUNT = 1 << 18
STEPS = 10


def sharded_wrong(pg):
    """The sharded collectives and broadcast on the group a failure left
    (shrunk, or the box taken back), against their closed forms (integers
    in fp32: exact in any sum order): what is wrong, or None."""
    import torch
    import torch.distributed as dist

    r, n, S = pg.rank(), pg.size(), 3000  # S: a shard, not a whole number of fragments
    i = torch.arange(n * S, dtype=torch.float32)
    out = torch.zeros(S)
    pg._reduce_scatter_base(out, r + 1 + i % 7).wait()
    want = n * (n + 1) / 2 + n * ((r * S + torch.arange(S, dtype=torch.float32)) % 7)
    if not torch.equal(out, want):
        return "reduce_scatter_tensor: not the closed form's shard"
    whole = torch.zeros(n * S)
    pg._allgather_base(whole, 10 * r + torch.arange(S, dtype=torch.float32) % 5).wait()
    if not torch.equal(whole, 10 * (i // S) + (i % S) % 5):
        return "all_gather_into_tensor: not every rank's shard in order"
    opts = dist.BroadcastOptions()
    opts.rootRank = n - 1
    t = i.clone() if r == n - 1 else torch.zeros(n * S)
    pg.broadcast([t], opts).wait()
    if not torch.equal(t, i):
        return "broadcast from rank %d: not its tensor" % (n - 1)
    return None


def survive_main(rank, box, ddp):
    import hashlib

    import torch
    import torch.distributed as dist

    import pbox.torch

    torch.manual_seed(0)  # the same initial model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    if ddp:  # buffers too (fp32 and an int64 count), which DDP broadcasts every step
        model.insert(1, torch.nn.BatchNorm1d(512))
    dist.init_process_group("pbox")
    pg = dist.distributed_c10d._get_default_group()
    # survive-ddp: DDP sums the gradients (its buckets, during backward), and
    # is built again on the group shrink() gives
    net = torch.nn.parallel.DistributedDataParallel(model) if ddp else model
    if ddp:  # (without a hook torch 1.13's reducer crashes on a failed collective)
        net.register_comm_hook(pbox.torch.hook_state(pg), pbox.torch.allreduce_hook)
    step = 0
    while step < STEPS:
        if rank == 2 and step == 3 and not box:
            os._exit(3)
        if box:  # a step the harness can see, and time to kill pboxd in
            print("RANK %d step %d" % (rank, step), flush=True)
            time.sleep(0.5)
        if box and step == 8:  # the harness started pboxd again at step 4 or so
            t0 = time.monotonic()
            k = pbox.torch.rejoin(pg)
            print("RANK %d step %d: rejoined, k=%.2f, in %.3f s" %
                  (rank, step, k, time.monotonic() - t0), flush=True)
        g = torch.Generator().manual_seed(1000 * rank + step)  # this rank's batch
        x, y = torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)
        model.zero_grad()
        t0 = time.monotonic()
        if ddp:
            try:
                torch.nn.functional.cross_entropy(net(x), y).backward()
            except RuntimeError as e:
                pg = pbox.torch.shrink(pg, step=step)  # the step every survivor redoes
                step = pg.step
                del net
                net = torch.nn.parallel.DistributedDataParallel(model, process_group=pg)
                net.register_comm_hook(pbox.torch.hook_state(pg), pbox.torch.allreduce_hook)
                print("RANK %d step %d: %s; went on as rank %d of %d in %.3f s, DDP built "
                      "again, redoing the step" % (rank, step, str(e).splitlines()[0], pg.rank(),
                                                   pg.size(), time.monotonic() - t0), flush=True)
                continue
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad  # DDP averaged it
            step += 1
            continue
        torch.nn.functional.cross_entropy(model(x), y).backward()
        redo = False
        for p in model.parameters():
            try:
                pg.allreduce([p.grad]).wait()
            except RuntimeError as e:
                failed = step
                pg = pbox.torch.shrink(pg, step=step)  # resumed: as given; else the earliest
                step = pg.step
                print("RANK %d step %d: %s; went on as rank %d of %d in %.3f s, %s" %
                      (rank, failed, e, pg.rank(), pg.size(), time.monotonic() - t0,
                       "resuming the step" if pg.resumed else
                       "redoing step %d" % step), flush=True)
                # resumed (the box was lost): p.grad holds its sum, on with the next;
                # else (a rank was lost): the step again, from its inputs
                redo = not pg.resumed
                if redo:
                    break
        if redo:
            continue
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad / pg.size()
        step += 1
    if pg.size() < WORLD:  # a shrunk group refuses what it cannot do, by name
        opts = dist.ReduceOptions()
        opts.rootRank = 0
        try:
            pg.reduce([torch.ones(1)], opts)
            print("RANK %d: the shrunk group's reduce() did not refuse" % rank, flush=True)
            os._exit(1)
        except RuntimeError as e:
            if "reduce: a group made by shrink()" not in str(e):
                print("RANK %d: the shrunk group's reduce(): %s" % (rank, e), flush=True)
                os._exit(1)
    wrong = sharded_wrong(pg)
    if wrong:
        print("RANK %d: after the %s: %s" % (rank, "box's loss" if box else "lost rank", wrong),
              flush=True)
        os._exit(1)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                     for p in model.parameters())).hexdigest()[:16]
    print("RANK %d ok, %d steps, parameters %s" % (rank, STEPS, digest), flush=True)
    os._exit(0)  # the old default group's Gloo has a dead rank: no teardown


def rank_main(mode, arg):
    import torch
    import torch.distributed as dist

    import pbox.torch  # noqa: F401

    rank = int(os.environ["RANK"])
    dist.init_process_group("pbox")
    for it in range(3):
        n = COUNT + 1 if mode == "size" and rank == 3 and it == 1 else COUNT
        x = torch.full((n,), float(rank + 1 + it))
        if it == 1 and mode == "late" and rank == 0:
            time.sleep(float(arg))
        if it == 1 and mode == "kill" and rank == 2:
            os._exit(3)
        t0 = time.monotonic()
        try:
            dist.all_reduce(x)
        except RuntimeError as e:
            print("RANK %d error after %.1f s: %s" % (rank, time.monotonic() - t0, e), flush=True)
            # the group is gone: no orderly teardown to wait for. 1: the
            # error names the rank that died; 4: it blames another
            os._exit(1 if ("rank 3 " if mode == "size" else "rank 2 ") in str(e) else 4)
        want = sum(r + 1 + it for r in range(WORLD))
        if not bool((x == want).all()):
            print("RANK %d wrong sum in iteration %d" % (rank, it), flush=True)
            os._exit(2)
    print("RANK %d ok, 3 allreduces exact" % rank, flush=True)
    dist.destroy_process_group()


def main():
    mode = sys.argv[1]
    arg, port = (sys.argv[2], sys.argv[3]) if mode == "late" else (None, sys.argv[2])
    survive = mode.startswith("survive")
    procs = []
    for r in range(WORLD):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(WORLD),
                   LOCAL_WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", mode, arg or "-"],
                                      env=env, stdout=subprocess.PIPE if survive else None,
                                      text=True))
    if survive:  # rank 2 died with 3; the others finished with one set of parameters
        outs = [p.communicate()[0] for p in procs]
        sys.stdout.write("".join(outs))
        digests = {o.split("parameters ")[-1].strip() for r, o in enumerate(outs) if r != 2}
        # (with DDP, Gloo's broadcast of the buffers may see the death first,
        # in its own words)
        sys.exit(0 if procs[2].returncode == 3 and
                 all(procs[r].returncode == 0 and "of 3 in" in outs[r] and
                     ("rank 2 " in outs[r] or mode == "survive-ddp") for r in (0, 1, 3)) and
                 len(digests) == 1 else 1)
    rcs = [p.wait() for p in procs]
    if mode == "late":
        sys.exit(0 if rcs == [0] * WORLD else 1)
    if mode == "size":  # every rank raised, naming rank 3
        sys.exit(0 if rcs == [1] * WORLD else 1)
    # kill: rank 2 died with 3, every other rank failed with an error naming it (1)
    sys.exit(0 if rcs[2] == 3 and all(rcs[r] == 1 for r in (0, 1, 3)) else 1)


if __name__ == "__main__":
    if sys.argv[1] == "rank" and sys.argv[2].startswith("survive"):
        survive_main(int(os.environ["RANK"]), sys.argv[2] == "survive-box",
                     sys.argv[2] == "survive-ddp")
    elif sys.argv[1] == "rank":
        rank_main(sys.argv[2], sys.argv[3])
    else:
        main()
