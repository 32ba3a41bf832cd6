"""Post-training static quantization of coil graphs: what coil.quantize does, with no
PyTorch quantization code on the user's side.

quantize_graph(graph, params, calibration) takes an f32 coil graph (coil_export's), runs it
on the calibration inputs with PyTorch's ATen ops (coil_export.eval_graph) while observers
record the values that will be quantized, and returns a graph where every convolution and
linear layer coil can run in int8 reads quantized operands:

    x -> quantize(u8, per tensor) -> dequantize -> conv / addmm / mm -> [activations] ->
         quantize(u8, per tensor) -> dequantize -> readers
    W -> quantize_per_channel(s8, symmetric, axis 0) -> dequantize_per_channel -> the weight

the patterns codegen/lower_dnnl.c turns into one oneDNN u8s8 primitive each (activations
that follow a layer -- relu, ReLU6, SiLU, hardswish, sigmoid, GELU, tanh, leaky_relu, ELU --
are inside its output quantization and become post-ops).  A layer's quantized output feeds
the next layer's input unchanged.  Everything else (residual adds, pooling, norms) stays f32
between a dequantize and the next quantize, fused into the generated kernels.

Observers:
  activations  "histogram" (default): the range of the values between the 0.01 and 99.99
               percentiles of a deterministic sample of them (outliers do not stretch the
               scale), or "minmax": the exact range; always including 0, u8 affine;
  weights      per output channel, symmetric s8 (PyTorch's PerChannelMinMax, qint8).

The report (a dict) lists each layer quantized and each left in f32 with the reason."""
import math

import torch

import coil_export as ce

# activations fused into the layer before them (codegen/lower_dnnl.c's eltwise post-ops)
ACTIVATIONS = {
    "aten.relu.default", "aten.hardtanh.default", "aten.clamp.default", "aten.clamp_min.default",
    "aten.clamp_max.default", "aten.silu.default", "aten.hardswish.default", "aten.sigmoid.default",
    "aten.gelu.default", "aten.tanh.default", "aten.leaky_relu.default", "aten.elu.default",
}
LAYERS = ("aten.convolution.default", "aten.addmm.default", "aten.mm.default")
# ops that only move data: their result keeps their input's quantization
MOVES = {
    "aten.max_pool2d_with_indices.default", "aten.max_pool2d.default", "aten.view.default", "aten.reshape.default",
    "aten.flatten.using_ints", "aten._unsafe_view.default", "aten.permute.default", "aten.transpose.int",
    "aten.squeeze.dim", "aten.unsqueeze.default", "aten.clone.default", "aten.slice.Tensor",
}
SAMPLE = 1 << 16  # values an activation observer keeps per batch


class Observer:
    """An activation's range over the calibration batches."""

    def __init__(self, method):
        self.method = method
        self.lo = math.inf
        self.hi = -math.inf
        self.samples = []

    def update(self, t):
        t = t.detach().float().reshape(-1)
        if t.numel() == 0:
            return
        self.lo = min(self.lo, float(t.min()))
        self.hi = max(self.hi, float(t.max()))
        if self.method == "histogram":
            step = max(1, t.numel() // SAMPLE)
            self.samples.append(t[::step].clone())

    def qparams(self, percentile):
        lo, hi = self.lo, self.hi
        if self.method == "histogram" and self.samples:
            s = torch.cat(self.samples)
            q = torch.tensor([1 - percentile / 100, percentile / 100], dtype=torch.float32)
            lo, hi = (float(v) for v in torch.quantile(s[:1 << 24], q))
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        scale = max((hi - lo) / 255.0, float(torch.finfo(torch.float32).eps))
        zp = int(min(max(round(-lo / scale), 0), 255))
        return float(torch.tensor(scale, dtype=torch.float32)), zp


def _weight_qparams(w):
    """Per output channel (axis 0), symmetric s8, as PyTorch's qint8 per-channel observer."""
    amax = w.detach().float().reshape(w.shape[0], -1).abs().amax(1)
    scale = torch.clamp(amax / ((127 + 128) / 2), min=float(torch.finfo(torch.float32).eps))
    return scale.float(), torch.zeros(w.shape[0], dtype=torch.int64)


class _Graph:
    def __init__(self, graph):
        self.g = graph
        self.names = {v["name"] for k in ("inputs", "params", "constants") for v in graph[k]}
        for n in graph["nodes"]:
            self.names.update(o for o in n["outputs"] if o)
        self.prod = {}
        for i, n in enumerate(graph["nodes"]):
            for o in n["outputs"]:
                if o:
                    self.prod[o] = n
        self.params = {p["name"]: p for p in graph["params"]}

    def fresh(self, base):
        name, k = base, 1
        while name in self.names:
            name, k = "%s_%d" % (base, k), k + 1
        self.names.add(name)
        return name

    def readers(self, v):
        out = [n for n in self.g["nodes"] if v in _refs(n)]
        return out, self.g["outputs"].count(v)


def _refs(n):
    acc = []

    def walk(a):
        if isinstance(a, str):
            acc.append(a)
        elif isinstance(a, list):
            for x in a:
                walk(x)
    walk(n.get("args", []))
    walk(list(n.get("kwargs", {}).values()))
    return acc


def _replace(n, old, new):
    def sub(a):
        if isinstance(a, str):
            return new if a == old else a
        if isinstance(a, list):
            return [sub(x) for x in a]
        return a
    n["args"] = sub(n.get("args", []))
    if n.get("kwargs"):
        n["kwargs"] = {k: sub(v) for k, v in n["kwargs"].items()}


def _layer(G, n):
    """(activation input, weight param, weight's reader node and arg index) of a layer node, or
    (None, reason)."""
    op, a = n["op"], n["args"]
    if op == "aten.convolution.default":
        if len(a) > 6 and a[6]:
            return None, "transposed convolution (oneDNN 2.6 has no int8 one here)"
        w = a[1]
        if w not in G.params:
            return None, "its weight is computed, not a parameter"
        if len(a) > 2 and a[2] is not None and a[2] not in G.params:
            return None, "its bias is computed, not a parameter"
        return (a[0], w, n, 1), None
    base = 1 if op == "aten.addmm.default" else 0
    if base:
        kw = n.get("kwargs", {})
        if kw.get("alpha", 1) != 1 or kw.get("beta", 1) != 1 or (len(a) > 3 and (a[3] != 1 or a[4] != 1)):
            return None, "addmm with alpha or beta other than 1"
        if a[0] not in G.params:
            return None, "its bias is computed, not a parameter"
    b = a[base + 1]
    if b in G.params:  # B = W [k, n]: per output feature is axis 1; not the linear form
        return None, "a matrix product by a [k, n] parameter (coil quantizes nn.Linear's t(W))"
    t = G.prod.get(b)
    if t is None or t["op"] not in ("aten.t.default", "aten.transpose.int", "aten.permute.default") or \
            t["args"][0] not in G.params:
        return None, "its second operand is not a parameter's transpose (not a linear layer)"
    return (a[base], t["args"][0], t, 0), None


def _chain_end(G, n):
    """The value a layer's output quantization goes after: through single-reader activations."""
    v = n["outputs"][0]
    while True:
        rd, outs = G.readers(v)
        if len(rd) != 1 or outs or rd[0]["op"] not in ACTIVATIONS or rd[0]["args"][0] != v:
            return v
        v = rd[0]["outputs"][0]


def _fold_batch_norms(g, params):
    """Inference batch norms right after a convolution folded into its weight and bias (new
    params), as PyTorch's FX flow fuses them before observing: the layer is quantized once."""
    G = _Graph(g)
    drop = []
    for n in g["nodes"]:
        if n["op"] not in ("aten.native_batch_norm.default", "aten.batch_norm.default"):
            continue
        a = n["args"]
        conv = G.prod.get(a[0])
        if conv is None or conv["op"] != "aten.convolution.default" or (len(conv["args"]) > 6 and conv["args"][6]) or \
                a[5] or any(v is not None and v not in G.params for v in a[1:5]) or a[3] is None or a[4] is None or \
                conv["args"][1] not in G.params or (conv["args"][2] is not None and conv["args"][2] not in G.params) or \
                any(o for o in n["outputs"][1:]):
            continue
        rd, outs = G.readers(a[0])
        if len(rd) != 1 or outs:
            continue
        w = params[conv["args"][1]].detach().double()
        oc = w.shape[0]
        b = params[conv["args"][2]].detach().double() if conv["args"][2] is not None else torch.zeros(oc, dtype=torch.float64)
        gamma = params[a[1]].detach().double() if a[1] is not None else torch.ones(oc, dtype=torch.float64)
        beta = params[a[2]].detach().double() if a[2] is not None else torch.zeros(oc, dtype=torch.float64)
        mean, var = params[a[3]].detach().double(), params[a[4]].detach().double()
        k = gamma / torch.sqrt(var + float(a[7]))
        wn, bn = G.fresh(conv["args"][1] + ".coil_bn"), G.fresh(n["id"] + ".coil_bias")
        params[wn] = (w * k.reshape(-1, *([1] * (w.dim() - 1)))).float()
        params[bn] = ((b - mean) * k + beta).float()
        g["params"].append({"name": wn, "dtype": "f32", "shape": list(w.shape)})
        g["params"].append({"name": bn, "dtype": "f32", "shape": [oc]})
        args = list(conv["args"])
        args[1], args[2] = wn, bn
        conv["args"] = args
        y = n["outputs"][0]
        for r in g["nodes"]:
            if y in _refs(r):
                _replace(r, y, a[0])
        g["outputs"] = [a[0] if o == y else o for o in g["outputs"]]
        drop.append(n)
    for n in drop:
        g["nodes"].remove(n)


def _quantize_weight(g, G, params, w, wr, wi):
    """Param w, read by node wr at arg wi, through a per-channel s8 quantize and dequantize."""
    s, z = _weight_qparams(params[w])
    sname, zname = G.fresh(w + ".coil_scale"), G.fresh(w + ".coil_zero_point")
    params[sname] = s
    g["params"].append({"name": sname, "dtype": "f32", "shape": [int(s.shape[0])]})
    wq, wd = G.fresh(w + "_q"), G.fresh(w + "_dq")
    wa = [sname, zname, 0, -128, 127, "i8"]
    # the zero points: a zeros node (any channel count; a graph constant holds at most 4096)
    wnodes = [{"id": G.fresh("zeros_w"), "op": "aten.zeros.default", "args": [[int(z.shape[0])]],
               "kwargs": {"dtype": "i64"}, "outputs": [zname]},
              {"id": G.fresh("quant_w"), "op": "quantized_decomposed.quantize_per_channel.default",
               "args": [w] + wa, "outputs": [wq]},
              {"id": G.fresh("dequant_w"), "op": "quantized_decomposed.dequantize_per_channel.default",
               "args": [wq] + wa, "outputs": [wd]}]
    wr["args"][wi] = wd
    at = g["nodes"].index(wr)
    g["nodes"][at:at] = wnodes


def _dynamic(g, G, params, layers, report):
    """Dynamic quantization: each layer's weight per channel; its input through
    choose_qparams -> quantize -> dequantize (one per input value, whoever reads it)."""
    eps = float(torch.finfo(torch.float32).eps)
    nodes = g["nodes"]
    done = {}
    for n, x, w, wr, wi, e in layers:
        _quantize_weight(g, G, params, w, wr, wi)
        base = 1 if n["op"] == "aten.addmm.default" else 0
        xin = n["args"][base]
        if xin not in done:
            tag = n["id"] + "_in"
            s, z, q, d = (G.fresh("%s_%s" % (tag, k)) for k in ("scale", "zp", "q", "dq"))
            qa = [s, z, 0, 255, "u8"]
            new = [{"id": G.fresh("qparams_" + tag), "op": "quantized_decomposed.choose_qparams.tensor",
                    "args": [xin, 0, 255, eps, "u8"], "outputs": [s, z]},
                   {"id": G.fresh("quant_" + tag), "op": "quantized_decomposed.quantize_per_tensor.tensor",
                    "args": [xin] + qa, "outputs": [q]},
                   {"id": G.fresh("dequant_" + tag), "op": "quantized_decomposed.dequantize_per_tensor.tensor",
                    "args": [q] + qa, "outputs": [d]}]
            at = nodes.index(G.prod[xin]) + 1 if xin in G.prod else 0
            nodes[at:at] = new
            done[xin] = d
        n["args"][base] = done[xin]
        report["quantized"].append({"node": n["id"], "op": n["op"], "weight": w})
    return g, params, report


def quantize_graph(graph, params, calibration, method="histogram", percentile=99.99, dynamic=False):
    """(quantized graph, params with the weights' scales added, report) for an f32 coil graph;
    calibration: a list of {input name: tensor} feeds (unused with dynamic: linear layers only,
    each input quantized at each run from its own range, the outputs f32)."""
    import copy
    ce._quant_ops()
    g = copy.deepcopy(graph)
    params = dict(params)
    _fold_batch_norms(g, params)
    graph = copy.deepcopy(g)  # what calibration runs: the folded f32 graph
    G = _Graph(g)
    report = {"quantized": [], "float": [], "method": "dynamic" if dynamic else method}
    layers = []
    for n in g["nodes"]:
        if n["op"] not in LAYERS:
            continue
        got, why = _layer(G, n)
        if dynamic and n["op"] == "aten.convolution.default":
            got, why = None, "a convolution (dynamic quantization covers linear layers; the static mode takes both)"
        if got is None:
            report["float"].append({"node": n["id"], "op": n["op"], "reason": why})
            continue
        x, w, wr, wi = got
        if params[w].dtype != torch.float32:
            report["float"].append({"node": n["id"], "op": n["op"], "reason": "weight dtype %s" % params[w].dtype})
            continue
        layers.append((n, x, w, wr, wi, _chain_end(G, n)))
    if not layers:
        return None, params, report
    if dynamic:
        return _dynamic(g, G, params, layers, report)

    # calibration: the layers' inputs and chain ends
    watch = {}
    for n, x, w, wr, wi, e in layers:
        watch.setdefault(x, Observer(method))
        watch.setdefault(e, Observer(method))
    weights = {p["name"]: params[p["name"]] for p in graph["params"]}

    def observe(name, t):
        o = watch.get(name)
        if o is not None and isinstance(t, torch.Tensor) and t.is_floating_point():
            o.update(t)
    with torch.no_grad():
        for feed in calibration:
            ce.eval_graph(graph, weights, feed, observe=observe)
    unseen = [k for k, o in watch.items() if o.lo > o.hi]
    if unseen:
        raise ce.ExportError("calibration never computed %s" % ", ".join(unseen[:4]))

    nodes = g["nodes"]
    qp_of = {}  # an inserted dequantize's value -> its (scale, zero point)

    def qdq(v, scale, zp, tag):
        q, d = G.fresh("%s_q" % tag), G.fresh("%s_dq" % tag)
        qa = [scale, zp, 0, 255, "u8"]
        return [{"id": G.fresh("quant_" + tag), "op": "quantized_decomposed.quantize_per_tensor.default",
                 "args": [v] + qa, "outputs": [q]},
                {"id": G.fresh("dequant_" + tag), "op": "quantized_decomposed.dequantize_per_tensor.default",
                 "args": [q] + qa, "outputs": [d]}], d

    for n, x, w, wr, wi, e in layers:
        _quantize_weight(g, G, params, w, wr, wi)
        # the input: a layer's quantized output as it is, else quantized here for every reader
        # (the residual add after a block reads it quantized too); data movement of a
        # quantized value keeps its quantization (the op then runs on u8: codegen/quant.c)
        xin = n["args"][1 if n["op"] == "aten.addmm.default" else 0]
        if xin not in qp_of:
            src = G.prod.get(xin)
            moved = src is not None and src["op"] in MOVES and src["args"] and src["args"][0] in qp_of
            sc, zp = qp_of[src["args"][0]] if moved else watch[x].qparams(percentile)
            new, d = qdq(xin, sc, zp, n["id"] + "_in")
            for r in nodes:
                if xin in _refs(r):
                    _replace(r, xin, d)
            at = nodes.index(G.prod[xin]) + 1 if xin in G.prod else 0
            nodes[at:at] = new
            qp_of[d] = (sc, zp)
        # the output, after its activations: every reader sees the dequantized value
        sc, zp = watch[e].qparams(percentile)
        new, d = qdq(e, sc, zp, n["id"] + "_out")
        for r in nodes:
            if e in _refs(r):
                _replace(r, e, d)
        g["outputs"] = [d if o == e else o for o in g["outputs"]]
        at = nodes.index(G.prod[e]) + 1
        nodes[at:at] = new
        qp_of[d] = (sc, zp)
        report["quantized"].append({"node": n["id"], "op": n["op"], "weight": w})
    return g, params, report
