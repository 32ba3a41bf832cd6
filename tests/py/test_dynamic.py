#!/usr/bin/python3
"""Dynamic-batch export (coil_export --dynamic-batch) through coil (TAP output).

Each model is exported once with dynamic_batch=True; `coil validate` must accept the graph and
`coil eval` with inputs of batch 1, 2 and 3 must match PyTorch eager (max abs error <= 1e-4
relative to the output's scale). Also: batch-dependent values outside SymInt slots, or a graph
that changes with the batch, are rejected naming the node.

Run: COIL=build/coil PYTHONPATH=client/python /usr/bin/python3 tests/py/test_dynamic.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

t = Tap()
try:
    import torch
    import coil_export as ce
    import coil_safetensors as st
except Exception as e:  # noqa: BLE001
    t.ok(False, "import torch, coil_export, coil_safetensors", repr(e))
    t.done()

torch.set_num_threads(4)
COIL = os.environ.get("COIL", "build/coil")
PY = "/usr/bin/python3"
EXPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python",
                      "coil_export.py")
HAVE_COIL = os.path.isfile(COIL) and os.access(COIL, os.X_OK)
TMP = tempfile.mkdtemp(prefix="coil_test_dynamic_")
START = time.time()
BATCHES = (1, 2, 3)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def rel_err(a, b):
    a, b = a.double(), b.double()
    scale = max(float(a.abs().max()), 1e-12)
    return float((a - b).abs().max()) / scale


def sym_strings(v, acc):
    if isinstance(v, str):
        acc.append(v)
    elif isinstance(v, list):
        for x in v:
            sym_strings(x, acc)
    return acc


def coil_check(name, m, inputs, d, g, batches=BATCHES):
    """validate, info, and eval at each batch size against eager."""
    r = run([COIL, "validate", d + "/graph.json"])
    if not t.ok(r.returncode == 0, "%s: coil validate accepts the dynamic graph" % name,
                (r.stderr or r.stdout)[-2000:]):
        return
    r = run([COIL, "info", d + "/graph.json"])
    outs = [ln for ln in r.stdout.splitlines() if ln.startswith("output")]
    t.ok(r.returncode == 0 and outs and all("batch" in ln for ln in outs),
         "%s: coil info infers symbolic output shapes" % name, r.stdout[-1000:] + r.stderr[-1000:])
    gen = torch.Generator().manual_seed(11)
    for b in batches:
        xs = tuple(torch.randn((b,) + tuple(x.shape[1:]), generator=gen, dtype=x.dtype) for x in inputs)
        with torch.no_grad():
            ref = m(*xs)
        ref, _ = torch.utils._pytree.tree_flatten(ref)
        ip, op = "%s/in_b%d.safetensors" % (d, b), "%s/out_b%d.safetensors" % (d, b)
        st.save({i["name"]: x for i, x in zip(g["inputs"], xs)}, ip)
        r = run([COIL, "eval", d + "/graph.json", "-w", d + "/weights.safetensors", "-i", ip, "-o", op])
        if not t.ok(r.returncode == 0, "%s: coil eval at batch %d" % (name, b), r.stderr[-2000:]):
            continue
        got = st.load(op)
        errs, bad = [], []
        for k, want in enumerate(ref):
            o = got.get("output%d" % k)
            if o is None or tuple(o.shape) != tuple(want.shape):
                bad.append("output%d: %s vs eager %s" % (k, None if o is None else tuple(o.shape),
                                                         tuple(want.shape)))
                continue
            errs.append(rel_err(want, o))
        t.ok(not bad and errs and max(errs) <= 1e-4,
             "%s: batch %d matches eager (rel err %s)" % (
                 name, b, "%.2e" % max(errs) if errs else "-"), "; ".join(bad))


# ---------------------------------------------------------------- real models

MODELS = [
    ("torchvision:resnet18", {"size": 64}),
    ("torchvision:mobilenet_v3_small", {"size": 64}),
    ("transformer:2", {}),
    ("mlp", {}),
]


def check_model(spec, kw):
    m, inputs = ce.make_model(spec, batch=2, **kw)
    d = os.path.join(TMP, spec.replace(":", "_"))
    g = ce.export(m, inputs, d, dynamic_batch=True, check_coil=HAVE_COIL, coil=COIL)
    t.ok(all(i["shape"][0] == "batch" for i in g["inputs"]), "%s: inputs declare batch" % spec,
         g["inputs"])
    exprs = sorted(set(s for n in g["nodes"] for s in sym_strings(n["args"], [])
                       if "batch" in s))
    t.diag("%s: size expressions %s" % (spec, exprs))
    # PyTorch's own ops on the symbolic graph, at a batch size never traced
    x = tuple(torch.randn((4,) + tuple(i.shape[1:]), generator=torch.Generator().manual_seed(3))
              for i in inputs)
    with torch.no_grad():
        ref = m(*x)
        got = ce.eval_graph(g, st.load(d + "/weights.safetensors"),
                            {i["name"]: v for i, v in zip(g["inputs"], x)})
    t.ok(rel_err(ref, got[0]) <= 1e-4, "%s: eval_graph (PyTorch ops) at batch 4 matches eager" % spec)
    if HAVE_COIL:
        coil_check(spec, m, inputs, d, g)


for spec, kw in MODELS:
    t.run("dynamic %s" % spec, check_model, spec, kw)


# ---------------------------------------------------------------- small cases

class CatView(torch.nn.Module):
    """2*batch+1 rows, viewed explicitly."""

    def __init__(self):
        super().__init__()
        self.row = torch.nn.Parameter(torch.randn(1, 8, generator=torch.Generator().manual_seed(2)))

    def forward(self, x):
        y = torch.cat([x, x * 2, self.row], 0)
        return y.view(y.shape[0], 2, 4).reshape(y.shape[0] * 2, 4) + 1


class Expand(torch.nn.Module):
    def forward(self, x):
        z = torch.zeros(x.shape[0], 3, 8)
        return (x.unsqueeze(1).expand(x.shape[0], 3, 8) + z).reshape(x.shape[0] * 3, 8)


class SelectLast(torch.nn.Module):
    def forward(self, x):
        return x[x.shape[0] - 1] * 2   # select.int index is an `int`, not SymInt


class ScaleByBatch(torch.nn.Module):
    def forward(self, x):
        return x / x.shape[0]          # a Scalar


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] % 2:
            x = x.relu()
        return x * 2


def test_small(name, mod, expect_exprs):
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5))
    d = os.path.join(TMP, name)
    g = ce.export(mod, x, d, dynamic_batch=True, check_coil=False)
    exprs = sorted(set(s for n in g["nodes"] for s in sym_strings(n["args"], []) if "batch" in s))
    t.ok(all(e in exprs for e in expect_exprs), "%s: size expressions %s" % (name, expect_exprs), exprs)
    for b in (1, 5):
        xb = torch.randn(b, 8)
        with torch.no_grad():
            got = ce.eval_graph(g, {k: v.detach() for k, v in mod.state_dict().items()}, {"x": xb})[0]
            want = mod(xb)
        t.ok(torch.allclose(got, want), "%s: eval_graph at batch %d" % (name, b))
    if HAVE_COIL:
        coil_check(name, mod, (x,), d, g)


def expect_error(name, mod, words, batch=3):
    x = torch.randn(batch, 8)
    try:
        ce.export(mod, x, None, dynamic_batch=True, check_coil=False, write=False)
    except ce.ExportError as e:
        msg = str(e)
        t.ok(all(w in msg for w in words), "%s: rejected naming %s" % (name, words), msg)
        return
    t.ok(False, "%s: rejected" % name, "exported without error")


t.run("CatView", test_small, "cat_view", CatView(), ["2*batch+1", "4*batch+2"])
t.run("Expand", test_small, "expand", Expand(), ["batch", "3*batch"])
t.run("SelectLast", expect_error, "batch-dependent select index", SelectLast(),
      ["node 'n0'", "aten.select.int", "'index'", "SymInt"])
t.run("ScaleByBatch", expect_error, "batch-dependent Scalar", ScaleByBatch(),
      ["aten.div.Scalar", "'other'"])
t.run("Branchy", expect_error, "graph changes with the batch", Branchy(), ["changes with the batch size", "node "])


def test_batch1_example():
    # example batch 1: traced at 2, 3, 5; inputs/outputs files keep the batch-1 example
    m, inputs = ce.make_model("mlp", batch=1)
    d = os.path.join(TMP, "mlp_b1")
    g = ce.export(m, inputs, d, dynamic_batch=True, check_coil=False)
    x = st.load(d + "/inputs.safetensors")["x"]
    o = st.load(d + "/outputs.safetensors")["output0"]
    t.ok(g["inputs"][0]["shape"] == ["batch", 16] and list(x.shape) == [1, 16] and list(o.shape) == [1, 10],
         "example batch 1: symbolic graph, batch-1 example files")


t.run("batch 1 example", test_batch1_example)


def test_cli():
    d = os.path.join(TMP, "cli_transformer")
    env = dict(os.environ)
    env["COIL"] = COIL
    r = subprocess.run([PY, EXPORT, "transformer:2", d, "--batch", "3", "--dynamic-batch"],
                       capture_output=True, text=True, env=env)
    if not t.ok(r.returncode == 0, "CLI transformer:2 --dynamic-batch", r.stderr[-2000:]):
        return
    g = json.load(open(d + "/graph.json"))
    views = [n["args"][1] for n in g["nodes"] if n["op"] == "aten.view.default"]
    t.ok(any("16*batch" in v for v in views) and not any(48 in v for v in views),
         "CLI: transformer views are symbolic (16*batch, no baked-in 48)", views[:4])
    if HAVE_COIL:
        r = run([COIL, "eval", d + "/graph.json", "-w", d + "/weights.safetensors",
                 "-i", d + "/inputs.safetensors", "-o", d + "/coil.safetensors"])
        if t.ok(r.returncode == 0, "CLI: coil eval on the batch-3 example", r.stderr[-2000:]):
            err = rel_err(st.load(d + "/outputs.safetensors")["output0"],
                          st.load(d + "/coil.safetensors")["output0"])
            t.ok(err <= 1e-4, "CLI: matches the saved eager outputs (rel err %.2e)" % err)


t.run("CLI", test_cli)

if not HAVE_COIL:
    t.diag("COIL (%s) is not an executable: coil validate/eval checks skipped" % COIL)
t.diag("took %.1fs" % (time.time() - START))
shutil.rmtree(TMP, ignore_errors=True)
t.done()
