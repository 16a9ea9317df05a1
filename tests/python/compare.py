# SPDX-License-Identifier: BSD-3-Clause
"""compare.py OUT RUN [REF] [RANKS]: RUN's saved parameters (OUT/RUN-R.pt,
written by ddp_train.py) are equal on every rank; with REF, within 1e-4 of
REF's rank 0 (COMPARE_TOL=0: bitwise equal). Exit 0 when they are, and says
what differs when not."""
import os
import sys

import torch

out, run = sys.argv[1], sys.argv[2]
ref = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] != "-" else None
ranks = int(sys.argv[4]) if len(sys.argv) > 4 else 4
p0 = torch.load("%s/%s-0.pt" % (out, run))
for r in range(1, ranks):
    p = torch.load("%s/%s-%d.pt" % (out, run, r))
    if not all(torch.equal(a, b) for a, b in zip(p, p0)):
        sys.exit("        rank %d's parameters differ from rank 0's" % r)
if ref:
    q = torch.load("%s/%s-0.pt" % (out, ref))
    worst = max(float((a - b).abs().max()) for a, b in zip(p0, q))
    print("        largest difference from %s: %.3g" % (ref, worst))
    tol = float(os.environ.get("COMPARE_TOL", "1e-4"))
    if tol == 0:
        sys.exit(0 if all(torch.equal(a, b) for a, b in zip(p0, q)) else 1)
    sys.exit(0 if worst <= tol else 1)
