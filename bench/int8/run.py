"""bench/int8: coil's int8 against f32 eager, coil f32 and PyTorch's own int8 engine, at 1 and 2
threads, batch 1, on the zoo's CNNs (bench/models/zoo.py: random weights, seeded) and a
BERT-style encoder. Writes bench/results/int8.md/.json.

Engines, all on the same input:
  eager       the f32 module (OPENBLAS_NUM_THREADS=1, torch.set_num_threads(N))
  coil f32    coil.compile of the f32 module
  coil fx     coil.compile of PyTorch's FX reference model (prepare_fx with the 'onednn'
              qconfig, 4 random calibration batches, convert_to_reference_fx)
  torch int8  PyTorch's int8 kernels on the same calibrated model (convert_fx, 'onednn' engine)
  coil q      coil.quantize of the f32 module (coil's own calibration, same 4 batches)
  coil dyn    encoders only: coil.quantize(dynamic=True) (linear layers, inputs quantized per call)
  torch dyn   encoders only: PyTorch's quantize_dynamic on the same module ('onednn' engine; its
              1.13 fast path cannot take quantized layers and is switched off)
  ort qdq     ONNX Runtime 1.30 on the FX reference model exported to ONNX (opset 13:
              QuantizeLinear/DequantizeLinear with the same scales; all graph optimizations,
              intra-op threads N, sequential; bench/dynamic's runner, timed inside it)
Every engine's call comes after 50 ms of quiet (ORT's spinning threads go idle, and no engine
starts on a core the one before it kept busy).
Each round times every engine once, in turn, so that each ratio pairs times taken within the
same round (these machines are shared and noisy); medians over the rounds. Accuracy: each
int8 engine's logit SQNR against eager f32 (10 log10 |y|^2 / |y - y8|^2, dB).
FX cannot trace torchvision's shufflenet (it unpacks x.size()): there coil q alone runs.

Run: OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/int8/run.py [--models a,b] [--threads 1,2]
     [--rounds N]"""
import argparse
import copy
import json
import math
import os
import platform
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
from torch.ao.quantization import get_default_qconfig_mapping  # noqa: E402
from torch.ao.quantization.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx  # noqa: E402

import coil  # noqa: E402
import zoo  # noqa: E402

CNNS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0",
        "densenet121"]
ENCODERS = ["bert_mini", "bert_base"]
MODELS = CNNS + ENCODERS
ENGINES = ["eager", "coil f32", "coil fx", "torch int8", "coil q", "ort qdq", "coil dyn", "torch dyn"]


DYN = zoo.dynamic_bench()


def sqnr(ref, got):
    ref, got = ref.double(), got.double()
    noise = float(((ref - got) ** 2).sum())
    return float("inf") if noise == 0 else 10 * math.log10(float((ref ** 2).sum()) / noise)


def timed(fn, x):
    t = time.perf_counter()
    fn(*x)
    return (time.perf_counter() - t) * 1e3


def build(name, nt, cache, coil_bin):
    """{engine: callable} for one model at nt threads, and what could not be built (engine: why)."""
    torch.backends.quantized.engine = "onednn"
    m, ins = zoo.make(name, 1)
    g = torch.Generator().manual_seed(5)
    calib = [tuple(torch.randn(t.shape, generator=g) if t.is_floating_point() else t for t in ins) for _ in range(4)]
    fns, skipped = {"eager": m}, {}
    with torch.no_grad():
        fns["coil f32"] = coil.compile(m, ins, threads=nt, cache_dir=cache, coil=coil_bin)
        try:
            p = prepare_fx(m, get_default_qconfig_mapping("onednn"), ins)
            for c in calib:
                p(*c)
            ref = convert_to_reference_fx(p)
            fns["coil fx"] = coil.compile(ref, ins, threads=nt, cache_dir=cache, coil=coil_bin)
            fns["torch int8"] = convert_fx(p)
            ort = ort_engine(ref, ins, nt, cache, name)
            if isinstance(ort, str):
                skipped["ort qdq"] = ort
            else:
                fns["ort qdq"] = ort
        except Exception as e:  # noqa: BLE001
            msg = str(e).splitlines()[0][:120]
            skipped["coil fx"] = skipped["torch int8"] = "FX: %s: %s" % (type(e).__name__, msg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fns["coil q"] = coil.quantize(m, calib, ins, threads=nt, cache_dir=cache, coil=coil_bin)
            if name in ENCODERS:
                fns["coil dyn"] = coil.quantize(m, None, ins, dynamic=True, threads=nt, cache_dir=cache,
                                                coil=coil_bin)
                tq = torch.ao.quantization.quantize_dynamic(copy.deepcopy(m), {torch.nn.Linear}, dtype=torch.qint8)
                for lay in getattr(tq, "layers", []):
                    lay.activation_relu_or_gelu = False  # 1.13's fast path reads quantized weights as tensors
                fns["torch dyn"] = tq
    return fns, ins, skipped


_QPC = []


def _qpc_symbolic():
    """aten::quantize_per_channel as ONNX QuantizeLinear with its axis (opset 13): torch 1.13
    has no symbolic for it. The zero points take the quantized type (int8 for qint8 weights:
    1.13's quantize_helper would make them uint8 and clip the negative weights)."""
    if _QPC:
        return
    from torch.onnx import register_custom_op_symbolic, symbolic_helper as sh
    from torch._C import _onnx as onnx_c

    def qpc(g, x, scales, zps, axis, dtype):
        to = onnx_c.TensorProtoDataType.INT8 if sh._get_const(dtype, "i", "dtype") == 12 else \
            onnx_c.TensorProtoDataType.UINT8  # ScalarType 12: qint8
        s = g.op("Cast", scales, to_i=onnx_c.TensorProtoDataType.FLOAT)
        z = g.op("Cast", zps, to_i=to)
        q = g.op("QuantizeLinear", x, s, z, axis_i=sh._get_const(axis, "i", "axis"))
        return g.op("prim::TupleConstruct", q, s, z, axis)
    register_custom_op_symbolic("aten::quantize_per_channel", qpc, 13)
    _QPC.append(qpc)


def ort_engine(ref, ins, nt, d, name):
    """ONNX Runtime on the reference model's QDQ export: a callable that runs it once and
    returns (ms, output 0), or why it cannot run."""
    why = DYN.ort_available()
    if why:
        return why
    import numpy
    path = os.path.join(d, "%s_qdq.onnx" % name)
    # the reference modules' state holds their qscheme (not a tensor), which the exporter
    # cannot name: left out of state_dict while exporting
    orig = torch.nn.Module.state_dict

    def tensors_only(self, *a, **k):
        sd = orig(self, *a, **k)
        for key in [key for key, v in sd.items() if not isinstance(v, torch.Tensor)]:
            del sd[key]
        return sd
    torch.nn.Module.state_dict = tensors_only
    _qpc_symbolic()
    try:
        torch.onnx.export(ref, tuple(ins), path, opset_version=13, do_constant_folding=True)
    except Exception as e:  # noqa: BLE001
        msg = str(e).splitlines()[0]
        return "QDQ export: %s" % (msg[:msg.find(". Please")] if ". Please" in msg else msg[:120])
    finally:
        torch.nn.Module.state_dict = orig
    files = []
    for i, t in enumerate(ins):
        fn = os.path.join(d, "%s_in%d.bin" % (name, i))
        t.contiguous().numpy().tofile(fn)
        files.append(fn)
    shapes, dts = [list(t.shape) for t in ins], ["float32"] * len(ins)
    try:
        o = DYN.Ort(path, nt)
        outf = os.path.join(d, "%s_out.bin" % name)
        o.run(shapes, dts, reps=1, warmup=1, inputs=files, out=outf)
    except Exception as e:  # noqa: BLE001
        return "ONNX Runtime: %s" % str(e).splitlines()[0][:160]

    def run(*_):
        return o.run(shapes, dts, reps=1, inputs=files)["times_ms"][0]
    run.ort = o
    run.output = lambda: torch.from_numpy(numpy.fromfile(outf, dtype="float32"))
    return run


def bench_model(name, threads_list, rounds, cache, coil_bin):
    rows = []
    for nt in threads_list:
        torch.set_num_threads(nt)
        fns, ins, skipped = build(name, nt, cache, coil_bin)
        with torch.no_grad():
            ref = fns["eager"](*ins)
            acc = {e: sqnr(ref, fns[e](*ins)) for e in ("coil f32", "coil fx", "torch int8", "coil q", "coil dyn",
                                                         "torch dyn") if e in fns}
            if "ort qdq" in fns:
                acc["ort qdq"] = sqnr(ref.reshape(-1), fns["ort qdq"].output())
            q = fns["coil q"].info["quantize"]
            for e, f in fns.items():
                f(*ins)  # warm
            times = {e: [] for e in fns}
            for _ in range(rounds):
                for e, f in fns.items():
                    time.sleep(0.05)  # the same quiet before every engine's call (ORT's threads go idle)
                    times[e].append(f() if e == "ort qdq" else timed(f, ins))
        if "ort qdq" in fns:
            fns["ort qdq"].ort.close()
        med = {e: sorted(v)[len(v) // 2] for e, v in times.items()}
        rows.append({"model": name, "threads": nt, "ms": med, "sqnr_db": acc, "skipped": skipped,
                     "int8_layers": len(q["quantized"]), "f32_layers": len(q["float"])})
        print("%-20s %dT  " % (name, nt) + "  ".join("%s %.2f" % (e, med[e]) for e in fns) +
              "  SQNR " + " ".join("%s %.1f" % kv for kv in acc.items()), flush=True)
    return rows


def geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def report(rows, path_md, path_json, meta):
    with open(path_json, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = ["# int8: coil against f32 eager, coil f32 and PyTorch's int8 engine", "",
             "Written by `bench/int8/run.py` (%s). Batch 1, medians of %d paired rounds (ms); ratios are "
             "speedups of coil's int8 (`coil fx`: PyTorch's FX reference model compiled by coil; `coil q`: "
             "coil.quantize). SQNR: logits against eager f32 (dB)." % (meta["when"], meta["rounds"]), "",
             "| model | T | eager | coil f32 | coil fx | torch int8 | ORT QDQ | coil q | fx / coil f32 | fx / eager | "
             "fx / torch int8 | fx / ORT | q / coil f32 | SQNR fx | SQNR torch | SQNR ORT | SQNR q |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    has_ort = any("ort qdq" in x["ms"] for x in rows)

    def f(v):
        return "%.2f" % v if v is not None else "—"

    def r(a, b):
        return "%.2fx" % (a / b) if a and b else "—"
    for row in rows:
        ms, s = row["ms"], row["sqnr_db"]
        fx = ms.get("coil fx")
        def db(k):
            return "%.1f" % s[k] if k in s else "—"
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            row["model"], row["threads"], f(ms.get("eager")), f(ms.get("coil f32")), f(fx), f(ms.get("torch int8")),
            f(ms.get("ort qdq")), f(ms.get("coil q")), r(ms.get("coil f32"), fx), r(ms.get("eager"), fx),
            r(ms.get("torch int8"), fx), r(ms.get("ort qdq"), fx), r(ms.get("coil f32"), ms.get("coil q")),
            db("coil fx"), db("torch int8"), db("ort qdq"), db("coil q")))
    if not has_ort:  # no ORT column at all (the reason is listed below)
        for i, ln in enumerate(lines):
            if ln.startswith("|"):
                cells = ln.split("|")
                lines[i] = "|".join(c for k, c in enumerate(cells) if k not in (7, 12, 16))
    dyn = [x for x in rows if "coil dyn" in x["ms"]]
    if dyn:
        lines += ["", "Dynamic quantization (linear layers; `coil dyn`: coil.quantize(dynamic=True), `torch dyn`: "
                  "PyTorch's quantize_dynamic):", "",
                  "| model | T | eager | coil f32 | coil q | coil dyn | torch dyn | dyn / coil f32 | dyn / eager | "
                  "dyn / torch dyn | q / coil f32 | SQNR dyn | SQNR torch dyn | SQNR q |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in dyn:
            ms, s = row["ms"], row["sqnr_db"]
            d = ms["coil dyn"]

            def db(k):
                return "%.1f" % s[k] if k in s else "—"
            lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                row["model"], row["threads"], f(ms.get("eager")), f(ms.get("coil f32")), f(ms.get("coil q")), f(d),
                f(ms.get("torch dyn")), r(ms.get("coil f32"), d), r(ms.get("eager"), d), r(ms.get("torch dyn"), d),
                r(ms.get("coil f32"), ms.get("coil q")), db("coil dyn"), db("torch dyn"), db("coil q")))
    lines.append("")
    for nt in sorted({r_["threads"] for r_ in rows}):
        cnn = [x for x in rows if x["threads"] == nt and x["model"] in CNNS]
        best = [min(v for k, v in x["ms"].items() if k in ("coil fx", "coil q")) for x in cnn]
        lines.append("- %dT, CNNs: geomean coil int8 (the faster of fx and q) over coil f32 %.2fx, over eager %.2fx; "
                     "coil fx over torch int8 %.2fx (where FX runs)." % (
                         nt, geomean([x["ms"]["coil f32"] / b for x, b in zip(cnn, best)]),
                         geomean([x["ms"]["eager"] / b for x, b in zip(cnn, best)]),
                         geomean([x["ms"]["torch int8"] / x["ms"]["coil fx"] for x in cnn if "coil fx" in x["ms"]])))
        ort = [x for x in cnn if "ort qdq" in x["ms"]]
        if ort:
            lines.append("- %dT: coil fx over ONNX Runtime QDQ (same scales) %.2fx geomean over %d CNNs." % (
                nt, geomean([x["ms"]["ort qdq"] / x["ms"]["coil fx"] for x in ort]), len(ort)))
    why = {}
    for x in rows:
        if x["threads"] == rows[0]["threads"]:
            for k, v in sorted(x["skipped"].items()):
                why.setdefault((k, v), []).append(x["model"])
    for (k, v), models in sorted(why.items()):
        lines.append("- %s not run on %s: %s." % (k, ", ".join(models), v))
    lines.append("")
    lines.append("Machine: %s; torch %s; %s." % (meta["machine"], meta["torch"], meta["coil"]))
    with open(path_md, "w") as fo:
        fo.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--coil", default=None)
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--report-only", action="store_true", help="rewrite int8.md from int8.json")
    a = ap.parse_args()
    if a.report_only:
        with open(os.path.join(a.results, "int8.json")) as f:
            j = json.load(f)
        report(j["rows"], os.path.join(a.results, "int8.md"), os.path.join(a.results, "int8.json"), j["meta"])
        return
    threads = [int(t) for t in a.threads.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="coil-int8-") as cache:
        for name in a.models.split(","):
            try:
                rows += bench_model(name, threads, a.rounds, cache, a.coil)
            except Exception as e:  # noqa: BLE001
                print("%s: failed: %s: %s" % (name, type(e).__name__, str(e).splitlines()[0][:200]), flush=True)
    meta = {"when": time.strftime("%Y-%m-%d"), "rounds": a.rounds, "machine": platform.processor() or platform.machine(),
            "torch": torch.__version__, "coil": coil.coil_cli(a.coil)}
    os.makedirs(a.results, exist_ok=True)
    report(rows, os.path.join(a.results, "int8.md"), os.path.join(a.results, "int8.json"), meta)


if __name__ == "__main__":
    main()
