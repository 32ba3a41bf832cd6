#!/usr/bin/python3
"""Export a PyTorch (1.13) module to a coil graph (docs/graph-format.md).

    export(module, example_inputs, outdir) writes
        graph.json           the coil graph (ATen ops, positional args in schema order,
                             kwarg-only args in "kwargs"; MemoryFormat as a string such as
                             "contiguous_format", Device/Layout as null)
        weights.safetensors  every param (state_dict entries and large captured constants)
        inputs.safetensors   the example inputs, keyed by input name
        outputs.safetensors  the eager outputs (original module, torch.no_grad()), output0..

CLI (run with Debian's /usr/bin/python3, where torch lives):
    coil_export.py MODEL OUTDIR [--batch N] [--dynamic-batch] [--dynamic SPEC] [--range S=MIN:MAX]
                                [--seed S] [--size PX]
                                [--d-model D] [--seq L] [--nhead H] [--dim-feedforward F]
                                [--no-coil-check]
    torchvision weights are random (seeded; no downloads); BatchNorm running stats and
    all-zero weight matrices (ViT's head) are randomized too so outputs are not trivial.
    MODEL: torchvision:<name> (classification or segmentation, e.g. lraspp_mobilenet_v3_large)
           | transformer:<layers> | mlp

Tracing: module.eval(); functorch functionalize(remove="mutations") + make_fx, with grad mode
on and float params requiring grad, so PyTorch's fused inference fast paths
(_transformer_encoder_layer_fwd, _native_multi_head_attention) are not taken.

Normalization applied to the traced graph:
  * no-op aliases are dropped (detach, alias, lift_fresh(_copy)): uses see the input;
  * aten._reshape_alias(x, size, stride) and aten._unsafe_view(x, size) -> aten.view(x, size)
    (both are exactly `view` in 1.13);
  * functionalization's view copies (view_copy, transpose_copy, ...) -> the plain view op;
  * a Python number in a Tensor slot (make_fx records div.Tensor(x, 4.0)) -> the op's Scalar
    overload (div.Scalar) when it has one, else a 0-dim constant;
  * in-place ops (relu_, add_, ...) -> their out-of-place forms. functionalize normally
    removes them; when it fails (autograd.Function), the module is traced without it and an
    in-place op that updates an input, param, constant or view, or a tensor a view aliases,
    is reported as unsupported instead of renamed;
  * dead nodes are dropped; unused results of multi-result ops are null.
Anything that is not an aten op, produces an unsupported dtype, or is missing from
`$COIL info --ops` (when that command works) raises UnsupportedOpsError naming every op.

Symbolic sizes (export(..., dynamic=SPEC, ranges=...), coil_symbolic.py, docs/python.md):
SPEC says which input dims are symbols (True: all the module takes at other sizes; "batch";
{input: dims or {dim: name}}; [(input, dim[, name])]). The module is traced at several sizes
(inputs resized by repeating entries cyclically, so token ids stay valid) and the graphs must
match exactly except for integers in SymInt argument slots (view, expand, zeros, slice bounds,
...): each of those that changes becomes an expression over the symbols fitted to the traces
("16*batch", "batch*seq", "2*seq+1", "(h+1)//2", "min(seq,512)") and checked on a held-out
trace. A size-dependent value anywhere else (an `int` such as a select index or a dim, a
Scalar, a captured constant) or a change of graph structure (a Python branch on a size) raises
ExportError naming the node, the symbol and the input dim. --dynamic-batch (dynamic_batch=True)
is SPEC "batch": dim 0 of every input is the symbol "batch". Ranges go to the graph's top-level
"symbols". The files hold the example inputs and eager outputs as usual.
"""
import argparse
import collections
import json
import math
import operator
import os
import subprocess
import sys

_here = os.path.dirname(os.path.abspath(__file__))
if _here not in sys.path:
    sys.path.insert(0, _here)
import coil_safetensors  # noqa: E402
import coil_symbolic  # noqa: E402

import torch  # noqa: E402

GRAPH_FORMAT = "coil-graph"
GRAPH_VERSION = 1
MAX_CONST_ELEMS = 4096

DTYPE_NAMES = {
    torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool",
}
NAME_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}

# ops whose result is (for a pure value graph) their first argument
ALIAS_OPS = {
    "aten.detach.default", "aten.alias.default", "aten.lift_fresh.default",
    "aten.lift_fresh_copy.default",
}
# aten.clone stays: in eager it also makes a tensor contiguous, which a following
# aten.view may rely on.

MEMORY_FORMATS = {
    torch.contiguous_format: "contiguous_format", torch.preserve_format: "preserve_format",
    torch.channels_last: "channels_last", torch.channels_last_3d: "channels_last_3d",
}


ExportError = coil_symbolic.ExportError
# Output leaves that are not tensors and that coil.compile returns as traced: None (a
# model's absent optional output, wav2vec2's lengths) and plain Python constants.
CONST_OUTPUTS = (bool, int, float, str)


class UnsupportedOpsError(ExportError):
    """Raised with .ops = {op name: count} and .reasons = {op name: why}."""

    def __init__(self, ops, reasons):
        self.ops = dict(ops)
        self.reasons = dict(reasons)
        parts = ["%s (x%d: %s)" % (k, self.ops[k], self.reasons.get(k, "unsupported"))
                 for k in sorted(self.ops)]
        super().__init__("unsupported ops: " + ", ".join(parts))


# ---------------------------------------------------------------- coil's op list

_coil_ops_cache = {}


def coil_supported_ops(coil=None):
    """Set of op names from `$COIL info --ops`, or None when that is unavailable."""
    coil = coil if coil is not None else os.environ.get("COIL")
    if not coil or not (os.path.isfile(coil) and os.access(coil, os.X_OK)):
        return None
    if coil in _coil_ops_cache:
        return _coil_ops_cache[coil]
    ops = None
    try:
        p = subprocess.run([coil, "info", "--ops"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=30)
        if p.returncode == 0:
            found = set()
            for line in p.stdout.decode("utf-8", "replace").splitlines():
                line = line.strip()
                if not line:
                    continue
                try:
                    name = json.loads(line)["name"]
                except (ValueError, KeyError, TypeError):
                    continue
                found.add(name)
                if name.count(".") == 1:  # "aten.t" == "aten.t.default"
                    found.add(name + ".default")
            ops = found or None
    except (OSError, subprocess.SubprocessError):
        ops = None
    _coil_ops_cache[coil] = ops
    return ops


# ---------------------------------------------------------------- op normalization

def _aten_overload(name, overload):
    packet = getattr(torch.ops.aten, name, None)
    if packet is None:
        return None
    try:
        return getattr(packet, overload)
    except (AttributeError, RuntimeError):
        return None


def _is_view_schema(schema):
    a = schema.arguments
    return bool(a) and a[0].alias_info is not None and not a[0].alias_info.is_write


def normalize_op(target):
    """Map an OpOverload to (kind, op): kind 'alias' (result = arg 0), 'view' (aten.view with
    args[:2]), or 'op' with the OpOverload to emit."""
    name = str(target)
    if name in ALIAS_OPS:
        return "alias", target
    if name in ("aten._reshape_alias.default", "aten._unsafe_view.default"):
        return "view", torch.ops.aten.view.default
    if not name.startswith("aten."):
        return "op", target
    base = target._schema.name.split("::", 1)[1]
    overload = target._overloadname or "default"
    if base.endswith("_copy") and base != "_copy":
        op = _aten_overload(base[:-len("_copy")], overload)
        if op is not None and _is_view_schema(op._schema):
            return "op", op
    if base.endswith("_") and not base.endswith("__"):
        s = target._schema
        if s.arguments and s.arguments[0].alias_info is not None and s.arguments[0].alias_info.is_write:
            op = _aten_overload(base[:-1], overload)
            if op is not None:
                return "op", op
    return "op", target


# ---------------------------------------------------------------- JSON values

def _json_float(v):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


class _ArgError(Exception):
    pass


def _tensor_data_json(t):
    flat = t.detach().reshape(-1)
    if t.dtype == torch.bool:
        return [bool(v) for v in flat.tolist()]
    if t.dtype.is_floating_point:
        return [_json_float(float(v)) for v in flat.to(torch.float64).tolist()]
    return [int(v) for v in flat.tolist()]


def _shape_json(shape):
    return [int(d) for d in shape]


# ---------------------------------------------------------------- tracing

# ---------------------------------------------------------------- recurrent layers as ops
#
# make_fx unrolls nn.LSTM, nn.GRU and nn.RNN into a few ops per time step (aten.lstm is
# composite): thousands of nodes for a long sequence, the sequence length baked in.  While
# tracing, their forward calls coil::lstm / gru / rnn_tanh / rnn_relu instead (torch.library
# ops that run torch.lstm, ...), which the trace records as one node each.

_RNN_LIB = []
# PyTorch's own, kept from _RnnAsOps' replacements (coil.lstm's reference runs while tracing)
_PACK, _PAD = torch.nn.utils.rnn.pack_padded_sequence, torch.nn.utils.rnn.pad_packed_sequence


def _rnn_ops():
    """The coil namespace's torch.library ops: the recurrent layers, the size guard."""
    if _RNN_LIB:
        return
    lib = torch.library.Library("coil", "DEF")
    lib.define("lstm(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, "
               "bool bidirectional, bool batch_first, Tensor? lengths=None) -> (Tensor, Tensor, Tensor)")
    for k in ("gru", "rnn_tanh", "rnn_relu"):
        lib.define(k + "(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, "
                   "bool bidirectional, bool batch_first, Tensor? lengths=None) -> (Tensor, Tensor)")

    def run(f, x, hx, params, has_biases, num_layers, bidirectional, batch_first, lengths):
        """PyTorch's own kernel, over a PackedSequence where lengths are given (the padding's
        outputs 0, each state from its sequence's last step)."""
        if lengths is None:
            return f(x, hx, params, has_biases, num_layers, 0.0, False, bidirectional, batch_first)
        rnn = torch.nn.utils.rnn
        p = _PACK(x, lengths.cpu(), batch_first=batch_first, enforce_sorted=False)
        hs = [h.index_select(1, p.sorted_indices) for h in (hx if isinstance(hx, (list, tuple)) else [hx])]
        r = f(p.data, p.batch_sizes, hs if isinstance(hx, (list, tuple)) else hs[0], params, has_biases,
              num_layers, 0.0, False, bidirectional)
        y, _ = _PAD(rnn.PackedSequence(r[0], p.batch_sizes, p.sorted_indices, p.unsorted_indices),
                                       batch_first=batch_first, total_length=x.shape[1 if batch_first else 0])
        return (y,) + tuple(h.index_select(1, p.unsorted_indices) for h in r[1:])

    def lstm(x, hx, params, has_biases, num_layers, bidirectional, batch_first, lengths=None):
        return run(torch.lstm, x, hx, params, has_biases, num_layers, bidirectional, batch_first, lengths)

    def one(f):
        return lambda x, hx, params, has_biases, num_layers, bidirectional, batch_first, lengths=None: run(
            f, x, hx, params, has_biases, num_layers, bidirectional, batch_first, lengths)
    # the exporter's guard on a size read from a tensor's values (_SizeGuards)
    lib.define("guard_eq(Tensor self, Tensor value, int expected) -> Tensor")

    def guard_eq(x, value, expected):
        if int(value.reshape(-1)[0]) != expected:
            raise RuntimeError("coil.guard_eq: the graph was exported for the value %d here, this run has %d"
                               % (expected, int(value.reshape(-1)[0])))
        return x.clone()
    lib.impl("guard_eq", guard_eq, "CPU")
    # Fourier transforms over complex values held as a last dim of 2 (_complex_as_real)
    lib.define("fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor")
    lib.define("fft_c2r(Tensor self, int[] dim, int normalization, int last_dim_size) -> Tensor")
    lib.define("fft_c2c(Tensor self, int[] dim, int normalization, bool forward) -> Tensor")
    lib.impl("fft_r2c", lambda x, dim, norm, onesided: torch.view_as_real(
        torch.ops.aten._fft_r2c(x, dim, norm, onesided)).clone(), "CPU")
    lib.impl("fft_c2r", lambda x, dim, norm, n: torch.ops.aten._fft_c2r(
        torch.view_as_complex(x.contiguous()), dim, norm, n), "CPU")
    lib.impl("fft_c2c", lambda x, dim, norm, fwd: torch.view_as_real(
        torch.ops.aten._fft_c2c(torch.view_as_complex(x.contiguous()), dim, norm, fwd)).clone(), "CPU")
    lib.impl("lstm", lstm, "CPU")
    lib.impl("gru", one(torch.gru), "CPU")
    lib.impl("rnn_tanh", one(torch.rnn_tanh), "CPU")
    lib.impl("rnn_relu", one(torch.rnn_relu), "CPU")
    _RNN_LIB.append(lib)


class _Padded:
    """While tracing: what pack_padded_sequence returns instead of a PackedSequence, the padded
    tensor itself with its lengths (coil.lstm and friends take lengths and treat the steps past
    them as padding, as packing does; no sorting: results come in the batch's own order)."""

    def __init__(self, data, lengths, batch_first):
        self.padded, self.lengths, self.batch_first = data, lengths, batch_first


def _pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    if not isinstance(lengths, torch.Tensor):
        lengths = torch.as_tensor(lengths, dtype=torch.int64)
    return _Padded(input, lengths.to(torch.int64), batch_first)


def _pad_packed_sequence(orig):
    def pad(sequence, batch_first=False, padding_value=0.0, total_length=None):
        if not isinstance(sequence, _Padded):
            return orig(sequence, batch_first, padding_value, total_length)
        y, lengths = sequence.padded, sequence.lengths
        if sequence.batch_first != batch_first:
            y = y.transpose(0, 1)
        t = y.shape[1 if batch_first else 0]
        # the longest sequence's steps: a size read from lengths' values (guarded, _SizeGuards)
        n = int(total_length) if total_length is not None else int(lengths.max())
        if n > t:
            y = torch.nn.functional.pad(y, (0, 0, 0, n - t) if batch_first else (0, 0, 0, 0, 0, n - t))
        elif n < t:
            y = y[:, :n] if batch_first else y[:n]
        if padding_value != 0.0:
            steps = torch.arange(n).unsqueeze(0 if batch_first else 1)
            keep = steps < (lengths.unsqueeze(1) if batch_first else lengths.unsqueeze(0))
            y = torch.where(keep.unsqueeze(-1), y, torch.full_like(y, padding_value))
        return y, lengths
    return pad


def _rnn_forward(orig):
    """nn.LSTM / nn.GRU / nn.RNN forward through coil::lstm / coil::gru / ... where it means the
    same: a 3-d float32 input or a packed one (_Padded), no dropout at work; LSTM's projection
    (proj_size) too."""
    def forward(self, input, hx=None):
        lstm = isinstance(self, torch.nn.LSTM)
        packed = isinstance(input, _Padded)
        x = input.padded if packed else input
        if (not isinstance(x, torch.Tensor) or x.dim() != 3 or x.dtype != torch.float32
                or (self.training and self.dropout)):
            return orig(self, input, hx)
        bf = input.batch_first if packed else self.batch_first
        lengths = input.lengths if packed else None
        d = 2 if self.bidirectional else 1
        b = x.shape[0 if bf else 1]
        if hx is None:
            hs = getattr(self, "proj_size", 0) or self.hidden_size
            z = x.new_zeros(self.num_layers * d, b, hs)
            hx = (z, x.new_zeros(self.num_layers * d, b, self.hidden_size)) if lstm else z
        params = list(self._flat_weights)
        if lstm:
            out, h, c = torch.ops.coil.lstm(x, list(hx), params, self.bias, self.num_layers, self.bidirectional,
                                            bf, lengths)
            return (_Padded(out, lengths, bf) if packed else out), (h, c)
        op = {"GRU": torch.ops.coil.gru, "RNN_TANH": torch.ops.coil.rnn_tanh, "RNN_RELU": torch.ops.coil.rnn_relu}[self.mode]
        out, h = op(x, hx, params, self.bias, self.num_layers, self.bidirectional, bf, lengths)
        return (_Padded(out, lengths, bf) if packed else out), h
    return forward


class _RnnAsOps:
    """While tracing: nn.LSTM, nn.GRU and nn.RNN as one op each, and pack_padded_sequence /
    pad_packed_sequence around them as lengths (COIL_RNN_UNROLL=1: as make_fx unrolls them)."""

    def __enter__(self):
        self.saved = []
        if os.environ.get("COIL_RNN_UNROLL") == "1":
            return self
        _rnn_ops()
        for cls in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN):
            self.saved.append((cls, "forward", cls.forward))
            cls.forward = _rnn_forward(cls.forward)
        rnn = torch.nn.utils.rnn
        self.saved.append((rnn, "pack_padded_sequence", rnn.pack_padded_sequence))
        self.saved.append((rnn, "pad_packed_sequence", rnn.pad_packed_sequence))
        rnn.pad_packed_sequence = _pad_packed_sequence(rnn.pad_packed_sequence)
        rnn.pack_padded_sequence = _pack_padded_sequence
        return self

    def __exit__(self, *exc):
        for owner, name, f in reversed(self.saved):
            setattr(owner, name, f)


# ---------------------------------------------------------------- quantized models
#
# A model from PyTorch's FX flow (prepare_fx / prepare_qat_fx, then convert_to_reference_fx)
# traces to aten.quantize_per_tensor / quantize_per_channel, producing quantized tensors, and
# aten.dequantize, which reads the scale and zero point off them.  coil's graphs hold plain
# u8/i8 tensors instead, with the quantization parameters on PyTorch 2's quantized_decomposed
# ops (defined here for 1.13, which lacks them): _quant_as_ops rewrites the trace that way.

_QUANT_LIB = []
_QDTYPES = {torch.quint8: (torch.uint8, 0, 255), torch.qint8: (torch.int8, -128, 127),
            torch.qint32: (torch.int32, -2 ** 31, 2 ** 31 - 1)}


def _quant_ops():
    if _QUANT_LIB or hasattr(torch.ops.quantized_decomposed, "quantize_per_tensor"):
        return
    lib = torch.library.Library("quantized_decomposed", "DEF")
    tail = "int quant_min, int quant_max, ScalarType dtype) -> Tensor"
    for k in ("quantize", "dequantize"):
        lib.define(k + "_per_tensor(Tensor input, float scale, int zero_point, " + tail)
        lib.define(k + "_per_tensor.tensor(Tensor input, Tensor scale, Tensor zero_point, " + tail)
        lib.define(k + "_per_channel(Tensor input, Tensor scales, Tensor zero_points, int axis, " + tail)
    lib.define("choose_qparams.tensor(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype) "
               "-> (Tensor, Tensor)")

    def qparams(x, s, z, axis=None):
        s = torch.as_tensor(s, dtype=torch.float32)
        z = torch.as_tensor(z).to(torch.float32)
        if axis is not None:  # [C] along axis
            shape = [1] * x.dim()
            shape[axis] = -1
            s, z = s.reshape(shape), z.reshape(shape)
        return s.reshape(-1)[0] if axis is None and s.dim() else s, z.reshape(-1)[0] if axis is None and z.dim() else z

    def q(x, s, z, lo, hi, dt, axis=None):  # as ATen: rint(x * (1.0f / s)) + zp, in f32
        s, z = qparams(x, s, z, axis)
        return torch.clamp(torch.round(x.to(torch.float32) * (1.0 / s)) + z, lo, hi).to(dt)

    def dq(x, s, z, lo, hi, dt, axis=None):
        s, z = qparams(x, s, z, axis)
        return (x.to(torch.float32) - z) * s
    def cq(x, lo, hi, eps, dt):  # as PyTorch's observers, in f32 (per-tensor affine)
        zero = torch.zeros((), dtype=torch.float32)
        x = x.to(torch.float32)
        mn = torch.minimum(x.min(), zero) if x.numel() else zero
        mx = torch.maximum(x.max(), zero) if x.numel() else zero
        s = torch.maximum((mx - mn) / float(hi - lo), torch.tensor(eps, dtype=torch.float32))
        z = torch.clamp(lo - torch.round(mn / s), lo, hi).to(torch.int64)
        return s.reshape(1), z.reshape(1)
    lib.impl("choose_qparams.tensor", cq, "CPU")
    lib.impl("quantize_per_tensor", q, "CPU")
    lib.impl("quantize_per_tensor.tensor", q, "CPU")
    lib.impl("quantize_per_channel", lambda x, s, z, a, lo, hi, dt: q(x, s, z, lo, hi, dt, a), "CPU")
    lib.impl("dequantize_per_tensor", dq, "CPU")
    lib.impl("dequantize_per_tensor.tensor", dq, "CPU")
    lib.impl("dequantize_per_channel", lambda x, s, z, a, lo, hi, dt: dq(x, s, z, lo, hi, dt, a), "CPU")
    _QUANT_LIB.append(lib)


def _quant_as_ops(gm):
    """The trace gm with aten's quantize/dequantize as quantized_decomposed ops (in place)."""
    aten = torch.ops.aten
    per_tensor = {aten.quantize_per_tensor.default, aten.quantize_per_tensor.tensor_qparams}
    dynamic = aten.quantize_per_tensor_dynamic.default
    quant = per_tensor | {aten.quantize_per_channel.default, aten.dequantize.self, dynamic}
    if not any(n.op == "call_function" and n.target in quant for n in gm.graph.nodes):
        return gm
    _quant_ops()
    qd = torch.ops.quantized_decomposed

    def value(v, what, n):
        if isinstance(v, torch.fx.Node):
            if v.op != "get_attr":
                raise ExportError("%s: the %s is computed (%s); a quantized model's scales and zero points "
                                  "must be constants" % (n.name, what, v.name))
            return getattr(gm, v.target)
        return v

    params = {}  # new quantize node -> its qparams (for the dequantize that reads it)
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target not in quant:
            continue
        args = list(n.args) + [n.kwargs[k] for k in ("dtype",) if k in n.kwargs]
        if n.target == aten.dequantize.self:
            src = args[0]
            if src not in params:
                raise ExportError("%s: dequantize of %s, which coil cannot see the quantization of: export "
                                  "the model convert_to_reference_fx gives (not convert_fx's)" % (n.name, src))
            op, qp = params[src]
            op = {qd.quantize_per_tensor.default: qd.dequantize_per_tensor.default,
                  qd.quantize_per_tensor.tensor: qd.dequantize_per_tensor.tensor,
                  qd.quantize_per_channel.default: qd.dequantize_per_channel.default}[op]
            new_args = (src,) + qp
        else:
            dt = args[1] if n.target == dynamic else args[-1]
            if dt not in _QDTYPES:
                raise ExportError("%s: quantized dtype %s is not supported" % (n.name, dt))
            sd, lo, hi = _QDTYPES[dt]
            if n.target == dynamic:  # qparams from this call's range: PyTorch 2's choose_qparams
                if len(args) > 2 and args[2]:  # reduce_range
                    lo, hi = lo // 2, hi // 2
                with gm.graph.inserting_before(n):
                    cq = gm.graph.call_function(qd.choose_qparams.tensor,
                                                (args[0], lo, hi, torch.finfo(torch.float32).eps, sd))
                    s, z = (gm.graph.call_function(operator.getitem, (cq, k)) for k in (0, 1))
                op, qp = qd.quantize_per_tensor.tensor, (s, z, lo, hi, sd)
            elif n.target in per_tensor:
                s = float(torch.as_tensor(value(args[1], "scale", n)).reshape(-1)[0])
                z = int(torch.as_tensor(value(args[2], "zero point", n)).reshape(-1)[0])
                op, qp = qd.quantize_per_tensor.default, (s, z, lo, hi, sd)
            else:
                value(args[1], "scale", n)
                # the zero points as a graph constant, not a param: the compiler reads them
                # (oneDNN's int8 kernels take symmetric weights only)
                zname = "_coil_zero_points_%d" % len(params)
                gm.register_buffer(zname, torch.as_tensor(value(args[2], "zero point", n)).detach().clone(),
                                   persistent=False)
                with gm.graph.inserting_before(n):
                    z = gm.graph.get_attr(zname)
                op, qp = qd.quantize_per_channel.default, (args[1], z, int(args[3]), lo, hi, sd)
            new_args = (args[0],) + qp
        with gm.graph.inserting_before(n):
            new = gm.graph.call_function(op, new_args)
        n.replace_all_uses_with(new)
        gm.graph.erase_node(n)
        if n.target != aten.dequantize.self:
            params[new] = (op, qp)
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            for a in n.args:
                if isinstance(a, torch.fx.Node) and a in params and str(n.target).startswith("aten."):
                    raise ExportError("%s (%s) reads the quantized tensor %s directly; coil takes the "
                                      "reference form, where only dequantize does" % (n.name, n.target, a.name))
    gm.graph.lint()
    gm.recompile()
    return gm


class _SizeGuards:
    """While tracing: an integer read from a one-element integer tensor (int(t.item()), a
    lengths tensor's max made a size) becomes the value it has in this trace, and the trace
    gets a guard that fails the run where it differs (`guards`: (its fx node, value)).  Other
    reads of values (floats, a branch on a bool) still fail the trace."""

    def __enter__(self):
        from torch.fx.experimental import proxy_tensor as pt
        self.pt, self.orig, self.guards = pt, pt.proxy_call, []

        def proxy_call(mode, func, args, kwargs):
            t = args[0] if args else None
            if (func is torch.ops.aten._local_scalar_dense.default and isinstance(t, torch.Tensor) and
                    t.numel() == 1 and not t.is_floating_point() and not t.is_complex() and t.dtype != torch.bool):
                p = pt.fetch_tensor_proxy(mode.tracer)(t)
                if isinstance(p, pt._ProxyTensor) and p.constant is None:
                    with pt.disable_proxy_modes_tracing():
                        v = int(t.reshape(-1)[0])
                    self.guards.append((p.proxy.node, v))
                    return v
            # A value read out of tensors made of the trace's own constants alone (no input,
            # no parameter reaches them: istft's checks of its window) is the same at every
            # run: it is computed here, and the branch on it taken as traced.
            if torch.Tag.data_dependent_output in func.tags:
                ts = [x for x in torch.utils._pytree.tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
                ps = [pt.fetch_tensor_proxy(mode.tracer)(x) for x in ts]
                if ts and all(isinstance(q, pt._ProxyTensor) and _constant_only(q.proxy.node) for q in ps):
                    with pt.disable_proxy_modes_tracing():
                        return func(*args, **kwargs)
            return self.orig(mode, func, args, kwargs)
        pt.proxy_call = proxy_call
        return self

    def __exit__(self, *exc):
        self.pt.proxy_call = self.orig


def _constant_only(node):
    """Does no placeholder or attribute (an input or a parameter) reach this fx node, nor a
    random op (torch.rand: another value at every run)?"""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op in ("placeholder", "get_attr"):
            return False
        if isinstance(n.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in n.target.tags:
            return False
        todo.extend(n.all_input_nodes)
    return True


def _add_guards(gm, guards):
    """Each guard as coil.guard_eq on the trace's first tensor result (so that it runs)."""
    if not guards:
        return gm
    _rnn_ops()
    out = next(n for n in gm.graph.nodes if n.op == "output")
    leaves, spec = torch.utils._pytree.tree_flatten(out.args[0])
    k = next((i for i, v in enumerate(leaves) if isinstance(v, torch.fx.Node)), None)
    if k is None:
        raise ExportError("the trace reads a size from a tensor's values but returns no tensor to guard")
    r = leaves[k]
    with gm.graph.inserting_before(out):
        for node, v in guards:
            r = gm.graph.call_function(torch.ops.coil.guard_eq.default, (r, node, v))
    leaves[k] = r
    out.args = (torch.utils._pytree.tree_unflatten(leaves, spec),)
    gm.graph.lint()
    gm.recompile()
    return gm


_COMPLEX = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _complex_as_real(gm, inputs):
    """coil has no complex dtype: a complex value becomes the real tensor torch.view_as_real
    gives (a last dim of 2), and the ops on it their real forms: ATen's FFTs coil.fft_r2c /
    fft_c2r / fft_c2c, views and data movement the same op with dims counted over the complex
    shape, arithmetic written out (complex products, abs, conj).  An op with no such form
    is left as it was, so that the export names it.  torch.stft / istft / torch.fft trace to
    these (hdemucs)."""
    A = torch.ops.aten

    def cplx(x):
        return isinstance(x, torch.fx.Node) and getattr(x.meta.get("tensor_meta"), "dtype", None) in _COMPLEX

    if not any(cplx(n) for n in gm.graph.nodes):
        return gm
    _rnn_ops()
    C = torch.ops.coil
    g = gm.graph
    rep = {}  # complex node -> its real form

    def rank(x):
        return len(x.meta["tensor_meta"].shape)

    def call(f, *args):
        return g.call_function(f, tuple(args))

    def parts(z):
        return call(A.select.int, rep[z], -1, 0), call(A.select.int, rep[z], -1, 1)

    def pack(re, im):
        return call(A.stack.default, [re, im], -1)

    views = (A.view.default, A._unsafe_view.default, A.reshape.default, A._reshape_alias.default)
    same = (A.clone.default, A.contiguous.default, A.alias.default, A.detach.default, A.lift_fresh_copy.default,
            A.resolve_conj.default, A.resolve_neg.default)
    changed = False
    for n in list(g.nodes):
        if n.op == "placeholder" and cplx(n):
            raise ExportError("input %s is complex: coil takes real tensors (pass torch.view_as_real(x) and "
                              "call torch.view_as_complex inside the module)" % n.name)
        if n.op != "call_function":
            continue
        ins = [a for a in n.all_input_nodes if cplx(a)]
        if not ins and not cplx(n):
            continue
        if any(a not in rep for a in ins):
            continue  # its input stayed complex: reported where it was made
        t, a = n.target, list(n.args)
        z = a[0] if a else None
        R = rank(z) if cplx(z) else None
        new, out_c = None, cplx(n)
        with g.inserting_before(n):
            if t == A._fft_r2c.default:
                new = call(C.fft_r2c.default, *a)
            elif t == A._fft_c2r.default:
                new = call(C.fft_c2r.default, rep[z], *a[1:])
            elif t == A._fft_c2c.default:
                new = call(C.fft_c2c.default, rep[z], *a[1:])
            elif t == A.view_as_real.default:
                new = rep[z]
            elif t == A.view_as_complex.default:
                new = z
            elif t in views:
                new = call(A.view.default, rep[z], list(a[1]) + [2])
            elif t in same:
                new = rep[z]
            elif t == A._to_copy.default and cplx(z) and cplx(n) and not a[1:] and \
                    n.meta["tensor_meta"].dtype == z.meta["tensor_meta"].dtype:
                new = rep[z]
            elif t == A.transpose.int:
                new = call(A.transpose.int, rep[z], a[1] % R, a[2] % R)
            elif t == A.t.default:
                new = call(A.transpose.int, rep[z], 0, R - 1) if R == 2 else rep[z]
            elif t == A.permute.default:
                new = call(A.permute.default, rep[z], [d % R for d in a[1]] + [R])
            elif t == A.slice.Tensor:
                new = call(A.slice.Tensor, rep[z], (a[1] if len(a) > 1 else 0) % R, *a[2:])
            elif t == A.select.int:
                new = call(A.select.int, rep[z], a[1] % R, a[2])
            elif t == A.unsqueeze.default:
                new = call(A.unsqueeze.default, rep[z], a[1] % (R + 1))
            elif t == A.squeeze.dim:
                new = call(A.squeeze.dim, rep[z], a[1] % R)
            elif t == A.squeeze.default:
                new = call(A.view.default, rep[z], list(n.meta["tensor_meta"].shape) + [2])
            elif t == A.expand.default:
                new = call(A.expand.default, rep[z], list(a[1]) + [2])
            elif t == A.constant_pad_nd.default and (len(a) < 3 or a[2] == 0):
                new = call(A.constant_pad_nd.default, rep[z], [0, 0] + list(a[1]), 0.0)
            elif t in (A.cat.default, A.stack.default) and all(cplx(x) for x in a[0]):
                r = rank(a[0][0]) + (t == A.stack.default)
                new = call(t, [rep[x] for x in a[0]], (a[1] if len(a) > 1 else 0) % r)
            elif t in (A.add.Tensor, A.sub.Tensor) and len(a) == 2 and all(cplx(x) for x in a) and not n.kwargs:
                new = call(t, rep[a[0]], rep[a[1]])
            elif t == A.neg.default:
                new = call(A.neg.default, rep[z])
            elif t in (A.mul.Tensor, A.div.Tensor) and len(a) == 2 and not n.kwargs:
                x, y = a
                if cplx(x) and cplx(y) and t == A.mul.Tensor:  # (a + bi)(c + di)
                    (p, q), (u, v) = parts(x), parts(y)
                    new = pack(call(A.sub.Tensor, call(A.mul.Tensor, p, u), call(A.mul.Tensor, q, v)),
                               call(A.add.Tensor, call(A.mul.Tensor, p, v), call(A.mul.Tensor, q, u)))
                elif cplx(x) != cplx(y) and (t == A.mul.Tensor or cplx(x)):
                    zc, w = (x, y) if cplx(x) else (y, x)
                    if isinstance(w, torch.fx.Node):
                        w = call(A.unsqueeze.default, w, -1)
                    if isinstance(w, (int, float)) or isinstance(w, torch.fx.Node):
                        new = call(t, rep[zc], w) if cplx(x) else call(t, w, rep[zc])
            elif t in (A.real.default, A.imag.default):
                new = call(A.select.int, rep[z], -1, 0 if t == A.real.default else 1)
            elif t in (A._conj.default, A.conj_physical.default, A.conj.default):
                p, q = parts(z)
                new = pack(p, call(A.neg.default, q))
            elif t == A.abs.default:
                p, q = parts(z)
                new = call(A.sqrt.default, call(A.add.Tensor, call(A.mul.Tensor, p, p), call(A.mul.Tensor, q, q)))
            elif t == A.complex.default:
                new = pack(a[0], a[1])
        if new is None:
            continue
        changed = True
        if out_c:
            rep[n] = new
        else:
            n.replace_all_uses_with(new)
    if not changed:
        return gm
    for n in reversed(list(g.nodes)):  # the complex nodes, now unused
        if n.op == "call_function" and not n.users and (n in rep or any(x in rep for x in n.all_input_nodes)):
            g.erase_node(n)
    g.lint()
    gm.recompile()
    from torch.fx.passes.shape_prop import ShapeProp
    with torch.no_grad():
        ShapeProp(gm).propagate(*inputs)  # the new nodes' shapes and dtypes
    return gm


def _as_strided_views(gm):
    """coil's as_strided reads its input's elements in row-major order, its sizes static.  One
    that takes windows along a dim of a contiguous tensor (torch.stft's frames) becomes
    aten.unfold, whose sizes may be symbolic; any other is checked: its traced input must have
    been contiguous, and its offset relative to the input's first element (not a view's)."""
    changed = False
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or str(n.target) not in ("aten.as_strided.default", "aten.as_strided_copy.default"):
            continue
        x = n.args[0]
        tm = x.meta.get("tensor_meta") if isinstance(x, torch.fx.Node) else None
        if tm is None:
            continue
        shape = [int(d) for d in tm.shape]
        want, acc = [], 1
        for d in reversed(shape):
            want.insert(0, acc)
            acc *= d
        if any(d > 1 and int(st) != w for d, st, w in zip(shape, tm.stride, want)):
            raise ExportError("%s: as_strided of a non-contiguous tensor (strides %s for shape %s): coil reads "
                              "its input in row-major order" % (n.name, list(tm.stride), shape))
        size, stride = [int(v) for v in n.args[1]], [int(v) for v in n.args[2]]
        off = n.args[3] if len(n.args) > 3 else n.kwargs.get("storage_offset")
        if off and x.op == "call_function" and isinstance(x.target, torch._ops.OpOverload) and \
                _is_view_schema(x.target._schema):
            raise ExportError("%s: as_strided with a storage offset over a view (%s): its offset in the storage "
                              "is not part of the graph" % (n.name, x.name))
        r = len(shape)
        if off or len(size) != r + 1 or r == 0:
            continue
        for d in range(r):  # windows of size[r] every step along d
            step = stride[d] // want[d] if want[d] else 0
            if (step >= 1 and stride[d] == step * want[d] and stride[r] == want[d] and size[r] <= shape[d] and
                    size[d] == (shape[d] - size[r]) // step + 1 and
                    all(size[i] == shape[i] and (shape[i] <= 1 or stride[i] == want[i]) for i in range(r) if i != d)):
                with gm.graph.inserting_before(n):
                    u = gm.graph.call_function(torch.ops.aten.unfold.default, (x, d, size[r], step))
                u.meta = dict(n.meta)
                n.replace_all_uses_with(u)
                gm.graph.erase_node(n)
                changed = True
                break
    if changed:
        gm.graph.lint()
        gm.recompile()
    return gm


def _trace(module, inputs, functionalize=True, grad=True):
    from torch.fx.experimental.proxy_tensor import make_fx

    fn = module
    if functionalize:
        from functorch.experimental import functionalize as _functionalize
        fn = _functionalize(module, remove="mutations")
    with torch.set_grad_enabled(grad), _RnnAsOps(), _SizeGuards() as sg:
        gm = make_fx(fn)(*inputs)
    _as_strided_views(gm)
    return _quant_as_ops(_add_guards(_complex_as_real(gm, inputs), sg.guards))


class _Names:
    def __init__(self):
        self.used = set()

    def reserve(self, name):
        if name in self.used:
            raise ExportError("duplicate value name %r" % name)
        self.used.add(name)
        return name

    def fresh(self, base):
        name = base
        i = 1
        while name in self.used:
            name = "%s_%d" % (base, i)
            i += 1
        self.used.add(name)
        return name


def build_graph(gm, module, inputs, input_names, dynamic_batch=False, coil_ops=None, slice_sizes=None):
    """Turn a make_fx GraphModule into (graph dict, {param name: tensor}).

    slice_sizes: a dict that gets {node id: size} of each `aten.slice.Tensor`'s input along
    the sliced dim (the symbolic export's fit guards the bounds it saw within it)."""
    # (a reference quantized module's state also holds its qscheme and dtype: not tensors)
    state = {k: v for k, v in module.state_dict(keep_vars=True).items() if isinstance(v, torch.Tensor)}
    by_id = {}
    by_ptr = {}
    for k, v in state.items():
        by_id.setdefault(id(v), k)
        if v.numel():
            by_ptr.setdefault((v.data_ptr(), tuple(v.shape), tuple(v.stride()), v.dtype), k)

    names = _Names()
    params = collections.OrderedDict()  # name -> tensor
    for k, v in state.items():
        params[names.reserve(k)] = v.detach()
    graph_inputs = []
    for n, t in zip(input_names, inputs):
        shape = _shape_json(t.shape)
        if dynamic_batch and shape:
            shape[0] = "batch"
        if t.dtype not in DTYPE_NAMES:
            raise ExportError("input %r has unsupported dtype %s" % (n, t.dtype))
        graph_inputs.append({"name": names.reserve(n), "dtype": DTYPE_NAMES[t.dtype], "shape": shape})

    constants = collections.OrderedDict()  # name -> tensor
    const_by_id = {}
    value = {}          # fx node -> value name (str) or list of names for multi-result nodes
    records = []        # emitted nodes
    multi = {}          # fx node -> record of a multi-result node
    bad_consts = {}     # constant value name -> why
    generated = set()   # large captured constants turned into params

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise ExportError("traced graph has %d inputs, expected %d" % (len(placeholders), len(inputs)))
    for ph, inp in zip(placeholders, graph_inputs):
        value[ph] = inp["name"]

    def conv(v, where):
        if isinstance(v, torch.fx.Node):
            r = value.get(v)
            if r is None:
                raise _ArgError("%s: uses %s, which has no value" % (where, v.name))
            if isinstance(r, list):
                raise _ArgError("%s: uses the result list of %s directly" % (where, v.name))
            return r
        if isinstance(v, (list, tuple)):
            return [conv(x, where) for x in v]
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return _json_float(v)
        if isinstance(v, torch.dtype):
            if v not in DTYPE_NAMES:
                raise _ArgError("%s: dtype %s is not supported" % (where, v))
            return DTYPE_NAMES[v]
        if isinstance(v, torch.memory_format):
            return MEMORY_FORMATS.get(v)  # coil ignores it; kept so the graph runs in eager
        if isinstance(v, (torch.device, torch.layout)):
            return None
        raise _ArgError("%s: cannot express argument %r (%s)" % (where, v, type(v).__name__))

    def node_dtypes(fxnode):
        tm = fxnode.meta.get("tensor_meta")
        if tm is None:
            return []
        if hasattr(tm, "dtype"):  # TensorMetadata is itself a NamedTuple
            return [tm.dtype]
        if isinstance(tm, (list, tuple)):
            return [getattr(x, "dtype", None) for x in tm]
        return [getattr(tm, "dtype", None)]

    def fx_deps(node):
        deps = []
        torch.fx.node.map_arg((node.args, node.kwargs), lambda n: deps.append(n))
        return [value[d] for d in deps if isinstance(value.get(d), str)]

    def scalar_const(v):
        if isinstance(v, bool):
            t = torch.tensor(v, dtype=torch.bool)
        elif isinstance(v, int):
            t = torch.tensor(v, dtype=torch.int64)
        else:
            t = torch.tensor(float(v), dtype=torch.float32)
        cname = names.fresh("_scalar")
        constants[cname] = t
        return cname

    def bad_record(node, opname, why):
        # keeps the value's dependencies so dead-code removal treats it like any node
        rec = {"op": opname, "args": fx_deps(node), "kwargs": {}, "bad": why,
               "outputs": [names.fresh(node.name)]}
        records.append(rec)
        value[node] = rec["outputs"][0]

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            t = getattr(gm, node.target)
            if not isinstance(t, torch.Tensor):
                raise ExportError("get_attr %s is not a tensor" % node.target)
            pname = by_id.get(id(t))
            if pname is None and t.numel():
                pname = by_ptr.get((t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype))
            if pname is not None:
                value[node] = pname
                continue
            if id(t) in const_by_id:
                value[node] = const_by_id[id(t)]
                continue
            cname = names.fresh(node.target)
            const_by_id[id(t)] = cname
            value[node] = cname
            if t.dtype not in DTYPE_NAMES:
                bad_consts[cname] = "captured constant %s has dtype %s" % (
                    node.target, str(t.dtype).replace("torch.", ""))
            elif t.numel() <= MAX_CONST_ELEMS:
                constants[cname] = t.detach().clone()
            else:
                params[cname] = t.detach().clone()
                generated.add(cname)
            continue
        if node.op == "output":
            continue
        if node.op != "call_function":
            bad_record(node, "%s:%s" % (node.op, node.target), "not an ATen op call")
            continue

        target = node.target
        if target is operator.getitem:
            parent, idx = node.args
            rec = multi.get(parent)
            if rec is None:
                if isinstance(value.get(parent), str):  # result of an unsupported call
                    value[node] = value[parent]
                    continue
                raise ExportError("getitem on %s, which has no multiple results" % parent.name)
            name = names.fresh(node.name)
            while len(rec["outputs"]) <= idx:
                rec["outputs"].append(None)
            rec["outputs"][idx] = name
            value[node] = name
            continue

        if not isinstance(target, torch._ops.OpOverload):
            opname = getattr(target, "__module__", None) or ""
            opname = (opname + "." if opname else "") + (getattr(target, "__name__", None) or str(target))
            bad_record(node, opname, "not an ATen op")
            continue

        kind, op = normalize_op(target)
        opname = str(op)
        where = "%s (%s)" % (node.name, opname)
        if kind == "alias":
            src = node.args[0] if node.args else node.kwargs.get("self")
            value[node] = value[src]
            continue
        why = None if opname.startswith(("aten.", "coil.", "quantized_decomposed.")) else "not an aten op"
        inplace_why = _inplace_problem(node) if why is None and _mutates_first_arg(target) else None
        schema = op._schema
        try:
            if kind == "view":
                args = [conv(node.args[0], where), conv(node.args[1], where)]
                kwargs = {}
            else:
                args, kwargs = _place_args(schema, node, where)
                op, args, kwargs = _scalars_in_tensor_args(op, args, kwargs, scalar_const)
                opname, schema = str(op), op._schema
                args = [conv(v, where) for v in args]
                kwargs = {k: conv(v, where) for k, v in kwargs.items()}
        except _ArgError as e:
            why = why or str(e)
            args, kwargs = fx_deps(node), {}
        for fx in [node] + [u for u in node.users if u.target is operator.getitem]:
            for dt in node_dtypes(fx):
                if why is None and dt is not None and dt not in DTYPE_NAMES:
                    why = "produces %s" % str(dt).replace("torch.", "")
        rec = {"op": opname, "args": args, "kwargs": kwargs, "bad": why}
        if slice_sizes is not None and target == torch.ops.aten.slice.Tensor:
            tm = node.args[0].meta.get("tensor_meta") if isinstance(node.args[0], torch.fx.Node) else None
            dim = node.args[1] if len(node.args) > 1 else 0
            if tm is not None and isinstance(dim, int) and len(tm.shape):
                rec["size"] = int(tm.shape[dim % len(tm.shape)])
        if inplace_why:
            # a mutation that renaming cannot express: reported even if its result is unused
            rec.update(op=str(target), bad=inplace_why, root=True)
        returns = schema.returns
        if len(returns) != 1 or str(returns[0].type).startswith("List["):
            n_out = len(returns)
            if len(returns) == 1:  # Tensor[]: as many results as getitems make_fx emitted
                idxs = [u.args[1] for u in node.users if u.target is operator.getitem]
                n_out = max(idxs) + 1 if idxs else 0
            rec["outputs"] = [None] * n_out
            multi[node] = rec
            value[node] = []
        else:
            rec["outputs"] = [names.fresh(node.name)]
            value[node] = rec["outputs"][0]
        records.append(rec)

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat_out, _ = torch.utils._pytree.tree_flatten(out_node.args[0])
    graph_outputs = []
    for o in flat_out:
        if o is None or isinstance(o, CONST_OUTPUTS):
            continue  # a constant leaf of the output: the caller puts it back (coil.compile)
        if not isinstance(o, torch.fx.Node) or not isinstance(value.get(o), str):
            raise ExportError("graph output %r is not a tensor" % (o,))
        graph_outputs.append(value[o])

    # liveness: keep records that (transitively) feed the outputs
    producer = {}
    for rec in records:
        for nm in rec["outputs"]:
            if nm is not None:
                producer[nm] = rec

    def refs(v, acc):
        if isinstance(v, str):
            acc.append(v)
        elif isinstance(v, list):
            for x in v:
                refs(x, acc)
        elif isinstance(v, dict):
            for x in v.values():
                refs(x, acc)
        return acc

    used = set()
    live = set()
    stack = list(graph_outputs)
    stack += [nm for rec in records if rec.get("root") for nm in rec["outputs"] if nm]
    while stack:
        nm = stack.pop()
        if nm in used:
            continue
        used.add(nm)
        rec = producer.get(nm)
        if rec is not None and id(rec) not in live:
            live.add(id(rec))
            stack.extend(refs(rec["args"], []) + refs(rec["kwargs"], []))

    nodes = []
    bad = collections.Counter()
    reasons = {}
    for rec in records:
        if id(rec) not in live:
            continue
        if rec["bad"]:
            bad[rec["op"]] += 1
            reasons.setdefault(rec["op"], rec["bad"])
        outs = [nm if (nm is not None and nm in used) else None for nm in rec["outputs"]]
        j = {"id": "n%d" % len(nodes), "op": rec["op"], "args": rec["args"]}
        if "size" in rec:
            slice_sizes[j["id"]] = rec["size"]
        if rec["kwargs"]:
            j["kwargs"] = rec["kwargs"]
        j["outputs"] = outs
        nodes.append(j)
    for cname, why in bad_consts.items():
        if cname in used:
            bad["constant " + cname] += 1
            reasons.setdefault("constant " + cname, why)
    if coil_ops is not None:
        for j in nodes:
            if j["op"] not in coil_ops and j["op"] not in bad:
                bad[j["op"]] += sum(1 for k in nodes if k["op"] == j["op"])
                reasons[j["op"]] = "not in `coil info --ops`"
    if bad:
        raise UnsupportedOpsError(bad, reasons)

    used_consts = [k for k in constants if k in used]
    for k in generated - used:
        del params[k]
    graph = collections.OrderedDict([
        ("format", GRAPH_FORMAT),
        ("version", GRAPH_VERSION),
        ("inputs", graph_inputs),
        ("params", [{"name": k, "dtype": _dtype_name(v, k), "shape": _shape_json(v.shape)}
                    for k, v in params.items()]),
        ("constants", [{"name": k, "dtype": _dtype_name(constants[k], k),
                        "shape": _shape_json(constants[k].shape),
                        "data": _tensor_data_json(constants[k])} for k in used_consts]),
        ("nodes", nodes),
        ("outputs", graph_outputs),
    ])
    return graph, params


def _dtype_name(t, name):
    if t.dtype not in DTYPE_NAMES:
        raise ExportError("%r has unsupported dtype %s" % (name, t.dtype))
    return DTYPE_NAMES[t.dtype]


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, torch.fx.Node)


def _mutates_first_arg(target):
    a = target._schema.arguments
    return bool(a) and a[0].alias_info is not None and a[0].alias_info.is_write


def _inplace_problem(node):
    """Why renaming the in-place op `node` to its out-of-place form would change the result
    (None when it is exact). make_fx makes later uses refer to the in-place op's own result,
    so the rename is exact when the mutated tensor is a fresh op result (not an input, param,
    constant or view) that no view aliases."""
    chain = [node]
    src = node.args[0] if node.args else None
    while True:
        if not isinstance(src, torch.fx.Node) or src.op != "call_function":
            return "in-place update of an input, param or constant"
        t = src.target
        if t is operator.getitem:
            parent = src.args[0]
            pt = getattr(parent, "target", None)
            if isinstance(pt, torch._ops.OpOverload) and pt._schema.arguments and \
                    pt._schema.arguments[0].alias_info is not None:
                return "in-place update of a view"
            if not isinstance(pt, torch._ops.OpOverload):
                return "in-place update of a value from a non-ATen call"
            break
        if not isinstance(t, torch._ops.OpOverload):
            return "in-place update of a value from a non-ATen call"
        if _mutates_first_arg(t) or normalize_op(t)[0] == "alias":
            chain.append(src)
            src = src.args[0] if src.args else None
            continue
        if _is_view_schema(t._schema) or normalize_op(t)[0] == "view":
            return "in-place update of a view"
        break
    chain.append(src)
    members = set(chain)
    for c in chain:
        for u in c.users:
            ut = u.target
            if u in members or not isinstance(ut, torch._ops.OpOverload) or not u.users:
                continue  # a view nothing reads (e.g. autograd's detach) observes nothing
            if _is_view_schema(ut._schema) or normalize_op(ut)[0] == "view":
                return "in-place update of a tensor that a view aliases"
    return None


def _scalars_in_tensor_args(op, args, kwargs, make_const):
    """make_fx records e.g. aten.div.Tensor(x, 4.0): a Python number where the schema says
    Tensor. Use the op's Scalar overload when it has one (div.Tensor -> div.Scalar, which is
    what eager does with a wrapped number), else turn the number into a 0-dim constant."""
    schema = op._schema
    types = schema_arg_types(schema)
    pos = [a for a in schema.arguments if not a.kwarg_only]
    spots = [i for i, (a, v) in enumerate(zip(pos, args))
             if types.get(a.name, "").startswith("Tensor") and _is_number(v)]
    kspots = [k for k, v in kwargs.items()
              if types.get(k, "").startswith("Tensor") and _is_number(v)]
    if not spots and not kspots:
        return op, args, kwargs
    overload = op._overloadname or "default"
    if "Tensor" in overload and not kspots:
        alt = _aten_overload(schema.name.split("::", 1)[1], overload.replace("Tensor", "Scalar"))
        if alt is not None:
            at = schema_arg_types(alt._schema)
            if (set(at) == set(types)
                    and all(at[pos[i].name].startswith("Scalar") for i in spots)
                    and all(at[k].startswith("Tensor") for k, v in types.items()
                            if v.startswith("Tensor") and k not in [pos[i].name for i in spots])):
                # same argument names; re-place them (add.Tensor's kwarg-only alpha is
                # positional in add.Scalar)
                byname = dict(zip([a.name for a in pos], args))
                byname.update(kwargs)
                apos = [a for a in alt._schema.arguments if not a.kwarg_only]
                last = max([i for i, a in enumerate(apos) if a.name in byname], default=-1)
                nargs = []
                for a in apos[:last + 1]:
                    if a.name in byname:
                        nargs.append(byname[a.name])
                    elif a.has_default_value():
                        nargs.append(a.default_value)
                    else:
                        break
                else:
                    nkw = {a.name: byname[a.name] for a in alt._schema.arguments
                           if a.kwarg_only and a.name in byname}
                    return alt, nargs, nkw
    args = list(args)
    for i in spots:
        args[i] = make_const(args[i])
    kwargs = dict(kwargs)
    for k in kspots:
        kwargs[k] = make_const(kwargs[k])
    return op, args, kwargs


def _place_args(schema, node, where):
    """Raw (unconverted) positional args in schema order, gaps filled with defaults, and
    kwarg-only args by name (left out where they are None/device/layout at a None default)."""
    sargs = schema.arguments
    positional = [a for a in sargs if not a.kwarg_only]
    if len(node.args) > len(positional):
        raise _ArgError("%s: %d positional args, schema has %d" % (where, len(node.args), len(positional)))
    slots = list(node.args)
    present = [True] * len(slots)
    kwargs = {}
    index = {a.name: i for i, a in enumerate(positional)}
    for k, v in node.kwargs.items():
        if k in index:
            i = index[k]
            while len(slots) <= i:
                slots.append(None)
                present.append(False)
            slots[i] = v
            present[i] = True
        else:
            a = next((a for a in sargs if a.name == k), None)
            if a is None:
                raise _ArgError("%s: unknown keyword argument %r" % (where, k))
            if ((v is None or isinstance(v, (torch.device, torch.layout)))
                    and a.has_default_value() and a.default_value is None):
                continue
            kwargs[k] = v
    args = []
    for i, (v, p) in enumerate(zip(slots, present)):
        if p:
            args.append(v)
        else:
            a = positional[i]
            if not a.has_default_value():
                raise _ArgError("%s: argument %r missing" % (where, a.name))
            args.append(a.default_value)
    return args, kwargs


# ---------------------------------------------------------------- export

def _as_tuple(example_inputs):
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    return tuple(example_inputs)


def _trace_module(module, inputs, functionalize=True, grad=True):
    """make_fx trace of module(*inputs), float params requiring grad while `grad`; falls back
    to tracing without functionalization when that fails (autograd.Function)."""
    saved = [(p, p.requires_grad) for p in module.parameters()]
    try:
        if grad:
            for p, _ in saved:
                if p.is_floating_point():
                    p.requires_grad_(True)
        try:
            return _trace(module, inputs, functionalize=functionalize, grad=grad)
        except Exception as e:  # noqa: BLE001
            if not functionalize:
                raise
            # e.g. "functorch functions ... do not support the use of autograd.Function":
            # trace without functionalization; in-place ops are then renamed where that is
            # exact and reported where it is not (see _inplace_problem).
            try:
                return _trace(module, inputs, functionalize=False, grad=grad)
            except Exception:
                raise e
    finally:
        for p, rg in saved:
            p.requires_grad_(rg)


# ---------------------------------------------------------------- symbolic sizes

BATCH_SYMBOL = coil_symbolic.BATCH

_arg_types_cache = {}


def op_arg_types(opname):
    """(declared type by argument name, positional argument names) of an op."""
    r = _arg_types_cache.get(opname)
    if r is None:
        schema = _resolve_op(opname)._schema
        r = (schema_arg_types(schema), [a.name for a in schema.arguments if not a.kwarg_only])
        _arg_types_cache[opname] = r
    return r


def _prober(module, inputs):
    """probe(sizes) for coil_symbolic.resolve_spec: does the module run eagerly with those
    input dims resized?"""
    def probe(sizes):
        try:
            with torch.no_grad():
                module(*coil_symbolic.resize(inputs, sizes))
            return True
        except Exception:  # noqa: BLE001 (a size the module does not take)
            return False
    return probe


def resolve_dynamic(module, inputs, input_names, dynamic=None, dynamic_batch=False, ranges=None):
    """The coil_symbolic.Spec for `dynamic` (dynamic_batch=True: "batch")."""
    if dynamic_batch and dynamic in (None, False):
        dynamic = "batch"
    return coil_symbolic.resolve_spec(inputs, input_names, dynamic, probe=_prober(module, inputs),
                                      ranges=ranges)


def build_symbolic(module, inputs, input_names, spec, trace, coil_ops):
    """Trace `module` at several sizes with `trace(inputs) -> GraphModule` and fit the size
    arguments (coil_symbolic.fit). Returns (graph, params, info)."""
    def graph_at(sizes, first):
        ins = coil_symbolic.resize(inputs, sizes)
        gm = trace(ins)
        sl = {}
        graph, params = build_graph(gm, module, ins, input_names, False, coil_ops if first else None, sl)
        graph["slice_sizes"] = sl  # read (and dropped) by coil_symbolic.fit
        return graph, params

    graph, params, info, _ = coil_symbolic.fit(spec, graph_at, op_arg_types, eval_dim_expr)
    return graph, params, info


def export(module, example_inputs, outdir, dynamic_batch=False, input_names=None,
           check_coil=True, coil=None, functionalize=True, grad=True, write=True,
           dynamic=None, ranges=None, info=None):
    """Export `module` called on `example_inputs` to `outdir`; returns the graph dict.

    check_coil: compare the ops with `$COIL info --ops` (or `coil`) when that works.
    grad: trace with grad mode on and float params requiring grad (avoids fused fast paths).
    dynamic: which input dims are symbolic (coil_symbolic's spec: True, "batch", {input:
    dims or {dim: name}}, [(input, dim[, name])]); dynamic_batch=True is dynamic="batch".
    ranges: {symbol: (min, max)}, written to the graph's "symbols". info: a dict that gets
    the symbolic export's details (symbols, traces, expressions).
    """
    inputs = _as_tuple(example_inputs)
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            raise ExportError("example inputs must be tensors, got %s" % type(t).__name__)
    if input_names is None:
        input_names = ["x"] if len(inputs) == 1 else ["input%d" % i for i in range(len(inputs))]
    if len(input_names) != len(inputs):
        raise ExportError("%d input names for %d inputs" % (len(input_names), len(inputs)))
    module.eval()

    with torch.no_grad():
        eager = module(*inputs)
    eager_flat, _ = torch.utils._pytree.tree_flatten(eager)
    for o in eager_flat:
        if not isinstance(o, torch.Tensor):
            raise ExportError("module returned a %s; only tensors can be outputs" % type(o).__name__)

    coil_ops = coil_supported_ops(coil) if check_coil else None
    spec = resolve_dynamic(module, inputs, input_names, dynamic, dynamic_batch, ranges)
    if spec:
        graph, params, details = build_symbolic(
            module, inputs, input_names, spec,
            lambda ins: _trace_module(module, ins, functionalize, grad), coil_ops)
        if info is not None:
            info.update(details)
    else:
        gm = _trace_module(module, inputs, functionalize, grad)
        graph, params = build_graph(gm, module, inputs, input_names, False, coil_ops)
    if len(graph["outputs"]) != len(eager_flat):
        raise ExportError("traced graph has %d outputs, eager module %d" % (
            len(graph["outputs"]), len(eager_flat)))
    if write and outdir is not None:
        os.makedirs(outdir, exist_ok=True)
        with open(os.path.join(outdir, "graph.json"), "w") as f:
            f.write(dumps_graph(graph))
        coil_safetensors.save(params, os.path.join(outdir, "weights.safetensors"),
                              metadata={"format": "pt"})
        coil_safetensors.save(dict(zip(input_names, inputs)),
                              os.path.join(outdir, "inputs.safetensors"))
        coil_safetensors.save({"output%d" % i: o for i, o in enumerate(eager_flat)},
                              os.path.join(outdir, "outputs.safetensors"))
    return graph


def dumps_graph(graph):
    """graph.json text: one input/param/constant/node per line."""
    def one(v):
        return json.dumps(v, separators=(", ", ": "), allow_nan=False)
    lines = ["{"]
    items = list(graph.items())
    for i, (k, v) in enumerate(items):
        end = "," if i + 1 < len(items) else ""
        if isinstance(v, list) and v:
            lines.append(" %s: [" % one(k))
            lines.extend("  %s%s" % (one(e), "," if j + 1 < len(v) else "") for j, e in enumerate(v))
            lines.append(" ]" + end)
        else:
            lines.append(" %s: %s%s" % (one(k), one(v), end))
    lines.append("}")
    return "\n".join(lines) + "\n"


def op_schemas(graph):
    """{op name: schema string} for the ops of a graph."""
    out = {}
    for n in graph["nodes"]:
        name = n["op"]
        if name in out:
            continue
        parts = name.split(".")
        op = getattr(getattr(torch.ops, parts[0]), parts[1])
        op = getattr(op, parts[2] if len(parts) > 2 else "default")
        out[name] = str(op._schema)
    return out


# ---------------------------------------------------------------- reference evaluation

def _resolve_op(name):
    parts = name.split(".")
    packet = getattr(getattr(torch.ops, parts[0]), parts[1])
    return getattr(packet, parts[2] if len(parts) > 2 else "default")


def eval_graph(graph, weights, inputs, observe=None):
    """Run a coil graph with PyTorch's own ATen ops (a reference for tests).

    weights/inputs: {name: torch tensor}. Returns the list of output tensors. Symbols in the
    input declarations are bound from the inputs' shapes, and dimension expressions in SymInt
    arguments are evaluated with them. observe(name, tensor), when given, sees every input
    and every node result (coil.quantize's calibration)."""
    if observe is not None:
        for k, v in inputs.items():
            observe(k, v)
    env = dict(weights)
    env.update(inputs)
    syms = {}
    for decl in graph.get("inputs", []):
        t = inputs.get(decl["name"])
        if t is None:
            continue
        for i, d in enumerate(decl["shape"]):
            if isinstance(d, str) and i < t.dim():
                if syms.setdefault(d, int(t.shape[i])) != int(t.shape[i]):
                    raise ExportError("symbol %r bound to both %d and %d" % (d, syms[d], t.shape[i]))
    for c in graph.get("constants", []):
        data = [float(v) if isinstance(v, str) else v for v in c["data"]]
        env[c["name"]] = torch.tensor(data, dtype=NAME_DTYPES[c["dtype"]]).reshape(c["shape"])
    pending = list(graph["nodes"])
    while pending:
        rest = []
        for n in pending:
            op = _resolve_op(n["op"])
            if not all(r in env for r in _tensor_refs(op._schema, n)):
                rest.append(n)
                continue
            args, kwargs = _from_json_args(op._schema, n.get("args", []), n.get("kwargs", {}), env,
                                           syms)
            r = op(*args, **kwargs)
            rs = list(r) if isinstance(r, (list, tuple)) else [r]
            for nm, val in zip(n["outputs"], rs):
                if nm is not None:
                    env[nm] = val
                    if observe is not None:
                        observe(nm, val)
        if len(rest) == len(pending):
            raise ExportError("graph has undefined references or a cycle at node %s" % rest[0]["id"])
        pending = rest
    return [env[o] for o in graph["outputs"]]


def schema_arg_types(schema):
    """{argument name: declared type} from the schema text ("ScalarType?", "SymInt[]", ...);
    the pybind types say "int" for ScalarType, MemoryFormat and Layout."""
    text = str(schema)
    start = text.index("(") + 1
    depth, i = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    body = text[start:i - 1]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = {}
    for p in parts:
        p = p.strip()
        if not p or p == "*":
            continue
        decl = p.split("=", 1)[0].strip()
        typ, name = decl.rsplit(" ", 1)
        out[name] = typ
    return out


def _tensor_refs(schema, n):
    types = schema_arg_types(schema)
    pos = [a for a in schema.arguments if not a.kwarg_only]
    pairs = list(zip([a.name for a in pos], n.get("args", []))) + list(n.get("kwargs", {}).items())
    out = []
    for name, v in pairs:
        if types.get(name, "").startswith("Tensor"):
            for x in (v if isinstance(v, list) else [v]):
                if x is not None:
                    out.append(x)
    return out


def eval_dim_expr(text, syms):
    """Value of a dimension expression ("16*batch", "2*seq+1", "(h+1)//2", "min(seq,512)")
    with symbols bound by `syms`: integers, symbols, + - *, // by a positive number (floor),
    min(a, b), max(a, b), parentheses."""
    import ast

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in syms:
                raise ExportError("unknown size symbol %r in %r" % (node.id, text))
            return syms[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv):
            a, b = ev(node.left), ev(node.right)
            if b <= 0:
                raise ExportError("size expression %r divides by %d" % (text, b))
            return a // b
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max")
                and len(node.args) == 2 and not node.keywords):
            a, b = ev(node.args[0]), ev(node.args[1])
            return min(a, b) if node.func.id == "min" else max(a, b)
        raise ExportError("bad size expression %r" % text)

    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ExportError("bad size expression %r" % text)
    return ev(tree)


def _from_json_args(schema, args, kwargs, env, syms=None):
    sargs = schema.arguments
    types = schema_arg_types(schema)

    def back(a, v):
        t = types.get(a.name, str(a.type))
        if v is None:
            return None
        if t.startswith("Tensor"):
            if isinstance(v, list):
                return [None if x is None else env[x] for x in v]
            return env[v]
        if t.startswith("ScalarType"):
            return NAME_DTYPES[v]
        if t.startswith("MemoryFormat"):
            return {v: k for k, v in MEMORY_FORMATS.items()}.get(v)
        if t.startswith("Layout") or t.startswith("Device"):
            return None
        if (t.startswith("float") or t.startswith("Scalar")) and isinstance(v, str):
            # "nan", "inf", "-inf", or a size expression (arange's bounds)
            return float(v) if v in ("nan", "inf", "-inf") else eval_dim_expr(v, syms or {})
        if t.startswith("SymInt"):
            if isinstance(v, list):
                return [eval_dim_expr(x, syms or {}) if isinstance(x, str) else x for x in v]
            if isinstance(v, str):
                return eval_dim_expr(v, syms or {})
        return v

    pos = [a for a in sargs if not a.kwarg_only]
    out_args = [back(a, v) for a, v in zip(pos, args)]
    out_kwargs = {}
    for k, v in kwargs.items():
        a = next(a for a in sargs if a.name == k)
        out_kwargs[k] = back(a, v)
    return out_args, out_kwargs


# ---------------------------------------------------------------- models for the CLI

def _randomize_bn_stats(module, gen):
    for m in module.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)


def _randomize_zero_weights(module, gen):
    # e.g. ViT's zero-initialized head, which would make every output 0
    with torch.no_grad():
        for p in module.parameters():
            if p.dim() >= 2 and p.is_floating_point() and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


def make_model(spec, batch=1, seed=0, size=224, d_model=64, seq=16, nhead=4, ff=128):
    """Build (module, example inputs) for a CLI model spec; weights random with `seed`."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    if spec.startswith("torchvision:"):
        import torchvision
        name = spec.split(":", 1)[1]
        ctor = getattr(torchvision.models, name, None)
        kw = {"weights": None}
        if ctor is None or not callable(ctor):  # segmentation models live in their own module
            ctor = getattr(torchvision.models.segmentation, name, None)
            kw["weights_backbone"] = None  # else the backbone's pretrained weights are fetched
        if ctor is None or not callable(ctor):
            raise ExportError("unknown torchvision model %r" % name)
        if name in ("inception_v3", "googlenet"):
            kw["aux_logits"] = False
            kw["init_weights"] = True
        m = ctor(**kw)
        _randomize_bn_stats(m, gen)
        _randomize_zero_weights(m, gen)
        x = torch.randn(batch, 3, size, size, generator=gen)
        return m.eval(), (x,)
    if spec.startswith("transformer:"):
        layers = int(spec.split(":", 1)[1])
        layer = torch.nn.TransformerEncoderLayer(d_model, nhead, ff, batch_first=True)
        m = torch.nn.TransformerEncoder(layer, layers)
        x = torch.randn(batch, seq, d_model, generator=gen)
        return m.eval(), (x,)
    if spec == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
        x = torch.randn(batch, 16, generator=gen)
        return m.eval(), (x,)
    raise ExportError("unknown model %r (torchvision:<name>, transformer:<layers>, mlp)" % spec)


def _parse_dynamic(text):
    """--dynamic: 'auto' -> True; 'I:D[=NAME],...' -> [(I, D, NAME or None)]."""
    if not text:
        return None
    if text in ("auto", "true"):
        return True
    out = []
    for part in text.split(","):
        where, _, name = part.partition("=")
        try:
            i, d = where.split(":")
            out.append((int(i), int(d), name or None))
        except ValueError:
            raise ExportError("--dynamic: %r is not INPUT:DIM[=NAME]" % part) from None
    return out


def _parse_ranges(items):
    out = {}
    for it in items:
        sym, _, r = it.partition("=")
        lo, sep, hi = r.partition(":")
        try:
            if not sym or not sep:
                raise ValueError
            out[sym] = (int(lo) if lo else None, int(hi) if hi else None)
        except ValueError:
            raise ExportError("--range: %r is not SYMBOL=MIN:MAX" % it) from None
    return out or None


def main(argv=None):
    ap = argparse.ArgumentParser(description="Export a PyTorch model to a coil graph.")
    ap.add_argument("model", help="torchvision:<name> | transformer:<layers> | mlp")
    ap.add_argument("outdir")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dynamic-batch", action="store_true")
    ap.add_argument("--dynamic", metavar="SPEC",
                    help="symbolic input dims: 'auto' (every dim the module takes at other sizes) "
                         "or INPUT:DIM[=NAME],... such as 0:0=batch,0:1=seq")
    ap.add_argument("--range", metavar="SYM=MIN:MAX", action="append", default=[],
                    help="a symbol's range (either bound may be empty), e.g. seq=1:512")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=224, help="image size for torchvision models")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--nhead", type=int, default=4)
    ap.add_argument("--dim-feedforward", type=int, default=128)
    ap.add_argument("--no-coil-check", action="store_true",
                    help="do not compare ops with `$COIL info --ops`")
    a = ap.parse_args(argv)
    try:
        m, inputs = make_model(a.model, batch=a.batch, seed=a.seed, size=a.size,
                               d_model=a.d_model, seq=a.seq, nhead=a.nhead, ff=a.dim_feedforward)
        g = export(m, inputs, a.outdir, dynamic_batch=a.dynamic_batch,
                   check_coil=not a.no_coil_check, dynamic=_parse_dynamic(a.dynamic),
                   ranges=_parse_ranges(a.range))
    except ExportError as e:
        print("coil_export: %s" % e, file=sys.stderr)
        return 1
    ops = collections.Counter(n["op"] for n in g["nodes"])
    print("%s: %d nodes, %d params, %d constants, %d ops -> %s" % (
        a.model, len(g["nodes"]), len(g["params"]), len(g["constants"]), len(ops), a.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
