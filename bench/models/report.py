"""The model suite's report: markdown table, PNG chart (matplotlib, else gnuplot) and JSON.

    /usr/bin/python3 bench/models/run.py --report-only [...]   regenerates it from WORK

Status of a (model, batch):
  pass       compiled, ran at every thread count, every output within the tolerance of eager
  fail       the reason: the stage (export, compile, load, run, latency step) and its message
  no trace   make_fx cannot trace the model at ATen level: left out of the pass rate
  pending    not measured yet (an interrupted or partial run)
A model passes when it passes at every batch size. Speedups are eager's (or TorchScript's)
median latency over coil's, measured in the same process with calls interleaved; geometric
means are over the passing (model, batch) rows."""
import json
import math
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GROUPS = ("classification", "segmentation", "transformer", "audio", "gnn")
TARGET_PASS = 0.95
TARGET_SPEEDUP = 1.5


def _first_line(s, n=300):
    s = " ".join(str(s).split())
    return s if len(s) <= n else s[:n - 3] + "..."


def collect(model, group, batch, prep, lat, mems):
    row = {"model": model, "group": group, "batch": batch, "status": "pending", "reason": "",
           "latency_ms": {}, "speedup_eager": {}, "speedup_torchscript": {}, "speedup_ort": {}, "peak_mb": {}}
    for e, rec in (mems or {}).items():
        if rec and "peak_mb" in rec["result"]:
            row["peak_mb"][e] = rec["result"]["peak_mb"]
    if lat:
        r = lat["result"]
        for t, es in r.get("threads", {}).items():
            row["latency_ms"][t] = {k: v.get("median_ms") for k, v in es.items() if v.get("median_ms")}
        if r.get("errors", {}).get("torchscript"):
            row["torchscript_error"] = _first_line(r["errors"]["torchscript"], 200)
        if r.get("errors", {}).get("ort"):
            row["ort_error"] = _first_line(r["errors"]["ort"], 200)
        row["ort_rel_err"] = r.get("ort_rel_err")
        row["rel_err"] = r.get("coil_rel_err")
        row["cpu_busy_before"] = lat.get("cpu_busy_before")
        row["loadavg"] = r.get("loadavg")
    if prep is None:
        return row
    p = prep["result"]
    row["compile_s"] = p.get("compile_s")
    row["export_s"] = p.get("export_s")
    row["cache_hit"] = p.get("cache_hit")
    row["coil_model_mb"] = p.get("coil_model_mb")
    row["nodes"] = p.get("nodes")
    row["params"] = p.get("params")
    if not p.get("ok"):
        stage = p.get("stage") or "prepare"
        row["status"] = "no trace" if stage == "trace" else "fail"
        row["stage"] = stage
        row["reason"] = _first_line("%s: %s" % (stage, p.get("error")))
        if p.get("unsupported_ops"):
            row["unsupported_ops"] = p["unsupported_ops"]
        return row
    if lat is None:
        # not timed (yet): prepare's own check of coil.compile's callable against eager
        row["rel_err"] = p.get("rel_err")
        if p.get("pass") is not None:
            row["timed"] = False
            if p["pass"]:
                row["status"] = "pass"
            else:
                row.update(status="fail", stage="accuracy", reason="mismatch: max rel err %.2e > %g" % (
                    p.get("rel_err") or float("nan"), p.get("tol")))
        return row
    r = lat["result"]
    if r.get("error"):
        row.update(status="fail", stage="latency", reason=_first_line("latency step: %s" % r["error"]))
        return row
    if r.get("errors", {}).get("coil"):
        row.update(status="fail", stage="run", reason=_first_line("run: %s" % r["errors"]["coil"]))
        return row
    if not r.get("pass"):
        row.update(status="fail", stage="accuracy",
                   reason="mismatch: max rel err %.2e > %g" % (r.get("coil_rel_err") or float("nan"), r.get("tol")))
    else:
        row["status"] = "pass"
    for t, ms in row["latency_ms"].items():
        if ms.get("coil") and ms.get("eager"):
            row["speedup_eager"][t] = ms["eager"] / ms["coil"]
        if ms.get("coil") and ms.get("torchscript"):
            row["speedup_torchscript"][t] = ms["torchscript"] / ms["coil"]
        if ms.get("coil") and ms.get("ort"):
            row["speedup_ort"][t] = ms["ort"] / ms["coil"]
    return row


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def model_status(rows):
    """{model: status}: fail if any of its batch rows failed, else pass if at least one passed
    (rows still pending aside), else pending; "no trace" when it cannot be traced."""
    by = {}
    for r in rows:
        by.setdefault(r["model"], []).append(r["status"])
    out = {}
    for m, ss in by.items():
        if "no trace" in ss:
            out[m] = "no trace"
        elif "fail" in ss:
            out[m] = "fail"
        elif "pass" in ss:
            out[m] = "pass"
        else:
            out[m] = "pending"
    return out


def summarize(rows, threads):
    ms = model_status(rows)
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], set()).add(r["model"])
    summ = []
    for g in list(GROUPS) + ["all"]:
        models = sorted(set(r["model"] for r in rows)) if g == "all" else sorted(groups.get(g, ()))
        if not models:
            continue
        st = [ms[m] for m in models]
        traced = [s for s in st if s != "no trace"]
        done = [s for s in traced if s != "pending"]
        passed = sum(s == "pass" for s in st)
        grows = [r for r in rows if (g == "all" or r["group"] == g) and r["status"] == "pass"]
        e = {}
        for t in threads:
            e["eager_%d" % t] = geomean([r["speedup_eager"].get(str(t)) for r in grows])
            e["torchscript_%d" % t] = geomean([r["speedup_torchscript"].get(str(t)) for r in grows])
            e["ort_%d" % t] = geomean([r.get("speedup_ort", {}).get(str(t)) for r in grows])
        pending_rows = sum(1 for r in rows if (g == "all" or r["group"] == g) and r["status"] == "pending")
        summ.append(dict(group=g, models=len(models), traced=len(traced), measured=len(done),
                         passed=passed, pass_rate=(passed / len(done)) if done else None,
                         pending=len(traced) - len(done), pending_rows=pending_rows, rows=len(grows), **e))
    return summ


def by_batch(rows, threads):
    out = []
    for b in sorted(set(r["batch"] for r in rows)) + ["all"]:
        rs = [r for r in rows if r["status"] == "pass" and (b == "all" or r["batch"] == b)]
        e = {"batch": b, "rows": len(rs)}
        for t in threads:
            e["eager_%d" % t] = geomean([r["speedup_eager"].get(str(t)) for r in rs])
            e["torchscript_%d" % t] = geomean([r["speedup_torchscript"].get(str(t)) for r in rs])
            e["ort_%d" % t] = geomean([r.get("speedup_ort", {}).get(str(t)) for r in rs])
        out.append(e)
    return out


def machine(coil_path):
    info = {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.*)$", f.read(), re.M)
            info["cpu"] = m.group(1).strip() if m else "?"
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemTotal:\s+(\d+)", f.read(), re.M)
            info["mem_gib"] = round(int(m.group(1)) / 2**20, 1) if m else None
    except OSError:
        pass
    sys.path.insert(0, os.path.join(ROOT, "client", "python"))
    try:
        import coil
        info["coil_target"] = coil.best_target()
    except Exception:  # noqa: BLE001
        info["coil_target"] = "?"
    try:
        import torch
        import torchvision
        info["torch"] = "%s, torchvision %s" % (torch.__version__, torchvision.__version__)
    except Exception:  # noqa: BLE001
        pass
    info["blas"] = _torch_blas()
    try:
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        info["commit"] = head + (" (with uncommitted changes)" if dirty else "")
    except OSError:
        info["commit"] = "?"
    if coil_path and os.path.exists(coil_path):
        import hashlib
        with open(coil_path, "rb") as f:
            info["coil_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    return info


def _torch_blas():
    """The BLAS library torch's matmuls run on here (from a child's /proc/self/maps)."""
    code = ("import torch, os\n"
            "torch.ones(64, 64) @ torch.ones(64, 64)\n"
            "libs = set(l.split()[-1] for l in open('/proc/self/maps') if '.so' in l)\n"
            "print('\\n'.join(sorted(l for l in libs if 'blas' in l.lower() or 'mkl' in l.lower())))\n")
    try:
        r = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return "?"
    libs = [os.path.realpath(x) for x in r.stdout.split()]
    if not libs:
        return "?"
    names = ", ".join(sorted(set(libs)))
    if any("openblas" in x for x in libs):
        return "OpenBLAS (%s)" % names
    if any("mkl" in x for x in libs):
        return "MKL (%s)" % names
    if any("/blas/" in x for x in libs):
        return "netlib reference BLAS (%s): unoptimized, slow eager matmuls" % names
    return names


def _x(v, fmt="%.2fx"):
    return "-" if v is None else fmt % v


def _ms(v):
    if v is None:
        return "-"
    return "%.1f" % v if v >= 100 else "%.2f" % v if v >= 1 else "%.3f" % v


def _esc(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def markdown(rows, settings, info, summ, bb):
    threads = settings["threads"]
    L = []
    L.append("# coil model suite%s%s" % (" (quick subset)" if settings.get("quick") else
                                        " (subset: %d models)" % settings["models"] if settings.get("subset") else "",
                                        " (accuracy only, no timings)" if settings.get("accuracy_only") else ""))
    L.append("")
    L.append("Generated by `make bench-models%s` (bench/models/run.py) on %s." % (
        " QUICK=1" if settings.get("quick") else " BENCH_ARGS=--accuracy-only" if settings.get("accuracy_only")
        else "", info.get("date")))
    L.append("")
    L.append("- machine: %s, %s CPUs, %s GiB; coil target `%s`" % (
        info.get("cpu"), info.get("cpus"), info.get("mem_gib"), info.get("coil_target")))
    L.append("- PyTorch %s (Debian); eager under `torch.no_grad()`, TorchScript = "
             "`torch.jit.trace` + `torch.jit.freeze` + `torch.jit.optimize_for_inference`; ORT = ONNX Runtime "
             "1.30 (onnxruntime-node's CPU library) over `torch.onnx.export` (opset 17), all graph optimizations, "
             "sequential, intra-op threads = T, timed by its runner around `session.run`; its output 0 checked against eager's; "
             "every engine's call after 50 ms of quiet" % info.get("torch"))
    L.append("- torch's BLAS: %s; eager's and TorchScript's GEMMs run on it single-threaded at every "
             "thread count (OPENBLAS_NUM_THREADS=1: letting OpenBLAS use 2 threads made eager slower "
             "here, its threads fight ATen's OpenMP threads); most convolutions go to PyTorch's own oneDNN (mkldnn)" % info.get("blas"))
    L.append("- coil: commit %s, CLI sha256 %s; `coil.compile` (export with make_fx, compile "
             "in-process%s, load over the artifact ABI)" % (
                 info.get("commit"), info.get("coil_sha256"),
                 ", on coild %s" % settings["server"] if settings.get("server") else ""))
    if settings.get("accept_stale"):
        L.append("- some rows may come from earlier coil builds or settings (run with --accept-stale)")
    L.append("- FP32; random weights (seeded); images 224 px (inception_v3 299, segmentation 224); "
             "batch %s; threads %s (torch.set_num_threads / coil nthreads, OPENBLAS_NUM_THREADS=1)" % (
                 ", ".join(map(str, settings["batches"])), ", ".join(map(str, threads))))
    L.append("- pass: coil compiles, runs at every thread count and every output is within "
             "max |coil - eager| <= 1e-3 x max |eager|; a model passes when it passes at every batch")
    L.append("- latency: median of at least %d calls and %.1f s per engine after warm-up, the three "
             "engines' calls interleaved in one process; speedup = other's median / coil's median; "
             "geomean over passing (model, batch) rows" % (settings["min_runs"], settings["budget_s"]))
    L.append("- peak memory: each engine alone in a fresh process (1st thread count), VmHWM above the "
             "idle interpreter, reset after the engine is built (freed heap given back first, malloc_trim): "
             "params held + running peak; coil with keep_params=False, lean: also low_memory=True "
             "(no Winograd)")
    L.append("")
    if settings.get("accuracy_only"):
        return _markdown_accuracy(L, rows, summ)
    L.append("## Summary")
    L.append("")
    head = "| group | models | traced | passed | pass rate |"
    sep = "|---|---:|---:|---:|---:|"
    for t in threads:
        head += " geomean vs eager, %dT |" % t
        sep += "---:|"
    for t in threads:
        head += " geomean vs TorchScript, %dT |" % t
        sep += "---:|"
    for t in threads:
        head += " geomean vs ORT, %dT |" % t
        sep += "---:|"
    L += [head, sep]
    for s in summ:
        line = "| %s | %d | %d | %d | %s%s |" % (
            s["group"], s["models"], s["traced"], s["passed"],
            "-" if s["pass_rate"] is None else "%.0f%%" % (100 * s["pass_rate"]),
            " (%d of %d measured)" % (s["measured"], s["traced"]) if s["pending"] else
            " (%d rows pending)" % s["pending_rows"] if s["pending_rows"] else "")
        for t in threads:
            line += " %s |" % _x(s["eager_%d" % t])
        for t in threads:
            line += " %s |" % _x(s["torchscript_%d" % t])
        for t in threads:
            line += " %s |" % _x(s.get("ort_%d" % t))
        L.append(line)
    L.append("")
    L.append("By batch size (passing rows):")
    L.append("")
    head = "| batch | rows |" + "".join(" vs eager, %dT |" % t for t in threads) + \
        "".join(" vs TorchScript, %dT |" % t for t in threads)
    L += [head, "|---|---:|" + "---:|" * (2 * len(threads))]
    for e in bb:
        L.append("| %s | %d |" % (e["batch"], e["rows"]) +
                 "".join(" %s |" % _x(e["eager_%d" % t]) for t in threads) +
                 "".join(" %s |" % _x(e["torchscript_%d" % t]) for t in threads))
    cls = next((s for s in summ if s["group"] == "classification"), None)
    allg = next((s for s in summ if s["group"] == "all"), None)
    L.append("")
    if settings.get("subset"):
        L.append("Targets (issue): for the whole suite only; these are the models named with --models.")
    else:
        L.append("Targets (issue): classification pass rate >= %d%%: %s; FP32 geomean over eager >= %.1fx: %s." % (
            TARGET_PASS * 100,
            "n/a (no classification models in this run)" if not cls or cls["pass_rate"] is None else
            ("met" if cls["pass_rate"] >= TARGET_PASS else "NOT met") + " (%.0f%%)" % (100 * cls["pass_rate"]),
            TARGET_SPEEDUP,
            ", ".join("%dT %s (%s)" % (t, "met" if (allg or {}).get("eager_%d" % t) and allg["eager_%d" % t] >= TARGET_SPEEDUP
                                        else "NOT met", _x((allg or {}).get("eager_%d" % t))) for t in threads)))
    mem = [r["peak_mb"] for r in rows if r["status"] == "pass" and r["peak_mb"].get("eager") is not None]
    if mem:
        L.append("")
        parts = []
        for e, what in (("coil", "coil"), ("coil-lean", "coil with low_memory=True")):
            have = [pk for pk in mem if pk.get(e) is not None]
            if have:
                parts.append("%s %d of %d rows" % (what, sum(pk[e] <= pk["eager"] for pk in have), len(have)))
        L.append("Memory (peak at most eager's): %s." % "; ".join(parts))
    busy = [r.get("cpu_busy_before") for r in rows if r.get("cpu_busy_before") is not None]
    if busy and max(busy) > 0.15:
        L.append("")
        L.append("Note: other processes kept the CPUs up to %.0f%% busy before some timings (see "
                 "`cpu_busy_before` in the JSON); 2-thread numbers are the most exposed." % (100 * max(busy)))
    L.append("")
    L.append("## Models")
    L.append("")
    head = "| model | batch | status |"
    sep = "|---|---:|---|"
    for t in threads:
        head += " coil %dT ms | eager %dT ms | TS %dT ms | ORT %dT ms | vs eager %dT | vs TS %dT | vs ORT %dT |" % (
            t, t, t, t, t, t, t)
        sep += "---:|---:|---:|---:|---:|---:|---:|"
    head += " peak MiB coil / lean / eager / TS | compile s | max rel err |"
    sep += "---:|---:|---:|"
    L += [head, sep]
    for r in rows:
        st = r["status"] if r["status"] != "fail" else "FAIL (%s)" % r.get("stage", "?")
        if r.get("timed") is False:
            st += ", not timed"
        line = "| %s | %d | %s |" % (r["model"], r["batch"], st)
        for t in threads:
            ms = r["latency_ms"].get(str(t), {})
            line += " %s | %s | %s | %s | %s | %s | %s |" % (
                _ms(ms.get("coil")), _ms(ms.get("eager")), _ms(ms.get("torchscript")), _ms(ms.get("ort")),
                _x(r["speedup_eager"].get(str(t))), _x(r["speedup_torchscript"].get(str(t))),
                _x(r.get("speedup_ort", {}).get(str(t))))
        pk = r["peak_mb"]
        line += " %s / %s / %s / %s | %s | %s |" % (
            _ms(pk.get("coil")) if pk.get("coil") is not None else "-",
            _ms(pk.get("coil-lean")) if pk.get("coil-lean") is not None else "-",
            _ms(pk.get("eager")) if pk.get("eager") is not None else "-",
            _ms(pk.get("torchscript")) if pk.get("torchscript") is not None else "-",
            "-" if r.get("compile_s") is None else "%.1f%s" % (r["compile_s"], " (hit)" if r.get("cache_hit") else ""),
            "-" if r.get("rel_err") is None else "%.1e" % r["rel_err"])
        L.append(line)
    fails = [r for r in rows if r["status"] in ("fail", "no trace")]
    if fails:
        L.append("")
        L.append("## Failures")
        L.append("")
        L.append("| model | batch | reason |")
        L.append("|---|---:|---|")
        for r in fails:
            L.append("| %s | %d | %s |" % (r["model"], r["batch"], _esc(r["reason"])))
    tse = [r for r in rows if r.get("torchscript_error")]
    if tse:
        L.append("")
        L.append("TorchScript could not run: " + "; ".join(
            "%s b%d (%s)" % (r["model"], r["batch"], _esc(r["torchscript_error"])) for r in tse))
    oe = [r for r in rows if r.get("ort_error")]
    if oe:
        L.append("")
        L.append("ONNX Runtime could not run: " + "; ".join(
            "%s b%d (%s)" % (r["model"], r["batch"], _esc(r["ort_error"])) for r in oe))
    om = [r for r in rows if r.get("ort_rel_err") is not None and r["ort_rel_err"] > 1e-3]
    if om:
        L.append("")
        L.append("ONNX Runtime's output 0 differs from eager's: " + "; ".join(
            "%s b%d (%.1e)" % (r["model"], r["batch"], r["ort_rel_err"]) for r in om))
    pend = [r for r in rows if r["status"] == "pending"]
    if pend:
        L.append("")
        L.append("Pending (not measured yet): " + ", ".join("%s b%d" % (r["model"], r["batch"]) for r in pend))
    L.append("")
    return "\n".join(L)


def _markdown_accuracy(L, rows, summ):
    L = [x for x in L if not x.startswith("- latency:") and not x.startswith("- peak memory:")]
    L = [("- pass: `coil.compile` exports, compiles and loads the model, and one call (OpenMP's default "
          "threads) matches eager: max |coil - eager| <= 1e-3 x max |eager| for every output")
         if x.startswith("- pass:") else x for x in L]
    L.append("## Summary")
    L.append("")
    L += ["| group | models | traced | passed | pass rate |", "|---|---:|---:|---:|---:|"]
    for s in summ:
        L.append("| %s | %d | %d | %d | %s |" % (s["group"], s["models"], s["traced"], s["passed"],
                 "-" if s["pass_rate"] is None else "%.0f%%" % (100 * s["pass_rate"])))
    cls = next((s for s in summ if s["group"] == "classification"), None)
    if cls and cls["pass_rate"] is not None:
        L.append("")
        L.append("Target (issue): classification pass rate >= %d%%: %s (%.0f%%)." % (
            TARGET_PASS * 100, "met" if cls["pass_rate"] >= TARGET_PASS else "NOT met", 100 * cls["pass_rate"]))
    L.append("")
    L.append("## Models")
    L.append("")
    L += ["| model | group | batch | status | export s | compile s | nodes | max rel err |",
          "|---|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        st = r["status"] if r["status"] != "fail" else "FAIL (%s)" % r.get("stage", "?")
        L.append("| %s | %s | %d | %s | %s | %s | %s | %s |" % (
            r["model"], r["group"], r["batch"], st,
            "-" if r.get("export_s") is None else "%.1f" % r["export_s"],
            "-" if r.get("compile_s") is None else "%.1f%s" % (r["compile_s"], " (hit)" if r.get("cache_hit") else ""),
            r.get("nodes") or "-", "-" if r.get("rel_err") is None else "%.1e" % r["rel_err"]))
    fails = [r for r in rows if r["status"] in ("fail", "no trace")]
    if fails:
        L += ["", "## Failures", "", "| model | batch | reason |", "|---|---:|---|"]
        for r in fails:
            L.append("| %s | %d | %s |" % (r["model"], r["batch"], _esc(r["reason"])))
    L.append("")
    return "\n".join(L)


def chart(rows, settings, path, summ):
    threads = settings["threads"]
    batches = settings["batches"]
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    by = {(r["model"], r["batch"]): r for r in rows}
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return _gnuplot(rows, settings, path)
    h = max(3.0, 0.28 * len(models) * max(1, len(batches)) / 1.6 + 1.5)
    fig, axes = plt.subplots(1, len(threads), figsize=(6.0 * len(threads), h), sharey=True, squeeze=False)
    colors = ["#3b75af", "#ef8636", "#519e3e", "#c53a32"]
    allg = next((s for s in summ if s["group"] == "all"), {})
    for k, t in enumerate(threads):
        ax = axes[0][k]
        bw = 0.8 / max(1, len(batches))
        vals = []
        for j, b in enumerate(batches):
            ys, xs = [], []
            for i, m in enumerate(models):
                r = by.get((m, b))
                y = len(models) - 1 - i + (len(batches) - 1 - j - (len(batches) - 1) / 2) * bw
                v = r["speedup_eager"].get(str(t)) if r and r["status"] == "pass" else None
                if v:
                    ys.append(y)
                    xs.append(v)
                    vals.append(v)
                elif r and r["status"] in ("fail", "no trace"):
                    ax.text(1.0, y, " fail" if r["status"] == "fail" else " no trace",
                            va="center", ha="left", fontsize=6, color="#c53a32")
            ax.barh(ys, xs, height=bw, left=0, color=colors[j % len(colors)], label="batch %d" % b)
        ax.axvline(1.0, color="black", lw=0.8)
        ax.axvline(TARGET_SPEEDUP, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        lo, hi = min(vals + [0.5]), max(vals + [2.0])
        ax.set_xlim(lo / 1.3, hi * 1.3)
        ticks = [x for x in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 1.5, 2, 3, 5, 10, 20, 50, 100)
                 if lo / 1.3 <= x <= hi * 1.3]
        ax.set_xticks(ticks)
        ax.set_xticklabels(["%gx" % x for x in ticks])
        ax.minorticks_off()
        g = allg.get("eager_%d" % t)
        ax.set_title("%d thread%s: geomean %s" % (t, "" if t == 1 else "s", _x(g)), fontsize=10)
        ax.set_xlabel("speedup over eager (eager median / coil median, log)")
        ax.grid(axis="x", which="both", alpha=0.3)
        if k == 0:
            ax.set_yticks(range(len(models)))
            ax.set_yticklabels(list(reversed(models)), fontsize=7)
            ax.legend(loc="upper right", fontsize=7, framealpha=0.9)
        ax.set_ylim(-0.7, len(models) - 0.3)
    fig.suptitle("coil vs PyTorch eager, FP32, per model (dashed: %.1fx target)" % TARGET_SPEEDUP, fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / h))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _gnuplot(rows, settings, path):
    """Fallback: one bar per passing (model, batch) at the first thread count."""
    import shutil
    import tempfile
    if not shutil.which("gnuplot"):
        sys.stderr.write("report: neither python3-matplotlib nor gnuplot is installed: no chart\n")
        return None
    t = str(settings["threads"][0])
    with tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False) as f:
        for r in rows:
            v = r["speedup_eager"].get(t) if r["status"] == "pass" else None
            f.write('"%s b%d" %s\n' % (r["model"], r["batch"], v if v else 0))
        dat = f.name
    script = ('set terminal png size 900,%d; set output "%s"; set style fill solid; set logscale y; '
              'set xtics rotate by 90 font ",7"; set ylabel "speedup over eager (%sT)"; '
              'plot "%s" using 0:2:xtic(1) with boxes notitle' % (400 + 10 * len(rows), path, t, dat))
    subprocess.run(["gnuplot", "-e", script], check=False)
    os.unlink(dat)
    return path


def write(rows, settings, outdir, stem, coil_path):
    os.makedirs(outdir, exist_ok=True)
    threads = settings["threads"]
    info = machine(coil_path)
    if settings.get("commit"):
        info["commit"] = settings["commit"] + " (the build timed; this report written at %s)" % info["commit"]
    summ = summarize(rows, threads)
    bb = by_batch(rows, threads)
    md = markdown(rows, settings, info, summ, bb)
    paths = []
    p = os.path.join(outdir, stem + ".md")
    png = os.path.join(outdir, stem + ".png")
    if not settings.get("accuracy_only") and chart(rows, settings, png, summ):
        md = md.replace("## Summary", "![speedup per model](%s)\n\n## Summary" % os.path.basename(png), 1)
        paths.append(png)
    with open(p, "w") as f:
        f.write(md)
    paths.insert(0, p)
    p = os.path.join(outdir, stem + ".json")
    with open(p, "w") as f:
        json.dump({"machine": info, "settings": settings, "summary": summ, "by_batch": bb, "rows": rows},
                  f, indent=1, default=str)
    paths.append(p)
    return paths
