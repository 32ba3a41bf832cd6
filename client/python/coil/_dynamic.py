"""The callable coil.compile returns: picks, compiles and recompiles artifacts the way
torch.compile does (docs/python.md).

  * artifacts are kept per call signature (number of inputs, dtypes, ranks); an artifact
    takes a call when its static dims equal the inputs' sizes and its symbols bind
    consistently and within their ranges (a static artifact for the exact shape is preferred);
  * dynamic=None: the first artifact is static; a call whose sizes differ recompiles once with
    the dims that changed made symbolic (dims of the same old and new sizes share a symbol;
    dim 0 of every input together is "batch"), and every later size reuses it; another dim
    changing later makes one more. dynamic=True: every dim symbolic from the start (but for
    sizes 0/1 and dims the module rejects at another size); dynamic=False: an artifact per
    shape. A dim that cannot be symbolic (the export names it: a branch on its size) stays
    static and the call gets a static artifact;
  * an artifact's guard failure (the run error names a "guard": a size outside a range or
    an assumption of the compiled code) compiles a static artifact for that shape;
  * every compile after the first is a recompile: beyond recompile_limit a CoilError
    (stage "recompile"), or with fallback="eager" the module itself runs (warned once);
  * the symbolic dims chosen for a module are stored in the cache dir
    (python/dynamic/<key>.json, key: SHA-256 of the module's class, its state_dict names,
    shapes and dtypes, and the inputs' count, ranks and dtypes) and, when compiles go to a
    coild (server=URL), on it (POST /v1/decisions/<key>, merged with what other clients
    stored), so a later process, here or on another machine, compiles the symbolic artifact
    at its first call; that graph being the same, the artifact cache answers it.
Compiles run under a lock; calls run concurrently (each on its own model handle)."""
import hashlib
import json
import os
import threading
import warnings

import torch

from ._errors import CoilError

PERSIST_VERSION = 1


def default_cache_dir(cache_dir=None):
    """The artifact cache the CLI uses: cache_dir, $COIL_CACHE_DIR, $XDG_CACHE_HOME/coil (an
    absolute XDG_CACHE_HOME only), ~/.cache/coil."""
    if cache_dir:
        return cache_dir
    d = os.environ.get("COIL_CACHE_DIR")
    if d:
        return d
    x = os.environ.get("XDG_CACHE_HOME")
    if x and x.startswith("/"):
        return os.path.join(x, "coil")
    return os.path.join(os.path.expanduser("~"), ".cache", "coil")


def module_key(module, inputs):
    """What the persisted decision is keyed by (see the module doc)."""
    h = hashlib.sha256()
    cls = type(module)
    state = [[k, list(v.shape), str(v.dtype)] for k, v in module.state_dict().items()
             if isinstance(v, torch.Tensor)]  # a reference quantized module also holds its qscheme
    ins = [[x.dim(), str(x.dtype)] for x in inputs]
    h.update(json.dumps({"v": PERSIST_VERSION, "class": "%s.%s" % (cls.__module__, cls.__qualname__),
                         "state": state, "inputs": ins}, sort_keys=True).encode())
    return h.hexdigest()


class _Entry:
    __slots__ = ("compiled", "sig", "shape", "ranges", "symbolic")

    def __init__(self, compiled, sig, shape, ranges):
        self.compiled = compiled
        self.sig = sig
        self.shape = shape            # per input: [int or symbol]
        self.ranges = ranges          # {symbol: (lo, hi)}
        self.symbolic = any(isinstance(d, str) for s in shape for d in s)

    def mismatch(self, shapes):
        """[] when this artifact takes these shapes, else [(input, dim, expected, got)]."""
        out = []
        bound = {}
        for i, (want, got) in enumerate(zip(self.shape, shapes)):
            for d, (w, g) in enumerate(zip(want, got)):
                if isinstance(w, str):
                    b = bound.setdefault(w, g)
                    lo, hi = self.ranges.get(w, (None, None))
                    if b != g or (lo is not None and g < lo) or (hi is not None and g > hi):
                        out.append((i, d, w, g))
                elif w != g:
                    out.append((i, d, w, g))
        return out


def _sig(inputs):
    return (len(inputs), tuple(x.dtype for x in inputs), tuple(x.dim() for x in inputs))


class DynamicModule:
    """Call it like the module. stats() says what happened; the attributes of the artifact in
    use last (artifact, graph, info, model, target, memory_bytes, ...) are reachable on it."""

    def __init__(self, module, example_inputs=None, dynamic=None, dynamic_batch=False, ranges=None,
                 recompile_limit=8, fallback=None, persist=True, compile_opts=None):
        # an explicit spec ({input: {dim: name}}, [(input, dim, name)], "batch") is the first
        # compile's symbolic dims; afterwards as dynamic=None
        self._initial = True if dynamic is True else None
        if dynamic not in (None, True, False):
            if not isinstance(dynamic, (dict, list, tuple, str)):
                raise CoilError("dynamic must be None, True, False or a spec of symbolic dims, not %r"
                                % (dynamic,), stage="compile")
            self._initial = dynamic
            dynamic = None
        if fallback not in (None, "eager"):
            raise CoilError("fallback must be None or 'eager', not %r" % (fallback,), stage="compile")
        self.module = module
        self.dynamic = dynamic
        self.dynamic_batch = dynamic_batch
        self.ranges = dict(ranges or {})
        self.recompile_limit = recompile_limit
        self.fallback = fallback
        self.persist = persist and dynamic is None
        self.opts = dict(compile_opts or {})
        self._lock = threading.RLock()
        self._count_lock = threading.Lock()
        self._entries = []            # replaced, never mutated: readers need no lock
        self._symbolic = {}           # (input, dim) -> symbol, decided so far
        self._static = set()          # (input, dim) that cannot be symbolic
        self._warned = False
        self._last = None
        self._stats = {"calls": 0, "compiles": 0, "cache_hits": 0, "exports": 0, "recompiles": 0,
                       "recompile_reasons": [], "fallback_calls": 0, "guard_failures": 0,
                       "decision": None}
        if example_inputs is not None:
            ins = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
            self._check(ins)
            with self._lock:
                self._compile_for(ins, reasons=None)

    # ---------------------------------------------------------------- calls
    def _check(self, inputs):
        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                raise CoilError("input %d is a %s; a coil-compiled module takes tensors" % (
                    i, type(x).__name__), stage="run")
            if x.device.type != "cpu":
                raise CoilError("input %d is on %s; coil runs on the CPU (move it with .cpu())" % (
                    i, x.device), stage="run")

    def _find(self, inputs):
        sig = _sig(inputs)
        shapes = [tuple(x.shape) for x in inputs]
        best = None
        for e in self._entries:
            if e.sig == sig and not e.mismatch(shapes):
                if not e.symbolic:
                    return e
                best = best or e
        return best

    def _count(self, key, n=1):
        with self._count_lock:
            self._stats[key] += n

    def __call__(self, *inputs):
        self._check(inputs)
        self._count("calls")
        e = self._find(inputs)
        if e is None:
            with self._lock:
                e = self._find(inputs)
                if e is None:
                    e = self._recompile(inputs)
            if e is None:
                return self._eager(inputs)
        try:
            out = e.compiled(*inputs)
        except CoilError as err:
            if not (e.symbolic and "guard" in str(err)):
                raise
            self._count("guard_failures")
            with self._lock:
                e2 = self._find(inputs)
                if e2 is None or e2 is e:
                    e2 = self._recompile(inputs, guard=(e, str(err)))
            if e2 is None:
                return self._eager(inputs)
            out = e2.compiled(*inputs)
            e = e2
        self._last = e
        return out

    def _eager(self, inputs):
        self._count("fallback_calls")
        with torch.no_grad():
            return self.module(*inputs)

    # ---------------------------------------------------------------- (re)compiling
    def _reasons(self, inputs):
        """What differs from the closest artifact: [{input, dim, old, new}] or a dtype/rank
        change."""
        sig = _sig(inputs)
        same = [e for e in self._entries if e.sig == sig]
        shapes = [tuple(x.shape) for x in inputs]
        if same:
            e = min(same, key=lambda e: len(e.mismatch(shapes)))
            return [{"input": i, "dim": d, "old": w, "new": g} for i, d, w, g in e.mismatch(shapes)], e
        if self._entries:
            e = self._entries[-1]
            out = []
            for i, x in enumerate(inputs):
                if i >= e.sig[0]:
                    out.append({"input": i, "new_input": True})
                    continue
                if e.sig[1][i] != x.dtype:
                    out.append({"input": i, "dtype": [str(e.sig[1][i]).replace("torch.", ""),
                                                      str(x.dtype).replace("torch.", "")]})
                if e.sig[2][i] != x.dim():
                    out.append({"input": i, "rank": [e.sig[2][i], x.dim()]})
            if len(inputs) != e.sig[0]:
                out.append({"inputs": [e.sig[0], len(inputs)]})
            return out, None
        return [], None

    def _new_symbols(self, inputs, changed, closest):
        """Names for the changed dims: dims with the same old and new sizes share one; dim 0
        of every input together is "batch"."""
        groups = {}
        for r in changed:
            k = (r["input"], r["dim"])
            if k in self._static:
                continue
            old = r["old"]
            if isinstance(old, str):  # a symbol bound inconsistently: split it
                old = ("split", old)
            groups.setdefault((old, r["new"]), []).append(k)
        used = set(self._symbolic.values())
        ranked = [(i, 0) for i, x in enumerate(inputs) if x.dim() > 0]
        out = {}
        n = 0
        for members in groups.values():
            if "batch" not in used and sorted(members) == sorted(ranked) and ranked:
                name = "batch"
            else:
                while "s%d" % n in used:
                    n += 1
                name = "s%d" % n
            used.add(name)
            for k in members:
                out[k] = name
        return out

    def _persist_path(self, inputs):
        d = os.path.join(default_cache_dir(self.opts.get("cache_dir")), "python", "dynamic")
        return os.path.join(d, module_key(self.module, inputs) + ".json")

    def _server_decision(self, inputs, body=None):
        """GET (body None) or POST this module's decision on the coild compiles go to; the
        stored (merged) decision, or None (no server, none stored, or unreachable)."""
        server = self.opts.get("server")
        if not server:
            return None
        import urllib.error
        import urllib.request
        url = "%s/v1/decisions/%s" % (server.rstrip("/"), module_key(self.module, inputs))
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        token = os.environ.get("COIL_TOKEN")
        if token:
            headers["Authorization"] = "Bearer " + token
        req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     headers=headers, method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.loads(r.read().decode())
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def _decision_dims(self, j, inputs):
        if not isinstance(j, dict) or j.get("version") != PERSIST_VERSION:
            return {}
        out = {}
        for i, d, s in j.get("symbolic", []):
            if 0 <= i < len(inputs) and 0 <= d < inputs[i].dim() and str(s).isidentifier():
                out[(i, d)] = s
        return out

    def _load_decision(self, inputs):
        """The recorded decision: the cache dir's, else the server's (another process or
        machine of the fleet made it); stats()["decision"] says which."""
        try:
            with open(self._persist_path(inputs)) as f:
                out = self._decision_dims(json.load(f), inputs)
            if out:
                self._stats["decision"] = "cache_dir"
                return out
        except (OSError, ValueError, TypeError):
            pass
        out = self._decision_dims(self._server_decision(inputs), inputs)
        if out:
            self._stats["decision"] = "server"
        return out

    def _save_decision(self, inputs):
        if not self.persist or not self._symbolic:
            return
        p = self._persist_path(inputs)
        doc = {"version": PERSIST_VERSION, "module": type(self.module).__qualname__[:200],
               "symbolic": [[i, d, s] for (i, d), s in sorted(self._symbolic.items())]}
        try:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            tmp = "%s.%d.%d.tmp" % (p, os.getpid(), threading.get_ident())
            with open(tmp, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, p)
        except OSError:
            pass  # a cache dir we cannot write: the decision is not remembered here
        self._server_decision(inputs, doc)  # for the fleet (best effort)

    def _recompile(self, inputs, guard=None):
        """Compile an artifact for these inputs (lock held); None: run eagerly."""
        first = not self._entries
        reasons, closest = self._reasons(inputs)
        if guard is not None:
            reasons = [{"guard": guard[1]}]
        if not first:
            if self._stats["recompiles"] >= self.recompile_limit:
                last = reasons[-1] if reasons else {}
                if self.fallback == "eager":
                    if not self._warned:
                        self._warned = True
                        warnings.warn("coil: recompile limit (%d) reached (last reason: %s); running "
                                      "the module eagerly for inputs no compiled artifact takes" % (
                                          self.recompile_limit, _reason_text(last)), stacklevel=3)
                    return None
                raise CoilError("recompile limit (%d) reached: the inputs changed again (%s); raise "
                                "recompile_limit, use dynamic=True, or fallback='eager'" % (
                                    self.recompile_limit, _reason_text(last)), stage="recompile")
            self._count("recompiles")
            with self._count_lock:
                self._stats["recompile_reasons"].extend(reasons or [{"unknown": True}])
        return self._compile_for(inputs, reasons, guard=guard is not None)

    def _compile_for(self, inputs, reasons, guard=False):
        symbolic = None
        if guard or self.dynamic is False:
            symbolic = {}
        else:
            if not self._entries:
                # the first compile
                if self.persist and self._initial is None:
                    self._symbolic.update(self._load_decision(inputs))
                if self.dynamic_batch:
                    for i, x in enumerate(inputs):
                        if x.dim() > 0:
                            self._symbolic.setdefault((i, 0), "batch")
            changed = [r for r in (reasons or []) if "dim" in r]
            if changed:
                self._symbolic.update(self._new_symbols(inputs, changed, None))
                self._save_decision(inputs)
            symbolic = {k: s for k, s in self._symbolic.items()
                        if k[0] < len(inputs) and k[1] < inputs[k[0]].dim() and k not in self._static}
        first = not self._entries
        return self._build(inputs, symbolic, initial=self._initial if (first and not guard) else None)

    def _build(self, inputs, symbolic, initial=None):
        """initial: True or an explicit spec for the first compile (the export names the
        dims), else None: `symbolic` {(input, dim): name}."""
        from . import compile_artifact
        auto = initial is True
        spec = [(i, d, s) for (i, d), s in sorted(symbolic.items())]
        ranges = {s: r for s, r in self.ranges.items() if s in symbolic.values()}
        if initial is not None and not auto:
            self._count("exports")
            cm = compile_artifact(self.module, inputs, dynamic=initial, ranges=self.ranges or None,
                                  **self.opts)
            return self._add(cm, inputs, record=True)
        for _ in range(8):
            dyn = True if auto else (spec or None)
            try:
                self._count("exports")
                # (ranges name symbols: with dynamic=True the names are chosen by the export)
                cm = compile_artifact(self.module, inputs, dynamic=dyn,
                                      ranges=None if auto else (ranges or None), **self.opts)
                break
            except CoilError as e:
                syms = getattr(e, "symbols", None)
                if not syms or (not spec and not auto):
                    raise
                # those dims cannot be symbolic (a branch on their size): keep them static
                if auto:
                    # which dims the auto export chose is not known: keep only the batch
                    auto = False
                    spec = [(i, 0, "batch") for i, x in enumerate(inputs) if x.dim() > 0 and x.shape[0] > 1]
                drop = [(i, d) for i, d, s in spec if s in syms]
                if not drop and not spec:
                    raise
                self._static.update(drop)
                for k in drop:
                    self._symbolic.pop(k, None)
                spec = [(i, d, s) for i, d, s in spec if (i, d) not in drop]
                ranges = {s: r for s, r in ranges.items() if s not in syms}
        else:
            raise CoilError("could not find dims to make symbolic for %s" % type(self.module).__name__,
                            stage="export")
        return self._add(cm, inputs, record=auto)

    def _add(self, cm, inputs, record):
        """Keep the new artifact; record: take its symbolic dims as decided."""
        if cm.info.get("hit"):
            self._count("cache_hits")
        else:
            self._count("compiles")
        graph_shapes = [list(i["shape"]) for i in cm.graph["inputs"]]
        rng = {}
        for s, r in (cm.graph.get("symbols") or {}).items():
            rng[s] = (r.get("min"), r.get("max"))
        if record:
            for (i, d) in [(i, d) for i, sh in enumerate(graph_shapes) for d, v in enumerate(sh)
                           if isinstance(v, str)]:
                self._symbolic[(i, d)] = graph_shapes[i][d]
        e = _Entry(cm, _sig(inputs), graph_shapes, rng)
        # an artifact whose shapes another covers is dropped
        keep = [x for x in self._entries
                if not (x.sig == e.sig and e.symbolic and _covers(e, x))]
        self._entries = keep + [e]
        self._last = e
        return e

    # ---------------------------------------------------------------- introspection
    def stats(self):
        with self._count_lock:
            s = dict(self._stats)
            s["recompile_reasons"] = list(self._stats["recompile_reasons"])
        s["artifacts"] = len(self._entries)
        s["symbolic"] = [{"input": i, "dim": d, "symbol": v} for (i, d), v in sorted(self._symbolic.items())]
        s["static_dims"] = sorted([list(k) for k in self._static])
        s["memory"] = None  # bytes the artifacts' handles hold (Model.memory), summed
        for e in list(self._entries):
            mem = e.compiled.model.memory()
            if mem is not None:
                s["memory"] = {k: v + (s["memory"] or {}).get(k, 0) for k, v in mem.items()}
        return s

    @property
    def compiled(self):
        """The CompiledModule used last (or compiled last)."""
        e = self._last or (self._entries[-1] if self._entries else None)
        if e is None:
            raise CoilError("nothing compiled yet: call the module first", stage="compile")
        return e.compiled

    @property
    def artifacts(self):
        return [e.compiled for e in self._entries]

    def __getattr__(self, name):
        if name.startswith("_") and name != "_spec":
            raise AttributeError(name)
        return getattr(self.compiled, name)

    def close(self):
        for e in self._entries:
            e.compiled.close()


def _covers(general, specific):
    """Whether the symbolic entry `general` takes every shape `specific` takes."""
    for a, b in zip(general.shape, specific.shape):
        if len(a) != len(b):
            return False
        for x, y in zip(a, b):
            if isinstance(x, str):
                if isinstance(y, str):
                    continue
                lo, hi = general.ranges.get(x, (None, None))
                if (lo is not None and y < lo) or (hi is not None and y > hi):
                    return False
            elif x != y:
                return False
    # symbols of `general` must bind consistently on specific's static sizes
    bound = {}
    for a, b in zip(general.shape, specific.shape):
        for x, y in zip(a, b):
            if isinstance(x, str) and not isinstance(y, str):
                if bound.setdefault(x, y) != y:
                    return False
    return True


def _reason_text(r):
    if not r:
        return "none"
    if "guard" in r:
        return "guard failed: %s" % r["guard"]
    if "dim" in r:
        return "dim %d of input %d changed from %s to %s" % (r["dim"], r["input"], r["old"], r["new"])
    if "dtype" in r:
        return "input %d's dtype changed from %s to %s" % (r["input"], r["dtype"][0], r["dtype"][1])
    if "rank" in r:
        return "input %d's rank changed from %d to %d" % (r["input"], r["rank"][0], r["rank"][1])
    return json.dumps(r)
