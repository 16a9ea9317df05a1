"""appliance/ss/comp.h through ctypes (build/tests/libpboxcomp.so: the
compressors' own objects, as libpbox and pboxd link them), for the tests
that hold them to tests/python/comp_ref.py and train with them."""
import ctypes
import os

import torch

SCHEMES = ["none", "sign", "topk", "randk", "bf16", "fp16"]
ISAS = ["scalar", "avx2", "avx512"]


class Spec(ctypes.Structure):
    _fields_ = [("scheme", ctypes.c_uint8), ("rate_ppm", ctypes.c_uint32)]


class Comp:
    def __init__(self, build):
        lib = ctypes.CDLL(os.path.join(build, "tests", "libpboxcomp.so"))
        P, S, U64, U32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint32
        lib.comp_ops_isa.restype = P
        lib.comp_ops_isa.argtypes = [ctypes.c_int]
        lib.comp_ops_best.restype = P
        lib.comp_encode_with.argtypes = [P, ctypes.POINTER(Spec), P, P, S, P, U64, P]
        lib.comp_add_with.argtypes = [P, ctypes.POINTER(Spec), P, P, S, U64, P]
        lib.comp_decode.argtypes = [ctypes.POINTER(Spec), P, P, S, U64, P]
        lib.comp_payload_check.restype = ctypes.c_char_p
        lib.comp_payload_check.argtypes = [ctypes.POINTER(Spec), P, S, S]
        lib.comp__bytes.restype = S
        lib.comp__bytes.argtypes = [ctypes.POINTER(Spec), S]
        lib.comp_scratch_bytes.restype = S
        lib.comp_scratch_bytes.argtypes = [S]
        lib.comp_seed.restype = U64
        lib.comp_seed.argtypes = [U32, U64, U32, U32]
        self.lib = lib
        self.isas = [i for i in range(len(ISAS)) if lib.comp_ops_isa(i)]

    def ops(self, isa=None):
        return self.lib.comp_ops_best() if isa is None else self.lib.comp_ops_isa(isa)

    @staticmethod
    def spec(scheme, rate_ppm=10000):
        return Spec(SCHEMES.index(scheme), rate_ppm)

    def nbytes(self, scheme, n, rate_ppm=10000):
        return self.lib.comp__bytes(ctypes.byref(self.spec(scheme, rate_ppm)), n)

    def _scratch(self, n):
        return ctypes.create_string_buffer(self.lib.comp_scratch_bytes(n) + 8)

    def encode(self, scheme, g, resid, rate_ppm=10000, seed=0, isa=None):
        """Compress g (None: resid alone) with error feedback; resid is
        updated in place. Returns the payload."""
        n = resid.numel()
        out = ctypes.create_string_buffer(max(self.nbytes(scheme, n, rate_ppm), 1))
        self.lib.comp_encode_with(self.ops(isa), ctypes.byref(self.spec(scheme, rate_ppm)),
                                  g.data_ptr() if g is not None else None, resid.data_ptr(), n,
                                  out, seed, self._scratch(n))
        return out.raw[:self.nbytes(scheme, n, rate_ppm)]

    def add(self, scheme, acc, payload, rate_ppm=10000, seed=0, isa=None):
        n = acc.numel()
        buf = ctypes.create_string_buffer(payload, max(len(payload), 1))
        self.lib.comp_add_with(self.ops(isa), ctypes.byref(self.spec(scheme, rate_ppm)),
                               acc.data_ptr(), buf, n, seed, self._scratch(n))

    def decode(self, scheme, payload, n, rate_ppm=10000, seed=0):
        out = torch.empty(n, dtype=torch.float32)
        buf = ctypes.create_string_buffer(payload, max(len(payload), 1))
        self.lib.comp_decode(ctypes.byref(self.spec(scheme, rate_ppm)), out.data_ptr(), buf, n,
                             seed, self._scratch(n))
        return out

    def check(self, scheme, payload, n, rate_ppm=10000):
        """None, or why the payload is refused."""
        buf = ctypes.create_string_buffer(payload, max(len(payload), 1))
        why = self.lib.comp_payload_check(ctypes.byref(self.spec(scheme, rate_ppm)), buf,
                                          len(payload), n)
        return why.decode() if why else None

    def seed(self, job, key, frag, rnd):
        return self.lib.comp_seed(job, key, frag, rnd)
