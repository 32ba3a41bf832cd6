"""Compile time and latency of exported models: coil versus PyTorch eager, side by side.

    /usr/bin/python3 bench/models.py [--models a,b,c] [--threads 1,2] [--repeat N] [--size PX]

For each model: export (make_fx), cold compile into a fresh cache (wall time of
`coil compile`), then the median latency of `coil run --repeat N` (the artifact's
run call alone) next to eager's median under torch.no_grad() with the same
thread count (OPENBLAS_NUM_THREADS=1, torch.set_num_threads(N)), and the max
error of coil's output against eager's. Prints one markdown table.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

os.environ["OPENBLAS_NUM_THREADS"] = "1"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import torch  # noqa: E402
import coil_export  # noqa: E402
import coil_safetensors as st  # noqa: E402

COIL = os.environ.get("COIL", os.path.join(ROOT, "build", "coil"))
DEFAULT = "torchvision:resnet18,torchvision:mobilenet_v3_small,transformer:2"


def eager_ms(module, inputs, threads, repeat):
    torch.set_num_threads(threads)
    with torch.no_grad():
        for _ in range(3):
            module(*inputs)
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            module(*inputs)
            ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--size", type=int, default=224)
    a = ap.parse_args()
    threads = [int(t) for t in a.threads.split(",")]
    rows = []
    tmp = tempfile.mkdtemp(prefix="coil-bench-")
    try:
        for spec in a.models.split(","):
            d = os.path.join(tmp, spec.replace(":", "_"))
            module, inputs = coil_export.make_model(spec, size=a.size)
            coil_export.export(module, inputs, d)
            env = dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache-" + spec.replace(":", "_")))
            t0 = time.perf_counter()
            r = subprocess.run([COIL, "compile", d + "/graph.json"], capture_output=True, text=True, env=env)
            compile_s = time.perf_counter() - t0
            if r.returncode:
                rows.append((spec, "-", "compile failed: " + r.stderr.strip()[:120], "", "", "", ""))
                continue
            for t in threads:
                out = d + "/coil-%d.safetensors" % t
                r = subprocess.run([COIL, "run", d + "/graph.json", "-w", d + "/weights.safetensors",
                                    "-i", d + "/inputs.safetensors", "-o", out, "--threads", str(t),
                                    "--repeat", str(a.repeat)], capture_output=True, text=True, env=env)
                m = re.search(r"run ([0-9.]+) ms", r.stderr)
                if r.returncode or not m:
                    rows.append((spec, t, "run failed: " + r.stderr.strip()[:120], "", "", "", ""))
                    continue
                coil_ms = float(m.group(1))
                want, got = st.load(d + "/outputs.safetensors"), st.load(out)
                err = max(float((want[k].double() - got[k].double()).abs().max()) /
                          max(float(want[k].abs().max()), 1e-12) for k in want)
                e_ms = eager_ms(module, inputs, t, a.repeat)
                rows.append((spec, t, "%.2f" % compile_s, "%.3f" % coil_ms, "%.3f" % e_ms,
                             "%.2fx" % (e_ms / coil_ms), "%.1e" % err))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| model | threads | cold compile (s) | coil run (ms) | eager (ms) | speedup | max rel err |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


if __name__ == "__main__":
    main()
