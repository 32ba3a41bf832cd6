"""coil for PyTorch users: one call from an nn.Module to a compiled CPU callable.

    import coil
    fast = coil.compile(model, (x,))            # export, compile (local cache), load
    y = fast(x)                                 # torch tensors in, torch tensors out
    fast = coil.compile(model, (x,), server="http://127.0.0.1:8470")   # compile on a coild

compile(module, example_inputs, server=None, target="native", threads=None, ...)
    1. exports `module` at ATen level with client/python/coil_export.py (make_fx; the module
       is put in eval mode), checking its ops against `coil info --ops`; an aten.as_strided
       that only restrides a contiguous tensor (ConvNeXt's pooling) becomes a view, and an
       op coil lacks whose value depends on no input (Swin's attention masks, gathered
       relative position biases) is evaluated now and becomes a constant (freezing);
    2. compiles the graph with the `coil` CLI (`$COIL`, else the repo's build/coil, else
       `coil` on PATH): in-process into the local cache, or on a coild when `server` is given
       (fetched into the local cache, sha256-verified);
    3. loads the artifact with ctypes over the artifact ABI (include/coil/artifact.h),
       refusing one built for a target this CPU cannot run, and binds the params (graph order).
    The result takes the same positional tensors as the module and returns what the module
    returns (the same nesting of tuples/lists/dicts). Inputs are passed to the artifact by
    pointer (a non-contiguous input is made contiguous first) and outputs are allocated with
    torch.empty and filled in place: no copies. It may be called from many threads at once
    (each concurrent call uses its own coil model handle). `threads` is the OpenMP thread
    count of each call (None: OpenMP's default).
    Sizes follow torch.compile's habits (coil/_dynamic.py, docs/python.md): example_inputs may
    be left out (compiled at the first call); dynamic=None compiles static first and, when a
    later call changes a size, once more with the dims that changed symbolic; dynamic=True
    makes every dim symbolic that can be; dynamic=False compiles one artifact per shape;
    dynamic_batch=True makes dim 0 of every input the symbol "batch" from the start. At most
    recompile_limit (8) recompiles, then a CoilError (stage "recompile") or, with
    fallback="eager", the module itself. .stats() counts compiles, cache hits, recompiles
    (with reasons), artifacts, calls and fallback calls.

compile_artifact(module, example_inputs, ..., dynamic=SPEC, ranges=...) compiles one artifact
now and returns its CompiledModule; SPEC as for export_graph (coil_symbolic's spec: True,
"batch", {input: dims or {dim: name}}, [(input, dim[, name])]).

load(artifact_path, params, threads=None) binds an artifact built earlier (`coil compile`)
to params given in graph order.

Errors: UnsupportedError (a CoilError) names the op, node or argument coil cannot handle;
CoilError covers everything else; `.stage` says where ("trace", "export", "compile",
"load", "run", "recompile")."""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import torch

from ._errors import CoilError, UnsupportedError
from ._abi import Artifact, Model
from . import _sign, _targets
from ._targets import best_target, runs_here, TARGETS

__all__ = ["compile", "compile_artifact", "quantize", "load", "export_graph", "CompiledModule", "CoilError", "UnsupportedError",
           "Artifact", "Model", "best_target", "runs_here", "coil_cli", "TARGETS"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_PYDIR = os.path.dirname(_HERE)
_ROOT = os.path.dirname(os.path.dirname(_PYDIR))


def _exporter():
    if _PYDIR not in sys.path:
        sys.path.insert(0, _PYDIR)
    import coil_export
    return coil_export


def coil_cli(coil=None):
    """Path of the coil CLI: `coil`, else $COIL, else the repo's build/coil, else PATH."""
    for c in (coil, os.environ.get("COIL"), os.path.join(_ROOT, "build", "coil")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    c = shutil.which("coil")
    if c:
        return c
    raise CoilError("the coil CLI was not found: set $COIL or build it (make) in %s" % _ROOT)


_UNSUPPORTED_RE = re.compile(r"unknown op|not supported|unsupported|cannot express", re.I)


def _compile_cli(graph_path, server=None, target="native", coil=None, cache_dir=None,
                 timeout=None, opt=None, precision=None, mode=None, threads=None):
    """Runs `coil [--server URL] compile GRAPH --target T`; returns a dict with
    artifact, key, target, sha256, hit, compile_ms."""
    cmd = [coil_cli(coil)]
    if server:
        cmd += ["--server", server]
    cmd += ["compile", graph_path, "--target", target or "native"]
    if opt is not None:
        cmd += ["--opt", str(opt)]
    if precision:
        cmd += ["--precision", precision]
    if mode and mode != "default":
        cmd += ["--mode", mode]
        if threads:
            cmd += ["--threads", str(threads)]  # tuned for the threads it will run on
    env = dict(os.environ)
    if cache_dir:
        env["COIL_CACHE_DIR"] = cache_dir
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CoilError("coil compile timed out after %s s" % timeout, stage="compile") from None
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace").strip()
    if p.returncode != 0:
        msg = err.splitlines()[-1] if err else "coil compile failed (exit %d)" % p.returncode
        if msg.startswith("coil: "):
            msg = msg[len("coil: "):]
        # the CLI prefixes the graph's path: keep the part that names node/op/field
        if msg.startswith(graph_path + ": "):
            msg = msg[len(graph_path) + 2:]
        if _UNSUPPORTED_RE.search(msg):
            raise UnsupportedError("coil cannot compile this graph: " + msg, stage="compile")
        raise CoilError("coil compile: " + msg, stage="compile")
    info = {}
    for line in out.splitlines():
        m = re.match(r"^artifact (.+) \((\d+) bytes, sha256 ([0-9a-f]{64})\)$", line)
        if m:
            info["artifact"], info["size"], info["sha256"] = m.group(1), int(m.group(2)), m.group(3)
            continue
        m = re.match(r"^(key|target|signature) (\S+)$", line)
        if m:
            info[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^autotune (.+)$", line)
        if m:
            info["autotune"] = m.group(1)
            continue
        m = re.match(r"^(server: )?(cache hit|compiled) in ([0-9.]+) ms$", line)
        if m:
            info["hit"] = m.group(2) == "cache hit"
            info["compile_ms"] = float(m.group(3))
    if "artifact" not in info:
        raise CoilError("coil compile printed no artifact path:\n" + out + err, stage="compile")
    return info


class CompiledModule:
    """What compile() and load() return: call it like the module."""

    def __init__(self, model, treespec=None, info=None, graph=None):
        self.model = model
        self.artifact = model.artifact
        self._spec = treespec
        self.info = dict(info or {})
        self.graph = graph

    @property
    def artifact_path(self):
        return self.artifact.path

    @property
    def target(self):
        return self.artifact.target

    def __call__(self, *inputs):
        try:
            outs = self.model(*inputs)
        except CoilError as e:
            if self.graph is None:
                raise
            raise CoilError(_named(str(e), self.graph), stage=e.stage) from None
        if isinstance(self._spec, _OutSpec):
            return self._spec.unflatten(outs)
        if self._spec is not None:
            return torch.utils._pytree.tree_unflatten(outs, self._spec)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def profile(self, *inputs, runs=10, repeat=1):
        """Each kernel's time, bytes and flops per call over runs calls (Model.profile; repeat > 1:
        each kernel's fastest of that many laps in a row, its time with its inputs in cache)."""
        return self.model.profile(*inputs, runs=runs, repeat=repeat)

    def memory_bytes(self, inputs):
        """describe's arena for these inputs' shapes plus the params coil holds (bytes)."""
        syms = {}
        for x, (_, shape) in zip(inputs, self.artifact.inputs):
            for d, v in zip(shape, x.shape):
                if isinstance(d, str) and re.fullmatch(r"s\d+", d):
                    syms.setdefault(d, int(v))
        arena = self.artifact.arena_bytes(syms)
        return (arena or 0) + self.artifact.param_bytes()

    def close(self):
        self.model.close()


def _named(msg, graph):
    """An artifact's message names inputs by position and symbols as s0, s1, ... (no string
    of the graph is in the artifact): put the graph's names back."""
    names = [i["name"] for i in graph.get("inputs", [])]
    syms = []
    for i in graph.get("inputs", []):
        for d in i.get("shape", []):
            if isinstance(d, str) and d not in syms:
                syms.append(d)
    msg = re.sub(r"\binput (\d+) dim", lambda m: "input %r dim" % names[int(m.group(1))]
                 if int(m.group(1)) < len(names) else m.group(0), msg)
    return re.sub(r"\bs(\d+)\b", lambda m: syms[int(m.group(1))] if int(m.group(1)) < len(syms)
                  else m.group(0), msg)


def _as_tuple(x):
    if isinstance(x, torch.Tensor):
        return (x,)
    return tuple(x)


def _contiguous_strides(shape, stride):
    """True when `stride` is row-major for `shape`, ignoring dims of size 1."""
    expect = 1
    for d, st in zip(reversed(list(shape)), reversed(list(stride))):
        if d != 1 and st != expect:
            return False
        expect *= d
    return True


def _restrides_to_views(gm):
    """ATen sometimes restrides a result in place without moving data, and make_fx records
    that as aten.as_strided: adaptive_avg_pool2d to 1x1 on a channels-last input (ConvNeXt)
    gives as_strided(mean, [N, C, 1, 1], [C, 1, C, C]). When the input is contiguous, the
    new strides are row-major for the new size (dims of size 1 aside), the element count is
    the same and the storage offset is the input's own, the result holds exactly the values
    of view(x, size): rewrite it so. Returns the number of nodes rewritten."""
    n_done = 0
    for n in gm.graph.nodes:
        if n.op != "call_function" or str(n.target) != "aten.as_strided.default":
            continue
        args = list(n.args)
        if len(args) < 3 or (len(args) > 3 and args[3] is not None) or \
                n.kwargs.get("storage_offset") is not None:
            continue
        x, size, stride = args[0], args[1], args[2]
        tm = x.meta.get("tensor_meta") if isinstance(x, torch.fx.Node) else None
        if tm is None or not hasattr(tm, "stride"):
            continue
        if not all(isinstance(v, int) for v in list(size) + list(stride)):
            continue
        numel = 1
        for d in size:
            numel *= d
        xnumel = 1
        for d in tm.shape:
            xnumel *= int(d)
        if numel != xnumel or not _contiguous_strides(tm.shape, tm.stride) or \
                not _contiguous_strides(size, stride):
            continue
        n.target = torch.ops.aten.view.default
        n.args = (x, list(size))
        n.kwargs = {}
        n_done += 1
    if n_done:
        gm.recompile()
    return n_done


def _get_attr(gm, target):
    v = gm
    for part in target.split("."):
        v = getattr(v, part)
    return v


_NEW_FACTORIES = ("aten.new_zeros.default", "aten.new_ones.default", "aten.new_full.default",
                  "aten.new_empty.default")


def _is_new_factory(n):
    if str(n.target) not in _NEW_FACTORIES or not n.args:
        return False
    a0 = n.args[0]
    if not isinstance(a0, torch.fx.Node) or getattr(a0.meta.get("tensor_meta"), "dtype", None) is None:
        return False
    found = []
    torch.fx.node.map_arg((n.args[1:], n.kwargs), found.append)
    return not found


def _fold_unsupported(ce, gm, coil_ops):
    """Freezing, where coil lacks an op: a node coil does not support whose value does not
    depend on any input (it is computed from params, buffers, constants and factory ops
    alone: Swin's shifted-window attention mask built with fill/slice_scatter, relative
    position bias tables gathered with index.Tensor in Swin and MaxViT) is evaluated now with
    PyTorch and replaced by its value, which the exporter then carries as a constant or a
    param. compile() binds the module's own params, so this is what torch.jit.freeze does.

    In-place ops that functionalization left (it does not see module state, so Swin V2's
    `bias.clone()[a:b].zero_()` and in-place ReLUs on param-derived tensors stay) are handled
    when every one of them is input-independent: the whole input-independent part of the
    graph is then run in order, every value it hands to the rest of the graph becomes a
    constant, and that part is removed. Nothing is folded when an in-place op depends on an
    input, or when coil's op list is unknown. Returns the number of constants made."""
    import operator
    if not coil_ops:
        return 0
    nodes = list(gm.graph.nodes)
    dep = {}
    for n in nodes:
        if n.op == "get_attr":
            dep[n] = False
        elif n.op == "call_function" and _is_new_factory(n):
            dep[n] = False  # x.new_zeros(size): x gives only dtype and device
        elif n.op == "call_function":
            dep[n] = any(dep.get(a, True) for a in n.all_input_nodes)
        else:
            dep[n] = True
    mutating = [n for n in nodes if n.op == "call_function" and
                isinstance(n.target, torch._ops.OpOverload) and ce._mutates_first_arg(n.target)]
    if any(dep[n] for n in mutating):
        return 0
    vals = {}
    clones = {}

    def value(n):
        if n in vals:
            return vals[n]
        if n.op == "get_attr":
            v = _get_attr(gm, n.target)
            if mutating and isinstance(v, torch.Tensor):
                v = v.detach().clone()  # an in-place op must not touch the module's state
                clones[n] = (v, v._version)
        elif _is_new_factory(n):
            args, kwargs = torch.fx.node.map_arg((n.args[1:], n.kwargs), value)
            proto = torch.empty(0, dtype=n.args[0].meta["tensor_meta"].dtype)
            with torch.no_grad():
                v = n.target(proto, *args, **kwargs)
        else:
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), value)
            with torch.no_grad():
                v = n.target(*args, **kwargs)
        vals[n] = v
        return v

    def unsupported(n):
        if n.target is operator.getitem or not isinstance(n.target, torch._ops.OpOverload):
            return False
        kind, op = ce.normalize_op(n.target)
        return kind == "op" and str(op) not in coil_ops

    made = [0]

    def materialize(n, v):
        name = "_coil_folded_%d" % made[0]
        while hasattr(gm, name):
            name += "_"
        gm.register_buffer(name, v.detach().clone().contiguous())
        with gm.graph.inserting_before(n if n.op != "get_attr" else n.next):
            g = gm.graph.get_attr(name)
        g.meta = dict(n.meta)
        made[0] += 1
        return g

    if not mutating:
        for n in nodes:
            if n.op != "call_function" or dep[n] or not unsupported(n):
                continue
            try:
                v = value(n)
            except Exception:  # noqa: BLE001 (left for the exporter to report)
                continue
            if isinstance(v, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in v) and \
                    all(u.target is operator.getitem for u in n.users):
                # several results (weight norm's (w, norm)): each getitem becomes its value
                for u in list(n.users):
                    g = materialize(u, v[u.args[1]])
                    u.replace_all_uses_with(g)
                    gm.graph.erase_node(u)
                    vals[g] = _get_attr(gm, g.target)
                    dep[g] = False
                gm.graph.erase_node(n)
                continue
            if not isinstance(v, torch.Tensor):
                continue
            g = materialize(n, v)
            n.replace_all_uses_with(g)
            gm.graph.erase_node(n)
            vals[g] = _get_attr(gm, g.target)
            dep[g] = False
    else:
        region = [n for n in nodes if not dep[n] and n.op in ("call_function", "get_attr")]
        try:
            for n in region:  # graph order is execution order: mutations replay as traced
                value(n)
        except Exception:  # noqa: BLE001
            return 0
        frontier = [n for n in region if any(dep[u] for u in n.users)]
        for n in frontier:
            v = vals[n]
            if not isinstance(v, torch.Tensor):
                return 0
        for n in frontier:
            if n.op == "get_attr" and (n not in clones or clones[n][0]._version == clones[n][1]):
                continue  # a param nothing wrote to stays a param
            g = materialize(n, vals[n])
            dep[g] = False
            for u in list(n.users):
                if dep[u]:
                    u.replace_input_with(n, g)
        for n in reversed(region):
            if n.op == "call_function" and not n.users:
                gm.graph.erase_node(n)
    if made[0]:
        gm.recompile()
    return made[0]


def _model_frame(tb):
    """The innermost traceback frame in the model's own code (not torch's, not coil's), as
    'file:line: source', or None."""
    import traceback
    skip = (os.sep + "torch" + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep,
            os.sep + "coil_export.py", os.sep + "coil_symbolic.py", "<")
    for fr in reversed(traceback.extract_tb(tb)):
        if not any(k in fr.filename for k in skip):
            return "%s:%d: %s" % (fr.filename, fr.lineno, (fr.line or "").strip())
    return None


def _trace(ce, module, inputs, coil_ops=None):
    try:
        gm = ce._trace_module(module, inputs, True, True)
    except ce.ExportError:
        raise
    except Exception as e:  # noqa: BLE001
        where = _model_frame(e.__traceback__)
        msg = "%s: %s" % (type(e).__name__, e)
        if "value out of a tracing tensor" in str(e) or "data-dependent" in str(e):
            msg = ("shape logic depends on a tensor's values (Tensor.item(), int(t), a Python branch "
                   "on a tensor): coil compiles shapes, not values")
        raise UnsupportedError("make_fx cannot trace %s at ATen level%s: %s"
                               % (type(module).__name__, " at " + where if where else "", msg),
                               stage="trace") from e
    _restrides_to_views(gm)
    _fold_unsupported(ce, gm, coil_ops)
    return gm


class _OutSpec:
    """An output structure whose leaves are partly constants (None, Python scalars): the
    artifact computes the tensors, the constants are put back where the module had them."""

    def __init__(self, treespec, consts):
        self.treespec, self.consts = treespec, dict(consts)

    def unflatten(self, outs):
        it = iter(outs)
        n = len(outs) + len(self.consts)
        leaves = [self.consts[k] if k in self.consts else next(it) for k in range(n)]
        return torch.utils._pytree.tree_unflatten(leaves, self.treespec)


def export_graph(module, example_inputs, dynamic_batch=False, coil=None, check_ops=True, *,
                 dynamic=None, ranges=None, info=None):
    """(graph dict, {param name: tensor}, output treespec) for module(*example_inputs).

    dynamic: which input dims are symbolic (None: none; True: all that can be; "batch";
    {input: dims or {dim: name}}; [(input, dim[, name])]: see coil_symbolic), ranges:
    {symbol: (min, max)}; dynamic_batch=True is dynamic="batch". info: a dict that gets the
    symbolic export's details."""
    ce = _exporter()
    inputs = _as_tuple(example_inputs)
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            raise CoilError("example input %d is a %s; coil.compile takes tensors" % (
                i, type(t).__name__))
    names = ["x"] if len(inputs) == 1 else ["input%d" % i for i in range(len(inputs))]
    module.eval()
    with torch.no_grad():
        eager = module(*inputs)  # a failure here is the module's own: let it propagate
    flat, spec = torch.utils._pytree.tree_flatten(eager)
    consts = {}
    for k, o in enumerate(flat):
        if isinstance(o, torch.Tensor):
            continue
        if o is not None and not isinstance(o, ce.CONST_OUTPUTS):
            raise UnsupportedError("the module returns a %s (output leaf %d); coil returns tensors, None "
                                   "and Python constants" % (type(o).__name__, k), stage="export")
        consts[k] = o
    coil_ops = None
    if check_ops:
        try:
            coil_ops = ce.coil_supported_ops(coil_cli(coil))
        except CoilError:
            coil_ops = None
    try:
        dspec = ce.resolve_dynamic(module, inputs, names, dynamic, dynamic_batch, ranges)
        if dspec:
            graph, params, details = ce.build_symbolic(
                module, inputs, names, dspec, lambda ins: _trace(ce, module, ins, coil_ops), coil_ops)
            if info is not None:
                info.update(details)
        else:
            gm = _trace(ce, module, inputs, coil_ops)
            graph, params = ce.build_graph(gm, module, inputs, names, False, coil_ops)
    except ce.UnsupportedOpsError as e:
        raise UnsupportedError("%s: %s" % (type(module).__name__, e), ops=e.ops,
                               stage="export") from None
    except ce.ExportError as e:
        err = UnsupportedError("cannot export %s: %s" % (type(module).__name__, e), stage="export")
        err.symbols = getattr(e, "symbols", [])
        raise err from None
    if dspec and any(v is not None for v in consts.values()):
        k, v = next((k, v) for k, v in consts.items() if v is not None)
        raise UnsupportedError("the module returns %r (output leaf %d), a constant that may depend on the "
                               "sizes made symbolic; return it as a tensor, or compile static" % (v, k),
                               stage="export")
    if len(graph["outputs"]) != len(flat) - len(consts):
        raise CoilError("traced graph has %d outputs, the eager module %d tensors" % (
            len(graph["outputs"]), len(flat) - len(consts)), stage="export")
    return graph, params, _OutSpec(spec, consts) if consts else spec


def _precision(dtype):
    """The CLI's --precision for compile(dtype=...)."""
    if dtype in (None, torch.float32):
        return None
    if dtype == torch.bfloat16:
        return "bf16"
    raise CoilError("dtype=%s: coil.compile takes None, torch.float32 or torch.bfloat16" % dtype,
                    stage="compile")


def compile_artifact(module, example_inputs, server=None, target="native", threads=None, *,
                     dynamic_batch=False, dynamic=None, ranges=None, cache_dir=None, workdir=None,
                     save_weights=False, coil=None, timeout=None, opt=None, keep_params=True,
                     dtype=None, mode=None, low_memory=False):
    """Export (dynamic: as export_graph), compile and load `module` now: one artifact, a
    CompiledModule. compile() builds on this."""
    precision = _precision(dtype)
    _mode(mode)
    if target not in (None, "native") and target not in TARGETS:
        raise CoilError("unknown target %r (native, %s)" % (target, ", ".join(TARGETS)), stage="compile")
    if target not in (None, "native") and not runs_here(target):
        raise CoilError("target '%s' cannot run on this CPU (best here: %s); compile() loads what it "
                        "builds" % (target, best_target()), stage="load")
    t0 = time.perf_counter()
    details = {}
    graph, params, spec = export_graph(module, example_inputs, dynamic_batch, coil,
                                       dynamic=dynamic, ranges=ranges, info=details)
    return _compile_graph(graph, params, spec, t0, details, server=server, target=target, threads=threads,
                          cache_dir=cache_dir, workdir=workdir, save_weights=save_weights, coil=coil,
                          timeout=timeout, opt=opt, keep_params=keep_params, precision=precision, mode=mode,
                          low_memory=low_memory)


def _mode(mode):
    if mode not in (None, "default", "max-autotune"):
        raise CoilError("mode=%r: coil.compile takes None, \"default\" or \"max-autotune\"" % (mode,),
                        stage="compile")
    return mode


def _compile_graph(graph, params, spec, t0, details, *, server=None, target="native", threads=None,
                   cache_dir=None, workdir=None, save_weights=False, coil=None, timeout=None, opt=None,
                   keep_params=True, precision=None, mode=None, low_memory=False):
    """compile_artifact's second half: an exported graph compiled and loaded."""
    t1 = time.perf_counter()
    ce = _exporter()
    tmp = None
    d = workdir
    if d is None:
        d = tmp = tempfile.mkdtemp(prefix="coil-")
    else:
        os.makedirs(d, exist_ok=True)
    try:
        gpath = os.path.join(d, "graph.json")
        with open(gpath, "w") as f:
            f.write(ce.dumps_graph(graph))
        if save_weights:
            from . import _safetensors
            _safetensors.save(collections.OrderedDict((p["name"], params[p["name"]])
                                                      for p in graph["params"]),
                              os.path.join(d, "weights.safetensors"), metadata={"format": "pt"})
        info = _compile_cli(gpath, server=server, target=target, coil=coil, cache_dir=cache_dir,
                            timeout=timeout, opt=opt, precision=precision, mode=mode, threads=threads)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    t2 = time.perf_counter()
    plist = []
    for p in graph["params"]:
        t = params.get(p["name"])
        if t is None:
            raise CoilError("param %r of the graph has no tensor" % p["name"])
        plist.append(t)
    trusted = _sign.trusted_keys()
    if trusted:
        # the CLI checked it; checked again here, over the digest of the bytes loaded
        _sign.verify(trusted, info.get("key", ""), info["sha256"], info.get("target", ""),
                     info.get("signature"))
    art = Artifact(info["artifact"], sha256=info["sha256"], target=info.get("target"))
    if len(art.inputs) != len(graph["inputs"]) or len(art.outputs) != len(graph["outputs"]):
        raise CoilError("artifact %s does not match the exported graph" % info["artifact"])
    model = Model(art, plist, threads=threads, keep_params=keep_params, low_memory=low_memory)
    info.update(export_s=t1 - t0, compile_s=t2 - t1, load_s=time.perf_counter() - t2,
                workdir=workdir, symbolic=details)
    return CompiledModule(model, spec, info, graph)


def compile(module, example_inputs=None, server=None, target="native", threads=None, *,
            dynamic=None, dynamic_batch=False, ranges=None, recompile_limit=8, fallback=None,
            cache_dir=None, workdir=None, save_weights=False, coil=None, timeout=None, opt=None,
            keep_params=True, persist=True, dtype=None, mode=None, low_memory=False):
    """A callable that runs `module` compiled by coil (see the module doc and docs/python.md).

    example_inputs: compile for them now (None: on the first call).
    dynamic: None (static first; a size that changes later recompiles once with the dims that
        changed made symbolic), True (every dim symbolic from the start where it can be),
        False (one static artifact per distinct shape). dynamic_batch=True: dim 0 symbolic
        ("batch") from the start, then as dynamic=None. ranges: {symbol: (min, max)}.
    recompile_limit: recompiles allowed (8); beyond it a CoilError (stage "recompile"), or with
        fallback="eager" the module runs eagerly for inputs no artifact takes (warned once).
    persist: remember (in the cache dir) which dims went symbolic for this module, so that a
        later process compiles the symbolic artifact at once.
    server: URL of a coild, or a tier list "URL URL ..." nearest first (docs/fleet.md)
        (None: compile in-process through the local cache, or on $COIL_SERVER when that is
        set). target: a coil target name or "native".
    threads: OpenMP threads per call (None: OpenMP's default).
    cache_dir: local artifact cache ($COIL_CACHE_DIR otherwise).
    workdir: keep graph.json there (and weights.safetensors with save_weights=True);
        by default a temporary directory is used and removed.
    keep_params: keep references to the param tensors (the ABI copies them at create;
        False frees them after the first handle, and then one thread at a time may call).
    low_memory: every convolution keeps weights of its own size: no Winograd (whose weights,
        transformed, are 1.8-4x as large, plus its scratch), for a peak memory within eager's;
        slower where Winograd pays (resnet18, batch 1, one thread: 22 -> 33 ms). Set on the
        loaded artifact before its first handle; the compiled artifact is the same.
    dtype: None (as traced: under torch.autocast the graph keeps autocast's casts) or
        torch.bfloat16: coil applies autocast's rules to the f32 graph (convolutions and
        matrix products in bf16, softmax, norms and reductions in f32); inputs and outputs
        keep their dtypes.
    mode: None or "default" (the lowering heuristics choose), or "max-autotune": where more
        than one lowering is valid (a convolution's activation fused into oneDNN or left to
        generated code, Winograd or not, oneDNN's NCHW or NHWC kernel) the compiling machine
        times them at `threads` (None: its CPUs) and builds in the fastest; the artifact is
        cached under a key of its own, so every machine of that CPU kind runs it untuned.
        Static sizes only (a symbolic artifact keeps the heuristics).
    """
    from ._dynamic import DynamicModule
    _precision(dtype)
    _mode(mode)
    if target not in (None, "native") and target not in TARGETS:
        raise CoilError("unknown target %r (native, %s)" % (target, ", ".join(TARGETS)), stage="compile")
    opts = dict(server=server, target=target, threads=threads, cache_dir=cache_dir, workdir=workdir,
                save_weights=save_weights, coil=coil, timeout=timeout, opt=opt, keep_params=keep_params,
                low_memory=low_memory,
                dtype=dtype, mode=mode)
    return DynamicModule(module, example_inputs, dynamic=dynamic, dynamic_batch=dynamic_batch,
                         ranges=ranges, recompile_limit=recompile_limit, fallback=fallback,
                         persist=persist, compile_opts=opts)


def quantize(module, calibration_inputs, example_inputs=None, *, method="histogram", percentile=99.99,
             dynamic=False, server=None, target="native", threads=None, cache_dir=None, workdir=None, coil=None,
             timeout=None, opt=None, keep_params=True):
    """`module` quantized to int8 by coil and compiled: post-training static quantization with no
    PyTorch quantization code (client/python/coil_quant.py).

    calibration_inputs: a list of inputs (each a tensor or a tuple of tensors) the module is run
    on to observe its activations; example_inputs: the shapes to compile for (default: the first
    calibration input). method: "histogram" (ranges between the 0.01/99.99 percentiles; percentile
    sets them) or "minmax". Every convolution and linear layer (nn.Linear's form) coil can run in
    int8 gets u8 activations (per tensor) and s8 weights (per output channel, symmetric), with the
    activations after it fused; the rest stays f32.

    dynamic=True: dynamic quantization, the mode transformer encoders use. Linear layers get s8
    weights (per output channel) and u8 activations quantized at each call from that call's own
    range (min/max, as PyTorch's quantize_dynamic); their outputs stay f32 and convolutions stay
    f32. Nothing is calibrated: calibration_inputs may be None when example_inputs is given.

    The result's .info["quantize"] reports each layer quantized and each left in f32 with the
    reason (a warning lists those); a model with no such layer raises UnsupportedError."""
    import warnings
    _exporter()
    import coil_quant
    calib = [_as_tuple(c) for c in calibration_inputs] if calibration_inputs is not None else []
    if not calib and not (dynamic and example_inputs is not None):
        raise CoilError("coil.quantize needs at least one calibration input%s" % (
            " (or, with dynamic=True, example_inputs)" if dynamic else ""), stage="quantize")
    example = _as_tuple(example_inputs) if example_inputs is not None else calib[0]
    t0 = time.perf_counter()
    graph, params, spec = export_graph(module, example, coil=coil)
    names = [i["name"] for i in graph["inputs"]]
    for k, c in enumerate(calib):
        if len(c) != len(names):
            raise CoilError("calibration input %d has %d tensors, the module takes %d" % (k, len(c), len(names)),
                            stage="quantize")
    calib = _rebatch(calib, example) if not dynamic else []
    try:
        qg, qparams, report = coil_quant.quantize_graph(graph, params, [dict(zip(names, c)) for c in calib],
                                                        method, percentile, dynamic=dynamic)
    except _exporter().ExportError as e:
        raise CoilError("coil.quantize: %s" % e, stage="quantize") from None
    if qg is None:
        why = "; ".join("%s (%s): %s" % (f["node"], f["op"], f["reason"]) for f in report["float"][:6])
        raise UnsupportedError("coil.quantize: no layer of %s can run in int8%s" % (
            type(module).__name__, ": " + why if why else " (it has no convolution or linear layer)"),
            stage="quantize")
    cm = _compile_graph(qg, qparams, spec, t0, {}, server=server, target=target, threads=threads,
                        cache_dir=cache_dir, workdir=workdir, coil=coil, timeout=timeout, opt=opt,
                        keep_params=keep_params)
    _check_int8(qg, report, coil, cache_dir)
    built = cm.info.get("target") or ""
    if report["quantized"] and "avx512_vnni" not in _targets.NEEDS.get(built, ()):
        # codegen/lower_dnnl.c dn_int8: oneDNN's u8 x s8 products saturate without AVX-512 VNNI
        report["int8_as_f32"] = built
        warnings.warn("coil.quantize: target %s has no AVX-512 VNNI, where oneDNN's int8 products would "
                      "saturate: its %d int8 layer(s) run as f32 products of the quantized values (the "
                      "quantized model's results, at f32 speed)" % (built or "?", len(report["quantized"])),
                      stacklevel=2)
    cm.info["quantize"] = report
    if report["float"]:
        warnings.warn("coil.quantize: %d layer(s) left in f32: %s" % (len(report["float"]), "; ".join(
            "%s (%s): %s" % (f["node"], f["op"], f["reason"]) for f in report["float"][:8])), stacklevel=2)
    return cm


def _rebatch(calib, example):
    """Calibration inputs in the example's shapes (the graph is static): as given when they
    have them, else, when they differ in dim 0 only, their samples regrouped into batches of
    the example's size (cycling through them to fill the last)."""
    shapes = [tuple(t.shape) for t in example]
    if all([tuple(t.shape) for t in c] == shapes for c in calib):
        return calib
    for k, c in enumerate(calib):
        for t, s in zip(c, shapes):
            if t.dim() != len(s) or not s or tuple(t.shape[1:]) != s[1:]:
                raise CoilError("calibration input %d has shape %s where the example has %s: they may differ "
                                "in dim 0 only" % (k, list(t.shape), list(s)), stage="quantize")
    cols = [torch.cat([c[j] for c in calib]) for j in range(len(shapes))]
    n, b = cols[0].shape[0], shapes[0][0]
    if any(c.shape[0] != n for c in cols) or any(s[0] != b for s in shapes):
        raise CoilError("calibration inputs' batches differ between the module's inputs", stage="quantize")
    out = []
    for start in range(0, max(n, b), b):
        idx = torch.arange(start, start + b) % n
        out.append(tuple(c[idx] for c in cols))
        if start + b >= n:
            break
    return out


def _check_int8(graph, report, coil, cache_dir):
    """Moves the layers the compiler did not make int8 primitives (its oneDNN plan, printed by
    --dump-after dnnl, for a target with int8 kernels: which layers match is the graph's, the
    same on any machine) from report["quantized"] to report["float"]."""
    ce = _exporter()
    with tempfile.TemporaryDirectory(prefix="coil-q-") as d:
        gpath = os.path.join(d, "graph.json")
        with open(gpath, "w") as f:
            f.write(ce.dumps_graph(graph))
        env = dict(os.environ)
        env["COIL_CACHE_DIR"] = cache_dir or os.path.join(d, "cache")
        p = subprocess.run([coil_cli(coil), "compile", gpath, "--dump-after", "dnnl", "--target", "avx512_vnni"],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, env=env)
    heads = set(re.findall(r"^fusion \d+: \w+ node \d+ '([^']+)' .*, int8 \(", p.stdout.decode(), re.M))
    keep = []
    for q in report["quantized"]:
        if q["node"] in heads:
            keep.append(q)
        else:
            report["float"].append({"node": q["node"], "op": q["op"], "reason": "quantized, but the compiler did not "
                                    "match an int8 pattern for it (coil compile --dump-after dnnl)"})
    report["quantized"] = keep


def load(artifact_path, params, threads=None, keep_params=True, low_memory=False):
    """Loads an artifact built by `coil compile` and binds `params`: tensors in the graph's
    params order, as a list or an ordered dict (a weights.safetensors that compile(...,
    save_weights=True) wrote is in that order). Returns a CompiledModule whose call returns
    one tensor, or a tuple when the graph has several outputs."""
    if isinstance(params, dict):
        params = list(params.values())
    trusted = _sign.trusted_keys()
    if trusted:
        # with trusted keys, only an artifact with a signature file (coil compile -o writes
        # PATH.sig) whose signature covers these very bytes
        try:
            with open(artifact_path + ".sig") as f:
                sig = json.load(f)
            key, sha, target = sig["key"], sig["sha256"], sig["target"]
        except (OSError, ValueError, KeyError, TypeError):
            raise CoilError("%s: trusted keys are configured and it has no readable signature file "
                            "%s.sig; refusing it" % (artifact_path, artifact_path), stage="load") from None
        _sign.verify(trusted, key, sha, target, sig.get("signature"))
        art = Artifact(artifact_path, sha256=sha, target=target)
    else:
        art = Artifact(artifact_path)
    return CompiledModule(Model(art, list(params), threads=threads, keep_params=keep_params,
                                low_memory=low_memory))
