#!/usr/bin/python3
"""Layout conversions left in coil's runs: for each model, one run of its compiled artifact with
oneDNN's verbose mode on (dnnl_set_verbose on coil's libdnnl, so the tracing's own PyTorch oneDNN
calls are not counted), the oneDNN primitives it executed, and how many of them are reorders and
their time. A reorder at run time is an activation changing layout between kernels (NCHW, NHWC,
a blocked layout one kernel wants): what lower_dnnl.c's layout planning exists to avoid.

    /usr/bin/python3 bench/models/reorders.py [--batch 1] [--threads 1] [--out FILE.md] MODEL...

MODEL: names from bench/models/zoo.py, or a group (classification, segmentation, ...). Prints one
line per model; --out also writes them as a Markdown table, most reorder time first. Diagnostic
only (verbose timing adds its own overhead): the per-primitive times are oneDNN's, one run's.
"""
import argparse
import collections
import ctypes
import datetime
import os
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, HERE)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import coil  # noqa: E402
import zoo  # noqa: E402


def verbose_run(f, ins, dnnl, log):
    """One call of f with coil's oneDNN verbose on, its stdout (oneDNN prints there) into log."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    saved = os.dup(1)
    os.dup2(fd, 1)
    try:
        dnnl.dnnl_set_verbose(1)
        f(*ins)
        dnnl.dnnl_set_verbose(0)
        libc.fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(fd)
        os.close(saved)
    count, ms = collections.Counter(), collections.Counter()
    with open(log) as fh:
        for line in fh:
            p = line.strip().split(",")
            if len(p) > 5 and p[0] == "onednn_verbose" and p[1] == "exec":
                count[p[3]] += 1
                ms[p[3]] += float(p[-1])
    return count, ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    a = ap.parse_args()
    names = []
    for m in a.models:
        names += {"classification": zoo.classification_models, "segmentation": zoo.segmentation_models}.get(
            m, lambda m=m: [m])()
    dnnl = ctypes.CDLL("libdnnl.so.2")
    torch.set_num_threads(a.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                m, ins = zoo.make(name, a.batch)
                f = coil.compile_artifact(m, ins, threads=a.threads, cache_dir=os.path.join(tmp, "cache"))
                with torch.no_grad():
                    f(*ins)
                    f(*ins)
                    count, ms = verbose_run(f, ins, dnnl, os.path.join(tmp, "verbose.txt"))
            except Exception as e:  # noqa: BLE001
                print("%-22s error: %s" % (name, str(e).splitlines()[0][:120]), flush=True)
                continue
            total = sum(ms.values())
            others = " ".join("%s %d" % (k, v) for k, v in sorted(count.items()) if k != "reorder")
            rows.append((ms["reorder"], name, total, count["reorder"], others))
            print("%-22s %8.2f ms in oneDNN, %3d reorders %7.3f ms (%4.1f%%); %s" % (
                name, total, count["reorder"], ms["reorder"], 100 * ms["reorder"] / max(total, 1e-9), others),
                flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write("# Reorders left in coil's runs (bench/models/reorders.py)\n\n")
            fh.write("%s UTC, %d CPUs, batch %d, %d thread(s), one run each with oneDNN's verbose mode on.\n\n" % (
                datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), os.cpu_count(), a.batch, a.threads))
            fh.write("| model | oneDNN ms | reorders | reorder ms | of oneDNN | other primitives |\n")
            fh.write("|---|---:|---:|---:|---:|---|\n")
            for r_ms, name, total, n, others in sorted(rows, reverse=True):
                fh.write("| %s | %.2f | %d | %.3f | %.1f%% | %s |\n" % (name, total, n, r_ms, 100 * r_ms / max(total, 1e-9),
                                                                       others))


if __name__ == "__main__":
    main()
