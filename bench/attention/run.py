#!/usr/bin/python3
"""Attention: coil's fused kernel (codegen/attn.h) against coil unfused (COIL_ATTENTION=0 at
compile: oneDNN products, a fused softmax), PyTorch eager and ONNX Runtime 1.30, on
softmax(q k^T / 8) v with 12 heads of 64, batch 1, per sequence length and thread count.

Each round times every engine once (one call each, inputs fixed); ratios are taken within a
round and the median over rounds is reported (the machine is shared and noisy). Peak memory
is measured apart: one fresh process per engine and size runs the attention once and reports
how far its peak RSS (VmHWM) rose above its RSS before the run (ORT: its runner's VmHWM after
the run over the one after loading the session).

  /usr/bin/python3 bench/attention/run.py [--seqs 128,512,2048,8192] [--threads 1,2]
      [--rounds 5] [--causal] [--decode] [--bf16] [--out bench/results/attention.md]

ONNX Runtime runs through bench/dynamic's onnxruntime-node runner (install it as that README
says); without it the ORT columns say why.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import coil  # noqa: E402

H, D = 12, 64


class Attn(torch.nn.Module):
    def __init__(self, causal=False):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v):
        s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]))
        if self.causal:
            n = s.shape[-1]
            s = s + torch.triu(torch.full((n, n), float("-inf")), 1)
        return torch.softmax(s, dim=-1) @ v


DECODE = "--decode" in sys.argv  # one query row against S keys
BF16 = "--bf16" in sys.argv  # q, k, v and the result in bf16 (ORT: no bf16 attention on CPU)


def inputs(S):
    g = torch.Generator().manual_seed(S)
    t = tuple(torch.randn(1, H, 1 if (DECODE and i == 0) else S, D, generator=g) for i in range(3))
    return tuple(x.bfloat16() for x in t) if BF16 else t


def compiled(S, T, fused, causal, cache):
    old = os.environ.get("COIL_ATTENTION")
    os.environ["COIL_ATTENTION"] = "1" if fused else "0"
    try:
        return coil.compile(Attn(causal), inputs(S), threads=T,
                            cache_dir=os.path.join(cache, "fused" if fused else "unfused"))
    finally:
        if old is None:
            del os.environ["COIL_ATTENTION"]
        else:
            os.environ["COIL_ATTENTION"] = old


def vm():
    with open("/proc/self/status") as f:
        d = {ln.split(":")[0]: int(ln.split()[1]) for ln in f if ln.startswith(("VmHWM", "VmRSS"))}
    return d["VmHWM"], d["VmRSS"]


def mem_worker(engine, S, T, causal, cache):
    """One run in this fresh process: peak RSS rise in MiB (stdout)."""
    torch.set_num_threads(T)
    ins = inputs(S)
    f = Attn(causal) if engine == "eager" else compiled(S, T, engine == "fused", causal, cache)
    with open("/proc/self/clear_refs", "w") as c:  # the peak so far (tracing ran eager) is reset
        c.write("5")
    _, rss0 = vm()
    with torch.no_grad():
        f(*ins)
    hwm, _ = vm()
    print(json.dumps({"mib": (hwm - rss0) / 1024.0}))


def peak_mib(engine, S, T, causal, cache):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--mem", engine, "--seqs", str(S),
                        "--threads", str(T), "--cache", cache] + (["--causal"] if causal else [])
                       + (["--decode"] if DECODE else []) + (["--bf16"] if BF16 else []),
                       capture_output=True, text=True)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])["mib"]
    except (ValueError, IndexError):
        return float("nan")


def flops(S, causal):
    """Multiply-adds x 2 of q k^T and p v that the result needs: every (query, key) pair, or,
    causal, the pairs on and below the diagonal."""
    sq = 1 if DECODE else S
    pairs = S * (S + 1) // 2 if causal and not DECODE else sq * S
    return 4.0 * pairs * D * H


def sgemm_rates(tmp, threads):
    """oneDNN's f32 GEMM rate per thread count (bench/sgemm_rate.c): the roofline of f32
    attention, whose two products run on the same FMA units."""
    mod = _load("conv_models", os.path.join(ROOT, "bench", "conv_models.py"))
    return {T: mod.sgemm_gflops(tmp, T) for T in threads}


def _load(name, path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ort():
    return _load("dynamic_run", os.path.join(ROOT, "bench", "dynamic", "run.py"))


def timed(f, ins):
    time.sleep(0.05)  # the previous engine's spinning threads (ORT's, OpenMP's) go to sleep first
    t0 = time.perf_counter()
    f(*ins)
    return (time.perf_counter() - t0) * 1e3


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def models(names, threads, rounds, out):
    """Whole models, batch 1: coil with the attention rule (HEAD) and without it
    (COIL_ATTENTION=0, what coil compiled before the rule), eager and ONNX Runtime, paired
    per round."""
    sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
    import zoo
    dyn = _ort()
    why = dyn.ort_available()
    tmp = tempfile.mkdtemp(prefix="coil-attn-models-")
    rows = []
    for T in threads:
        torch.set_num_threads(T)
        for name in names:
            m, ins = zoo.make(name, 1)
            fns = {}
            for fused in (True, False):
                os.environ["COIL_ATTENTION"] = "1" if fused else "0"
                fns["fused" if fused else "unfused"] = coil.compile(m, ins, threads=T, cache_dir=os.path.join(
                    tmp, "fused" if fused else "unfused"))
            del os.environ["COIL_ATTENTION"]
            fns["eager"] = m
            ort = None
            if not why:
                onnx = os.path.join(tmp, name + ".onnx")
                if not os.path.exists(onnx):
                    with torch.enable_grad():  # 1.13's fused fast paths have no ONNX form
                        torch.onnx.export(m, ins, onnx, opset_version=14, do_constant_folding=True)
                ort = dyn.Ort(onnx, T)
                shapes = [list(i.shape) for i in ins]
                ort.run(shapes, ["float32"] * len(ins), reps=2)
            times = {k: [] for k in list(fns) + (["ort"] if ort else [])}
            with torch.no_grad():
                ref = m(*ins)
                err = max(float((fns[k](*ins) - ref).abs().max()) / float(ref.abs().max()) for k in ("fused", "unfused"))
                for _ in range(rounds):
                    for k, f in fns.items():
                        times[k].append(timed(f, ins))
                    if ort:
                        time.sleep(0.05)
                        times["ort"].append(ort.run(shapes, ["float32"] * len(ins), reps=1)["times_ms"][0])
            if ort:
                ort.close()
            row = {"model": name, "T": T, "err": err}
            for k, ts in times.items():
                row["ms_" + k] = med(ts)
                row["x_" + k] = med([ts[i] / times["fused"][i] for i in range(rounds)])
            rows.append(row)
            print(json.dumps(row), flush=True)
    lines = ["# Attention rule on whole models", "",
             "Batch 1, f32. fused: coil at HEAD; unfused: the same compiler with COIL_ATTENTION=0 (attention as "
             "bmm, softmax, bmm, as before the rule); eager; ORT: %s. Median ms over %d rounds, every engine once a "
             "round; x: the other engine's time over fused's, median of per-round ratios. err: max |coil - eager| / "
             "max |eager| over both coil builds." % (why or "onnxruntime-node 1.30, all optimizations, sequential",
                                                      rounds), "",
             "| threads | model | fused ms | unfused ms | eager ms | ORT ms | unfused / fused | eager / fused "
             "| ORT / fused | err |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = lambda k: "%.2f" % r[k] if k in r else "-"  # noqa: E731
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %.1e |" % (
            r["T"], r["model"], g("ms_fused"), g("ms_unfused"), g("ms_eager"), g("ms_ort"), g("x_unfused"),
            g("x_eager"), g("x_ort"), r["err"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", default="128,512,2048,8192")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--decode", action="store_true", help="one query row (seq_q = 1) against seq keys")
    ap.add_argument("--bf16", action="store_true", help="bf16 inputs and result (no ORT)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--cache", default=None)
    ap.add_argument("--mem", default=None)
    ap.add_argument("--models", default=None, help="whole models of bench/models/zoo.py instead, e.g. "
                    "bert_mini,vit_tiny,bert_base")
    a = ap.parse_args()
    if a.models:
        models(a.models.split(","), [int(t) for t in a.threads.split(",")], a.rounds, a.out)
        return
    seqs = [int(s) for s in a.seqs.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    if a.mem:
        mem_worker(a.mem, seqs[0], threads[0], a.causal, a.cache)
        return
    dyn = _ort()
    why = "not run in bf16 (no bf16 attention on ORT's CPU provider)" if BF16 else dyn.ort_available()
    tmp = tempfile.mkdtemp(prefix="coil-attn-")
    cache = a.cache or tmp
    peak = {} if BF16 else sgemm_rates(tmp, threads)
    rows = []
    for T in threads:
        torch.set_num_threads(T)
        for S in seqs:
            ins = inputs(S)
            m = Attn(a.causal)
            fused, unfused = compiled(S, T, True, a.causal, cache), compiled(S, T, False, a.causal, cache)
            with torch.no_grad():
                ref = m(*[i.double() for i in ins])
                err = float((fused(*ins).double() - ref).abs().max()) / float(ins[2].double().abs().max())
            engines = {"fused": fused, "unfused": unfused, "eager": m}
            ort = None
            if not why:
                onnx = os.path.join(tmp, "attn-%d-%d.onnx" % (S, a.causal))
                torch.onnx.export(m, ins, onnx, opset_version=14)
                ort = dyn.Ort(onnx, T)
                shapes = [list(i.shape) for i in ins]
                o = ort.run(shapes, ["float32"] * 3, reps=1)
                ort_mib = (o["vmhwm_kb"] - ort.hello["vmrss_kb"]) / 1024.0
            rounds = 1 if S >= 8192 else a.rounds
            times = {k: [] for k in list(engines) + (["ort"] if ort else [])}
            with torch.no_grad():
                for f in engines.values():
                    f(*ins)  # warm
                for _ in range(rounds):
                    for k, f in engines.items():
                        times[k].append(timed(f, ins))
                    if ort:
                        time.sleep(0.05)
                        times["ort"].append(ort.run(shapes, ["float32"] * 3, reps=1)["times_ms"][0])
            if ort:
                ort.close()
            row = {"S": S, "T": T, "err_fused": err, "rounds": rounds}
            for k, ts in times.items():
                row["ms_" + k] = med(ts)
            for k in ("unfused", "eager", "ort"):
                if k in times:
                    row["x_" + k] = med([times[k][i] / times["fused"][i] for i in range(rounds)])
            if T in peak:  # each engine's GFLOP/s as a share of the f32 GEMM rate
                for k in ("fused", "unfused"):
                    row["roof_" + k] = flops(S, a.causal) / (row["ms_" + k] * 1e6) / peak[T]
            for k in ("fused", "unfused", "eager"):
                row["mib_" + k] = peak_mib(k, S, T, a.causal, cache)
            if ort:
                row["mib_ort"] = ort_mib
            rows.append(row)
            print(json.dumps(row), flush=True)
    rates = ", ".join("%d thread%s %.0f" % (T, "s" if T > 1 else "", peak[T]) for T in sorted(peak))
    lines = ["# Attention: fused kernel against unfused, eager and ONNX Runtime", "",
             "softmax(q k^T / 8%s) v, batch 1, %d heads of %d%s; %s. Times: median ms over rounds "
             "(1 round at 8192); x: fused's speedup, the median of per-round ratios. Peak: MiB the "
             "process's peak RSS rose in one run. err: max |fused - f64 reference| / max |v|.%s" %
             (" + causal mask" if a.causal else "", H, D,
              (", bf16" if BF16 else ", f32") + (", one query row (decoding)" if DECODE else ""),
              "ORT: " + (why or "onnxruntime-node 1.30, all optimizations, sequential"),
              (" of GEMM: the GFLOP/s of the two products (%s pairs x 4 x %d x %d) over oneDNN's f32 "
               "GEMM rate at that thread count (bench/sgemm_rate.c: %s GFLOP/s), the f32 roofline: a "
               "speedup x over unfused needs x times unfused's share." %
               ("query-key" + (" (causal: on and below the diagonal)" if a.causal else ""), D, H, rates))
              if peak else ""),
             "", "| threads | seq | fused ms | unfused ms | eager ms | ORT ms | x unfused | x eager | x ORT "
             "| fused of GEMM | unfused of GEMM | peak fused | peak unfused | peak eager | peak ORT | err |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = lambda k, f="%.2f": f % r[k] if k in r else "-"  # noqa: E731
        lines.append("| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.1e |" % (
            r["T"], r["S"], g("ms_fused"), g("ms_unfused"), g("ms_eager"), g("ms_ort"), g("x_unfused"),
            g("x_eager"), g("x_ort"), g("roof_fused", "%.2f"), g("roof_unfused", "%.2f"),
            g("mib_fused", "%.0f"), g("mib_unfused", "%.0f"), g("mib_eager", "%.0f"),
            g("mib_ort", "%.0f"), r["err_fused"]))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
