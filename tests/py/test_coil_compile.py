"""coil.compile (client/python/coil/): PyTorch modules to compiled callables over the artifact
ABI, compared with eager.

  * mlp, transformer:2 and resnet18 (64 px) compiled in-process match eager (max abs error
    <= 1e-4 relative to max |eager|);
  * a module with an op coil lacks raises coil.UnsupportedError naming the op (from the
    exporter's op check, and from the compiler when the check is skipped);
  * one callable runs many times, and from two threads at once, with right results;
  * dynamic batch, non-contiguous inputs, nested outputs, wrong dtypes (the static artifact
    refuses other inputs; what compile() returns recompiles), the target chain check;
  * export fixes in coil.compile: a data-preserving as_strided becomes a view; unsupported
    ops on no input (Swin's masks, gathered biases) are folded into constants;
  * compile through a real coild (server=URL);
  * the artifact is loaded only with the sha256 `coil compile` announced (a changed byte: refused);
  * bf16: autocast and .to(bfloat16) models, within 1.5x eager bf16's own error.
A private cache directory keeps the user's cache untouched.

Run: COIL=build/coil PYTHONPATH=client/python /usr/bin/python3 tests/py/test_coil_compile.py
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_root, "client", "python"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import coil  # noqa: E402
import coil_export  # noqa: E402

COIL = os.environ.get("COIL", os.path.join(_root, "build", "coil"))
COILD = os.path.join(os.path.dirname(os.path.abspath(COIL)), "coild")
TOL = 1e-4


def rel_err(want, got):
    if tuple(want.shape) != tuple(got.shape):
        return float("inf")
    want, got = want.double(), got.double()
    return float((want - got).abs().max()) / max(float(want.abs().max()), 1e-12)


def eager(m, ins):
    with torch.no_grad():
        return m(*ins)


class CumProd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cumprod(self.fc(x), 1)


class TwoOut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 6)

    def forward(self, x, y):
        h = self.fc(x)
        return {"a": torch.relu(h), "b": (h * y.sum(), x.t())}


def test_models(t, cache):
    fns = {}
    for spec, kw in [("mlp", {}), ("transformer:2", {}), ("torchvision:resnet18", {"size": 64})]:
        m, ins = coil_export.make_model(spec, **kw)
        t0 = time.perf_counter()
        try:
            f = coil.compile(m, ins, threads=1, cache_dir=cache, coil=COIL)
        except coil.CoilError as e:
            t.ok(False, "coil.compile %s" % spec, "%s: %s" % (type(e).__name__, e))
            continue
        dt = time.perf_counter() - t0
        want = eager(m, ins)
        got = f(*ins)
        err = rel_err(want, got)
        t.ok(isinstance(got, torch.Tensor) and err <= TOL,
             "coil.compile %s matches eager (rel err %.2e, %.1f s, target %s)" % (spec, err, dt, f.target),
             "got %r" % type(got))
        fns[spec] = (f, m, ins)
    return fns


def test_unsupported(t, cache):
    m = CumProd()
    try:
        coil.compile(m, (torch.randn(3, 4),), cache_dir=cache, coil=COIL)
        t.ok(False, "unsupported op raises coil.UnsupportedError", "no exception")
    except coil.UnsupportedError as e:
        t.ok("aten.cumprod" in str(e) and "aten.cumprod.default" in e.ops,
             "unsupported op raises coil.UnsupportedError naming it: %s" % str(e)[:100], repr(e.ops))
    except Exception as e:  # noqa: BLE001
        t.ok(False, "unsupported op raises coil.UnsupportedError", "%s: %s" % (type(e).__name__, e))
    # without the exporter's op check the compiler names node and op
    graph, _, _ = coil.export_graph(m, (torch.randn(3, 4),), check_ops=False)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "graph.json")
        with open(p, "w") as f:
            f.write(coil_export.dumps_graph(graph))
        try:
            coil._compile_cli(p, coil=COIL, cache_dir=cache)
            t.ok(False, "compiler error on an unknown op is coil.UnsupportedError", "no exception")
        except coil.UnsupportedError as e:
            t.ok("node" in str(e) and "aten.cumprod.default" in str(e),
                 "compiler error on an unknown op is coil.UnsupportedError: %s" % e)
    # a module that cannot even be traced at ATen level
    class DataDependent(torch.nn.Module):
        def forward(self, x):
            return x[x > 0]
    try:
        coil.compile(DataDependent(), (torch.randn(5),), cache_dir=cache, coil=COIL)
        t.ok(False, "boolean indexing raises coil.UnsupportedError", "no exception")
    except coil.UnsupportedError as e:
        t.ok("aten.index" in str(e), "boolean indexing raises coil.UnsupportedError: %s" % str(e)[:90])
    except Exception as e:  # noqa: BLE001
        t.ok(False, "boolean indexing raises coil.UnsupportedError", "%s: %s" % (type(e).__name__, e))


def test_repeat_and_threads(t, fns):
    if "transformer:2" not in fns:
        t.ok(False, "repeat/threads: transformer:2 did not compile")
        return
    f, m, ins = fns["transformer:2"]
    gen = torch.Generator().manual_seed(7)
    xs = [torch.randn(ins[0].shape, generator=gen) for _ in range(8)]
    wants = [eager(m, (x,)) for x in xs]
    worst = 0.0
    for i in range(50):
        worst = max(worst, rel_err(wants[i % 8], f(xs[i % 8])))
    t.ok(worst <= TOL, "one callable, 50 calls: all match eager (worst %.2e)" % worst)

    errs, fails = [], []

    def worker(k):
        try:
            for i in range(30):
                j = (k * 3 + i) % 8
                errs.append(rel_err(wants[j], f(xs[j])))
        except Exception as e:  # noqa: BLE001
            fails.append("%s: %s" % (type(e).__name__, e))

    ths = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    t.ok(not fails and len(errs) == 60 and max(errs) <= TOL,
         "two threads x 30 calls on one callable match eager (worst %.2e, %d handles)" % (
             max(errs) if errs else -1, len(f.model._all)), "\n".join(fails))
    if "torchvision:resnet18" in fns:
        f2, m2, ins2 = fns["torchvision:resnet18"]
        want = eager(m2, ins2)
        res = [None, None]

        def one(k):
            res[k] = [rel_err(want, f2(*ins2)) for _ in range(3)]

        ths = [threading.Thread(target=one, args=(k,)) for k in range(2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        ok = all(r is not None and max(r) <= TOL for r in res)
        t.ok(ok, "resnet18 from two threads at once matches eager", repr(res))


def test_io(t, cache):
    m = TwoOut()
    x, y = torch.randn(5, 8), torch.randn(3)
    f = coil.compile(m, (x, y), cache_dir=cache, coil=COIL)
    want = eager(m, (x, y))
    got = f(x, y)
    ok = (isinstance(got, dict) and set(got) == {"a", "b"} and isinstance(got["b"], tuple)
          and rel_err(want["a"], got["a"]) <= TOL and rel_err(want["b"][0], got["b"][0]) <= TOL
          and rel_err(want["b"][1], got["b"][1]) == 0)
    t.ok(ok, "nested outputs (dict of tensor and tuple) come back in the module's structure",
         repr(type(got)))
    # a non-contiguous input (made contiguous on the way in) and an input requiring grad
    xt = torch.randn(8, 5).t()
    got = f(xt, y.requires_grad_())
    t.ok(rel_err(eager(m, (xt, y))["a"], got["a"]) <= TOL,
         "non-contiguous and requires_grad inputs are accepted")
    # zero copies: outputs are fresh tensors owned by torch; inputs are read in place
    a1, a2 = f(x, y)["a"], f(x, y)["a"]
    t.ok(a1.data_ptr() != a2.data_ptr() and a1.is_contiguous() and not a1.requires_grad,
         "each call returns new output tensors")
    # the static artifact itself refuses other inputs
    static = f.compiled
    for bad, why in [((x.double(), y), "dtype"), ((x[None], y), "rank"), ((x, ), "count")]:
        try:
            static(*bad)
            t.ok(False, "wrong input %s raises coil.CoilError" % why)
        except coil.CoilError as e:
            t.ok(True, "wrong input %s raises coil.CoilError: %s" % (why, e))
    try:
        static(torch.randn(6, 8), y)
        t.ok(False, "wrong static batch raises coil.CoilError")
    except coil.CoilError as e:
        t.ok("dim 0 is 6" in str(e), "wrong static batch raises coil.CoilError: %s" % e)
    # what compile() returns recompiles instead (dynamic=None: the changed dim symbolic)
    x6 = torch.randn(6, 8)
    got = f(x6, y)
    st = f.stats()
    t.ok(rel_err(eager(m, (x6, y))["a"], got["a"]) <= TOL and st["recompiles"] == 1
         and st["recompile_reasons"] == [{"input": 0, "dim": 0, "old": 5, "new": 6}]
         and f.graph["inputs"][0]["shape"][0] == "s0",
         "compile(): another batch recompiles once with dim 0 symbolic", st)
    try:
        f(x.double(), y)
        t.ok(False, "compile(): a dtype the module itself rejects raises the module's error")
    except coil.CoilError as e:
        t.ok(False, "compile(): a dtype the module itself rejects raises the module's error", str(e))
    except RuntimeError as e:
        t.ok(True, "compile(): a dtype the module itself rejects raises the module's error: %s" % str(e)[:80])


class PoolChannelsLast(torch.nn.Module):
    """ConvNeXt's head: adaptive_avg_pool2d to 1x1 of a channels-last input, which ATen
    restrides in place (make_fx: aten.as_strided)."""

    def forward(self, x):
        return torch.nn.functional.adaptive_avg_pool2d(x.permute(0, 3, 1, 2), 1).flatten(1) * 2


def test_restride(t, cache):
    m = PoolChannelsLast()
    x = torch.randn(3, 5, 5, 8)
    try:
        f = coil.compile(m, (x,), cache_dir=cache, coil=COIL)
        ops = [n["op"] for n in f.graph["nodes"]]
        err = rel_err(eager(m, (x,)), f(x))
        t.ok(err <= TOL and "aten.as_strided.default" not in ops,
             "a data-preserving as_strided (channels-last pooling) becomes a view (rel err %.2e)" % err,
             repr(ops))
    except coil.CoilError as e:
        t.ok(False, "a data-preserving as_strided becomes a view", str(e))


class ConstMask(torch.nn.Module):
    """Swin-style: an attention mask built with slicing assignments (fill, slice_scatter) and a
    bias gathered from a param table (index.Tensor): ops coil lacks, on no input."""

    def __init__(self, inplace_on_param=False):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(10, 4))
        self.register_buffer("idx", torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [0, 9, 2, 1], [3, 3, 4, 4]]))
        self.inplace_on_param = inplace_on_param

    def forward(self, x):
        mask = x.new_zeros((4, 4))
        mask[1:3, :] = 1.0
        bias = self.table[self.idx].sum((0, 2))
        if self.inplace_on_param:  # Swin V2: in-place ops functionalization leaves alone
            b = self.table.clone()
            b[0:2].zero_()
            bias = bias + torch.relu_(b[:4]).sum(0)
        return x @ mask + bias


def test_fold(t, cache):
    for inplace in (False, True):
        m = ConstMask(inplace)
        x = torch.randn(3, 4)
        what = "with in-place ops on param copies" if inplace else "(mask, gathered bias)"
        try:
            f = coil.compile(m, (x,), cache_dir=cache, coil=COIL)
            ops = set(n["op"] for n in f.graph["nodes"])
            err = rel_err(eager(m, (x,)), f(x))
            bad = ops & {"aten.fill.Tensor"}  # (index.Tensor and slice_scatter are coil's own now)
            t.ok(err <= TOL and not bad and float(m.table[0].abs().sum()) > 0,
                 "input-independent unsupported ops are folded %s (rel err %.2e)" % (what, err), repr(ops))
        except coil.CoilError as e:
            t.ok(False, "input-independent unsupported ops are folded %s" % what, str(e))
    # ops coil lacks, on an input, are still reported
    class Slices(torch.nn.Module):
        def forward(self, x):
            y = x.clone()
            y[1:3] = 0.5
            return torch.cumprod(y, 0)
    try:
        coil.compile(Slices(), (torch.randn(5, 3),), cache_dir=cache, coil=COIL)
        t.ok(False, "an op coil lacks on an input raises coil.UnsupportedError")
    except coil.UnsupportedError as e:
        t.ok("aten.cumprod" in str(e), "an op coil lacks on an input raises coil.UnsupportedError: %s" % str(e)[:100])
    # advanced indexing of an input by an input: coil's own index.Tensor
    class Gather(torch.nn.Module):
        def forward(self, x, i):
            return x[i], x[:, i[:2]]
    x, i = torch.randn(5, 3), torch.tensor([0, 2, -1])
    f = coil.compile(Gather(), (x, i), cache_dir=cache, coil=COIL)
    t.ok(max(rel_err(a, b) for a, b in zip(eager(Gather(), (x, i)), f(x, i))) <= TOL and
         any(n["op"] == "aten.index.Tensor" for n in f.graph["nodes"]),
         "index.Tensor on inputs (a negative index too) compiles and matches eager")


class NoneOut(torch.nn.Module):
    """wav2vec2's habit: (features, lengths) with lengths None when none were given; plus a
    weight-normed conv (aten._weight_norm_interface: two results, from params alone)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.utils.weight_norm(torch.nn.Conv1d(2, 4, 3, padding=1), dim=2)

    def forward(self, x):
        return self.conv(x), None, {"scale": 2, "name": "feat"}


def test_nontensor_outputs(t, cache):
    m = NoneOut()
    x = torch.randn(2, 2, 9)
    try:
        f = coil.compile(m, (x,), cache_dir=cache, coil=COIL)
        got, want = f(x), eager(m, (x,))
        ops = set(n["op"] for n in f.graph["nodes"])
        t.ok(isinstance(got, tuple) and len(got) == 3 and got[1] is None and got[2] == {"scale": 2, "name": "feat"}
             and rel_err(want[0], got[0]) <= TOL and len(f.graph["outputs"]) == 1
             and "aten._weight_norm_interface.default" not in ops,
             "None and constant outputs come back where the module had them; weight norm folds "
             "(rel err %.2e)" % rel_err(want[0], got[0]), repr(got)[:200])
    except coil.CoilError as e:
        t.ok(False, "None and constant outputs come back where the module had them", str(e))
    try:
        coil.compile(m, (x,), dynamic=True, cache_dir=cache, coil=COIL)(x)
        t.ok(False, "a constant output with symbolic sizes raises coil.UnsupportedError")
    except coil.UnsupportedError as e:
        t.ok("output leaf" in str(e), "a constant output with symbolic sizes raises coil.UnsupportedError: %s" % e)

    class Bad(torch.nn.Module):
        def forward(self, x):
            return x * 2, object()
    try:
        coil.compile(Bad(), (x,), cache_dir=cache, coil=COIL)(x)
        t.ok(False, "an object output raises coil.UnsupportedError")
    except coil.UnsupportedError as e:
        t.ok("object (output leaf 1)" in str(e), "an object output raises coil.UnsupportedError: %s" % e)


class Sage(torch.nn.Module):
    """GraphSAGE's mean aggregation and a GCN-style sum in plain torch (PyG's pattern:
    index_select the sources, scatter into the targets)."""

    def __init__(self, f=80, h=24):
        super().__init__()
        self.l1, self.r1, self.l2 = torch.nn.Linear(f, h), torch.nn.Linear(f, h), torch.nn.Linear(h, 4)

    def forward(self, x, src, dst):
        msg = torch.index_select(x, 0, src)
        agg = torch.zeros_like(x).scatter_reduce(0, dst.unsqueeze(1).expand(-1, x.shape[1]), msg, "mean",
                                                 include_self=False)
        h = torch.relu(self.l1(agg) + self.r1(x))
        s = torch.zeros_like(h).scatter_add(0, dst.unsqueeze(1).expand(-1, h.shape[1]), torch.index_select(h, 0, src))
        return self.l2(s)


def emitted_c(graph, cache):
    """The C that `coil compile --emit-c` writes for graph (a dict), as one text."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "g.json"), "w") as fh:
            json.dump(graph, fh)
        os.mkdir(os.path.join(d, "c"))
        subprocess.run([COIL, "compile", os.path.join(d, "g.json"), "--emit-c", os.path.join(d, "c")],
                       env=dict(os.environ, COIL_CACHE_DIR=cache), check=True, stdout=subprocess.DEVNULL)
        return "".join(open(os.path.join(d, "c", k)).read() for k in os.listdir(os.path.join(d, "c"))
                       if k.endswith(".c"))


def test_gnn(t, cache):
    torch.manual_seed(3)
    n, e = 300, 3000
    x, src, dst = torch.randn(n, 80), torch.randint(0, n, (e,)), torch.randint(0, n, (e,))
    m = Sage().eval()  # at 3 threads three target ranges
    try:
        outs = [coil.compile(m, (x, src, dst), threads=k, cache_dir=cache, coil=COIL)(x, src, dst) for k in (1, 3)]
        err = rel_err(eager(m, (x, src, dst)), outs[0])
        t.ok(err <= TOL and torch.equal(outs[0], outs[1]),
             "GraphSAGE mean + GCN sum (index_select, scatter_reduce and scatter_add over a broadcast index): "
             "matches eager (rel err %.2e), "
             "the same bits at 1 and 3 threads" % err)
        # the gathers are read by the scatters themselves: no [edges, features] messages
        text = emitted_c(coil.export_graph(m, (x, src, dst))[0], cache)
        calls = [ln for ln in text.splitlines() if "); /* kernel" in ln]
        t.ok(sum("coil.gather_scatter" in ln for ln in calls) == 2 and not any("index_select" in ln for ln in calls),
             "GraphSAGE's two aggregations are coil.gather_scatter kernels, no index_select kernel left")
        f = coil.compile(m, (x, src, dst), cache_dir=cache, coil=COIL)
        bad = dst.clone()
        bad[17] = n
        f(x, src, bad)
        t.ok(False, "a target index out of range raises coil.CoilError")
    except coil.CoilError as e:
        t.ok("out of range" in str(e), "a target index out of range raises coil.CoilError: %s" % e)


class Aggregate(torch.nn.Module):
    """Messages [edges, F] reduced into fills of [nodes, F] (PyG's scatter as plain torch writes it):
    the fills are written by the scatter kernels themselves."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, msg, dst):
        i, shape = dst.unsqueeze(1).expand_as(msg), (self.n, msg.shape[1])
        return (torch.zeros(shape).scatter_add(0, i, msg),
                torch.full(shape, -1.5).scatter_reduce(0, i, msg, "amax", include_self=True),
                torch.zeros(shape).scatter_reduce(0, i, msg, "mean", include_self=False),
                torch.full(shape, 2.0).index_add(0, dst, msg))


def test_gnn_messages(t, cache):
    torch.manual_seed(5)
    n, e, f = 300, 3000, 16  # e * f > 32768: the kernels split their targets at 2 threads
    msg, dst = torch.randn(e, f), torch.randint(0, n, (e,))
    dst[:40] = 7  # a hot target
    m = Aggregate(n).eval()
    want = eager(m, (msg, dst))
    one = coil.compile(m, (msg, dst), threads=1, cache_dir=cache, coil=COIL)(msg, dst)
    err = max(rel_err(w, o) for w, o in zip(want, one))
    f2 = coil.compile(m, (msg, dst), threads=2, cache_dir=cache, coil=COIL)
    # the first call times one task (half the edges) against two (the rest), the later ones take the faster
    same = all(all(torch.equal(a, b) for a, b in zip(one, f2(msg, dst))) for _ in range(9))
    t.ok(err <= TOL and same, "sum, amax, mean and index_add of messages into zeros and full(): match eager "
         "(rel err %.2e), the same bits at 1 thread and in 9 calls at 2" % err)
    text = emitted_c(coil.export_graph(m, (msg, dst))[0], cache)
    calls = [ln for ln in text.splitlines() if "); /* kernel" in ln]
    # each writes its fill into a target's row at its first edge and where no edge came, no pass of its own
    fills = [text.count("dst[k * C + q] = (float)%s;" % v) for v in ("0", "-1.5", "2")]
    t.ok(len(calls) == 4 and fills == [2, 1, 1] and "memset(dst" not in text and "dst[e] =" not in text,
         "the four scatters are the only kernels (%d), each writing its fill (%s): no zeros/full kernel "
         "materialised" % (len(calls), fills))


class Rows(torch.nn.Module):
    """Gathered rows (index_select), twice: two large outputs."""

    def forward(self, x, i):
        return torch.index_select(x, 0, i), torch.index_select(x, 0, i) * 2


def test_large_outputs(t, cache):
    """Outputs of 4 MiB and up are written into storage the model keeps, once nothing of an earlier
    call holds it; a gather of 17.9 MB (over COIL_NT_BYTES) streams its rows."""
    torch.manual_seed(6)
    x, i = torch.randn(1000, 64), torch.randint(0, 1000, (70000,))
    m = Rows()
    f = coil.compile(m, (x, i), threads=2, cache_dir=cache, coil=COIL)
    want = eager(m, (x, i))
    y = f(x, i)
    ptrs = sorted(o.data_ptr() for o in y)
    exact = all(torch.equal(a, b) for a, b in zip(want, y))
    del y
    y = f(x, i)
    reused = sorted(o.data_ptr() for o in y) == ptrs
    # a view, a numpy array and a storage of the second call's outputs keep them from the third
    keep = (y[0][5:7], y[1].numpy(), y[0].storage())
    held = [o.clone() for o in y]
    del y
    x2 = torch.randn(1000, 64)
    y3 = f(x2, i)
    apart = not set(o.data_ptr() for o in y3) & set(ptrs)
    intact = torch.equal(keep[0], held[0][5:7]) and torch.equal(torch.from_numpy(keep[1]), held[1])
    right = all(torch.equal(a, b) for a, b in zip(eager(m, (x2, i)), y3))
    tmp = os.path.join(cache, "y3.pt")
    torch.save(y3[0], tmp)
    saved = torch.equal(torch.load(tmp), y3[0])
    t.ok(exact and reused and apart and intact and right and saved,
         "two 17.9 MB gathers: exact (%s), the storage reused once dropped (%s), not while a view, a numpy "
         "array or a storage holds it (%s, held values intact %s, new ones right %s), torch.save works (%s)"
         % (exact, reused, apart, intact, right, saved))
    f.close()


def test_instance_norm(t, cache):
    """InstanceNorm (batch statistics of [1, N*C, ...], the weight repeated N times) static and with
    every dim symbolic (the repeat count is the batch)."""
    torch.manual_seed(4)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.InstanceNorm2d(4, affine=True), torch.nn.ReLU(),
                            torch.nn.Conv2d(4, 2, 1), torch.nn.InstanceNorm2d(2)).eval()
    with torch.no_grad():
        m[1].weight.uniform_(0.5, 2)
        m[1].bias.uniform_(-1, 1)
    x = torch.randn(2, 3, 9, 9)
    err = rel_err(eager(m, (x,)), coil.compile(m, (x,), cache_dir=cache, coil=COIL)(x))
    f = coil.compile(m, (x,), dynamic=True, cache_dir=cache, coil=COIL)
    worst = max(rel_err(eager(m, (y,)), f(y)) for y in (torch.randn(3, 3, 12, 7), torch.randn(1, 3, 5, 16)))
    t.ok(err <= TOL and worst <= TOL, "InstanceNorm2d (affine and not): matches eager static (%.2e) and with batch, "
         "height and width symbolic at two other sizes (%.2e)" % (err, worst))


class Recurrent(torch.nn.Module):
    """A bidirectional 2-layer LSTM (batch first) into a GRU (the states given), as a speech model's encoder."""

    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(12, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.gru = torch.nn.GRU(32, 8, batch_first=True)

    def forward(self, x, h):
        y, (hn, cn) = self.lstm(x)
        z, hg = self.gru(y, h)
        return z, hn, cn, hg


def test_gemv(t, cache):
    """A classifier at batch 1 (coil's own gemv in the oneDNN runtime, rows split over threads):
    matches eager, and 1 and 2 threads give the same bits; at batch 2 oneDNN's kernel."""
    torch.manual_seed(5)
    m = torch.nn.Sequential(torch.nn.Linear(1100, 1003), torch.nn.Hardswish(), torch.nn.Linear(1003, 10)).eval()
    x = torch.randn(1, 1100)
    f1 = coil.compile(m, (x,), threads=1, cache_dir=cache, coil=COIL)
    f2 = coil.compile(m, (x,), threads=2, cache_dir=cache, coil=COIL)
    y1, y2 = f1(x), f2(x)
    x2 = torch.randn(2, 1100)
    err2 = rel_err(eager(m, (x2,)), coil.compile(m, (x2,), cache_dir=cache, coil=COIL)(x2))
    t.ok(rel_err(eager(m, (x,)), y1) <= TOL and torch.equal(y1, y2) and err2 <= TOL,
         "Linear+Hardswish+Linear at batch 1: matches eager (%.2e), same bits at 1 and 2 threads (%s); "
         "batch 2 (%.2e)" % (rel_err(eager(m, (x,)), y1), torch.equal(y1, y2), err2))


def test_rnn(t, cache):
    """nn.LSTM and nn.GRU are one node each (coil.lstm, coil.gru), not unrolled per step: the sequence
    length and batch can be symbolic."""
    torch.manual_seed(5)
    m = Recurrent().eval()
    x, h = torch.randn(3, 20, 12), torch.randn(1, 3, 8)
    graph = coil.export_graph(m, (x, h))[0]
    ops = sorted(n["op"] for n in graph["nodes"] if n["op"] != "aten.new_zeros.default")  # the LSTM's zero states
    err = max(rel_err(a, b) for a, b in zip(eager(m, (x, h)), coil.compile(m, (x, h), cache_dir=cache, coil=COIL)(x, h)))
    f = coil.compile(m, (x, h), dynamic=True, cache_dir=cache, coil=COIL)
    worst = 0.0
    for b, s in ((2, 7), (4, 33)):
        xs, hs = torch.randn(b, s, 12), torch.randn(1, b, 8)
        worst = max([worst] + [rel_err(p, q) for p, q in zip(eager(m, (xs, hs)), f(xs, hs))])
    t.ok(ops == ["coil.gru.default", "coil.lstm.default"] and err <= TOL and worst <= TOL,
         "LSTM (2 layers, bidirectional) + GRU: one node each (%s), match eager (%.2e) and with batch and "
         "sequence symbolic at two other sizes (%.2e)" % (ops, err, worst))


def test_dynamic(t, cache):
    m, ins = coil_export.make_model("torchvision:resnet18", size=32, batch=2)
    f = coil.compile(m, ins, dynamic_batch=True, cache_dir=cache, coil=COIL)
    worst = 0.0
    for b in (1, 3, 2):
        x = torch.randn(b, 3, 32, 32)
        got = f(x)
        worst = max(worst, rel_err(eager(m, (x,)), got))
        if got.shape[0] != b:
            worst = float("inf")
    t.ok(worst <= TOL, "dynamic batch resnet18 at batch 1, 3, 2 matches eager (worst %.2e)" % worst)
    mem = f.memory_bytes((torch.randn(4, 3, 32, 32),))
    t.ok(mem > f.artifact.param_bytes() > 0, "memory_bytes: arena + params = %d bytes" % mem)


def test_profile(t, cache):
    """CompiledModule.profile: one entry a kernel plus the run's own part; a linear's flops
    and a pointwise kernel's bytes exact at each batch of a symbolic batch."""
    nn = torch.nn
    m = nn.Sequential(nn.Linear(64, 32), nn.Softmax(dim=1), nn.GELU()).eval()
    f = coil.compile(m, (torch.randn(3, 64),), dynamic_batch=True, cache_dir=cache, coil=COIL)
    for b in (5, 9):
        p = f.profile(torch.randn(b, 64), runs=3)
        lin = [e for e in p if "aten.addmm" in e["name"] and e["name"].startswith("extern")]
        t.ok(len(p) >= 3 and p[-1]["name"].startswith("run:") and all(e["ms"] >= 0 for e in p) and
             len(lin) == 1 and lin[0]["flops"] == 2 * b * 32 * 64 and
             lin[0]["bytes"] == 4 * (b * 64 + b * 32 + 32 * 64 + 32),
             "profile at batch %d: the linear's flops 2 x %d x 32 x 64, its bytes x, y, weight and bias" % (b, b),
             p)


def test_profile_repeat(t, cache):
    """profile(repeat=r): each kernel r laps in a row (the run takes about r times as long), its
    fastest lap counted once a run (bytes and flops as in a plain profile); the handle runs
    plainly again after it."""
    nn = torch.nn
    torch.manual_seed(5)
    m = nn.Sequential(nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 512)).eval()
    x = torch.randn(256, 512)
    f = coil.compile(m, (x,), cache_dir=cache, coil=COIL, threads=1)
    plain = f.profile(x, runs=3)
    t_rep = t_plain = float("inf")
    for _ in range(3):  # the fastest of three each, alternating: a busy machine slows both
        t0 = time.perf_counter()
        rep = f.profile(x, runs=3, repeat=8)
        t_rep = min(t_rep, time.perf_counter() - t0)
        t0 = time.perf_counter()
        f.profile(x, runs=3)
        t_plain = min(t_plain, time.perf_counter() - t0)
    t.ok(len(rep) == len(plain) and all(a["name"] == b["name"] and a["bytes"] == b["bytes"] and
                                        a["flops"] == b["flops"] for a, b in zip(plain, rep)) and
         all(e["ms"] > 0 for e in rep[:-1]),
         "profile(repeat=8): the same kernels, bytes and flops counted once a run", (plain, rep))
    t.ok(t_rep > 3 * t_plain, "profile(repeat=8) runs each kernel 8 times: %.1f ms against %.1f ms plain" % (
        1e3 * t_rep, 1e3 * t_plain))
    with torch.no_grad():
        err = (f(x) - m(x)).abs().max().item()
    t.ok(err < 1e-4, "a plain call after profile(repeat=8) matches eager (%.1e)" % err)


def test_low_memory(t, cache):
    """low_memory=True: the same artifact, every convolution's weights at their own size (no
    Winograd); a conv with batch norm, residual and bias folded still equal to eager."""
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(16, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
            self.b = nn.Conv2d(64, 64, 3, padding=1)
            self.c = nn.Conv2d(64, 8, 1)

        def forward(self, x):
            y = self.a(x)
            return self.c(torch.relu(self.b(y) + y))

    torch.manual_seed(3)
    m = Net().eval()
    with torch.no_grad():
        m.a[1].running_mean.uniform_(-1, 1)
        m.a[1].running_var.uniform_(0.5, 2)
    x = torch.randn(2, 16, 40, 40)
    want = m(x)
    mods = [coil.compile_artifact(m, (x,), cache_dir=cache, coil=COIL, threads=1, keep_params=False, low_memory=lm)
            for lm in (False, True)]
    got = [f(x) for f in mods]
    mem = [f.model.memory() for f in mods]
    w, p = [e["weights"] for e in mem], 4 * sum(q.numel() for n, q in m.named_parameters() if "weight" in n)
    t.ok(mods[0].artifact_path == mods[1].artifact_path, "low memory: the same artifact")
    t.ok(all(rel_err(want, g) <= TOL for g in got), "low memory: both equal to eager (%s)" % [rel_err(want, g) for g in got])
    # (oneDNN 2.6's Winograd kernels are AVX-512 only; below it the runtime's own F(4x4,3x3) runs
    # where the target has AVX2 and FMA; on a plain x86-64 one, the same packing either way)
    wino = "avx2" in coil._targets.features()
    t.ok((w[0] > 1.5 * p if wino else w[0] <= 1.1 * p) and w[1] <= 1.1 * p,
         "low memory: packed weights %d bytes by default (%s), %d without, the params %d" % (
             w[0], "Winograd" if wino else "no Winograd here", w[1], p))
    for f in mods:
        f.close()


def test_autotune(t, cache):
    """mode="max-autotune": a key of its own, the tuned artifact equal to eager, and every
    lowering it can choose (COIL_AUTOTUNE_FORCE=PATH,UNFUSE) equal to eager too and in the
    artifact's table (coil_model_tune) or its kernels (the activation as generated code)."""
    import ctypes
    nn = torch.nn
    torch.manual_seed(0)
    # the softmax keeps the second convolution out of an NHWC chain: every path is open to it
    # (activations oneDNN computes fast: SiLU and GELU never fuse into an f32 conv, below)
    m = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.Hardswish(), nn.Softmax(dim=1), nn.Conv2d(16, 16, 3, padding=1),
                      nn.LeakyReLU(0.2), nn.Conv2d(16, 8, 1), nn.Hardswish()).eval()
    x = torch.randn(2, 8, 12, 12)
    want = eager(m, (x,))
    base = coil.compile(m, (x,), threads=1, cache_dir=cache, coil=COIL)
    cm = coil.compile(m, (x,), threads=1, cache_dir=cache, coil=COIL, mode="max-autotune")
    got = cm(x)
    info = cm.compiled.info if hasattr(cm, "compiled") else getattr(cm, "info", {})
    t.ok(rel_err(want, got) <= TOL and base.artifact_path != cm.artifact_path,
         "max-autotune: equal to eager, an artifact of its own key (%s)" % info.get("autotune"),
         (rel_err(want, got), base.artifact_path, cm.artifact_path))
    try:
        coil.compile(m, (x,), cache_dir=cache, coil=COIL, mode="fastest")(x)
        t.ok(False, "mode='fastest' is refused")
    except coil.CoilError as e:
        t.ok("mode" in str(e) and "max-autotune" in str(e), "mode='fastest' is refused: %s" % e)
    # a graph that does not run on the tuner's made-up data (zero indices, here out of range)
    # still compiles, untuned, and says why
    class Idx(nn.Module):
        def __init__(self):
            super().__init__()
            self.c, self.e = nn.Conv2d(3, 8, 3), nn.Embedding(10, 4)

        def forward(self, x, i):
            return self.c(x).sum() + self.e(10 - i).sum()
    mi, xi = Idx().eval(), (torch.randn(1, 3, 8, 8), torch.tensor([1, 2]))
    f = coil.compile(mi, xi, threads=1, cache_dir=cache, coil=COIL, mode="max-autotune")
    t.ok(rel_err(eager(mi, xi), f(*xi)) <= TOL and "did not run on made-up data" in f.info.get("autotune", ""),
         "max-autotune of a graph its made-up data cannot run: compiled untuned, and says so", f.info)
    for path, unfuse in ((0, 1), (1, 0), (2, 1), (3, 0), (4, 0), (5, 1)):
        os.environ["COIL_AUTOTUNE_FORCE"] = "%d,%d" % (path, unfuse)
        try:
            f = coil.compile(m, (x,), threads=1, cache_dir="%s-force-%d-%d" % (cache, path, unfuse), coil=COIL,
                             mode="max-autotune")
            got = f(x)
        finally:
            del os.environ["COIL_AUTOTUNE_FORCE"]
        lib = ctypes.CDLL(f.artifact_path)
        k, mask = ctypes.c_int(), ctypes.c_uint()
        chosen = [lib.coil_model_tune(j, -1, ctypes.byref(k), ctypes.byref(mask))
                  for j in range(lib.coil_model_tune(-1, -1, ctypes.byref(k), ctypes.byref(mask)))]
        names = [e["name"] for e in f.profile(x, runs=1)]
        acts = [n for n in names if n.startswith("pointwise") and ("aten.hardswish" in n or "aten.leaky_relu" in n)]
        t.ok(rel_err(want, got) <= TOL and path in chosen and bool(acts) == bool(unfuse),
             "max-autotune forced to path %d, activations %s: equal to eager (%.1e), in the table %s" % (
                 path, "as generated code" if unfuse else "fused", rel_err(want, got), chosen), names)


def test_costly_activations(t, cache):
    """SiLU, GELU, sigmoid and tanh after an f32 convolution run as generated code where the
    target has AVX-512 (oneDNN's conv kernels compute them several times slower there) and fused
    below it (the generated pass costs more there); ReLU and hardswish stay fused everywhere."""
    nn = torch.nn
    torch.manual_seed(1)
    for target in [g for g in ("x86-64-v3", "x86-64-v4") if coil.runs_here(g)]:
        for act, fused in ((nn.SiLU(), False), (nn.GELU(), False), (nn.Sigmoid(), False), (nn.Tanh(), False),
                           (nn.ReLU(), True), (nn.Hardswish(), True)):
            fused = fused or target == "x86-64-v3"
            m = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), act).eval()
            x = torch.randn(1, 8, 20, 20)
            f = coil.compile(m, (x,), threads=1, cache_dir=cache, coil=COIL, target=target)
            names = [e["name"] for e in f.profile(x, runs=1)]
            gen = any(n.startswith("pointwise") for n in names)
            t.ok(rel_err(eager(m, (x,)), f(x)) <= TOL and gen != fused,
                 "%s: conv + %s: matches eager, the activation %s" % (
                     target, type(act).__name__, "fused" if fused else "generated"), names)


def test_targets(t, fns):
    from coil import _targets
    full = {"avx", "avx2", "fma", "bmi1", "bmi2", "movbe", "avx512f", "avx512dq", "avx512cd",
            "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"}
    v3 = {"avx", "avx2", "fma", "bmi1", "bmi2", "movbe"}
    ok = (_targets.best_target(full) == "avx512_bf16" and _targets.best_target(v3) == "x86-64-v3"
          and _targets.best_target(set()) == "generic"
          and _targets.best_target(v3 | {"avx512_vnni"}) == "x86-64-v3"
          and _targets.runs_here("x86-64-v3", v3) and not _targets.runs_here("x86-64-v4", v3)
          and _targets.runs_here("generic", set()) and not _targets.runs_here("bogus", full))
    t.ok(ok, "targets as feature sets: generic, x86-64-v3, x86-64-v4, avx512_vnni, avx512_bf16")
    t.ok(coil.runs_here(coil.best_target()), "this CPU's best target: %s" % coil.best_target())
    if "mlp" in fns:
        f, m, _ = fns["mlp"]
        # pretend this CPU lacks every feature: it runs generic code only
        os.environ["COIL_CPU_MASK"] = "avx2,avx512"
        try:
            coil.load(f.artifact_path, list(m.state_dict().values()))
            t.ok(False, "an artifact for a target this CPU lacks is refused")
        except coil.CoilError as e:
            t.ok("this CPU lacks it" in str(e) and e.stage == "load",
                 "an artifact for a target this CPU lacks is refused before it runs: %s" % str(e)[-90:])
        finally:
            del os.environ["COIL_CPU_MASK"]
    try:
        coil.compile(torch.nn.Linear(2, 2), (torch.randn(1, 2),), target="pentium")
        t.ok(False, "an unknown target is a CoilError")
    except coil.CoilError as e:
        t.ok("unknown target" in str(e), "an unknown target is a CoilError: %s" % str(e)[:60])


def test_server(t, cache, fns):
    if not os.access(COILD, os.X_OK):
        t.ok(False, "coild exists at %s" % COILD)
        return
    with tempfile.TemporaryDirectory() as d:
        pf = os.path.join(d, "port")
        p = subprocess.Popen([COILD, "--listen", "127.0.0.1:0", "--cache-dir", os.path.join(d, "srv"),
                              "--workers", "1", "--port-file", pf] + (["--allow-root"] if os.geteuid() == 0 else []),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            for _ in range(100):
                if os.path.exists(pf) and open(pf).read().strip():
                    break
                time.sleep(0.05)
            port = open(pf).read().strip()
            m, ins = coil_export.make_model("mlp", batch=3)
            f = coil.compile(m, ins, server="http://127.0.0.1:%s" % port,
                             cache_dir=os.path.join(d, "client"), coil=COIL)
            err = rel_err(eager(m, ins), f(*ins))
            t.ok(err <= TOL and f.artifact_path.startswith(os.path.join(d, "client")),
                 "compile through coild (server=URL) matches eager (rel err %.2e)" % err, f.artifact_path)
            fleet_decision(t, "http://127.0.0.1:%s" % port, d)
        except Exception as e:  # noqa: BLE001
            t.ok(False, "compile through coild", "%s: %s" % (type(e).__name__, e))
        finally:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def fleet_decision(t, url, d):
    """The dynamic decision one client made reaches another machine through coild: its
    first compile is already symbolic (no static artifact, no recompile)."""
    import json
    import urllib.error
    import urllib.request
    from coil._dynamic import module_key
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    fa = coil.compile(m, server=url, cache_dir=os.path.join(d, "machine-a"), coil=COIL)
    with torch.no_grad():
        fa(torch.randn(3, 8))
        fa(torch.randn(5, 8))
    sa = fa.stats()
    key = module_key(m, (torch.randn(3, 8),))
    with urllib.request.urlopen("%s/v1/decisions/%s" % (url, key), timeout=10) as r:
        stored = json.loads(r.read().decode())
    t.ok(sa["recompiles"] == 1 and stored.get("symbolic") == [[0, 0, "batch"]],
         "machine A recompiled once as dynamic and coild holds its decision %s" % stored.get("symbolic"))
    fb = coil.compile(m, server=url, cache_dir=os.path.join(d, "machine-b"), coil=COIL)
    errs = []
    with torch.no_grad():
        for b in (7, 2, 11, 1):
            x = torch.randn(b, 8)
            errs.append(rel_err(m(x), fb(x)))
    sb = fb.stats()
    t.ok(sb["exports"] == 1 and sb["compiles"] + sb["cache_hits"] == 1 and sb["recompiles"] == 0 and
         sb["artifacts"] == 1 and sb["decision"] == "server" and
         [s["symbol"] for s in sb["symbolic"]] == ["batch"] and max(errs) <= TOL,
         "machine B exports once, symbolic from its first call, 4 sizes on one artifact (decision "
         "from the server; compiles %d, cache hits %d, recompiles %d, rel err %.1e)" % (
             sb["compiles"], sb["cache_hits"], sb["recompiles"], max(errs)))
    # bad decisions are refused, naming the field; the stored one is intact
    req = urllib.request.Request("%s/v1/decisions/%s" % (url, key), method="POST",
                                 data=b'{"version": 1, "symbolic": [[0, 0, "x;y"]]}',
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=10)
        t.ok(False, "a decision with a bad name is refused")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read().decode())
        t.ok(e.code == 400 and "symbolic[0][2]" in body.get("error", ""),
             "a decision with a bad name is refused: %d %s" % (e.code, body.get("error")))
    with urllib.request.urlopen("%s/v1/decisions/%s" % (url, key), timeout=10) as r:
        t.ok(json.loads(r.read().decode()) == stored, "the stored decision is intact")


def test_bf16(t, cache):
    """bf16 both ways in: a model traced under torch.autocast (the exporter keeps the casts;
    weights are cast once, at create) and a model converted with .to(torch.bfloat16). The
    result is bf16 like eager's, and its error against the f32 model stays within 1.5x eager
    bf16's own (plus one bf16 ulp of the output's scale)."""
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).eval()
    x = torch.randn(8, 64)
    with torch.no_grad():
        ref = mlp(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            want = mlp(x)
            f = coil.compile(mlp, (x,), threads=1, cache_dir=cache, coil=COIL)
            got = f(x)
    ok_bf16(t, "autocast mlp", ref, want, got)
    m, ins = coil_export.make_model("torchvision:resnet18", size=64)
    mb, xb = m.to(torch.bfloat16), tuple(i.to(torch.bfloat16) for i in ins)
    with torch.no_grad():
        ref = coil_export.make_model("torchvision:resnet18", size=64)[0](*ins)
        want = mb(*xb)
        f = coil.compile(mb, xb, threads=1, cache_dir=cache, coil=COIL)
        got = f(*xb)
    ok_bf16(t, "resnet18 in bf16", ref, want, got)
    ln = torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Softmax(-1)).eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        ref = ln(x)
        lb = ln.to(torch.bfloat16)
        want = lb(x.bfloat16())
        got = coil.compile(lb, (x.bfloat16(),), threads=1, cache_dir=cache, coil=COIL)(x.bfloat16())
    ok_bf16(t, "layer norm, gelu, softmax in bf16", ref, want, got)
    # the precision option on f32 models: autocast's rules applied by coil; f32 in and out
    for spec, kw in [("torchvision:resnet18", {"size": 64}), ("transformer:2", {})]:
        m, ins = coil_export.make_model(spec, **kw)
        with torch.no_grad():
            ref = m(*ins)
            want = m.to(torch.bfloat16)(*(i.to(torch.bfloat16) if i.is_floating_point() else i for i in ins))
            m = coil_export.make_model(spec, **kw)[0]
            f = coil.compile(m, ins, threads=1, cache_dir=cache, coil=COIL, dtype=torch.bfloat16)
            got = f(*ins)
        scale = float(ref.abs().max())
        e_got = float((got.double() - ref.double()).abs().max())
        e_eager = float((want.double() - ref.double()).abs().max())
        t.ok(got.dtype == torch.float32 and e_got <= 1.5 * e_eager + scale / 256,
             "%s with dtype=torch.bfloat16: f32 out, error %.3g against f32 (all-bf16 eager: %.3g)"
             % (spec, e_got, e_eager), "dtype %s" % got.dtype)
    try:
        coil.compile(mlp, (x,), cache_dir=cache, coil=COIL, dtype=torch.float16)
        t.ok(False, "dtype=torch.float16 is refused", "accepted")
    except coil.CoilError as e:
        t.ok("bfloat16" in str(e), "dtype=torch.float16 is refused: %s" % e)


def ok_bf16(t, what, ref, want, got):
    scale = float(ref.abs().max())
    e_got = float((got.double() - ref.double()).abs().max())
    e_eager = float((want.double() - ref.double()).abs().max())
    t.ok(got.dtype == torch.bfloat16 and e_got <= 1.5 * e_eager + scale / 256,
         "%s: bf16 out, error %.3g against f32 (eager bf16: %.3g, scale %.3g)" % (what, e_got, e_eager, scale),
         "dtype %s" % got.dtype)


def test_verified_load(t, fns):
    """coil.compile loads the artifact only with the sha256 `coil compile` announced, checked
    in sealed memory: a copy with one byte changed (same size) is refused."""
    if "mlp" not in fns:
        t.ok(False, "verified load: mlp did not compile")
        return
    f = fns["mlp"][0]
    sha = f.info["sha256"]
    with open(f.artifact_path, "rb") as src:
        data = bytearray(src.read())
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "copy.so")
        with open(p, "wb") as out:
            out.write(data)
        t.ok(coil.Artifact(p, sha256=sha).target == f.target, "an unchanged copy loads with its sha256")
        data[len(data) // 2] ^= 0x5A
        with open(p, "r+b") as out:
            out.write(data)
        try:
            coil.Artifact(p, sha256=sha)
            t.ok(False, "a changed artifact is refused", "it loaded")
        except coil.CoilError as e:
            t.ok("sha256 mismatch" in str(e) and "refusing to load" in str(e),
                 "a changed artifact is refused: %s" % str(e)[:60], str(e))


def main():
    t = Tap()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        fns = t.run("models", test_models, t, cache) or {}
        t.run("unsupported", test_unsupported, t, cache)
        t.run("repeat and threads", test_repeat_and_threads, t, fns)
        t.run("inputs and outputs", test_io, t, cache)
        t.run("restride", test_restride, t, cache)
        t.run("fold", test_fold, t, cache)
        t.run("non-tensor outputs", test_nontensor_outputs, t, cache)
        t.run("gnn", test_gnn, t, cache)
        t.run("gnn messages", test_gnn_messages, t, cache)
        t.run("large outputs", test_large_outputs, t, cache)
        t.run("instance norm", test_instance_norm, t, cache)
        t.run("rnn", test_rnn, t, cache)
        t.run("gemv", test_gemv, t, cache)
        t.run("dynamic batch", test_dynamic, t, cache)
        t.run("profile", test_profile, t, cache)
        t.run("profile_repeat", test_profile_repeat, t, cache)
        t.run("low memory", test_low_memory, t, cache)
        t.run("autotune", test_autotune, t, cache)
        t.run("costly activations", test_costly_activations, t, cache)
        t.run("targets", test_targets, t, fns)
        t.run("server", test_server, t, cache, fns)
        t.run("verified load", test_verified_load, t, fns)
        t.run("bf16", test_bf16, t, cache)
        for f, _, _ in fns.values():
            f.close()
    t.done()


if __name__ == "__main__":
    main()
