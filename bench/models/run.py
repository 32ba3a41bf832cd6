#!/usr/bin/python3
"""coil's model suite: pass rate and speedup over PyTorch eager, TorchScript and ONNX Runtime
(the peer a user would pick for CPU inference), the way the TorchInductor team reports theirs.
`make bench-models` runs it; results go to bench/results/.

    /usr/bin/python3 bench/models/run.py [--quick] [--models LIST] [--batches 1,8]
        [--threads 1,2] [--jobs N] [--work DIR] [--results DIR] [--force] [--report-only]

Models (bench/models/zoo.py): every torchvision classification model, torchvision's
segmentation models, a BERT-base-sized TransformerEncoder, a tiny ViT and a small BERT.
--models takes names and group names (classification, segmentation, transformer, audio,
gnn), comma separated; --quick is resnet18, mobilenet_v3_small, vit_tiny, bert_mini.

For each model and batch size, each step runs in a fresh process (bench/models/worker.py):
  prepare   coil.compile: export at ATen level, compile through the suite's own artifact cache
            (WORK/cache), load; the reason when it fails (unsupported op, compile error, ...)
  latency   eager, TorchScript (trace + freeze + optimize_for_inference) and coil in one
            process, calls interleaved, per thread count; coil checked against eager
  memory    each engine alone in a process: peak RSS above the idle interpreter
Each step's result is a JSON file under WORK/MODEL/bBATCH/, stamped with a fingerprint of
the coil binary, torch's version and the settings that matter: a rerun skips what is done
and current (resumable), redoes what is stale or --force'd. A model directory is locked
(flock) while a run works on it, so several runs may share WORK (parallel-safe); their
timings disturb each other, though, so measure with one run at a time. Models are done
one at a time (prepare, then timing), every model at the first batch size before any at
the next, so an interrupted run has covered the most models; --jobs N instead runs every
prepare step (export + compile + one checked call) first, N at a time.
--accuracy-only stops after them: pass/fail and reasons without timings (models-accuracy.*).

The report (bench/models/report.py) is bench/results/models.md, models.png and models.json
(--quick: models-quick.*).
"""
import argparse
import concurrent.futures
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import zoo  # noqa: E402

PY = "/usr/bin/python3"
WORKER = os.path.join(HERE, "worker.py")
SUITE_VERSION = 3  # bump when a step's meaning changes: every result becomes stale (3: ORT in latency)
ENGINES = ("eager", "torchscript", "coil", "coil-lean")  # memory steps (coil-lean: low_memory=True)


def log(msg):
    sys.stderr.write("[%s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


def file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def torch_version():
    r = subprocess.run([PY, "-c", "import torch, torchvision; print(torch.__version__, torchvision.__version__)"],
                       capture_output=True, text=True)
    return r.stdout.strip()


def cpu_busy(seconds=1.0):
    """Fraction of all CPUs busy over `seconds` (from /proc/stat)."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v), idle
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_quiet(limit_s, threshold=0.15):
    """Waits up to limit_s for the machine to go quiet (other processes using < threshold of
    the CPUs); returns the last busy fraction seen."""
    busy = cpu_busy(1.0)
    end = time.time() + limit_s
    while busy > threshold and time.time() < end:
        busy = cpu_busy(2.0)
    return busy


class Step:
    def __init__(self, run, model, batch, name, args, fingerprint, timeout):
        self.run, self.model, self.batch, self.name = run, model, batch, name
        self.args, self.fingerprint, self.timeout = args, fingerprint, timeout

    @property
    def dir(self):
        return os.path.join(self.run.work, self.model, "b%d" % self.batch)

    @property
    def path(self):
        return os.path.join(self.dir, self.name + ".json")

    def cached(self):
        try:
            with open(self.path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            return None
        if rec.get("fingerprint") != self.fingerprint and not self.run.a.accept_stale:
            return None
        return rec

    def execute(self, quiet_wait=0):
        os.makedirs(self.dir, exist_ok=True)
        out = os.path.join(self.dir, ".%s.%d.out" % (self.name, os.getpid()))
        step, rest = self.args[0], self.args[1:]
        cmd = [PY, WORKER, step] + rest + ["--out", out]
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
        env.pop("OMP_NUM_THREADS", None)
        busy = wait_quiet(quiet_wait) if quiet_wait else None
        t0 = time.time()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                               timeout=self.timeout)
            tail = p.stdout.decode("utf-8", "replace")[-3000:]
            rc = p.returncode
        except subprocess.TimeoutExpired:
            rc, tail = None, ""
        wall = time.time() - t0
        res = None
        if os.path.exists(out):
            with open(out) as f:
                res = json.load(f)
            os.unlink(out)
        if res is None:
            why = ("timeout after %d s" % self.timeout) if rc is None else (
                "worker exited with status %s" % rc)
            res = {"error": why, "stage": step, "output": tail}
        rec = {"fingerprint": self.fingerprint, "wall_s": wall, "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
               "cpu_busy_before": busy, "result": res}
        tmp = self.path + ".tmp.%d" % os.getpid()
        with open(tmp, "w") as f:
            json.dump(rec, f, indent=1, default=str)
        os.replace(tmp, self.path)
        return rec


class Lock:
    def __init__(self, d):
        os.makedirs(d, exist_ok=True)
        self.f = open(os.path.join(d, ".lock"), "w")

    def try_acquire(self):
        try:
            fcntl.flock(self.f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False

    def release(self):
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


class Run:
    def __init__(self, a):
        self.a = a
        self.work = os.path.abspath(a.work)
        self.cache = os.path.join(self.work, "cache")
        # a private copy of the CLI: a rebuild during a long run must not change the compiler
        # halfway (the artifacts' cache keys include the codegen digest, the results don't)
        sha = file_sha(os.path.abspath(a.coil))
        self.coil = os.path.join(self.work, "bin", "coil-" + sha[:16])
        if not os.path.exists(self.coil):
            os.makedirs(os.path.dirname(self.coil), exist_ok=True)
            tmp = self.coil + ".tmp.%d" % os.getpid()
            shutil.copy2(os.path.abspath(a.coil), tmp)
            os.replace(tmp, self.coil)
        base = {"suite": SUITE_VERSION, "coil": sha, "torch": torch_version(),
                "server": a.server or ""}
        self.fp_prepare = hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()[:20]
        lat = dict(base, threads=a.threads, budget=a.budget, min_runs=a.min_runs, max_runs=a.max_runs)
        self.fp_latency = hashlib.sha256(json.dumps(lat, sort_keys=True).encode()).hexdigest()[:20]
        mem = dict(base, threads=a.threads.split(",")[0], runs=a.mem_runs, trim=1)  # trim: heap freed first
        self.fp_memory = hashlib.sha256(json.dumps(mem, sort_keys=True).encode()).hexdigest()[:20]

    def steps(self, model, batch):
        a = self.a
        d = os.path.join(self.work, model, "b%d" % batch)
        prep = ["prepare", model, str(batch), d, "--cache", self.cache, "--coil", self.coil]
        if a.server:
            prep += ["--server", a.server]
        prep = Step(self, model, batch, "prepare", prep, self.fp_prepare, a.timeout)
        tag = ".quick" if a.quick else ""  # --quick's shorter timings keep their own files
        lat = Step(self, model, batch, "latency" + tag,
                   ["latency", model, str(batch), d, "--threads", a.threads, "--budget", str(a.budget),
                    "--min-runs", str(a.min_runs), "--max-runs", str(a.max_runs)] + ([] if a.ort else ["--no-ort"]),
                   self.fp_latency, a.timeout)
        mem = [Step(self, model, batch, "memory-" + e + tag,
                    ["memory", e, model, str(batch), d, "--threads", a.threads,
                     "--min-runs", str(a.mem_runs)], self.fp_memory, a.timeout) for e in ENGINES]
        return prep, lat, mem


def parse_models(spec, quick):
    if quick and not spec:
        return list(zoo.QUICK)
    groups = {}
    for n, g in zoo.all_models():
        groups.setdefault(g, []).append(n)
    names = [n for n, _ in zoo.all_models()]
    out = []
    for s in (spec or "all").split(","):
        s = s.strip()
        if not s:
            continue
        if s == "all":
            out += names
        elif s in groups:
            out += groups[s]
        elif s in names:
            out.append(s)
        else:
            raise SystemExit("unknown model or group %r (see --list)" % s)
    seen = set()
    return [n for n in out if not (n in seen or seen.add(n))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="resnet18, mobilenet_v3_small, vit_tiny, bert_mini")
    ap.add_argument("--models", help="names and groups, comma separated (default: all)")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of timed calls per engine and thread count (default 3; --quick 1)")
    ap.add_argument("--min-runs", type=int, default=None, help="timed rounds at least (default 5; --quick 3)")
    ap.add_argument("--max-runs", type=int, default=200)
    ap.add_argument("--mem-runs", type=int, default=None, help="calls in a memory step (default 2; --quick 1)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per step")
    ap.add_argument("--jobs", type=int, default=1, help="prepare steps at once")
    ap.add_argument("--quiet-wait", type=float, default=None,
                    help="before timing, wait up to this many seconds for other processes to go "
                         "idle (default 30; --quick 5)")
    ap.add_argument("--work", default=os.environ.get("COIL_BENCH_WORK") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "coil-bench"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--name", help="report file name stem (default models, --quick models-quick)")
    ap.add_argument("--coil", default=os.environ.get("COIL") or os.path.join(ROOT, "build", "coil"))
    ap.add_argument("--commit", help="the commit --coil was built from, for the report (default: this "
                    "checkout's HEAD; give it when --coil is a copy kept from an earlier build)")
    ap.add_argument("--server", help="compile on this coild instead of in-process")
    ap.add_argument("--force", action="store_true", help="redo every step")
    ap.add_argument("--no-ort", dest="ort", action="store_false",
                    help="time without ONNX Runtime (it needs onnxruntime-node: bench/dynamic/README.md)")
    ap.add_argument("--accept-stale", action="store_true",
                    help="keep results made with another coil build or settings (finish a long run)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--memory-only", action="store_true", help="prepare and the memory steps, no timing")
    ap.add_argument("--accuracy-only", action="store_true",
                    help="only prepare: compile and check each model against eager, no timing")
    ap.add_argument("--keep-files", action="store_true", help="keep weights/io files of finished models")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    if a.list:
        for n, g in zoo.all_models():
            print("%-32s %s%s" % (n, g, "  (quick)" if n in zoo.QUICK else ""))
        return 0
    if a.budget is None:
        a.budget = 1.0 if a.quick else 3.0
    if a.quiet_wait is None:
        a.quiet_wait = 5.0 if a.quick else 30.0
    if a.min_runs is None:
        a.min_runs = 3 if a.quick else 5
    if a.mem_runs is None:
        a.mem_runs = 1 if a.quick else 2
    models = parse_models(a.models, a.quick)
    batches = [int(b) for b in a.batches.split(",")]
    stem = a.name or ("models-quick" if a.quick and not a.models else
                      "models-accuracy" if a.accuracy_only else "models")
    run = Run(a)
    # every model at the first batch size before any at the next: a partial run covers all
    plan = [(m, b) for b in batches for m in models]
    log("%d models x batches %s, threads %s; work %s" % (len(models), a.batches, a.threads, run.work))

    if not a.report_only:
        # 1. prepare (export + compile), --jobs at a time
        def do_prepare(mb):
            m, b = mb
            prep, _, _ = run.steps(m, b)
            if not a.force and prep.cached():
                return  # (files cleaned up since are made again in step 2 if needed)
            lock = Lock(prep.dir)
            if not lock.try_acquire():
                log("%s b%d: busy (another run holds it)" % (m, b))
                return
            try:
                rec = prep.execute()
                r = rec["result"]
                what = ("FAILED: " + str(r.get("error"))[:200] if not r.get("ok") else
                        "ok, matches eager (%.1e)" % r["rel_err"] if r.get("pass") else
                        "ok, MISMATCH (%.1e)" % r.get("rel_err", float("nan")))
                log("%s b%d: prepare %s (%.0f s)" % (m, b, what, rec["wall_s"]))
            finally:
                lock.release()
        if a.jobs > 1 or a.accuracy_only:
            with concurrent.futures.ThreadPoolExecutor(max(1, a.jobs)) as ex:
                list(ex.map(do_prepare, plan))
        # 2. timing and memory, one at a time
        for m, b in ([] if a.accuracy_only else plan):
            prep, lat, mems = run.steps(m, b)
            lock = Lock(prep.dir)
            if not lock.try_acquire():
                log("%s b%d: busy (another run holds it)" % (m, b))
                continue
            try:
                if a.jobs <= 1 and (a.force or not prep.cached()):
                    lock.release()
                    do_prepare((m, b))  # one model at a time: prepare, then time it
                    lock = Lock(prep.dir)
                    if not lock.try_acquire():
                        continue
                p = prep.cached()
                ok = bool(p and p["result"].get("ok"))
                if ok and not _prepared_files_ok(prep):
                    need = [s for s in ([] if a.memory_only else [lat]) + ([] if a.no_memory else mems[2:])
                            if a.force or not s.cached()]
                    if need:  # weights were cleaned up but a coil step must run again
                        p = prep.execute()
                        ok = bool(p["result"].get("ok"))
                steps = ([] if a.memory_only else [lat]) + ([] if a.no_memory else mems if ok else mems[:2])
                for s in steps:
                    if not a.force and s.cached():
                        continue
                    rec = s.execute(quiet_wait=a.quiet_wait if s.name.startswith("latency") else 0)
                    log("%s b%d: %s %s (%.0f s)" % (m, b, s.name, _summary(s.name, rec["result"]), rec["wall_s"]))
                if ok and not a.keep_files and all(s.cached() for s in ([] if a.memory_only else [lat]) + mems[2:]):
                    for fn in ("weights.safetensors", "io.safetensors"):
                        try:
                            os.unlink(os.path.join(prep.dir, fn))
                        except OSError:
                            pass
            finally:
                lock.release()

    import report
    rows = []
    for m, b in sorted(plan, key=lambda mb: (models.index(mb[0]), mb[1])):
        prep, lat, mems = run.steps(m, b)
        if a.accuracy_only:
            rows.append(report.collect(m, zoo.group_of(m), b, prep.cached(), None, {}))
        else:
            rows.append(report.collect(m, zoo.group_of(m), b, prep.cached(), lat.cached(),
                                       {e: s.cached() for e, s in zip(ENGINES, mems)}))
    settings = {"batches": batches, "threads": [int(t) for t in a.threads.split(",")],
                "budget_s": a.budget, "min_runs": a.min_runs, "max_runs": a.max_runs,
                "quick": a.quick, "models": len(models), "subset": bool(a.models), "server": a.server,
                "accuracy_only": a.accuracy_only, "accept_stale": a.accept_stale, "commit": a.commit}
    paths = report.write(rows, settings, a.results, stem, run.coil)
    for p in paths:
        log("wrote %s" % os.path.relpath(p, os.getcwd()))
    return 0


def _prepared_files_ok(prep):
    r = (prep.cached() or {}).get("result", {})
    if not r.get("ok"):
        return True
    return (os.path.exists(os.path.join(prep.dir, "weights.safetensors")) and
            os.path.exists(os.path.join(prep.dir, "io.safetensors")) and
            os.path.exists(r.get("artifact", "")))


def _summary(name, r):
    if r.get("error"):
        return "FAILED: " + str(r["error"])[:200]
    if name.startswith("latency"):
        parts = []
        for t, e in sorted(r.get("threads", {}).items()):
            ms = {k: v.get("median_ms") for k, v in e.items()}
            s = "%sT eager %.2f ms" % (t, ms.get("eager") or 0)
            if ms.get("torchscript"):
                s += ", ts %.2f" % ms["torchscript"]
            if ms.get("ort"):
                s += ", ort %.2f" % ms["ort"]
            if ms.get("coil"):
                s += ", coil %.2f (%.2fx eager%s)" % (ms["coil"], ms["eager"] / ms["coil"],
                                                    ", %.2fx ort" % (ms["ort"] / ms["coil"]) if ms.get("ort") else "")
            parts.append(s)
        extra = "" if "pass" not in r else (" pass" if r["pass"] else " MISMATCH %.2e" % r.get("coil_rel_err", -1))
        return "; ".join(parts) + extra
    if "peak_mb" in r:
        return "peak %.0f MiB" % r["peak_mb"]
    return "ok"


if __name__ == "__main__":
    sys.exit(main())
