"""max-autotune against the default lowering and ONNX Runtime (#23): per model and thread
count, coil's default artifact, its max-autotune artifact (timed at that thread count) and ONNX
Runtime timed side by side in interleaved rounds; what tuning costs in compile time and what
it changed.

Run: /usr/bin/python3 bench/autotune/run.py [--models a,b] [--threads 1,2] [--rounds 5]
Writes bench/results/autotune.md and .json. ONNX Runtime as in bench/dynamic (its runner, all
graph optimizations, sequential, intra-op threads = T); --no-ort leaves it out."""
import argparse
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import torchvision  # noqa: E402

import coil  # noqa: E402

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0",
          "densenet121", "shufflenet_v2_x1_0", "regnet_y_400mf", "mnasnet1_0"]


def dyn_module():
    spec = importlib.util.spec_from_file_location("coil_bench_dynamic", os.path.join(ROOT, "bench", "dynamic", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel_err(want, got):
    return ((want - got).abs().max() / want.abs().max().clamp_min(1e-12)).item()


def timed(fn, calls):
    ts = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def sgemm_gflops(work, threads):
    """oneDNN's f32 GEMM rate at this thread count (bench/sgemm_rate.c, as bench/conv_models.py)."""
    exe = os.path.join(work, "sgemm_rate")
    if not os.path.exists(exe):
        subprocess.run(["gcc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + ROOT, "-o", exe,
                        os.path.join(ROOT, "bench", "sgemm_rate.c"), os.path.join(ROOT, "codegen/rt/dnnl_rt.c"),
                        "-ldnnl", "-lm"], check=True)
    r = subprocess.run([exe, str(threads)], capture_output=True, text=True, check=True)
    return float(r.stdout.split()[1])


def copy_gbs(threads):
    """Copy bandwidth (bytes read + written per second) of 64 MiB at this thread count, best of 5."""
    torch.set_num_threads(threads)
    a, b = torch.randn(16 << 20), torch.empty(16 << 20)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(5):
            b.copy_(a)
        best = max(best, 5 * 2 * a.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    return best


def limit_of(profile, gflops, gbs):
    """A run's limit from its profile, kernel by kernel (a roofline): the larger of its flops at
    oneDNN's GEMM rate and its bytes at copy bandwidth (the run's own part left out); with the
    measured time of the kernels that have flops (oneDNN's) and of the rest."""
    lim = flop_ms = other_ms = 0.0
    for e in profile[:-1]:
        lim += max(e["flops"] / (gflops * 1e9), e["bytes"] / (gbs * 1e9)) * 1e3
        if e["flops"] > 0:
            flop_ms += e["ms"]
        else:
            other_ms += e["ms"]
    return lim, flop_ms, other_ms


def bench_model(name, threads, rounds, calls, cache, work, ort_mod, rates, batch=1):
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)().eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        want = m(x)
    onnx = files = None
    if ort_mod:
        onnx = os.path.join(work, name + ".onnx")
        torch.onnx.export(m, (x,), onnx, opset_version=17, do_constant_folding=True)
        files = [os.path.join(work, name + ".in0.bin")]
        x.numpy().tofile(files[0])
    rows = []
    for t in threads:
        torch.set_num_threads(t)
        c0 = time.perf_counter()
        base = coil.compile(m, (x,), threads=t, cache_dir=cache, coil=os.environ.get("COIL"))
        base(x)
        c1 = time.perf_counter()
        tuned = coil.compile(m, (x,), threads=t, cache_dir=cache, coil=os.environ.get("COIL"), mode="max-autotune")
        tuned(x)
        c2 = time.perf_counter()
        info = tuned.info
        row = {"model": name, "batch": batch, "threads": t, "compile_default_s": c1 - c0, "compile_tuned_s": c2 - c1,
               "err_default": rel_err(want, base(x)), "err_tuned": rel_err(want, tuned(x)),
               "autotune": info.get("autotune", "")}
        ort = None
        if ort_mod:
            ort = ort_mod.Ort(onnx, t)
            ort.run([list(x.shape)], ["float32"], reps=1, warmup=2, inputs=files)
            time.sleep(0.3)
        r_def, r_tun, r_ort, gain, vs_ort = [], [], [], [], []
        for r in range(rounds):
            # the order alternates; ONNX Runtime's threads spin after its calls: quiet before the next
            ab = (lambda: timed(lambda: base(x), calls), lambda: timed(lambda: tuned(x), calls))
            if r % 2:
                b, a = ab[1](), ab[0]()
            else:
                a, b = ab[0](), ab[1]()
            r_def.append(a)
            r_tun.append(b)
            gain.append(a / b)
            if ort:
                o = statistics.median(ort.run([list(x.shape)], ["float32"], reps=calls, inputs=files)["times_ms"])
                r_ort.append(o)
                vs_ort.append(o / b)
                time.sleep(0.3)
        if ort:
            ort.close()
        prof = tuned.profile(x, runs=calls)
        lim, flop_ms, other_ms = limit_of(prof, *rates[t])
        row.update(limit_ms=lim, profile_ms=sum(e["ms"] for e in prof), flop_kernels_ms=flop_ms,
                   other_kernels_ms=other_ms)
        row.update(default_ms=statistics.median(r_def), tuned_ms=statistics.median(r_tun),
                   gain=statistics.median(gain), ort_ms=statistics.median(r_ort) if r_ort else None,
                   tuned_vs_ort=statistics.median(vs_ort) if vs_ort else None,
                   default_vs_ort=statistics.median([o / a for o, a in zip(r_ort, r_def)]) if r_ort else None)
        print("%-20s b%d %dT default %.2f ms, tuned %.2f ms (%.3fx), ORT %s; compile %.1f s -> %.1f s; %s" % (
            name, batch, t, row["default_ms"], row["tuned_ms"], row["gain"],
            "%.2f ms" % row["ort_ms"] if row["ort_ms"] else "-", row["compile_default_s"], row["compile_tuned_s"],
            row["autotune"]), flush=True)
        rows.append(row)
        base.close()
        tuned.close()
    return rows


def geomean(xs):
    xs = [x for x in xs if x]
    return (2.718281828459045 ** (sum(__import__("math").log(x) for x in xs) / len(xs))) if xs else None


def report(rows, args, out):
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    L = ["# max-autotune against the default lowering and ONNX Runtime", "",
         "Generated by `bench/autotune/run.py` on %s at coil %s; %d CPUs (%s), batch %d, 224 px, FP32, "
         "random weights (seeded). Per model and thread count the default artifact, the max-autotune one "
         "(timed at that thread count) and ONNX Runtime 1.30 (all graph optimizations, sequential, intra-op "
         "threads = T) run in %d interleaved rounds of %d calls; each ratio is the median of its rounds' "
         "ratios. Compile: cold for the default (a fresh cache, the oneDNN runtime object made once before), "
         "then the max-autotune compile (its builds and the timing)." % (
             time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), commit, os.cpu_count(), platform.processor() or
             "x86-64", args.batch, args.rounds, args.calls), "",
         "| model | threads | default ms | tuned ms | tuned / default | ORT ms | default vs ORT | tuned vs ORT | "
         "compile s default / tuned | what max-autotune changed | max rel err |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        L.append("| %s | %d | %.2f | %.2f | %.3fx | %s | %s | %s | %.1f / %.1f | %s | %.1e |" % (
            r["model"], r["threads"], r["default_ms"], r["tuned_ms"], r["gain"],
            "%.2f" % r["ort_ms"] if r["ort_ms"] else "-",
            "%.2fx" % r["default_vs_ort"] if r["default_vs_ort"] else "-",
            "%.2fx" % r["tuned_vs_ort"] if r["tuned_vs_ort"] else "-",
            r["compile_default_s"], r["compile_tuned_s"], r["autotune"] or "-",
            max(r["err_default"], r["err_tuned"])))
    L += ["", "## Against the limit", "",
          "The tuned artifact's profile (coil's profile switch, `coil_model_profile`), kernel by kernel: a "
          "kernel's limit is the larger of its flops at oneDNN's isolated f32 GEMM rate (bench/sgemm_rate.c: %s) "
          "and its bytes (the buffers it touches, a oneDNN kernel's weights) at copy bandwidth (64 MiB, torch "
          "copy_: %s); the run's own part (binding, arena) left out. Profiled ms is the profile's sum (its clock "
          "reads included)." % (
              ", ".join("%dT %.0f GFLOP/s" % (t, v[0]) for t, v in sorted(args.rates.items())),
              ", ".join("%dT %.1f GB/s" % (t, v[1]) for t, v in sorted(args.rates.items()))), "",
          "| model | threads | profiled ms | oneDNN kernels ms | other kernels ms | limit ms | profiled / limit |",
          "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2fx |" % (
            r["model"], r["threads"], r["profile_ms"], r["flop_kernels_ms"], r["other_kernels_ms"], r["limit_ms"],
            r["profile_ms"] / r["limit_ms"] if r["limit_ms"] else 0))
    L.append("")
    for t in sorted({r["threads"] for r in rows}):
        rs = [r for r in rows if r["threads"] == t]
        L.append("- %dT geomean: tuned / default %.3fx; vs ORT default %s, tuned %s; compile %.1f s -> %.1f s "
                 "(mean)" % (t, geomean([r["gain"] for r in rs]),
                             "%.2fx" % geomean([r["default_vs_ort"] for r in rs]) if rs[0]["ort_ms"] else "-",
                             "%.2fx" % geomean([r["tuned_vs_ort"] for r in rs]) if rs[0]["ort_ms"] else "-",
                             statistics.mean(r["compile_default_s"] for r in rs),
                             statistics.mean(r["compile_tuned_s"] for r in rs)))
    with open(out + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    with open(out + ".json", "w") as f:
        json.dump({"rows": rows, "commit": commit}, f, indent=1)
    print("wrote %s.md" % out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--no-ort", dest="ort", action="store_false")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "autotune"))
    args = ap.parse_args()
    ort_mod = None
    if args.ort:
        ort_mod = dyn_module()
        why = ort_mod.ort_available()
        if why:
            print("ONNX Runtime left out: %s" % why)
            ort_mod = None
    work = tempfile.mkdtemp(prefix="coil-autotune-")
    cache = os.path.join(work, "cache")
    rows = []
    threads = [int(t) for t in args.threads.split(",")]
    try:
        rates = {t: (sgemm_gflops(work, t), copy_gbs(t)) for t in threads}
        args.rates = rates
        for name in args.models.split(","):
            rows += bench_model(name, threads, args.rounds, args.calls, cache, work, ort_mod, rates, args.batch)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(rows, args, args.out)


if __name__ == "__main__":
    main()
