"""INT8 end to end (client/python/coil_export.py's quantized models, codegen/lower_dnnl.c's int8
fusions, codegen/rt's u8s8 primitives) against PyTorch's own reference quantized models:

  * each pattern PyTorch's FX flow (prepare_fx, calibrate, convert_to_reference_fx; the
    'onednn' qconfig) produces -- conv (+relu), strided and grouped conv, linear (+relu) --
    and the PT2E form conv -> add of a dequantized residual -> relu -> quantize, written with
    quantized_decomposed ops: each dq -> conv/linear -> q compiles into one oneDNN int8
    primitive (counted in --dump-after dnnl), and the output equals the reference model's in
    quantized units on >= 99.9% of elements, never more than one step away;
  * an activation between two quantizes (ReLU6, SiLU, hardswish, sigmoid) fuses into the conv
    before it and still matches;
  * f32 chains of two eltwise post-ops of one oneDNN algorithm (relu * 0.5 + 1) match eager
    (oneDNN 2.6 shares the first one's parameters: such chains stop before the second);
  * a QAT model (prepare_qat_fx, a few training steps, convert_to_reference_fx) the same;
  * a CNN trained here on scikit-learn's digits keeps its test accuracy within 0.5 points
    after the FX flow, compiled by coil;
  * coil.quantize (calibration in coil, no PyTorch quantization code): the digits CNN within
    0.5 points, its layers all int8; a channel shuffle (which FX cannot trace) close to f32; a
    transposed conv left in f32 and reported with the reason; a model without layers refused;
  * dynamic quantization: FX's dynamic reference models (per-tensor and per-channel weights)
    give their reference's output within a quantization step at inputs of any scale and at a
    symbolic batch and sequence, each linear one int8 primitive that quantizes its input per call; coil.quantize(dynamic=True) on a transformer encoder as close to f32 as
    PyTorch's quantize_dynamic, a digits MLP within 0.5 points, convolutions reported f32;
  * coil quantize (the CLI, client/quantize.c): a graph file with batch norms and calibration
    files becomes an int8 graph and weights that compile to int8 primitives and give
    coil.quantize's result (minmax, up to the last bits of the observed ranges); --dynamic; errors name the file or option;
  * convert_fx's model (PyTorch's own quantized kernels, not the reference form) is refused
    with an error that says which form to export.
A private cache directory keeps the user's cache untouched.

Run: COIL=build/coil PYTHONPATH=client/python /usr/bin/python3 tests/py/test_quant.py
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(_root, "client", "python"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.ao.quantization import get_default_qat_qconfig_mapping, get_default_qconfig_mapping  # noqa: E402
from torch.ao.quantization.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx, prepare_qat_fx  # noqa: E402

import coil  # noqa: E402
import coil_export  # noqa: E402

COIL = os.environ.get("COIL", os.path.join(_root, "build", "coil"))
torch.backends.quantized.engine = "onednn"
# The int8 plan is a target's with AVX-512 VNNI (codegen/lower_dnnl.c, dn_int8: without it
# oneDNN's u8 x s8 products saturate, and the dequantized graph runs in f32): the dumps
# that count int8 primitives are of that target's plan, on any machine (only compiled).
INT8_DUMP = ("--dump-after", "dnnl", "--target", "avx512_vnni")


def ptq(m, example, calib):
    p = prepare_fx(m.eval(), get_default_qconfig_mapping("onednn"), (example,))
    with torch.no_grad():
        for x in calib:
            p(x)
    return convert_to_reference_fx(p)


def out_scale(ref):
    """The scale of the reference model's last quantize (its output's step)."""
    qs = [n for n in ref.graph.nodes if n.op == "call_function" and n.target == torch.quantize_per_tensor]
    return float(getattr(ref, qs[-1].args[1].target))


def left_f32(w):
    """coil.quantize's warnings less the one that says the int8 layers run as f32 products on a
    target without AVX-512 VNNI (checked on its own)."""
    return [x for x in w if "no AVX-512 VNNI" not in str(x.message)]


def steps(got, want, scale):
    d = ((got - want).abs() / scale).round()
    return (d == 0).float().mean().item(), d.max().item()


def int8_fusions(m, x, tmp, name, target="avx512_vnni"):
    d = os.path.join(tmp, name)
    coil_export.export(m, (x,), d, coil=COIL)
    r = subprocess.run([COIL, "compile", os.path.join(d, "graph.json"), "--dump-after", "dnnl", "--target", target],
                       capture_output=True, text=True, env=dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache")))
    return sum(1 for ln in r.stdout.splitlines() if ", int8 (" in ln), r.stdout + r.stderr


def check_pattern(t, name, m, x, calib, cache, tmp, want_int8, ref=None, min_exact=0.999):
    ref = ref or ptq(m, x, calib)
    with torch.no_grad():
        want = ref(x)
    got = coil.compile(ref, (x,), threads=2, cache_dir=cache, coil=COIL)(x)
    exact, worst = steps(got, want, out_scale(ref) if ref is not None and hasattr(ref, "graph") else 1.0)
    t.ok(exact >= min_exact and worst <= 1, "%s: equal to the reference model in quantized units (>= %g%%, "
         "never a step away)" % (name, 100 * min_exact), "%.4f exact, worst %g steps" % (exact, worst))
    n, dump = int8_fusions(ref, x, tmp, name.replace(" ", "_"))
    t.ok(n == want_int8, "%s: %d int8 primitive(s)" % (name, want_int8), "found %d:\n%s" % (n, dump))
    if name == "conv relu":  # without VNNI, none (the f32 path's results are checked where the machine has none)
        n, dump = int8_fusions(ref, x, tmp, "conv_relu_v4", target="x86-64-v4")
        t.ok(n == 0, "conv relu for x86-64-v4 (no VNNI): no int8 primitive", "found %d:\n%s" % (n, dump))


class ConvRelu(nn.Module):
    def __init__(self, cin=8, cout=16, k=3, stride=1, groups=1, relu=True):
        super().__init__()
        self.c = nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups)
        self.r = nn.ReLU() if relu else nn.Identity()

    def forward(self, x):
        return self.r(self.c(x))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(40, 64)
        self.b = nn.Linear(64, 10)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class CatBn(nn.Module):
    """densenet's form: a cat of differently quantized features, then batch norm and relu
    (the cat then moves u8: codegen/quant.c pushes the cat's quantize into its inputs)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 4, 1)
        self.bn = nn.BatchNorm2d(20)
        self.c = nn.Conv2d(20, 8, 1)
        g = torch.Generator().manual_seed(2)
        self.bn.running_mean.copy_(torch.randn(20, generator=g) * 0.1)
        self.bn.running_var.copy_(torch.rand(20, generator=g) + 0.5)

    def forward(self, x):
        y = torch.cat([x, self.a(x), self.b(x)], 1)
        return self.c(torch.relu(self.bn(y)))


class Pt2eResidual(nn.Module):
    """conv -> add of a dequantized residual -> relu -> quantize, as PT2E's x86 quantizer
    annotates it, written with quantized_decomposed ops."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        w = torch.randn(16, 16, 3, 3, generator=g) * 0.1
        self.ws = (w.abs().amax((1, 2, 3)) / 127).double()
        self.register_buffer("w", w)
        self.register_buffer("b", torch.randn(16, generator=g) * 0.1)

    def forward(self, x, r):
        qd = torch.ops.quantized_decomposed
        xq = qd.quantize_per_tensor(x, 0.02, 128, 0, 255, torch.uint8)
        rq = qd.quantize_per_tensor(r, 0.03, 120, 0, 255, torch.uint8)
        z = torch.zeros(16, dtype=torch.int64)
        wq = qd.quantize_per_channel(self.w, self.ws, z, 0, -128, 127, torch.int8)
        y = torch.nn.functional.conv2d(qd.dequantize_per_tensor(xq, 0.02, 128, 0, 255, torch.uint8),
                                       qd.dequantize_per_channel(wq, self.ws, z, 0, -128, 127, torch.int8),
                                       self.b, padding=1)
        y = torch.relu(y + qd.dequantize_per_tensor(rq, 0.03, 120, 0, 255, torch.uint8))
        yq = qd.quantize_per_tensor(y, 0.025, 0, 0, 255, torch.uint8)
        return qd.dequantize_per_tensor(yq, 0.025, 0, 0, 255, torch.uint8)


def test_patterns(t, cache, tmp):
    g = torch.Generator().manual_seed(0)
    calib = [torch.randn(2, 8, 12, 12, generator=g) for _ in range(4)]
    x = torch.randn(2, 8, 12, 12, generator=g)
    check_pattern(t, "conv relu", ConvRelu(), x, calib, cache, tmp, 1)
    check_pattern(t, "conv", ConvRelu(relu=False), x, calib, cache, tmp, 1)
    check_pattern(t, "conv stride 2 5x5", ConvRelu(k=5, stride=2), x, calib, cache, tmp, 1)
    check_pattern(t, "depthwise conv relu", ConvRelu(cout=8, groups=8), x, calib, cache, tmp, 1)
    xl = torch.randn(3, 40, generator=g)
    check_pattern(t, "cat of differently quantized features, batch norm, relu, conv", CatBn(), x, calib, cache,
                  tmp, 3)
    torch.manual_seed(0)  # the weights: a failure must reproduce
    mlp = Mlp().eval()
    ref = ptq(mlp, xl, [torch.randn(8, 40, generator=g) for _ in range(4)])
    check_pattern(t, "linear relu linear", None, xl, None, cache, tmp, 2, ref=ref)
    # at a symbolic batch: int8 objects per binding (a shape seen again reuses its own)
    cm = coil.compile(ref, (xl,), dynamic={0: {0: "b"}}, threads=2, cache_dir=cache, coil=COIL)
    # pooled over the four calls (440 outputs): oneDNN requantizes an int32 accumulator where the reference
    # rounds an f32 sum, so a value that lands on a rounding tie may differ by one step; more than one never
    got, want = [], []
    for b in (1, 5, 33, 5):
        xb = torch.randn(b, 40, generator=g)
        with torch.no_grad():
            got.append(cm(xb))
            want.append(ref(xb))
    worst = steps(torch.cat(got), torch.cat(want), out_scale(ref))
    t.ok(worst[0] >= 0.99 and worst[1] <= 1, "linear relu linear at a symbolic batch (1, 5, 33, 5): equal to the "
         "reference model in quantized units", "%.4f exact, worst %g steps" % worst)

    # PT2E's residual form: the add fuses as oneDNN's sum with the residual's scale and zero point
    coil_export._quant_ops()
    m = Pt2eResidual()
    xs = (torch.randn(1, 16, 10, 10, generator=g), torch.randn(1, 16, 10, 10, generator=g))
    want = m(*xs)
    got = coil.compile(m, xs, threads=2, cache_dir=cache, coil=COIL)(*xs)
    exact, worst = steps(got, want, 0.025)
    t.ok(exact >= 0.999 and worst <= 1, "conv + dequantized residual + relu: equal in quantized units",
         "%.4f exact, worst %g steps" % (exact, worst))
    d = os.path.join(tmp, "pt2e")
    coil_export.export(m, xs, d, coil=COIL, input_names=["x", "r"])
    r = subprocess.run([COIL, "compile", os.path.join(d, "graph.json"), *INT8_DUMP],
                       capture_output=True, text=True, env=dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache")))
    t.ok("int8 (u8 in, u8 out, residual sum)" in r.stdout, "conv + residual: one int8 primitive with the sum fused",
         r.stdout + r.stderr)


class ConvAct(nn.Module):
    """conv -> an activation -> conv: the FX flow quantizes between each (q -> dq -> act -> q)."""

    def __init__(self, act):
        super().__init__()
        self.a = nn.Conv2d(8, 16, 3, padding=1)
        self.act = act
        self.b = nn.Conv2d(16, 8, 1)

    def forward(self, x):
        return self.b(self.act(self.a(x)))


def upto_b(ref):
    """The reference model cut before its conv b: it returns the activation's dequantized
    quantize (the pattern's own output; through a conv after it, one step of difference
    would spread over several outputs)."""
    b = next(n for n in ref.graph.nodes if n.op == "call_module" and n.target == "b")
    out = next(n for n in ref.graph.nodes if n.op == "output")
    out.args = (b.args[0],)
    ref.graph.eliminate_dead_code()
    ref.recompile()
    return ref


def test_requant_chains(t, cache, tmp):
    """An activation between two quantizes fuses into the conv before it: ReLU6 exactly (the
    clamp commutes with the rounding), SiLU, hardswish and sigmoid through the first
    quantize's rounding computed on the way.  Measured at the activation's own quantize (the
    model cut before its second conv, which would spread one step of difference over several
    outputs): equal on >= 99.9% of the elements (8 seeds measured: all of them), never a step
    away."""
    g = torch.Generator().manual_seed(3)
    calib = [torch.randn(2, 8, 10, 10, generator=g) for _ in range(4)]
    x = torch.randn(2, 8, 10, 10, generator=g)
    for name, act in (("relu6", nn.ReLU6()), ("silu", nn.SiLU()), ("hardswish", nn.Hardswish()),
                      ("sigmoid", nn.Sigmoid())):
        m = ConvAct(act).eval()
        ref = upto_b(ptq(m, x, calib))
        check_pattern(t, "conv %s" % name, None, x, None, cache, tmp, 1, ref=ref)
        d = os.path.join(tmp, "act_" + name)
        coil_export.export(ref, (x,), d, coil=COIL)
        r = subprocess.run([COIL, "compile", os.path.join(d, "graph.json"), *INT8_DUMP], capture_output=True,
                           text=True, env=dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache")))
        first = [ln for ln in r.stdout.splitlines() if ln.startswith("fusion 0:")]
        npost = re.search(r"(\d+) post-ops?", first[0]) if first else None
        t.ok(npost is not None and int(npost.group(1)) >= 1 and ", int8 (" in first[0],
             "conv %s: the activation is the conv's post-op" % name, r.stdout)


def test_float_post_chains(t, cache, tmp):
    """oneDNN 2.6 gives every eltwise post-op of one algorithm the first one's parameters
    (conv -> relu -> *0.5 -> +1 came out as relu(conv) * 0.25 + 0.5): such chains must still
    match eager."""
    class Chain(nn.Module):
        def __init__(self, f):
            super().__init__()
            self.c = nn.Conv2d(16, 16, 3, padding=1)
            self.f = f

        def forward(self, x):
            return self.f(self.c(x))
    x = torch.randn(1, 16, 8, 8)
    for name, f in (("relu * 0.5 + 1", lambda y: torch.relu(y) * 0.5 + 1.0),
                    ("relu6 then clamp(-1, 2)", lambda y: torch.clamp(nn.functional.relu6(y), -1.0, 2.0)),
                    ("leaky_relu(0.1) then relu", lambda y: torch.relu(nn.functional.leaky_relu(y, 0.1)) - 0.3)):
        m = Chain(f).eval()
        with torch.no_grad():
            want = m(x)
            got = coil.compile(m, (x,), threads=2, cache_dir=cache, coil=COIL)(x)
        err = (got - want).abs().max().item()
        t.ok(err < 1e-4, "f32 conv -> %s: as eager" % name, "max error %g" % err)


def test_qat(t, cache, tmp):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                      nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 5))
    x = torch.randn(4, 3, 8, 8)
    p = prepare_qat_fx(m.train(), get_default_qat_qconfig_mapping("onednn"), (x,))
    opt = torch.optim.SGD(p.parameters(), lr=0.01)
    for _ in range(5):
        xb = torch.randn(8, 3, 8, 8)
        loss = p(xb).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    p.eval()
    ref = convert_to_reference_fx(p)
    check_pattern(t, "QAT conv-bn-relu, conv-relu, linear", None, x, None, cache, tmp, 3, ref=ref)


class Digits(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                               nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                               nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                               nn.Linear(32, 10))

    def forward(self, x):
        return self.f(x)


def digits():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 8.0 - 1.0
    y = torch.tensor(d.target)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(y), generator=g)
    x, y = x[perm], y[perm]
    return x[:1400], y[:1400], x[1400:], y[1400:]


def digits_or_skip(t, what):
    """digits(), or None with `what` skipped when scikit-learn is missing."""
    try:
        return digits()
    except ImportError as e:
        t.skip(what, "scikit-learn missing: %s" % e)
        return None


def train_digits(seed, xtr, ytr, xte, yte, make=None, epochs=8):
    """A digits classifier (the CNN, or make()) trained here with Adam, in eval mode, and its f32
    test accuracy (%)."""
    torch.manual_seed(seed)
    m = make() if make else Digits()
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    for epoch in range(epochs):
        for i in range(0, len(ytr), 64):
            loss = nn.functional.cross_entropy(m(xtr[i:i + 64]), ytr[i:i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
    m.eval()
    with torch.no_grad():
        acc32 = (m(xte).argmax(1) == yte).float().mean().item() * 100
    return m, acc32


def test_digits(t, cache, tmp):
    data = digits_or_skip(t, "digits accuracy")
    if data is None:
        return
    xtr, ytr, xte, yte = data
    m, acc32 = train_digits(0, xtr, ytr, xte, yte)
    ref = ptq(m, xtr[:32], [xtr[i:i + 64] for i in range(0, 512, 64)])
    cm = coil.compile(ref, (xte,), threads=2, cache_dir=cache, coil=COIL)
    acc8 = (cm(xte).argmax(1) == yte).float().mean().item() * 100
    t.diag("digits: f32 %.2f%%, int8 (FX PTQ, coil) %.2f%% on %d test images" % (acc32, acc8, len(yte)))
    t.ok(acc32 > 90 and acc8 >= acc32 - 0.5, "digits CNN: int8 accuracy within 0.5 points of f32",
         "f32 %.2f, int8 %.2f" % (acc32, acc8))
    n, dump = int8_fusions(ref, xte[:4], tmp, "digits")
    t.ok(n == 4, "digits CNN: its 3 convs and classifier run int8", dump)


def test_coil_quantize(t, cache, tmp):
    """coil.quantize: no PyTorch quantization code on the user's side."""
    data = digits_or_skip(t, "coil.quantize digits")
    if data is None:
        return
    xtr, ytr, xte, yte = data
    m, acc32 = train_digits(1, xtr, ytr, xte, yte)
    import warnings
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cm = coil.quantize(m, [xtr[i:i + 64] for i in range(0, 512, 64)], (xte,), threads=2, cache_dir=cache,
                           coil=COIL)
    rep = cm.info["quantize"]
    acc8 = (cm(xte).argmax(1) == yte).float().mean().item() * 100
    t.diag("digits: f32 %.2f%%, coil.quantize int8 %.2f%%" % (acc32, acc8))
    t.ok(acc32 > 90 and acc8 >= acc32 - 0.5, "coil.quantize digits CNN: accuracy within 0.5 points of f32",
         "f32 %.2f, int8 %.2f" % (acc32, acc8))
    t.ok(len(rep["quantized"]) == 4 and not rep["float"] and not left_f32(w),
         "coil.quantize digits CNN: 3 convs (batch norms folded) and the classifier int8, nothing left in f32",
         "%r, warnings %s" % (rep, [str(x.message) for x in w]))
    vnni = "avx512_vnni" in coil._targets.features()
    t.ok(("int8_as_f32" in rep) == (not vnni) and (len(w) == 1) == (not vnni),
         "coil.quantize: %s" % ("int8 layers on oneDNN's int8 kernels (AVX-512 VNNI here)" if vnni else
                                "reported and warned: without AVX-512 VNNI the int8 layers run as f32 products"),
         "%r, warnings %s" % (rep, [str(x.message) for x in w]))

    # channel shuffle (view / transpose), which FX's symbolic tracing of torchvision's
    # shufflenet cannot follow, and a transposed conv, which stays f32 and is reported
    class Shuffle(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Conv2d(8, 16, 1)
            self.b = nn.Conv2d(16, 16, 3, padding=1, groups=16)
            self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)

        def forward(self, x):
            y = torch.relu(self.a(x))
            n, c, h, w = y.shape
            y = y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
            return self.up(self.b(y))
    g = torch.Generator().manual_seed(4)
    m = Shuffle().eval()
    calib = [torch.randn(2, 8, 8, 8, generator=g) for _ in range(4)]
    x = torch.randn(2, 8, 8, 8, generator=g)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cm = coil.quantize(m, calib, threads=2, cache_dir=cache, coil=COIL)
    rep = cm.info["quantize"]
    with torch.no_grad():
        want = m(x)
    err = ((cm(x) - want).abs().max() / want.abs().max()).item()
    t.ok(err < 0.05, "coil.quantize channel shuffle: within 5% of f32", "relative error %g" % err)
    t.ok(len(rep["quantized"]) == 2 and len(rep["float"]) == 1 and "transposed" in rep["float"][0]["reason"] and
         any("transposed" in str(x.message) for x in w),
         "coil.quantize: the transposed conv stays f32, reported with its reason", "%r" % rep)
    try:
        coil.quantize(nn.Sequential(nn.ReLU()).eval(), [x], cache_dir=cache, coil=COIL)
        t.ok(False, "coil.quantize of a model without layers raises")
    except coil.UnsupportedError as e:
        t.ok("no layer" in str(e), "coil.quantize of a model without layers raises, saying so", str(e))


def test_refusals(t, cache, tmp):
    m = ConvRelu().eval()
    x = torch.randn(1, 8, 6, 6)
    p = prepare_fx(m, get_default_qconfig_mapping("onednn"), (x,))
    p(x)
    q = convert_fx(p)
    try:
        coil_export.export(q, (x,), os.path.join(tmp, "convert_fx"), coil=COIL)
        t.ok(False, "convert_fx's model is refused")
    except Exception as e:  # noqa: BLE001
        msg = str(e)
        t.ok("convert_to_reference_fx" in msg or "quantized" in msg, "convert_fx's model is refused, naming the form to export",
             msg)


def sqnr(ref, got):
    ref, got = ref.double(), got.double()
    return 10 * torch.log10((ref ** 2).sum() / ((ref - got) ** 2).sum().clamp_min(1e-30)).item()


def dyn_err(got, want):
    """The max error relative to the output's range.  A dynamic layer's qparams come from every
    value of its input: where that input is the previous layer's output, its last-bit f32
    differences (oneDNN's s32 accumulation against the reference's f32 products) move the range
    a little and values near a rounding boundary land a step apart; the outputs move by about
    a quantization step (4e-3 of a u8 range), not more."""
    return ((got - want).abs().max() / want.abs().max()).item()


def test_dynamic(t, cache, tmp):
    """Dynamic quantization: linear layers with s8 weights and u8 inputs quantized at each call
    from their own range (choose_qparams), as one oneDNN u8s8 matmul each."""
    from torch.ao.quantization import QConfigMapping, default_dynamic_qconfig, per_channel_dynamic_qconfig
    import warnings
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32)).eval()
    x = torch.randn(2, 8, 64)
    for qname, qc in (("per-tensor", default_dynamic_qconfig), ("per-channel", per_channel_dynamic_qconfig)):
        ref = convert_to_reference_fx(prepare_fx(m, QConfigMapping().set_global(qc), (x,)))
        cm = coil.compile(ref, (x,), threads=2, cache_dir=cache, coil=COIL)
        for k in (1.0, 0.01, 100.0):  # each call's own range: a fixed scale would clip or lose these
            with torch.no_grad():
                want = ref(x * k)
            err = dyn_err(cm(x * k), want)
            t.ok(err < 1e-2, "FX dynamic (%s weights), input x %g: the reference model's output, within a step" % (
                qname, k), "max relative error %g" % err)
        _, dump = int8_fusions(ref, x, tmp, "dynamic_" + qname)
        t.ok(dump.count("int8 (dynamic u8 in, f32 out)") == 2,
             "FX dynamic (%s weights): both linears one int8 dynamic primitive each" % qname, dump)
    # symbolic batch and sequence: int8 primitives per binding, more bindings than a handle keeps
    cm = coil.compile(ref, (x,), dynamic={0: {0: "b", 1: "s"}}, threads=2, cache_dir=cache, coil=COIL)
    worst = 0.0
    for b, s in [(1 + k % 3, 3 + k) for k in range(11)] * 2:
        xb = torch.randn(b, s, 64) * (1 + b)
        with torch.no_grad():
            want = ref(xb)
        worst = max(worst, dyn_err(cm(xb), want))
    d = os.path.join(tmp, "dynamic_sym")
    coil_export.export(ref, (x,), d, coil=COIL, dynamic={0: {0: "b", 1: "s"}})
    r = subprocess.run([COIL, "compile", os.path.join(d, "graph.json"), *INT8_DUMP], capture_output=True,
                       text=True, env=dict(os.environ, COIL_CACHE_DIR=cache))
    t.ok(worst < 1e-2 and r.stdout.count("int8 (dynamic") == 2, "FX dynamic at a symbolic batch and sequence: 22 "
         "calls at 11 shapes give the reference's output within a step, both linears int8",
         "max relative error %g\n%s" % (worst, r.stdout))

    # coil.quantize(dynamic=True) on a transformer encoder, against PyTorch's quantize_dynamic
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation="gelu", batch_first=True)
    enc = nn.TransformerEncoder(layer, 2).eval()
    x = torch.randn(2, 16, 64)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cm = coil.quantize(enc, None, (x,), dynamic=True, threads=2, cache_dir=cache, coil=COIL)
    rep = cm.info["quantize"]
    t.ok(len(rep["quantized"]) == 8 and not rep["float"] and not left_f32(w) and rep["method"] == "dynamic",
         "coil.quantize(dynamic=True) encoder: its 8 linear layers int8 (checked in the oneDNN plan), none f32",
         "%r" % rep)
    tq = torch.ao.quantization.quantize_dynamic(enc, {nn.Linear}, dtype=torch.qint8)
    for lay in tq.layers:
        lay.activation_relu_or_gelu = False  # 1.13's fast path reads quantized weights as tensors
    with torch.no_grad():
        want = enc(x)
        ours, theirs = sqnr(want, cm(x)), sqnr(want, tq(x))
    t.diag("encoder, SQNR against f32: coil dynamic %.1f dB, PyTorch quantize_dynamic %.1f dB" % (ours, theirs))
    t.ok(ours >= 25 and ours >= theirs - 1, "coil.quantize(dynamic=True) encoder: as close to f32 as PyTorch's "
         "quantize_dynamic", "coil %.1f dB, PyTorch %.1f dB" % (ours, theirs))

    # accuracy: a digits MLP
    data = digits_or_skip(t, "dynamic digits")
    if data is None:
        return
    xtr, ytr, xte, yte = data
    mlp, acc32 = train_digits(2, xtr, ytr, xte, yte, lambda: nn.Sequential(
        nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)), epochs=10)
    cm = coil.quantize(mlp, None, (xte,), dynamic=True, threads=2, cache_dir=cache, coil=COIL)
    acc8 = (cm(xte).argmax(1) == yte).float().mean().item() * 100
    t.diag("digits MLP: f32 %.2f%%, coil.quantize(dynamic=True) %.2f%%" % (acc32, acc8))
    t.ok(acc32 > 90 and acc8 >= acc32 - 0.5 and len(cm.info["quantize"]["quantized"]) == 2,
         "coil.quantize(dynamic=True) digits MLP: both layers int8, accuracy within 0.5 points of f32",
         "f32 %.2f, int8 %.2f, %r" % (acc32, acc8, cm.info["quantize"]))

    # convolutions stay f32 in this mode, reported; no inputs at all is an error
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cm = coil.quantize(nn.Sequential(ConvRelu(), nn.Flatten(), nn.Linear(16 * 36, 4)).eval(), None,
                           (torch.randn(1, 8, 6, 6),), dynamic=True, cache_dir=cache, coil=COIL)
    rep = cm.info["quantize"]
    t.ok(len(rep["quantized"]) == 1 and len(rep["float"]) == 1 and "dynamic" in rep["float"][0]["reason"] and w,
         "coil.quantize(dynamic=True): the conv stays f32, reported with the reason", "%r" % rep)
    try:
        coil.quantize(mlp, None, dynamic=True, cache_dir=cache, coil=COIL)
        t.ok(False, "coil.quantize(dynamic=True) without example inputs raises")
    except coil.CoilError as e:
        t.ok("example_inputs" in str(e), "coil.quantize(dynamic=True) without example inputs says what it needs",
             str(e))


class BnNet(nn.Module):
    """Convs with batch norms (folded by coil quantize), a max pool between, a classifier."""

    def __init__(self):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 4 * 4, 10)
        g = torch.Generator().manual_seed(3)
        for b in (self.b1, self.b2):
            b.running_mean.copy_(torch.rand(b.num_features, generator=g) * 0.4 - 0.2)
            b.running_var.copy_(torch.rand(b.num_features, generator=g) + 0.5)

    def forward(self, x):
        y = nn.functional.max_pool2d(torch.relu(self.b1(self.c1(x))), 2)
        return self.fc(torch.relu(self.b2(self.c2(y))).flatten(1))


def test_cli_quantize(t, cache, tmp):
    """coil quantize: the CLI's calibration over a graph file and sample inputs."""
    import coil_safetensors
    torch.manual_seed(3)
    m = BnNet().eval()
    x = torch.randn(2, 3, 16, 16)
    d = os.path.join(tmp, "cli_q")
    coil_export.export(m, (x,), d, coil=COIL)
    g = torch.Generator().manual_seed(6)
    calib = [torch.randn(2, 3, 16, 16, generator=g) for _ in range(3)]
    files = []
    for i, c in enumerate(calib):
        files.append(os.path.join(d, "calib%d.safetensors" % i))
        coil_safetensors.save({"x": c}, files[-1])
    coil_safetensors.save({"x": x}, os.path.join(d, "test.safetensors"))
    env = dict(os.environ, COIL_CACHE_DIR=cache)

    def cli(*a):
        return subprocess.run([COIL] + list(a), capture_output=True, text=True, env=env)

    def run(gdir):
        out = os.path.join(gdir, "out.safetensors")
        r = cli("run", os.path.join(gdir, "graph.json"), "-w", os.path.join(gdir, "weights.safetensors"), "-i",
                os.path.join(d, "test.safetensors"), "-o", out)
        return coil_safetensors.load(out)["output0"] if r.returncode == 0 else r.stderr
    q = os.path.join(tmp, "cli_q_int8")
    r = cli("quantize", os.path.join(d, "graph.json"), *files, "-w", os.path.join(d, "weights.safetensors"), "-o", q,
            "--method", "minmax")
    lines = r.stdout.splitlines()
    t.ok(r.returncode == 0 and len(lines) == 3 and all(ln.startswith("int8 ") for ln in lines),
         "coil quantize: both convs (batch norms folded) and the classifier int8, one line each", r.stdout + r.stderr)
    dump = cli("compile", os.path.join(q, "graph.json"), *INT8_DUMP).stdout
    t.ok(dump.count("int8 (u8 in, u8 out") == 3, "coil quantize: its graph compiles to 3 int8 primitives", dump)
    got = run(q)
    with torch.no_grad():
        want = m(x)
        cm = coil.quantize(m, calib, (x,), method="minmax", threads=1, cache_dir=cache, coil=COIL)
        py = cm(x)
    ok = isinstance(got, torch.Tensor)
    db = sqnr(want, got) if ok else float("-inf")
    t.ok(db >= 15, "coil quantize: the int8 graph runs, close to f32 (SQNR >= 15 dB on random weights)",
         "%.1f dB %s" % (db, "" if ok else got))
    # (the CLI observes coil's compiled f32 code, coil.quantize ATen's: ranges equal to the last bits)
    same = ok and (got - py).abs().max().item() <= 1e-5 * py.abs().max().item()
    t.ok(same, "coil quantize --method minmax: coil.quantize's result (to f32 rounding of the observed ranges)",
         "max difference %g" % ((got - py).abs().max().item() if ok else float("nan")))
    # dynamic: the classifier only, no calibration
    qd = os.path.join(tmp, "cli_q_dyn")
    r = cli("quantize", os.path.join(d, "graph.json"), "--dynamic", "-w", os.path.join(d, "weights.safetensors"),
            "-o", qd)
    dump = cli("compile", os.path.join(qd, "graph.json"), *INT8_DUMP).stdout
    t.ok(r.returncode == 0 and r.stdout.count("\nf32 ") + r.stdout.startswith("f32 ") == 2 and
         dump.count("int8 (dynamic") == 1, "coil quantize --dynamic: the linear int8, the convs f32 with the reason",
         r.stdout + r.stderr + dump)
    # errors: one line, the file or option at fault
    r = cli("quantize", os.path.join(d, "graph.json"), os.path.join(d, "weights.safetensors"), "-w",
            os.path.join(d, "weights.safetensors"), "-o", os.path.join(tmp, "cli_q_bad"))
    t.ok(r.returncode == 1 and "weights.safetensors: input 'x' is missing" in r.stderr and
         len(r.stderr.splitlines()) == 1, "coil quantize: a calibration file without the input is named", r.stderr)
    r = cli("quantize", os.path.join(d, "graph.json"), files[0], "-w", os.path.join(d, "weights.safetensors"),
            "-o", os.path.join(tmp, "cli_q_bad"), "--method", "kl")
    t.ok(r.returncode == 1 and "--method" in r.stderr, "coil quantize: an unknown --method is refused", r.stderr)
    r = cli("quantize", os.path.join(d, "graph.json"), "-w", os.path.join(d, "weights.safetensors"), "-o",
            os.path.join(tmp, "cli_q_bad"))
    t.ok(r.returncode == 2 and "usage" in r.stderr, "coil quantize without calibration inputs: usage", r.stderr)


def main():
    t = Tap()
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        t.run("patterns", test_patterns, t, cache, tmp)
        t.run("requant chains", test_requant_chains, t, cache, tmp)
        t.run("float post-op chains", test_float_post_chains, t, cache, tmp)
        t.run("qat", test_qat, t, cache, tmp)
        t.run("digits", test_digits, t, cache, tmp)
        t.run("coil.quantize", test_coil_quantize, t, cache, tmp)
        t.run("dynamic", test_dynamic, t, cache, tmp)
        t.run("coil quantize (CLI)", test_cli_quantize, t, cache, tmp)
        t.run("refusals", test_refusals, t, cache, tmp)
    t.done()


if __name__ == "__main__":
    main()
