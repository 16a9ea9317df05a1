"""Every compressor of appliance/ss/comp.h, on every ISA variant this CPU
has, against tests/python/comp_ref.py bit for bit: payloads, residuals
over several steps of error feedback, a summation service's decompress-sum
and its recompression with its own residual, decoding, RANDK's seeds and
draws; and malformed payloads refused. Prints one line per check group,
exits non-zero on the first difference.

usage: comp_check.py BUILD
"""
import struct
import sys

import torch

import comp_ref as ref
from comp_lib import ISAS, SCHEMES, Comp

SIZES = [1, 7, 8, 15, 16, 17, 33, 100, 1000, 2047, 2048, 4096]
RATES = [10000, 1, 333333, 1000000]


def same(a, b):
    """Equal to the bit (-0.0 included), every NaN equal to every NaN: the
    NaN that inf - inf makes is 0xffc00000 on x86, 0x7fffffff in CUDA and
    in torch 2.11's AVX-512 kernels (comp.h)."""
    if a.shape != b.shape:
        return False
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(
        a.view(torch.int32)[~nan], b.view(torch.int32)[~nan])


def first_diff(a, b):
    """Where two float tensors differ first, and their bits there."""
    differ = (a.view(torch.int32) != b.view(torch.int32)) & ~(torch.isnan(a) & torch.isnan(b))
    i = differ.nonzero().flatten()[0].item()
    return " (first at %d: %r 0x%08x against the reference's %r 0x%08x)" % (
        i, a[i].item(), a[i].view(torch.int32).item() & 0xFFFFFFFF,
        b[i].item(), b[i].view(torch.int32).item() & 0xFFFFFFFF)


def fail(what):
    print("comp_check: FAIL " + what)
    sys.exit(1)


def inputs(gen, n, kind):
    g = torch.randn(n, generator=gen, dtype=torch.float32) * 0.01
    if kind == 1:  # ties, zeros and negative zeros: TOPK's tie rule, SIGN's sign bit
        g = torch.round(g * 300) / 300
        g[::5] = 0.0
        g[1::7] = -0.0
    if kind == 2:  # wide range: casts that overflow, round, go subnormal
        g = g * torch.pow(10.0, torch.randint(-12, 8, (n,), generator=gen).float())
    return g


def main():
    comp = Comp(sys.argv[1])
    gen = torch.Generator().manual_seed(20261126)
    print("comp_check: ISAs here: " + ", ".join(ISAS[i] for i in comp.isas))

    # seeds and RANDK's draw
    for job, key, frag, rnd in [(0, 0, 0, 0), (7, 1 << 40, 3, 9), (0xFFFFFFFF, 2**64 - 1, 65535, 2**32 - 1)]:
        if comp.seed(job, key, frag, rnd) != ref.seed(job, key, frag, rnd):
            fail("comp_seed(%d, %d, %d, %d)" % (job, key, frag, rnd))
    print("comp_check: comp_seed the same as the reference's")

    steps = 0
    for scheme in SCHEMES:
        for n in SIZES:
            for rate in RATES if scheme in ("topk", "randk") else [10000]:
                for kind in range(3):
                    seeds = [ref.seed(5, n, kind, r) for r in range(3)]
                    want_resid = torch.zeros(n)
                    got = {i: torch.zeros(n) for i in comp.isas}
                    for step in range(3):
                        g = inputs(gen, n, kind)
                        want, want_resid = ref.encode(scheme, g, want_resid, rate, seeds[step])
                        if len(want) != comp.nbytes(scheme, n, rate):
                            fail("%s n=%d: comp_bytes %d, reference %d" % (
                                scheme, n, comp.nbytes(scheme, n, rate), len(want)))
                        for isa in comp.isas:
                            p = comp.encode(scheme, g, got[isa], rate, seeds[step], isa)
                            if p != want:
                                fail("%s %s n=%d rate=%d kind=%d step %d: payload differs" % (
                                    scheme, ISAS[isa], n, rate, kind, step))
                            if not same(got[isa], want_resid):
                                fail("%s %s n=%d rate=%d kind=%d step %d: residual differs%s" % (
                                    scheme, ISAS[isa], n, rate, kind, step,
                                    first_diff(got[isa], want_resid)))
                            if comp.check(scheme, p, n, rate):
                                fail("%s n=%d: a genuine payload refused: %s" % (
                                    scheme, n, comp.check(scheme, p, n, rate)))
                        # decoding, and an SS's sum of it into an accumulator
                        dec = comp.decode(scheme, want, n, rate, seeds[step])
                        if not same(dec, ref.decode(scheme, want, n, rate, seeds[step])):
                            fail("%s n=%d step %d: decode differs" % (scheme, n, step))
                        acc0 = inputs(gen, n, 0)
                        want_acc = ref.add(scheme, acc0, want, n, rate, seeds[step])
                        for isa in comp.isas:
                            acc = acc0.clone()
                            comp.add(scheme, acc, want, rate, seeds[step], isa)
                            if not same(acc, want_acc):
                                fail("%s %s n=%d step %d: comp_add differs" % (
                                    scheme, ISAS[isa], n, step))
                        steps += 1
        print("comp_check: %-5s payloads, residuals (3 steps of error feedback), decode and add "
              "bit-exact with the reference on %d ISA(s)" % (scheme, len(comp.isas)))

    # a summation service: 4 ranks' pushes decompressed into one accumulator,
    # the sum compressed once with the service's own residual (g = the sum)
    for scheme in SCHEMES:
        n, rate = 2048, 10000
        ranks = [torch.zeros(n) for _ in range(4)]
        box_want, box_got = torch.zeros(n), torch.zeros(n)
        for step in range(4):
            s = ref.seed(1, 2, 3, step)
            acc_want, acc_got = torch.zeros(n), torch.zeros(n)
            for r in range(4):
                g = inputs(gen, n, step % 3)
                payload = comp.encode(scheme, g, ranks[r], rate, s)
                acc_want = ref.add(scheme, acc_want, payload, n, rate, s)
                comp.add(scheme, acc_got, payload, rate, s)
            if not same(acc_got, acc_want):
                fail("%s: the SS's sum of 4 pushes differs" % scheme)
            res_want, box_want = ref.encode(scheme, acc_want, box_want, rate, s)
            if comp.encode(scheme, acc_got, box_got, rate, s) != res_want or not same(box_got, box_want):
                fail("%s: the SS's compressed result or its residual differs" % scheme)
    print("comp_check: an SS's decompress-sum of 4 ranks and its recompression with error feedback "
          "bit-exact, every scheme")

    # what a summation service refuses before touching anything
    n = 2048
    for scheme in SCHEMES:
        good = comp.encode(scheme, inputs(gen, n, 0), torch.zeros(n), 10000, 1)
        if not comp.check(scheme, good[:-1], n) or not comp.check(scheme, good + b"\0", n):
            fail("%s: a payload of the wrong length was taken" % scheme)
    k = ref.comp_k(n, 10000)
    idx = list(range(0, 2 * k, 2))
    vals = struct.pack("<%df" % k, *([1.0] * k))
    bad = {
        "an index past the fragment": idx[:-1] + [n],
        "indices not ascending": [idx[1], idx[0]] + idx[2:],
        "an index twice": [idx[0], idx[0]] + idx[2:],
    }
    for what, ix in bad.items():
        why = comp.check("topk", struct.pack("<%dI" % k, *ix) + vals, n)
        if not why:
            fail("topk: %s was taken" % what)
    print("comp_check: refused: every scheme's wrong lengths; TOPK's index past the fragment, "
          "out of order, repeated (%s)" % why)
    print("comp_check: %d fragment steps, all bit-exact" % steps)


if __name__ == "__main__":
    main()
