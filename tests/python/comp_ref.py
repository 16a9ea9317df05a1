"""The compressors of appliance/ss/comp.h, written again in torch from the
header's words alone: the reference the C kernels (every ISA variant) and
the CUDA ones are held to, bit for bit (tests/python/comp_check.py).

encode(scheme, g, resid, rate_ppm, seed) -> (payload bytes, new resid)
add(scheme, acc, payload, n, rate_ppm, seed) -> acc + decoded payload
decode(scheme, payload, n, rate_ppm, seed) -> the decoded fragment
"""
import struct

import torch

SCHEMES = ["none", "sign", "topk", "randk", "bf16", "fp16"]
MASK64 = (1 << 64) - 1


def comp_k(n, rate_ppm):
    k = (n * rate_ppm + 999999) // 1000000
    return min(max(k, 1), n)


def nbytes(scheme, n, rate_ppm):
    if scheme == "sign":
        return 4 + (n + 7) // 8
    if scheme == "topk":
        return 8 * comp_k(n, rate_ppm)
    if scheme == "randk":
        return 4 * comp_k(n, rate_ppm)
    if scheme in ("bf16", "fp16"):
        return 2 * n
    return 4 * n


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def seed(job, key, frag, rnd):
    return mix64(mix64(mix64(job ^ 0x70626F78) ^ key) ^ ((rnd << 32) | frag))


def randk_indices(s, n, k):
    """Floyd's algorithm over SplitMix64's sequence, ascending."""
    seen = set()
    state = s
    for j in range(n - k, n):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        r = mix64(state) >> 32
        t = (r * (j + 1)) >> 32
        seen.add(j if t in seen else t)
    return sorted(seen)


def _bits(x):
    return x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def _signed(scale, neg):
    """scale with its sign bit flipped where neg: -scale, by bits."""
    s = torch.full(neg.shape, scale, dtype=torch.float32)
    return torch.where(neg, -s, s)


def _l1_lanes(p):
    n = p.numel()
    pad = (-n) % 16
    a = torch.cat([p.abs(), torch.zeros(pad, dtype=torch.float32)]).view(-1, 16)
    lanes = torch.zeros(16, dtype=torch.float32)
    for row in a:  # lane j adds its elements in order, in fp32
        lanes = lanes + row
    w = 8
    while w >= 1:
        lanes = torch.cat([lanes[:w] + lanes[w:2 * w], lanes[w:]])
        w //= 2
    return lanes[0]


def encode(scheme, g, resid, rate_ppm=10000, s=0):
    p = (resid + g) if g is not None else resid.clone()
    n = p.numel()
    if scheme == "sign":
        scale = (_l1_lanes(p) / torch.tensor(float(n), dtype=torch.float32)).reshape(1)
        neg = _bits(p) >= 0x80000000
        bits = bytearray((n + 7) // 8)
        for i in torch.nonzero(neg).flatten().tolist():
            bits[i // 8] |= 1 << (i % 8)
        out = struct.pack("<f", scale.item()) + bytes(bits)
        return out, p - _signed(scale.item(), neg)
    if scheme == "topk":
        k = comp_k(n, rate_ppm)
        mag = _bits(p) & 0x7FFFFFFF
        # largest magnitude first, ties to the lower index (a stable sort)
        order = torch.sort(-mag, stable=True).indices[:k]
        idx = torch.sort(order).values
        vals = p[idx]
        r = p.clone()
        r[idx] = 0.0
        out = struct.pack("<%dI" % k, *idx.tolist()) + struct.pack("<%df" % k, *vals.tolist())
        return out, r
    if scheme == "randk":
        k = comp_k(n, rate_ppm)
        idx = torch.tensor(randk_indices(s, n, k), dtype=torch.int64)
        vals = p[idx]
        r = p.clone()
        r[idx] = 0.0
        return struct.pack("<%df" % k, *vals.tolist()), r
    if scheme in ("bf16", "fp16"):
        t = torch.bfloat16 if scheme == "bf16" else torch.float16
        h = p.to(t)
        return _half_bytes(h), p - h.float()
    return struct.pack("<%df" % n, *p.tolist()), torch.zeros(n)


def _half_bytes(h):
    return struct.pack("<%dH" % h.numel(), *(h.view(torch.int16).to(torch.int64) & 0xFFFF).tolist())


def add(scheme, acc, payload, n, rate_ppm=10000, s=0):
    acc = acc.clone()
    if scheme == "sign":
        scale = struct.unpack_from("<f", payload)[0]
        bits = payload[4:]
        neg = torch.tensor([(bits[i // 8] >> (i % 8)) & 1 == 1 for i in range(n)])
        return acc + _signed(scale, neg)
    if scheme == "topk":
        k = comp_k(n, rate_ppm)
        idx = list(struct.unpack_from("<%dI" % k, payload))
        vals = torch.tensor(struct.unpack_from("<%df" % k, payload, 4 * k), dtype=torch.float32)
        acc[idx] = acc[idx] + vals
        return acc
    if scheme == "randk":
        k = comp_k(n, rate_ppm)
        idx = randk_indices(s, n, k)
        vals = torch.tensor(struct.unpack_from("<%df" % k, payload), dtype=torch.float32)
        acc[idx] = acc[idx] + vals
        return acc
    return acc + decode(scheme, payload, n, rate_ppm, s)


def decode(scheme, payload, n, rate_ppm=10000, s=0):
    if scheme in ("bf16", "fp16"):
        t = torch.bfloat16 if scheme == "bf16" else torch.float16
        raw = torch.tensor(struct.unpack("<%dh" % n, payload), dtype=torch.int16)
        return raw.view(t).float()
    if scheme == "none":
        return torch.tensor(struct.unpack("<%df" % n, payload), dtype=torch.float32)
    return add(scheme, torch.zeros(n, dtype=torch.float32), payload, n, rate_ppm, s)
