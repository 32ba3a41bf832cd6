"""CNNs and a BERT-base-sized encoder: coil versus PyTorch eager at 1 and 2 threads, in one run.

    /usr/bin/python3 bench/conv_models.py [--threads 1,2] [--repeat N] [--models a,b] [--size PX]

Models: resnet18, resnet50, mobilenet_v2, mobilenet_v3_large (224x224, batch 1) and a
12-layer TransformerEncoder with d_model 768, 12 heads, feed-forward 3072, seq 128. For each:
export, compile (cold, private cache), median latency of `coil run --repeat N --threads T`
(the artifact's run call) next to eager's median under torch.no_grad() with
torch.set_num_threads(T) and OPENBLAS_NUM_THREADS=1, and the max error against eager.
Prints one table per thread count with the geometric mean of the speedups, and
resnet50's roofline: its convolution FLOPs divided by oneDNN's f32 GEMM rate measured
now (bench/sgemm_rate.c, a 1024^3 rt_matmul) at the same thread count.
"""
import argparse
import math
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
MODELS = ["torchvision:resnet18", "torchvision:resnet50", "torchvision:mobilenet_v2",
          "torchvision:mobilenet_v3_large", "bert-base"]


def build_model(spec, size):
    if spec == "bert-base":
        return coil_export.make_model("transformer:12", d_model=768, nhead=12, ff=3072, seq=128)
    return coil_export.make_model(spec, size=size)


def conv_flops(module, inputs):
    """2 * MACs of every Conv2d in one forward pass."""
    total = [0]

    def hook(m, inp, out):
        k = m.kernel_size[0] * m.kernel_size[1]
        total[0] += 2 * out.numel() * (m.in_channels // m.groups) * k

    hs = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        module(*inputs)
    for h in hs:
        h.remove()
    return total[0]


def eager_ms(module, inputs, threads, repeat):
    torch.set_num_threads(threads)
    with torch.no_grad():
        for _ in range(2):
            module(*inputs)
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            module(*inputs)
            ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] * 1e3


def sgemm_gflops(tmp, threads):
    exe = os.path.join(tmp, "sgemm_rate")
    if not os.path.exists(exe):
        subprocess.run(["gcc", "-O2", "-std=c11", "-D_GNU_SOURCE", "-I" + ROOT, "-o", exe,
                        os.path.join(HERE, "sgemm_rate.c"), os.path.join(ROOT, "codegen/rt/dnnl_rt.c"),
                        "-ldnnl", "-lm"], check=True)
    r = subprocess.run([exe, str(threads)], capture_output=True, text=True, check=True)
    return float(r.stdout.split()[1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "conv-models.md"),
                    help="markdown copy of the tables ('' for none)")
    a = ap.parse_args()
    load_before = "%.2f" % os.getloadavg()[0]
    threads = [int(t) for t in a.threads.split(",")]
    rows = {t: [] for t in threads}
    r50 = {}
    tmp = tempfile.mkdtemp(prefix="coil-conv-bench-")
    try:
        for spec in a.models.split(","):
            name = spec.split(":")[-1]
            d = os.path.join(tmp, name)
            module, inputs = build_model(spec, a.size)
            coil_export.export(module, inputs, d)
            env = dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache-" + name))
            t0 = time.perf_counter()
            r = subprocess.run([COIL, "compile", d + "/graph.json"], capture_output=True, text=True, env=env)
            compile_s = time.perf_counter() - t0
            flops = conv_flops(module, inputs) if name == "resnet50" else 0
            for t in threads:
                if r.returncode:
                    rows[t].append((name, "compile failed: " + r.stderr.strip()[:100], "", "", "", "", None))
                    continue
                out = d + "/coil-%d.safetensors" % t
                rr = subprocess.run([COIL, "run", d + "/graph.json", "-w", d + "/weights.safetensors",
                                     "-i", d + "/inputs.safetensors", "-o", out, "--threads", str(t),
                                     "--repeat", str(a.repeat)], capture_output=True, text=True, env=env)
                m = re.search(r"run ([0-9.]+) ms", rr.stderr)
                if rr.returncode or not m:
                    rows[t].append((name, "run failed: " + rr.stderr.strip()[:100], "", "", "", "", None))
                    continue
                coil_ms = float(m.group(1))
                want, got = st.load(d + "/outputs.safetensors"), st.load(out)
                err = max(float((want[k].double() - got[k].double()).abs().max()) /
                          max(float(want[k].abs().max()), 1e-12) for k in want)
                e_ms = eager_ms(module, inputs, t, max(3, a.repeat // 2))
                rows[t].append((name, "%.1f" % compile_s, "%.2f" % coil_ms, "%.2f" % e_ms,
                                "%.2fx" % (e_ms / coil_ms), "%.1e" % err, e_ms / coil_ms))
                if name == "resnet50":
                    r50[t] = (flops, coil_ms, sgemm_gflops(tmp, t))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    lines = ["# bench/conv_models (%s, %d CPUs, load average before %s, coil %s)" % (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), load_before, commit())]
    for t in threads:
        lines += ["", "### %d thread%s" % (t, "s" if t > 1 else ""), "",
                  "| model | cold compile (s) | coil (ms) | eager (ms) | speedup | max rel err |",
                  "|---|---|---|---|---|---|"]
        for row in rows[t]:
            lines.append("| " + " | ".join(str(x) for x in row[:6]) + " |")
        sp = [row[6] for row in rows[t] if row[6]]
        if sp:
            lines.append("| **geomean** | | | | **%.2fx** | |" % math.exp(sum(map(math.log, sp)) / len(sp)))
        if t in r50:
            flops, ms, rate = r50[t]
            roof = flops / (rate * 1e9) * 1e3
            lines += ["", "resnet50 roofline: %.2f GFLOP of convolutions / oneDNN sgemm %.1f GFLOP/s = %.2f ms; "
                      "coil %.2f ms = %.2fx the roofline" % (flops / 1e9, rate, roof, ms, ms / roof)]
    print("\n".join(lines))
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"

if __name__ == "__main__":
    main()
