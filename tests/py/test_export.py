#!/usr/bin/python3
"""Tests for client/python/coil_export.py and coil_safetensors.py (TAP output).

Run: PYTHONPATH=client/python /usr/bin/python3 tests/py/test_export.py
"""
import json
import os
import re
import shutil
import struct
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

torch.set_num_threads(2)
TMP = tempfile.mkdtemp(prefix="coil_test_export_")
START = time.time()

TOP_KEYS = {"format", "version", "inputs", "params", "constants", "nodes", "outputs"}
OP_RE = re.compile(r"^aten\.[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)?$")
DIM_SYM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")


# ---------------------------------------------------------------- safetensors

def test_safetensors():
    g = torch.Generator().manual_seed(1)
    tensors = {
        "f32": torch.randn(3, 4, generator=g),
        "bf16": torch.randn(5, generator=g).to(torch.bfloat16),
        "f16": torch.randn(2, 3, generator=g).to(torch.float16),
        "f64": torch.randn(2, 2, 2, generator=g, dtype=torch.float64),
        "i64": torch.tensor([-(2 ** 62), 0, 2 ** 62 + 5], dtype=torch.int64),
        "i32": torch.tensor([[-7, 2 ** 30]], dtype=torch.int32),
        "i8": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 200, 255], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "noncontig": torch.arange(12.0).reshape(3, 4).t(),
        "special": torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0]),
    }
    path = os.path.join(TMP, "rt.safetensors")
    st.save(tensors, path, metadata={"format": "pt", "k": "v"})
    back = st.load(path)
    t.ok(list(back) == list(tensors), "safetensors: names kept in order", list(back))
    for k, v in tensors.items():
        b = back.get(k)
        same = (b is not None and b.dtype == v.dtype and tuple(b.shape) == tuple(v.shape)
                and torch.equal(torch.nan_to_num(b.double(), nan=7.0), torch.nan_to_num(v.double(), nan=7.0)))
        t.ok(same, "safetensors round-trip %s (%s %s)" % (k, v.dtype, list(v.shape)),
             None if b is None else "got %s %s" % (b.dtype, list(b.shape)))
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n])
    t.ok((8 + n) % 8 == 0, "safetensors: data starts 8-byte aligned")
    t.ok(hdr.get("__metadata__") == {"format": "pt", "k": "v"}, "safetensors: metadata written",
         hdr.get("__metadata__"))
    t.ok(hdr["f32"]["dtype"] == "F32" and hdr["bf16"]["dtype"] == "BF16" and hdr["bool"]["dtype"] == "BOOL"
         and hdr["scalar"]["shape"] == [] and hdr["empty"]["data_offsets"][0] == hdr["empty"]["data_offsets"][1],
         "safetensors: header dtype names, 0-dim and empty shapes", hdr.get("scalar"))
    t.ok(st.load_metadata(path) == {"format": "pt", "k": "v"}, "safetensors: load_metadata")
    rawt = st.load_raw(path)
    t.ok(rawt["bf16"].tolist() == tensors["bf16"].float().tolist()
         and rawt["i64"].tolist() == tensors["i64"].tolist()
         and rawt["bool"].tolist() == [True, False, True]
         and rawt["f16"].tolist() == tensors["f16"].float().reshape(-1).tolist(),
         "safetensors: pure-Python load_raw().tolist() matches torch")
    vals = [1.0, -2.5, 3.140625, 65504.0, 1e-3]
    r = st.RawTensor.from_list("BF16", [5], vals)
    t.ok(torch.equal(st.raw_to_torch(r).float(), torch.tensor(vals).to(torch.bfloat16).float()),
         "safetensors: BF16 from_list rounds like torch")
    # pure-Python writer (RawTensor values) is readable by the torch reader
    p2 = os.path.join(TMP, "raw.safetensors")
    st.save({"a": st.RawTensor.from_list("I32", [2, 2], [1, 2, 3, 4]),
             "b": st.RawTensor.from_list("F64", [1], [0.1])}, p2)
    b2 = st.load(p2)
    t.ok(b2["a"].tolist() == [[1, 2], [3, 4]] and b2["b"].tolist() == [0.1],
         "safetensors: RawTensor values written, read back as torch")

    def rejects(data):
        try:
            st.loads_raw(data)
            return False
        except st.SafetensorsError:
            return True
    t.ok(rejects(raw[:-1]), "safetensors: truncated data rejected")
    t.ok(rejects(raw[:6]), "safetensors: truncated header rejected")
    bad = json.dumps({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}).encode()
    t.ok(rejects(struct.pack("<Q", len(bad)) + bad + b"\0" * 8), "safetensors: hole in data rejected")
    bad = json.dumps({"a": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}).encode()
    t.ok(rejects(struct.pack("<Q", len(bad)) + bad + b"\0" * 8), "safetensors: unknown dtype rejected")


t.run("safetensors tests", test_safetensors)


# ---------------------------------------------------------------- graph validation

def tensor_arg_refs(node):
    """(position label, value) pairs for the Tensor-typed arguments of a node."""
    op = ce._resolve_op(node["op"])
    types = ce.schema_arg_types(op._schema)
    pos = [a for a in op._schema.arguments if not a.kwarg_only]
    out = []
    for a, v in zip(pos, node.get("args", [])):
        if types[a.name].startswith("Tensor"):
            out.append((a.name, v))
    for k, v in node.get("kwargs", {}).items():
        if types[k].startswith("Tensor"):
            out.append((k, v))
    return out


def validate_graph(g):
    """List of problems with a graph dict (empty when valid)."""
    errs = []
    if set(g) != TOP_KEYS:
        errs.append("top-level keys %s" % sorted(g))
    if g.get("format") != "coil-graph" or g.get("version") != 1:
        errs.append("format/version")
    defined = []
    syms = set()
    for sect in ("inputs", "params", "constants"):
        for d in g.get(sect, []):
            defined.append(d["name"])
            if d["dtype"] not in ce.NAME_DTYPES:
                errs.append("%s %s: dtype %s" % (sect, d["name"], d["dtype"]))
            if len(d["shape"]) > 8:
                errs.append("%s: rank > 8" % d["name"])
            for s in d["shape"]:
                if isinstance(s, str):
                    if sect != "inputs" or not DIM_SYM.match(s):
                        errs.append("%s: bad dim %r" % (d["name"], s))
                    syms.add(s)
                elif not (isinstance(s, int) and s >= 0):
                    errs.append("%s: bad dim %r" % (d["name"], s))
            if sect == "constants":
                n = 1
                for s in d["shape"]:
                    n *= s
                if n > 4096 or len(d["data"]) != n:
                    errs.append("constant %s: %d elements, data has %d" % (d["name"], n, len(d["data"])))
    ids = set()
    for n in g.get("nodes", []):
        if n["id"] in ids:
            errs.append("duplicate node id %s" % n["id"])
        ids.add(n["id"])
        if not OP_RE.match(n["op"]):
            errs.append("node %s: op %r is not aten.NAME.OVERLOAD" % (n["id"], n["op"]))
            continue
        if n["op"].split(".")[1].endswith("_") or n["op"] in ce.ALIAS_OPS:
            errs.append("node %s: in-place/alias op %s left in" % (n["id"], n["op"]))
        defined.extend(o for o in n["outputs"] if o is not None)
        if not any(o is not None for o in n["outputs"]):
            errs.append("node %s: no used output (dead node)" % n["id"])
    if len(set(defined)) != len(defined):
        dup = sorted({x for x in defined if defined.count(x) > 1})
        errs.append("duplicate value names %s" % dup[:5])
    for name in defined:
        if not (1 <= len(name) <= 128 and all(32 <= ord(c) < 127 for c in name)):
            errs.append("bad value name %r" % name)
    dset = set(defined)
    for n in g.get("nodes", []):
        if not OP_RE.match(n["op"]):
            continue
        try:
            refs = tensor_arg_refs(n)
        except Exception as e:  # noqa: BLE001
            errs.append("node %s: %r" % (n["id"], e))
            continue
        for label, v in refs:
            for x in (v if isinstance(v, list) else [v]):
                if x is not None and x not in dset:
                    errs.append("node %s (%s): %s refers to undefined %r" % (n["id"], n["op"], label, x))
    for o in g.get("outputs", []):
        if o not in dset:
            errs.append("output %r undefined" % o)
    if len(syms) > 8:
        errs.append("more than 8 symbols")
    return errs


def check_export(spec, size=64, dynamic=False, tol=1e-4):
    name = spec + (" (dynamic batch)" if dynamic else "")
    m, inputs = ce.make_model(spec, size=size)
    out = os.path.join(TMP, spec.replace(":", "_") + ("_dyn" if dynamic else ""))
    ce.export(m, inputs, out, dynamic_batch=dynamic, check_coil=False)
    try:
        text = open(os.path.join(out, "graph.json")).read()
        g = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        t.ok(True, "%s: graph.json is valid JSON (no NaN/Infinity literals)" % name)
    except ValueError as e:
        t.ok(False, "%s: graph.json is valid JSON" % name, str(e))
        return
    errs = validate_graph(g)
    t.ok(not errs, "%s: graph well-formed, all ops aten.*, all names defined (%d nodes)" % (
        name, len(g["nodes"])), "\n".join(errs[:20]))
    sd = m.state_dict()
    got = {p["name"]: p["shape"] for p in g["params"]}
    want = {k: list(v.shape) for k, v in sd.items()}
    t.ok(got == want, "%s: params are the state_dict names and shapes" % name,
         "missing %s extra %s" % (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5]))
    w = st.load(os.path.join(out, "weights.safetensors"))
    t.ok(set(w) == set(got) and all(list(w[k].shape) == got[k] for k in got)
         and all(torch.equal(w[k], sd[k]) for k in sd),
         "%s: weights.safetensors holds every param with its values" % name)
    x = st.load(os.path.join(out, "inputs.safetensors"))
    t.ok(list(x) == [i["name"] for i in g["inputs"]] and torch.equal(x["x"], inputs[0]),
         "%s: inputs.safetensors keyed by input name" % name, list(x))
    if dynamic:
        t.ok(all(i["shape"][0] == "batch" for i in g["inputs"]),
             "%s: inputs declare the batch symbol" % name, g["inputs"])
    o = st.load(os.path.join(out, "outputs.safetensors"))
    with torch.no_grad():
        ref = m(*inputs)
        got_out = ce.eval_graph(g, w, x)
    t.ok(list(o) == ["output%d" % i for i in range(len(g["outputs"]))] and torch.equal(o["output0"], ref),
         "%s: outputs.safetensors holds the eager outputs" % name, list(o))
    # (eval_graph binds "batch" from the inputs of a dynamic graph)
    errs = [(a - o["output%d" % i]).abs().max().item() for i, a in enumerate(got_out)]
    scale = max(1.0, o["output0"].abs().max().item())
    t.ok(all(e <= tol * scale for e in errs),
         "%s: graph run with PyTorch's ATen ops reproduces the outputs" % name,
         "max abs errors %s (scale %g)" % (errs, scale))
    return g


graphs = {}
for spec in ("torchvision:resnet18", "torchvision:mobilenet_v3_small", "transformer:2"):
    graphs[spec] = t.run("export %s" % spec, check_export, spec)
t.run("export mlp (dynamic batch)", check_export, "mlp", dynamic=True)


def test_dynamic_sizes():
    # size arguments become expressions over "batch" (traced at two+ batch sizes)
    g = check_export("torchvision:resnet18", dynamic=True)
    views = [n["args"][1] for n in g["nodes"] if n["op"] == "aten.view.default"]
    t.ok(views == [["batch", 512]], "resnet18 (dynamic batch): flatten view is [batch, 512]", views)
    g = check_export("transformer:2", dynamic=True)
    sizes = [s for n in g["nodes"] if n["op"] in ("aten.view.default", "aten.expand.default")
             for s in n["args"][1]]
    t.ok("16*batch" in sizes and "4*batch" in sizes and 2 not in sizes and 32 not in sizes,
         "transformer:2 (dynamic batch): view sizes 16*batch, 4*batch, no baked-in batch", sizes)


t.run("export dynamic sizes", test_dynamic_sizes)

if graphs.get("transformer:2"):
    ops = {n["op"] for n in graphs["transformer:2"]["nodes"]}
    t.ok(not any("_transformer_encoder_layer_fwd" in o or "multi_head_attention" in o for o in ops)
         and "aten.bmm.default" in ops,
         "transformer:2: plain ops, not the fused inference kernel", sorted(ops))
if graphs.get("torchvision:resnet18"):
    g = graphs["torchvision:resnet18"]
    bn = [n for n in g["nodes"] if n["op"] == "aten.native_batch_norm.default"]
    t.ok(bn and all(n["outputs"][1:] == [None, None] and n["args"][5] is False for n in bn),
         "resnet18: batch norm in eval form, unused results null")
    t.ok(not any(n["op"] == "aten.empty.memory_format" for n in g["nodes"]),
         "resnet18: dead aten.empty.memory_format dropped")
    args = {n["op"]: n["args"] for n in g["nodes"]}
    t.ok(args["aten.convolution.default"][3:] == [[2, 2], [3, 3], [1, 1], False, [0, 0], 1] or
         any(n["op"] == "aten.convolution.default" and n["args"][3:] == [[2, 2], [3, 3], [1, 1], False, [0, 0], 1]
             for n in g["nodes"]),
         "resnet18: convolution args positional in ATen order")


# ---------------------------------------------------------------- normalization corner cases

class Corner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.arange(6.0).reshape(2, 3))
        self.lin = torch.nn.Linear(3, 3)
        self.big = torch.randn(5000, generator=torch.Generator().manual_seed(3))  # captured constant

    def forward(self, a, b):
        y = a.clone()
        y[:, 0] = 7.0                       # in-place write into a view
        y.add_(self.buf)
        y.relu_()
        z = y + torch.tensor([1.0, float("inf"), 3.0])
        w = self.lin(z) / 4.0 * self.big[:3].sum()
        idx = torch.max(b, dim=1).indices   # multi-result op, one result used
        n = (b > 0).float() * float("nan")
        return w, idx, z.t().contiguous().view(-1), n


def test_corner():
    a = torch.randn(2, 3, generator=torch.Generator().manual_seed(4))
    b = torch.randn(2, 4, generator=torch.Generator().manual_seed(5))
    m = Corner()
    out = os.path.join(TMP, "corner")
    g = ce.export(m, (a, b), out, check_coil=False)
    errs = validate_graph(g)
    t.ok(not errs, "corner: graph well-formed", "\n".join(errs))
    t.ok([i["name"] for i in g["inputs"]] == ["input0", "input1"], "corner: inputs named input0, input1")
    consts = {c["name"]: c for c in g["constants"]}
    params = {p["name"]: p for p in g["params"]}
    t.ok(any(c["data"] == [1.0, "inf", 3.0] for c in consts.values()),
         "corner: small literal tensor inline as a constant, inf as a string", list(consts.values()))
    t.ok(any(p["shape"] == [5000] and p["name"] not in m.state_dict() for p in params.values()),
         "corner: large captured tensor becomes a param with a generated name", list(params))
    t.ok("buf" in params, "corner: buffers are params")
    ops = [n["op"] for n in g["nodes"]]
    t.ok("aten.max.dim" in ops and
         any(n["op"] == "aten.max.dim" and n["outputs"][0] is None and n["outputs"][1] for n in g["nodes"]),
         "corner: unused result of a multi-result op is null")
    t.ok(any(n["op"] == "aten.mul.Scalar" and n["args"][1] == "nan" for n in g["nodes"]),
         "corner: Python scalar in a Tensor slot -> Scalar overload, nan as a string",
         [n for n in g["nodes"] if "mul" in n["op"]])
    text = open(os.path.join(out, "graph.json")).read()
    t.ok("NaN" not in text and "Infinity" not in text, "corner: no NaN/Infinity literals in graph.json")
    w = st.load(os.path.join(out, "weights.safetensors"))
    x = st.load(os.path.join(out, "inputs.safetensors"))
    o = st.load(os.path.join(out, "outputs.safetensors"))
    with torch.no_grad():
        r = ce.eval_graph(json.loads(text), w, x)
    same = len(r) == 4 and all(
        torch.allclose(v.double(), o["output%d" % i].double(), equal_nan=True) and v.dtype == o["output%d" % i].dtype
        for i, v in enumerate(r))
    t.ok(same, "corner: graph reproduces the eager outputs (in-place on views, constants, nan)")


t.run("corner-case export", test_corner)


# ---------------------------------------------------------------- unsupported ops are reported

def expect_unsupported(label, module, x, needle, **kw):
    try:
        ce.export(module, x, os.path.join(TMP, "unsupported"), write=False, **kw)
    except ce.UnsupportedOpsError as e:
        t.ok(needle in str(e) and needle in "".join(e.ops),
             "%s: UnsupportedOpsError names %s" % (label, needle), str(e))
        return
    except Exception as e:  # noqa: BLE001
        t.ok(False, "%s: UnsupportedOpsError names %s" % (label, needle), "raised %r" % e)
        return
    t.ok(False, "%s: UnsupportedOpsError names %s" % (label, needle), "no exception")


class FFT(torch.nn.Module):
    """Complex values export as view_as_real pairs (coil.fft_*); an op on them without a real form
    (the angle) is named."""
    def forward(self, x):
        return torch.fft.fft(x).angle()


_lib = torch.library.Library("coiltest", "DEF")
_lib.define("myop(Tensor x) -> Tensor")
_lib.impl("myop", lambda x: x * 2, "CPU")


class Custom(torch.nn.Module):
    def forward(self, x):
        return torch.ops.coiltest.myop(x).relu()


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.ops.coiltest.myop(x)

    @staticmethod
    def backward(ctx, g):
        return g * 2


class CustomFn(torch.nn.Module):
    def forward(self, x):
        return Double.apply(x) + 1


t.run("fft", expect_unsupported, "torch.fft.fft(x).angle()", FFT(), torch.randn(4, 8), "aten.angle")
t.run("custom op", expect_unsupported, "custom library op", Custom(), torch.randn(4, 8), "coiltest.myop")
t.run("custom fn", expect_unsupported, "custom autograd Function", CustomFn(), torch.randn(4, 8),
      "coiltest.myop")


def test_fake_coil():
    mlp, inp = ce.make_model("mlp")
    fake = os.path.join(TMP, "fake_coil")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\n[ \"$1 $2\" = \"info --ops\" ] || exit 2\n"
                "echo '{\"name\":\"aten.addmm.default\",\"schema\":\"x\"}'\n"
                "echo '{\"name\":\"aten.t\",\"schema\":\"x\"}'\n")
    os.chmod(fake, 0o755)
    try:
        ce.export(mlp, inp, None, write=False, coil=fake)
        t.ok(False, "fake coil without relu: export reports aten.relu.default", "no exception")
    except ce.UnsupportedOpsError as e:
        t.ok(e.ops == {"aten.relu.default": 1}, "fake coil without relu: export reports aten.relu.default "
             "('aten.t' counts as aten.t.default)", str(e))
    broken = os.path.join(TMP, "broken_coil")
    with open(broken, "w") as f:
        f.write("#!/bin/sh\necho 'unknown command' >&2\nexit 1\n")
    os.chmod(broken, 0o755)
    g = ce.export(mlp, inp, None, write=False, coil=broken)
    t.ok(len(g["nodes"]) == 5, "coil without `info --ops`: check skipped")
    g = ce.export(mlp, inp, None, write=False, coil=os.path.join(TMP, "no_such_coil"))
    t.ok(len(g["nodes"]) == 5, "missing coil binary: check skipped")


t.run("fake coil op list", test_fake_coil)


# autograd.Function makes functionalize fail; the exporter then traces without it and renames
# in-place ops only where that is exact.
class SinFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.sin() * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class FnSafe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = SinFn.apply(self.lin(x))
        y.add_(1)
        y.relu_()
        return y * 3


class FnViewWrite(FnSafe):
    def forward(self, x):
        y = SinFn.apply(self.lin(x))
        y[:, 0] = 5.0
        return y * 3


class FnAliased(FnSafe):
    def forward(self, x):
        y = SinFn.apply(self.lin(x))
        v = y.view(-1)
        y.add_(1)
        return v * 3


def test_no_functionalize():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(6))
    out = os.path.join(TMP, "fn_safe")
    g = ce.export(FnSafe(), x, out, check_coil=False)
    ops = [n["op"] for n in g["nodes"]]
    with torch.no_grad():
        r = ce.eval_graph(g, st.load(os.path.join(out, "weights.safetensors")),
                          st.load(os.path.join(out, "inputs.safetensors")))
    ref = st.load(os.path.join(out, "outputs.safetensors"))["output0"]
    t.ok("aten.add.Scalar" in ops and "aten.relu.default" in ops and torch.allclose(r[0], ref),
         "autograd.Function: in-place ops on fresh tensors renamed, result exact", ops)


t.run("no-functionalize fallback", test_no_functionalize)
t.run("fn view write", expect_unsupported, "autograd.Function + write into a view",
      FnViewWrite(), torch.randn(4, 8), "aten.fill_.Tensor")
t.run("fn aliased", expect_unsupported, "autograd.Function + in-place on an aliased tensor",
      FnAliased(), torch.randn(4, 8), "aten.add_.Tensor")


def test_cli():
    import contextlib
    import io
    out = os.path.join(TMP, "cli_mlp")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = ce.main(["mlp", out, "--batch", "3", "--seed", "7", "--dynamic-batch", "--no-coil-check"])
    g = json.load(open(os.path.join(out, "graph.json")))
    x = st.load(os.path.join(out, "inputs.safetensors"))
    t.ok(rc == 0 and g["inputs"][0]["shape"] == ["batch", 16] and list(x["x"].shape) == [3, 16]
         and all(os.path.exists(os.path.join(out, f)) for f in
                 ("weights.safetensors", "outputs.safetensors")),
         "CLI: mlp --batch 3 --dynamic-batch writes all four files")
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = ce.main(["nosuch:model", os.path.join(TMP, "cli_bad")])
    t.ok(rc != 0 and "unknown model" in buf.getvalue(), "CLI: unknown model is an error", buf.getvalue())


t.run("CLI", test_cli)


# ---------------------------------------------------------------- information only

coil_ops = ce.coil_supported_ops()
if coil_ops is None:
    t.diag("COIL unset or `coil info --ops` unavailable: coil op coverage not checked")
else:
    for spec, g in graphs.items():
        if g:
            missing = sorted({n["op"] for n in g["nodes"]} - coil_ops)
            t.diag("%s: ops coil lacks: %s" % (spec, ", ".join(missing) or "none"))

t.diag("took %.1fs" % (time.time() - START))
shutil.rmtree(TMP, ignore_errors=True)
t.done()
