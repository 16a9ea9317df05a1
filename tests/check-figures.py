#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""make check-docs: the README's headline figures agree with the page that
records them. Every number in the figure column of README.md's "Measured"
table must be one docs/performance.md gives (the same value at the
README's precision: 1.19 is backed by 1.190 or 1.186, not by 1.17), so a
figure re-measured in one place and not the other is caught; a row
whose figure has no number at all is refused too.

    tests/check-figures.py [README.md] [docs/performance.md]

Prints each figure it cannot find as README.md:LINE: FIGURE; exit 1 if any.
"""
import re
import sys

readme = sys.argv[1] if len(sys.argv) > 1 else "README.md"
perf = sys.argv[2] if len(sys.argv) > 2 else "docs/performance.md"
NUM = re.compile(r"(?<![\w.])(\d+(?:,\d{3})*(?:\.\d+)?)(?![\w])")


def numbers(s):
    """The decimal figures of @s (ratios, times): numbers with a point;
    whole numbers are counts and sizes (n = 4, 500 Mb/s), not figures."""
    return [m for m in NUM.findall(s) if "." in m]


recorded = NUM.findall(open(perf).read())


def backed(fig):
    """Whether docs/performance.md gives @fig at its precision."""
    d = len(fig.split(".")[1])
    x = float(fig.replace(",", ""))
    for r in recorded:
        y = float(r.replace(",", ""))
        if abs(y - x) < 1e-9 or ("." in r and len(r.split(".")[1]) > d and
                                 abs(round(y, d) - x) < 1e-9):
            return True
    return False


bad = 0
in_table = False
for i, line in enumerate(open(readme), 1):
    if line.startswith("## "):
        in_table = line.strip() == "## Measured"
        continue
    if not in_table or not line.startswith("| ") or line.startswith("| ---") or \
            line.startswith("| what "):
        continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 3:
        continue
    figs = numbers(cells[1])
    if not figs:
        print("%s:%d: '%s': a headline figure with no number" % (readme, i, cells[1]))
        bad = 1
    for f in figs:
        if not backed(f):
            print("%s:%d: %s (%s): not what %s records" % (readme, i, f, cells[0][:50], perf))
            bad = 1
sys.exit(bad)
