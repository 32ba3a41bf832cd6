#!/usr/bin/python3
"""Differential test of every op that `coil info --ops` lists against PyTorch eager (TAP output).

Each case is a small graph (usually one node): tensors become graph inputs (or params or
constants), scalars and lists go inline. `coil eval` runs it and every output is compared with
`torch.ops.aten.<name>.<overload>` called with the same arguments: same dtype, same shape, ints
and bools exact, floats within a tolerance for their dtype. Where PyTorch raises, coil must reject
the graph cleanly; where coil documents a limitation (`unsupported`), it must reject it cleanly.
The last line fails if an op of `coil info --ops` has no passing-comparison case.

Run: COIL=build/coil PYTHONPATH=client/python /usr/bin/python3 tests/py/test_ops.py
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

t = Tap()
try:
    import torch
except Exception as e:  # noqa: BLE001
    t.ok(False, "import torch", repr(e))
    t.done()

warnings.filterwarnings("ignore")
torch.set_num_threads(1)
torch.manual_seed(0)
START = time.time()
COIL = os.environ.get("COIL", "build/coil")
# ~1900 small files: a tmpfs keeps their creation cheap where /tmp is a slow disk
TMP = tempfile.mkdtemp(prefix="coil_test_ops_",
                       dir="/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None)
aten = torch.ops.aten

f32, f64, bf16, f16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
i64, i32, i8, u8, b8 = torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool
ALL_DT = [f32, f64, bf16, f16, i64, i32, i8, u8, b8]
FLOAT_DT = [f32, f64, bf16, f16]
INT_DT = [i64, i32, i8, u8]
CNAME = {f32: "f32", f64: "f64", bf16: "bf16", f16: "f16", i64: "i64", i32: "i32", i8: "i8", u8: "u8", b8: "bool"}
ST_NAME = {f32: "F32", f64: "F64", bf16: "BF16", f16: "F16", i64: "I64", i32: "I32", i8: "I8", u8: "U8",
           b8: "BOOL"}
ST_DT = {v: k for k, v in ST_NAME.items()}
# (rtol, atol); atol is scaled by the largest finite magnitude of the expected output (at least 1)
TOL = {f32: (1e-5, 1e-5), f64: (1e-9, 1e-9), bf16: (1.6e-2, 1e-2), f16: (2e-3, 1e-3)}


# ---------------------------------------------------------------- safetensors (private, torch-based)
# client/python/coil_safetensors.py does the same; a private copy keeps this suite independent of it.

def st_save(tensors, path):
    header, chunks, off = {}, [], 0
    for name, x in tensors.items():
        x = x.detach().contiguous()
        raw = x.reshape(-1)
        raw = raw.to(u8) if raw.dtype == b8 else raw
        data = raw.view(u8).numpy().tobytes() if raw.numel() else b""
        header[name] = {"dtype": ST_NAME[x.dtype], "shape": list(x.shape), "data_offsets": [off, off + len(data)]}
        chunks.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def st_load(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = ST_DT[info["dtype"]]
        raw = bytearray(buf[8 + n + b:8 + n + e])
        if dt == b8:
            x = torch.frombuffer(raw, dtype=u8).clone().to(b8) if raw else torch.zeros(0, dtype=b8)
        else:
            x = torch.frombuffer(raw, dtype=dt).clone() if raw else torch.zeros(0, dtype=dt)
        out[name] = x.reshape(info["shape"])
    return out


# ---------------------------------------------------------------- building cases

GEN = torch.Generator().manual_seed(20240607)


def R(*shape, dt=f32, lo=None, hi=None):
    """Random tensor: floats uniform in [lo, hi) (default [-3, 3)), ints in [lo, hi] (default
    [-10, 10], u8 [0, 20]), bools half true."""
    if dt.is_floating_point:
        lo = -3.0 if lo is None else lo
        hi = 3.0 if hi is None else hi
        return (torch.rand(shape, generator=GEN, dtype=f64) * (hi - lo) + lo).to(dt)
    if dt == b8:
        return torch.rand(shape, generator=GEN) > 0.5
    if lo is None:
        lo = 0 if dt == u8 else -10
    if hi is None:
        hi = 20 if dt == u8 else 10
    return torch.randint(int(lo), int(hi) + 1, shape, generator=GEN, dtype=i64).to(dt)


def T(values, dt=f32):
    return torch.tensor(values, dtype=dt)


class Param:
    """A tensor bound as a graph param (weights file) instead of an input."""
    def __init__(self, x):
        self.x = x


class Const:
    """A tensor inlined as a graph constant."""
    def __init__(self, x):
        self.x = x


class Sym:
    """An input declared with a symbolic shape (e.g. ["b", 3])."""
    def __init__(self, x, shape):
        self.x = x
        self.shape = shape


class Both:
    """An argument written differently in the JSON graph and in the PyTorch call."""
    def __init__(self, js, py):
        self.js = js
        self.py = py


def jnum(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def op_full_name(op):
    return op if op.count(".") == 2 else op + ".default"


def torch_op(op):
    ns, name, overload = op_full_name(op).split(".")
    if ns != "aten":  # coil's and quantized_decomposed's: each case names its reference
        return refuse
    return getattr(getattr(aten, name), overload)


CASES = []


class Case:
    def __init__(self, op, args, kwargs=None, name=None, ref=None, tol=None, tolx=1.0, unsupported=False,
                 nout=None, null_outs=(), covers=None, expect_error=False):
        self.op = op
        self.args = list(args)
        self.kwargs = dict(kwargs or {})
        self.ref = ref or torch_op(op)
        self.tol = tol
        self.tolx = tolx
        self.unsupported = unsupported  # coil documents that it rejects this
        self.expect_error = expect_error  # both must reject (torch raising is checked too)
        self.nout = nout
        self.null_outs = set(null_outs)
        self.covers = op_full_name(covers or op)
        self.name = name or describe(op, self.args, self.kwargs)
        self.graph = None  # set for hand-built graphs


def describe(op, args, kwargs):
    def d(a):
        if isinstance(a, (Param, Const, Sym)):
            return ("P:" if isinstance(a, Param) else "C:" if isinstance(a, Const) else "S:") + d(a.x)
        if isinstance(a, Both):
            return d(a.js)
        if isinstance(a, torch.Tensor):
            return "%s%s" % (CNAME[a.dtype], list(a.shape))
        if isinstance(a, torch.dtype):
            return CNAME[a]
        if isinstance(a, (list, tuple)):
            return "[" + ",".join(d(x) for x in a) + "]"
        if isinstance(a, float):
            return repr(jnum(a)).strip("'")
        return str(a)
    s = op[5:] + "(" + ", ".join(d(a) for a in args)
    if kwargs:
        s += ", " + ", ".join("%s=%s" % (k, d(v)) for k, v in kwargs.items())
    return s + ")"


def sdpa_ref(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, masked_value=None):
    """PyTorch 2's math reference for scaled_dot_product_attention (1.13 has no such op),
    in f64, rounded to q's dtype once; masked_value (coil's): a bool mask's masked score."""
    if dropout_p:
        raise RuntimeError("dropout in inference")
    s = q.double() @ k.double().transpose(-2, -1)
    s = s * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if attn_mask is not None:
        if masked_value is not None and attn_mask.dtype != torch.bool:
            raise RuntimeError("masked_value applies to a bool mask")
        fill = float("-inf") if masked_value is None else masked_value
        s = s.masked_fill(~attn_mask, fill) if attn_mask.dtype == torch.bool else s + attn_mask.double()
    if is_causal:
        n, m = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.ones(n, m, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, -1) @ v.double()).to(q.dtype)


def refuse(*args, **kwargs):
    """The reference for inputs PyTorch does not check (it would read out of bounds): an error."""
    raise RuntimeError("invalid input (PyTorch does not check it)")


def case(op, *args, **kw):
    c = Case(op, args, **kw)
    CASES.append(c)
    return c


def gcase(name, graph, feeds, expected, covers, tolx=1.0, weights=None):
    """A hand-built multi-node graph: feeds {input name: tensor}, expected list of tensors (or the
    exception PyTorch raises: coil must refuse too)."""
    c = Case("aten.alias", [], name=name, covers=covers, tolx=tolx)
    c.graph = (graph, feeds, expected, weights or {})
    CASES.append(c)
    return c


# ---------------------------------------------------------------- graph JSON from a case

def build(c, nres):
    inputs, params, consts, feeds, weights = [], [], [], {}, {}
    names = {}

    def tensor_name(a):
        key = id(a)
        if key in names:
            return names[key]
        x = a.x if isinstance(a, (Param, Const, Sym)) else a
        nm = ("w%d" if isinstance(a, Param) else "c%d" if isinstance(a, Const) else "x%d") % len(names)
        names[key] = nm
        decl = {"name": nm, "dtype": CNAME[x.dtype], "shape": list(x.shape)}
        if isinstance(a, Param):
            params.append(decl)
            weights[nm] = x
        elif isinstance(a, Const):
            flat = x.reshape(-1).tolist()
            decl["data"] = [bool(v) for v in flat] if x.dtype == b8 else [jnum(v) for v in flat]
            consts.append(decl)
        else:
            if isinstance(a, Sym):
                decl["shape"] = a.shape
            inputs.append(decl)
            feeds[nm] = x
        return nm

    def conv(a):
        if isinstance(a, Both):
            return conv(a.js)
        if isinstance(a, (torch.Tensor, Param, Const, Sym)):
            return tensor_name(a)
        if isinstance(a, torch.dtype):
            return CNAME[a]
        if isinstance(a, torch.memory_format):
            return None
        if isinstance(a, (list, tuple)):
            return [conv(x) for x in a]
        return jnum(a)

    node = {"id": "n0", "op": c.op, "args": [conv(a) for a in c.args], "outputs": []}
    if c.kwargs:
        node["kwargs"] = {k: conv(v) for k, v in c.kwargs.items()}
    outs = []
    for k in range(nres):
        if k in c.null_outs:
            node["outputs"].append(None)
        else:
            node["outputs"].append("r%d" % k)
            outs.append("r%d" % k)
    g = {"format": "coil-graph", "version": 1, "inputs": inputs, "params": params, "constants": consts,
         "nodes": [node], "outputs": outs}
    return g, feeds, weights


def py_args(c):
    def conv(a):
        if isinstance(a, Both):
            return a.py
        if isinstance(a, (Param, Const, Sym)):
            return a.x
        if isinstance(a, list):
            return [conv(x) for x in a]
        return a
    return [conv(a) for a in c.args], {k: conv(v) for k, v in c.kwargs.items()}


def as_list(r):
    if isinstance(r, torch.Tensor):
        return [r]
    return list(r)


def half_fallback(c, args, kwargs):
    """CPU PyTorch lacks many f16 (and some bf16) kernels: compute in f32, round back."""
    half = [None]

    def up(a):
        if isinstance(a, torch.Tensor) and a.dtype in (f16, bf16):
            half[0] = half[0] or a.dtype
            return a.float()
        if isinstance(a, list):
            return [up(x) for x in a]
        return a
    a2 = [up(a) for a in args]
    k2 = {k: up(v) for k, v in kwargs.items()}
    res = as_list(c.ref(*a2, **k2))
    return [r.to(half[0]) if r.dtype == f32 else r for r in res]


def reference(c):
    """Expected outputs (list of tensors) or the exception PyTorch raised."""
    if c.graph:  # expected: the tensors, or the exception PyTorch raises
        return (None, c.graph[2]) if isinstance(c.graph[2], Exception) else (c.graph[2], None)
    args, kwargs = py_args(c)
    try:
        return [r.clone() for r in as_list(c.ref(*args, **kwargs))], None
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        if "not implemented for 'Half'" in msg or "not implemented for 'BFloat16'" in msg or \
                "addmm_impl_cpu_" in msg:
            try:
                return half_fallback(c, args, kwargs), None
            except Exception as e2:  # noqa: BLE001
                return None, e2
        return None, e


# ---------------------------------------------------------------- comparing

def compare(got, exp, tolx, tol=None):
    if got.dtype != exp.dtype:
        return "dtype %s, expected %s" % (CNAME.get(got.dtype), CNAME.get(exp.dtype))
    if list(got.shape) != list(exp.shape):
        return "shape %s, expected %s" % (list(got.shape), list(exp.shape))
    if got.numel() == 0:
        return None
    if not exp.dtype.is_floating_point:
        bad = (got != exp).reshape(-1).nonzero()
        if len(bad):
            i = bad[0].item()
            return "%d of %d elements differ; first at flat index %d: got %s, expected %s" % (
                len(bad), exp.numel(), i, got.reshape(-1)[i].item(), exp.reshape(-1)[i].item())
        return None
    g, e = got.double().reshape(-1), exp.double().reshape(-1)
    rtol, atol = tol or TOL[exp.dtype]
    rtol, atol = rtol * tolx, atol * tolx
    fin = torch.isfinite(e)
    scale = max(1.0, e[fin].abs().max().item()) if fin.any() else 1.0
    ok = torch.where(fin, (g - e).abs() <= atol * scale + rtol * e.abs(),
                     (g == e) | (torch.isnan(g) & torch.isnan(e)))
    if not ok.all():
        bad = (~ok).nonzero()
        i = bad[0].item()
        err = ((g - e).abs() / (atol * scale + rtol * e.abs()))[fin & ~ok]
        return ("%d of %d elements differ; first at flat index %d: got %r, expected %r "
                "(worst error %.3g x tolerance)" % (len(bad), e.numel(), i, g[i].item(), e[i].item(),
                                                   err.max().item() if len(err) else float("inf")))
    return None


# ---------------------------------------------------------------- running

def prepare(idx, c):
    exp, terr = reference(c)
    c.exp, c.terr = exp, terr
    if c.graph:
        g, feeds, weights = c.graph[0], c.graph[1], c.graph[3]
    else:
        if exp is not None:
            nres = len(exp)
        else:
            nres = c.nout or 1
        g, feeds, weights = build(c, nres)
    c.json = g
    c.paths = [os.path.join(TMP, "c%d.%s" % (idx, ext)) for ext in ("json", "in", "w", "out")]
    with open(c.paths[0], "w") as f:
        json.dump(g, f)
    st_save(feeds, c.paths[1])
    if weights:
        st_save(weights, c.paths[2])
    else:
        c.paths[2] = None


def run_coil(c):
    gp, ip, wp, op = c.paths
    try:
        p = subprocess.run([COIL, "eval", gp] + (["-w", wp] if wp else []) + ["-i", ip, "-o", op],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        return p.returncode, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return -999, "timed out"


def judge(c, rc, err):
    """Returns (passed, diagnostics, compared) where compared says whether values were compared."""
    gtxt = json.dumps(c.json)
    gtxt = gtxt if len(gtxt) < 1500 else gtxt[:1500] + "..."
    if rc < 0 or rc > 2:
        return False, "coil crashed or hung (rc %d)\n%s\ngraph: %s" % (rc, err, gtxt), False
    if c.unsupported:
        if rc == 0:
            return False, "coil accepted a graph it documents as unsupported; graph: %s" % gtxt, False
        return bool(err.strip()), "rejected without a message", False
    if c.terr is not None or c.expect_error:
        if c.terr is None:
            return False, "expected both to reject, but PyTorch accepted it", False
        if rc == 0:
            return False, ("PyTorch raises (%s: %s) but coil accepted the graph\ngraph: %s" % (
                type(c.terr).__name__, str(c.terr).splitlines()[0][:200], gtxt)), False
        return bool(err.strip()), "rejected without a message", False
    if rc != 0:
        return False, "coil rejected what PyTorch accepts:\n%s\ngraph: %s" % (err.strip(), gtxt), False
    try:
        out = st_load(c.paths[3])
    except Exception as e:  # noqa: BLE001
        return False, "cannot read coil's output: %r" % e, False
    want = [x for k, x in enumerate(c.exp) if k not in c.null_outs]
    if len(out) != len(want):
        return False, "coil wrote %d outputs, expected %d" % (len(out), len(want)), False
    msgs = []
    for k, w in enumerate(want):
        got = out.get("output%d" % k)
        if got is None:
            msgs.append("output%d missing" % k)
            continue
        m = compare(got, w, c.tolx, c.tol)
        if m:
            msgs.append("output%d: %s" % (k, m))
    if msgs:
        return False, "\n".join(msgs) + "\ngraph: " + gtxt, True
    return True, None, True


# =================================================================== the cases

def conv_cases():
    cv = "aten.convolution"
    x, w, b = R(2, 3, 7, 7), R(4, 3, 3, 3), R(4)
    case(cv, x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    case(cv, Sym(x, ["n", 3, 7, 7]), Param(w), Param(b), [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
         name="convolution 2d weights as params, symbolic batch")
    case(cv, R(2, 3, 13, 11), R(5, 3, 3, 3), R(5), [2, 2], [1, 1], [1, 1], False, [0, 0], 1)
    # kernel taps that only ever read padding (the runtime drops them): one row, one column, both
    case(cv, R(2, 3, 1, 9), R(4, 3, 3, 3), R(4), [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
         name="convolution 3x3 over one row")
    case(cv, R(1, 4, 7, 1), R(6, 4, 5, 5), None, [1, 1], [2, 2], [1, 1], False, [0, 0], 1,
         name="convolution 5x5 over one column")
    case(cv, R(1, 4, 2, 2), R(6, 4, 5, 5), R(6), [2, 2], [2, 2], [1, 1], False, [0, 0], 1,
         name="convolution 5x5 stride 2 over 2x2")
    case(cv, R(1, 4, 1, 6), R(6, 2, 3, 3), R(6), [1, 1], [2, 2], [2, 2], False, [0, 0], 2,
         name="convolution dilated 3x3 over one row, groups 2")
    case(cv, R(1, 2, 1, 1, 8), R(3, 2, 3, 3, 3), R(3), [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1,
         name="convolution 3-d 3x3x3 over 1x1x8")
    # depthwise, dilated (generated loops: oneDNN 2.6 runs them on gemm) and not (1-d as 2-d)
    case(cv, R(2, 6, 40), R(6, 1, 3), R(6), [1], [8], [8], False, [0], 6, name="convolution depthwise 1-d dilation 8")
    case(cv, R(2, 6, 40), R(6, 1, 3), None, [2], [3], [3], False, [0], 6, name="convolution depthwise 1-d stride 2 dilation 3")
    case(cv, R(1, 4, 9, 11), R(4, 1, 3, 3), R(4), [1, 1], [2, 2], [2, 2], False, [0, 0], 4,
         name="convolution depthwise 2-d dilation 2")
    case(cv, R(2, 6, 40), R(6, 1, 5), R(6), [1], [2], [1], False, [0], 6, name="convolution depthwise 1-d (as 2-d)")
    case(cv, R(1, 3, 13, 11), R(5, 3, 3, 2), None, [2, 1], [1, 0], [2, 3], False, [0, 0], 1)
    case(cv, R(1, 3, 9, 9), R(2, 3, 1, 1), R(2), [1, 1], [0, 0], [1, 1], False, [0, 0], 1, name="convolution 1x1")
    case(cv, R(2, 4, 8, 8), R(6, 2, 3, 3), R(6), [1, 1], [1, 1], [1, 1], False, [0, 0], 2, name="convolution groups=2")
    case(cv, R(1, 6, 9, 9), R(6, 1, 3, 3), R(6), [1, 1], [1, 1], [1, 1], False, [0, 0], 6,
         name="convolution depthwise")
    case(cv, R(1, 4, 10, 7), R(8, 1, 5, 5), None, [2, 2], [2, 2], [1, 1], False, [0, 0], 4,
         name="convolution depthwise multiplier 2 stride 2")
    case(cv, R(1, 2, 5, 5), R(3, 2, 3, 3), R(3), [2], [1], [1], False, [0], 1, name="convolution single-int lists")
    case(cv, R(1, 2, 2, 2), R(3, 2, 3, 3), R(3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
         name="convolution kernel bigger than input with padding")
    case(cv, R(2, 4, 13), R(5, 4, 3), R(5), [2], [1], [1], False, [0], 1, name="convolution 1d")
    case(cv, R(1, 4, 13), R(4, 2, 3), None, [1], [2], [2], False, [0], 2, name="convolution 1d dilated groups")
    # dilated depthwise (ConvTasNet): generated loops, not oneDNN 2.6's gemm fallback
    case(cv, R(2, 6, 40), R(6, 1, 3), R(6), [1], [8], [8], False, [0], 6, name="convolution 1d dilated depthwise")
    case(cv, R(1, 5, 11, 12), R(5, 1, 3, 3), None, [1, 2], [2, 2], [2, 2], False, [0, 0], 5,
         name="convolution 2d dilated depthwise, stride 2")
    case(cv, R(1, 2, 5, 6, 4), R(3, 2, 3, 3, 2), R(3), [1, 2, 1], [1, 0, 1], [1, 1, 1], False, [0, 0, 0], 1,
         name="convolution 3d")
    case(cv, R(1, 4, 5, 5), R(4, 3, 3, 3), R(3), [2, 2], [1, 1], [1, 1], True, [1, 1], 1,
         name="convolution transposed stride 2 output_padding 1")
    case(cv, R(2, 4, 5, 4), R(4, 2, 3, 3), R(4), [1, 2], [0, 1], [1, 1], True, [0, 1], 2,
         name="convolution transposed groups 2")
    case(cv, R(1, 3, 4, 4), R(3, 2, 2, 3), None, [2, 3], [0, 1], [2, 1], True, [1, 0], 1,
         name="convolution transposed dilation")
    case(cv, R(1, 3, 7), R(3, 2, 4), R(2), [3], [1], [1], True, [2], 1, name="convolution transposed 1d")
    case(cv, R(1, 2, 6, 6, dt=f64), R(3, 2, 3, 3, dt=f64), R(3, dt=f64), [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    case(cv, R(1, 2, 6, 6, dt=bf16), R(3, 2, 3, 3, dt=bf16), R(3, dt=bf16), [1, 1], [1, 1], [1, 1], False,
         [0, 0], 1, tolx=2)
    case(cv, R(1, 2, 6, 6, dt=f16), R(3, 2, 3, 3, dt=f16), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, tolx=2)
    # invalid: channels do not match
    case(cv, R(1, 3, 5, 5), R(2, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    case(cv, R(1, 2, 5, 5, dt=i64), R(2, 2, 3, 3, dt=i64), None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
         unsupported=True, name="convolution i64 (coil rejects; PyTorch accepts)")


def matmul_cases():
    case("aten.mm", R(3, 4), R(4, 5))
    case("aten.mm", R(1, 7), R(7, 1))
    case("aten.mm", R(13, 1), R(1, 7))
    case("aten.mm", R(3, 0), R(0, 4), name="mm with K=0")
    case("aten.mm", R(5, 6, dt=f64), R(6, 2, dt=f64))
    case("aten.mm", R(4, 8, dt=bf16), R(8, 3, dt=bf16), tolx=2)
    case("aten.mm", R(4, 8, dt=f16), R(8, 3, dt=f16), tolx=2)
    case("aten.mm", R(3, 4), R(5, 6))
    case("aten.mm", R(3, 4, dt=i64), R(4, 5, dt=i64), unsupported=True, name="mm i64 (coil rejects; PyTorch accepts)")
    case("aten.bmm", R(2, 3, 4), R(2, 4, 5))
    case("aten.bmm", R(1, 7, 1), R(1, 1, 3))
    case("aten.bmm", R(3, 2, 5, dt=f64), R(3, 5, 2, dt=f64))
    case("aten.bmm", R(2, 3, 4), R(3, 4, 5))
    bb = "aten.baddbmm"
    case(bb, R(2, 3, 5), R(2, 3, 4), R(2, 4, 5))
    case(bb, R(5), R(2, 3, 4), R(2, 4, 5), kwargs={"beta": 0.5, "alpha": 2})
    case(bb, R(1, 3, 1), R(2, 3, 4), R(2, 4, 5), kwargs={"alpha": -1})
    case(bb, T([float("nan")] * 5), R(2, 3, 4), R(2, 4, 5), kwargs={"beta": 0}, name="baddbmm beta=0 ignores NaN self")
    case(bb, R(2, 3, 5, dt=f64), R(2, 3, 4, dt=f64), R(2, 4, 5, dt=f64))
    case(bb, R(2, 3, 5), R(2, 3, 4), R(3, 4, 5), expect_error=True, name="baddbmm batch sizes differ")
    case(bb, R(4, 3, 5), R(2, 3, 4), R(2, 4, 5), expect_error=True, name="baddbmm self does not broadcast")
    sd = "aten.scaled_dot_product_attention"
    case(sd, R(2, 3, 7, 16), R(2, 3, 9, 16), R(2, 3, 9, 8), ref=sdpa_ref)
    case(sd, R(1, 2, 5, 8), R(1, 2, 5, 8), R(1, 2, 5, 4), R(1, 1, 5, 5, dt=b8), ref=sdpa_ref,
         name="scaled_dot_product_attention bool mask (rows masked everywhere: NaN)")
    case(sd, R(1, 2, 5, 8), R(1, 2, 6, 8), R(1, 2, 6, 4), R(5, 6), 0.0, False, ref=sdpa_ref, kwargs={"scale": 0.3})
    case(sd, R(2, 4, 6, 8), R(2, 1, 6, 8), R(2, 1, 6, 8), None, 0.0, True, ref=sdpa_ref,
         name="scaled_dot_product_attention causal, k and v shared by the heads")
    case(sd, R(3, 33, 16), R(3, 40, 16), R(3, 40, 16), R(3, 1, 40, dt=b8), 0.0, True, ref=sdpa_ref,
         name="scaled_dot_product_attention 3-d, causal and a key mask")
    case(sd, R(1, 2, 9, 16, dt=bf16), R(1, 2, 9, 16, dt=bf16), R(1, 2, 9, 16, dt=bf16), R(9, 9, dt=bf16),
         ref=sdpa_ref)
    case(sd, R(1, 2, 5, 8), R(1, 2, 5, 8), R(1, 2, 5, 4), R(1, 1, 5, 5, dt=b8), ref=sdpa_ref,
         kwargs={"masked_value": -1e9},
         name="scaled_dot_product_attention bool mask, masked_value -1e9 (rows masked everywhere: uniform)")
    case(sd, R(2, 3, 70, 16), R(2, 3, 300, 16), R(2, 3, 300, 16), R(2, 1, 1, 300, dt=b8), 0.0, True,
         ref=sdpa_ref, kwargs={"masked_value": -3.4028234663852886e38},
         name="scaled_dot_product_attention causal, key mask, masked_value finfo.min")
    case(sd, R(1, 2, 5, 8), R(1, 2, 5, 8), R(1, 2, 5, 4), R(5, 5), ref=sdpa_ref, kwargs={"masked_value": -1e4},
         expect_error=True, name="scaled_dot_product_attention masked_value with a float mask")
    case(sd, R(1, 2, 4, 8), R(1, 2, 4, 8), R(1, 2, 4, 8), None, 0.1, ref=sdpa_ref, unsupported=True,
         name="scaled_dot_product_attention dropout_p 0.1 (coil rejects; PyTorch accepts)")
    case(sd, R(1, 2, 4, 8), R(1, 2, 4, 6), R(1, 2, 4, 8), ref=sdpa_ref, expect_error=True,
         name="scaled_dot_product_attention key's head dim differs")
    case("aten.addmm", R(3, 5), R(3, 4), R(4, 5))
    case("aten.addmm", R(5), R(3, 4), R(4, 5))
    case("aten.addmm", R(1, 5), R(3, 4), R(4, 5), kwargs={"beta": 2, "alpha": 0.5})
    case("aten.addmm", R(3, 1), R(3, 4), R(4, 5), kwargs={"beta": 0.25, "alpha": -1})
    case("aten.addmm", R(), R(3, 4), R(4, 5))
    case("aten.addmm", T([[float("nan")] * 5] * 3), R(3, 4), R(4, 5), kwargs={"beta": 0},
         name="addmm beta=0 ignores nan in self")
    case("aten.addmm", R(7, dt=f64), R(2, 13, dt=f64), R(13, 7, dt=f64), kwargs={"beta": 1.5, "alpha": 2.5})
    case("aten.addmm", Param(R(6)), R(2, 3), Param(R(3, 6)), name="addmm params (linear)")
    case("aten.addmm", R(4, 5), R(3, 4), R(4, 5))


def norm_cases():
    def stats(c, dt=f32):
        return R(c, dt=dt), R(c, dt=dt), R(c, dt=dt), R(c, dt=dt, lo=0.5, hi=2.0)
    w, b, m, v = stats(3)
    x = R(2, 3, 4, 5)
    case("aten.native_batch_norm", x, w, b, m, v, False, 0.1, 1e-5)
    case("aten.native_batch_norm", R(4, 3), w, b, m, v, False, 0.1, 1e-3)
    case("aten.native_batch_norm", R(2, 3, 7), None, None, m, v, False, 0.1, 1e-5)
    case("aten.native_batch_norm", x, w, b, m, v, False, 0.1, 1e-5, null_outs=(1, 2),
         name="native_batch_norm unused stats outputs")
    case("aten.native_batch_norm", x, w, b, m, v, True, 0.1, 1e-5, unsupported=True, nout=3,
         name="native_batch_norm training with running statistics to update (unsupported)")
    # training without running statistics: the batch's own (instance_norm on [1, N*C, ...])
    case("aten.native_batch_norm", R(1, 6, 4, 5), R(6), R(6), None, None, True, 0.1, 1e-5, nout=3,
         name="native_batch_norm batch statistics (instance norm's form)")
    case("aten.native_batch_norm", R(3, 3, 7, lo=90, hi=110), None, None, None, None, True, 0.1, 1e-3, nout=3,
         name="native_batch_norm batch statistics, large mean, no affine")
    case("aten.native_batch_norm", R(4, 3), w, b, None, None, True, 0.1, 1e-5, nout=3, null_outs=(1,),
         name="native_batch_norm batch statistics 2-d, mean unused")

    wd, bd, md, vd = stats(3, f64)
    case("aten.native_batch_norm", R(2, 3, 5, dt=f64), wd, bd, md, vd, False, 0.1, 1e-5)
    case("aten.native_batch_norm", R(2, 3, 5, dt=f64), wd, None, None, None, True, 0.1, 1e-5, nout=3)
    case("aten.batch_norm", x, Param(w), Param(b), Param(m), Param(v), False, 0.1, 1e-5, False)
    case("aten.batch_norm", R(1, 3, 2, 2, 2), w, None, m, v, False, 0.0, 1e-2, True)
    case("aten.batch_norm", R(2, 3, 4, dt=bf16), *stats(3, bf16), False, 0.1, 1e-5, False, tolx=2)
    case("aten.batch_norm", R(2, 3, 4), *stats(4), False, 0.1, 1e-5, False)  # wrong channel count
    x = R(2, 3, 7)
    case("aten.native_layer_norm", x, [7], R(7), R(7), 1e-5)
    case("aten.native_layer_norm", x, [3, 7], R(3, 7), R(3, 7), 1e-5)
    case("aten.native_layer_norm", x, [2, 3, 7], None, None, 1e-3)
    case("aten.native_layer_norm", R(13, dt=f64), [13], None, R(13, dt=f64), 1e-5)
    case("aten.native_layer_norm", R(4, 5, dt=bf16), [5], R(5, dt=bf16), R(5, dt=bf16), 1e-5, tolx=2)
    case("aten.native_layer_norm", x, [3], None, None, 1e-5)  # does not match trailing dims
    case("aten.layer_norm", x, [7])
    case("aten.layer_norm", x, [7], Param(R(7)), Param(R(7)), 1e-6, False)
    case("aten.layer_norm", R(1, 1, 5), [1, 5], R(1, 5), None, 1e-5)
    # PyTorch's own rounding leaves ~1e-5 here where the exact result is 0
    case("aten.layer_norm", R(3, 1), [1], tolx=10, name="layer_norm over a size-1 dim")
    case("aten.layer_norm", R(4, 6, dt=f16), [6], R(6, dt=f16), R(6, dt=f16), tolx=2)
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps): GroupNorm, ConvTasNet's gLN
    x = R(2, 6, 5, 4)
    case("aten.native_group_norm", x, R(6), R(6), 2, 6, 20, 3, 1e-5)
    case("aten.native_group_norm", x, None, None, 2, 6, 20, 1, 1e-8, name="native_group_norm 1 group, no affine")
    case("aten.native_group_norm", x, R(6), None, 2, 6, 20, 6, 1e-5, name="native_group_norm a group per channel")
    case("aten.native_group_norm", R(3, 8, 7), R(8), R(8), 3, 8, 7, 4, 1e-5, name="native_group_norm 1-d")
    case("aten.native_group_norm", R(4, 6), R(6), R(6), 4, 6, 1, 2, 1e-5, name="native_group_norm [N, C]")
    case("aten.native_group_norm", R(2, 4, 3, dt=f64), R(4, dt=f64), R(4, dt=f64), 2, 4, 3, 2, 1e-5)
    case("aten.native_group_norm", R(2, 4, 3, 3, dt=bf16), R(4, dt=bf16), R(4, dt=bf16), 2, 4, 9, 2, 1e-5,
         tolx=2)
    case("aten.native_group_norm", Sym(R(2, 4, 5, 3), ["n", 4, "h", "w"]), R(4), R(4), 2, 4, 15, 2, 1e-5,
         name="native_group_norm symbolic batch and size")
    case("aten.native_group_norm", x, R(6), R(6), 2, 6, 20, 3, 1e-5, null_outs=(1, 2),
         name="native_group_norm unused stats outputs")
    case("aten.native_group_norm", x, R(6), R(6), 2, 6, 20, 4, 1e-5,
         name="native_group_norm 4 groups do not divide 6 channels")
    case("aten.native_group_norm", x, R(5), R(6), 2, 6, 20, 3, 1e-5, name="native_group_norm weight of 5")
    case("aten.native_group_norm", R(2, 6, 3, dt=i64), None, None, 2, 6, 3, 3, 1e-5,
         name="native_group_norm i64 input")


def softmax_cases():
    x = R(3, 4, 5)
    big = T([[1000.0, 1001.0, 999.0], [-1000.0, -1e30, 0.0]])
    ninf = T([[float("-inf"), 1.0, 2.0], [float("-inf"), float("-inf"), 0.0]])
    for op in ("aten._softmax", "aten._log_softmax"):
        for d in (0, 1, 2, -1, -3):
            case(op, x, d, False)
        case(op, big, 1, False, name=op[5:] + " large magnitudes")
        case(op, ninf, -1, False, name=op[5:] + " with -inf")
        case(op, R(), 0, False)
        case(op, R(1, 7), 0, False)
        case(op, R(2, 13, dt=f64), 1, False)
        case(op, R(2, 13, dt=bf16), 1, False, tolx=2)
        case(op, R(2, 13, dt=f16), 1, False, tolx=2)
        case(op, x, 3, False)
        xh = R(3, 6, dt=f16)
        ref = (lambda a, d, h: aten._softmax(a.float(), d, False)) if op == "aten._softmax" else \
            (lambda a, d, h: aten._log_softmax(a.float(), d, False))
        case(op, xh, 1, True, ref=ref, name=op[5:] + " half_to_float (f16 -> f32)")
        case(op, x, 1, True)  # half_to_float on a float input
        case(op, R(3, 4, dt=i64), 1, False)
    for op in ("aten.softmax.int", "aten.log_softmax.int"):
        case(op, x, 1)
        case(op, x, -1, f64)
        case(op, R(2, 9, dt=bf16), 1, f32)
        case(op, R(4, 1), 1)
        case(op, R(3, 4, dt=i64), 1, f32, unsupported=True,
             name=op[5:] + " i64 input with dtype=f32 (coil rejects; PyTorch accepts)")


def pool_cases():
    mp = "aten.max_pool2d_with_indices"
    x = R(1, 2, 7, 7)
    case(mp, x, [3, 3], [2, 2], [1, 1])
    case(mp, x, [2, 2])
    case(mp, x, [3, 3], [2, 2], [0, 0], [1, 1], True, name="max_pool2d_with_indices ceil_mode")
    case(mp, R(2, 3, 8, 9), [3, 2], [2, 3], [1, 1], [2, 1], True)
    case(mp, R(2, 9, 8), [2, 2], [1, 1], [1, 0], [1, 1], False, name="max_pool2d_with_indices rank 3")
    case(mp, R(1, 1, 13, 11, dt=f64), Both(3, [3]), Both(2, [2]), Both(1, [1]), name="max_pool2d_with_indices single ints")
    case(mp, R(1, 1, 13, 11, dt=f64), [3], [2], [1],
         name="max_pool2d_with_indices 1-element lists for int[2]")
    case(mp, R(1, 2, 6, 6, dt=bf16), [2, 2], [2, 2])
    case(mp, x, [3, 3], [1, 1], [2, 2])  # padding too large
    mp = "aten.max_pool2d"
    case(mp, x, [3, 3], [2, 2], [1, 1])
    case(mp, R(1, 3, 6, 6), [3, 3], [2, 2], [1, 1], [1, 1], True)
    case(mp, R(1, 3, 5, 5), [2, 2], [2, 2], [1, 1], [1, 1], True, name="max_pool2d ceil_mode window in padding")
    case(mp, R(1, 3, 13, 13), [3, 3], [3, 3], [0, 0], [1, 1], True)
    case(mp, T([[[[float("nan"), 1.0], [2.0, 3.0]]]]), [2, 2], name="max_pool2d nan")
    case(mp, R(1, 1, 4, 4), [2, 2], [], name="max_pool2d default stride")
    case(mp, R(1, 2, 6, 6, dt=f16), [2, 2], [1, 1])
    ap = "aten.avg_pool2d"
    x = R(2, 3, 13, 11)
    case(ap, x, [3, 3], [2, 2], [1, 1])
    case(ap, x, [3, 3], [2, 2], [1, 1], False, False, name="avg_pool2d count_include_pad=False")
    case(ap, x, [3, 3], [2, 2], [1, 1], True, True, name="avg_pool2d ceil_mode count_include_pad")
    case(ap, x, [3, 3], [2, 2], [1, 1], True, False, name="avg_pool2d ceil_mode no count_include_pad")
    case(ap, R(1, 2, 6, 7), [3, 2], [2, 2], [1, 1], True, True, name="avg_pool2d ceil window in padding")
    case(ap, R(1, 2, 5, 5), [2, 2], [3, 3], [0, 0], True, True, name="avg_pool2d ceil partial window")
    case(ap, x, [2, 2], [2, 2], [0, 0], False, True, 3, name="avg_pool2d divisor_override")
    case(ap, x, [4, 4])
    case(ap, R(3, 7, 7), [2, 2], [1, 1], name="avg_pool2d rank 3")
    case(ap, R(1, 2, 6, 6, dt=f64), [3, 3], [1, 1], [1, 1])
    case(ap, R(1, 2, 6, 6, dt=bf16), [2, 2], tolx=2)
    case(ap, R(1, 2, 4, 4, dt=i64), [2, 2], unsupported=True, name="avg_pool2d i64 (coil rejects; PyTorch accepts)")
    case(ap, x, [2, 2], [2, 2], [0, 0], False, True, 0)  # divisor 0
    for op in ("aten._adaptive_avg_pool2d", "aten.adaptive_avg_pool2d"):
        case(op, R(1, 3, 7, 13), [3, 5])
        case(op, R(2, 3, 10, 10), [4, 4])
        case(op, R(2, 3, 10, 10), [1, 1])
        case(op, R(1, 2, 3, 3), [5, 7], name=op[5:] + " output larger than input")
        case(op, R(3, 9, 5), [2, 3], name=op[5:] + " rank 3")
        case(op, R(1, 3, 6, 6), Both(3, [3, 3]), name=op[5:] + " single int output_size")
        case(op, R(1, 2, 7, 7, dt=f64), [3, 2])
        case(op, R(1, 2, 7, 7, dt=bf16), [3, 2], tolx=2)
    op = "aten.adaptive_max_pool2d"
    case(op, R(1, 3, 7, 13), [3, 5])
    case(op, R(2, 2, 10, 10), [4, 4])
    case(op, R(1, 2, 3, 3), [5, 4])
    case(op, R(3, 9, 5), [1, 1])
    case(op, R(1, 2, 7, 7, dt=f64), [3, 2])
    # 3-d pooling (video models)
    mp3 = "aten.max_pool3d_with_indices"
    x = R(1, 2, 5, 7, 6)
    case(mp3, x, [2, 2, 2])
    case(mp3, x, [3, 3, 3], [2, 2, 2], [1, 1, 1])
    case(mp3, x, [1, 3, 3], [1, 2, 2], [0, 1, 1], [1, 1, 1], True, name="max_pool3d_with_indices ceil_mode")
    case(mp3, R(2, 6, 8, 7), [2, 3, 2], [1, 2, 2], [1, 1, 0], [2, 1, 1], name="max_pool3d_with_indices rank 4, dilation")
    case(mp3, R(1, 1, 4, 4, 4, dt=f64), Both(3, [3]), Both(1, [1]), name="max_pool3d_with_indices single ints")
    case(mp3, R(1, 1, 4, 5, 5, dt=i64), [2, 2, 2], name="max_pool3d_with_indices i64")
    case(mp3, R(1, 1, 3, 3, 3), [2, 2], name="max_pool3d_with_indices two kernel values")
    case(mp3, R(1, 1, 4, 4), [2, 2, 2], name="max_pool3d_with_indices rank 2")
    case("aten.max_pool3d", T([[[[[float("nan"), 1.0], [2.0, 3.0]]]]]), [1, 2, 2], name="max_pool3d nan")
    case("aten.max_pool3d", R(2, 3, 4, 6, 6), [2, 3, 3], [2, 2, 2], [1, 1, 1])
    case("aten.max_pool3d", Sym(R(2, 3, 4, 6, 6), ["b", 3, "t", "h", "w"]), [2, 2, 2], name="max_pool3d symbolic")
    ap3 = "aten.avg_pool3d"
    x = R(2, 3, 5, 9, 8)
    case(ap3, x, [3, 3, 3], [2, 2, 2], [1, 1, 1])
    case(ap3, x, [3, 3, 3], [2, 2, 2], [1, 1, 1], False, False, name="avg_pool3d count_include_pad=False")
    case(ap3, x, [2, 3, 3], [2, 2, 2], [1, 1, 1], True, True, name="avg_pool3d ceil_mode count_include_pad")
    case(ap3, x, [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, 5, name="avg_pool3d divisor_override")
    case(ap3, R(3, 4, 6, 6), [1, 2, 2], name="avg_pool3d rank 4")
    case(ap3, R(1, 2, 4, 4, 4, dt=f64), [2, 2, 2], [1, 1, 1])
    case(ap3, Sym(R(2, 3, 5, 9, 8), ["b", 3, "t", "h", "w"]), [1, 2, 2], name="avg_pool3d symbolic")
    case(ap3, R(1, 2, 4, 4, 4, dt=i64), [2, 2, 2], unsupported=True, name="avg_pool3d i64 (coil rejects; PyTorch accepts)")


def upsample_cases():
    x = R(2, 3, 5, 7)
    # two channels: eager takes its channels-last kernel for C == 1, which mixes the four
    # corners in one sum and so spreads inf and nan differently
    nan = T([[[[1.0, float("nan"), 2.0], [float("inf"), 0.5, -1.0]], [[-float("inf"), 1.0, 2.0], [3.0, 4.0, 5.0]]]])
    for ac in (False, True):
        op = "aten.upsample_bilinear2d.vec"
        pre = "upsample_bilinear2d.vec align_corners=%s " % ac
        case(op, x, [10, 14], ac, None, name=pre + "upscale x2 (output_size)")
        case(op, x, [3, 4], ac, None, name=pre + "downscale (output_size)")
        case(op, x, [7, 11], ac, None, name=pre + "non-integer ratio (output_size)")
        case(op, x, [5, 16], ac, None, name=pre + "H same, W up")
        case(op, x, None, ac, [2.0, 2.0], name=pre + "scale_factors 2")
        case(op, x, None, ac, [0.5, 0.75], name=pre + "scale_factors 0.5, 0.75")
        case(op, x, None, ac, [1.7, 2.3], name=pre + "scale_factors 1.7, 2.3")
        case(op, x, None, ac, [1.1, 1.1], name=pre + "scale_factors 1.1 (same size: a copy)")
        case(op, R(1, 4, 9, 13), None, ac, [0.37, 3.3], name=pre + "scale_factors 0.37, 3.3")
        case(op, R(1, 2, 1, 1), [4, 5], ac, None, name=pre + "from 1x1")
        case(op, R(1, 2, 6, 5), [1, 1], ac, None, name=pre + "to 1x1")
        case(op, R(1, 2, 1, 7), [3, 1], ac, None, name=pre + "size-1 dims")
        case(op, R(1, 2, 1, 7), None, ac, [4.0, 0.2], name=pre + "size-1 dims (scale_factors)")
        case(op, R(2, 3, 6, 6, dt=f64), [11, 4], ac, None, name=pre + "f64")
        case(op, R(2, 3, 6, 6, dt=f64), None, ac, [1.3, 0.6], name=pre + "f64 scale_factors")
        case(op, R(1, 2, 4, 5, dt=bf16), [7, 9], ac, None, tolx=2, name=pre + "bf16")
        case(op, nan, [4, 5], ac, None, name=pre + "nan and inf")
        case(op, Sym(x, ["n", 3, 5, 7]), [9, 12], ac, None, name=pre + "symbolic batch")
        case(op, Sym(x, ["n", "c", 5, 7]), None, ac, [1.5, 2.5], name=pre + "symbolic batch, channels")
        op = "aten.upsample_bilinear2d"
        pre = "upsample_bilinear2d align_corners=%s " % ac
        case(op, x, [10, 14], ac, name=pre + "upscale x2")
        case(op, x, [4, 3], ac, name=pre + "downscale")
        case(op, x, [8, 9], ac, 1.7, 1.3, name=pre + "scales_h, scales_w")
        case(op, x, [8, 9], ac, None, 1.3, name=pre + "scales_w only")
        case(op, x, [5, 9], ac, 1.2, -1.0, name=pre + "same H with a scale, scales_w -1 (sizes used)")
        case(op, Sym(x, ["n", 3, 5, 7]), [6, 15], ac, name=pre + "symbolic batch")
    op = "aten.upsample_bilinear2d.vec"
    case(op, x, [10, 14], False, [2.0, 2.0], expect_error=True, name="upsample_bilinear2d.vec size and scales")
    case(op, x, None, False, None, expect_error=True, name="upsample_bilinear2d.vec neither size nor scales")
    case(op, x, [0, 3], False, None, expect_error=True, name="upsample_bilinear2d.vec output size 0")
    case(op, x, None, False, [0.1, 1.0], expect_error=True, name="upsample_bilinear2d.vec scale to size 0")
    case(op, x, [3], False, None, expect_error=True, name="upsample_bilinear2d.vec one output size")
    case(op, R(3, 5, 7), [4, 4], False, None, expect_error=True, name="upsample_bilinear2d.vec rank 3")
    case(op, R(2, 3, 4, 5, dt=i64), [4, 4], False, None, expect_error=True, name="upsample_bilinear2d.vec i64")
    for op in ("aten.upsample_nearest2d.vec", "aten.upsample_nearest2d"):
        vec = op.endswith(".vec")
        pre = op[5:] + " "
        if vec:
            case(op, x, [10, 14], None, name=pre + "upscale x2 (output_size)")
            case(op, x, [3, 4], None, name=pre + "downscale (output_size)")
            case(op, x, [7, 11], None, name=pre + "non-integer ratio (output_size)")
            case(op, x, None, [2.0, 3.0], name=pre + "scale_factors 2, 3")
            case(op, x, None, [0.5, 0.75], name=pre + "scale_factors 0.5, 0.75")
            case(op, x, None, [1.7, 2.3], name=pre + "scale_factors 1.7, 2.3")
            case(op, x, None, [1.1, 1.1], name=pre + "scale_factors 1.1 (same size, not a copy)")
            case(op, R(1, 4, 9, 13), None, [0.37, 3.3], name=pre + "scale_factors 0.37, 3.3")
            case(op, R(1, 2, 1, 1), [4, 5], None, name=pre + "from 1x1")
            case(op, R(1, 2, 6, 5), [1, 1], None, name=pre + "to 1x1")
            case(op, R(1, 2, 1, 7), None, [4.0, 0.2], name=pre + "size-1 dims (scale_factors)")
            case(op, R(2, 3, 6, 6, dt=f64), None, [1.3, 0.6], name=pre + "f64")
            case(op, R(2, 3, 4, 5, dt=u8), [7, 9], None, name=pre + "u8")
            case(op, R(1, 2, 4, 5, dt=bf16), [7, 9], None, name=pre + "bf16")
            case(op, nan, None, [2.0, 1.5], name=pre + "nan and inf")
            case(op, Sym(x, ["n", 3, 5, 7]), [9, 12], None, name=pre + "symbolic batch")
            case(op, Sym(x, ["n", "c", 5, 7]), None, [1.5, 2.5], name=pre + "symbolic batch, channels")
            case(op, x, [10, 14], [2.0, 2.0], expect_error=True, name=pre + "size and scales")
            case(op, x, None, None, expect_error=True, name=pre + "neither size nor scales")
            case(op, R(2, 3, 4, 5, dt=i64), [4, 4], None, expect_error=True, name=pre + "i64")
        else:
            case(op, x, [10, 14], name=pre + "upscale x2")
            case(op, x, [4, 3], name=pre + "downscale")
            case(op, x, [8, 9], 1.7, 1.3, name=pre + "scales_h, scales_w")
            case(op, x, [10, 21], None, 3.0, name=pre + "scales_w only")
            case(op, R(1, 2, 1, 1), [3, 2], name=pre + "from 1x1")
            case(op, Sym(x, ["n", 3, 5, 7]), [6, 15], name=pre + "symbolic batch")


UNARY = {  # op: (lo, hi) for random inputs
    "relu": None, "gelu": None, "silu": None, "sigmoid": None, "tanh": None, "hardswish": (-5, 5),
    "hardsigmoid": (-5, 5), "exp": None, "log": (0.01, 5), "log1p": (-0.9, 5), "sqrt": (0, 5),
    "rsqrt": (0.05, 5), "erf": None, "sin": (-7, 7), "cos": (-7, 7), "reciprocal": (0.1, 3), "neg": None,
    "abs": None, "floor": (-5, 5), "ceil": (-5, 5), "logical_not": None, "leaky_relu": None, "elu": None,
    "hardtanh": None, "softplus": (-30, 30), "mish": (-30, 30),
}
SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1e-30, -1e30, 88.8, -100.0, 0.5, -2.5, 3.0]


def unary_cases():
    for name, rng in UNARY.items():
        op = "aten." + name
        lo, hi = rng or (-3, 3)
        case(op, R(7, 13, lo=lo, hi=hi))
        case(op, R(13, dt=f64, lo=lo, hi=hi))
        case(op, R(3, 7, dt=bf16, lo=lo, hi=hi))
        case(op, R(3, 7, dt=f16, lo=lo, hi=hi))
        case(op, R(lo=lo, hi=hi))
        case(op, T(SPECIAL), name=name + " nan/inf/-0/extremes")
        case(op, R(2, 5, dt=i64, lo=max(lo, -10) if lo > -10 else -10, hi=10))
        case(op, R(2, 5, dt=b8))
    for name in ("relu", "neg", "abs", "floor", "ceil", "sigmoid", "exp", "logical_not", "sqrt", "sin"):
        case("aten." + name, R(6, dt=i32, lo=0 if name == "sqrt" else -10))
        case("aten." + name, R(6, dt=i8, lo=0 if name == "sqrt" else -10))
        case("aten." + name, R(6, dt=u8))
    case("aten.gelu", R(7, 13), kwargs={"approximate": "tanh"})
    case("aten.gelu", R(3, 7, dt=bf16), kwargs={"approximate": "tanh"})
    case("aten.gelu", T(SPECIAL), kwargs={"approximate": "tanh"}, name="gelu tanh specials")
    case("aten.gelu", R(3), kwargs={"approximate": "foo"})
    case("aten.leaky_relu", R(7, 13), 0.2)
    case("aten.leaky_relu", R(7, 13), -1.5)
    case("aten.leaky_relu", R(2, 3, dt=f64), 2)
    case("aten.elu", R(7, 13), 0.5, 2.0, 1.5)
    case("aten.elu", R(7, 13), 1.0, 1.0507, 1.0)
    case("aten.elu", R(5, dt=f64), 2)
    case("aten.softplus", R(7, 13, lo=-10, hi=10), 2.0, 5.0, name="softplus beta 2, threshold 5")
    case("aten.softplus", R(7, 13, lo=-10, hi=10), 0.5, name="softplus beta 0.5")
    case("aten.softplus", T(SPECIAL), 3.0, 1.0, name="softplus beta 3, threshold 1 specials")
    case("aten.softplus", R(3, 5, dt=f64, lo=-40, hi=40), 1.0, 30.0, name="softplus f64")
    case("aten.prelu", R(2, 3, 4, 5), R(3), name="prelu per channel")
    case("aten.prelu", R(2, 3, 4, 5), Param(R(3)), name="prelu per channel, weight a param")
    case("aten.prelu", R(2, 3, 4, 5), R(1), name="prelu one weight")
    case("aten.prelu", R(4, 6), R(6), name="prelu rank 2")
    case("aten.prelu", R(7), R(1), name="prelu rank 1")
    case("aten.prelu", R(), R(1), name="prelu rank 0")
    case("aten.prelu", R(2, 3, 4, dt=f64), R(3, dt=f64), name="prelu f64")
    case("aten.prelu", R(2, 3, 4, dt=bf16), R(3, dt=bf16), name="prelu bf16")
    case("aten.prelu", T(SPECIAL).reshape(1, 12), R(12), name="prelu specials")
    case("aten.prelu", Sym(R(2, 3, 4, 5), ["n", 3, "h", "w"]), R(3), name="prelu symbolic")
    case("aten.glu", R(4, 6))
    case("aten.glu", R(2, 8, 5), 1, name="glu dim 1")
    case("aten.glu", R(2, 6, 3, dt=bf16), -2, tolx=2, name="glu bf16")
    case("aten.glu", Sym(R(3, 10), ["b", 10]), name="glu symbolic batch")
    case("aten.glu", R(4, 5), unsupported=True, name="glu odd size (refused)")
    case("aten.glu", R(4, 6, dt=i32), unsupported=True, name="glu of ints (refused)")
    # the exporter's size guard (coil_export._SizeGuards): self unchanged while value is expected
    guard = lambda x, v, e: x.clone() if int(v.reshape(-1)[0]) == e else \
        (_ for _ in ()).throw(RuntimeError("guard"))  # noqa: E731
    case("coil.guard_eq", R(3, 4), T([5], i64), 5, ref=guard, covers="coil.guard_eq.default")
    case("coil.guard_eq", R(3, 4, dt=i32), T(7, i64), 7, ref=guard, name="guard_eq 0-d value, int self")
    case("coil.guard_eq", R(3, 4), T([6], i64), 5, ref=guard, name="guard_eq fails at a run with another value")
    case("coil.guard_eq", R(3, 4), T([5.0]), 5, unsupported=True, name="guard_eq on a float value (refused)")
    case("aten.prelu", R(2, 3, 4), R(4), expect_error=True, name="prelu weight of the wrong length")
    case("aten.prelu", R(2, 3, 4), R(3, 1), expect_error=True, name="prelu 2-d weight")
    case("aten.prelu", R(2, 3, dt=i64), R(3), expect_error=True, name="prelu i64 input")
    case("aten.hardtanh", R(7, 13), -0.5, 2.0)
    case("aten.hardtanh", R(7, 13), 0, 6)
    case("aten.hardtanh", R(2, 6, dt=i64), -3, 4)
    case("aten.hardtanh", R(2, 6, dt=u8), 2, 9)
    case("aten.logical_not", R(4, 3), name="logical_not f32")
    case("aten.logical_not", T([0.0, -0.0, float("nan"), 1.0, float("inf")]), name="logical_not specials")


def clamp_pow_cases():
    x = R(5, 7)
    case("aten.clamp", x, -1.0, 1.5)
    case("aten.clamp", x, -1.0)
    case("aten.clamp", x, None, 0.5)
    case("aten.clamp", x, kwargs={"max": 0.5}, name="clamp(max=) as kwarg")
    case("aten.clamp", x, 1.0, -1.0, name="clamp min > max")
    case("aten.clamp", T(SPECIAL), -1.0, 1.0, name="clamp specials")
    case("aten.clamp", R(3, 4, dt=i64), -3, 4)
    case("aten.clamp", R(3, 4, dt=i32), -2.5, 4.5, name="clamp i32 with float bounds")
    case("aten.clamp", R(3, 4, dt=u8), 3, 12)
    case("aten.clamp", R(3, 4, dt=i8), -3)
    case("aten.clamp", R(3, 4, dt=bf16), -1.0, 1.0)
    case("aten.clamp", R(3, 4, dt=f16), -1.0, 1.0)
    case("aten.clamp", R(3, 4, dt=f64), -1, 2)
    case("aten.clamp", R(), 0.0, 0.5)
    case("aten.clamp", R(2, 3, dt=b8), 0, 1, name="clamp bool with int bounds")
    case("aten.clamp", x)  # neither bound
    for op, v in (("aten.clamp_min", 0.25), ("aten.clamp_max", -0.25)):
        case(op, x, v)
        case(op, R(3, 4, dt=i64), 2)
        case(op, R(3, 4, dt=i64), 2.5)
        case(op, R(3, 4, dt=u8), 7)
        case(op, R(3, 4, dt=f64), v)
        case(op, R(3, 4, dt=bf16), v)
        case(op, T(SPECIAL), v, name=op[5:] + " specials")
    ts = "aten.pow.Tensor_Scalar"
    xp = R(4, 5, lo=0.1, hi=3)
    for e in (2, 3, 0, 1, -1, 0.5, -0.5, 2.5, 0.0, -2):
        case(ts, xp, e)
    case(ts, R(4, 5), 2)
    case(ts, R(4, 5), 3.0)
    case(ts, T(SPECIAL), 2, name="pow.Tensor_Scalar specials ^2")
    case(ts, T(SPECIAL), 0.5, name="pow.Tensor_Scalar specials ^0.5")
    case(ts, R(3, 4, dt=i64), 2)
    case(ts, R(3, 4, dt=i64, lo=0), 3)
    case(ts, R(3, 4, dt=i64, lo=0), 0.5)
    case(ts, R(3, 4, dt=i32), 2)
    case(ts, R(3, 4, dt=u8, hi=15), 2)
    case(ts, R(3, 4, dt=f64, lo=0), 1.5)
    case(ts, R(3, 4, dt=bf16, lo=0), 2)
    case(ts, R(3, 4, dt=f16, lo=0), 0.5)
    case(ts, R(3, 4, dt=i64, lo=1), -1)  # integers to negative powers: PyTorch raises
    case(ts, T(SPECIAL), -0.5, name="pow.Tensor_Scalar specials ^-0.5")
    case(ts, T(SPECIAL), 3, name="pow.Tensor_Scalar specials ^3")
    case(ts, T(SPECIAL), -2, name="pow.Tensor_Scalar specials ^-2")
    tt = "aten.pow.Tensor_Tensor"
    case(tt, R(3, 1, 5, lo=0.1, hi=2), R(4, 1, lo=-2, hi=2))
    case(tt, R(4, 5, lo=0.1, hi=2), R(lo=-1, hi=2))
    case(tt, R(3, 4, dt=i64, lo=0, hi=5), R(4, dt=i64, lo=0, hi=4))
    case(tt, T([2, 3, 1, -1, -1, -2, 0], i64), T([-1, 2, -3, -1, -2, -1, 2], i64),
         name="pow.Tensor_Tensor integers with negative exponents")
    case(tt, R(3, 4, dt=i64, lo=0, hi=5), R(4, dt=f32, lo=0, hi=2))
    case(tt, R(3, 4, dt=f64, lo=0.1), R(3, 4, dt=f32))
    case(tt, R(3, 4, dt=bf16, lo=0.1), R(3, 4, dt=bf16, lo=-1, hi=2))
    case(tt, R(2, 3, lo=0.1), R(dt=i64, lo=2, hi=2), name="pow.Tensor_Tensor zero-dim i64 exponent")


def promote_unsupported(a, b):
    return {a, b} == {i8, u8}


def binary_cases():
    # every dtype pair for add, mul, eq (and sub for the non-bool pairs)
    for da in ALL_DT:
        for db in ALL_DT:
            x, y = R(2, 3, dt=da), R(3, dt=db)
            uns = promote_unsupported(da, db)
            case("aten.add.Tensor", x, y, unsupported=uns)
            case("aten.mul.Tensor", x, y, unsupported=uns)
            case("aten.eq.Tensor", x, R(2, 3, dt=db) if da == db else y, unsupported=uns)
            case("aten.where.self", R(2, 3, dt=b8), x, y, unsupported=uns)
    for op in ("add", "sub", "rsub"):
        tn, sn = "aten.%s.Tensor" % op, "aten.%s.Scalar" % op
        case(tn, R(3, 1, 5), R(4, 1))
        case(tn, R(3, 1, 5), R(4, 1), kwargs={"alpha": 2})
        case(tn, R(7, 13), R(13), kwargs={"alpha": 0.5})
        case(tn, R(3, 4, dt=i64), R(4, dt=i64), kwargs={"alpha": 3})
        case(tn, R(3, 4, dt=i64), R(4, dt=i64), kwargs={"alpha": 0.5})  # float alpha, int result
        case(tn, R(3, 4, dt=i32), R(3, 4, dt=f32), kwargs={"alpha": 0.5})
        case(tn, R(3, 4), R(dt=f64), name=op + ".Tensor f32 with zero-dim f64")
        case(tn, R(3, 4, dt=i32), R(dt=f64), name=op + ".Tensor i32 with zero-dim f64")
        case(tn, R(3, 4, dt=i8), R(dt=i64), name=op + ".Tensor i8 with zero-dim i64")
        case(tn, R(3, 4, dt=u8), R(dt=i64), name=op + ".Tensor u8 with zero-dim i64")
        case(tn, R(3, 4, dt=b8), R(dt=i32), name=op + ".Tensor bool with zero-dim i32")
        case(tn, R(dt=f16), R(dt=i32), name=op + ".Tensor zero-dim f16 with zero-dim i32")
        case(tn, R(dt=i32), R(dt=f64), name=op + ".Tensor zero-dims i32, f64")
        case(tn, R(3, 4, dt=f16), R(3, 4, dt=bf16))
        case(tn, R(1, 0, 3), R(5, 1, 1), name=op + ".Tensor empty broadcast")
        case(tn, R(3, 4), R(2, 4))
        case(tn, R(3, 4, dt=b8), R(3, 4, dt=b8))
        case(tn, R(3, 4), R(4, dt=b8))
        case(tn, R(3, 4, dt=i32), R(dt=b8))
        case(sn, R(3, 4), True)
        case(sn, R(3, 4), 2)
        case(sn, R(3, 4), 2.5, 3)
        case(sn, R(3, 4, dt=i64), 2)
        case(sn, R(3, 4, dt=i32), 2.5)
        case(sn, R(3, 4, dt=u8), 7, 2)
        case(sn, R(3, 4, dt=b8), 1)
        case(sn, R(3, 4, dt=bf16), 0.3)
        case(sn, R(3, 4, dt=f16), 1e-3)
        case(sn, R(3, 4, dt=f64), 1 / 3)
        case(sn, R(), -1.5)
        case(sn, R(3, 4), float("inf"))
    for op in ("mul", "div"):
        tn, sn = "aten.%s.Tensor" % op, "aten.%s.Scalar" % op
        case(tn, R(3, 1, 5), R(4, 1))
        case(tn, R(7, 13), R(7, 1))
        case(tn, R(3, 4, dt=i64), R(4, dt=i64, lo=1))
        case(tn, R(3, 4, dt=i32), R(3, 4, dt=u8, lo=1))
        case(tn, R(3, 4, dt=f64), R(dt=f32))
        case(tn, R(3, 4, dt=bf16), R(4, dt=bf16))
        case(tn, R(3, 4, dt=f16), R(4, dt=f16, lo=0.5))
        case(tn, R(3, 4, dt=i8), R(dt=f64))
        case(tn, R(3, 4, dt=b8), R(3, 4, dt=b8))
        case(tn, T([1.0, -1.0, 0.0, float("inf"), float("nan")]), T([0.0, 0.0, 0.0, 0.0, 1.0]),
             name=op + ".Tensor by zero and specials")
        case(sn, R(3, 4), 2)
        case(sn, R(3, 4), -0.75)
        case(sn, R(3, 4, dt=i64), 3)
        case(sn, R(3, 4, dt=i64), 2.5)
        case(sn, R(3, 4, dt=u8), 2)
        case(sn, R(3, 4, dt=b8), 2)
        case(sn, R(3, 4, dt=bf16), 3)
        case(sn, R(3, 4), 0)
        case(sn, R(), 7)
    dm = "aten.div.Tensor_mode"
    vals = T([7.0, -7.0, 7.5, -7.5, 0.5, -0.5, 6.0, -6.0, 3.0, 0.0])
    dens = T([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -3.0, 2.5, 0.7, -1.5])
    for mode in ("trunc", "floor", None):
        case(dm, vals, dens, kwargs={"rounding_mode": mode})
        case(dm, R(3, 1, 5), R(4, 1), kwargs={"rounding_mode": mode})
        case(dm, vals.long(), T([2, 2, -2, -2, 3, 3, -3, 4, 1, -1], i64), kwargs={"rounding_mode": mode})
        case(dm, R(3, 4, dt=i32), R(4, dt=i32, lo=1, hi=5), kwargs={"rounding_mode": mode})
        case(dm, R(3, 4, dt=u8), R(4, dt=u8, lo=1, hi=5), kwargs={"rounding_mode": mode})
        case(dm, R(3, 4, dt=i8), R(dt=f32, lo=0.5, hi=2), kwargs={"rounding_mode": mode})
        case(dm, R(3, 4, dt=b8), R(3, 4, dt=b8) | True, kwargs={"rounding_mode": mode})
        case(dm, R(3, 4, dt=f64), R(4, dt=f64), kwargs={"rounding_mode": mode})
        case(dm, R(3, 4, dt=bf16), R(4, dt=bf16), kwargs={"rounding_mode": mode})
        case(dm, T([1.0, -1.0, 0.0]), T([0.0, 0.0, 0.0]), kwargs={"rounding_mode": mode},
             name="div.Tensor_mode %s float by zero" % mode)
    case(dm, T([1, 2], i64), T([1, 0], i64), kwargs={"rounding_mode": "floor"}, name="div floor int by zero")
    case(dm, T([1, 2], i64), T([1, 0], i64), kwargs={"rounding_mode": "trunc"}, name="div trunc int by zero")
    case(dm, T([1, 2], i64), T([1, 0], i64), kwargs={"rounding_mode": None}, name="div true int by zero")
    case(dm, R(3), R(3), kwargs={"rounding_mode": "round"})
    case(dm, R(3, 4, dt=b8), T(2, i64), kwargs={"rounding_mode": "floor"}, name="div floor bool by zero-dim i64")
    for op in ("aten.maximum", "aten.minimum"):
        case(op, R(3, 1, 5), R(4, 1))
        case(op, T([float("nan"), 1.0, float("-inf"), 2.0]), T([1.0, float("nan"), 3.0, float("inf")]),
             name=op[5:] + " nan/inf")
        case(op, R(3, 4, dt=i64), R(4, dt=i64))
        case(op, R(3, 4, dt=i32), R(3, 4, dt=f64))
        case(op, R(3, 4, dt=u8), R(4, dt=u8))
        case(op, R(3, 4, dt=b8), R(4, dt=b8))
        case(op, R(3, 4, dt=bf16), R(4, dt=f16))
        case(op, R(3, 4, dt=i8), R(dt=f32))
        case(op, R(), R())
    # integer wrap-around, as in C and ATen
    case("aten.add.Tensor", T([100, -100, 127], i8), T([100, -100, 1], i8), name="add i8 wraps")
    case("aten.sub.Tensor", T([3, 0, 255], u8), T([5, 1, 0], u8), name="sub u8 wraps")
    case("aten.mul.Tensor", T([16, 200], u8), T([16, 2], u8), name="mul u8 wraps")
    case("aten.add.Tensor", T([2 ** 31 - 1, -2 ** 31], i32), T([1, -1], i32), name="add i32 wraps")
    case("aten.mul.Scalar", T([2 ** 62, 3], i64), 4, name="mul i64 wraps")
    case("aten.add.Scalar", T([2 ** 53 + 1, -(2 ** 60) - 3], i64), 0, name="add i64 beyond 2^53 exact")


def compare_cases():
    for op in ("eq", "ne", "lt", "le", "gt", "ge"):
        tn, sn = "aten.%s.Tensor" % op, "aten.%s.Scalar" % op
        a = R(3, 1, 5, dt=i64, lo=-2, hi=2).float()
        case(tn, a, R(4, 1, dt=i64, lo=-2, hi=2).float())
        case(tn, R(3, 4, dt=i64, lo=-3, hi=3), R(4, dt=f32, lo=-3, hi=3).round())
        case(tn, R(3, 4, dt=i32, lo=-3, hi=3), R(4, dt=i64, lo=-3, hi=3))
        case(tn, R(3, 4, dt=u8, hi=3), R(4, dt=u8, hi=3))
        case(tn, R(3, 4, dt=b8), R(4, dt=b8))
        case(tn, R(3, 4, dt=bf16), R(4, dt=f32))
        case(tn, R(3, 4).round().to(f16), R(dt=f64).round())
        case(tn, T([float("nan"), 1.0, float("inf"), -0.0]), T([float("nan"), float("nan"), float("inf"), 0.0]),
             name=op + ".Tensor nan/inf/-0")
        case(tn, R(3, 4, dt=i8), R(dt=f32), name=op + ".Tensor i8 with zero-dim f32")
        case(tn, T([2 ** 24 + 1], i64), T([2.0 ** 24]), name=op + ".Tensor i64 vs f32 compares in f32")
        case(sn, R(3, 4, dt=i64, lo=-3, hi=3), 1)
        case(sn, R(3, 4, dt=i64, lo=-3, hi=3), 1.5)
        case(sn, R(3, 4, dt=u8, hi=3), 2)
        case(sn, R(3, 4).round(), 0.0)
        case(sn, R(3, 4, dt=b8), True if op in ("eq", "ne") else 0)
        case(sn, R(3, 4, dt=f64), 0.1)
        case(sn, R(3, 4, dt=bf16), 0.5)
        case(sn, T([float("nan"), 1.0, float("inf")]), float("nan"), name=op + ".Scalar vs nan")
        case(sn, T([float("nan"), 1.0, float("inf")]), float("inf"), name=op + ".Scalar vs inf")
        case(sn, R(), 0)
        case(sn, T([16777217], i32), 16777216.0, name=op + ".Scalar i32 vs float scalar in f32")
    for op in ("aten.logical_and", "aten.logical_or"):
        case(op, R(3, 1, 5, dt=b8), R(4, 1, dt=b8))
        case(op, R(3, 4, dt=i64, lo=-1, hi=1), R(4, dt=f32).round())
        case(op, T([float("nan"), 0.0, -0.0, 1.0]), T([1.0, 1.0, 1.0, 0.0]))
        case(op, R(3, 4, dt=u8, hi=1), R(3, 4, dt=i8, lo=-1, hi=1), unsupported=True,
             name=op[5:] + " u8 with i8 (coil rejects; PyTorch accepts)")
        case(op, R(3, 4, dt=bf16), R(dt=b8))
        case(op, R(3, 4), R(2, 4))
    for op in ("aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_xor.Tensor"):
        case(op, R(3, 1, 5, dt=b8), R(4, 1, dt=b8))
        case(op, R(2, 1, 1, 7, dt=b8), R(1, 1, 7, 7, dt=b8))
        case(op, R(3, 4, dt=i64, lo=-1000, hi=1000), R(4, dt=i64, lo=-1000, hi=1000))
        case(op, R(3, 4, dt=i32, lo=-99, hi=99), R(3, 4, dt=u8), name=op[5:] + " i32 with u8 (promotes to i32)")
        case(op, R(5, dt=i8, lo=-128, hi=127), R(5, dt=b8), name=op[5:] + " i8 with bool")
        case(op, R(3, 4, dt=u8), R(dt=i64, lo=0, hi=255), name=op[5:] + " u8 with a 0-dim i64")
        case(op, R(3, 4), R(3, 4, dt=b8), expect_error=True, name=op[5:] + " f32 with bool")
        sop = op.replace(".Tensor", ".Scalar")
        case(sop, R(3, 4, dt=i64, lo=-50, hi=50), 0x5a)
        case(sop, R(3, 4, dt=u8), 7)
        case(sop, R(3, 4, dt=b8), True, ref=getattr(torch, op[5:-7]),
             name=sop[5:] + " bool with True (bool, as torch.%s gives; torch.ops' call gives i64)" % op[5:-7])
        case(sop, R(3, 4, dt=i32, lo=-9, hi=9), 2.5, expect_error=True, name=sop[5:] + " float scalar")
    case("aten.bitwise_not", R(3, 1, 5, dt=b8))
    case("aten.bitwise_not", R(4, dt=i32, lo=-99, hi=99))
    case("aten.bitwise_not", R(4, dt=u8))
    case("aten.bitwise_not", R(4, dt=i64, lo=-2 ** 40, hi=2 ** 40))
    case("aten.bitwise_not", R(4), expect_error=True, name="bitwise_not f32")
    # shifts: counts in [0, bits) (PyTorch 1.13 leaves larger ones undefined)
    for op, sop in (("aten.__lshift__.Tensor", "aten.__lshift__.Scalar"), ("aten.__rshift__.Tensor", "aten.__rshift__.Scalar"),
                    ("aten.bitwise_left_shift.Tensor", None), ("aten.bitwise_right_shift.Tensor", None)):
        case(op, R(3, 4, dt=i64, lo=-1000, hi=1000), R(4, dt=i64, lo=0, hi=40))
        case(op, R(3, 4, dt=i32, lo=-1000, hi=1000), R(3, 4, dt=i32, lo=0, hi=31))
        case(op, R(3, 4, dt=u8), R(3, 4, dt=u8, lo=0, hi=7))
        case(op, R(3, 4, dt=i8, lo=-128, hi=127), R(4, dt=i8, lo=0, hi=7))
        case(op, R(3, 4, dt=b8), R(3, 4, dt=b8), expect_error=True, name=op[5:] + " bool")
        case(op, R(3, 4), R(3, 4, dt=i64, lo=0, hi=3), expect_error=True, name=op[5:] + " f32")
        if sop:
            case(sop, R(3, 4, dt=i64, lo=-1000, hi=1000), 3)
            case(sop, R(3, 4, dt=i32, lo=-1000, hi=1000), 31)
            case(sop, R(3, 4, dt=u8), 2)
    rm, rs = "aten.remainder.Tensor", "aten.remainder.Scalar"
    vals = T([7.0, -7.0, 7.5, -7.5, 0.5, -0.5, 6.0, -6.0, 3.0, 0.0, 1e30, -2.0])
    dens = T([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -3.0, 2.5, 0.7, -1.5, 3.0, float("inf")])
    case(rm, vals, dens)
    case(rm, R(3, 1, 5, lo=-9, hi=9), R(4, 1, lo=-3, hi=3))
    case(rm, vals.double(), dens.double())
    case(rm, R(3, 4, dt=bf16, lo=-9, hi=9), R(4, dt=bf16, lo=0.5, hi=3))
    case(rm, T([7, -7, 7, -7, 0, 5, -9], i64), T([2, 2, -2, -2, 3, -3, 4], i64))
    case(rm, R(3, 4, dt=i32, lo=-50, hi=50), R(4, dt=i32, lo=1, hi=9))
    case(rm, R(3, 4, dt=i8, lo=-128, hi=127), R(4, dt=i8, lo=-9, hi=-1))
    case(rm, R(3, 4, dt=u8), R(4, dt=u8, lo=1, hi=9))
    case(rm, R(3, 4, dt=i64, lo=-9, hi=9), R(4, lo=0.5, hi=2), name="remainder i64 by f32 (promotes)")
    case(rm, T([1.0, -1.0, 0.0]), T([0.0, 0.0, 0.0]), name="remainder float by zero (nan)")
    case(rm, T([1, 2], i64), T([1, 0], i64), name="remainder int by zero")
    case(rm, R(3, dt=b8), R(3, dt=b8), expect_error=True, name="remainder bool")
    case(rs, vals, 2.5)
    case(rs, vals, -3)
    case(rs, R(3, 4, dt=i64, lo=-50, hi=50), 7)
    case(rs, R(3, 4, dt=i64, lo=-50, hi=50), -7)
    case(rs, R(3, 4, dt=i32, lo=-50, hi=50), 2.5, name="remainder.Scalar i32 by 2.5 (promotes)")


def where_cases():
    w = "aten.where.self"
    case(w, R(3, 1, 5, dt=b8), R(4, 1), R())
    case(w, R(4, 5, dt=b8), R(5, dt=i64), R(4, 5, dt=f32))
    case(w, R(dt=b8), R(2, 3), R(2, 3))
    case(w, R(2, 3, dt=b8), R(dt=f64), R(dt=f32), name="where zero-dim f64 and f32 values")
    case(w, R(2, 3, dt=b8), R(2, 3, dt=f32), R(dt=f64), name="where f32 with zero-dim f64")
    case(w, R(2, 3, dt=b8), R(2, 3, dt=i32), R(dt=i64), name="where i32 with zero-dim i64")
    # PyTorch 1.13 accepts (deprecated) a u8 condition; the reference avoids its C++ warning on stderr
    case(w, R(2, 3, dt=u8, hi=1), R(2, 3), R(2, 3), ref=lambda c, x, y: aten.where.self(c.bool(), x, y),
         name="where u8 condition")
    case(w, R(2, 3, dt=f32), R(2, 3), R(2, 3), name="where f32 condition")
    case(w, R(2, 3, dt=b8), R(2, 3), R(4, 3))
    case(w, R(2, 3, dt=b8), T([float("nan")] * 3), R(2, 3), name="where nan values")
    mf = "aten.masked_fill.Scalar"
    case(mf, R(3, 5), R(1, 5, dt=b8), -1.5)
    case(mf, R(3, 5), R(3, 5, dt=b8), float("-inf"))
    case(mf, R(2, 3, 5), R(5, dt=b8), 2)
    case(mf, R(3, 5, dt=i64), R(3, 5, dt=b8), 7)
    case(mf, R(3, 5, dt=i64), R(3, 5, dt=b8), 2.7, name="masked_fill.Scalar i64 with 2.7")
    case(mf, R(3, 5, dt=u8), R(5, dt=b8), 200)
    case(mf, R(3, 5, dt=b8), R(5, dt=b8), True)
    case(mf, R(3, 5, dt=bf16), R(5, dt=b8), 0.1)
    case(mf, R(3, 5, dt=f16), R(5, dt=b8), -7.0)
    case(mf, R(3, 5, dt=f64), R(dt=b8), 1 / 3)
    case(mf, R(3, 5), R(4, 3, 5, dt=b8), 0.0, name="masked_fill.Scalar mask broadcasting self to a bigger shape")
    case(mf, R(1, 5), R(3, 1, dt=b8), float("-inf"), name="masked_fill.Scalar self and mask both broadcasting")
    case(mf, R(3, 5), R(3, 5, dt=i64), 0.0)  # mask must be bool
    for op in ("aten.zeros_like", "aten.ones_like"):
        case(op, R(3, 4))
        case(op, R(2, 3, dt=i64), kwargs={"dtype": f32})
        case(op, R(5, dt=b8))
    case("aten.full_like", R(3, 4), 2.5)
    case("aten.full_like", R(2, 3, dt=i64), 7)
    case("aten.full_like", R(2, 3), float("-inf"), kwargs={"dtype": bf16})
    mt = "aten.masked_fill.Tensor"
    case(mt, R(3, 5), R(1, 5, dt=b8), R())
    case(mt, R(3, 5, dt=i32), R(3, 5, dt=b8), R(dt=i32))
    case(mt, R(3, 5), R(3, 5, dt=b8), R(dt=f64))
    case(mt, R(3, 5, dt=f64), R(5, dt=b8), R(dt=f32))
    case(mt, R(3, 5, dt=i64), R(5, dt=b8), R(dt=i64))
    case(mt, R(3, 5), R(3, 5, dt=b8), R(1))


CAST_VALUES = [0.0, 1.0, -1.0, 2.75, -2.75, 0.3, -0.3, 100.5, -100.5, 127.0, -128.0, 200.0, 255.0, 1000.25,
               -70000.0, 65504.0, 70000.0, 1e-6, 1.00390625, 2 ** 31 - 1.0, -2.0 ** 31]
RANGE = {u8: (0, 255), i8: (-128, 127), i32: (-2 ** 31, 2 ** 31 - 1), i64: (-2 ** 63, 2 ** 63 - 1)}


def cast_values(src, dst):
    vals = []
    for v in CAST_VALUES:
        if src in RANGE:
            v = float(math.trunc(v))
            lo, hi = RANGE[src]
            if not lo <= v <= hi:
                continue
        if src == b8:
            v = float(v != 0)
        sv = torch.tensor([v], dtype=f64).to(src)
        # out-of-range float -> int conversions are undefined in C++ (and in ATen): leave them out
        fv = sv.double().item()
        if src.is_floating_point and dst in RANGE:
            lo, hi = RANGE[dst]
            if not math.isfinite(fv) or not (lo <= math.trunc(fv) <= hi) or (dst == i32 and abs(fv) > 2 ** 31 - 129):
                continue
        vals.append(sv)
    return torch.cat(vals)


def to_copy_cases():
    for src in ALL_DT:
        for dst in ALL_DT:
            x = cast_values(src, dst)
            case("aten._to_copy", x, kwargs={"dtype": dst})
            case("aten._to_copy", x.reshape(1, -1), kwargs={"dtype": dst}, name="_to_copy %s->%s (kw %s)" % (
                CNAME[src], CNAME[dst], "dtype"))
        case("aten._to_copy", R(2, 3, dt=src))
    case("aten._to_copy", T([1.0, float("nan"), float("inf"), float("-inf"), -0.0]), kwargs={"dtype": f16},
         name="_to_copy f32->f16 specials")
    case("aten._to_copy", T([1.0, float("nan"), float("inf"), float("-inf"), -0.0]), kwargs={"dtype": bf16},
         name="_to_copy f32->bf16 specials")
    case("aten._to_copy", T([float("nan"), 0.0, -0.0]), kwargs={"dtype": b8}, name="_to_copy nan->bool")
    case("aten._to_copy", T([1 + 2 ** -8, 1 + 3 * 2 ** -9, 1 + 2 ** -9, 65519.0, 65520.0, 6e-8, 3e-8, 1e-5],
                            f64), kwargs={"dtype": f16}, name="_to_copy f64->f16 rounding and subnormals")
    case("aten._to_copy", T([1 + 2 ** -8, 1 + 3 * 2 ** -9, 1 + 2 ** -9, 3.4e38, 1e-40], f64),
         kwargs={"dtype": bf16}, name="_to_copy f64->bf16 rounding")
    case("aten._to_copy", R(2, 3), kwargs={"dtype": f64, "layout": None, "device": None, "pin_memory": None,
                                           "non_blocking": False, "memory_format": None},
         name="_to_copy with layout/device/memory_format kwargs")
    case("aten._to_copy", T([300, -1, 2 ** 40 + 7, -(2 ** 33) - 2], i64), kwargs={"dtype": u8},
         name="_to_copy i64->u8 wraps")
    case("aten._to_copy", T([300, -129, 2 ** 40 + 7], i64), kwargs={"dtype": i8}, name="_to_copy i64->i8 wraps")
    case("aten._to_copy", T([2 ** 32 + 5, 2 ** 31, -(2 ** 31) - 1], i64), kwargs={"dtype": i32},
         name="_to_copy i64->i32 wraps")
    case("aten._to_copy", T([2 ** 62 + 1, -(2 ** 53) - 1], i64), kwargs={"dtype": i64},
         name="_to_copy i64->i64 exact beyond 2^53")


QD = "quantized_decomposed."
QTYPES = {u8: torch.quint8, i8: torch.qint8, i32: torch.qint32}


def q_ref(x, s, z, lo, hi, dt, axis=None):
    """ATen's own quantizers (then the narrower clamp)."""
    if axis is None:
        q = torch.quantize_per_tensor(x.float(), float(s), int(z), QTYPES[dt])
    else:
        q = torch.quantize_per_channel(x.float(), s.double(), z.long(), axis, QTYPES[dt])
    return q.int_repr().clamp(lo, hi)


def dq_ref(q, s, z, lo, hi, dt, axis=None):
    if axis is None:
        return torch._make_per_tensor_quantized_tensor(q, float(s), int(z)).dequantize()
    return torch._make_per_channel_quantized_tensor(q, s.double(), z.long(), axis).dequantize()


def cq_ref(x, lo, hi, eps, dt):
    """PyTorch's own observer (per-tensor affine), its zero point as i64."""
    from torch.ao.quantization.observer import MinMaxObserver
    ob = MinMaxObserver(dtype=QTYPES[dt], quant_min=lo, quant_max=hi, eps=eps)
    ob(x.float())
    s, z = ob.calculate_qparams()
    return s.reshape(1).float(), z.reshape(1).long()


def quant_cases():
    qpt, dqpt = QD + "quantize_per_tensor", QD + "dequantize_per_tensor"
    qpc, dqpc = QD + "quantize_per_channel", QD + "dequantize_per_channel"
    tq = lambda x, s, z, lo, hi, dt: q_ref(x, s.item(), z.item(), lo, hi, dt)  # noqa: E731
    tdq = lambda x, s, z, lo, hi, dt: dq_ref(x, s.item(), z.item(), lo, hi, dt)  # noqa: E731
    pq = lambda x, s, z, a, lo, hi, dt: q_ref(x, s, z, lo, hi, dt, a)  # noqa: E731
    pdq = lambda x, s, z, a, lo, hi, dt: dq_ref(x, s, z, lo, hi, dt, a)  # noqa: E731
    x = R(2, 3, 5, 7)
    case(qpt, x, 0.0237, 113, 0, 255, u8, ref=q_ref, covers=qpt)
    case(qpt, x, 0.05, 0, -128, 127, i8, ref=q_ref, covers=qpt)
    case(qpt, x, 0.01, 3, 0, 127, u8, ref=q_ref, name="quantize_per_tensor narrower range (reduce_range)")
    s = 0.0237
    case(qpt, (torch.arange(-300, 300).float() + 0.5) * s, s, 113, 0, 255, u8, ref=q_ref,
         name="quantize_per_tensor ties round to even")
    case(qpt, R(4, 9, dt=bf16), 0.03, 7, -128, 127, i8, ref=q_ref, name="quantize_per_tensor from bf16")
    case(qpt, Sym(R(3, 6), ["b", 6]), 0.02, 128, 0, 255, u8, ref=q_ref, name="quantize_per_tensor symbolic")
    case(qpt, x, 0.0, 0, 0, 255, u8, unsupported=True, name="quantize_per_tensor scale 0 (refused)")
    case(qpt, x, 0.1, 300, 0, 255, u8, unsupported=True, name="quantize_per_tensor zero point out of range")
    case(qpt, x, 0.1, 0, 0, 300, u8, unsupported=True, name="quantize_per_tensor quant_max out of range")
    case(qpt, x, 0.1, 0, 0, 255, f32, unsupported=True, name="quantize_per_tensor to f32 (refused)")
    case(qpt, R(3, 4, dt=i32), 0.1, 0, 0, 255, u8, unsupported=True, name="quantize_per_tensor of ints")
    q = R(2, 3, 5, 7, dt=u8, lo=0, hi=255)
    case(dqpt, q, 0.0237, 113, 0, 255, u8, ref=dq_ref)
    case(dqpt, R(4, 6, dt=i8, lo=-128, hi=127), 0.05, -3, -128, 127, i8, ref=dq_ref)
    case(dqpt, q, 0.1, 0, -128, 127, i8, unsupported=True, name="dequantize_per_tensor dtype mismatch")
    case(QD + "quantize_per_tensor.tensor", x, T([0.0237], f64), T([113], i64), 0, 255, u8, ref=tq)
    case(QD + "quantize_per_tensor.tensor", x, Param(T(0.05)), Param(T(-2, i64)), -128, 127, i8, ref=tq,
         name="quantize_per_tensor.tensor params, 0-d")
    case(QD + "dequantize_per_tensor.tensor", q, T([0.0237]), T([113], i32), 0, 255, u8, ref=tdq)
    case(QD + "quantize_per_tensor.tensor", x, T([0.1, 0.2]), T([1, 1], i64), 0, 255, u8, unsupported=True,
         name="quantize_per_tensor.tensor two scales (refused)")
    w = R(8, 3, 3, 3)
    ws = (w.abs().amax((1, 2, 3)) / 127).double()
    wz = torch.zeros(8, dtype=i64)
    case(qpc, w, ws, wz, 0, -128, 127, i8, ref=pq)
    case(qpc, Param(w), Param(ws), Param(wz), 0, -128, 127, i8, ref=pq, name="quantize_per_channel params")
    case(qpc, R(4, 6), R(6, lo=0.01, hi=0.1), R(6, dt=i64, lo=0, hi=255), 1, 0, 255, u8, ref=pq,
         name="quantize_per_channel axis 1, asymmetric")
    case(qpc, R(4, 6), R(6, lo=0.01, hi=0.1), R(6, dt=i64, lo=0, hi=255), -1, 0, 255, u8, ref=pq,
         name="quantize_per_channel axis -1 (both refuse)")
    case(qpc, w, ws[:4], wz[:4], 0, -128, 127, i8, unsupported=True, name="quantize_per_channel wrong count")
    case(qpc, w, ws, wz, 4, -128, 127, i8, unsupported=True, name="quantize_per_channel axis out of range")
    qw = R(8, 3, 3, 3, dt=i8, lo=-128, hi=127)
    case(dqpc, qw, ws, wz, 0, -128, 127, i8, ref=pdq)
    case(dqpc, R(4, 6, dt=u8, lo=0, hi=255), R(6, lo=0.01, hi=0.1), R(6, dt=i64, lo=0, hi=255), 1, 0, 255, u8,
         ref=pdq, name="dequantize_per_channel axis 1")
    cq = QD + "choose_qparams.tensor"
    eps = torch.finfo(torch.float32).eps
    case(cq, x, 0, 255, eps, u8, ref=cq_ref, covers=cq)
    case(cq, R(4, 8, lo=0.5, hi=2), 0, 255, eps, u8, ref=cq_ref, name="choose_qparams all positive")
    case(cq, R(4, 8, lo=-3, hi=-1), 0, 255, eps, u8, ref=cq_ref, name="choose_qparams all negative")
    case(cq, R(5, 9, lo=-7, hi=2), -128, 127, eps, i8, ref=cq_ref, name="choose_qparams i8")
    case(cq, R(5, 9), 0, 127, eps, u8, ref=cq_ref, name="choose_qparams reduce_range")
    case(cq, torch.zeros(3, 4), 0, 255, 1e-5, u8, ref=cq_ref, name="choose_qparams all zeros (scale eps)")
    case(cq, R(257, 33, dt=bf16), 0, 255, eps, u8, ref=cq_ref, name="choose_qparams bf16, odd sizes")
    case(cq, Sym(R(3, 6), ["b", 6]), 0, 255, eps, u8, ref=cq_ref, name="choose_qparams symbolic")
    case(cq, x, 7, 7, eps, u8, unsupported=True, name="choose_qparams empty range (refused)")
    case(cq, x, 0, 255, 0.0, u8, unsupported=True, name="choose_qparams eps 0 (refused)")
    case(cq, R(3, 4, dt=i32), 0, 255, eps, u8, unsupported=True, name="choose_qparams of ints (refused)")
    case("aten.round", T([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, 1e10, float("nan"), float("inf")]))
    case("aten.round", R(3, 4, dt=bf16))
    case("aten.round", R(3, 4, dt=f64))
    case("aten.round", R(3, 4, dt=i32))


def reduce_cases():
    x = R(3, 4, 5)
    for op in ("aten.max", "aten.min"):  # over everything (.default)
        case(op, x)
        case(op, R(7, dt=i32), name=op[5:] + " of ints")
        case(op, T([1.0, float("nan"), 3.0]), name=op[5:] + " with a NaN")
        case(op, R(0, 3), name=op[5:] + " of an empty tensor (both refuse)")
    for op in ("aten.sum", "aten.mean"):
        case(op, x)
        case(op, R())
        case(op, R(13, 7, dt=f64))
        case(op, R(4, 9, dt=bf16), tolx=2)
        case(op, R(4, 9, dt=f16), tolx=2)
        case(op, x, kwargs={"dtype": f64})
        case(op, R(3, 4, dt=i32), kwargs={"dtype": f32})
        case(op, R(0, 3))
        case(op, R(3, 4, dt=i64))
        case(op, R(3, 4, dt=b8))
        case(op, R(3, 4, dt=u8))
        case(op, R(3, 4, dt=i8))
    for op in ("aten.sum.dim_IntList", "aten.mean.dim"):
        for dims in ([1], [0, 2], [-1], [-1, 0], [], [2, 1, 0]):
            case(op, x, dims)
            case(op, x, dims, True)
        case(op, x, None)
        case(op, x, None, True)
        case(op, x, Both(1, [1]), name=op[5:] + " int dim")
        case(op, R(), [0])
        case(op, R(), [], True)
        case(op, R(2, 0, 3), [1])
        case(op, R(13, 7, dt=f64), [0])
        case(op, R(4, 9, dt=bf16), [1], True, tolx=2)
        case(op, R(4, 9, dt=f16), [-1], tolx=2)
        case(op, R(4, 9, dt=i64), [1])
        case(op, R(4, 9, dt=i8), [1], kwargs={"dtype": f32})
        case(op, R(4, 9, dt=b8), [0])
        case(op, R(4, 9, dt=u8), [0], True)
        case(op, R(4, 9), [0], kwargs={"dtype": f64})
        case(op, x, [3])
        case(op, x, [1, 1])
    for op in ("aten.amax", "aten.amin"):
        for dims in ([], [1], [0, 2], [-1], [-3, -2]):
            case(op, x, dims)
            case(op, x, dims, True)
        case(op, R(), [])
        case(op, R(), [0], True)
        case(op, T([[1.0, float("nan"), 3.0], [float("-inf"), -1.0, float("inf")]]), [1],
             name=op[5:] + " nan/inf")
        case(op, R(4, 9, dt=i64), [1])
        case(op, R(4, 9, dt=i32), [0])
        case(op, R(4, 9, dt=u8), [0, 1])
        case(op, R(4, 9, dt=i8), [1], True)
        case(op, R(4, 9, dt=b8), [1], unsupported=True, name=op[5:] + " bool (coil rejects; PyTorch accepts)")
        case(op, R(4, 9, dt=f64), [1])
        case(op, R(4, 9, dt=bf16), [1])
        case(op, R(4, 9, dt=f16), [0])
        case(op, R(0, 3), [0])
        case(op, R(0, 3), [1])
    vc = "aten.var.correction"
    for dims in (None, [1], [0, 2], [-1], []):
        for corr in (None, 0, 1, 2):
            case(vc, x, dims, kwargs={"correction": corr})
        case(vc, x, dims, kwargs={"correction": None, "keepdim": True})
    case(vc, x, [1], ref=lambda a, d: aten.var.correction(a, d, correction=None),
         name="var.correction correction left out (defaults to None)")
    case(vc, R(1, 4), [0], kwargs={"correction": None}, name="var.correction single element (nan)")
    case(vc, R(3, 2), [0], kwargs={"correction": 5}, name="var.correction correction > N")
    case(vc, R(5, 13, dt=f64), [1], kwargs={"correction": None})
    case(vc, R(5, 13, dt=bf16), [1], kwargs={"correction": 1}, tolx=2)
    case(vc, R(5, 13, dt=f16), [1], kwargs={"correction": 0}, tolx=2)
    case(vc, R(3, 4, dt=i64), [1], kwargs={"correction": 1})
    case(vc, R(), None, kwargs={"correction": 0})
    case(vc, T([1e4 + 1, 1e4 + 2, 1e4 + 3, 1e4 + 4]), [0], kwargs={"correction": 1}, name="var.correction large mean")
    vd = "aten.var.dim"
    for dims in ([1], [0, 2], [-1], None):
        for unb in (True, False):
            case(vd, x, dims, unb)
            case(vd, x, dims, unb, True)
    case(vd, R(5, 13, dt=f64), [1], False)
    sc, sd = "aten.std.correction", "aten.std.dim"
    for dims in (None, [1], [0, 2], [-1]):
        for corr in (None, 0, 2):
            case(sc, x, dims, kwargs={"correction": corr})
        case(sc, x, dims, kwargs={"correction": None, "keepdim": True})
        case(sd, x, dims, True)
        case(sd, x, dims, False, True)
    case(sc, R(1, 4), [0], kwargs={"correction": None}, name="std.correction single element (nan)")
    case(sc, R(5, 13, dt=f64), [1], kwargs={"correction": 1})
    case(sc, R(5, 13, dt=bf16), [1], kwargs={"correction": 1}, tolx=2)
    case(sc, R(3, 4, dt=i64), [1], kwargs={"correction": 1})
    case(sc, T([1e4 + 1, 1e4 + 2, 1e4 + 3, 1e4 + 4]), [0], kwargs={"correction": 1}, name="std.correction large mean")
    lse = "aten.logsumexp"
    for dims in ([1], [0, 2], [-1]):
        case(lse, x, dims)
        case(lse, x, dims, True)
    case(lse, x, [], True, name="logsumexp over all dims (dim=[]), keepdim")
    case(lse, R(3, 5, lo=80, hi=100), [1], name="logsumexp of large values (no overflow)")
    case(lse, T([[float("-inf")] * 3, [float("inf"), 1.0, 2.0], [float("nan"), 0.0, 1.0], [-1e30, 0.0, 5.0]]), [1],
         name="logsumexp specials (all -inf, +inf, nan)")
    case(lse, R(4, 6, dt=f64), [0])
    case(lse, R(4, 6, dt=bf16), [1], tolx=2)
    case(lse, R(4, 6, dt=i64), [1], name="logsumexp of integers")
    case(lse, Sym(R(3, 7), ["n", 7]), [1], name="logsumexp symbolic")
    nm = "aten.norm.ScalarOpt_dim"
    for p in (2, 1, None, 2.0, 1.0):
        case(nm, x, p, [1])
        case(nm, x, p, [0, 2], True)
        case(nm, x, p, [-1])
    case(nm, x, 2, [])
    case(nm, R(5, 13, dt=f64), 2, [1])
    case(nm, R(5, 13, dt=bf16), 1, [1], tolx=2)
    case(nm, T([[3.0, 4.0], [float("inf"), 0.0]]), 2, [1], name="norm.ScalarOpt_dim inf")
    case(nm, x, 3, [1], unsupported=True, name="norm.ScalarOpt_dim p=3 (unsupported)")
    case(nm, x, float("inf"), [1], unsupported=True, name="norm.ScalarOpt_dim p=inf (unsupported)")
    case(nm, x, 0, [1], unsupported=True, name="norm.ScalarOpt_dim p=0 (unsupported)")
    case(nm, R(3, 4, dt=i64), 2, [1])
    md = "aten.max.dim"
    for d in (0, 1, 2, -1, -3):
        case(md, x, d)
        case(md, x, d, True)
    case(md, R(), 0)
    case(md, R(4, 9, dt=i64, lo=0, hi=3), 1, name="max.dim i64 with ties")
    case(md, R(4, 9, dt=u8), 0)
    case(md, R(4, 9, dt=b8), 1)
    case(md, R(4, 9, dt=f64), 1)
    case(md, R(4, 9, dt=bf16), 1)
    case(md, T([[1.0, float("nan"), 3.0, float("nan")], [float("-inf"), -1.0, float("inf"), 2.0]]), 1,
         name="max.dim nan/inf")
    case(md, T([[2.0, 5.0, 5.0, 1.0]]), 1, name="max.dim ties")
    case(md, x, 3)
    case(md, R(0, 3), 0)
    am = "aten.argmax"
    case(am, x)
    case(am, x, None, True)
    for d in (0, 1, -1):
        case(am, x, d)
        case(am, x, d, True)
    case(am, R(), None)
    case(am, R(), 0)
    case(am, R(4, 9, dt=i64, lo=0, hi=3), 1, name="argmax i64 with ties")
    case(am, R(4, 9, dt=i32, lo=0, hi=3), name="argmax flattened with ties")
    case(am, R(4, 9, dt=u8), 0)
    case(am, R(4, 9, dt=bf16), 1)
    case(am, T([[1.0, float("nan"), 3.0], [float("-inf"), -1.0, float("inf")]]), 1, name="argmax nan/inf")
    case(am, R(0, 3), 0)
    mn, an = "aten.min.dim", "aten.argmin"
    for d in (0, 1, -1):
        case(mn, x, d)
        case(mn, x, d, True)
        case(an, x, d)
        case(an, x, d, True)
    case(an, x)
    case(an, x, None, True)
    case(mn, R(), 0)
    case(an, R(), None)
    case(mn, R(4, 9, dt=i64, lo=0, hi=3), 1, name="min.dim i64 with ties")
    case(an, R(4, 9, dt=i32, lo=0, hi=3), name="argmin flattened with ties")
    case(mn, R(4, 9, dt=u8), 0, name="min.dim u8 (negated in i64)")
    case(an, T([[0, 255, 7], [200, 0, 3]], dt=u8), 1, name="argmin u8 with 0 and 255")
    case(an, T([[-128, 127, 0], [5, -128, 3]], dt=i8), 1, name="argmin i8 extremes")
    case(mn, R(4, 9, dt=b8), 1)
    case(mn, R(4, 9, dt=f64), 1)
    case(an, R(4, 9, dt=bf16), 1)
    case(mn, T([[1.0, float("nan"), 3.0, float("nan")], [float("inf"), -1.0, float("-inf"), 2.0]]), 1,
         name="min.dim nan/inf")
    case(an, T([[1.0, float("nan"), -3.0], [float("inf"), -1.0, float("-inf")]]), 1, name="argmin nan/inf")
    case(an, T([[2.0, 1.0, 1.0, 5.0]]), 1, name="argmin ties")
    case(mn, x, 3)
    case(an, R(0, 3), 0)


def view_cases():
    x = R(2, 3, 4)
    for op in ("aten.view", "aten._unsafe_view", "aten.reshape"):
        case(op, x, [6, 4])
        case(op, x, [-1])
        case(op, x, [4, -1, 2])
        case(op, x, [1, 24, 1])
        # one dim split and regrouped with two others: the index of dim 1 is i / (5*4), not i / 5*4
        case(op, R(2, 6, 5, 4), [2, 3, 40])
        case(op, R(6, 5, 4, 2), [2, 3, 2, 20])
        case(op, R(), [1])
        case(op, R(1), [])
        case(op, R(), [])
        case(op, R(0, 3), [3, 0])
        case(op, R(0, 3), [-1, 5])
        case(op, R(2, 3, dt=i64), [3, 2])
        case(op, R(2, 3, dt=b8), [6])
        case(op, R(2, 3, dt=bf16), [3, 1, 2])
        case(op, x, [5, 5])
        case(op, x, [-1, -1])
        case(op, Sym(x, ["b", 3, 4]), Both(["b*12"], [24]), name=op[5:] + " symbolic b*12")
        case(op, Sym(x, ["b", 3, 4]), [-1, 4], name=op[5:] + " symbolic -1")
    case("aten._reshape_alias", x, [6, 4], [4, 1])
    case("aten._reshape_alias", x, [24], [1])
    case("aten._reshape_alias", R(2, 3, dt=i8), [3, 2], [2, 1])
    fl = "aten.flatten.using_ints"
    case(fl, x)
    case(fl, x, 1)
    case(fl, x, 0, 1)
    case(fl, x, 1, -1)
    case(fl, x, -2, -1)
    case(fl, x, 1, 1)
    case(fl, R(), 0, -1)
    case(fl, R(2, 3, 4, 5, dt=u8), 1, 2)
    case(fl, x, 2, 1)
    pm = "aten.permute"
    case(pm, x, [0, 2, 1])
    case(pm, x, [2, 0, 1])
    case(pm, x, [-1, 0, -2])
    case(pm, R(2, 3, 4, 5, dt=i64), [3, 1, 0, 2])
    case(pm, R(), [])
    case(pm, R(1, 7, 1), [2, 1, 0])
    case(pm, R(2, 3, dt=b8), [1, 0])
    case(pm, x, [0, 0, 1])
    case(pm, x, [0, 1])
    tr = "aten.transpose.int"
    case(tr, x, 0, 1)
    case(tr, x, -1, -3)
    case(tr, x, 1, 1)
    case(tr, R(), 0, -1)
    case(tr, R(2, 3, 4, 5, dt=f16), 1, 3)
    case(tr, x, 0, 3)
    case("aten.t", R(3, 4))
    case("aten.t", R(5, dt=i32))
    case("aten.t", R())
    case("aten.t", R(2, 3, dt=bf16))
    case("aten.t", x)
    ex = "aten.expand"
    case(ex, R(3, 1), [2, 3, 4])
    case(ex, R(3, 1), [-1, 5])
    case(ex, R(1), [5])
    case(ex, R(), [2, 3])
    case(ex, R(3, 1, 5, dt=i64), [2, 3, 4, 5])
    case(ex, R(3, 1), [3, 0], name="expand to size 0")
    case(ex, R(3, 1, dt=b8), [3, 2], kwargs={"implicit": True})
    case(ex, R(3, 2), [3, 4])
    case(ex, R(3, 2), [-1, 3, 2])
    sl = "aten.slice.Tensor"
    y = R(5, 13)
    case(sl, y, 1, 2, 9)
    case(sl, y, 1, 2, 9, 3)
    case(sl, y, -1, -5, -1)
    case(sl, y, 0, -100, 100)
    case(sl, y, 1, 10, 3, name="slice start > end (empty)")
    case(sl, y, 1, 0, 9223372036854775807, 2, name="slice end INT64_MAX step 2")
    case(sl, y, 1, None, None, 4)
    case(sl, y, 1, -3, None)
    case(sl, y, 0, 5, 10, name="slice start at end")
    case(sl, y, 1, 20, 30, name="slice beyond the end")
    case(sl, y)
    case(sl, y, 0, 1, 4, 7, name="slice step larger than range")
    case(sl, R(2, 3, 4, dt=i64), 2, 1, 3)
    case(sl, R(2, 3, 4, dt=b8), -2, 0, 2)
    case(sl, Sym(y, ["n", 13]), 0, 0, None, name="slice symbolic dim start 0")
    case(sl, Sym(y, ["n", 13]), 1, 2, None, name="slice static dim of a symbolic input")
    case(sl, Sym(y, ["n", 13]), 0, 2, None, name="slice symbolic dim start 2 (length n-min(2, n))")
    case(sl, Sym(y, ["n", 13]), 0, 1, None, 2, name="slice symbolic dim, step 2")
    case(sl, Sym(y, ["n", 13]), 0, -3, -1, name="slice symbolic dim, negative bounds")
    case(sl, Sym(y, [5, "n"]), 1, Both("n-4", 9), Both("n-1", 12), name="slice size-expression bounds")
    case(sl, Sym(y, [5, "n"]), 1, Both("n-6", 7), None, 2, name="slice size-expression start, step 2")
    case(sl, y, 1, 0, 5, 0)  # step 0
    ss, se = "aten.slice_scatter", "aten.select_scatter"
    case(ss, R(5, 13), R(5, 4), 1, 2, 6)
    case(ss, R(5, 13), R(5, 3), 1, 2, 9, 3, name="slice_scatter step 3")
    case(ss, R(5, 13), R(2, 13), 0, -2, None, name="slice_scatter negative start")
    case(ss, R(4, 6, 3), R(4, 6, 0), 2, 3, 3, name="slice_scatter empty region")
    case(ss, R(3, 8, dt=i64), R(3, 2), 1, 6, 100, name="slice_scatter f32 src into i64 (truncated)")
    case(ss, R(3, 8, dt=bf16), R(3, 4, dt=bf16), 1, 0, 8, 2, name="slice_scatter bf16")
    case(ss, Sym(R(3, 9), ["b", 9]), Sym(R(3, 4), ["b", 4]), 1, 1, 9, 2, name="slice_scatter symbolic batch")
    case(ss, Sym(R(2, 9), [2, "n"]), Sym(R(2, 2), [2, 2]), 1, Both("n-3", 6), Both("n-1", 8),
         name="slice_scatter size-expression bounds")
    case(ss, R(5, 13), R(5, 5), 1, 2, 6, expect_error=True, name="slice_scatter src not the slice's shape")
    case(se, R(4, 5), R(5), 0, 2)
    case(se, R(4, 5, 3), R(4, 3), 1, -1, name="select_scatter negative index")
    case(se, Sym(R(4, 5), ["n", 5]), Sym(R(4), ["n"]), 1, 0, name="select_scatter symbolic")
    case(se, R(4, 5), R(5), 0, 4, expect_error=True, name="select_scatter index out of range")
    case(sl, y, 2, 0, 5)
    case(sl, R(), 0, 0, 1)
    se = "aten.select.int"
    case(se, y, 0, 2)
    case(se, y, 1, -1)
    case(se, y, -1, 12)
    case(se, y, -2, -5)
    case(se, R(7), 0, 3, name="select 1-d to 0-dim")
    case(se, R(2, 3, 4, dt=u8), 2, 0)
    case(se, y, 1, 13)
    case(se, y, 0, -6)
    sq = "aten.squeeze"
    case(sq, R(1, 3, 1, 4))
    case(sq, R(1, 1))
    case(sq, R())
    case(sq, R(3, 4, dt=i32))
    case(sq, R(1, 0, 1))
    case("aten.squeeze.dim", R(1, 3, 1, 4), 2)
    case("aten.squeeze.dim", R(1, 3, 1, 4), -4)
    case("aten.squeeze.dim", R(1, 3, 1, 4), 1, name="squeeze.dim on a non-1 dim (no-op)")
    case("aten.squeeze.dim", R(), 0)
    case("aten.squeeze.dim", R(1, dt=b8), -1)
    case("aten.squeeze.dim", R(3, 1), 2)
    us = "aten.unsqueeze"
    case(us, x, 0)
    case(us, x, 3)
    case(us, x, -1)
    case(us, x, -4)
    case(us, R(), 0)
    case(us, R(), -1)
    case(us, R(3, dt=f64), 1)
    case(us, x, 4)


def identity_cases():
    for op in ("aten.alias", "aten.detach", "aten.clone", "aten.contiguous", "aten.lift_fresh_copy"):
        case(op, R(3, 4))
        case(op, R())
        case(op, R(2, 0))
        for dt in (f64, bf16, f16, i64, i32, i8, u8, b8):
            case(op, R(2, 3, dt=dt))
    case("aten.clone", R(3, 4), kwargs={"memory_format": torch.contiguous_format})
    case("aten.clone", R(1, 3, 2, 2), kwargs={"memory_format": Both("channels_last", torch.channels_last)},
         name="clone memory_format=channels_last (values only)")
    case("aten.contiguous", R(3, 4), kwargs={"memory_format": torch.contiguous_format})
    for p in (0.0, 0.5, 1.0):
        case("aten.dropout", R(3, 4), p, False)
        case("aten.native_dropout", R(3, 4), p, False)
    case("aten.dropout", R(3, 4, dt=i64), 0.5, False)
    case("aten.native_dropout", R(2, 5, dt=bf16), 0.1, False)
    case("aten.native_dropout", R(2, 5), 0.1, False, null_outs=(1,), name="native_dropout unused mask")
    case("aten.dropout", R(3, 4), 0.5, True, unsupported=True, name="dropout train=True (unsupported)")
    case("aten.native_dropout", R(3, 4), 0.5, True, unsupported=True, nout=2,
         name="native_dropout train=True (unsupported)")
    case("aten.native_dropout", R(3, 4), 0.5, None, unsupported=True, nout=2,
         name="native_dropout train=None means training (unsupported)")


def data_cases():
    ct = "aten.cat"
    a, b, c = R(2, 3), R(4, 3), R(1, 3)
    case(ct, [a, b, c])
    case(ct, [a, b, c], 0)
    case(ct, [R(2, 3), R(2, 5)], 1)
    case(ct, [R(2, 3), R(2, 5)], -1)
    case(ct, [R(2, 3, 4), R(2, 1, 4), R(2, 7, 4)], -2)
    case(ct, [a])
    case(ct, [a, a], name="cat the same tensor twice")
    case(ct, [R(2, 3, dt=i32), R(1, 3, dt=f32)], name="cat i32 + f32")
    case(ct, [R(2, 3, dt=i64), R(1, 3, dt=b8)], name="cat i64 + bool")
    case(ct, [R(2, 3, dt=i8), R(1, 3, dt=i32)])
    case(ct, [R(2, 3, dt=bf16), R(1, 3, dt=f16)])
    case(ct, [R(2, 3, dt=f64), R(1, 3, dt=f32), R(1, 3, dt=i64)])
    case(ct, [R(2, 3, dt=u8), R(1, 3, dt=i8)], unsupported=True, name="cat u8 + i8 (int16, unsupported)")
    for dt in ALL_DT:
        case(ct, [R(2, 3, dt=dt), R(2, 2, dt=dt)], 1)
    case(ct, [R(0), R(2, 3), R(1, 3)], name="cat skips legacy empty 1-d tensors")
    case(ct, [R(2, 3), R(0), R(1, 3)], 0, name="cat legacy empty 1-d in the middle")
    case(ct, [R(0, 3), R(2, 3)])
    case(ct, [R(2), R(0)], name="cat 1-d with an empty 1-d")
    case(ct, [R(2, 3), R(2, 4)])
    case(ct, [R(2, 3), R(2, 3)], 2)
    case(ct, [R(), R()])
    case(ct, [Param(R(2, 3)), Const(R(1, 3)), R(3, 3)], name="cat param + constant + input")
    for op, f in (("aten.pixel_shuffle", 2), ("aten.pixel_unshuffle", 2)):
        up = op == "aten.pixel_shuffle"
        case(op, R(2, 8, 3, 5) if up else R(2, 2, 6, 10), f)
        case(op, R(1, 18, 2, 2) if up else R(1, 2, 6, 6), 3)
        case(op, R(12, 4, 4) if up else R(3, 8, 8), 2, name=op[5:] + " without a batch dim")
        case(op, R(2, 3, 4, 2, 2) if up else R(2, 3, 1, 4, 4), 2, name=op[5:] + " two leading dims")
        case(op, R(2, 8, 3, 5, dt=i64) if up else R(2, 2, 6, 10, dt=i64), 2)
        case(op, R(2, 4, 3, 5), 1, name=op[5:] + " factor 1")
        case(op, Sym(R(2, 8, 3, 5), ["n", 8, "h", "w"]) if up else Sym(R(2, 2, 6, 10), ["n", 2, 6, 10]), 2,
             name=op[5:] + " symbolic")
        case(op, R(2, 7, 3, 5) if up else R(2, 2, 5, 10), 2, name=op[5:] + " size not a multiple")
        case(op, R(8, 3), 2, name=op[5:] + " rank 2")
    cs = "aten.channel_shuffle"
    case(cs, R(2, 8, 3, 5), 2)
    case(cs, R(1, 12, 4, 4), 3)
    case(cs, R(2, 12, 4, 4), 4)
    case(cs, R(2, 6, 7), 3, name="channel_shuffle rank 3")
    case(cs, R(1, 8, 2, 3, 2), 4, name="channel_shuffle rank 5")
    case(cs, R(2, 6, 3, 3), 1, name="channel_shuffle 1 group")
    case(cs, R(2, 6, 3, 3), 6, name="channel_shuffle a group a channel")
    case(cs, R(2, 8, 3, 5, dt=i64), 2)
    case(cs, R(2, 8, 3, 5, dt=bf16), 4)
    case(cs, R(0, 8, 3, 5), 2, name="channel_shuffle of no images")
    case(cs, Sym(R(2, 8, 3, 5), ["n", 8, "h", "w"]), 2, name="channel_shuffle symbolic")
    case(cs, R(2, 7, 3, 5), 2, name="channel_shuffle channels not a multiple")
    case(cs, R(2, 8, 3, 5), 0, name="channel_shuffle 0 groups")
    case(cs, R(8, 3), 2, name="channel_shuffle rank 2")
    rp = "aten.repeat"
    case(rp, R(2, 3), [2, 3])
    case(rp, R(2, 3), [1, 1])
    case(rp, R(2, 3), [3, 1, 2], name="repeat adding a leading dim")
    case(rp, R(3), [2, 2, 2, 2], name="repeat 1-d into 4-d")
    case(rp, R(2, 3), [0, 2], name="repeat zero times")
    case(rp, R(), [3], name="repeat a 0-dim tensor")
    case(rp, R(2, 3, dt=b8), [2, 1])
    case(rp, R(2, 3, dt=bf16), [1, 3])
    case(rp, Sym(R(2, 3), ["n", 3]), [2, 2], name="repeat symbolic")
    case(rp, R(2, 3), [2], name="repeat with too few repeats")
    st = "aten.stack"
    a, b, c = R(2, 3), R(2, 3), R(2, 3)
    for d in (0, 1, 2, -1, -3):
        case(st, [a, b, c], d)
    case(st, [a])
    case(st, [a, a], name="stack the same tensor twice")
    case(st, [R(), R(), R()], name="stack 0-dim tensors")
    case(st, [R(2, 3, dt=i32), R(2, 3, dt=f32)], 1, name="stack i32 + f32")
    case(st, [R(2, 3, dt=i64), R(2, 3, dt=b8)], name="stack i64 + bool")
    case(st, [R(2, 3, dt=bf16), R(2, 3, dt=bf16)], 1)
    case(st, [Param(R(2, 3)), Const(R(2, 3)), R(2, 3)], 2, name="stack param + constant + input")
    case(st, [Sym(R(2, 3), ["n", 3]), Sym(R(2, 3), ["n", 3])], 1, name="stack symbolic")
    case(st, [R(2, 3), R(3, 2)], name="stack of unequal shapes")
    case(st, [a, b], 3, name="stack dim out of range")
    ub = "aten.unbind.int"
    y = R(3, 4, 5)
    for d in (0, 1, 2, -1):
        case(ub, y, d)
    case(ub, R(1, 6))
    case(ub, R(4, dt=i64), name="unbind 1-d into 0-dim tensors")
    case(ub, R(2, 5, dt=b8), 1)
    case(ub, y, 1, null_outs=(0, 2), name="unbind with unused results")
    case(ub, Sym(R(2, 3), ["n", 3]), 1, name="unbind a static dim of a symbolic tensor")
    case(ub, y, 3, name="unbind dim out of range")
    sp = "aten.split.Tensor"
    y = R(7, 13)
    case(sp, y, 3)
    case(sp, y, 3, 1)
    case(sp, y, 5, -1)
    case(sp, y, 7)
    case(sp, y, 100)
    case(sp, y, 1)
    case(sp, R(6, 4, dt=i64), 2)
    case(sp, R(2, 5, dt=b8), 2, 1)
    case(sp, y, 3, null_outs=(1,), name="split.Tensor with an unused chunk")
    case(sp, y, 3, 2)
    # more than 64 results or inputs (the IR once kept 64: later results read the first input)
    case(sp, R(2, 200), 2, 1, name="split.Tensor into 100 chunks")
    case("aten.unbind.int", R(70, 3), name="unbind into 70 results")
    case(ct, [R(1, 3) for _ in range(70)], name="cat of 70 tensors")
    case("aten.stack", [R(2) for _ in range(70)], 1, name="stack of 70 tensors")
    us = "aten.unsafe_split.Tensor"
    case(us, y, 3)
    case(us, y, 5, -1)
    case(us, y, 3, null_outs=(1,), name="unsafe_split.Tensor with an unused chunk")
    sw = "aten.split_with_sizes"
    case(sw, y, [2, 0, 5])
    case(sw, y, [10, 3], 1)
    case(sw, y, [1, 12], -1)
    case(sw, y, [7])
    case(sw, R(4, 3, dt=u8), [1, 3])
    case(sw, y, [2, 2])
    pd = "aten.constant_pad_nd"
    x = R(2, 3, 5)
    case(pd, x, [1, 2])
    case(pd, x, [1, 2, 3, 0])
    case(pd, x, [0, 1, 1, 0, 2, 2])
    case(pd, x, [-1, 2])
    case(pd, x, [1, -2, -1, 1])
    case(pd, x, [-2, -3])
    case(pd, x, [0, 0, -3, 0], name="constant_pad_nd negative pad removing a whole dim")
    case(pd, x, [1, 1], 1.5)
    case(pd, x, [1, 1], float("-inf"))
    case(pd, x, [])
    case(pd, R(3, 4, dt=i64), [2, 1], 3)
    case(pd, R(3, 4, dt=i32), [2, 1], 2.7, name="constant_pad_nd i32 with 2.7")
    case(pd, R(3, 4, dt=u8), [1, 1, 1, 1], 255)
    case(pd, R(3, 4, dt=f64), [1, 1], -0.5)
    case(pd, R(3, 4, dt=bf16), [0, 3], 0.1)
    case(pd, R(3, 4, dt=f16), [2, 0], 1)
    case(pd, Sym(R(2, 4, 9), [2, 4, "n"]), Both([0, "8*((n+7)//8)-n"], [0, 7]),
         name="constant_pad_nd to a multiple of 8 (size-expression pads)")
    case(pd, Sym(R(2, 6, 9), [2, "c", "n"]), Both(["n//3", 1, "c-6", "2*n"], [3, 1, 0, 18]),
         name="constant_pad_nd size-expression pads on two dims")
    case(pd, Sym(R(2, 9), [2, "n"]), Both(["1-n", 0], [-8, 0]), name="constant_pad_nd cropping to one column")
    case(pd, R(3, 4, dt=b8), [1, 1], unsupported=True, name="constant_pad_nd bool (coil rejects; PyTorch accepts)")
    case(pd, R(3), [1, 1, 1, 1])
    case(pd, R(3), [-2, -2])
    case(pd, R(3), [1])
    em = "aten.embedding"
    w = R(10, 4)
    case(em, w, R(2, 3, dt=i64, lo=0, hi=9))
    case(em, w, R(7, dt=i32, lo=0, hi=9))
    case(em, w, R(dt=i64, lo=0, hi=9), name="embedding zero-dim index")
    case(em, w, R(2, 3, dt=i64, lo=0, hi=9), 2, name="embedding padding_idx (forward unaffected)")
    case(em, Param(R(10, 4, dt=bf16)), R(5, dt=i64, lo=0, hi=9))
    case(em, R(6, 3, dt=i64), R(4, dt=i64, lo=0, hi=5))
    case(em, w, R(0, 2, dt=i64, lo=0, hi=9))
    case(em, w, T([0, 10], i64), name="embedding index out of range")
    case(em, w, T([-1], i64), name="embedding negative index")
    case(em, w, R(2, dt=f32))
    # more indices than the gather's prefetch distance (16), rows of 1 KB and of 2 KB (no prefetch)
    case(em, R(30, 256), R(3, 50, dt=i64, lo=0, hi=29), name="embedding 150 indices of 1 KB rows")
    case(em, R(20, 520), R(40, dt=i32, lo=0, hi=19), name="embedding 40 indices of 2 KB rows")
    ga = "aten.gather"
    y = R(4, 5, 3)
    case(ga, y, 0, R(2, 5, 3, dt=i64, lo=0, hi=3))
    case(ga, y, 1, R(4, 7, 3, dt=i64, lo=0, hi=4))
    case(ga, y, -1, R(4, 5, 6, dt=i64, lo=0, hi=2))
    case(ga, y, 1, R(2, 3, 2, dt=i64, lo=0, hi=4), name="gather an index smaller than self outside dim")
    case(ga, R(6), 0, T([5, 0, 5], i64), name="gather 1-d")
    case(ga, R(), 0, T(0, i64), name="gather 0-dim")
    case(ga, R(3, 4, dt=i64), 1, T([[0, 3], [2, 2], [1, 0]], i64))
    case(ga, Param(R(3, 4, dt=bf16)), 0, T([[2, 0, 1, 1]], i64), name="gather bf16 param")
    case(ga, Sym(R(3, 4), ["n", 4]), 1, Sym(T([[0, 3], [2, 2], [1, 0]], i64), ["n", 2]), name="gather symbolic")
    case(ga, y, 1, R(4, 2, 3, dt=i64, lo=5, hi=9), name="gather index out of range")
    case(ga, y, 1, T([[[-1]]], i64), name="gather negative index")
    case(ga, y, 1, R(4, 2, dt=i64, lo=0, hi=4), name="gather index of another rank")
    case(ga, y, 1, R(4, 2, 3, dt=i32, lo=0, hi=4), name="gather i32 index")
    case(ga, y, 0, R(5, 5, 3, dt=i64, lo=0, hi=3), name="gather index larger outside dim")
    sa, sr = "aten.scatter_add", "aten.scatter_reduce.two"
    y = R(4, 5)
    case(sa, y, 0, R(6, 5, dt=i64, lo=0, hi=3), R(6, 5))
    case(sa, y, 1, R(4, 8, dt=i64, lo=0, hi=4), R(4, 8))
    case(sa, y, -1, R(3, 2, dt=i64, lo=0, hi=4), R(4, 6), name="scatter_add index smaller than src and self")
    case(sa, R(7), 0, T([6, 0, 6, 6, 2], i64), R(5), name="scatter_add 1-d with repeats")
    case(sa, R(3, 4, 5), 1, R(3, 9, 5, dt=i64, lo=0, hi=3), R(3, 9, 5), name="scatter_add 3-d")
    case(sa, R(4, 5, dt=i64), 0, R(6, 5, dt=i64, lo=0, hi=3), R(6, 5, dt=i64))
    case(sa, Param(R(4, 5, dt=f64)), 0, R(6, 5, dt=i64, lo=0, hi=3), R(6, 5, dt=f64))
    case(sa, Sym(R(4, 3), [4, "f"]), 0, Sym(R(9, 3, dt=i64, lo=0, hi=3), ["e", "f"]), Sym(R(9, 3), ["e", "f"]),
         name="scatter_add symbolic (edges e, features f)")
    case(sa, y, 0, R(2, 5, dt=i64, lo=4, hi=9), R(2, 5), name="scatter_add index out of range")
    case(sa, y, 0, R(2, 5, dt=i32, lo=0, hi=3), R(2, 5), name="scatter_add i32 index")
    case(sa, y, 0, R(2, 5, dt=i64, lo=0, hi=3), R(2, 5, dt=f64), name="scatter_add src of another dtype")
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            case(sr, y, 0, R(6, 5, dt=i64, lo=0, hi=2), R(6, 5), red, kwargs={"include_self": inc})
        case(sr, R(4, 5, dt=i64), 1, R(4, 7, dt=i64, lo=0, hi=4), R(4, 7, dt=i64, lo=-9, hi=9), red,
             kwargs={"include_self": False}, name="scatter_reduce %s i64" % red)
    case(sr, R(3, 4), 1, T([[0, 0, 3], [1, 1, 1], [2, 0, 2]], i64),
         T([[1.0, float("nan"), 2.0], [float("inf"), -1.0, 3.0], [float("-inf"), 5.0, 0.0]]), "amax",
         name="scatter_reduce amax nan/inf")
    case(sr, R(3, 4, dt=i64), 0, R(5, 4, dt=i64, lo=0, hi=2), R(5, 4, dt=i64, lo=-7, hi=7), "mean",
         name="scatter_reduce mean i64 (floor)")
    case(sr, y, 0, R(2, 5, dt=i64, lo=0, hi=3), R(2, 5), "max", name="scatter_reduce unknown reduce")
    # rows of 40 columns (three tiles of 16, the last ragged: the [edges, features] path)
    case(sr, R(9, 40), 0, R(50, 40, dt=i64, lo=0, hi=8), R(50, 40), "mean", kwargs={"include_self": False},
         name="scatter_reduce mean over rows of 40 columns")
    case(sr, R(9, 4, 10), 0, R(50, 4, 10, dt=i64, lo=0, hi=8), R(50, 4, 10), "amax",
         name="scatter_reduce amax over rows of 4x10 columns")
    case(sa, R(9, 40, dt=i64), 0, R(30, 40, dt=i64, lo=0, hi=8), R(30, 40, dt=i64), name="scatter_add i64 rows of 40")
    ia = "aten.index_add"
    y = R(5, 4)
    case(ia, y, 0, T([4, 0, 4, 2, 4, 1], i64), R(6, 4))
    case(ia, y, 1, T([3, 3, 0], i64), R(5, 3))
    case(ia, y, -1, T([1, 0], i32), R(5, 2), kwargs={"alpha": 2.5}, name="index_add alpha 2.5, i32 index")
    case(ia, R(3, 5, 2), 1, T([4, 4, 4], i64), R(3, 3, 2), name="index_add 3-d, one target")
    case(ia, R(6), 0, T(2, i64), R(1), name="index_add 0-d index")
    case(ia, R(9, 37), 0, R(60, dt=i64, lo=0, hi=8), R(60, 37), kwargs={"alpha": -0.5},
         name="index_add rows of 37 columns, alpha -0.5")
    case(ia, R(5, 4, dt=i64), 0, T([1, 1, 0], i64), R(3, 4, dt=i64), kwargs={"alpha": 3}, name="index_add i64 alpha 3")
    case(ia, Sym(R(5, 4), [5, "f"]), 0, Sym(R(7, dt=i64, lo=0, hi=4), ["e"]), Sym(R(7, 4), ["e", "f"]),
         name="index_add symbolic (edges e, features f)")
    case(ia, y, 0, T([5], i64), R(1, 4), name="index_add index out of range")
    case(ia, y, 0, T([1, 2], i64), R(3, 4), name="index_add source of the wrong length")
    case(ia, y, 0, T([1, 2], i64), R(2, 4, dt=f64), name="index_add source of another dtype")
    ir = "aten.index_reduce"
    y = R(6, 40)
    for red in ("prod", "mean", "amax", "amin"):
        for inc in (True, False):
            case(ir, y, 0, R(50, dt=i64, lo=0, hi=4), R(50, 40), red, kwargs={"include_self": inc},
                 name="index_reduce %s include_self=%s, rows of 40" % (red, inc))
        case(ir, R(4, 5, dt=i64), 1, T([4, 0, 4, 2, 4, 1, 0], i32), R(4, 7, dt=i64, lo=-9, hi=9), red,
             kwargs={"include_self": False}, name="index_reduce %s i64 along dim 1, i32 index" % red)
    case(ir, R(3, 4), 0, T([0, 0, 2], i64), T([[1.0, float("nan"), 2.0, 0.0], [float("inf"), -1.0, 3.0, 1.0],
                                                [float("-inf"), 5.0, 0.0, 2.0]]), "amax",
         name="index_reduce amax nan/inf")
    case(ir, R(4, 6), 0, T([], i64), R(0, 6), "mean", name="index_reduce empty index")
    case(ir, Sym(R(5, 4), [5, "f"]), 0, Sym(R(9, dt=i64, lo=0, hi=4), ["e"]), Sym(R(9, 4), ["e", "f"]), "amin",
         kwargs={"include_self": False}, name="index_reduce symbolic (edges e, features f)")
    # coil's extension: sum (PyTorch's index_reduce has none; scatter_reduce over a broadcast index is the same)
    case(ir, y, 0, R(50, dt=i64, lo=0, hi=4), R(50, 40), "sum", kwargs={"include_self": False},
         ref=lambda x, d, i, s, r, include_self: x.scatter_reduce(d, i.unsqueeze(1).expand_as(s), s, r,
                                                                   include_self=include_self),
         name="index_reduce sum (coil's extension)")
    case(ir, y, 0, T([6], i64), R(1, 40), "amax", name="index_reduce index out of range")
    case(ir, y, 0, T([1], i64), R(1, 40), "max", name="index_reduce unknown reduce")
    case(ir, y, 0, T([1, 2], i64), R(3, 40), "mean", name="index_reduce source of the wrong length")
    for eb in ("aten._embedding_bag_forward_only", "aten._embedding_bag"):
        w = R(10, 4)
        ids, offs = T([1, 2, 4, 5, 4, 3, 2, 9, 0], i64), T([0, 4, 4, 7], i64)
        for mode in (0, 1, 2):
            case(eb, w, ids, offs, False, mode, null_outs=(1, 2, 3), nout=4,
                 name="%s mode %d (an empty bag)" % (eb[5:], mode))
        case(eb, w, ids, T([0, 4, 7, 9], i64), False, 1, False, None, True, null_outs=(1, 2, 3), nout=4,
             name=eb[5:] + " include_last_offset")
        case(eb, w, ids, offs, False, 0, False, R(9), null_outs=(1, 2, 3), nout=4,
             name=eb[5:] + " per_sample_weights")
        case(eb, w, ids, offs, False, 1, False, None, False, 4, null_outs=(1, 2, 3), nout=4,
             name=eb[5:] + " mean, padding_idx 4 skipped")
        case(eb, R(50, 16, dt=f64), R(40, dt=i32, lo=0, hi=49), T([0, 10, 25], i32), False, 0,
             null_outs=(1, 2, 3), nout=4, name=eb[5:] + " i32 indices, f64")
        for mode in (0, 1, 2):
            case(eb, w, ids, offs, False, mode, nout=4, name=eb[5:] + " mode %d, all four results" % mode)
        case(eb, w, ids, offs, False, 2, nout=4, null_outs=(0,), name=eb[5:] + " max_indices without the bags")
        # PyTorch 1.13 reads out of bounds on these (a crash): the reference only says they are errors
        case(eb, w, T([1, 10], i64), T([0], i64), False, 0, null_outs=(1, 2, 3), nout=4, ref=refuse,
             name=eb[5:] + " index out of range")
        case(eb, w, ids, T([0, 5, 3], i64), False, 0, null_outs=(1, 2, 3), nout=4, ref=refuse,
             name=eb[5:] + " decreasing offsets")
        case(eb, w, ids, offs, False, 3, null_outs=(1, 2, 3), nout=4, ref=refuse, name=eb[5:] + " mode 3")
    gs = "coil.gather_scatter"

    def gs_ref(self, x, src, dst, w=None, reduce="sum", include_self=True):
        m = x[src.long()] * (w.reshape(-1, *[1] * (x.dim() - 1)) if w is not None else 1)
        ex = dst.long().reshape(-1, *[1] * (x.dim() - 1)).expand_as(m)
        return self.scatter_reduce(0, ex, m, reduce, include_self=include_self)
    for red in ("sum", "prod", "mean", "amax", "amin"):
        for inc in (True, False):
            case(gs, R(6, 20), R(9, 20), R(30, dt=i64, lo=0, hi=8), R(30, dt=i64, lo=0, hi=5), R(30), red, inc,
                 ref=gs_ref, name="gather_scatter %s include_self=%s" % (red, inc))
    case(gs, R(6, 3, 4), R(9, 3, 4), R(30, dt=i32, lo=0, hi=8), R(30, dt=i32, lo=0, hi=5), None, ref=gs_ref,
         name="gather_scatter 3-d rows, i32 indices, no weight")
    case(gs, R(6, 4, dt=i64), R(9, 4, dt=i64), R(20, dt=i64, lo=0, hi=8), R(20, dt=i64, lo=0, hi=5), None, "mean", False,
         ref=gs_ref, name="gather_scatter i64 mean (floor)")
    case(gs, R(6, 20), R(9, 20), T([], i64), T([], i64), None, ref=gs_ref, name="gather_scatter no edges")
    case(gs, R(6, 20), R(9, 20), R(30, dt=i64, lo=0, hi=9), R(30, dt=i64, lo=0, hi=5), None, ref=refuse,
         name="gather_scatter source index out of range")
    case(gs, R(6, 20), R(9, 20), R(30, dt=i64, lo=0, hi=8), R(30, dt=i64, lo=0, hi=6), None, ref=refuse,
         name="gather_scatter target index out of range")
    case(gs, R(6, 20), R(9, 21), R(30, dt=i64, lo=0, hi=8), R(30, dt=i64, lo=0, hi=5), None, ref=refuse,
         name="gather_scatter rows of another width")
    sp = "coil.sparse_mm_reduce"

    def spmm_ref(crow, col, val, other, reduce="sum"):
        """The CSR product as a COO scatter_reduce (empty rows 0)."""
        rows = torch.repeat_interleave(torch.arange(crow.numel() - 1), (crow[1:] - crow[:-1]).long())
        msg = other[col.long()] * (val.unsqueeze(1) if val is not None else 1)
        out = torch.zeros(crow.numel() - 1, other.shape[1], dtype=other.dtype)
        return out.scatter_reduce(0, rows.unsqueeze(1).expand_as(msg), msg, reduce, include_self=False)
    crow, col = T([0, 3, 3, 4, 8], i64), T([0, 5, 2, 2, 1, 5, 5, 3], i64)
    for red in ("sum", "mean", "amax", "amin"):
        case(sp, crow, col, R(8), R(6, 5), red, ref=spmm_ref, name="sparse_mm_reduce %s (an empty row, repeats)" % red)
        case(sp, crow, col, None, R(6, 33, dt=f64), red, ref=spmm_ref, name="sparse_mm_reduce %s, no values, f64" % red)
    case(sp, T([0, 2, 5], i32), T([1, 0, 3, 3, 2], i32), R(5), R(4, 3), ref=spmm_ref, name="sparse_mm_reduce i32 indices")
    case(sp, T([0, 2, 3], i64), T([0, 1, 1], i64), T([1.0, float("nan"), 2.0]), R(2, 4), "amax", ref=spmm_ref,
         name="sparse_mm_reduce amax nan")
    case(sp, Sym(T([0, 1, 3, 3], i64), ["r"]), Sym(T([2, 0, 2], i64), ["e"]), Sym(R(3), ["e"]), Sym(R(4, 6), ["n", "f"]),
         "mean", ref=spmm_ref, name="sparse_mm_reduce symbolic rows, entries, features")
    case(sp, crow, T([0, 5, 2, 2, 1, 6, 5, 3], i64), R(8), R(6, 5), ref=refuse, name="sparse_mm_reduce column out of range")
    case(sp, T([0, 3, 2, 4, 8], i64), col, R(8), R(6, 5), ref=refuse, name="sparse_mm_reduce decreasing crow")
    case(sp, crow, col, R(8), R(6, 5), "max", ref=refuse, name="sparse_mm_reduce unknown reduce")
    case(sp, crow, col, R(7), R(6, 5), ref=refuse, name="sparse_mm_reduce values of the wrong length")
    # nn.LSTM / nn.GRU / nn.RNN as the exporter records them (coil.lstm, gru, rnn_tanh, rnn_relu)
    def lstm_ref(x, hx, ps, bias, layers, bi, bf):
        return torch.lstm(x, hx, ps, bias, layers, 0.0, False, bi, bf)

    def one_state(f):
        return lambda x, hx, ps, bias, layers, bi, bf: f(x, hx, ps, bias, layers, 0.0, False, bi, bf)
    gru_ref = one_state(torch.gru)

    def rnn_params(gates, i, h, layers, d, bias):
        ps = []
        for l in range(layers):
            for _ in range(d):
                ps += [R(gates * h, i if l == 0 else d * h, lo=-0.3, hi=0.3), R(gates * h, h, lo=-0.3, hi=0.3)]
                ps += [R(gates * h, lo=-0.3, hi=0.3), R(gates * h, lo=-0.3, hi=0.3)] if bias else []
        return ps
    for op, g, ref in (("coil.lstm", 4, lstm_ref), ("coil.gru", 3, gru_ref), ("coil.rnn_tanh", 1, one_state(torch.rnn_tanh)),
                       ("coil.rnn_relu", 1, one_state(torch.rnn_relu))):
        for layers, bi, bf, bias in ((1, False, False, True), (2, True, True, True), (3, False, True, False),
                                     (1, True, False, True)):
            d = 2 if bi else 1
            x = R(5, 3, 7) if not bf else R(3, 5, 7)
            h0 = [R(layers * d, 3, 9), R(layers * d, 3, 9)] if g == 4 else R(layers * d, 3, 9)
            case(op, x, h0, rnn_params(g, 7, 9, layers, d, bias), bias, layers, bi, bf, ref=ref,
                 nout=3 if g == 4 else 2, name="%s %d layers%s%s%s" % (op[5:], layers, ", bidirectional" * bi,
                                                                       ", batch first" * bf, ", no bias" * (not bias)))
        h0 = [R(1, 2, 17), R(1, 2, 17)] if g == 4 else R(1, 2, 17)
        case(op, R(40, 2, 33), h0, rnn_params(g, 33, 17, 1, 1, True), True, 1, False, False, ref=ref,
             nout=3 if g == 4 else 2, name=op[5:] + " 40 steps, 33 inputs, 17 units (vector tails)")
        case(op, R(0, 2, 7), [R(1, 2, 9), R(1, 2, 9)] if g == 4 else R(1, 2, 9), rnn_params(g, 7, 9, 1, 1, True), True, 1,
             False, False, ref=ref, nout=3 if g == 4 else 2, name=op[5:] + " no steps")
        case(op, R(5, 3, 7), [R(1, 3, 9), R(1, 3, 9)] if g == 4 else R(1, 3, 9), rnn_params(g, 7, 9, 1, 1, True)[:3], True,
             1, False, False, ref=refuse, nout=3 if g == 4 else 2, name=op[5:] + " a param missing")
        case(op, R(5, 3, 7), [R(1, 4, 9), R(1, 4, 9)] if g == 4 else R(1, 4, 9), rnn_params(g, 7, 9, 1, 1, True), True,
             1, False, False, ref=refuse, nout=3 if g == 4 else 2, name=op[5:] + " state of another batch")
    # lengths (pack_padded_sequence around the layer) and LSTM's projection (proj_size): the
    # reference runs PyTorch's kernel over a PackedSequence
    def packed(f, nstates):
        def ref(x, hx, ps, bias, layers, bi, bf, lengths=None):
            if lengths is None:
                return f(x, hx, ps, bias, layers, 0.0, False, bi, bf)
            rnn = torch.nn.utils.rnn
            p = rnn.pack_padded_sequence(x, lengths, batch_first=bf, enforce_sorted=False)
            hs = [h.index_select(1, p.sorted_indices) for h in (hx if nstates == 2 else [hx])]
            r = f(p.data, p.batch_sizes, hs if nstates == 2 else hs[0], ps, bias, layers, 0.0, False, bi)
            y, _ = rnn.pad_packed_sequence(rnn.PackedSequence(r[0], p.batch_sizes, p.sorted_indices,
                                                              p.unsorted_indices), batch_first=bf,
                                           total_length=x.shape[1 if bf else 0])
            return (y,) + tuple(h.index_select(1, p.unsorted_indices) for h in r[1:])
        return ref

    def proj_params(i, h, p, layers, d):
        ps = []
        for l in range(layers):
            for _ in range(d):
                ps += [R(4 * h, i if l == 0 else d * p, lo=-0.3, hi=0.3), R(4 * h, p, lo=-0.3, hi=0.3),
                       R(4 * h, lo=-0.3, hi=0.3), R(4 * h, lo=-0.3, hi=0.3), R(p, h, lo=-0.3, hi=0.3)]
        return ps
    lens = T([5, 2, 4], i64)
    for op, g, f in (("coil.lstm", 4, torch.lstm), ("coil.gru", 3, torch.gru), ("coil.rnn_tanh", 1, torch.rnn_tanh)):
        ns = 2 if g == 4 else 1
        for layers, bi, bf in ((2, True, True), (1, False, False)):
            d = 2 if bi else 1
            h0 = [R(layers * d, 3, 9), R(layers * d, 3, 9)] if g == 4 else R(layers * d, 3, 9)
            case(op, R(3, 5, 7) if bf else R(5, 3, 7), h0, rnn_params(g, 7, 9, layers, d, True), True, layers, bi, bf,
                 lens, ref=packed(f, ns), nout=3 if g == 4 else 2,
                 name="%s %d layers%s%s, lengths [5, 2, 4] (packed)" % (op[5:], layers, ", bidirectional" * bi,
                                                                        ", batch first" * bf))
    h0 = [R(2, 3, 9), R(2, 3, 9)]
    case("coil.lstm", R(5, 3, 7), h0, rnn_params(4, 7, 9, 1, 2, True), True, 1, True, False, T([0, 5, 5], i64),
         ref=packed(torch.lstm, 2), nout=3, expect_error=True, name="lstm a sequence of length 0")
    case("coil.lstm", R(5, 3, 7), h0, rnn_params(4, 7, 9, 1, 2, True), True, 1, True, False, T([6, 5, 5], i64),
         ref=packed(torch.lstm, 2), nout=3, expect_error=True, name="lstm a length past the steps")
    case("coil.lstm", R(5, 3, 7), h0, rnn_params(4, 7, 9, 1, 2, True), True, 1, True, False, T([5, 2, 4], i32),
         ref=packed(torch.lstm, 2), nout=3, unsupported=True, name="lstm i32 lengths (refused: i64)")
    for layers, bi, ln in ((1, False, None), (2, True, None), (2, True, lens)):
        d = 2 if bi else 1
        args = [R(5, 3, 7), [R(layers * d, 3, 4), R(layers * d, 3, 9)], proj_params(7, 9, 4, layers, d), True, layers, bi,
                False] + ([ln] if ln is not None else [])
        case("coil.lstm", *args, ref=packed(torch.lstm, 2), nout=3,
             name="lstm projection 9 -> 4, %d layers%s%s" % (layers, ", bidirectional" * bi, ", lengths" * (ln is not None)))
    case("coil.lstm", R(5, 3, 7), [R(1, 3, 9), R(1, 3, 9)], proj_params(7, 9, 4, 1, 1), True, 1, False, False,
         ref=packed(torch.lstm, 2), nout=3, expect_error=True, name="lstm projection with h of the hidden size")
    it = "aten.index.Tensor"
    y = R(5, 4, 3)
    case(it, y, [T([4, 0, -1, 2], i64)], name="index.Tensor x[i] (negative counts from the end)")
    case(it, y, [None, T([3, 3, 0], i64)], name="index.Tensor x[:, i]")
    case(it, y, [None, None, T([[2, 0], [1, 1]], i64)], name="index.Tensor x[:, :, i] 2-d")
    case(it, y, [None, None, T([[2, 0], [1, 1]], i32)], name="index.Tensor i32 index (refused, as PyTorch)")
    case(it, y, [T([[0], [4]], i64), T([1, 2, 3], i64)], name="index.Tensor x[i, j] broadcast")
    case(it, y, [T([1, 2], i64), None, T([0, -1], i64)], name="index.Tensor x[i, :, j] (apart: B first)")
    case(it, y, [T([1, 2], i64), T([0, 3], i64), T([2, 0], i64)], name="index.Tensor every dim")
    case(it, y, [T(3, i64)], name="index.Tensor 0-dim index")
    case(it, y, [T([], i64)], name="index.Tensor empty index")
    case(it, R(6, dt=i64), [R(2, 3, dt=i64, lo=-6, hi=5)])
    case(it, R(4, 6, dt=b8), [None, T([5, 0], i64)])
    case(it, Sym(R(5, 4), ["n", 4]), [None, T([3, 0, 1], i64)], name="index.Tensor symbolic self")
    case(it, y, [T([5], i64)], name="index.Tensor index out of range")
    case(it, y, [None, T([-5], i64)], name="index.Tensor negative index out of range")
    case(it, y, [R(5, dt=b8)], unsupported=True, name="index.Tensor bool mask (value-dependent shape)")
    case(it, y, [T([1, 2], i64), T([0, 1, 2], i64)], name="index.Tensor indices that do not broadcast")
    case(it, y, [T([1.0])], name="index.Tensor float index")
    ix = "aten.index_select"
    y = R(4, 5, 3)
    for d in (0, 1, 2, -1):
        case(ix, y, d, T([2, 0, 2, 1], i64) if d in (0, 1) else T([2, 0, 1], i64))
    case(ix, y, 1, T([4, 4, 0, 3, 1, 2, 0], i32), name="index_select repeated indices, i32")
    case(ix, y, 0, T(3, i64), name="index_select 0-dim index")
    case(ix, y, 2, T([], i64), name="index_select empty index")
    case(ix, R(6, dt=i64), 0, T([5, 0], i64))
    case(ix, Param(R(7, 3, dt=bf16)), 0, T([6, 1], i64), name="index_select bf16 param (gather rows)")
    case(ix, R(5, 4, dt=b8), 1, T([3, 3], i64))
    case(ix, Sym(R(4, 5), ["n", 5]), 1, T([4, 0], i64), name="index_select symbolic")
    case(ix, y, 1, T([0, 5], i64), name="index_select index out of range")
    case(ix, y, 1, T([-1], i64), name="index_select negative index")
    case(ix, y, 1, T([[0, 1]], i64), name="index_select 2-d index")
    case(ix, R(3, 40, 6), 1, R(70, dt=i64, lo=0, hi=39), name="index_select 70 indices, 3 outer slices")
    case(ix, R(25, 300), 0, R(33, dt=i64, lo=0, hi=24), name="index_select 33 rows of 1.2 KB")
    case(ix, y, 1, T([0.0, 1.0]), name="index_select float index")
    rl = "aten.roll"
    y = R(4, 7)
    case(rl, y, [2])
    case(rl, y, [-3])
    case(rl, y, [2], [1])
    case(rl, y, [1, -2], [0, 1])
    case(rl, y, [30], [-1])
    case(rl, y, [1, 2], [1, 1], name="roll the same dim twice")
    case(rl, y, Both(3, [3]), Both(0, [0]), name="roll single ints")
    case(rl, R(2, 3, 4, dt=i64), [1, 1], [0, 2])
    case(rl, R(5, dt=b8), [2])
    case(rl, R(), [1], name="roll zero-dim")
    case(rl, R(0, 3), [1], [1], name="roll empty")
    case(rl, y, [1, 2], [0])
    case(rl, y, [1, 2])
    case(rl, y, [1], [2])


def fill_cases():
    nz = "aten.new_zeros"
    case(nz, R(2, 2), [2, 3])
    case(nz, R(2, dt=i32), [4, 1])
    case(nz, R(2), [2, 3], kwargs={"dtype": i64})
    case(nz, R(2, dt=b8), [])
    case(nz, R(2, dt=bf16), [0, 3])
    case(nz, R(2), [3], kwargs={"dtype": f16, "layout": None, "device": None, "pin_memory": False})
    case(nz, R(2), [2, -1])
    fu = "aten.full"
    case(fu, [2, 3], 1.5)
    case(fu, [2, 3], 2)
    case(fu, [2, 3], True, name="full with a bool fill value")
    case(fu, [2, 3], -1, kwargs={"dtype": f64})
    case(fu, [2, 3], 2.5, kwargs={"dtype": i32})
    case(fu, [2, 3], 300, kwargs={"dtype": u8})
    case(fu, [4], 0.1, kwargs={"dtype": bf16})
    case(fu, [4], 0.1, kwargs={"dtype": f16})
    case(fu, [1], 1, kwargs={"dtype": b8})
    case(fu, [], 7.25)
    case(fu, [0, 2], 1.0)
    case(fu, [3], float("inf"))
    case(fu, [3], float("nan"))
    case(fu, [3], float("-inf"), kwargs={"dtype": f16})
    case(fu, [2, 3], 1.0, kwargs={"dtype": f32, "layout": None, "device": None, "pin_memory": False})
    case(fu, [-1], 1.0)
    ze = "aten.zeros"
    case(ze, [2, 3])
    case(ze, [2, 3], kwargs={"dtype": i32})
    case(ze, [])
    case(ze, [0, 5], kwargs={"dtype": b8})
    case(ze, [1, 2, 1], kwargs={"dtype": bf16})
    case(ze, [3], kwargs={"dtype": u8, "layout": None, "device": None, "pin_memory": None})
    case(ze, [2, -3])
    ar, ars, arst = "aten.arange.default", "aten.arange.start", "aten.arange.start_step"
    case(ar, 5)
    case(ar, 5.5, name="arange float end")
    case(ar, 0, name="arange empty")
    case(ar, 7, kwargs={"dtype": f64})
    case(ar, 300, kwargs={"dtype": u8}, name="arange u8 wraps as ATen")
    case(ar, 1000, kwargs={"dtype": bf16}, name="arange bf16 (rounded)")
    case(ar, 9, kwargs={"dtype": f16, "layout": None, "device": None, "pin_memory": False})
    case(ar, -3, expect_error=True, name="arange end below 0")
    case(ar, float("inf"), expect_error=True, name="arange infinite end")
    case(ar, 3, kwargs={"dtype": b8}, expect_error=True, name="arange bool")
    case(ars, -4, 9)
    case(ars, 2, 2, name="arange.start empty")
    case(ars, 0.5, 3, kwargs={"dtype": i64}, name="arange.start i64 truncates the bounds")
    case(ars, 9, -4, expect_error=True, name="arange.start bounds reversed")
    case(arst, 1, 20, 3)
    case(arst, 10, -7, -4, kwargs={"dtype": i32})
    case(arst, 0, 1, 0.1, name="arange 0.1 steps (ATen's count and values)")
    case(arst, -1.5, 2.5, 0.37, kwargs={"dtype": f64})
    case(arst, 1e6, 1e6 + 100, 7.5, name="arange large start in f32")
    case(arst, 0, 5, 0, expect_error=True, name="arange step 0")
    case(arst, 0, 5, -1, expect_error=True, name="arange step against the bounds")
    case(arst, 0, 1, 1e-15, expect_error=True, name="arange too many elements")
    case(arst, 0, 3, 0.5, kwargs={"dtype": i64}, expect_error=True, name="arange i64 step truncated to 0")


def scan_cases():
    """tril/triu, cumsum, prod, sort, topk (#21)."""
    for op in ("aten.tril", "aten.triu"):
        for dg in (0, 1, -1, 3, -5):
            case(op, R(2, 4, 5), dg)
        case(op, R(3, 3, dt=i64), name=op[5:] + " i64, default diagonal")
        case(op, R(2, 3, 4, 4, dt=b8), 1)
        case(op, Sym(R(2, 5, 3), ["b", "s", 3]), 0, name=op[5:] + " symbolic")
        case(op, R(5), 0, expect_error=True, name=op[5:] + " 1-d")
    cs = "aten.cumsum"
    for d in (0, 1, -1):
        case(cs, R(3, 4, 5), d)
    case(cs, R(6, dt=i32, lo=-9, hi=9), 0, name="cumsum i32 (i64 result)")
    case(cs, R(4, 3, dt=b8), 0, name="cumsum bool (i64 result)")
    case(cs, R(4, 3, dt=u8), 1, kwargs={"dtype": f32}, name="cumsum u8 as f32")
    case(cs, R(5, 3), 0, kwargs={"dtype": f64})
    case(cs, R(2000, lo=0, hi=1), 0, name="cumsum long f32 line (f64 accumulator)")
    case(cs, T([1.0, float("inf"), 2.0, float("nan"), 3.0]), 0, name="cumsum inf/nan")
    case(cs, R(), 0, name="cumsum 0-dim")
    case(cs, R(0, 3), 0, name="cumsum empty")
    case(cs, Sym(R(3, 7), [3, "s"]), 1, name="cumsum symbolic")
    case(cs, R(3, 4), 2, expect_error=True, name="cumsum dim out of range")
    pr, pd = "aten.prod", "aten.prod.dim_int"
    case(pr, R(3, 4, lo=0.5, hi=1.5))
    case(pr, R(5, dt=i64, lo=-9, hi=9), name="prod i64")
    case(pr, R(3, dt=b8), name="prod bool (i64 result)")
    case(pr, R(4, dt=i32, lo=-5, hi=5), kwargs={"dtype": f64})
    case(pr, R(0, 3), name="prod empty (1)")
    for d in (0, 1, -1):
        case(pd, R(3, 4, 5, lo=0.5, hi=1.5), d)
        case(pd, R(3, 4, 5, lo=0.5, hi=1.5), d, True)
    case(pd, R(3, 4, dt=i32, lo=-3, hi=3), 1, name="prod.dim_int i32 (i64 result)")
    case(pd, T([[1.0, float("nan"), 2.0], [0.0, float("inf"), 1.0]]), 1, name="prod.dim_int nan, 0*inf")
    case(pd, Sym(R(3, 6, lo=0.5, hi=1.5), ["b", 6]), 1, True, name="prod.dim_int symbolic")
    st, ss, tk = "aten.sort", "aten.sort.stable", "aten.topk"
    for d in (0, 1, -1):
        for desc in (False, True):
            case(st, R(4, 6, 5), d, desc)
    case(st, T([3.0, float("nan"), -1.0, float("inf"), 2.0, float("-inf"), float("nan")]), 0, False,
         name="sort nan/inf ascending")
    case(st, T([3.0, float("nan"), -1.0, float("inf"), 2.0, float("-inf"), float("nan")]), 0, True,
         name="sort nan/inf descending")
    case(st, R(3, 40, dt=i64, lo=-2 ** 60, hi=2 ** 60), 1, name="sort i64 beyond 2^53")
    case(st, R(5, 8, dt=u8), -1, True)
    case(st, R(), 0, name="sort 0-dim")
    case(st, R(1000), 0, name="sort 1000 elements")
    case(st, Sym(R(3, 9), ["b", "s"]), -1, name="sort symbolic")
    case(ss, R(4, 30, dt=i64, lo=0, hi=4), kwargs={"stable": True, "dim": 1}, name="sort.stable ties in order")
    case(ss, R(4, 30, dt=i64, lo=0, hi=4), kwargs={"stable": True, "dim": 1, "descending": True},
         name="sort.stable descending ties in order")
    case(ss, R(6, 5, dt=b8), kwargs={"stable": True, "dim": 0}, name="sort.stable bool")
    for k, d, lg in ((3, -1, True), (1, 0, True), (4, 1, False), (5, -1, False), (0, 1, True)):
        case(tk, R(4, 6, 5), k, d, lg)
    case(tk, T([3.0, float("nan"), -1.0, float("inf"), 2.0]), 2, name="topk nan largest")
    case(tk, T([3.0, float("nan"), -1.0, float("-inf"), 2.0]), 2, 0, False, name="topk nan smallest")
    case(tk, R(3, 1000), 5, name="topk 5 of 1000 (classifier head)")
    case(tk, R(3, 20, dt=i32, lo=-1000, hi=1000), 4, name="topk i32")
    case(tk, Sym(R(2, 9), ["b", "s"]), 3, -1, name="topk symbolic dim (k guarded)")
    case(tk, R(3, 4), 5, expect_error=True, name="topk k larger than the dim")
    case(tk, R(3, 4, dt=b8), 2, expect_error=True, name="topk bool")


def graph_cases():
    """Multi-node graphs, in-place spellings, defaults left out, constants."""
    case("aten.relu_", R(3, 4), ref=aten.relu.default, covers="aten.relu", name="relu_ means relu")
    case("aten.add_.Tensor", R(3, 4), R(4), kwargs={"alpha": 2}, ref=aten.add.Tensor, covers="aten.add.Tensor",
         name="add_.Tensor means add.Tensor")
    case("aten.hardtanh_", R(3, 4), -0.5, 0.5, ref=aten.hardtanh.default, covers="aten.hardtanh",
         name="hardtanh_ means hardtanh")
    case("aten.mul.Tensor", Const(R(3, 4)), Const(R(4)), name="mul of two constants")
    case("aten.where.self", Const(R(3, dt=b8)), Const(R(3, dt=i64)), R(3), name="where with constant cond")
    case("aten.add.Tensor", Const(T([float("nan"), float("inf"), float("-inf")])), R(3),
         name="add constant with non-finite data")

    def node(i, op, args, outs, kwargs=None):
        n = {"id": "n%d" % i, "op": op, "args": args, "outputs": outs}
        if kwargs:
            n["kwargs"] = kwargs
        return n

    def graph(inputs, nodes, outputs, params=(), consts=()):
        return {"format": "coil-graph", "version": 1, "inputs": list(inputs), "params": list(params),
                "constants": list(consts), "nodes": nodes, "outputs": outputs}

    def decl(nm, x, shape=None):
        return {"name": nm, "dtype": CNAME[x.dtype], "shape": shape or list(x.shape)}

    # arange over a size expression (torch.arange(seq) traced with seq symbolic): positions
    # added to a [b, seq] input, 2*seq+1 odd values from -seq, a float ramp counting down
    x = R(3, 7)
    g = graph([decl("x", x, [3, "seq"])],
              [node(0, "aten.arange.default", ["seq"], ["p"]),
               node(1, "aten.add.Tensor", ["x", "p"], ["y"]),
               node(2, "aten.arange.start_step", ["-seq", "seq+1", 1], ["o"]),
               node(3, "aten.arange.start_step", ["2*seq", 0, -2], ["d"], {"dtype": "f32"})], ["y", "o", "d"])
    gcase("graph arange over a symbolic length", g, {"x": x},
          [x + torch.arange(7), torch.arange(-7, 8), torch.arange(14, 0, -2, dtype=torch.float32)],
          "aten.arange.start_step")
    g = graph([decl("x", x, [3, "seq"])], [node(0, "aten.arange.start", ["seq", 2], ["p"])], ["p"])
    try:
        torch.arange(7, 2)
    except RuntimeError as e:
        gcase("graph arange from a symbolic start above the end", g, {"x": x}, e, "aten.arange.start")

    x = R(2, 3, 4)
    g = graph([decl("x", x)], [node(0, "aten.permute", ["x", [2, 0, 1]], ["p"]),
                              node(1, "aten.reshape", ["p", [4, 6]], ["r"]),
                              node(2, "aten.slice.Tensor", ["r", 1, 1, None, 2], ["s"])], ["s"])
    gcase("graph permute -> reshape -> slice", g, {"x": x},
          [x.permute(2, 0, 1).reshape(4, 6)[:, 1::2]], "aten.permute")
    x, w, fw, fb = R(1, 3, 8, 8), R(4, 3, 3, 3), R(5, 4), R(5)
    bn = [R(4), R(4), R(4), R(4, lo=0.5, hi=2)]
    g = graph([decl("x", x)], [
        node(0, "aten.convolution", ["x", "w", None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1], ["c"]),
        node(1, "aten.native_batch_norm", ["c", "g", "b", "m", "v", False, 0.1, 1e-5], ["bn", None, None]),
        node(2, "aten.relu", ["bn"], ["r"]),
        node(3, "aten.max_pool2d", ["r", [2, 2]], ["mp"]),
        node(4, "aten.mean.dim", ["mp", [-1, -2], True], ["gap"]),
        node(5, "aten.view", ["gap", [1, 4]], ["flat"]),
        node(6, "aten.addmm", ["fb", "flat", "ft"], ["logits"]),
        node(7, "aten.t", ["fw"], ["ft"]),
        node(8, "aten._softmax", ["logits", 1, False], ["prob"])],
        ["prob", "logits"],
        params=[decl("w", w), decl("fw", fw), decl("fb", fb)],
        consts=[dict(decl(n, v), data=v.tolist()) for n, v in zip("gbmv", bn)])
    y = aten.convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    y = aten.native_batch_norm(y, *bn, False, 0.1, 1e-5)[0].relu()
    y = aten.max_pool2d(y, [2, 2]).mean([-1, -2], True).view(1, 4)
    logits = aten.addmm(fb, y, fw.t())
    gcase("graph small CNN (conv, bn, relu, pool, mean, view, addmm, t, softmax)", g, {"x": x},
          [aten._softmax(logits, 1, False), logits], "aten.t", tolx=4, weights={"w": w, "fw": fw, "fb": fb})
    # message passing: scatters over dst.unsqueeze(1).expand_as(msg) become index_add/index_reduce
    # (the index read once per row, not copied to [edges, features]); rows of 70 and of 3 columns
    for f, red in ((70, "sum"), (70, "mean"), (3, "amax"), (70, None)):
        x, msg, dst = R(9, f), R(40, f), R(40, dt=i64, lo=0, hi=7)
        n2 = node(2, "aten.scatter_reduce.two", ["z", 0, "i", "m", red], ["o"], {"include_self": False}) if red \
            else node(2, "aten.scatter_add", ["z", 0, "i", "m"], ["o"])
        g = graph([decl("x", x), decl("m", msg), decl("d", dst)],
                  [node(0, "aten.unsqueeze", ["d", 1], ["u"]), node(1, "aten.expand", ["u", [40, f]], ["i"]),
                   node(3, "aten.zeros_like", ["x"], ["z"]), n2], ["o"])
        ex = dst.unsqueeze(1).expand(40, f)
        want = torch.zeros_like(x).scatter_reduce(0, ex, msg, red, include_self=False) if red else \
            torch.zeros_like(x).scatter_add(0, ex, msg)
        gcase("graph scatter %s over a broadcast index, %d columns" % (red or "add", f), g,
              {"x": x, "m": msg, "d": dst}, [want], "aten.expand")
    # message passing: index_select(x, 0, src) [* w.unsqueeze(1)] scattered by dst -> coil.gather_scatter
    for f, red, weighted in ((70, None, True), (70, "mean", False), (5, "amax", True), (33, "sum", False)):
        x, src, dst, w = R(9, f), R(40, dt=i64, lo=0, hi=8), R(40, dt=i64, lo=0, hi=6), R(40)
        nodes = [node(0, "aten.index_select", ["x", 0, "s"], ["g"]), node(1, "aten.unsqueeze", ["d", 1], ["u"]),
                 node(2, "aten.expand", ["u", [40, f]], ["i"]), node(3, "aten.zeros", [[7, f]], ["z"])]
        msg = "g"
        if weighted:
            nodes += [node(5, "aten.unsqueeze", ["w", 1], ["wu"]), node(6, "aten.mul.Tensor", ["g", "wu"], ["gw"])]
            msg = "gw"
        nodes.append(node(4, "aten.scatter_reduce.two", ["z", 0, "i", msg, red], ["o"], {"include_self": False}) if red
                     else node(4, "aten.scatter_add", ["z", 0, "i", msg], ["o"]))
        g = graph([decl("x", x), decl("s", src), decl("d", dst), decl("w", w)], nodes, ["o"])
        m = x[src] * w.unsqueeze(1) if weighted else x[src]
        ex = dst.unsqueeze(1).expand(40, f)
        want = torch.zeros(7, f).scatter_reduce(0, ex, m, red, include_self=False) if red else \
            torch.zeros(7, f).scatter_add(0, ex, m)
        gcase("graph gather + scatter %s%s, %d columns (one coil.gather_scatter)" % (
            red or "add", " weighted" if weighted else "", f), g, {"x": x, "s": src, "d": dst, "w": w}, [want],
            "aten.index_select")
    x = R(3, 5)
    g = graph([decl("x", x, ["b", 5])], [node(0, "aten.sum.dim_IntList", ["x", [1], True], ["s"]),
                                         node(1, "aten.div.Tensor", ["x", "s"], ["d"]),
                                         node(2, "aten.split.Tensor", ["d", 2, 1], ["a", "b2", "c"]),
                                         node(3, "aten.cat", [["c", "a"], 1], ["cc"])], ["cc", "b2"])
    d = x / x.sum(1, True)
    gcase("graph symbolic batch: sum -> div -> split -> cat", g, {"x": x},
          [torch.cat([d[:, 4:], d[:, :2]], 1), d[:, 2:4]], "aten.split.Tensor")
    x = R(4, 6, dt=i64)
    g = graph([decl("x", x)], [node(0, "aten.gt.Scalar", ["x", 0], ["m"]),
                              node(1, "aten.where.self", ["m", "x", "z"], ["w"]),
                              node(2, "aten.zeros", [[4, 6]], ["z"], {"dtype": "i64"}),
                              node(3, "aten._to_copy", ["w"], ["f"], {"dtype": "f32"}),
                              node(4, "aten.mean.default", ["f"], ["mu"])], ["mu", "w"])
    wv = torch.where(x > 0, x, torch.zeros(4, 6, dtype=i64))
    gcase("graph relu via where on i64, cast, mean", g, {"x": x}, [wv.float().mean(), wv], "aten.zeros")


def signal_cases():
    """flip, unfold, as_strided, col2im / im2col, reflection and replication padding, and coil's
    Fourier transforms over view_as_real tensors (#21: what torch.stft / istft trace to)."""
    fp = "aten.flip"
    y = R(3, 4, 5)
    for dims in ([0], [0, 2], [-1], [1, 0, 2], []):
        case(fp, y, dims)
    case(fp, R(3, 4, dt=i64), [1])
    case(fp, R(2, 3, dt=bf16), [1], name="flip bf16")
    case(fp, R(0, 3), [0], name="flip empty")
    case(fp, Sym(R(3, 4, 5), ["a", 4, "c"]), [0, 2], name="flip symbolic")
    case(fp, y, [0, 0], expect_error=True, name="flip a dim twice")
    case(fp, y, [3], expect_error=True, name="flip dim out of range")
    uf = "aten.unfold"
    case(uf, R(3, 20), 1, 8, 3)
    case(uf, R(3, 20), 0, 2, 1)
    case(uf, R(10), 0, 10, 1)
    case(uf, R(2, 5, 7, dt=i32), -2, 3, 2)
    case(uf, Sym(R(2, 30), ["b", "n"]), 1, 8, 4, name="unfold symbolic length")
    case(uf, R(3, 5), 1, 6, 1, expect_error=True, name="unfold window above the size")
    case(uf, R(3, 5), 1, 2, 0, expect_error=True, name="unfold step 0")
    st = "aten.as_strided"
    case(st, R(2, 46), [2, 5, 8], [46, 6, 1], name="as_strided frames (stft)")
    case(st, R(4, 5), [3, 3], [5, 1], 2, name="as_strided with an offset")
    case(st, R(4, 5), [3, 4], [1, 5], name="as_strided transposed")
    case(st, R(10), [4, 4], [1, 1], name="as_strided overlapping windows")
    case(st, R(3), [0, 5], [1, 1], name="as_strided empty")
    case(st, R(4, 5), [3, 3], [5, 1], 20, expect_error=True, name="as_strided past the end")
    ci = "aten.col2im"
    case(ci, R(2, 12, 40), [7, 9], [3, 2], [1, 1], [1, 1], [2, 1])
    case(ci, R(12, 40), [7, 9], [3, 2], [1, 1], [1, 1], [2, 1], name="col2im unbatched")
    case(ci, R(1, 4, 9), [5, 5], [2, 2], [2, 2], [0, 0], [1, 1], name="col2im dilated")
    case(ci, R(1, 1024, 177), [1, 46080], [1, 1024], [1, 1], [0, 0], [1, 256], name="col2im istft's overlap-add")
    case(ci, R(2, 12, 41), [7, 9], [3, 2], [1, 1], [1, 1], [2, 1], expect_error=True, name="col2im wrong block count")
    ic = "aten.im2col"
    case(ic, R(2, 3, 7, 9), [3, 2], [1, 2], [1, 1], [2, 1])
    case(ic, R(3, 5, 5), [2, 2], [1, 1], [0, 0], [1, 1], name="im2col unbatched")
    case(ic, R(1, 1, 2, 2), [3, 3], [1, 1], [0, 0], [1, 1], expect_error=True, name="im2col kernel above the image")
    shapes = {1: ((2, 3, 7), [3, 2]), 2: ((2, 3, 7, 6), [3, 2, 1, 4]), 3: ((1, 2, 4, 7, 6), [3, 2, 1, 3, 0, 2])}
    for mode in ("reflection", "replication"):
        for k, (shape, pads) in shapes.items():
            op = "aten.%s_pad%dd" % (mode, k)
            case(op, R(*shape), pads)
            case(op, R(*shape[1:]), pads, name="%s_pad%dd unbatched" % (mode, k))
            case(op, R(*shape, dt=f64), pads[:2] + [0] * (len(pads) - 2), name="%s_pad%dd f64" % (mode, k))
        op = "aten.%s_pad1d" % mode
        case(op, Sym(R(2, 3, 9), ["b", 3, "n"]), [2, 4], name="%s_pad1d symbolic length" % mode)
    case("aten.reflection_pad1d", R(2, 3), [3, 0], expect_error=True, name="reflection_pad1d pad at the size")
    case("aten.replication_pad1d", R(2, 3, 1), [2, 2], name="replication_pad1d a single column")

    def wrap(dim, r):  # ATen's _fft ops take wrapped dims (torch.fft wraps them), coil's either
        return [d % r for d in dim]

    def r2c(x, dim, norm, onesided):
        return torch.view_as_real(aten._fft_r2c(x, wrap(dim, x.dim()), norm, onesided))

    def c2r(x, dim, norm, n):
        return aten._fft_c2r(torch.view_as_complex(x), wrap(dim, x.dim() - 1), norm, n)

    def c2c(x, dim, norm, fwd):
        return torch.view_as_real(aten._fft_c2c(torch.view_as_complex(x), wrap(dim, x.dim() - 1), norm, fwd))
    fr, fc, fcc = "coil.fft_r2c", "coil.fft_c2r", "coil.fft_c2c"
    # f32 FFTs (coil's and pocketfft's) round differently: error grows with log n
    case(fr, R(3, 20), [1], 0, True, ref=r2c, tolx=8, covers="coil.fft_r2c.default")
    case(fr, R(3, 17), [-1], 1, True, ref=r2c, tolx=8)
    case(fr, R(12, 5), [0], 2, False, ref=r2c, tolx=8)
    case(fr, R(2, 6, 10), [1, 2], 0, True, ref=r2c, tolx=8, name="fft_r2c two dims (rfft2)")
    case(fr, R(2, 97), [1], 0, False, ref=r2c, tolx=16, name="fft_r2c prime length")
    case(fr, R(2, 1), [1], 0, True, ref=r2c, name="fft_r2c length 1")
    case(fr, R(4, 1024), [1], 1, True, ref=r2c, tolx=16, name="fft_r2c 1024 (hdemucs' stft)")
    case(fr, R(2, 360), [1], 0, True, ref=r2c, tolx=16, name="fft_r2c 360 (radix 4, 2, 3, 5)")
    case(fr, Sym(R(2, 24), ["b", "n"]), [1], 0, True, ref=r2c, tolx=8, name="fft_r2c symbolic length")
    case(fr, R(3, 4, dt=f64), [1], 0, True, ref=r2c, unsupported=True, name="fft_r2c f64 (refused)")
    case(fc, R(3, 11, 2), [1], 0, 20, ref=c2r, tolx=8, covers="coil.fft_c2r.default")
    case(fc, R(3, 11, 2), [1], 2, 21, ref=c2r, tolx=8)
    case(fc, R(2, 6, 6, 2), [1, 2], 0, 10, ref=c2r, tolx=8, name="fft_c2r two dims (irfft2)")
    case(fc, R(4, 513, 2), [1], 1, 1024, ref=c2r, tolx=16, name="fft_c2r 1024 (hdemucs' istft)")
    case(fc, R(3, 4, 3), [1], 0, 6, ref=c2r, expect_error=True, name="fft_c2r without a last dim of 2")
    case(fcc, R(3, 8, 2), [1], 0, True, ref=c2c, tolx=8, covers="coil.fft_c2c.default")
    case(fcc, R(3, 8, 2), [0, 1], 1, False, ref=c2c, tolx=8)
    case(fcc, R(2, 7, 5, 2), [-1], 2, True, ref=c2c, tolx=8)
    case(fcc, Sym(R(3, 12, 2), [3, "n", 2]), [1], 0, False, ref=c2c, tolx=8, name="fft_c2c symbolic length")


def all_cases():
    scan_cases()
    conv_cases()
    matmul_cases()
    norm_cases()
    softmax_cases()
    pool_cases()
    upsample_cases()
    unary_cases()
    clamp_pow_cases()
    binary_cases()
    compare_cases()
    where_cases()
    to_copy_cases()
    quant_cases()
    reduce_cases()
    view_cases()
    identity_cases()
    data_cases()
    signal_cases()
    fill_cases()
    graph_cases()


# =================================================================== main

HALF = ("bf16", "f16")


def merge_cases(op, cases):
    """One graph holding every single-node case of op side by side (names prefixed),
    so the whole op is compiled once and checked against the interpreter."""
    g = {"format": "coil-graph", "version": 1, "inputs": [], "params": [], "constants": [], "nodes": [],
         "outputs": []}
    feeds, weights = {}, {}
    for k, c in enumerate(cases):
        pre = "k%d_" % k
        cg = c.json
        ren = {}
        for sect in ("inputs", "params", "constants"):
            for d in cg.get(sect, []):
                ren[d["name"]] = pre + d["name"]
                g[sect].append(dict(d, name=pre + d["name"]))
        for node in cg["nodes"]:
            for o in node["outputs"]:
                if o is not None:
                    ren[o] = pre + o

        def rn(a):
            if isinstance(a, str) and a in ren:
                return ren[a]
            if isinstance(a, list):
                return [rn(x) for x in a]
            return a
        for node in cg["nodes"]:
            n2 = dict(node, id=pre + node["id"], args=[rn(a) for a in node.get("args", [])],
                      outputs=[rn(o) for o in node["outputs"]])
            if "kwargs" in node:
                n2["kwargs"] = {kk: rn(v) for kk, v in node["kwargs"].items()}
            g["nodes"].append(n2)
        g["outputs"] += [rn(o) for o in cg["outputs"]]
        feeds.update({pre + kk: v for kk, v in st_load(c.paths[1]).items()})
        if c.paths[2]:
            weights.update({pre + kk: v for kk, v in st_load(c.paths[2]).items()})
    return g, feeds, weights


def symbolic_variants(passing, schemas):
    """Each passing single-node case again with symbolic sizes (#17), two ways: every input dim
    above 1 a symbol named after its size (`d4`: equal sizes stay equal), and the integers of
    its SymInt arguments written as size expressions of one more input (`zsym+3` with zsym
    bound to 1). The interpreter must give the case's outputs or refuse with a one-line
    message; a crash or another result fails. Returns the variants it ran clean."""
    variants = []
    for c in passing:
        if c.graph or not c.json["outputs"]:
            continue
        node = c.json["nodes"][0]
        sch = schemas.get(op_full_name(node["op"]), [])
        for kind in ("sizes", "args"):
            g = json.loads(json.dumps(c.json))
            n0, changed = g["nodes"][0], False
            if kind == "sizes":
                for d in g["inputs"]:
                    sh = ["d%d" % v if isinstance(v, int) and v > 1 else v for v in d["shape"]]
                    changed |= sh != d["shape"]
                    d["shape"] = sh
            else:
                def mut(v):
                    return "zsym+%d" % (v - 1) if isinstance(v, int) and not isinstance(v, bool) else v
                for k, (typ, name) in enumerate(sch):
                    if not (typ.startswith("SymInt") or typ == "SymScalar"):
                        continue
                    where, key = (n0["args"], k) if k < len(n0["args"]) else (n0.get("kwargs", {}), name)
                    if key in (where if isinstance(where, dict) else range(len(where))):
                        v = where[key]
                        nv = [mut(x) for x in v] if isinstance(v, list) else mut(v)
                        changed |= nv != v
                        where[key] = nv
                g["inputs"].append({"name": "zsym_in", "dtype": "f32", "shape": ["zsym"]})
            if not changed:
                continue
            v = Case(c.op, [], name="%s [symbolic %s]" % (c.name, kind), ref=c.ref, covers=c.covers, tol=c.tol,
                     tolx=c.tolx)
            v.null_outs, v.exp, v.terr, v.json = c.null_outs, c.exp, None, g
            v.paths = [c.paths[0][:-5] + "_%s.json" % kind, c.paths[1][:-3] + "_%s.in" % kind, c.paths[2],
                       c.paths[3][:-4] + "_%s.out" % kind]
            with open(v.paths[0], "w") as f:
                json.dump(g, f)
            feeds = st_load(c.paths[1]) if os.path.exists(c.paths[1]) else {}
            if kind == "args":
                feeds["zsym_in"] = torch.zeros(1)
            st_save(feeds, v.paths[1])
            variants.append(v)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = list(pool.map(run_coil, variants))
    clean, refused, bad = [], 0, 0
    for v, (rc, err) in zip(variants, results):
        if rc in (1, 2) and err.strip() and len(err.strip().splitlines()) == 1:
            refused += 1
            continue
        ok, diag, _ = judge(v, rc, err)
        if ok:
            clean.append(v)
        else:
            bad += 1
            t.ok(False, v.name, diag)
    t.ok(bad == 0, "symbolic variants: %d ran, %d matched, %d refused with a message" % (
        len(variants), len(clean), refused))
    return clean


def compiled_phase(ops, passing):
    """Every op, compiled versus interpreted on the cases that matched PyTorch: one
    merged graph per op through `coil check` (float/int dtypes that codegen supports;
    symbolic sizes only in symbolic_variants', whose symbols mean one size everywhere)."""
    by_op = {}
    for c in passing:
        if c.graph or not c.json["outputs"]:
            continue
        decls = c.json["inputs"] + c.json["params"] + c.json["constants"]
        sym = "[symbolic" in c.name
        if any(d["dtype"] in HALF for d in decls) or (not sym and any(isinstance(x, str) for d in decls
                                                                       for x in d["shape"])):
            continue
        if any('"%s"' % h in json.dumps(c.json["nodes"]) for h in HALF):
            continue
        by_op.setdefault(c.covers + (" symbolic" if sym else ""), []).append(c)
    env = dict(os.environ, COIL_CACHE_DIR=os.path.join(TMP, "cache"))

    def cap(op):  # a graph holds at most 24 symbols, derived ones included
        return 8 if op.endswith(" symbolic") else 24

    def one(op):
        g, feeds, weights = merge_cases(op, by_op[op][:cap(op)])
        base = os.path.join(TMP, "m_" + op.replace(".", "_").replace(" ", "_"))
        with open(base + ".json", "w") as f:
            json.dump(g, f)
        st_save(feeds, base + ".in")
        cmd = [COIL, "check", base + ".json", "-i", base + ".in", "--opt", "1"]
        if weights:
            st_save(weights, base + ".w")
            cmd += ["-w", base + ".w"]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300, env=env)
        return op, p.returncode, (p.stdout + p.stderr).decode(errors="replace")
    with ThreadPoolExecutor(max_workers=2) as pool:
        for op, rc, out in pool.map(one, sorted(by_op)):
            t.ok(rc == 0, "compiled == interpreted: %s (%d cases)" % (op, min(len(by_op[op]), cap(op))),
                 out[-1500:])
    skipped = [o for o in ops if o not in by_op and o + " symbolic" not in by_op]
    t.diag("ops with no compiled check (only half-precision or symbolic cases): " + ", ".join(skipped))


def main():
    try:
        p = subprocess.run([COIL, "info", "--ops"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        ops = [json.loads(line)["name"] for line in p.stdout.decode().splitlines() if line.strip()]
        schemas = {}
        for line in p.stdout.decode().splitlines():
            if line.strip():
                d = json.loads(line)
                schemas[d["name"]] = [tuple(a.split("=")[0].split()[:2]) for a in d["schema"].split(",")
                                      if a.strip() and a.strip() != "*"]
    except Exception as e:  # noqa: BLE001
        t.ok(False, "coil info --ops", repr(e))
        t.done()
    t.ok(p.returncode == 0 and len(ops) > 0, "coil info --ops lists %d ops" % len(ops), p.stderr.decode())

    all_cases()
    for i, c in enumerate(CASES):
        try:
            prepare(i, c)
        except Exception as e:  # noqa: BLE001
            c.prep_error = e
    t_prep = time.time()
    todo = [c for c in CASES if not hasattr(c, "prep_error")]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = dict(zip(map(id, todo), pool.map(run_coil, todo)))
    t_run = time.time()

    covered = set()
    for c in CASES:
        if hasattr(c, "prep_error"):
            t.ok(False, c.name, "building the case failed: %r" % c.prep_error)
            continue
        rc, err = results[id(c)]
        ok, diag, compared = judge(c, rc, err)
        t.ok(ok, c.name, diag)
        if ok and compared:
            covered.add(c.covers)
    passing = [c for c in CASES if not hasattr(c, "prep_error") and judge(c, *results[id(c)])[0]
               and judge(c, *results[id(c)])[2]]
    sym = symbolic_variants(passing, schemas)
    compiled_phase(ops, passing + sym)
    missing = [o for o in ops if o not in covered]
    t.ok(not missing, "every op of coil info --ops has a passing comparison case (%d ops)" % len(ops),
         "uncovered: " + ", ".join(missing))
    t.diag("%d cases in %.1fs (PyTorch references and files %.1fs, coil eval %.1fs)" % (
        len(CASES), time.time() - START, t_prep - START, t_run - t_prep))
    shutil.rmtree(TMP, ignore_errors=True)
    t.done()


main()
