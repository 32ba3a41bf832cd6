#!/usr/bin/python3
"""bench/dynamic (issue #17): coil's dynamic-shape artifacts on a trace of requests with random
sizes, against static artifacts of the same size, PyTorch eager and ONNX Runtime with the same
dims dynamic, plus peak memory after 10 vs after N distinct shapes. See README.md.

    /usr/bin/python3 bench/dynamic/run.py [--quick] [--models bert,resnet18,mlp] [--threads 1,2]
        [--trace N] [--sizes K] [--rounds R] [--dynamic-res] [--fix SYMBOL=VALUE] [--no-ort]
        [--dynamic-api auto|batch|true|dims] [--out PREFIX] [--work DIR]

Each model runs in a fresh process (a crash or an unsupported model is that model's row:
"unsupported: <reason>" / "failed: <reason>"), its memory step in another fresh process.
Results: PREFIX.md and PREFIX.json (default bench/results/dynamic, --quick: dynamic-quick).
"""
import argparse
import inspect
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

# before torch is imported (by a worker): eager's BLAS must not start threads of its own
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
# $COIL_CLIENT_PY: another checkout's client/python (its coil CLI then from $COIL)
sys.path.insert(0, os.environ.get("COIL_CLIENT_PY") or os.path.join(ROOT, "client", "python"))
import models as zoo  # noqa: E402

PY = "/usr/bin/python3"
ORT_RUNNER = os.path.join(HERE, "ort_runner.js")
ORT_DIR = os.path.join(HERE, ".node")

# ------------------------------------------------------------------ the dynamic compile
# How the dynamic artifact is asked for. coil.compile grows from dynamic_batch=True (dim 0 of
# every input is "batch") to dynamic=... with any dims symbolic (client/python/coil_symbolic.py:
# True, "batch", {input: {dim: symbol}}, with ranges={symbol: (lo, hi)}); this is the one place
# that knows. --dynamic-api overrides: "batch" dynamic_batch=True; "dims" dynamic={input index:
# {dim: symbol}} (+ ranges= when coil.compile takes it); "true" dynamic=True. "auto" is "dims"
# when coil.compile has a `dynamic` keyword, else "batch".
DYNAMIC_API = "auto"


class Unsupported(Exception):
    pass


def dynamic_kwargs(spec, api):
    import coil
    params = inspect.signature(coil.compile).parameters
    if api == "auto":
        api = "dims" if "dynamic" in params else "batch"
    dims = spec.dynamic_dims()  # {input index: {dim index: symbol}}
    if api == "batch":
        other = sorted({s for d in dims.values() for j, s in d.items() if j != 0})
        if other:
            raise Unsupported("coil.compile has only dynamic_batch (dim 0): %s cannot be symbolic "
                              "(--fix %s=V holds it)" % (", ".join(other), other[0]))
        return {"dynamic_batch": True}, api
    if api == "true":
        return {"dynamic": True}, api
    if api == "dims":
        kw = {"dynamic": {i: dict(d) for i, d in dims.items()}}
        if "ranges" in params:
            kw["ranges"] = {s: tuple(spec.symbols[s][:2]) for s in spec.dynamic_symbols()}
        return kw, api
    raise ValueError("unknown --dynamic-api %r" % api)


def compile_count(cm, default):
    """Compiles the CompiledModule says it made (stats() or info), else `default`."""
    st = getattr(cm, "stats", None)
    if callable(st):
        try:
            s = st()
            if isinstance(s, dict) and "compiles" in s:
                return int(s["compiles"])
        except Exception:  # noqa: BLE001
            pass
    info = getattr(cm, "info", None) or {}
    if "compiles" in info:
        return int(info["compiles"])
    return default


def with_threads(cm, threads, recompile):
    """cm bound to `threads` OpenMP threads per call (same artifact and params)."""
    import coil
    if getattr(cm.model, "nthreads", None) == threads:
        return cm
    try:
        m = coil.Model(cm.artifact, cm.model._params, threads=threads)
        return coil.CompiledModule(m, cm._spec, cm.info, cm.graph)
    except AttributeError:  # a CompiledModule of another shape: compile again (cache hit)
        return recompile(threads)


# ------------------------------------------------------------------ small helpers
def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def pct(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(math.floor(k)), int(math.ceil(k))
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def proc_status(pid="self"):
    out = {}
    with open("/proc/%s/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmHWM", "VmRSS"):
                out[k] = int(v.split()[0])
    return out


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def rel_err(a, b):
    a, b = a.float(), b.float()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def flat_outputs(y):
    import torch
    return [t for t in torch.utils._pytree.tree_flatten(y)[0] if isinstance(t, torch.Tensor)]


def dtype_tags(spec):
    return ["int64:" + dt[4:] if dt.startswith("int:") else "float32" for dt, _ in spec.input_dims]


class Ort:
    """One ort_runner.js process in serve mode (one session, fixed intra-op threads)."""

    def __init__(self, onnx_path, threads):
        self.p = subprocess.Popen(["node", ORT_RUNNER, onnx_path, "--threads", str(threads)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)
        self.hello = self._read()

    def _read(self):
        line = self.p.stdout.readline()
        if not line:
            err = self.p.stderr.read()[-2000:] if self.p.poll() is not None else ""
            raise RuntimeError("ort_runner died (exit %s): %s" % (self.p.poll(), err.strip()))
        r = json.loads(line)
        if not r.get("ok"):
            raise RuntimeError("ort_runner: %s" % r.get("error"))
        return r

    def cmd(self, **kw):
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()
        return self._read()

    def run(self, shapes, dtypes, reps=1, warmup=0, seed=0, **kw):
        return self.cmd(cmd="run", shapes=shapes, dtypes=dtypes, reps=reps, warmup=warmup,
                        seed=seed, **kw)

    def close(self):
        try:
            self.p.stdin.write('{"cmd": "quit"}\n')
            self.p.stdin.flush()
            self.p.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.p.kill()
            self.p.wait()


def ort_available():
    if not shutil.which("node"):
        return "node is not installed"
    if not os.path.isdir(os.path.join(ORT_DIR, "node_modules", "onnxruntime-node")):
        return ("onnxruntime-node is not installed: (cd bench/dynamic/.node && npm install "
                "--ignore-scripts onnxruntime-node@1.30.0)")
    return None


def export_onnx(spec, module, path):
    """torch.onnx.export with the spec's symbolic dims as dynamic_axes (grad enabled: the
    exporter must not see TransformerEncoderLayer's no_grad fast path)."""
    import torch
    names = ["input%d" % i for i in range(len(spec.input_dims))]
    axes = {names[i]: {j: s for j, s in d.items()} for i, d in spec.dynamic_dims().items()}
    # output dims that change with the symbols: compare two requests that differ in all of them
    syms = spec.dynamic_symbols()
    ra = {s: min(spec.symbols[s][0] + 1, spec.symbols[s][1]) for s in syms}
    rb = {s: min(spec.symbols[s][0] + 3, spec.symbols[s][1]) for s in syms}
    with torch.no_grad():
        oa = flat_outputs(module(*spec.inputs(ra)))
        ob = flat_outputs(module(*spec.inputs(rb)))
    onames = ["output%d" % i for i in range(len(oa))]
    for k, (a, b) in enumerate(zip(oa, ob)):
        d = {j: "%s_d%d" % (onames[k], j) for j in range(a.dim()) if a.shape[j] != b.shape[j]}
        if d:
            axes[onames[k]] = d
    example = spec.inputs(ra)
    torch.onnx.export(module, example, path, input_names=names, output_names=onames,
                      dynamic_axes=axes, opset_version=14, do_constant_folding=True)
    return axes


# ------------------------------------------------------------------ one model (worker)
def worker(cfg, name, out_path):
    import torch
    import coil
    spec = zoo.make_specs(cfg["dynamic_res"])[name]
    for kv in cfg["fix"]:
        s, v = kv.split("=")
        if s in spec.symbols:
            spec.fixed[s] = int(v)
    work = os.path.join(cfg["work"], name)
    os.makedirs(work, exist_ok=True)
    cache = os.path.join(cfg["work"], "cache")
    rec = {"model": name, "note": spec.note, "status": "ok", "symbols": spec.dynamic_symbols(),
           "fixed": spec.fixed, "threads": {}, "loadavg_start": loadavg()}

    def save():
        rec["loadavg_end"] = loadavg()
        with open(out_path, "w") as f:
            json.dump(rec, f, indent=1)

    module = spec.build(cfg["seed"])
    trace = spec.trace(cfg["trace"], cfg["seed"])
    sizes = spec.sample_sizes(trace, cfg["sizes"], cfg["seed"])
    rec["trace"] = {"n": len(trace), "distinct": len({spec.key(r) for r in trace})}
    rec["sizes"] = sizes
    threads0 = cfg["threads"][0]
    torch.set_num_threads(threads0)

    # 1. the dynamic artifact
    try:
        kw, api = dynamic_kwargs(spec, cfg["dynamic_api"])
        rec["dynamic_api"] = api
        example = spec.inputs(sizes[len(sizes) // 2])
        t0 = time.perf_counter()
        dyn = coil.compile(module, example, threads=threads0, cache_dir=cache, **kw)
        rec["dyn_compile_s"] = time.perf_counter() - t0
    except Unsupported as e:
        rec.update(status="unsupported", reason=str(e))
        return save()
    except coil.UnsupportedError as e:
        rec.update(status="unsupported", reason="%s (%s)" % (e, getattr(e, "stage", "?")))
        return save()
    except Exception as e:  # noqa: BLE001
        if isinstance(e, TypeError) and "dynamic" in str(e):  # an API older than --dynamic-api
            rec.update(status="unsupported", reason="this coil.compile does not take %s: %s" % (kw, e))
            return save()
        rec.update(status="failed", reason="dynamic compile: %s: %s" % (type(e).__name__, e))
        rec["traceback"] = traceback.format_exc()[-3000:]
        return save()
    rec["compiles"] = compile_count(dyn, 1)
    # artifact and params for the memory step (a fresh process loads them, exporting nothing)
    params_path = os.path.join(work, "params.pt")
    try:
        rec["dyn_artifact"] = {"path": dyn.artifact_path, "sha256": dyn.info.get("sha256"),
                               "inputs": [s for _, s in dyn.artifact.inputs],
                               "arena_bytes": dyn.artifact.describe.get("arena_bytes")}
        torch.save([t for t in dyn.model._params], params_path)
        rec["mem_inputs"] = {"params": params_path}
    except Exception as e:  # noqa: BLE001 (the memory step then compiles in its process)
        rec["mem_inputs"] = {"error": "artifact or params not reachable: %s" % e}

    def recompile(t):
        return coil.compile(module, example, threads=t, cache_dir=cache, **kw)

    # 2. check against eager: the trace's smallest and largest sampled size and one between
    check = {}
    try:
        with torch.no_grad():
            for r in (sizes[0], sizes[len(sizes) // 2], sizes[-1]):
                x = spec.inputs(r, seed=7)
                e = flat_outputs(module(*x))
                y = flat_outputs(dyn(*x))
                check[json.dumps(r)] = max(rel_err(a, b) for a, b in zip(y, e))
        rec["check_max_rel_err"] = max(check.values())
        rec["check_ok"] = rec["check_max_rel_err"] <= 1e-3
    except Exception as e:  # noqa: BLE001
        rec.update(status="failed", reason="dynamic run: %s: %s" % (type(e).__name__, e))
        rec["traceback"] = traceback.format_exc()[-3000:]
        return save()

    # 3. static artifacts of the sampled sizes (compiled once each, through the bench's cache)
    statics = {}
    rec["static"] = {}
    for r in sizes:
        k = json.dumps(r)
        try:
            t0 = time.perf_counter()
            statics[k] = coil.compile(module, spec.inputs(r), threads=threads0, cache_dir=cache)
            rec["static"][k] = {"compile_s": time.perf_counter() - t0}
        except Exception as e:  # noqa: BLE001
            rec["static"][k] = {"error": "%s: %s" % (type(e).__name__, e)}

    # 4. ONNX Runtime with the same dims dynamic
    onnx_path = os.path.join(work, "model.onnx")
    ort_reason = "disabled (--no-ort)" if cfg["no_ort"] else ort_available()
    if not ort_reason:
        try:
            rec["onnx_dynamic_axes"] = export_onnx(spec, module, onnx_path)
            ort = Ort(onnx_path, threads0)
            rec["ort_version"] = ort.hello.get("ort")
            r = sizes[len(sizes) // 2]
            x = spec.inputs(r, seed=7)
            files = []
            for i, t in enumerate(x):
                files.append(os.path.join(work, "check_in%d.bin" % i))
                t.contiguous().numpy().tofile(files[-1])
            outf = os.path.join(work, "check_out0.bin")
            ort.run(spec.shapes(r), dtype_tags(spec), inputs=files, out=outf)
            with torch.no_grad():
                e = flat_outputs(module(*x))[0]
            import numpy as np
            o = torch.from_numpy(np.fromfile(outf, dtype=np.float32)).reshape(e.shape)
            rec["ort_check_max_rel_err"] = rel_err(o, e)
            ort.close()
        except Exception as e:  # noqa: BLE001
            ort_reason = "%s: %s" % (type(e).__name__, str(e)[:500])
    if ort_reason:
        rec["ort_reason"] = ort_reason
    save()

    # 5. timing, per thread count
    for t in cfg["threads"]:
        log("%s: threads %d" % (name, t))
        torch.set_num_threads(t)
        engines = {"dyn": with_threads(dyn, t, recompile)}
        st = {k: with_threads(m, t, lambda tt, r=json.loads(k): coil.compile(
            module, spec.inputs(r), threads=tt, cache_dir=cache)) for k, m in statics.items()}
        ort = None
        if not ort_reason:
            try:
                ort = Ort(onnx_path, t)
            except Exception as e:  # noqa: BLE001
                rec["ort_reason"] = "threads %d: %s" % (t, e)
        dt = dtype_tags(spec)

        last = [None]

        def call(engine, r, x, seed):
            """One timed call in ms, after a pause: the previous call's spinning pool threads
            (ORT's after every run, OpenMP's) hold a core for a while, and on a 2-core machine
            a 2-thread call right after them ran at 1-thread speed (coil's mlp at batch 74 and
            2 threads: 8.7 ms after ORT, 4.9 ms without it).  After ORT the pause is at least
            50 ms, as in bench/models (20 ms left dyn/static at 2 threads 1.2-1.3 when dyn
            always came right after ORT)."""
            pause = max(cfg["pause"], 0.05) if last[0] == "ort" and engine != "ort" else cfg["pause"]
            last[0] = engine
            if pause:
                time.sleep(pause)
            if engine == "ort":
                return ort.run(spec.shapes(r), dt, seed=seed)["times_ms"][0]
            if engine == "eager":
                t0 = time.perf_counter()
                module(*x)
                return (time.perf_counter() - t0) * 1e3
            if engine == "static":
                m = st[json.dumps(r)]
            else:
                m = engines["dyn"]
            t0 = time.perf_counter()
            m(*x)
            return (time.perf_counter() - t0) * 1e3

        tr = rec["threads"][str(t)] = {}
        with torch.no_grad():
            # 5a. static vs dynamic vs eager vs ORT at the sampled sizes, interleaved: each
            # round visits the sizes in a shuffled order, and at each size runs every engine
            # `inner` times back to back, engines in a shuffled order; medians over rounds
            rng = random.Random("%s/%d/rounds" % (name, cfg["seed"]))
            per = {json.dumps(r): {} for r in sizes}
            for r in sizes:  # warm-up: first-call costs of a shape are the trace's business
                k = json.dumps(r)
                x = spec.inputs(r)
                for eng in ["dyn", "static", "eager", "ort"]:
                    if (eng == "static" and k not in st) or (eng == "ort" and ort is None):
                        continue
                    call(eng, r, x, 1)
            for rnd in range(cfg["rounds"]):
                order = list(sizes)
                rng.shuffle(order)
                for r in order:
                    k = json.dumps(r)
                    x = spec.inputs(r, seed=rnd)
                    engs = [e for e in ["dyn", "static", "eager", "ort"]
                            if not (e == "static" and k not in st) and not (e == "ort" and ort is None)]
                    rng.shuffle(engs)  # (a rotation kept dyn right after ORT every time)
                    for eng in engs:
                        for _ in range(cfg["inner"]):
                            per[k].setdefault(eng, []).append(call(eng, r, x, rnd))
            tr["sizes"] = {}
            for k, d in per.items():
                row = {e + "_ms": statistics.median(v) for e, v in d.items()}
                if "static_ms" in row:
                    row["dyn_over_static"] = row["dyn_ms"] / row["static_ms"]
                row["eager_over_dyn"] = row["eager_ms"] / row["dyn_ms"]
                if "ort_ms" in row:
                    row["ort_over_dyn"] = row["ort_ms"] / row["dyn_ms"]
                row["n"] = len(d["dyn"])
                tr["sizes"][k] = row
            tr["dyn_over_static_geomean"] = geomean(
                [v.get("dyn_over_static") for v in tr["sizes"].values()])

            # 5b. the trace: every request once per engine, in blocks of --block requests
            # that each engine runs in turn (the order rotating per block): requests of one
            # engine follow each other, as in a server, and another engine's spinning pool
            # threads touch only a block's first request
            engs = ["dyn", "eager"] + (["ort"] if ort is not None else [])
            times = {e: [None] * len(trace) for e in engs}
            wall0 = time.perf_counter()
            blk = max(1, cfg.get("block", 50))
            for b0 in range(0, len(trace), blk):
                idx = range(b0, min(len(trace), b0 + blk))
                xs = {i: spec.inputs(trace[i], seed=1000 + i) for i in idx}
                rot = (b0 // blk) % len(engs)
                for eng in engs[rot:] + engs[:rot]:
                    for i in idx:
                        times[eng][i] = call(eng, trace[i], xs[i], 1000 + i)
            tr["trace_wall_s"] = time.perf_counter() - wall0
            for e, v in times.items():
                tr[e] = {"total_s": sum(v) / 1e3, "p50_ms": pct(v, 50), "p99_ms": pct(v, 99),
                         "mean_ms": sum(v) / len(v)}
            tr["eager_over_dyn_geomean"] = geomean([b / a for a, b in zip(times["dyn"], times["eager"])])
            if "ort" in times:
                tr["ort_over_dyn_geomean"] = geomean([b / a for a, b in zip(times["dyn"], times["ort"])])
            if cfg["keep_times"]:
                tr["times_ms"] = times
        rec["compiles_after_trace"] = compile_count(dyn, rec["compiles"])
        if ort is not None:
            ort.close()
        save()
    return save()


# ------------------------------------------------------------------ memory (fresh process)
def mem_worker(cfg, name, out_path, wrec):
    """coil: load the dynamic artifact and its params (no export in this process), run the
    distinct shapes once each; VmHWM/VmRSS after the first 10 and after all. ORT: the same
    shapes in a fresh ort_runner process with its default arena."""
    spec = zoo.make_specs(cfg["dynamic_res"])[name]
    for kv in cfg["fix"]:
        s, v = kv.split("=")
        if s in spec.symbols:
            spec.fixed[s] = int(v)
    shapes = spec.distinct(cfg["trace"], cfg["seed"])
    if cfg.get("mem_order", "largest-first") == "largest-first":
        big = max(range(len(shapes)), key=lambda i: spec.elements(shapes[i]))
        shapes.insert(0, shapes.pop(big))
    first = min(10, len(shapes))
    threads = max(cfg["threads"])
    rec = {"distinct": len(shapes), "first": first, "threads": threads,
           "order": cfg.get("mem_order", "largest-first"),
           "largest_first_elements": max(spec.elements(r) for r in shapes[:first]),
           "largest_elements": max(spec.elements(r) for r in shapes)}
    rec["before_import"] = proc_status()
    try:
        import torch
        import coil
        torch.set_num_threads(threads)
        art = wrec.get("dyn_artifact")
        if art and "params" in wrec.get("mem_inputs", {}):
            params = torch.load(wrec["mem_inputs"]["params"])
            rec["after_import"] = proc_status()
            cm = coil.CompiledModule(coil.Model(coil.Artifact(art["path"], sha256=art["sha256"]),
                                                params, threads=threads))
        else:  # compile here (a cache hit), then reset the high-water mark the export left
            module = spec.build(cfg["seed"])
            kw, _ = dynamic_kwargs(spec, cfg["dynamic_api"])
            cm = coil.compile(module, spec.inputs(shapes[0]), threads=threads,
                              cache_dir=os.path.join(cfg["work"], "cache"), **kw)
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            rec["hwm_reset_after_compile"] = True
        rec["loaded"] = proc_status()
        with torch.no_grad():
            for i, r in enumerate(shapes):
                cm(*spec.inputs(r, seed=i))
                if i + 1 == first:
                    rec["after_first"] = proc_status()
        rec["after_all"] = proc_status()
        rec["coil_ratio"] = rec["after_all"]["VmHWM"] / rec["after_first"]["VmHWM"]
    except Exception as e:  # noqa: BLE001
        rec["coil_error"] = "%s: %s" % (type(e).__name__, e)
    onnx_path = os.path.join(cfg["work"], name, "model.onnx")
    if not cfg["no_ort"] and not wrec.get("ort_reason") and os.path.exists(onnx_path):
        ort = None
        try:
            ort = Ort(onnx_path, threads)
            rec["ort_loaded"] = {"VmHWM": ort.hello["vmhwm_kb"], "VmRSS": ort.hello["vmrss_kb"]}
            dt = dtype_tags(spec)
            for i, r in enumerate(shapes):
                o = ort.run(spec.shapes(r), dt, seed=i)
                if i + 1 == first:
                    rec["ort_after_first"] = {"VmHWM": o["vmhwm_kb"], "VmRSS": o["vmrss_kb"]}
            rec["ort_after_all"] = {"VmHWM": o["vmhwm_kb"], "VmRSS": o["vmrss_kb"]}
            rec["ort_ratio"] = rec["ort_after_all"]["VmHWM"] / rec["ort_after_first"]["VmHWM"]
        except Exception as e:  # noqa: BLE001
            rec["ort_error"] = "%s: %s" % (type(e).__name__, e)
        finally:
            if ort is not None:
                ort.close()
    with open(out_path, "w") as f:
        json.dump(rec, f, indent=1)


# ------------------------------------------------------------------ report
def git_commit():
    try:
        c = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        d = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        return c + ("-dirty" if d else "")
    except OSError:
        return "?"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def fmt(v, nd=2, suffix=""):
    if v is None:
        return "-"
    if isinstance(v, float):
        return ("%." + str(nd) + "f%s") % (v, suffix)
    return "%s%s" % (v, suffix)


def mark(v, ok):
    return "" if v is None else (" ok" if ok(v) else " MISS")


def mib(kb):
    return None if kb is None else kb / 1024.0


def report(meta, results, prefix):
    L = []
    L.append("# bench/dynamic: dynamic shapes (issue #17)")
    L.append("")
    L.append("%s, commit `%s`, %d cores (%s), torch %s, ONNX Runtime %s. Trace of %d requests "
             "(seed %d), %d sampled sizes x %d rounds x %d calls for the static comparison; "
             "dynamic API: %s.%s" % (
                 meta["date"], meta["commit"], meta["cores"], meta["cpu"], meta["torch"],
                 meta.get("ort") or "-", meta["trace"], meta["seed"], meta["sizes"], meta["rounds"],
                 meta["inner"], meta["dynamic_api"],
                 " **--quick: not the bench's numbers.**" if meta["quick"] else ""))
    L.append("")
    L.append("Load average (1 min) at the start and end: %s, %s; threads: eager "
             "torch.set_num_threads(t), coil's OpenMP threads per call t, ORT intraOpNumThreads t "
             "(inter-op 1, sequential), OPENBLAS_NUM_THREADS=1." % (
                 meta["loadavg_start"][0], (meta.get("loadavg_end") or ["-"])[0]))
    L.append("")
    L.append("Targets: dyn/static <= 1.1 (p50 at each sampled size, geomean), eager/dyn >= 1.5 "
             "(geomean over the trace's requests), memN/mem10 <= 1.1 (peak RSS of a fresh "
             "process after N distinct shapes against after 10). Times in ms; p50/p99 over the "
             "trace's requests (sizes differ: these mix sizes); eager and ORT ran the same "
             "requests interleaved with coil.")
    L.append("")
    L.append("| model | threads | compiles | compile s | p50 dyn | p99 dyn | dyn/static | eager p50 | "
             "eager p99 | eager/dyn | ORT p50 | ORT p99 | ORT/dyn | trace s dyn / eager / ORT | "
             "mem10 MiB | memN MiB (N) | memN/mem10 | ORT mem10 / memN MiB, ratio | check coil, ORT |")
    L.append("|" + " --- |" * 19)
    for name, r in results.items():
        if r.get("status") != "ok":
            L.append("| %s | | %s: %s |" % (name, r.get("status", "failed"),
                                            str(r.get("reason", "?")).replace("|", "/").replace("\n", " ")))
            continue
        mem = r.get("mem") or {}
        m10 = mib((mem.get("after_first") or {}).get("VmHWM"))
        mN = mib((mem.get("after_all") or {}).get("VmHWM"))
        o10 = mib((mem.get("ort_after_first") or {}).get("VmHWM"))
        oN = mib((mem.get("ort_after_all") or {}).get("VmHWM"))
        ortmem = "-" if o10 is None else "%.0f / %.0f, %.3f" % (o10, oN, mem.get("ort_ratio"))
        chk = "ok" if r.get("check_ok") else "err %.1e" % r.get("check_max_rel_err", float("nan"))
        oe = r.get("ort_check_max_rel_err")
        chk += ", -" if oe is None else ", ok" if oe <= 1e-3 else ", err %.1e" % oe
        for t, tr in sorted(r["threads"].items(), key=lambda kv: int(kv[0])):
            dyn, eag, ort = tr.get("dyn", {}), tr.get("eager", {}), tr.get("ort")
            g = tr.get("dyn_over_static_geomean")
            ed = tr.get("eager_over_dyn_geomean")
            od = tr.get("ort_over_dyn_geomean")
            tot = " / ".join(fmt((tr.get(e) or {}).get("total_s"), 2) for e in ("dyn", "eager", "ort"))
            L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                name, t, r.get("compiles_after_trace", r.get("compiles")), fmt(r.get("dyn_compile_s"), 1),
                fmt(dyn.get("p50_ms")), fmt(dyn.get("p99_ms")),
                fmt(g, 3) + mark(g, lambda v: v <= 1.1),
                fmt(eag.get("p50_ms")), fmt(eag.get("p99_ms")), fmt(ed, 2, "x") + mark(ed, lambda v: v >= 1.5),
                fmt(ort.get("p50_ms")) if ort else "-", fmt(ort.get("p99_ms")) if ort else "-",
                fmt(od, 2, "x") if od else "-", tot,
                fmt(m10, 0), "%s (%s)" % (fmt(mN, 0), mem.get("distinct", "-")),
                fmt(mem.get("coil_ratio"), 3) + mark(mem.get("coil_ratio"), lambda v: v <= 1.1),
                ortmem, chk))
    L.append("")
    notes = []
    for name, r in results.items():
        if r.get("status") != "ok":
            continue
        if r.get("ort_reason"):
            notes.append("%s: ORT: %s" % (name, r["ort_reason"]))
        mem = r.get("mem") or {}
        if mem.get("coil_error"):
            notes.append("%s: memory: %s" % (name, mem["coil_error"]))
        if mem.get("ort_error"):
            notes.append("%s: ORT memory: %s" % (name, mem["ort_error"]))
        for k, s in (r.get("static") or {}).items():
            if "error" in s:
                notes.append("%s: static %s: %s" % (name, k, s["error"]))
    if notes:
        L.append("Notes:")
        L.append("")
        for n in notes:
            L.append("- " + n.replace("\n", " "))
        L.append("")
    L.append("## At the sampled sizes (steady state, medians)")
    L.append("")
    L.append("| model | threads | size | dyn ms | static ms | dyn/static | eager ms | eager/dyn | ORT ms | ORT/dyn |")
    L.append("|" + " --- |" * 10)
    for name, r in results.items():
        if r.get("status") != "ok":
            continue
        for t, tr in sorted(r["threads"].items(), key=lambda kv: int(kv[0])):
            for k, s in tr.get("sizes", {}).items():
                size = " ".join("%s=%s" % kv for kv in json.loads(k).items())
                L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    name, t, size, fmt(s.get("dyn_ms"), 3), fmt(s.get("static_ms"), 3),
                    fmt(s.get("dyn_over_static"), 3), fmt(s.get("eager_ms"), 3),
                    fmt(s.get("eager_over_dyn"), 2, "x"), fmt(s.get("ort_ms"), 3),
                    fmt(s.get("ort_over_dyn"), 2, "x")))
    L.append("")
    L.append("## Models")
    L.append("")
    for name, r in results.items():
        L.append("- **%s**: %s%s" % (name, r.get("note", ""),
                                     "; held: %s" % r["fixed"] if r.get("fixed") else ""))
    L.append("")
    L.append("Trace: per model, %d requests drawn with a seeded RNG (distinct shapes: %s). "
             "Memory: a fresh process loads the dynamic artifact (no export in it) and runs "
             "N distinct shapes once each (first appearance in a stream drawn like the trace, "
             "capped at the size of the shape space; with --mem-order largest-first, the default, "
             "the largest of them runs first, so that the ratio measures growth per new shape "
             "rather than the size of the largest tensor met); VmHWM after the first 10 and after all. "
             "ORT: the same shapes in a fresh onnxruntime-node process (default CPU arena)." % (
                 meta["trace"], ", ".join("%s %s" % (n, r.get("trace", {}).get("distinct", "-"))
                                          for n, r in results.items())))
    with open(prefix + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    with open(prefix + ".json", "w") as f:
        json.dump({"meta": meta, "models": results}, f, indent=1)


# ------------------------------------------------------------------ driver
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(zoo.DEFAULT_MODELS),
                    help="comma-separated: %s" % ", ".join(zoo.make_specs())) 
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--trace", type=int, default=None, help="requests in the trace (1000; --quick 100)")
    ap.add_argument("--sizes", type=int, default=None, help="sampled sizes for static (6; --quick 3)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds over the sampled sizes (7; --quick 3)")
    ap.add_argument("--inner", type=int, default=3, help="calls per engine per size per round")
    ap.add_argument("--block", type=int, default=50,
                    help="trace requests each engine runs in turn (the order rotating per block)")
    ap.add_argument("--pause", type=float, default=0.02,
                    help="seconds of sleep before each timed call (spinning pool threads stop)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--dynamic-res", action="store_true", help="CNNs: resolution 160..320 symbolic too")
    ap.add_argument("--fix", action="append", default=[], metavar="SYMBOL=VALUE",
                    help="hold a symbol at one value (e.g. seq=128 while coil has only dynamic_batch)")
    ap.add_argument("--dynamic-api", default=DYNAMIC_API, choices=["auto", "batch", "true", "dims"])
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--mem-order", choices=["largest-first", "trace"], default="largest-first",
                    help="memory: run the largest of the N shapes first (the default: after 10 "
                         "shapes vs after N then measures growth per new shape, not the size of "
                         "the largest tensor met), or in the trace's order of first appearance")
    ap.add_argument("--keep-times", action="store_true", help="every request's time in the JSON")
    ap.add_argument("--out", default=None, help="report prefix (bench/results/dynamic[-quick])")
    ap.add_argument("--work", default=None, help="work dir (artifact cache, ONNX files); default temporary")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="per model, seconds")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    ap.add_argument("--_mem", help=argparse.SUPPRESS)
    ap.add_argument("--_cfg", help=argparse.SUPPRESS)
    ap.add_argument("--_out", help=argparse.SUPPRESS)
    ap.add_argument("--_wrec", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a._worker or a._mem:
        with open(a._cfg) as f:
            cfg = json.load(f)
        if a._worker:
            worker(cfg, a._worker, a._out)
        else:
            with open(a._wrec) as f:
                mem_worker(cfg, a._mem, a._out, json.load(f))
        return 0

    specs = zoo.make_specs(a.dynamic_res)
    names = [m for m in a.models.split(",") if m]
    for m in names:
        if m not in specs:
            ap.error("unknown model %r (%s)" % (m, ", ".join(specs)))
    cfg = {
        "trace": a.trace or (100 if a.quick else 1000),
        "sizes": a.sizes or (3 if a.quick else 6),
        "rounds": a.rounds or (3 if a.quick else 7),
        "inner": a.inner, "pause": a.pause, "block": a.block, "seed": a.seed, "quick": a.quick,
        "threads": [int(t) for t in a.threads.split(",") if t],
        "dynamic_res": a.dynamic_res, "fix": a.fix, "dynamic_api": a.dynamic_api,
        "no_ort": a.no_ort, "keep_times": a.keep_times, "mem_order": a.mem_order,
    }
    prefix = a.out or os.path.join(ROOT, "bench", "results", "dynamic-quick" if a.quick else "dynamic")
    tmp = None
    if a.work:
        cfg["work"] = os.path.abspath(a.work)
        os.makedirs(cfg["work"], exist_ok=True)
    else:
        cfg["work"] = tmp = tempfile.mkdtemp(prefix="coil-bench-dynamic-")
    cfg_path = os.path.join(cfg["work"], "cfg.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    ver = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], stdout=subprocess.PIPE,
                         text=True).stdout.strip()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": git_commit(),
            "cores": os.cpu_count(), "cpu": cpu_model(), "torch": ver, "ort": None,
            "trace": cfg["trace"], "seed": cfg["seed"], "sizes": cfg["sizes"], "rounds": cfg["rounds"],
            "inner": cfg["inner"], "threads": cfg["threads"], "quick": a.quick,
            "dynamic_api": a.dynamic_api, "dynamic_res": a.dynamic_res, "fix": a.fix,
            "argv": sys.argv[1:], "loadavg_start": loadavg()}
    results = {}
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    try:
        for name in names:
            log("%s: compile, check, time (threads %s, trace %d)" % (name, a.threads, cfg["trace"]))
            out = os.path.join(cfg["work"], name + ".json")
            if os.path.exists(out):
                os.unlink(out)
            t0 = time.time()
            try:
                p = subprocess.run([PY, os.path.abspath(__file__), "--_worker", name, "--_cfg", cfg_path,
                                    "--_out", out], env=env, timeout=a.timeout, stderr=subprocess.PIPE,
                                   text=True)
                err = p.stderr
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            rec = None
            if os.path.exists(out):
                with open(out) as f:
                    rec = json.load(f)
            sys.stderr.write("".join(l + "\n" for l in err.splitlines()
                                     if l.startswith("[") or "Error" in l)[-4000:])
            if rc != 0:
                why = ("timed out after %d s" % a.timeout if rc == "timeout" else
                       "killed by signal %d" % -rc if rc < 0 else "exit %d" % rc)
                tail = err.strip().splitlines()[-1:] if err else []
                rec = dict(rec or {"model": name, "note": specs[name].note}, status="failed",
                           reason="worker %s%s" % (why, (": " + tail[0][:300]) if tail else ""))
            rec["wall_s"] = time.time() - t0
            if rec.get("ort_version"):
                meta["ort"] = rec["ort_version"].get("node")
            if rec.get("status") == "ok":
                log("%s: memory, %d distinct shapes" % (name, cfg["trace"]))
                mout = os.path.join(cfg["work"], name + ".mem.json")
                try:
                    p = subprocess.run([PY, os.path.abspath(__file__), "--_mem", name, "--_cfg", cfg_path,
                                        "--_out", mout, "--_wrec", out], env=env, timeout=a.timeout,
                                       stderr=subprocess.PIPE, text=True)
                    if os.path.exists(mout):
                        with open(mout) as f:
                            rec["mem"] = json.load(f)
                    if p.returncode != 0:
                        rec.setdefault("mem", {})["coil_error"] = "memory worker exit %d: %s" % (
                            p.returncode, p.stderr.strip()[-300:])
                except subprocess.TimeoutExpired:
                    rec["mem"] = {"coil_error": "memory worker timed out"}
            results[name] = rec
            meta["loadavg_end"] = loadavg()
            report(meta, results, prefix)
            s = rec.get("status")
            log("%s: %s%s" % (name, s, "" if s == "ok" else ": " + str(rec.get("reason"))))
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    log("wrote %s.md and %s.json" % (prefix, prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
