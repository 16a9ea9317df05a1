#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Write the C API reference (docs/c-api.md) to stdout from the one public
header, worker/include/pbox.h: its opening comment as the introduction, then
every comment block with the declarations under it, in the header's order,
and a table of every function with the version that added it and the
status codes its comment names. `make docs` writes it; `make check-docs`
fails when it is out of date. The header is the source; edit it, not the
page.

    worker/gen-capi.py [worker/include/pbox.h]
"""
import re
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "worker/include/pbox.h"
text = open(path).read()
# the version that added each function: its node in the symbol map (the
# first node, PBOX_3, exports the rest as 3.0's)
mapfile = path.replace("include/pbox.h", "libpbox.map")
added = {}
for node, body in re.findall(r"PBOX_(3(?:\.\d+)?) \{(.*?)\}", open(mapfile).read(), flags=re.S):
    for name in re.findall(r"\b(pbox_[a-z_0-9]+);", body):
        added[name] = node if "." in node else "3.0"


def comment_text(c):
    """A C comment's text, its stars and indentation gone."""
    lines = c.strip()[2:-2].split("\n")
    out = []
    for ln in lines:
        ln = re.sub(r"^\s*\* ?", "", ln) if ln.strip().startswith("*") else ln.strip()
        out.append(ln.rstrip())
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return out


# the header's parts: comments and the code between them
# (a comment that opens a line is a section's text; one after code, or
# indented inside a struct or an enum, is part of that code)
parts = re.split(r"(?m)(^/\*.*?\*/)", text, flags=re.S)
blocks = []  # (comment lines, code)
pending = None
for p in parts:
    if p.startswith("/*"):
        if pending is not None:
            blocks.append((pending, ""))
        pending = comment_text(p)
    else:
        code = p.strip("\n")
        if pending is not None:
            blocks.append((pending, code))
            pending = None
        elif code.strip():
            blocks.append(([], code))

intro = blocks[1][0]  # [0] is the licence line
body = blocks[2:]
funcs = []  # (name, since, codes)
out = ["# The C API (`libpbox`)", "",
       "Generated from [worker/include/pbox.h](../worker/include/pbox.h) by",
       "`worker/gen-capi.py` (`make docs`; `make check-docs` fails when this page",
       "and the header differ): the header is the reference, this page the same",
       "text laid out for reading. Link with `-lpbox` (`pkg-config --libs pbox`",
       "after `make install`); the ABI policy opens the part by part section.", "",
       "## Overview", "", "```"]
out += intro
out += ["```", ""]
sections = []
for lines, code in body:
    code = code.strip("\n")
    keep = [ln for ln in code.split("\n")
            if not re.match(r"^\s*(#ifndef PBOX_H|#define PBOX_H|#include|#ifdef __cplusplus|"
                            r"extern \"C\" \{|\}$|#endif)", ln)]
    code = "\n".join(keep).strip("\n")
    if not code.strip() and not lines:
        continue
    names = re.findall(r"^[a-z][a-z_ *]*?\b(pbox_[a-z_0-9]+)\(", code, flags=re.M)
    structs = re.findall(r"^(?:struct|enum) (pbox_[a-z_]+) \{", code, flags=re.M)
    macros = re.findall(r"^#define (PBOX_[A-Z_]+)", code, flags=re.M)
    title = ", ".join("`%s()`" % n for n in names) or ", ".join(
        "`%s`" % s for s in structs) or (", ".join("`%s`" % m for m in macros[:2]) or "")
    if not title:
        if not code.strip():
            continue
        title = "Declarations"
    prose = "\n".join(lines)
    codes = sorted(set(re.findall(r"PBOX_E[A-Z]+|PBOX_REDO", prose)))
    for n in names:
        string = re.search(r"^const char \*%s\(" % n, code, flags=re.M)
        funcs.append((n, added.get(n, "3.0"), codes, bool(string)))
    sections += ["### " + title, ""]
    if lines:
        sections += lines + [""]
    if code.strip():
        sections += ["```c", code, "```", ""]
out += ["## Every function", "",
        "Every call returns `PBOX_OK` (0) or a negative `PBOX_E*` code, with",
        "`pbox_last_error()` naming the cause; any call on a failed context",
        "returns `PBOX_EFAILED`. The codes below are those each function's text",
        "names beyond that.", "",
        "| function | since | codes its text names |", "| --- | --- | --- |"]
for n, since, codes, string in funcs:
    out.append("| [`%s()`](#%s) | %s | %s |" % (
        n, re.sub(r"[^a-z0-9_ -]", "", [s for s in sections if s.startswith("### ") and
                                          "`%s()`" % n in s][0][4:].lower()).replace(" ", "-"),
        since, "a string, never NULL" if string else ", ".join("`%s`" % c for c in codes)))
out += ["", "## The header, part by part", ""]
out += sections
sys.stdout.write("\n".join(out).rstrip("\n") + "\n")
