"""ctypes over the artifact ABI (include/coil/artifact.h, docs/abi.md), version 1."""
import ctypes
import fcntl
import hashlib
import json
import mmap
import os
import re
import sys
import threading

import torch

from ._errors import CoilError
from . import _targets

class _Outputs:
    """Storage of a model's large outputs (4 MiB and up), kept between calls: each is an
    anonymous mapping, its pages asked to be huge (Linux's THP "madvise" mode, Debian's default)
    and faulted by the first call that writes it; a later call writes into it again once
    nothing of an earlier one holds it (no tensor, view, storage or numpy array: those keep a
    reference to the mapping, which is all this counts). A fresh output costs a page fault per
    page and the kernel's zeroing of it on every call (glibc maps and unmaps an allocation above
    32 MiB each time, and smaller ones too once other allocations come between calls): 1e6
    gathered rows of 64 floats (256 MB) took 62 ms at one thread into fresh huge pages, 100 ms
    into fresh small ones, 42 ms into pages written before; a GNN aggregation into 1e5 x 64
    (25.6 MB) called between eager ops 36 ms with ~600 faults a call, 30 ms without. At most
    two mappings per large output are kept (a loop's `y = f(x)` holds one while the next call
    writes the other); the rest are left to whoever holds them."""

    MIN = 4 << 20

    def __init__(self):
        self._lock = threading.Lock()
        self._maps = []

    def take(self, shapes):
        """Empty tensors of these (shape, dtype)s, the large ones on kept storage."""
        outs, big = [], 0
        with self._lock:
            taken = set()
            for shape, dt in shapes:
                n = _itemsize(dt) * _numel(shape)
                if n < self.MIN:
                    outs.append(torch.empty(shape, dtype=dt))
                    continue
                big += 1
                # refs of a free mapping: the list's and getrefcount's argument
                k = next((k for k in range(len(self._maps))
                          if k not in taken and len(self._maps[k]) == n and sys.getrefcount(self._maps[k]) == 2),
                         None)
                if k is None:
                    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE)  # shared would be shmem: no THP
                    try:
                        m.madvise(mmap.MADV_HUGEPAGE)
                    except (AttributeError, OSError):  # advice only
                        pass
                    self._maps.append(m)
                    k = len(self._maps) - 1
                taken.add(k)
                outs.append(torch.frombuffer(self._maps[k], dtype=dt).view(shape))
            # keep two per large output, the ones this call took first, then the newest others
            keep = sorted(taken) + [k for k in range(len(self._maps) - 1, -1, -1) if k not in taken]
            self._maps = [self._maps[k] for k in sorted(keep[:2 * big])]
        return outs

    def clear(self):
        with self._lock:
            self._maps = []


_ITEMSIZE = {}


def _itemsize(dt):
    if dt not in _ITEMSIZE:
        _ITEMSIZE[dt] = torch.empty((), dtype=dt).element_size()
    return _ITEMSIZE[dt]


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


ABI_VERSION = 1
MAX_RANK = 8

DTYPES = {
    "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8, "bool": torch.bool,
}

def _err_load(msg):
    return CoilError(msg, stage="load")


def _err_run(msg):
    return CoilError(msg, stage="run")


_gomp = None
_gomp_lock = threading.Lock()


def _pin_libgomp():
    """Load libgomp globally once and keep it: an artifact's OpenMP threads outlive its calls,
    and the last library holding libgomp going away would unmap it under them (SIGSEGV)."""
    global _gomp
    with _gomp_lock:
        if _gomp is None:
            try:
                _gomp = ctypes.CDLL("libgomp.so.1", mode=ctypes.RTLD_GLOBAL)
            except OSError:
                _gomp = False  # an artifact built without OpenMP still loads
    return _gomp


_I64P = ctypes.POINTER(ctypes.c_int64)


_DESCRIBE = re.compile(rb'\{"abi_version": [0-9]+, "target": "([a-z0-9_-]{1,63})"')


def _sealed_copy(path, sha256, target=None):
    """path's bytes in a sealed memfd whose SHA-256 must be sha256 when given (as
    client/artifact.c's artifact_open_verified): the bytes checked are the bytes loaded, from
    /proc/self/fd/N. Before anything is loaded, the target their description names (read from
    the bytes) must be one this CPU runs (and `target`, when given). Returns that path; the
    descriptor stays open for as long as the process (Artifacts are never unloaded, and dlopen
    matches a loaded object by name first)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        fd = os.memfd_create("coil-artifact", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError as e:
        raise _err_load("cannot read artifact %s: %s" % (path, e)) from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
        h, off = hashlib.sha256(), 0
        while True:
            chunk = os.pread(fd, 1 << 20, off)
            if not chunk:
                break
            h.update(chunk)
            off += len(chunk)
    except OSError as e:
        os.close(fd)
        raise _err_load("cannot copy artifact %s into memory: %s" % (path, e)) from None
    if sha256 and h.hexdigest() != sha256:
        os.close(fd)
        raise _err_load("artifact %s: sha256 mismatch (expected %s, found %s), refusing to load it"
                        % (path, sha256, h.hexdigest()))
    m = _DESCRIBE.search(data)
    bad = ("%s: not a coil artifact (no description found in its bytes); refusing to load it" % path
           if m is None else _targets.check(path, m.group(1).decode()))
    if bad is None and target and m.group(1).decode() != target:
        bad = "%s: built for target '%s', not the '%s' its metadata names; refusing it" % (
            path, m.group(1).decode(), target)
    if bad:
        os.close(fd)
        raise _err_load(bad)
    return "/proc/self/fd/%d" % fd


class Artifact:
    """One loaded artifact (.so): its description and its C functions. Never unloaded.
    Its bytes are checked in sealed memory before they are loaded: with sha256, only bytes
    with that digest; always, only an artifact whose target (read from its bytes, and equal to
    `target` when given) this CPU runs."""

    def __init__(self, path, sha256=None, target=None):
        self.path = path
        _pin_libgomp()
        load_path = _sealed_copy(path, sha256, target)
        try:
            lib = ctypes.CDLL(load_path, mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise _err_load("cannot load artifact %s: %s" % (path, e)) from None
        try:
            lib.coil_abi_version.restype = ctypes.c_int
            lib.coil_abi_version.argtypes = []
            lib.coil_artifact_describe.restype = ctypes.c_char_p
            lib.coil_artifact_describe.argtypes = []
            fns = [lib.coil_model_create, lib.coil_model_output_shape, lib.coil_model_run,
                   lib.coil_model_destroy, lib.coil_model_last_error]
        except AttributeError as e:
            raise _err_load("%s is not a coil artifact: %s" % (path, e)) from None
        v = lib.coil_abi_version()
        if v != ABI_VERSION:
            raise _err_load("%s: artifact ABI version %d, this client speaks %d" % (path, v, ABI_VERSION))
        try:
            desc = json.loads(lib.coil_artifact_describe().decode("utf-8"))
        except (ValueError, AttributeError) as e:
            raise _err_load("%s: unreadable describe(): %s" % (path, e)) from None
        self.describe = desc
        self.target = desc.get("target", "?")
        bad = _targets.check(path, self.target)
        if bad:
            # checked before dlopen too; nothing beyond describe() has run: no SIGILL
            raise _err_load(bad)
        try:
            self.inputs = [(DTYPES[d["dtype"]], list(d["shape"])) for d in desc["inputs"]]
            self.params = [(DTYPES[d["dtype"]], list(d["shape"])) for d in desc["params"]]
            self.outputs = [(DTYPES[d["dtype"]], list(d["shape"])) for d in desc["outputs"]]
        except (KeyError, TypeError) as e:
            raise _err_load("%s: bad describe(): %s" % (path, e)) from None
        create, oshape, run, destroy, lasterr = fns
        create.restype = ctypes.c_int
        create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int,
                           ctypes.POINTER(ctypes.c_void_p)]
        oshape.restype = ctypes.c_int
        oshape.argtypes = [ctypes.c_void_p, ctypes.POINTER(_I64P), ctypes.c_int, _I64P]
        run.restype = ctypes.c_int
        run.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(_I64P),
                        ctypes.POINTER(ctypes.c_void_p)]
        destroy.restype = None
        destroy.argtypes = [ctypes.c_void_p]
        lasterr.restype = ctypes.c_char_p
        lasterr.argtypes = []
        self._lib = lib
        self._create, self._oshape, self._run, self._destroy, self._lasterr = fns
        self._profile = getattr(lib, "coil_model_profile", None)  # optional: artifacts since 2026-11-27
        self._kname = getattr(lib, "coil_model_kernel_name", None)
        if self._profile is not None and self._kname is not None:
            self._profile.restype = ctypes.c_int
            self._profile.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double)]
            self._kname.restype = ctypes.c_char_p
            self._kname.argtypes = [ctypes.c_int]
        else:
            self._profile = None
        self._profile_rep = getattr(lib, "coil_model_profile_repeat", None)  # optional: since 2026-12-04
        if self._profile_rep is not None:
            self._profile_rep.restype = ctypes.c_int
            self._profile_rep.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self._memory = getattr(lib, "coil_model_memory", None)  # optional: newer artifacts
        if self._memory is not None:
            self._memory.restype = ctypes.c_int
            self._memory.argtypes = [ctypes.c_void_p, _I64P, ctypes.c_int]

    def keep_weights_small(self):
        """Every oneDNN convolution of this loaded artifact without Winograd (where the
        heuristics would take it: coil_model_tune's choice 0 becomes 1, DN_TUNE_NO_WINO),
        so that its weights keep their own size; for handles created after. Returns how
        many changed (0 for an artifact without the table)."""
        tune = getattr(self._lib, "coil_model_tune", None)
        if tune is None:
            return 0
        tune.restype = ctypes.c_int
        tune.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint)]
        k, ch = ctypes.c_int(), ctypes.c_uint()
        changed = 0
        for j in range(max(tune(-1, -1, ctypes.byref(k), ctypes.byref(ch)), 0)):
            if tune(j, -1, ctypes.byref(k), ctypes.byref(ch)) == 0 and ch.value >> 1 & 1:
                changed += tune(j, 1, ctypes.byref(k), ctypes.byref(ch)) == 1
        return changed

    def last_error(self):
        e = self._lasterr()
        return e.decode("utf-8", "replace") if e else "unknown error"

    def arena_bytes(self, symbols):
        """describe's arena expression evaluated with {"s0": v, ...} (None if unavailable); the
        derived symbols (floor divisions, min/max of sizes) from describe's symbol_defs."""
        syms = dict(symbols)
        try:
            for k, d in enumerate(self.describe.get("symbol_defs") or []):
                if "s%d" % k not in syms:
                    syms["s%d" % k] = eval_expr(d, syms)
            return eval_expr(self.describe.get("arena_bytes"), syms)
        except (KeyError, TypeError, ValueError):
            return None

    def param_bytes(self):
        n = 0
        for dt, shape in self.params:
            k = torch.empty((), dtype=dt).element_size()
            for d in shape:
                k *= d if isinstance(d, int) else 0
            n += k
        return n


def eval_expr(e, symbols):
    """An integer or an expression string over s0, s1, ... (+ - *, // by a positive number,
    min(a, b), max(a, b), parentheses)."""
    if e is None:
        return None
    if isinstance(e, int):
        return e
    import ast

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name):
            return symbols[n.id]
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = ev(n.left), ev(n.right)
            return a + b if isinstance(n.op, ast.Add) else a - b if isinstance(n.op, ast.Sub) else a * b
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.FloorDiv):
            a, b = ev(n.left), ev(n.right)
            if b <= 0:
                raise ValueError(e)
            return a // b
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max")
                and len(n.args) == 2):
            a, b = ev(n.args[0]), ev(n.args[1])
            return min(a, b) if n.func.id == "min" else max(a, b)
        raise ValueError(e)

    try:
        return ev(ast.parse(str(e), mode="eval"))
    except (ValueError, KeyError, SyntaxError):
        return None


class _Handle:
    """One coil_model plus per-shape call state (runs one call at a time)."""

    __slots__ = ("ptr", "shapes")

    def __init__(self, ptr):
        self.ptr = ptr
        self.shapes = {}  # tuple of input shapes -> (ctypes shape array, [output shapes])


class Model:
    """Params bound to an artifact; callable on torch tensors, from any number of threads.

    Each concurrent call gets its own coil_model (a handle runs one call at a time): handles
    are kept in a pool, created on demand, so N threads calling at once use N handles."""

    def __init__(self, artifact, params, threads=None, keep_params=True, low_memory=False):
        self.artifact = a = artifact
        if low_memory:
            a.keep_weights_small()
        if len(params) != len(a.params):
            raise _err_load("artifact takes %d params, %d given" % (len(a.params), len(params)))
        ps = []
        for i, (t, (dt, shape)) in enumerate(zip(params, a.params)):
            if not isinstance(t, torch.Tensor):
                raise _err_load("param %d is a %s, not a tensor" % (i, type(t).__name__))
            t = t.detach()
            if t.device.type != "cpu":
                raise _err_load("param %d is on %s; coil runs on the CPU" % (i, t.device))
            if t.dtype != dt:
                t = t.to(dt)
            if list(t.shape) != [int(d) for d in shape]:
                raise _err_load("param %d has shape %s, the artifact expects %s" % (
                    i, list(t.shape), shape))
            ps.append(t.contiguous())
        self._params = ps
        self._pptrs = (ctypes.c_void_p * max(len(ps), 1))(*[t.data_ptr() for t in ps])
        self.nthreads = int(threads) if threads else 0
        self._lock = threading.Lock()
        self._free = []
        self._all = []
        self._closed = False
        self._outputs = _Outputs()
        self._free.append(self._new_handle())  # fail early, on the caller's thread
        if not keep_params:
            # the ABI copies params at create; drop ours (handles created later need them)
            self._params = None

    def _new_handle(self):
        if self._params is None:
            raise _err_load("cannot create another handle: params were released (keep_params=False)")
        out = ctypes.c_void_p()
        a = self.artifact
        if a._create(self._pptrs, len(self._params), self.nthreads, ctypes.byref(out)) != 0:
            raise _err_load("coil_model_create: %s" % a.last_error())
        h = _Handle(out.value)
        with self._lock:
            self._all.append(h)
        return h

    def _acquire(self):
        with self._lock:
            if self._closed:
                raise _err_run("model is closed")
            if self._free:
                return self._free.pop()
        return self._new_handle()

    def _release(self, h):
        with self._lock:
            if self._closed:
                self.artifact._destroy(h.ptr)
                h.ptr = None
            else:
                self._free.append(h)

    def _call_state(self, h, xs):
        key = tuple(tuple(x.shape) for x in xs)
        st = h.shapes.get(key)
        if st is not None:
            return st
        a = self.artifact
        arrs = [(ctypes.c_int64 * max(len(s), 1))(*s) for s in key]
        sp = (_I64P * max(len(arrs), 1))(*[ctypes.cast(r, _I64P) for r in arrs])
        outs = []
        buf = (ctypes.c_int64 * MAX_RANK)()
        for j in range(len(a.outputs)):
            r = a._oshape(h.ptr, sp, j, buf)
            if r < 0:
                raise _err_run("output %d shape: %s" % (j, a.last_error()))
            outs.append(tuple(buf[k] for k in range(r)))
        if len(h.shapes) > 64:
            h.shapes.clear()
        st = h.shapes[key] = (arrs, sp, outs)
        return st

    def __call__(self, *inputs):
        return self._run(inputs)

    def profile(self, *inputs, runs=10, repeat=1):
        """Per kernel, in run order, over runs calls after one unprofiled call (it makes the
        arena and oneDNN's objects): {"kernel", "name" (its kind and graph nodes, "#k:op" with k
        the node's index in the canonical graph), "ms", "bytes", "flops"} per call; the last
        entry is the run's own part before the kernels (sizes, arena, oneDNN objects).
        repeat > 1: each kernel runs that many times in a row and its fastest lap counts (its
        time with its inputs in cache); the outputs of those runs are not returned."""
        a = self.artifact
        if a._profile is None:
            raise _err_run("%s predates the profile switch (coil_model_profile): compile it again" % a.path)
        if repeat > 1 and a._profile_rep is None:
            raise _err_run("%s predates coil_model_profile_repeat: compile it again" % a.path)
        self._run(inputs)
        nk = a._profile(None, None)
        acc = (ctypes.c_double * (3 * (nk + 1)))()
        for _ in range(runs):
            self._run(inputs, acc, repeat)
        return [{"kernel": k, "name": (a._kname(k) or b"?").decode("utf-8", "replace"),
                 "ms": 1e3 * acc[3 * k] / runs, "bytes": acc[3 * k + 1] / runs, "flops": acc[3 * k + 2] / runs}
                for k in range(nk + 1)]

    def _run(self, inputs, prof=None, repeat=1):
        a = self.artifact
        if len(inputs) != len(a.inputs):
            raise _err_run("expected %d inputs, got %d" % (len(a.inputs), len(inputs)))
        xs = []
        for i, (x, (dt, shape)) in enumerate(zip(inputs, a.inputs)):
            if not isinstance(x, torch.Tensor):
                raise _err_run("input %d is a %s, not a tensor" % (i, type(x).__name__))
            if x.device.type != "cpu":
                raise _err_run("input %d is on %s; coil runs on the CPU" % (i, x.device))
            if x.dtype != dt:
                raise _err_run("input %d has dtype %s, the compiled model takes %s" % (i, x.dtype, dt))
            if x.dim() != len(shape):
                raise _err_run("input %d has rank %d, the compiled model takes shape %s" % (
                    i, x.dim(), shape))
            if x.requires_grad:
                x = x.detach()
            if not x.is_contiguous():
                x = x.contiguous()
            xs.append(x)
        h = self._acquire()
        try:
            arrs, sp, oshapes = self._call_state(h, xs)
            outs = self._outputs.take([(s, dt) for s, (dt, _) in zip(oshapes, a.outputs)])
            iptr = (ctypes.c_void_p * max(len(xs), 1))(*[x.data_ptr() for x in xs])
            optr = (ctypes.c_void_p * max(len(outs), 1))(*[o.data_ptr() for o in outs])
            # ctypes drops the GIL for the call: other threads run their own handles
            if prof is not None:
                a._profile(h.ptr, prof)
                if repeat > 1:
                    a._profile_rep(h.ptr, repeat)
            if a._run(h.ptr, iptr, sp, optr) != 0:
                raise _err_run("coil_model_run: %s" % a.last_error())
        finally:
            if prof is not None:
                a._profile(h.ptr, None)
                if repeat > 1:
                    a._profile_rep(h.ptr, 1)
            self._release(h)
        return outs

    def memory(self):
        """Bytes each handle holds, summed over the handles (None where the artifact predates
        coil_model_memory): arena (intermediates, grown to the largest binding run),
        workspace (oneDNN scratchpads), weights (packed for oneDNN, one copy per layout),
        set_weights (the most one binding's objects held), bindings (bindings with oneDNN
        objects made), weight_copies (with symbolic sizes the weights stay within this many
        set_weights: 2, 3 once a handle thrashes; summed over handles), handles."""
        a = self.artifact
        if a._memory is None:
            return None
        keys = ("arena", "workspace", "weights", "set_weights", "bindings", "weight_copies")
        tot = dict.fromkeys(keys, 0)
        buf = (ctypes.c_int64 * len(keys))()
        with self._lock:
            hs = [h for h in self._free if h.ptr]
            for h in hs:
                n = a._memory(h.ptr, ctypes.cast(buf, _I64P), len(keys))
                for k, v in zip(keys[:n], buf):
                    tot[k] += int(v)
        tot["handles"] = len(hs)
        return tot

    def close(self):
        """Destroys every idle handle now (busy ones when their call returns)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            free, self._free = self._free, []
        self._outputs.clear()
        for h in free:
            if h.ptr:
                self.artifact._destroy(h.ptr)
                h.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass
