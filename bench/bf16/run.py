"""bench/bf16: coil's bf16 (the precision option: autocast's rules applied by coil, f32 in and
out) against coil f32, eager autocast bf16, eager .to(bfloat16), eager f32 and ONNX Runtime f32
(all graph optimizations, intra-op threads N, sequential; bench/dynamic's onnxruntime-node
runner, timed inside it), at 1 and 2 threads, on GEMM-heavy zoo models
(bench/models/zoo.py). Writes bench/results/bf16.md/.json.

Each round times every engine once on the same input, in turn, so that each ratio pairs
times taken within the same round (these machines are shared and noisy); medians over the
rounds. Accuracy: each bf16 engine's max abs error against eager f32, relative to max |f32|.

Run: OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/bf16/run.py [--models a,b] [--threads 1,2]
     [--rounds N] [--batch B]; --accuracy: the quick zoo's bf16 errors only.
Eager's f32 matmul runs OpenBLAS at AVX2 on Debian's torch 1.13: against coil f32 is the
honest baseline. Eager autocast fails on models with LayerNorm in this torch (a bf16 input
with f32 weights: "expected scalar type BFloat16"): those rows say so."""
import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "bench", "models"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import coil  # noqa: E402
import zoo  # noqa: E402


DYN = zoo.dynamic_bench()

MODELS = ["bert_base", "vit_b_16", "resnet50"]


def timed(fn, x):
    t = time.perf_counter()
    fn(*x)
    return (time.perf_counter() - t) * 1e3


def rel_err(ref, got):
    return float((got.double() - ref.double()).abs().max()) / max(float(ref.abs().max()), 1e-12)


def bench_model(name, batch, threads, rounds, cache, coil_bin):
    torch.set_num_threads(threads)
    m, ins = zoo.make(name, batch)
    mb, _ = zoo.make(name, batch)
    mb = mb.to(torch.bfloat16)
    insb = tuple(i.to(torch.bfloat16) for i in ins)
    row = {"model": name, "threads": threads, "batch": batch}
    engines = {}
    with torch.no_grad():
        ref = m(*ins)
        t0 = time.perf_counter()
        c32 = coil.compile(m, ins, threads=threads, cache_dir=cache, coil=coil_bin)
        c32(*ins)
        row["compile_s_f32"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        cbf = coil.compile(m, ins, threads=threads, cache_dir=cache, coil=coil_bin, dtype=torch.bfloat16)
        out = cbf(*ins)
        row["compile_s_bf16"] = time.perf_counter() - t0
        row["err_coil_bf16"] = rel_err(ref, out)
        row["err_coil_f32"] = rel_err(ref, c32(*ins))
        engines["coil_f32"] = (c32, ins)
        engines["coil_bf16"] = (cbf, ins)
        engines["eager_f32"] = (m, ins)
        engines["eager_to_bf16"] = (mb, insb)
        row["err_eager_to_bf16"] = rel_err(ref, mb(*insb))

        def autocast(*x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return m(*x)
        try:
            row["err_eager_autocast"] = rel_err(ref, autocast(*ins))
            engines["eager_autocast"] = (autocast, ins)
        except RuntimeError as e:
            row["eager_autocast_error"] = str(e).splitlines()[0][:100]
        ort, why = None, DYN.ort_available()
        if not why:
            onnx = os.path.join(cache, "%s-b%d.onnx" % (name, batch))
            try:
                if not os.path.exists(onnx):
                    with torch.enable_grad():  # 1.13's fused fast paths have no ONNX form
                        torch.onnx.export(m, ins, onnx, opset_version=14, do_constant_folding=True)
                ort = DYN.Ort(onnx, threads)
                shapes, dtypes = [list(i.shape) for i in ins], ["float32"] * len(ins)
                ort.run(shapes, dtypes, reps=2)
                engines["ort_f32"] = (lambda *x: None, ins)  # timed inside the runner
                row["ort"] = ort.hello.get("version", "")
            except Exception as e:  # noqa: BLE001
                why = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:100] if str(e) else "")
        if why:
            row["ort_error"] = why
        for fn, x in engines.values():  # warm up
            fn(*x)
        times = {k: [] for k in engines}
        for _ in range(rounds):
            for k, (fn, x) in engines.items():
                times[k].append(ort.run(shapes, dtypes, reps=1)["times_ms"][0] if k == "ort_f32" else timed(fn, x))
            if ort:  # ORT's pool threads spin after a run: let them stop before the next round's engines
                time.sleep(0.5)
        if ort:
            ort.close()
    for k, ts in times.items():
        row["ms_" + k] = sorted(ts)[len(ts) // 2]
    # ratios paired within each round, then the median
    def ratio(a, b):
        rs = sorted(times[a][i] / times[b][i] for i in range(rounds))
        return rs[len(rs) // 2]
    row["bf16_vs_coil_f32"] = ratio("coil_f32", "coil_bf16")
    row["bf16_vs_eager_f32"] = ratio("eager_f32", "coil_bf16")
    row["bf16_vs_eager_to_bf16"] = ratio("eager_to_bf16", "coil_bf16")
    if "eager_autocast" in times:
        row["bf16_vs_eager_autocast"] = ratio("eager_autocast", "coil_bf16")
    if "ort_f32" in times:
        row["bf16_vs_ort_f32"] = ratio("ort_f32", "coil_bf16")
        row["coil_f32_vs_ort_f32"] = ratio("ort_f32", "coil_f32")
    c32.close()
    cbf.close()
    return row


def accuracy(names, batch, cache, coil_bin, path):
    """The quick zoo in bf16: coil's precision option and a .to(bfloat16) model, each against
    eager f32, beside eager's own bf16 errors. A model passes when coil's error is at most
    1.5x eager .to(bf16)'s (the per-model tolerance: eager's own bf16 error on it)."""
    torch.set_num_threads(1)
    rows = []
    for name in names:
        m, ins = zoo.make(name, batch)
        with torch.no_grad():
            ref = m(*ins)
            r = {"model": name}
            try:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    r["err_eager_autocast"] = rel_err(ref, m(*ins))
            except RuntimeError:
                r["err_eager_autocast"] = None
            f = coil.compile(m, ins, threads=1, cache_dir=cache, coil=coil_bin, dtype=torch.bfloat16)
            r["err_coil_precision"] = rel_err(ref, f(*ins))
            f.close()
            mb = zoo.make(name, batch)[0].to(torch.bfloat16)
            xb = tuple(i.to(torch.bfloat16) for i in ins)
            r["err_eager_bf16"] = rel_err(ref, mb(*xb))
            fb = coil.compile(mb, xb, threads=1, cache_dir=cache, coil=coil_bin)
            r["err_coil_bf16_model"] = rel_err(ref, fb(*xb))
            fb.close()
        r["pass"] = max(r["err_coil_precision"], r["err_coil_bf16_model"]) <= 1.5 * r["err_eager_bf16"]
        print(json.dumps(r), flush=True)
        rows.append(r)
    lines = ["# bench/bf16 accuracy: the quick zoo in bf16", "",
             "%s UTC, batch %d. Error: max |y - y_f32| / max |y_f32| against eager f32. Tolerance per model: "
             "1.5x eager .to(bfloat16)'s own error." % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), batch), "",
             "| model | coil, precision bf16 | coil, .to(bf16) model | eager .to(bf16) | eager autocast | pass |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ac = "%.1e" % r["err_eager_autocast"] if r["err_eager_autocast"] is not None else "fails"
        lines.append("| %s | %.1e | %.1e | %.1e | %s | %s |" % (r["model"], r["err_coil_precision"],
                                                             r["err_coil_bf16_model"], r["err_eager_bf16"], ac,
                                                             "yes" if r["pass"] else "NO"))
    lines += ["", "%d of %d pass." % (sum(r["pass"] for r in rows), len(rows))]
    with open(path, "w") as fo:
        fo.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return all(r["pass"] for r in rows)


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def write(rows, args, path):
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"],
                         capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    lines = ["# bench/bf16: coil bf16 (precision option) against coil f32, eager autocast and eager bf16", "",
             "%s UTC, commit `%s`, %s, %d cores, torch %s, batch %d, %d rounds (medians; ratios paired "
             "within a round)." % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()), head, cpu, os.cpu_count(),
                                   torch.__version__, args.batch, args.rounds), "",
             "Targets (issue #18): coil bf16 >= 1.7x coil f32 on GEMM-heavy models and >= 2x eager autocast, "
             "geomean. Error: max |y - y_f32| / max |y_f32| against eager f32.", "",
             "| model | threads | coil f32 ms | coil bf16 ms | bf16 / coil f32 | eager f32 ms | bf16 / eager f32 "
             "| eager autocast ms | bf16 / autocast | eager .to(bf16) ms | bf16 / eager bf16 | ORT f32 ms "
             "| bf16 / ORT f32 | coil f32 / ORT f32 | err coil bf16 | err eager bf16 | err autocast "
             "| compile s f32 / bf16 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
             "| --- |"]
    for r in rows:
        ac = ("%.2f" % r["ms_eager_autocast"]) if "ms_eager_autocast" in r else "fails"
        acr = ("%.2fx" % r["bf16_vs_eager_autocast"]) if "bf16_vs_eager_autocast" in r else "-"
        ort = "ms_ort_f32" in r
        lines.append("| %s | %d | %.2f | %.2f | %.2fx | %.2f | %.2fx | %s | %s | %.2f | %.2fx | %s | %s | %s | %.1e "
                     "| %.1e | %s | %.0f / %.0f |" % (
                         r["model"], r["threads"], r["ms_coil_f32"], r["ms_coil_bf16"], r["bf16_vs_coil_f32"],
                         r["ms_eager_f32"], r["bf16_vs_eager_f32"], ac, acr, r["ms_eager_to_bf16"],
                         r["bf16_vs_eager_to_bf16"], ("%.2f" % r["ms_ort_f32"]) if ort else "-",
                         ("%.2fx" % r["bf16_vs_ort_f32"]) if ort else "-",
                         ("%.2fx" % r["coil_f32_vs_ort_f32"]) if ort else "-", r["err_coil_bf16"],
                         r["err_eager_to_bf16"],
                         ("%.1e" % r["err_eager_autocast"]) if "err_eager_autocast" in r else "-",
                         r["compile_s_f32"], r["compile_s_bf16"]))
    lines += ["", "Geomeans:", ""]
    for t in sorted({r["threads"] for r in rows}):
        rs = [r for r in rows if r["threads"] == t]
        lines.append("- %dT: bf16 / coil f32 %.2fx, bf16 / ORT f32 %.2fx, bf16 / eager f32 %.2fx, "
                     "bf16 / eager .to(bf16) %.2fx, bf16 / eager autocast %s" % (
                         t, geomean([r["bf16_vs_coil_f32"] for r in rs]),
                         geomean([r.get("bf16_vs_ort_f32") for r in rs]),
                         geomean([r["bf16_vs_eager_f32"] for r in rs]),
                         geomean([r["bf16_vs_eager_to_bf16"] for r in rs]),
                         ("%.2fx over %d models" % (geomean([r["bf16_vs_eager_autocast"] for r in rs
                                                             if "bf16_vs_eager_autocast" in r]),
                                                    sum("bf16_vs_eager_autocast" in r for r in rs)))
                         if any("bf16_vs_eager_autocast" in r for r in rs) else "n/a (fails on all)"))
    fails = sorted({r["model"] for r in rows if "eager_autocast_error" in r})
    if fails:
        lines += ["", "Eager autocast fails on %s: `%s`" % (", ".join(fails),
                                                          [r for r in rows if "eager_autocast_error" in r][0][
                                                              "eager_autocast_error"])]
    if any("ort_error" in r for r in rows):
        lines += ["", "ONNX Runtime: %s" % [r for r in rows if "ort_error" in r][0]["ort_error"]]
    with open(path + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(path + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--coil", default=os.path.join(ROOT, "build", "coil"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "bf16"))
    ap.add_argument("--accuracy", action="store_true",
                    help="the quick zoo's errors in bf16 only (bench/results/bf16-accuracy.md)")
    args = ap.parse_args()
    if args.accuracy:
        with tempfile.TemporaryDirectory() as cache:
            ok = accuracy(zoo.QUICK, args.batch, cache, args.coil, args.out + "-accuracy.md")
        sys.exit(0 if ok else 1)
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for t in [int(x) for x in args.threads.split(",")]:
            for name in args.models.split(","):
                r = bench_model(name, args.batch, t, args.rounds, cache, args.coil)
                print(json.dumps(r), flush=True)
                rows.append(r)
    write(rows, args, args.out)


if __name__ == "__main__":
    main()
