# SPDX-License-Identifier: BSD-3-Clause
"""The wheel, from a venv (run.sh's wheel_run): pbox imported from the venv,
not from a checkout, with the wheel's own libpbox.so.3 of the package's
version; then a 2-rank all_reduce through the pbox backend, exact.

    torchrun --nproc_per_node 2 wheel_check.py VENV
"""
import os
import sys

import torch
import torch.distributed as dist

import pbox
import pbox.torch  # noqa: F401  (registers the "pbox" backend)

venv = os.path.realpath(sys.argv[1])
here = os.path.realpath(pbox.__file__)
lib = os.path.realpath(pbox.library._name)
fails = []
if not here.startswith(venv) or not lib.startswith(os.path.dirname(here)):
    fails.append("pbox from %s, its library %s: not the venv's wheel" % (here, lib))
if pbox.library.pbox_version().decode() != pbox.__version__:
    fails.append("pbox.__version__ %s, libpbox %s" % (pbox.__version__,
                                                       pbox.library.pbox_version().decode()))
if not os.path.exists(os.path.join(os.path.dirname(lib), "pbox-3", "dpdk.so")):
    fails.append("no pbox-3/dpdk.so beside the wheel's libpbox.so.3")
dist.init_process_group("pbox")
rank = dist.get_rank()
t = torch.arange(1000, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
if not torch.equal(t, torch.arange(1000, dtype=torch.float32) * 3):
    fails.append("all_reduce: not the sum")
dist.destroy_process_group()
if rank == 0:
    print("wheel: pbox %s from %s" % (pbox.__version__, os.path.dirname(here)))
print("wheel: rank %d %s" % (rank, "; ".join(fails) if fails else "ok"))
sys.exit(1 if fails else 0)
