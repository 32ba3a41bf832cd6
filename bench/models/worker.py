#!/usr/bin/python3
"""One step of the model suite for one (model, batch), in its own process (run.py drives it).

    worker.py prepare NAME BATCH DIR --out F [--cache C] [--coil P] [--server URL]
        coil.compile the model (export at ATen level + compile through the cache), call the
        result once and compare it with eager, write DIR/weights.safetensors (params in graph
        order) and DIR/io.safetensors (the inputs and eager's outputs), and report
        export/compile times and the error, or the reason it failed.
    worker.py latency NAME BATCH DIR --out F --threads 1,2 [--budget S] [--min-runs N] [--max-runs N] [--no-ort]
        eager (torch.no_grad), TorchScript (torch.jit.trace + freeze + optimize_for_inference),
        coil (the artifact through coil.load, with what prepare wrote) and ONNX Runtime
        (onnxruntime-node 1.30 over torch.onnx's export, all graph optimizations, sequential,
        intra-op threads = T; its output 0 checked against eager's) in one process; per
        thread count their calls alternate round by round (so background load hits all three
        alike) after warm-up, until min-runs rounds and budget x engines seconds are reached
        (or max-runs); medians in ms. coil's outputs are compared with eager's at each thread
        count: pass = max |coil - eager| / max |eager| <= 1e-3 for every output.
    worker.py memory ENGINE NAME BATCH DIR --out F [--threads T,..]
        peak memory of one engine (eager, torchscript, coil, coil-lean: coil.load(...,
        low_memory=True), no Winograd) alone in this process, at the
        first thread count: VmHWM minus the RSS of the idle process (torch imported, inputs
        allocated), with the high-water mark reset (/proc/self/clear_refs) once the engine is
        built and its build temporaries are freed, so it counts the params the engine holds
        plus the peak of its running state over --min-runs calls; freed heap memory goes back
        to the OS (malloc_trim) before the baseline and before the reset, for every engine.
"""
import argparse
import gc
import json
import os
import re
import statistics
import sys
import time
import traceback

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import coil  # noqa: E402
from coil import _safetensors as st  # noqa: E402
import zoo  # noqa: E402

TOL = 1e-3  # max |coil - eager| / max |eager|, every output, every thread count


def _status_kb(key):
    with open("/proc/self/status") as f:
        m = re.search(r"^%s:\s+(\d+) kB" % key, f.read(), re.M)
    return int(m.group(1)) if m else 0


def rss_mb():
    return _status_kb("VmRSS") / 1024.0


def hwm_mb():
    return _status_kb("VmHWM") / 1024.0


def trim():
    """Freed heap memory back to the OS (glibc's malloc_trim), so that RSS counts what is live:
    without it the idle baseline of eager's process kept the freed first build of the model
    (its small tensors stay in the heap), and the second build reused it unseen (densenet121:
    7 of its 30 MB of params counted as held)."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rel_err(want, got):
    if tuple(want.shape) != tuple(got.shape):
        return float("inf")
    if want.numel() == 0:
        return 0.0
    want, got = want.double(), got.double()
    if not torch.isfinite(got).all():
        return float("inf")
    return float((want - got).abs().max()) / max(float(want.abs().max()), 1e-12)


def flat(x):
    """The output's tensors (None leaves, wav2vec2's absent lengths, left out)."""
    return [t for t in torch.utils._pytree.tree_flatten(x)[0] if t is not None]


# ---------------------------------------------------------------- prepare

def prepare(a):
    res = {"model": a.name, "batch": a.batch, "ok": False}
    for fn in ("weights.safetensors", "io.safetensors", "graph.json"):
        if os.path.exists(os.path.join(a.dir, fn)):
            os.unlink(os.path.join(a.dir, fn))
    t0 = time.perf_counter()
    m, ins = zoo.make(a.name, a.batch)
    res["build_s"] = time.perf_counter() - t0
    res["params"] = sum(p.numel() for p in m.parameters())
    with torch.no_grad():
        want = flat(m(*ins))
    try:
        f = coil.compile(m, ins, server=a.server, threads=None, cache_dir=a.cache, coil=a.coil,
                         workdir=a.dir, save_weights=True, keep_params=False,
                         timeout=a.compile_timeout)
    except coil.CoilError as e:
        res["stage"] = e.stage or "compile"
        res["error"] = str(e)
        if isinstance(e, coil.UnsupportedError):
            res["unsupported_ops"] = e.ops
        return res
    res.update(ok=True, artifact=f.artifact_path, target=f.target, key=f.info.get("key"),
               cache_hit=f.info.get("hit"), export_s=f.info["export_s"], compile_s=f.info["compile_s"],
               coil_compile_ms=f.info.get("compile_ms"), nodes=len(f.graph["nodes"]),
               kernels=f.artifact.describe.get("kernels"),
               coil_model_mb=f.memory_bytes(ins) / 2**20)
    # the one-line API's own check: its callable against eager (OpenMP's default threads)
    t0 = time.perf_counter()
    try:
        got = f(*ins)
        res["check_s"] = time.perf_counter() - t0
        res["rel_err"] = max_err(want, got)
        res["pass"] = res["rel_err"] <= TOL
    except coil.CoilError as e:
        res.update(ok=False, stage=e.stage or "run", error=str(e))
    res["tol"] = TOL
    f.close()
    io = {"input%d" % i: x for i, x in enumerate(ins)}
    io.update({"output%d" % i: o for i, o in enumerate(want)})
    st.save(io, os.path.join(a.dir, "io.safetensors"))
    return res


# ---------------------------------------------------------------- engines

def load_io(d):
    io = st.load(os.path.join(d, "io.safetensors"))
    ins = [io[k].clone() for k in sorted(io, key=_num) if k.startswith("input")]
    want = [io[k].clone() for k in sorted(io, key=_num) if k.startswith("output")]
    return ins, want


def _num(k):
    return int(re.sub(r"\D", "", k) or 0)


def build_torchscript(m, ins):
    with torch.no_grad():
        tr = torch.jit.trace(m, tuple(ins), strict=False, check_trace=False)
        fz = torch.jit.freeze(tr.eval())
        return torch.jit.optimize_for_inference(fz)


def build_coil(d, threads, low_memory=False):
    with open(os.path.join(d, "prepare.json")) as fh:
        prep = json.load(fh)
    prep = prep.get("result", prep)
    w = st.load(os.path.join(d, "weights.safetensors"))
    f = coil.load(prep["artifact"], list(w.values()), threads=threads, keep_params=False, low_memory=low_memory)
    del w
    return f


def max_err(want, got):
    got = flat(got)
    if len(got) != len(want):
        return float("inf")
    return max([rel_err(x, y) for x, y in zip(want, got)] or [0.0])


# ---------------------------------------------------------------- latency

def _ort_module():
    """bench/dynamic/run.py (its Ort runner and ort_available), loaded by path."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("coil_bench_dynamic", os.path.join(ROOT, "bench", "dynamic", "run.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ORT_DTYPES = {torch.float32: "float32", torch.int64: "int64", torch.int32: "int32"}


def build_ort(m, ins, d):
    """ONNX Runtime's side: the model exported with torch.onnx (grad enabled: no fused fast paths),
    inputs as raw files. (dyn module, onnx path, input files, shapes, dtypes) or raises."""
    dyn = _ort_module()
    why = dyn.ort_available()
    if why:
        raise RuntimeError(why)
    if any(t.dtype not in ORT_DTYPES for t in ins):
        raise RuntimeError("input dtypes %s" % [str(t.dtype) for t in ins])
    path = os.path.join(d, "model.onnx")
    torch.onnx.export(m, tuple(ins), path, opset_version=17, do_constant_folding=True)
    files = []
    for i, t in enumerate(ins):
        fn = os.path.join(d, "ort_in%d.bin" % i)
        t.contiguous().numpy().tofile(fn)
        files.append(fn)
    return dyn, path, files, [list(t.shape) for t in ins], [ORT_DTYPES[t.dtype] for t in ins]


def latency(a):
    """Eager, TorchScript, coil and ONNX Runtime in one process (ORT in its runner, timed by
    itself around session.run), their calls interleaved round by round so that background load
    hits all alike; median per engine and thread count.  Every engine's call comes after 50 ms
    of quiet: ORT's spinning threads go idle before the next call, and no engine starts on a
    core the one before it kept busy (a quiet after ORT's calls alone made coil, next in the
    round, the only engine timed out of an idle core: regnet_x_1_6gf at batch 1, one thread,
    45.3 ms back to back against 49.5 after 50 ms of sleep)."""
    threads = [int(t) for t in a.threads.split(",")]
    res = {"model": a.name, "batch": a.batch, "threads": {}, "errors": {}}
    torch.set_num_threads(max(threads))
    m, ins0 = zoo.make(a.name, a.batch)
    have_coil = os.path.exists(os.path.join(a.dir, "io.safetensors"))  # prepare succeeded
    if have_coil:
        ins, want = load_io(a.dir)
    else:
        ins = list(ins0)
        with torch.no_grad():
            want = flat(m(*ins))
    engines = {"eager": lambda: m(*ins)}
    try:
        t0 = time.perf_counter()
        ts = build_torchscript(m, ins)
        res["torchscript_build_s"] = time.perf_counter() - t0
        with torch.no_grad():
            res["torchscript_rel_err"] = max_err(want, ts(*ins))
        engines["torchscript"] = lambda: ts(*ins)
    except Exception as e:  # noqa: BLE001
        res["errors"]["torchscript"] = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:300] if str(e).strip() else "")
    ort_env = None
    if a.ort:
        try:
            ort_env = build_ort(m, ins, a.dir)
        except Exception as e:  # noqa: BLE001
            res["errors"]["ort"] = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:300] if str(e).strip() else "")
    coil_err, ort_err = {}, {}
    for t in threads:
        torch.set_num_threads(t)
        fns = dict(engines)
        f = ort = None
        if ort_env and "ort" not in res["errors"]:
            dyn, path, files, shapes, dts = ort_env
            try:
                ort = dyn.Ort(path, t)
                outf = os.path.join(a.dir, "ort_out.bin")
                ort.run(shapes, dts, reps=1, warmup=1, inputs=files, out=outf)
                import numpy
                got = torch.from_numpy(numpy.fromfile(outf, dtype="float32")).reshape(want[0].shape)
                ort_err[t] = max_err(want[:1], [got])
                fns["ort"] = (lambda o: lambda: o.run(shapes, dts, reps=1, inputs=files)["times_ms"][0])(ort)
            except Exception as e:  # noqa: BLE001
                res["errors"]["ort"] = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0][:300])
        if have_coil and "coil" not in res["errors"]:
            try:
                f = build_coil(a.dir, t)
                coil_err[t] = max_err(want, f(*ins))
                fns["coil"] = lambda: f(*ins)
            except coil.CoilError as e:
                res["errors"]["coil"] = str(e)
        r = {}
        with torch.no_grad():
            for name, fn in fns.items():  # warm-up
                t0 = time.perf_counter()
                fn()
                r[name] = {"first_ms": (time.perf_counter() - t0) * 1e3}
                if r[name]["first_ms"] < a.budget * 100:
                    fn()
            times = {k: [] for k in fns}
            start = time.perf_counter()
            budget = a.budget * len(fns)
            while (len(times["eager"]) < a.max_runs and
                   (len(times["eager"]) < a.min_runs or time.perf_counter() - start < budget)):
                for name, fn in fns.items():
                    time.sleep(0.05)  # the same quiet before every engine's call
                    t0 = time.perf_counter()
                    own = fn()
                    times[name].append(own if name == "ort" else (time.perf_counter() - t0) * 1e3)
        for name, ts_ms in times.items():
            ts_ms.sort()
            r[name].update(median_ms=statistics.median(ts_ms), min_ms=ts_ms[0],
                           mean_ms=statistics.mean(ts_ms), runs=len(ts_ms),
                           stdev_ms=statistics.stdev(ts_ms) if len(ts_ms) > 1 else 0.0)
        if "coil" in r:
            r["coil"]["rel_err"] = coil_err[t]
        if "ort" in r:
            r["ort"]["rel_err"] = ort_err[t]
        if ort is not None:
            ort.close()
        res["threads"][str(t)] = r
        if f is not None:
            f.close()
            del f
            fns.pop("coil", None)
            gc.collect()
    res["loadavg"] = os.getloadavg()
    if ort_err:
        res["ort_rel_err"] = max(ort_err.values())
    if coil_err:
        res["coil_rel_err"] = max(coil_err.values())
        res["pass"] = len(coil_err) == len(threads) and res["coil_rel_err"] <= TOL
    res["tol"] = TOL
    return res


# ---------------------------------------------------------------- memory

def memory(a):
    """Peak memory of one engine in a process of its own (first thread count)."""
    t = int(a.threads.split(",")[0])
    torch.set_num_threads(t)
    res = {"model": a.name, "batch": a.batch, "engine": a.engine, "threads": t}
    if a.engine.startswith("coil"):
        ins, _ = load_io(a.dir)
    else:
        m, ins = zoo.make(a.name, a.batch)
        del m
    gc.collect()
    trim()
    base = rss_mb()
    if a.engine.startswith("coil"):
        f = build_coil(a.dir, t, low_memory=a.engine == "coil-lean")
        fn = lambda: f(*ins)  # noqa: E731
    else:
        m, _ = zoo.make(a.name, a.batch)
        if a.engine == "torchscript":
            e = build_torchscript(m, ins)
            del m
        else:
            e = m
        fn = lambda: e(*ins)  # noqa: E731
    gc.collect()
    trim()
    reset_hwm()
    res["held_mb"] = rss_mb() - base
    with torch.no_grad():
        for _ in range(a.min_runs):
            fn()
    res["peak_mb"] = hwm_mb() - base
    res["idle_rss_mb"] = base
    res["hwm_reset"] = reset_hwm()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["prepare", "latency", "memory"])
    ap.add_argument("args", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache")
    ap.add_argument("--coil")
    ap.add_argument("--server")
    ap.add_argument("--compile-timeout", type=float, default=None)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--budget", type=float, default=3.0)
    ap.add_argument("--min-runs", type=int, default=3)  # memory: runs measured
    ap.add_argument("--max-runs", type=int, default=100)
    ap.add_argument("--no-ort", dest="ort", action="store_false", help="latency: without ONNX Runtime")
    a = ap.parse_args()
    try:
        if a.step == "prepare":
            a.name, a.batch, a.dir = a.args[0], int(a.args[1]), a.args[2]
            res = prepare(a)
        elif a.step == "latency":
            a.name, a.batch, a.dir = a.args[0], int(a.args[1]), a.args[2]
            res = latency(a)
        else:
            a.engine, a.name, a.batch, a.dir = a.args[0], a.args[1], int(a.args[2]), a.args[3]
            res = memory(a)
    except Exception as e:  # noqa: BLE001
        res = {"error": "%s: %s" % (type(e).__name__, e), "stage": getattr(e, "stage", None) or a.step,
               "traceback": traceback.format_exc()[-4000:]}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(res, f, indent=1, default=str)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
