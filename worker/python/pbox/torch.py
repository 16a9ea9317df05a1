# SPDX-License-Identifier: BSD-3-Clause
"""torch.distributed backend "pbox", and a DDP communication hook.

    import pbox.torch                      # registers the backend
    torch.distributed.init_process_group("pbox")

under torchrun, with only torchrun's environment, plus PBOX_BOX=host:port
(the box's control address, or several, comma-separated; libpbox reads it
as [box] control, for C programs too; unset: no box, the workers sum among
themselves) and, optionally, PBOX_CONFIG (a worker INI file whose keys the
rendezvous does not set) and PBOX_SECTION_KEY overrides (PBOX_DATA_BANDWIDTH
=25G, PBOX_DATA_ADDRESS=...).

The rendezvous goes through torch's own store: each rank publishes its data
address (the local address of the route to MASTER_ADDR unless
PBOX_DATA_ADDRESS says otherwise, and a free port), rank 0 draws the job id
and the job's secret token, and every rank hands libpbox the whole list.

allreduce of fp32, fp16 and bf16 tensors with SUM or AVG is summed by pbox
(any shape, any number of tensors per call: they are packed into one
buffer), and so are the sharded collectives (libpbox 3.8): reduce_scatter
and reduce_scatter_tensor (_reduce_scatter_base) of those dtypes with SUM
or AVG, all_gather and all_gather_into_tensor (_allgather_base) and
broadcast of any dtype whose pieces are whole 4-byte words (moved as fp32
bit patterns, never added), CUDA tensors staged through host memory.
Everything else (barrier, other dtypes and ops, ...) goes to an internal
Gloo group on the same store, said once per process on stderr.

allreduce_hook (with hook_state()) sums DDP's buckets through pbox on a
Gloo default group; ScheduledOptimizer stands in for DDP and overlaps both
passes (ByteScheduler's plugin: each parameter summed as soon as its
gradient is ready, by priority, and updated just before its module's next
forward).
"""
import atexit
import collections
import contextlib
import os
import queue
import random
import socket
import sys
import threading
import time
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup, Work, _create_work_from_future

import pbox

__all__ = ["PboxError", "ProcessGroupPbox", "ScheduledOptimizer", "allreduce_hook", "hook_state",
           "rejoin", "shrink", "stats"]

_DTYPES = {torch.float32: pbox.FP32, torch.float16: pbox.FP16, torch.bfloat16: pbox.BF16}
_DEVICES = ("cpu", "cuda")  # where pbox sums


class PboxError(getattr(dist, "DistBackendError", RuntimeError)):
    """A collective failed in libpbox: torch's DistBackendError where torch
    has one (2.x), a RuntimeError otherwise; .status is libpbox's PBOX_E*
    code (pbox.EPEER: a rank left, pbox.EBOX: the box, ...), the same on
    every rank for one failure."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
_CALLBACK_THREADS = 4  # futures' callbacks that may block at once (nested collectives)


class _Shown:
    """Whether a collective's future has been handed to Python code outside
    this module (get_future() called from Python, or torch 1.13's own Work
    for torch's Python modules). Until it has, the only callbacks on it are
    this module's and those of torch's C++ (DDP's reducer, its built-in
    hooks), none of which waits for anything, and the completion thread
    completes it itself: the caller waiting for it is woken straight from
    there. Once it has, a callback thread completes it, for a Python
    callback may wait for a later collective (torch's PowerSGD hook does),
    which the completion thread must then finish. @lock (the group's)
    orders the two: get_future() waits for a completion under way."""

    __slots__ = ("lock", "out")

    def __init__(self, lock, out):
        self.lock = lock
        self.out = out


class _Callbacks:
    """The threads that complete the futures which left this module, in
    the order they are handed in: one whose callback blocks (waiting for a
    later collective) leaves the next to another, up to _CALLBACK_THREADS
    at once. (A thread pool of the standard library's costs a future and a
    lock of its own per call, and the caller waits behind them.)"""

    def __init__(self, n):
        self._q = queue.SimpleQueue()
        self._thr = [threading.Thread(target=self._serve, name="pbox-callback-%d" % i,
                                      daemon=True) for i in range(n)]
        for t in self._thr:
            t.start()

    def submit(self, done, err):
        self._q.put((done, err))

    def _serve(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            _run(*item)

    def shutdown(self):
        """Once every completion handed in has run."""
        for _ in self._thr:
            self._q.put(None)
        for t in self._thr:
            t.join()


class _Work(Work):
    """A collective in flight: wait() and get_future() are its future's, and
    wait() raises the collective's failure. (torch's _create_work_from_future
    does not: in torch 1.13 its wait() returns True on a failed future, so a
    rank that lost a peer would go on with a half-summed tensor.) @shown:
    the _Shown of a collective in flight."""

    def __init__(self, fut, shown=None, call=None):
        super().__init__()
        self._fut = fut
        self._shown = shown
        self._call = call

    def wait(self, timeout=None):
        """Until the collective completes (raising its failure), or at most
        @timeout (a timedelta or seconds; None or 0: libpbox's deadline
        alone), raising PboxError(pbox.ETIMEDOUT) then: the collective goes
        on, and a later wait() can still have it. Without a timeout, a
        collective the completion thread has not yet taken up is waited for
        and completed here (_Call): the sum wakes this thread straight from
        libpbox's, not through the completion thread's."""
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        call, self._call = self._call, None
        if call is not None:
            if not secs and call.claim():
                call.group._completed(call)
            else:
                call.group._hand_over()
        _wait_for(self._fut, secs)
        self._fut.wait()  # raises the collective's error
        return True

    def is_completed(self):
        self._hand_over()
        return self._fut.done()

    def _hand_over(self):
        """Its call (and any started before it) to the completion thread,
        for someone who will not wait() for it."""
        if self._call is not None:
            self._call.group._hand_over()

    def get_future(self):
        self._hand_over()
        s = self._shown
        if s is not None and not s.out and _outside() is not None:  # to Python code
            with s.lock:  # after its completion, if the completion thread's is under way
                s.out = True
        return self._fut


_C10D_PY = os.path.join("torch", "distributed", "distributed_c10d.py")
_TORCH_DIR = os.path.dirname(torch.__file__)


_TORCH_MAJOR = int(torch.__version__.split(".")[0])


def _outside():
    """The first Python frame outside this module below the caller, or None
    where the call came from C++ (DDP's reducer)."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    return f


# who a call's Work goes to (_caller()): C++, torch 1.13's own Python
# outside distributed_c10d.py, or anyone else's Python
_CPP, _TORCH, _PY = range(3)


def _caller():
    """Who this call's Work goes to, by the first Python frame outside this
    module. torch 2.x's Work trampoline hands C++ callers (DDP's reducer) a
    Python Work's get_future(); torch 1.13's does not, so there, and there
    only, callers in C++ (_CPP) get torch's own future-wrapping Work (DDP
    reads the future's value, which raises the failure), and so do torch's
    own modules outside distributed_c10d.py (_TORCH); torch.distributed's
    functions and user code (_PY) get a _Work. torch 2.x: always _PY (its
    Work trampoline hands C++ callers a _Work's get_future())."""
    if _TORCH_MAJOR >= 2:
        return _PY
    f = _outside()
    if f is None:
        return _CPP
    caller = f.f_code.co_filename
    if caller.endswith(_C10D_PY) or not caller.startswith(_TORCH_DIR):
        return _PY
    return _TORCH


def _work(fut, shown=None, to=None, call=None):
    """The Work for a collective going to @to (_caller(), where None): a
    _Work, whose wait() raises the failure, or torch's own for torch 1.13's
    callers other than _PY; @shown: the collective's _Shown, while it is in
    flight; @call: its _Call, which the _Work's wait() may complete."""
    if to is None:
        to = _caller()
    if _TORCH_MAJOR < 2 and to != _PY:
        return _create_work_from_future(fut)
    return _Work(fut, shown, call)


class _Call:
    """A push-pull started, until one thread completes it: the completion
    thread, which takes up the calls in the order they were started, or
    the caller's, waiting for it in _Work.wait() first (claim(): whichever
    asks first, under the group's lock). Completing one (the group's
    _completed()) waits for its handle, starts the calls that
    waited for its key, and completes its future. A call whose _Work went
    to Python is handed to the completion thread only when something may
    need it complete without waiting for it (_hand_over()): the next
    collective, its future or is_completed() asked for, the group idled,
    shrunk or finalized. A caller that waits for each call in turn thus
    completes its own, and the completion thread is never woken for it."""

    __slots__ = ("group", "key", "handle", "done", "shown", "claimed")

    def __init__(self, group, key, handle, done, shown):
        self.group = group
        self.key = key
        self.handle = handle
        self.done = done
        self.shown = shown
        self.claimed = False

    def claim(self):
        """Whether this thread is the one to complete it."""
        with self.group._lock:
            if self.claimed:
                return False
            self.claimed = True
            return True


class _Plain(Work):
    """The Work of a plain allreduce, the call a training loop makes most:
    one contiguous CPU tensor summed in place (SUM), started at once. It is
    its own _Call (claim(), handle, key, shown, done()), and it makes its
    future only when one is asked for (get_future(), a wait() for a call
    another thread completes): a caller that waits for each call in turn,
    as torch.distributed.all_reduce() does, makes none. Each object and
    function of the general path costs the calling thread a microsecond or
    more, and on a host whose ranks share its cores a 1 KiB call is the
    sum of their CPU. The group's _shown_lock orders the completion and
    the future's making."""

    def __init__(self, group, key, handle, value, count, dt):
        super().__init__()
        self.group = group
        self.key = key
        self.handle = handle
        self.shown = _Shown(group._shown_lock, False)
        self.claimed = False
        self._value = value  # [the tensor]: alive until complete, then the result
        self._count = count
        self._dt = dt
        self._fut = None
        self._over = False  # complete: _err says how (set under shown.lock)
        self._err = None

    claim = _Call.claim

    def done(self, err):
        """Complete (the completion thread's, a callback thread's or a
        waiting caller's): @err, a pbox.Error, or None."""
        if err is not None:
            if err.status == pbox.EBOX:  # shrink() resumes it
                self.group._failed.append((self.key, self._value[0], self._count, self._dt,
                                           _no_finish))
            err = PboxError(err.status, str(err))
        with self.shown.lock:
            self._err = err
            self._over = True
            fut = self._fut
        if fut is not None:
            _settle(fut, self._value, err)

    def _future(self):
        with self.shown.lock:
            if self._fut is None:
                self._fut = torch.futures.Future()
                if self._over:
                    _settle(self._fut, self._value, self._err)
            return self._fut

    def wait(self, timeout=None):
        """As _Work.wait(): here a call the completion thread has not taken
        up is completed by the caller, and one already complete raises its
        failure without a future."""
        secs = timeout.total_seconds() if isinstance(timeout, timedelta) else timeout
        if not self._over:
            if not secs and self.claim():
                self.group._completed(self)
            else:
                self.group._hand_over()
        if not self._over:  # another thread's to complete
            fut = self._future()
            _wait_for(fut, secs)
            fut.wait()
            return True
        if self._err is not None:
            raise self._err
        return True

    def is_completed(self):
        self.group._hand_over()
        return self._over

    def get_future(self):
        if not self._over:
            self.group._hand_over()
        with self.shown.lock:  # after its completion, if one is under way
            if not self.shown.out and _outside() is not None:  # to Python code
                self.shown.out = True
        return self._future()


def _no_finish():
    pass


def _settle(fut, value, err):
    """@fut completed with @value, or failed with @err (not None)."""
    if err is None:
        fut.set_result(value)
    else:
        fut.set_exception(err)


def _wait_for(fut, secs):
    """Until @fut is done or @secs (None, 0: no limit) have passed, raising
    PboxError(pbox.ETIMEDOUT) then: the collective goes on, and a later
    wait() can still have it."""
    if secs and not fut.done():
        done = threading.Event()
        fut.then(lambda f: done.set())
        if not done.wait(secs):
            raise PboxError(pbox.ETIMEDOUT, "pbox: the collective did not complete "
                            "within %.3g s (Work.wait's timeout); it goes on" % secs)


def _route_address(host, port):
    """The local IPv4 address of the route to host."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(host), int(port or 9)))
        return s.getsockname()[0]


def _future(value):
    """A future for @value (tensors, or lists of them): one of CUDA tensors
    records its completion for the consumer's stream (torch's CUDA-aware
    futures)."""
    if len(value) == 1 and isinstance(value[0], torch.Tensor) and not value[0].is_cuda:
        return torch.futures.Future()
    ts = [t for v in value for t in (v if isinstance(v, (list, tuple)) else [v])]
    devs = sorted({t.device for t in ts if t.is_cuda}, key=str)
    return torch.futures.Future(devices=devs) if devs else torch.futures.Future()


def _run(done, err):
    try:
        done(err)
    except Exception:  # noqa: BLE001  (a completing thread's: said, and it goes on)
        import traceback
        traceback.print_exc()


def _op_code(op):
    """A reduction as an int, whatever form torch hands it in: a RedOpType, or
    a ReduceOp holding one in .op (which the RedOpType does not compare equal
    to in torch 2.x, and which cannot be compared with AVG in torch 1.13)."""
    return int(getattr(op, "op", op))


_SUM = _op_code(dist.ReduceOp.SUM)
_AVG = _op_code(dist.ReduceOp.AVG) if hasattr(dist.ReduceOp, "AVG") else None
_OP_NAMES = {_op_code(getattr(dist.ReduceOp, n)): n for n in
             ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")
             if hasattr(dist.ReduceOp, n)}


def _ephemeral_range():
    """The kernel's range of ports for sockets that bind none."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def _free_port(addr, taken=()):
    """A port free for both UDP (data) and TCP (rank 0's bootstrap), not in
    @taken (the ports other ranks on this address chose), and outside the
    kernel's ephemeral range: the port is free now, but libpbox binds it
    only later, and meanwhile any connect() on the host (Gloo's, the
    store's) may be handed an ephemeral port, never one outside the range."""
    lo, hi = _ephemeral_range()
    spans = [(p, q) for p, q in ((10000, lo - 1), (hi + 1, 65535)) if q >= p] or [(lo, hi)]
    rnd = random.SystemRandom()
    for _ in range(256):
        a, b = rnd.choice(spans)
        port = rnd.randint(a, b)
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, \
                socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            try:
                u.bind((addr, port))
                t.bind((addr, port))
                return port
            except OSError:
                continue
    raise RuntimeError("pbox: no free port on %s" % addr)


class ProcessGroupPbox(ProcessGroup):
    def __init__(self, store, rank, size, timeout, ctx=None):
        super().__init__(rank, size)
        if ctx is not None:  # shrink(): the survivors, on the same context
            self._ctx = ctx
            self._gloo = None
            self._serve()
            return
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("pbox-gloo", store), rank, size,
                                           timeout)
        master = os.environ.get("MASTER_ADDR", "127.0.0.1")
        addr = os.environ.get("PBOX_DATA_ADDRESS") or _route_address(
            master, os.environ.get("MASTER_PORT"))
        # the lower ranks' ports first: two ranks on one address never
        # choose the same (each is free when chosen, not yet bound)
        taken = {int(e.rsplit(":", 1)[1]) for e in
                 (store.get("pbox/ep/%d" % r).decode() for r in range(rank))
                 if e.rsplit(":", 1)[0] == addr}
        port = _free_port(addr, taken)
        store.set("pbox/ep/%d" % rank, "%s:%d" % (addr, port))
        if rank == 0:
            rnd = random.SystemRandom()
            store.set("pbox/job", "%d %d" % (rnd.randrange(1, 1 << 31), rnd.getrandbits(64)))
        job, token = store.get("pbox/job").decode().split()
        peers = [store.get("pbox/ep/%d" % r).decode() for r in range(size)]
        lines = ["[worker]", "rank = %d" % rank, "world_size = %d" % size,
                 "[data]", "address = %s" % addr, "port = %d" % port,
                 "[job]", "id = %s" % job, "token = %s" % token]
        if _next_compression[0]:  # hook_state(compression=...): this group's job
            scheme, _, how = _next_compression[0].partition(":")
            lines += ["compression = %s" % scheme]
            if how:  # "SCHEME:gather": summed by all-gather, never compressed again
                lines += ["compression_sum = %s" % how]
        lines += [
                 "[tuning]",
                 # alive but late (a checkpoint on rank 0): waited for up to the
                 # group's timeout; a dead rank is named at once all the same
                 "deadline = %ds" % max(1, int(timeout.total_seconds()))]
        # PBOX_BOX (one or several host:port) is libpbox's own to read: [box] control
        lines += ["[peers]"] + ["%d = %s" % (r, p) for r, p in enumerate(peers)]
        base = os.environ.get("PBOX_CONFIG")
        with open(base) if base else contextlib.nullcontext() as f:
            text = (f.read() + "\n" if base else "") + "\n".join(lines) + "\n"
        # in memory: the job's secret token never touches the disk
        self._ctx = pbox.Context(text=text)
        self._ctx.start()
        self._serve()

    def _serve(self):
        # local aggregation (a machine's ranks summed first): pbox_forget()
        # is the network job's, not the machines'
        self._local = self._ctx.machine().machines != self._ctx.layout().world_size
        self.resumed = False
        self._failed = []  # allreduces the box's loss interrupted: shrink() resumes them
        self._busy = {}  # key: the future (or _Plain) of its latest allreduce
        self._keys = {}  # (pbox dtype, count): _key()'s
        # the keys' state freed once their tensors are done with (_retire())
        self._calls = 0  # collectives started through pbox so far
        # key: (the call that last used it, whether one did before), in the
        # order of those calls: the least recently used first
        self._last = {}
        self._forgot = set()
        self._retiring = not self._local and os.environ.get("PBOX_FORGET", "1") != "0"
        self._q = queue.SimpleQueue()
        # Calls reach libpbox in the order they were made, on every rank (its
        # collectives are numbered so): a call whose key has one in flight
        # waits in _pending, and every later call behind it, until the
        # completion thread starts them in order (_drain()).
        self._lock = threading.Lock()
        self._pending = collections.deque()  # (key, start, resume, done, shown), in call order
        self._unhanded = []  # _Calls not yet handed to the completion thread, in call order
        self._live = set()  # keys with a call started and not yet complete
        self._pool = _Callbacks(_CALLBACK_THREADS)
        # every _Shown's (reentrant: a callback completed under it may ask
        # for another collective's future)
        self._shown_lock = threading.RLock()
        self._thr = threading.Thread(target=self._complete, name="pbox-completion", daemon=True)
        self._thr.start()
        atexit.register(self._finalize)

    def getBackendName(self):
        return "pbox"

    # ---- completion ---------------------------------------------------------

    def _complete(self):
        """Waits for the push-pulls in the order they were started, and
        completes each future: here while it has not left this module
        (_Shown), the caller's wait() woken straight from here; otherwise on
        a callback thread, for a future's callbacks run where it is
        completed, and one may itself wait for a later collective (torch's
        PowerSGD hook does), which this thread must then finish."""
        while True:
            item = self._q.get()
            if item is None or isinstance(item, threading.Event):
                self._flush_pending()  # (a failed job's: each fails, shrink() resumes it)
                self._pool.shutdown()
                if item is not None:  # _shrink(): all before it reaped
                    item.set()
                return
            if item.claim():
                self._completed(item)

    def _completed(self, call):
        """@call (a _Call this thread claimed) waited for, the calls behind
        its key started, and its future completed: here while it has not
        left this module (_Shown), on a callback thread otherwise."""
        try:
            call.handle.wait()
            err = None
        except pbox.Error as e:
            err = e
        with self._lock:
            self._live.discard(call.key)
            self._drain()
        with call.shown.lock:
            if not call.shown.out:
                _run(call.done, err)
                return
        self._pool.submit(call.done, err)

    def _drain(self):
        """The calls waiting in _pending started, in order, up to the first
        whose key has a call in flight (under _lock)."""
        while self._pending and self._pending[0][0] not in self._live:
            key, start, resume, done, shown = self._pending.popleft()
            self._begin(key, start, resume, done, shown)

    def _begin(self, key, start, resume, done, shown):
        """start() (under _lock), its handle queued for the completion
        thread; a call that cannot start completes with the error."""
        try:
            handle = self._started(start, resume)
        except pbox.Error as e:
            self._pool.submit(done, e)
            return
        self._live.add(key)
        self._q.put(_Call(self, key, handle, done, shown))

    def _flush_pending(self):
        """Whatever still waits in _pending, once nothing is in flight: each
        started and waited for in turn."""
        while True:
            with self._lock:
                if not self._pending:
                    return
                key, start, resume, done, _ = self._pending.popleft()
            try:
                self._started(start, resume).wait()
                err = None
            except pbox.Error as e:
                err = e
            self._pool.submit(done, err)

    def _started(self, start, resume):
        """start()'s push-pull; one the job's failure kept from starting is
        one shrink() resumes (@resume), and raises."""
        try:
            return start()
        except pbox.Error as e:
            if e.status == pbox.EFAILED and resume is not None:  # the job failed before
                self._failed.append(resume)  # this one started
            raise

    def _hand_over(self):
        """The calls not yet handed to the completion thread handed to it,
        in the order they were started, but those a caller completed."""
        with self._lock:
            self._give()

    def _give(self):
        """_hand_over() under _lock."""
        for call in self._unhanded:
            if not call.claimed:
                self._q.put(call)
        self._unhanded = []

    def _finalize(self):
        if self._ctx is not None:
            self._hand_over()
            self._q.put(None)
            self._thr.join()
            ctx, self._ctx = self._ctx, None
            try:
                ctx.finalize()
            except pbox.Error:
                pass  # the job's failure was raised where it happened

    def _shrink(self, step=None):
        """shrink(): this group's push-pulls reaped, the context shrunk, a new
        group of the survivors on it; this one serves nothing more."""
        if self._ctx is None:
            raise RuntimeError("pbox: this group was shrunk or finalized already")
        flushed = threading.Event()
        self._hand_over()
        self._q.put(flushed)
        flushed.wait()
        self._thr.join()
        ctx, self._ctx = self._ctx, None
        if step is None:
            resumed = ctx.shrink()
        else:
            resumed, step = ctx.shrink_step(step)
        li = ctx.layout()
        if resumed:  # the allreduces that raised go on where they were, one
            # key's calls one after the other, as they were started
            handles, last = [], {}
            for key, flat, count, dt, finish in self._failed:
                if key in last:
                    last[key].wait()
                last[key] = ctx.push_pull(key, flat.data_ptr(), flat.data_ptr(), count, dt)
                handles.append((last[key], finish))
            for handle, finish in handles:
                handle.wait()
                finish()
        self._failed = []
        g = ProcessGroupPbox(None, li.rank, li.world_size, None, ctx=ctx)
        g.resumed = resumed
        g.step = step
        return g

    def _no_gloo(self, what):
        raise RuntimeError("pbox: %s: a group made by shrink() does all_reduce, broadcast, "
                           "allgather and barrier only (its Gloo group had the lost ranks)" % what)

    _said = set()  # (op, why) handed to Gloo and said so, once per process

    def _gloo_for(self, op, why):
        """The internal Gloo group that does @op, which pbox does not sum
        (@why), said once per process on stderr; a shrunk group has none."""
        if self._gloo is None:
            self._no_gloo(op)
        if (op, why) not in ProcessGroupPbox._said:
            ProcessGroupPbox._said.add((op, why))
            print("pbox: %s goes to Gloo: %s" % (op, why), file=sys.stderr, flush=True)
        return self._gloo

    # ---- collectives --------------------------------------------------------

    @staticmethod
    def _key(dt, count):
        """Every call of one (dtype, count) sums under one key on every rank,
        call after call: its state on the box and the SS_GPUs is the one
        tensor's, reused as the same tensor is summed step after step (a key
        per call in flight would hold that state once per call: a DDP
        bucket, called once a step, took a fresh key for every one of four
        steps). Calls of one shape in flight at once go one after the other
        on it (allreduce() defers the later ones)."""
        # below 2^63: the keys above are libpbox's own (the pieces of CUDA tensors)
        return (zlib.crc32(b"%d:%d" % (dt, count)) & 0x7FFFFFFF) << 32 | (count & 0xFFFFFFF) << 3

    @staticmethod
    def _why_not(tensors, op, dev):
        """Why pbox does not sum this allreduce (the one line that says so),
        or None where it does: SUM or AVG of fp32, fp16 or bf16 tensors, all
        of one dtype on one CPU or CUDA device."""
        if len(tensors) == 1 and (op == _SUM or op == _AVG):  # the common case, at once
            t = tensors[0]
            if t.dtype in _DTYPES and t.layout == torch.strided and t.device.type in _DEVICES:
                return None
        if not tensors:
            return "no tensors"
        if any(t.layout != torch.strided for t in tensors):
            return "sparse tensors (Gloo's sparse all-reduce)"
        if op not in (_SUM, _AVG):
            return "op %s (pbox sums SUM and AVG)" % _OP_NAMES.get(op, op)
        if dev.type not in _DEVICES or any(t.device != dev for t in tensors):
            return "tensors on %s (pbox: one CPU or CUDA device per call)" % dev
        odd = sorted({str(t.dtype) for t in tensors if t.dtype not in _DTYPES})
        if odd:
            return "dtype %s (pbox sums float32, float16, bfloat16)" % ", ".join(odd)
        if len({t.dtype for t in tensors}) != 1:
            return "several dtypes in one call"
        return None

    def allreduce(self, tensors, opts=None):
        if len(tensors) == 1 and (opts is None or _op_code(opts.reduceOp) == _SUM):
            t = tensors[0]
            dt = _DTYPES.get(t.dtype)
            if (dt is not None and t.device.type == "cpu" and t.layout == torch.strided
                    and t.is_contiguous() and t.numel() and
                    (_TORCH_MAJOR >= 2 or _caller() == _PY)):
                return self._plain(tensors, t, dt)
        return self._allreduce(tensors, opts)

    def _plain(self, tensors, t, dt):
        """allreduce() of one contiguous CPU tensor, SUM, for a caller that
        takes a _Work: a _Plain, started here unless an earlier call holds
        it back (the general path then)."""
        count = t.numel()
        key = self._keys.get((dt, count))
        if key is None:
            key = self._keys[(dt, count)] = self._key(dt, count)
        self._retire(key)
        with self._lock:
            if self._unhanded:
                self._give()
            if not self._pending and key not in self._live:
                p = t.data_ptr()
                try:
                    handle = self._ctx.push_pull(key, p, p, count, dt)
                except pbox.Error as e:
                    if e.status == pbox.EFAILED:  # the job failed before it started
                        self._failed.append((key, t, count, dt, _no_finish))
                    raise PboxError(e.status, str(e)) from e
                self._live.add(key)
                work = _Plain(self, key, handle, tensors, count, dt)
                self._unhanded.append(work)
                self._busy[key] = work
                return work
        return self._allreduce(tensors, None, retired=True)

    def _allreduce(self, tensors, opts, retired=False):
        """allreduce()'s general path; @retired: _retire() done for it."""
        op = _op_code(opts.reduceOp) if opts is not None else _SUM
        dev = tensors[0].device if tensors else None
        why = self._why_not(tensors, op, dev)
        if why:
            g = self._gloo_for("allreduce", why)
            return g.allreduce(tensors, opts) if opts is not None else g.allreduce(tensors)
        cuda = dev.type == "cuda"
        dt = _DTYPES[tensors[0].dtype]
        if len(tensors) == 1 and tensors[0].is_contiguous():
            flat = tensors[0]
        else:
            flat = torch.cat([t.reshape(-1) for t in tensors])
        count = flat.numel()
        if count == 0:
            return self._done(tensors)
        key = self._key(dt, count)
        size = self.size()

        def finish():
            with torch.cuda.device(dev) if cuda else contextlib.nullcontext():
                if op == _AVG:
                    flat.div_(size)
                if flat is not tensors[0]:
                    off = 0
                    for t in tensors:
                        t.copy_(flat[off:off + t.numel()].view_as(t))
                        off += t.numel()

        # what shrink() resumes after the box's loss (its buffer kept alive here)
        resume = (key, flat, count, dt, finish)
        stream = torch.cuda.current_stream(dev) if cuda else None

        def start(later=None):
            if not cuda:
                return self._ctx.push_pull(key, flat.data_ptr(), flat.data_ptr(), count, dt)
            # after the work queued so far on the caller's stream (torch.cat's
            # too); started later, after what was queued there by this call
            # (@later, an event recorded then), on a stream of its own
            s = stream
            if later is not None:
                s = torch.cuda.Stream(dev)
                s.wait_event(later)
            return self._ctx.push_pull_cuda(key, flat.data_ptr(), flat.data_ptr(), count, dt,
                                            s.cuda_stream)

        def deferred():
            # the same key's previous call still in flight: started by the
            # completion thread once every push-pull queued before it (that
            # one among them) is complete, the same order on every rank;
            # CUDA: after what this call queued on the caller's stream
            later = None
            if cuda:
                later = torch.cuda.Event()
                later.record(stream)
            return lambda: start(later)

        # one tensor summed in place has nothing left to do once complete
        last = finish if op == _AVG or flat is not tensors[0] else None
        return self._launch(key, start, last, tensors, [flat], resume, deferred, retired)

    def _retire(self, key):
        """Free the state of the tensors the job is done with, before @key's
        call. A framework's tensors come back step after step; DDP's first
        broadcast of the parameters never does, nor the buckets it summed
        before it rebuilt them, and their state (as much again as the
        model's, each) would stay on the box and the SS_GPUs. So when a key
        comes back a second time, every key not used since its last call
        has missed a whole period of it: every rank lets go of those at the
        same call (pbox_forget(), a collective: one for all of them, the
        once-only calls before the first step among them), once its calls in
        flight are complete. A forgotten key that comes back is a new tensor
        again, and says the job's calls are not periodic: nothing is
        forgotten after it. PBOX_FORGET=0: never. The keys are kept least
        recently used first, so a call looks only at those it lets go of."""
        seen, again = self._last.pop(key, (None, False))
        if key in self._forgot and self._retiring:
            self._retiring = False
            if self.rank() == 0:
                print("pbox: a forgotten tensor came back (%d elements): this group's "
                      "tensors are kept from now on" % ((key >> 3) & 0xFFFFFFF),
                      file=sys.stderr, flush=True)
        done = []
        if again and self._retiring:
            for k, (c, _) in self._last.items():
                if c >= seen:
                    break
                done.append(k)
        if done and self._let_go(done):
            self._forgot.update(done)
        self._last[key] = (self._calls, seen is not None)
        self._calls += 1

    def _let_go(self, keys):
        """pbox_forget() of @keys (every rank at this call), once every call
        in flight is complete; whether it was (not after a failure)."""
        if not self._idle():
            return False
        try:
            self._ctx.forget(keys)
        except pbox.Error as e:
            raise PboxError(e.status, str(e)) from e
        for k in keys:
            del self._last[k]
            self._busy.pop(k, None)
        return True

    def _broadcast_once(self, tensors, root=0):
        """@tensors (one float dtype, on one device) set to @root's by one
        broadcast whose state pbox lets go of at once (pbox_forget(), every
        rank at this call): a wrapper's parameters, sent once at its start,
        would otherwise hold their size again on the SS_GPUs for the job's
        life. With local aggregation (where pbox_forget() is not) the state
        stays."""
        opts = dist.BroadcastOptions()
        opts.rootRank = root
        self.broadcast(tensors, opts).wait()
        key = self._bc_key(_DTYPES[tensors[0].dtype], sum(t.numel() for t in tensors))
        if not self._local and key in self._last:
            self._let_go([key])

    def _idle(self):
        """Once every call in flight is complete: whether none failed."""
        self._hand_over()
        ok = True
        for fut in list(self._busy.values()):
            try:
                fut.wait()
            except Exception:  # noqa: BLE001  (the job failed: shrink() first)
                ok = False
        return ok

    def allreduce_coalesced(self, tensors, opts=None):
        """Each tensor summed across the ranks, as one call: pbox sums SUM
        and AVG of one float dtype on one device; anything else goes to
        Gloo's own allreduce_coalesced (its plain allreduce would take the
        list as one tensor per device and reduce the entries into each
        other)."""
        op = _op_code(opts.reduceOp) if opts is not None else _SUM
        why = self._why_not(tensors, op, tensors[0].device if tensors else None)
        if why:
            g = self._gloo_for("allreduce_coalesced", why)
            return g.allreduce_coalesced(tensors, opts) if opts is not None else \
                g.allreduce_coalesced(tensors)
        return self.allreduce(tensors, opts)

    # ---- any dtype, byte for byte, through pbox's sums (a group made by shrink()) ----

    def _exact(self, slots, mine):
        """Every rank's bytes in its slot of one buffer summed by pbox: each
        16-bit word a float32 from 0 to 65535 (exact), every other rank's
        slot zeros, so the sum is the owner's word. @slots: the byte length of
        each rank's slot; @mine: this rank's bytes (uint8). The summed words,
        as bytes, per rank."""
        lens = [(n + 1) // 2 for n in slots]
        buf = torch.zeros(sum(lens), dtype=torch.float32)
        off = sum(lens[:self.rank()])
        if mine.numel() % 2:
            mine = torch.cat([mine, torch.zeros(1, dtype=torch.uint8)])
        buf[off:off + mine.numel() // 2] = \
            mine.view(torch.int16).to(torch.int32).bitwise_and(0xFFFF).to(torch.float32)
        self.allreduce([buf]).wait()
        w = buf.to(torch.int32)
        b = (w - (w >= 32768).to(torch.int32) * 65536).to(torch.int16).view(torch.uint8)
        out, off = [], 0
        for n, ln in zip(slots, lens):
            out.append(b[2 * off:2 * off + n])
            off += ln
        return out

    @staticmethod
    def _bytes(t):
        return t.detach().cpu().contiguous().view(-1).view(torch.uint8)

    @staticmethod
    def _done(value):
        """A Work already complete with @value (tensors, or lists of them)."""
        fut = _future(value)
        fut.set_result(value)
        return _work(fut)

    # ---- the sharded collectives and broadcast (libpbox 3.8) ------------------

    _RS, _AG, _BC = 1, 2, 3  # in a key's low bits (_key() leaves them 0)

    @classmethod
    def _bc_key(cls, dt, count):
        """The key a broadcast of @count elements of pbox dtype @dt sums under."""
        return cls._key(dt, count) | cls._BC

    def _launch(self, key, start, finish, value, keep, resume=None, deferred=None,
                retired=False):
        """A collective started by start() (a pbox Handle) under @key, one
        call of a key at a time, and every call reaching libpbox in the order
        it was made, on every rank (a call whose key has one in flight waits,
        and every later call behind it, until the completion thread starts
        them: by deferred()'s start where given); finish() once complete
        (where not None), its future then set to @value. @keep: the
        buffers libpbox reads or writes, alive until then. @resume: what
        shrink() resumes of it after the box's loss (an allreduce's); @retired:
        _retire() done for this call already."""
        if not retired:
            self._retire(key)
        fut = _future(value)
        to = _caller()
        shown = _Shown(self._shown_lock, to == _TORCH and _TORCH_MAJOR < 2)

        def done(err):
            del keep[:]  # libpbox is done with them
            if err is not None:
                if resume is not None and err.status == pbox.EBOX:
                    self._failed.append(resume)
                fut.set_exception(PboxError(err.status, str(err)))
                return
            if finish is not None:
                try:
                    finish()
                except Exception as e:  # noqa: BLE001  (the caller's to see, not this thread's)
                    fut.set_exception(e)
                    return
            fut.set_result(value)

        prev = self._busy.get(key)
        self._busy[key] = fut
        with self._lock:
            if self._unhanded:
                self._give()
            if self._pending or key in self._live:
                self._pending.append((key, deferred() if deferred else start, resume, done,
                                      shown))
                return _work(fut, shown, to)
            try:
                handle = self._started(start, resume)
            except pbox.Error as e:
                if prev is None:
                    del self._busy[key]
                else:
                    self._busy[key] = prev
                raise PboxError(e.status, str(e)) from e
            self._live.add(key)
            call = _Call(self, key, handle, done, shown)
            work = _work(fut, shown, to, call)
            if isinstance(work, _Work):
                self._unhanded.append(call)
            else:  # its future already outside (torch 1.13's own Work)
                self._q.put(call)
        return work

    @staticmethod
    def _wire_dtype(t):
        """The pbox dtype @t travels as: a float dtype as it is; any other
        whose bytes are whole words as fp32 bit patterns (broadcast and
        all-gather copy, never add); None otherwise."""
        if t.dtype in _DTYPES:
            return _DTYPES[t.dtype]
        return pbox.FP32 if (t.numel() * t.element_size()) % 4 == 0 else None

    @staticmethod
    def _as_wire(t):
        """A tensor's (pbox dtype, contiguous CPU tensor of it, as
        _wire_dtype() says), or None."""
        dt = ProcessGroupPbox._wire_dtype(t)
        if dt is None:
            return None
        t = t.detach().cpu().contiguous()
        return dt, t if t.dtype in _DTYPES else t.view(-1).view(torch.uint8).view(torch.float32)

    def _rs(self, flat, out, counts, op):
        """@flat (every rank's whole tensor) summed, this rank's shard into
        @out (CUDA tensors staged through host memory)."""
        dt = _DTYPES[flat.dtype]
        src = flat.detach().cpu().contiguous()
        dst = out if out.device.type == "cpu" and out.is_contiguous() else \
            torch.empty(out.numel(), dtype=out.dtype)
        size = self.size()

        def finish():
            if op == _AVG:
                dst.div_(size)
            if dst is not out:
                out.copy_(dst.view(out.shape))

        key = self._key(dt, src.numel()) | self._RS
        return self._launch(key, lambda: self._ctx.reduce_scatter(
            key, src.data_ptr(), dst.data_ptr(), counts, dt), finish, [out], [src, dst])

    def reduce_scatter(self, outputs, inputs, opts):
        op = _op_code(opts.reduceOp)
        why = "one output per call" if len(outputs) != 1 or len(inputs) != 1 else \
            self._why_not(list(inputs[0]) + [outputs[0]], op, outputs[0].device)
        if not why and len(inputs[0]) != self.size():
            why = "%d inputs for %d ranks" % (len(inputs[0]), self.size())
        if why:
            return self._gloo_for("reduce_scatter", why).reduce_scatter(outputs, inputs, opts)
        flat = torch.cat([t.reshape(-1) for t in inputs[0]])
        return self._rs(flat, outputs[0], [t.numel() for t in inputs[0]], op)

    def _reduce_scatter_base(self, output, input, opts=None):
        """reduce_scatter_tensor() (torch 2.x) and torch 1.13's
        _reduce_scatter_base(): @input, size() shards of @output's size."""
        op = _op_code(opts.reduceOp) if opts is not None else _SUM
        why = self._why_not([input, output], op, output.device)
        if not why and input.numel() != output.numel() * self.size():
            why = "input of %d elements for %d shards of %d" % (input.numel(), self.size(),
                                                                output.numel())
        if why:
            g = self._gloo_for("_reduce_scatter_base", why)
            return g._reduce_scatter_base(output, input, opts) if opts is not None else \
                g._reduce_scatter_base(output, input)
        return self._rs(input.reshape(-1), output, [output.numel()] * self.size(), op)

    def _ag(self, shard, outs):
        """Every rank's @shard (this rank's) into @outs (one tensor per rank,
        or one whole tensor: a list of one), any dtype whose shards are
        whole words (False where they are not)."""
        mine = self._as_wire(shard)
        # the outputs' dtypes only: nothing of them is copied before the sum
        if mine is None or (len(outs) > 1 and any(self._wire_dtype(o) is None for o in outs)):
            return False
        dt, src = mine
        esz = 2 if dt in (pbox.FP16, pbox.BF16) else 4
        if len(outs) == 1:  # the whole tensor: size() shards of shard's size
            counts = [src.numel()] * self.size()
            one = outs[0]
            dst = one if one.device.type == "cpu" and one.is_contiguous() and \
                one.dtype in _DTYPES else None
        else:
            counts = [o.numel() * o.element_size() // esz for o in outs]
            dst = None
        nbytes = sum(counts) * esz
        buf = dst if dst is not None else torch.empty(nbytes, dtype=torch.uint8)

        def finish():
            if dst is not None:
                return
            raw = buf.view(-1).view(torch.uint8)
            off = 0
            for o in outs:
                n = o.numel() * o.element_size()
                o.copy_(raw[off:off + n].view(o.dtype).view(o.shape))
                off += n

        key = self._key(dt, sum(counts)) | self._AG
        return self._launch(key, lambda: self._ctx.all_gather(
            key, src.data_ptr(), buf.data_ptr(), counts, dt), finish, outs, [src, buf])

    def allgather(self, outputs, inputs, opts=None):
        w = None
        if len(outputs) == 1 and len(inputs) == 1 and len(outputs[0]) == self.size() and \
                all(o.dtype == inputs[0].dtype for o in outputs[0]):
            w = self._ag(inputs[0], outputs[0])
        if w:
            return w
        if self._gloo is None:  # bytes that are no whole words: pbox's sums, byte by byte
            for outs, t in zip(outputs, inputs):
                n = t.numel() * t.element_size()
                for o, got in zip(outs, self._exact([n] * self.size(), self._bytes(t))):
                    o.copy_(got.view(t.dtype).view(o.shape))
            return self._done(outputs)
        g = self._gloo_for("allgather", "shards of a size that is no whole number of words")
        return g.allgather(outputs, inputs) if opts is None else g.allgather(outputs, inputs, opts)

    def _allgather_base(self, output, input, opts=None):
        """all_gather_into_tensor() (torch 2.x) and torch 1.13's
        _allgather_base(): size() shards of @input's size into @output."""
        w = None
        if output.numel() == input.numel() * self.size() and output.dtype == input.dtype:
            w = self._ag(input, [output])
        if w:
            return w
        return self._gloo_for("_allgather_base", "shards of no whole words")._allgather_base(
            output, input)

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        wire = [self._as_wire(t) for t in tensors]
        if tensors and all(w is not None for w in wire) and \
                len({w[0] for w in wire}) == 1:
            dt = wire[0][0]
            flat = wire[0][1] if len(wire) == 1 else torch.cat([w[1].reshape(-1) for w in wire])
            flat = flat.contiguous()

            def finish():
                if self.rank() == root:
                    return
                raw, off = flat.view(-1).view(torch.uint8), 0
                for t in tensors:
                    n = t.numel() * t.element_size()
                    if len(tensors) > 1 or t.device.type != "cpu" or not t.is_contiguous() or \
                            t.data_ptr() != flat.data_ptr():
                        t.copy_(raw[off:off + n].view(t.dtype).view(t.shape))
                    off += n

            if flat.numel() == 0:
                return self._done(tensors)
            key = self._bc_key(dt, flat.numel())
            return self._launch(key, lambda: self._ctx.broadcast(
                key, flat.data_ptr(), flat.numel(), dt, root), finish, tensors, [flat])
        if self._gloo is None:  # bytes that are no whole words: pbox's sums, byte by byte
            for t in tensors:
                n = t.numel() * t.element_size()
                got = self._exact([n if r == root else 0 for r in range(self.size())],
                                  self._bytes(t) if self.rank() == root else
                                  torch.zeros(0, dtype=torch.uint8))[root]
                t.copy_(got.view(t.dtype).view(t.shape))
            return self._done(tensors)
        if any(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in tensors):
            # Gloo (torch 1.13) has no bf16: the root's values summed with
            # zeros from every other rank, exact
            if self.rank() != root:
                for t in tensors:
                    t.zero_()
            return self.allreduce(tensors)
        return self._gloo_for("broadcast", "tensors of no whole words, or several dtypes")\
            .broadcast(tensors, opts)

    def barrier(self, opts=None):
        if self._gloo is None:  # every rank's one element summed: every rank was here
            return self.allreduce([torch.zeros(1)])
        return self._gloo.barrier() if opts is None else self._gloo.barrier(opts)

    def reduce(self, tensors, opts):
        return self._gloo_for("reduce", "one rank's result: pbox sums for every rank").reduce(
            tensors, opts)

    def gather(self, outputs, inputs, opts):
        return self._gloo_for("gather", "nothing to sum").gather(outputs, inputs, opts)

    def scatter(self, outputs, inputs, opts):
        return self._gloo_for("scatter", "nothing to sum").scatter(outputs, inputs, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        return self._gloo_for("alltoall", "nothing to sum").alltoall_base(
            output, input, output_split_sizes, input_split_sizes, opts)

    def send(self, tensors, dst, tag):
        return self._gloo_for("send", "point to point").send(tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self._gloo_for("recv", "point to point").recv(tensors, src, tag)


def shrink(group=None, step=None):
    """Go on with the survivors after a collective raised because a rank or
    the box was lost (libpbox's pbox_shrink()): every survivor calls it, and
    gets a new group of the survivors (rank() and size() renumbered in
    order; without the box if the box was lost). The old group serves
    nothing more. With group.resumed (the box was lost, every rank is
    here, and no rank had a reduce_scatter_tensor, all_gather_into_tensor
    or broadcast through pbox in flight), every all_reduce of the old group
    that raised is complete in its tensors, with the exact sums, as if
    nothing had happened: go on from there. Otherwise (a rank was lost, or
    a sharded collective was under way: those are never resumed) redo the
    failed step from its inputs (its tensors may hold some sums already).
    The new group does all_reduce (through pbox), broadcast and barrier;
    pass it as group= (torch's default group stays the old one).

    group: the failed pbox group (None: the default group). step: the step
    this rank failed in (its loop's counter), and the survivors agree on
    the one to redo (pbox_shrink_step()): group.step is the earliest any of
    them failed in (a rank that died after its sums reached one survivor
    and not another leaves the first a step ahead: it goes back, from that
    step's inputs); resumed, group.step is as given. Every survivor passes
    a step, or none does (group.step None)."""
    g = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(g, ProcessGroupPbox):
        raise RuntimeError("pbox: shrink() takes a pbox group, not %s" % type(g).__name__)
    return g._shrink(step)


def stats(group=None):
    """This rank's libpbox counters (pbox_stats()) for a pbox group (None:
    the default group), as a dict: ops, tx_bytes, rx_bytes, retransmits,
    probes, srtt_ns, ... (pbox.h's struct pbox_stats)."""
    g = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(g, ProcessGroupPbox) or g._ctx is None:
        raise RuntimeError("pbox: stats() takes a live pbox group")
    return g._ctx.stats()


def rejoin(group=None):
    """After shrink() went on without the box: take it back once it answers
    again (libpbox's pbox_rejoin()). Every rank calls it at the same point
    (between steps), with no collective of the group in flight; the group
    stays the same. Returns k, the boxes' bandwidth over a worker's (0: the
    box is still away)."""
    g = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(g, ProcessGroupPbox) or g._ctx is None:
        raise RuntimeError("pbox: rejoin() takes a live pbox group")
    for fut in list(g._busy.values()):
        fut.wait()
    g._ctx.rejoin()
    return g._ctx.layout().k


def _create(store, rank, size, timeout):
    return ProcessGroupPbox(store, rank, size, timeout)


try:  # torch 2.x asks which devices a backend serves
    dist.Backend.register_backend("pbox", _create, devices=["cpu", "cuda"])
except TypeError:  # torch 1.13
    dist.Backend.register_backend("pbox", _create)


# ---- the DDP communication hook, for users who keep another default group ----

class _HookState:
    """allreduce_hook's state. With auto (hook_state(compression="auto")),
    ByteComp's decision over DDP's buckets: the time each bucket's hook is
    called is measured once DDP has rebuilt its buckets (from its third
    step), the gaps between them being the backward computation before each;
    after AUTO_STEPS such steps, at the next step's first bucket, every rank
    hands the buckets and the gaps (the median of the last AUTO_STEPS steps)
    to pbox_decide_compression(), and each bucket's key travels compressed
    or not as rank 0 decided. The decision is made again every @every steps
    from the measurements of the steps just before (the same steps on every
    rank, so that every rank takes part), following the times as they
    drift; None: once."""
    AUTO_FROM, AUTO_STEPS = 2, 3

    def __init__(self, group, auto=False, every=None):
        self.group = group
        self.auto = auto
        self.every = every
        self.step = 0
        self.next = self.AUTO_FROM + self.AUTO_STEPS  # the step of the next decision
        self.seen = []  # this step's buckets: (key, count, time)
        self.gaps = []  # the last measured steps' gaps, per bucket
        self.shape = None  # the measured steps' (key, count) per bucket
        self.chosen = None  # the last decision: per bucket 0 or COMP_* (pbox.Context)
        self.decisions = 0
        self.known = set()  # keys declared as they are (until a decision says)

    def _bucket(self, buf, last):
        if not self.auto:
            return
        now = time.monotonic_ns()
        key = ProcessGroupPbox._key(_DTYPES.get(buf.dtype, -1), buf.numel())
        if buf.dtype == torch.float32 and key not in self.known:
            # as it is until a decision (the job's scheme would be its default)
            self.group._ctx.declare(key, buf.numel(), pbox.FP32)
            self.group._ctx.set_compression(key, "none")
            self.known.add(key)
        if not self.seen and self.gaps and self.next is not None and self.step >= self.next:
            self._decide()
            self.next = self.step + self.every if self.every else None
            now = time.monotonic_ns()  # the decision's own time is not the backward's
        if buf.dtype == torch.float32:
            self.seen.append((key, buf.numel(), now))
        if not last:
            return
        shape = [(k, c) for k, c, _ in self.seen]
        if self.step >= self.AUTO_FROM and shape and shape == (self.shape or shape):
            self.shape = shape
            self.gaps.append([b[2] - a[2] for a, b in zip([self.seen[0]] + self.seen, self.seen)])
            self.gaps = self.gaps[-self.AUTO_STEPS:]
        self.seen = []
        self.step += 1

    def _decide(self):
        n = len(self.shape)
        med = [sorted(g[i] for g in self.gaps)[len(self.gaps) // 2] for i in range(n)]
        self.chosen = self.group._ctx.decide_compression(
            [k for k, _ in self.shape], [c for _, c in self.shape], med)
        self.decisions += 1
        if self.group.rank() == 0:
            print("pbox: hook_state(compression=\"auto\"): %d of %d fp32 buckets compressed, "
                  "%d on the GPU, %d one direction alone (ByteComp's decision %d, at step %d, "
                  "over %d measured steps)" %
                  (sum(1 for c in self.chosen if c), n,
                   sum(1 for c in self.chosen if c & pbox.COMP_GPU),
                   sum(1 for c in self.chosen if c & (pbox.COMP_PUSH_ONLY | pbox.COMP_SUM_ONLY)),
                   self.decisions, self.step, len(self.gaps)),
                  file=sys.stderr, flush=True)


# the [job] compression of the next pbox group hook_state() makes
_next_compression = [None]


def hook_state(group=None, compression=None, redecide_every=100):
    """State for allreduce_hook: a pbox process group (None: a new one over the
    default group's ranks). compression: "sign", "topk", "randk", "bf16" or
    "fp16" for the new group's [job] compression (ByteComp's compressors with
    error feedback on the ranks and the summation services): every fp32
    bucket travels compressed; "auto" (EFSignSGD) or "auto:SCHEME": ByteComp's
    decision algorithm says which buckets, from the backward computation
    the hook measures (see _HookState) and the link's and the compressor's
    costs (pbox_decide_compression()), again every redecide_every steps
    (None: once); the same on every rank. "SCHEME:gather" (and
    "auto:SCHEME:gather"): each compressed bucket is summed by all-gather
    ([job] compression_sum = gather: every rank's compressed bucket to every
    rank, summed there in rank order, never compressed again; a bucket's
    first call, unless declared, goes through the summation services). For
    a pbox group of your own (DDP on the pbox backend: group=
    dist.group.WORLD), give its [job] compression in its configuration
    (PBOX_CONFIG or PBOX_JOB_COMPRESSION): compression=None then sends every
    fp32 bucket with it, and compression="auto" lets ByteComp's decision
    choose which buckets do. CUDA buckets may be placed on the GPU or the
    CPU (pbox_decide_compression(), libpbox 3.14)."""
    auto = compression is not None and compression.split(":")[0] == "auto"
    if auto:
        compression = compression.split(":", 1)[1] if ":" in compression else None
    if group is None:
        _next_compression[0] = compression or ("sign" if auto else None)
        try:
            group = dist.new_group(backend="pbox")
        finally:
            _next_compression[0] = None
    elif not isinstance(group, ProcessGroupPbox):
        raise ValueError("pbox: hook_state(group=...): %s is not a pbox group" %
                         type(group).__name__)
    elif compression is not None:
        raise ValueError("pbox: hook_state(group, compression=%r): an existing group "
                         "compresses with its own [job] compression (its configuration, or "
                         "PBOX_JOB_COMPRESSION); compression=\"auto\" lets ByteComp's "
                         "decision choose which buckets take it" % compression)
    return _HookState(group, auto, redecide_every)


def allreduce_hook(state, bucket):
    """ddp.register_comm_hook(pbox.torch.hook_state(), pbox.torch.allreduce_hook):
    each bucket summed by pbox and averaged, as DDP's default hook does."""
    buf = bucket.buffer()
    size = state.group.size()
    state._bucket(buf, bucket.is_last())
    work = state.group.allreduce([buf])

    def average(f):
        v = f.value()
        if isinstance(v, BaseException):  # torch 1.13 hands a failed future's error over
            raise v
        return v[0].div_(size)

    return work.get_future().then(average)


# ---- ByteScheduler's plugin: each parameter's sum as soon as it is ready ----

class ScheduledOptimizer:
    """Wraps a torch optimizer (and stands in for DDP) so that communication
    overlaps both passes, as ByteScheduler's PyTorch plugin does:

        model = Net()                                    # no DDP wrapper
        opt = pbox.torch.ScheduledOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                            model)       # rank 0's parameters broadcast
        for x, y in data:
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()      # each parameter's sum starts as its gradient is ready
            opt.step()           # returns at once
        opt.synchronize()        # before reading the parameters (eval, checkpoint)

    Each parameter is a tensor of its own in libpbox, declared with its place
    in model.parameters() as its priority (the input layers first: the next
    forward pass needs them first), so libpbox's scheduler sends the most
    urgent partition first and lets it overtake what waits. A backward hook
    copies each gradient out as soon as autograd has accumulated it and
    starts its push-pull; step() only marks the sums as due; a forward
    pre-hook on each module waits for its own parameters' sums alone and
    runs the optimizer's step for them (the Dependency Proxy), so the next
    iteration's first layers compute while the last layers' sums are still
    on the wire.

    The mathematics are synchronous SGD's, as DDP's: each gradient is the
    average of the ranks' (summed by pbox, divided by the world size), and
    the optimizer's step per parameter is the step it takes on all of them
    at once for any optimizer that updates each parameter from its own
    gradient and state (SGD, momentum, Adam, AdamW, RMSprop, ...; not one
    that couples parameters, such as LBFGS). The parameters equal DDP's
    after any number of steps, up to the order in which fp32 sums were
    added.

    no_sync(): gradients accumulate locally (micro-batches); the next
    backward outside it sends the accumulated ones, as DDP's no_sync().
    clip_grad_norm_(): clipping needs every gradient, so it waits for every
    sum first (that step does not overlap; it says so once) and clips the
    averaged gradients exactly as torch.nn.utils.clip_grad_norm_ does.
    A second backward before step() is refused (use no_sync()).

    group: a pbox group (None: the default group, which must be pbox's).
    priority: False sends the parameters first come, first served, in the
    order backward makes their gradients (perf-train's comparison of the
    two). Run the job with [job] leader_order = on (PBOX_JOB_LEADER_ORDER=on):
    rank 0 then orders every rank's sends, as ByteScheduler's master Core
    does; without it a later, more urgent gradient overtakes at a different
    point on each rank, and every rank holds sends that wait for the others
    (on links the step fills, 0.84-0.91x DDP's step on resnet18, 1.05x with
    it: docs/performance.md).
    Parameters must be fp32, fp16 or bf16, on the CPU or one CUDA device.
    Other attributes (param_groups, state_dict(), ...) are the optimizer's.
    """

    _made = 0  # ranks make their ScheduledOptimizers in the same order: keys agree

    def __init__(self, optimizer, model, group=None, priority=True):
        g = group if group is not None else dist.distributed_c10d._get_default_group()
        if not isinstance(g, ProcessGroupPbox) or g._ctx is None:
            raise RuntimeError("pbox: ScheduledOptimizer needs a live pbox group, not %s" %
                               type(g).__name__)
        self._opt, self._group, self._ctx = optimizer, g, g._ctx
        ScheduledOptimizer._made += 1
        owned = {id(p) for grp in optimizer.param_groups for p in grp["params"]}
        self._params = [p for p in model.parameters() if id(p) in owned and p.requires_grad]
        if len(self._params) != len(owned):
            raise RuntimeError("pbox: ScheduledOptimizer: the optimizer has parameters "
                               "that are not the model's, or that need no gradient")
        self._index = {id(p): i for i, p in enumerate(self._params)}
        n = len(self._params)
        self._bufs, self._keys = [], []
        for i, p in enumerate(self._params):
            if p.dtype not in _DTYPES:
                raise RuntimeError("pbox: ScheduledOptimizer: parameter %d is %s (fp32, fp16 "
                                   "or bf16 only)" % (i, p.dtype))
            key = (zlib.crc32(b"sched:%d:%d:%d" % (self._made, i, p.numel())) &
                   0x7FFFFFFF) << 32 | (i & 0x1FFFFFFF) << 3 | 1  # never a _key()
            # by layer, the input's first; or first come, first served:
            # backward makes the gradients in about the reverse order. A
            # priority each, and not one for all: libpbox orders equal
            # priorities by key, a hash here, which would preempt at random
            self._ctx.declare(key, p.numel(), _DTYPES[p.dtype], i if priority else n - 1 - i)
            self._keys.append(key)
            self._bufs.append(torch.empty(p.numel(), dtype=p.dtype, device=p.device))
        # rank 0's parameters, as DDP starts: one broadcast per dtype and
        # device, let go of at once (they are not sent again)
        alike = collections.defaultdict(list)
        for p in self._params:
            alike[(p.dtype, p.device)].append(p.data)
        for ts in alike.values():
            g._broadcast_once(ts)
        self._handle = [None] * n  # its push-pull in flight
        self._avg = [False] * n  # its buffer holds the ranks' average
        self._due = [False] * n  # step() was called: apply before its next use
        self._sync = True
        self._said_clip = False
        self._hooks = []
        for i, p in enumerate(self._params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]  # p's AccumulateGrad
            self._hooks.append((acc, acc.register_hook(self._grad_ready(i))))
        for m in model.modules():
            own = [self._index[id(p)] for p in m.parameters(recurse=False)
                   if id(p) in self._index]
            if own:
                self._hooks.append((m, m.register_forward_pre_hook(self._pre_forward(own))))

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._opt, name)

    def _grad_ready(self, i):
        def hook(*_):
            if not self._sync:
                return  # no_sync(): accumulate
            if self._handle[i] is not None or self._avg[i]:
                raise RuntimeError("pbox: ScheduledOptimizer: a second backward before "
                                   "step(); accumulate under no_sync()")
            if self._due[i]:
                raise RuntimeError("pbox: ScheduledOptimizer: parameter %d was used before "
                                   "its module's forward ran (its update was not applied): "
                                   "call synchronize() before such a forward" % i)
            p, buf = self._params[i], self._bufs[i]
            buf.copy_(p.grad.reshape(-1))
            dt = _DTYPES[p.dtype]
            if buf.is_cuda:
                stream = torch.cuda.current_stream(buf.device).cuda_stream
                self._handle[i] = self._ctx.push_pull_cuda(self._keys[i], buf.data_ptr(),
                                                           buf.data_ptr(), buf.numel(), dt,
                                                           stream)
            else:
                self._handle[i] = self._ctx.push_pull(self._keys[i], buf.data_ptr(),
                                                      buf.data_ptr(), buf.numel(), dt)
        return hook

    def _summed(self, i):
        """Parameter @i's sum in, averaged."""
        h, self._handle[i] = self._handle[i], None
        if h is not None:
            h.wait()
            self._bufs[i].div_(self._group.size())
            self._avg[i] = True

    def _with_grads(self, idx, fn):
        """fn() with parameters @idx's .grad the averaged sums (the caller's back after)."""
        saved = [self._params[i].grad for i in idx]
        try:
            for i in idx:
                self._params[i].grad = self._bufs[i].view_as(self._params[i])
            return fn()
        finally:
            for i, g in zip(idx, saved):
                self._params[i].grad = g

    def _apply(self, idx):
        """The optimizer's step for the due parameters among @idx."""
        idx = [i for i in idx if self._due[i]]
        if not idx:
            return
        for i in idx:
            self._summed(i)
        mine = {id(self._params[i]) for i in idx}
        groups = [grp["params"] for grp in self._opt.param_groups]
        try:
            for grp, ps in zip(self._opt.param_groups, groups):
                grp["params"] = [p for p in ps if id(p) in mine]
            self._with_grads(idx, self._opt.step)
        finally:
            for grp, ps in zip(self._opt.param_groups, groups):
                grp["params"] = ps
        for i in idx:
            self._due[i] = self._avg[i] = False

    def _pre_forward(self, own):
        def hook(module, inputs):  # noqa: ARG001
            self._apply(own)
        return hook

    def step(self, closure=None):
        """Marks this step's sums as due: each parameter is updated once its
        sum is in, before its module's next forward (or at synchronize())."""
        if closure is not None:
            raise RuntimeError("pbox: ScheduledOptimizer.step() takes no closure")
        self._apply(range(len(self._params)))  # a previous step's never used since
        for i in range(len(self._params)):
            self._due[i] = self._handle[i] is not None or self._avg[i]

    def synchronize(self):
        """Every sum in and every due update applied: the parameters as DDP's."""
        self._apply(range(len(self._params)))

    def zero_grad(self, *args, **kwargs):
        self._opt.zero_grad(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards here accumulate gradients locally; the next one outside
        sends the accumulated gradients."""
        self._sync = False
        try:
            yield
        finally:
            self._sync = True

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """torch.nn.utils.clip_grad_norm_ of the averaged gradients (call it
        after backward, before step()): waits for every sum first."""
        if not self._said_clip:
            self._said_clip = True
            print("pbox: ScheduledOptimizer.clip_grad_norm_ needs every gradient: a step that "
                  "clips waits for every sum (no overlap with the next forward)",
                  file=sys.stderr, flush=True)
        idx = [i for i in range(len(self._params)) if self._handle[i] is not None or
               self._avg[i]]
        for i in idx:
            self._summed(i)
        return self._with_grads(idx, lambda: torch.nn.utils.clip_grad_norm_(
            [self._params[i] for i in idx], max_norm, norm_type))


class AsyncOptimizer:
    """Asynchronous training, BytePS's asynchronous mode (libpbox 3.9): each
    rank steps on its own gradients, pushes the change the step made (the
    delta) and takes the latest parameters, which the summation services
    keep by adding every rank's deltas as they come, with no barrier:

        model = Net()                                    # no DDP wrapper
        opt = pbox.torch.AsyncOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                        model)           # rank 0's parameters start the store
        for x, y in data:
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()       # local step, its delta added, the latest parameters back

    A slow rank does not hold the others back (Theorem 2 of the BytePS paper
    bounds what the stale gradients cost); [job] staleness = S in the pbox
    configuration holds a rank that gets more than S steps ahead of the
    slowest. Each delta is added exactly once. synchronize(), on every rank
    after its last step, ends each with the stores' final parameters (every
    rank's every delta in). Parameters: fp32, fp16 or bf16, on the CPU or a
    CUDA device (staged through host memory). The optimizer's state
    (momentum, Adam's moments) stays each rank's own.
    group: a pbox group (None: the default group, which must be pbox's).
    """

    _made = 0  # ranks make their AsyncOptimizers in the same order: keys agree

    def __init__(self, optimizer, model, group=None):
        g = group if group is not None else dist.distributed_c10d._get_default_group()
        if not isinstance(g, ProcessGroupPbox) or g._ctx is None:
            raise RuntimeError("pbox: AsyncOptimizer needs a live pbox group, not %s" %
                               type(g).__name__)
        self._opt, self._ctx, self._group = optimizer, g._ctx, g
        g._retiring = False  # pbox_forget() would drop the stores
        AsyncOptimizer._made += 1
        owned = {id(p) for grp in optimizer.param_groups for p in grp["params"]}
        self._params = [p for p in model.parameters() if id(p) in owned]
        self._keys, self._last, self._delta = [], [], []
        for i, p in enumerate(self._params):
            if p.dtype not in _DTYPES:
                raise RuntimeError("pbox: AsyncOptimizer: parameter %d is %s (fp32, fp16 or "
                                   "bf16 only)" % (i, p.dtype))
            self._keys.append((zlib.crc32(b"async:%d:%d:%d" % (self._made, i, p.numel())) &
                               0x7FFFFFFF) << 32 | (i & 0x1FFFFFFF) << 3 | 5)  # never a _key()
            self._last.append(torch.empty(p.numel(), dtype=p.dtype))
            self._delta.append(p.detach().reshape(-1).cpu().clone())
        self._exchange()  # the first call: rank 0's parameters set the stores

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._opt, name)

    def _exchange(self):
        """Each parameter's delta (self._delta) into its store, the latest
        parameters back into the model."""
        hs = [self._ctx.push_pull_async(k, d.data_ptr(), last.data_ptr(), d.numel(),
                                        _DTYPES[d.dtype])
              for k, d, last in zip(self._keys, self._delta, self._last)]
        for h in hs:
            h.wait()
        with torch.no_grad():
            for p, last in zip(self._params, self._last):
                p.copy_(last.view_as(p))

    def step(self, closure=None):
        """The wrapped optimizer's step on this rank's gradients, then its
        change to every parameter added to the stores and the latest
        parameters taken."""
        loss = self._opt.step(closure)
        with torch.no_grad():
            for p, last, d in zip(self._params, self._last, self._delta):
                torch.sub(p.detach().reshape(-1).cpu(), last, out=d)
        self._exchange()
        return loss

    def synchronize(self):
        """Every rank, after its last step: once every rank's last delta is
        in (a barrier), the stores' final parameters into the model, the
        same on every rank."""
        dist.barrier(group=self._group)
        for d in self._delta:
            d.zero_()
        self._exchange()
