# SPDX-License-Identifier: BSD-3-Clause
"""pbox: the worker library (libpbox) from Python.

A Context is one rank of one job, as in C (worker/include/pbox.h): made from
a worker configuration file, started, then asked to sum buffers across all
ranks. Tensors need not be declared: a key first used after the start is
agreed with every rank before its data moves. `import pbox.torch` registers
the torch.distributed backend "pbox" (see pbox/torch.py).

Nothing here needs a compiler: libpbox.so.3 is loaded with ctypes from
$PBOX_LIB, from the wheel (pbox/lib, make wheel), from the build tree
(build/lib, next to build/python), or from the system's library path (make
install).
"""
import ctypes
import os

__all__ = ["Context", "Error", "FP32", "FP16", "BF16", "COMP_CPU", "COMP_GPU", "COMP_PUSH_ONLY",
           "COMP_SUM_ONLY", "Stats", "library", "__version__"]

# libpbox's version this package was made with (pbox_version(); the wheel's
# version): a library of another minor version is said at import
__version__ = "3.16"

FP32, FP16, BF16 = 0, 1, 2
# Context.decide_compression(): where a tensor compresses (pbox.h PBOX_COMP_*)
COMP_CPU, COMP_GPU = 1, 2
# or'd with COMP_CPU where one direction alone is compressed (libpbox 3.15)
COMP_PUSH_ONLY, COMP_SUM_ONLY = 4, 8
# enum pbox_status (pbox.h)
OK, EAGAIN, EINVAL, ECONFIG, ENOMEM, ESTATE, EMISMATCH = 0, -1, -2, -3, -4, -5, -6
EBOX, ETIMEDOUT, EPEER, ENET, EFAILED, ENODEV, REDO = -7, -8, -9, -10, -11, -12, 1
_EFAILED = -11


class Error(RuntimeError):
    """A libpbox failure: the status code and libpbox's message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _load():
    here = os.path.dirname(os.path.abspath(__file__))
    names = [os.environ.get("PBOX_LIB"),
             os.path.join(here, "lib", "libpbox.so.3"),
             os.path.join(here, "..", "..", "lib", "libpbox.so.3"),
             "libpbox.so.3"]
    last = None
    for n in names:
        if not n:
            continue
        try:
            return ctypes.CDLL(n)
        except OSError as e:  # try the next place
            last = e
    raise ImportError("pbox: cannot load libpbox.so.3 (build it with make, install it "
                      "with make install, or set PBOX_LIB): %s" % last)


library = _load()
_P = ctypes.c_void_p
library.pbox_init.argtypes = [ctypes.c_char_p, ctypes.POINTER(_P)]
library.pbox_start.argtypes = [_P]
library.pbox_declare.argtypes = [_P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int, ctypes.c_int]
library.pbox_push_pull.argtypes = [_P, ctypes.c_uint64, _P, _P, ctypes.c_uint64, ctypes.c_int,
                                   ctypes.POINTER(_P)]
library.pbox_wait.argtypes = [_P]
try:  # libpbox 3.1
    library.pbox_push_pull_cuda.argtypes = [_P, ctypes.c_uint64, _P, _P, ctypes.c_uint64,
                                            ctypes.c_int, _P, ctypes.POINTER(_P)]
except AttributeError:
    pass
try:  # libpbox 3.2
    library.pbox_shrink.argtypes = [_P]
    library.pbox_rejoin.argtypes = [_P]
except AttributeError:
    pass
try:  # libpbox 3.5
    library.pbox_init_text.argtypes = [ctypes.c_char_p, ctypes.POINTER(_P)]
except AttributeError:
    pass
try:  # libpbox 3.6
    library.pbox_set_compression.argtypes = [_P, ctypes.c_uint64, ctypes.c_char_p]
except AttributeError:
    pass
try:  # libpbox 3.7
    library.pbox_decide_compression.argtypes = [_P, ctypes.c_uint32, _P, _P, _P, _P]
except AttributeError:
    pass
try:  # libpbox 3.8
    library.pbox_reduce_scatter.argtypes = [_P, ctypes.c_uint64, _P, _P, _P, ctypes.c_int,
                                            ctypes.POINTER(_P)]
    library.pbox_all_gather.argtypes = [_P, ctypes.c_uint64, _P, _P, _P, ctypes.c_int,
                                        ctypes.POINTER(_P)]
    library.pbox_broadcast.argtypes = [_P, ctypes.c_uint64, _P, ctypes.c_uint64, ctypes.c_int,
                                       ctypes.c_uint32, ctypes.POINTER(_P)]
except AttributeError:
    pass
try:  # libpbox 3.9
    library.pbox_push_pull_async.argtypes = [_P, ctypes.c_uint64, _P, _P, ctypes.c_uint64,
                                             ctypes.c_int, ctypes.POINTER(_P)]
except AttributeError:
    pass
try:  # libpbox 3.10
    library.pbox_forget.argtypes = [_P, ctypes.c_uint32, _P]
except AttributeError:
    pass
try:  # libpbox 3.16
    library.pbox_shrink_step.argtypes = [_P, ctypes.POINTER(ctypes.c_uint64)]
except AttributeError:
    pass
library.pbox_layout.argtypes = [_P, _P]
library.pbox_machine.argtypes = [_P, _P]
library.pbox_stats.argtypes = [_P, _P, _P, ctypes.c_uint32]
library.pbox_test.argtypes = [_P]
library.pbox_finalize.argtypes = [_P]
library.pbox_last_error.restype = ctypes.c_char_p
library.pbox_version.restype = ctypes.c_char_p
if library.pbox_version().decode() != __version__:
    import warnings
    warnings.warn("pbox: this package is %s, the libpbox.so.3 it loaded (%s) is %s"
                  % (__version__, library._name, library.pbox_version().decode()))


class LayoutInfo(ctypes.Structure):
    """struct pbox_layout_info"""
    _fields_ = [("world_size", ctypes.c_uint32), ("rank", ctypes.c_uint32),
                ("k", ctypes.c_double), ("box_endpoints", ctypes.c_uint32),
                ("fragment_size", ctypes.c_uint32), ("chunk_size", ctypes.c_uint32),
                ("total_bytes", ctypes.c_uint64), ("box_bytes", ctypes.c_uint64),
                ("ssgpu_bytes_mine", ctypes.c_uint64), ("box_share", ctypes.c_double),
                ("ssgpu_share", ctypes.c_double), ("layout", ctypes.c_char * 16),
                ("pace_mbps", ctypes.c_double), ("transport", ctypes.c_char * 96)]


class MachineInfo(ctypes.Structure):
    """struct pbox_machine_info: this rank's machine (local aggregation)"""
    _fields_ = [("machines", ctypes.c_uint32), ("machine", ctypes.c_uint32),
                ("local_rank", ctypes.c_uint32), ("local_size", ctypes.c_uint32),
                ("leader", ctypes.c_uint32)]


_STATS_A = ("ops", "tx_bytes", "rx_bytes", "tx_pkts", "rx_pkts", "retransmits", "acks",
            "tx_gso", "rx_gro", "tx_dropped", "ssgpu_summed", "ssgpu_results", "bad_mac")
_STATS_B = ("probes", "nacks", "nacks_sent", "ssgpu_needless", "fast_probes", "tail_probes",
            "pulls", "rto_ns", "srtt_ns", "probe_rtt_ns", "max_inflight")


class Stats(ctypes.Structure):
    """struct pbox_stats (pbox.h says what each counts)"""
    _fields_ = ([(n, ctypes.c_uint64) for n in _STATS_A] + [("n_ss", ctypes.c_uint32)] +
                [(n, ctypes.c_uint64) for n in _STATS_B])


def _check(rc):
    if rc != 0:
        raise Error(rc, library.pbox_last_error().decode(errors="replace"))


class Handle:
    """One push-pull in flight; wait() blocks (without the GIL) until its sum is in."""

    def __init__(self, h):
        self._h = h

    def wait(self):
        h, self._h = self._h, None
        if h is not None:
            _check(library.pbox_wait(h))


class Context:
    """One rank of one job. config: the worker INI file (None: $PBOX_CONFIG);
    PBOX_SECTION_KEY variables override any key, as in C."""

    def __init__(self, config=None, text=None):
        """text: the configuration itself (an INI file's contents), kept in
        memory (pbox_init_text()); config is then not read, nor PBOX_CONFIG."""
        self._px = _P()
        if text is not None:
            _check(library.pbox_init_text(text.encode(), ctypes.byref(self._px)))
        else:
            _check(library.pbox_init(config.encode() if config else None,
                                     ctypes.byref(self._px)))

    def start(self):
        _check(library.pbox_start(self._px))

    def declare(self, key, count, dtype, priority=0):
        _check(library.pbox_declare(self._px, key, count, dtype, priority))

    def set_compression(self, key, scheme):
        """How fp32 tensor key travels from its next push-pull: "none", "sign",
        "topk", "randk", "bf16" or "fp16" (libpbox 3.6; the job's [job]
        compression must not be none, and every rank must choose alike);
        "SCHEME:gather" summed by all-gather (3.11); for a CUDA tensor,
        "SCHEME@gpu" compresses it on the GPU before the copy to the host
        and "SCHEME" or "SCHEME@cpu" on the CPU after it (3.14)."""
        _check(library.pbox_set_compression(self._px, key, scheme.encode()))

    def decide_compression(self, keys, counts, compute_ns):
        """ByteComp's choice (libpbox 3.7, pbox_decide_compression()): every
        rank calls it with the same fp32 tensors (keys, element counts) in
        the order the backward pass makes them ready, and the backward
        computation before each (ns, as this rank measured it); rank 0's
        choice is set on every rank. Returns a list, one per tensor: 0 sent
        as it is, COMP_CPU compressed with the job's scheme on the CPU,
        COMP_GPU on the GPU (CUDA tensors alone, libpbox 3.14), either maybe
        with COMP_PUSH_ONLY ("SCHEME>none") or COMP_SUM_ONLY ("none>SCHEME"),
        one direction alone (libpbox 3.15)."""
        n = len(keys)
        arr = ctypes.c_uint64 * n
        chosen = (ctypes.c_uint8 * n)()
        _check(library.pbox_decide_compression(self._px, n, arr(*keys), arr(*counts),
                                               arr(*compute_ns), chosen))
        return [int(c) for c in chosen]

    def push_pull(self, key, in_ptr, out_ptr, count, dtype):
        """Start summing count elements of dtype at address in_ptr into out_ptr."""
        h = _P()
        _check(library.pbox_push_pull(self._px, key, in_ptr, out_ptr, count, dtype,
                                      ctypes.byref(h)))
        return Handle(h)

    def push_pull_cuda(self, key, in_ptr, out_ptr, count, dtype, stream=None):
        """The same for GPU memory: in_ptr and out_ptr on one CUDA device; the
        push-pull starts after the work queued so far on stream (a
        cudaStream_t as an int; None: the legacy default stream)."""
        h = _P()
        _check(library.pbox_push_pull_cuda(self._px, key, in_ptr, out_ptr, count, dtype,
                                           stream, ctypes.byref(h)))
        return Handle(h)

    def push_pull_async(self, key, in_ptr, out_ptr, count, dtype):
        """Asynchronous training (libpbox 3.9): add count elements at in_ptr
        to the store named key (the first call: the initial parameters,
        rank 0's kept), the store's parameters right after it into out_ptr."""
        h = _P()
        _check(library.pbox_push_pull_async(self._px, key, in_ptr, out_ptr, count, dtype,
                                            ctypes.byref(h)))
        return Handle(h)

    def _sharded(self, fn, key, in_ptr, out_ptr, counts, dtype):
        h = _P()
        arr = (ctypes.c_uint64 * len(counts))(*counts)
        _check(fn(self._px, key, in_ptr, out_ptr, arr, dtype, ctypes.byref(h)))
        return Handle(h)

    def reduce_scatter(self, key, in_ptr, out_ptr, counts, dtype):
        """Start a reduce-scatter (libpbox 3.8): the whole tensor at in_ptr
        summed over the ranks, this rank's shard (counts[rank] elements;
        counts: one per rank) into out_ptr."""
        return self._sharded(library.pbox_reduce_scatter, key, in_ptr, out_ptr, counts, dtype)

    def all_gather(self, key, in_ptr, out_ptr, counts, dtype):
        """Start an all-gather (libpbox 3.8): this rank's shard at in_ptr,
        every rank's into out_ptr (the whole tensor, shard r at the sum of
        counts[:r])."""
        return self._sharded(library.pbox_all_gather, key, in_ptr, out_ptr, counts, dtype)

    def broadcast(self, key, ptr, count, dtype, root):
        """Start a broadcast (libpbox 3.8): root's count elements at ptr into
        every other rank's ptr."""
        h = _P()
        _check(library.pbox_broadcast(self._px, key, ptr, count, dtype, root, ctypes.byref(h)))
        return Handle(h)

    def layout(self):
        """The layout this rank computed: rank, world_size, k, ... (LayoutInfo)."""
        li = LayoutInfo()
        _check(library.pbox_layout(self._px, ctypes.byref(li)))
        return li

    def machine(self):
        """Which ranks share this rank's machine (pbox_machine(), MachineInfo):
        machines below the world size where local aggregation groups them."""
        mi = MachineInfo()
        _check(library.pbox_machine(self._px, ctypes.byref(mi)))
        return mi

    def stats(self):
        """pbox_stats() as a dict: this rank's counters since the start (or
        the last shrink or rejoin)."""
        st = Stats()
        _check(library.pbox_stats(self._px, ctypes.byref(st), None, 0))
        return {name: getattr(st, name) for name, _ in Stats._fields_ if name != "n_ss"}

    def shrink(self):
        """After a failure that lost ranks or the box: go on with the survivors
        (pbox_shrink()); layout() then gives the new rank and world size.
        True: the push-pulls that failed resume (push each again with the
        same key and buffers, untouched since); False: redo the step from its
        inputs (a rank was lost)."""
        rc = library.pbox_shrink(self._px)
        if rc < 0:
            _check(rc)
        return rc == OK

    def shrink_step(self, step):
        """shrink(), the survivors agreeing on the step to redo
        (pbox_shrink_step(), libpbox 3.16): @step is the one this rank failed
        in (the caller's counter). (True, step): resumed, each rank goes on
        from its own; (False, s): every survivor redoes step s, the earliest
        any of them failed in (a rank that had gone past it goes back)."""
        s = ctypes.c_uint64(step)
        rc = library.pbox_shrink_step(self._px, ctypes.byref(s))
        if rc < 0:
            _check(rc)
        return rc == OK, s.value

    def rejoin(self):
        """Take back the boxes a shrink left out, where they answer again
        (pbox_rejoin()): every rank at the same point, nothing in flight."""
        _check(library.pbox_rejoin(self._px))

    def forget(self, keys):
        """Let go of the keys' state on the boxes and the SS_GPUs (pbox_forget(),
        libpbox 3.10): a collective, every rank with the same keys, nothing in
        flight; the job's other tensors are laid out anew."""
        keys = list(keys)
        arr = (ctypes.c_uint64 * max(len(keys), 1))(*keys)
        _check(library.pbox_forget(self._px, len(keys), ctypes.cast(arr, _P)))

    def finalize(self):
        if self._px:
            px, self._px = self._px, _P()
            _check(library.pbox_finalize(px))
