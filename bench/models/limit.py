#!/usr/bin/env python3
"""Each model's time next to its limit, kernel by kernel (coil's profile switch).

A model's limit is what its kernels would take at the speed they reach alone: every oneDNN
kernel (convolutions, matrix products) at its isolated time (the same primitive run 5 times
in a row on the same buffers, inputs in cache; coil_model_profile_repeat), and every other
kernel's bytes at copy bandwidth (a compiled `x * 2` over 16 MiB, timed in the same process
at the same thread count). The model's time is the plain profile's total: the kernels one
after the other as a call runs them, plus the run's own part (sizes, arena).

    /usr/bin/python3 bench/models/limit.py --models resnet50,efficientnet_b0 --threads 1,2 \\
        --out bench/results/limits.md

ratio = time / limit, the median of the rounds' own ratios (each round's plain profile over its
repeated one, run back to back); the issue's target is every model within 1.25x. The table also splits
the time into the oneDNN kernels (in the model / alone) and the rest (in the model / at copy
bandwidth), and names the kernels that lose the most time to their limit."""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

import coil  # noqa: E402
import zoo  # noqa: E402

COPY_FLOATS = 1 << 22  # 16 MiB


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


def copy_rate(cache, threads, runs):
    """Bytes a second of a compiled x * 2 over 16 MiB (one read, one write), median of runs."""
    x = torch.randn(COPY_FLOATS)
    f = coil.compile(Double(), (x,), cache_dir=cache, threads=threads)
    rates = []
    for _ in range(runs):
        p = f.profile(x, runs=5)
        k = max(p[:-1], key=lambda e: e["bytes"])
        rates.append(k["bytes"] / (k["ms"] * 1e-3))
    return statistics.median(rates)


def is_dnnl(e):
    return e["name"].startswith("extern") and e["flops"] > 0


def measure(name, batch, threads, cache, runs, repeat, bw):
    m, ins = zoo.make(name, batch)
    with torch.no_grad():
        f = coil.compile(m, ins, cache_dir=cache, threads=threads)
        f(*ins)
        plains, isos = [], []
        for _ in range(runs):  # plain and repeated profiles alternate
            plains.append(f.profile(*ins, runs=3))
            isos.append(f.profile(*ins, runs=3, repeat=repeat))
    nk = len(plains[0])
    med = lambda ps, k: statistics.median(p[k]["ms"] for p in ps)
    rows = []
    for k in range(nk):
        e = plains[0][k]
        ms, iso = med(plains, k), med(isos, k)
        lim = iso if is_dnnl(e) else (e["bytes"] / bw * 1e3 if k < nk - 1 else 0.0)
        rows.append({"name": e["name"], "ms": ms, "iso_ms": iso, "limit_ms": lim, "bytes": e["bytes"],
                     "flops": e["flops"], "dnnl": is_dnnl(e)})
    tot = sum(r["ms"] for r in rows)
    lim = sum(r["limit_ms"] for r in rows)

    def round_limit(i):  # round i's own limit, from its repeated profile
        return sum(isos[i][k]["ms"] if rows[k]["dnnl"] else rows[k]["limit_ms"] for k in range(nk))
    # the ratio pairs each round's plain profile with its own repeated one (a shared machine
    # shifts speed between rounds: two threads' sync cost doubles for seconds at a time here)
    ratio = statistics.median(sum(e["ms"] for e in plains[i]) / round_limit(i) for i in range(runs))
    dn = [r for r in rows if r["dnnl"]]
    rest = [r for r in rows if not r["dnnl"]]
    return {"model": name, "batch": batch, "threads": threads, "ms": tot, "limit_ms": lim,
            "ratio": ratio, "kernels": nk - 1,
            "dnnl_ms": sum(r["ms"] for r in dn), "dnnl_iso_ms": sum(r["iso_ms"] for r in dn),
            "rest_ms": sum(r["ms"] for r in rest), "rest_limit_ms": sum(r["limit_ms"] for r in rest),
            "rest_iso_ms": sum(r["iso_ms"] for r in rest),
            "worst": sorted(rows, key=lambda r: r["limit_ms"] - r["ms"])[:3]}


def short(name):
    """"extern #134:aten.convolution.default ..." -> "#134 convolution" (its first two nodes)."""
    out = []
    for p in name.split()[1:3]:
        node, _, op = p.partition(":")
        out.append("%s %s" % (node, op.replace("aten.", "").split(".")[0]))
    return ", ".join(out) or name


def report(res, bws, args):
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    L = ["# Each model's time next to its limit", "",
         "Generated by `bench/models/limit.py` on %s UTC: %s, %d CPUs, coil target `%s`, commit %s." % (
             time.strftime("%Y-%m-%d %H:%M", time.gmtime()), cpu, os.cpu_count(), coil.best_target(), commit),
         "",
         "- time: the plain profile's total (coil's profile switch, kernels back to back, median over "
         "%d alternating rounds of 3 calls); limit: each oneDNN kernel at its isolated time (fastest of "
         "%d laps in a row, inputs in cache: `coil_model_profile_repeat`) + every other kernel's bytes "
         "at copy bandwidth (a compiled x * 2 over 16 MiB: %s)" % (
             args.runs, args.repeat, ", ".join("%dT %.1f GB/s" % (t, b / 1e9) for t, b in sorted(bws.items()))),
         "- ratio: the median over the rounds of each round's time / its own limit (paired: this "
         "VM's two-thread speed shifts between rounds), so it can differ from time / limit of the medians",
         "- oneDNN: its kernels' time in the model / alone; rest: the other kernels' time in the model / "
         "at copy bandwidth (/ alone); worst: the kernels that lose most to their limit (ms over it)",
         "- target (issue #23): every model within 1.25x of its limit", "",
         "| model | batch | threads | kernels | time ms | limit ms | ratio | oneDNN ms | rest ms | worst kernels |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in res:
        w = "; ".join("%s +%.2f" % (short(k["name"]), k["ms"] - k["limit_ms"]) for k in r["worst"])
        L.append("| %s | %d | %d | %d | %.2f | %.2f | %.2fx%s | %.2f / %.2f | %.2f / %.2f (/ %.2f) | %s |" % (
            r["model"], r["batch"], r["threads"], r["kernels"], r["ms"], r["limit_ms"], r["ratio"],
            "" if r["ratio"] <= 1.25 else " (miss)", r["dnnl_ms"], r["dnnl_iso_ms"], r["rest_ms"],
            r["rest_limit_ms"], r["rest_iso_ms"], w))
    within = sum(r["ratio"] <= 1.25 for r in res)
    L += ["", "%d of %d rows within 1.25x of their limit." % (within, len(res)), ""]
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet50,mobilenet_v3_large,efficientnet_b0,densenet121")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--repeat", type=int, default=5, help="laps of each kernel for its isolated time")
    ap.add_argument("--out", help="write the markdown here (and the JSON beside it)")
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    torch.set_num_threads(max(threads))
    res, bws = [], {}
    with tempfile.TemporaryDirectory() as d:
        cache = os.path.join(d, "cache")
        for t in threads:
            bws[t] = copy_rate(cache, t, a.runs)
        for name in a.models.split(","):
            for b in (int(x) for x in a.batches.split(",")):
                for t in threads:
                    r = measure(name, b, t, cache, a.runs, a.repeat, bws[t])
                    print("%s b%d %dT: %.2f ms, limit %.2f ms (%.2fx); oneDNN %.2f / %.2f alone, rest %.2f / "
                          "%.2f at copy bw" % (name, b, t, r["ms"], r["limit_ms"], r["ratio"], r["dnnl_ms"],
                                               r["dnnl_iso_ms"], r["rest_ms"], r["rest_limit_ms"]), flush=True)
                    res.append(r)
    md = report(res, bws, a)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(md)
        with open(os.path.splitext(a.out)[0] + ".json", "w") as fh:
            json.dump({"copy_bytes_per_s": bws, "rows": res}, fh, indent=1)
    print(md)


if __name__ == "__main__":
    main()
