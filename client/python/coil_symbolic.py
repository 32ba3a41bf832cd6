"""Symbolic sizes for the coil exporter (PyTorch 1.13, where make_fx cannot trace symbolically
with params): which input dims are symbolic, tracing at several sizes, and fitting every size
argument that changes with them to an expression over the symbols.

Spec (`dynamic=` of coil_export.export and coil.export_graph), normalised by resolve_spec:
    None / False                 every size static
    True / "auto"                every dim of every input whose size is >= 2 and which the
                                 module accepts at another size (probed by running it eagerly:
                                 a dim whose change makes the module fail, such as the
                                 channels a conv weight fixes, stays static)
    "batch"                      dim 0 of every input, one symbol "batch" (dynamic_batch=True)
    {input: dims}                input = index or input name; dims = an int, a list of ints, or
                                 {dim: symbol name or None}; negative dims count from the end
    [(input, dim[, name]), ...]  the same as a list
Unnamed symbolic dims get names: dim 0 of every input (all symbolic, all the same size) is
"batch"; the others "s0", "s1", ... Unnamed dims of equal example size share a symbol when the
module fails if only one of them changes (input_ids and attention_mask), else each gets its own.
Ranges: {symbol: (min, max)} or {symbol: {"min": a, "max": b}}; either bound may be None.

Fitting (see fit()): the module is traced at the example point (each symbol at its example
size, at least 2) and along each symbol's axis (v, v+1, v+3, 2v+3, within the range; a size
whose trace fails is replaced by a near one; sizes 0 and 1 are never traced), at crossings of
two axes when a value depends on two symbols, and wherever two candidate expressions for one
value disagree (inside the symbol's range, or 1..max(8v, 512) without one). The graphs must
be the same but for the integers in SymInt argument slots (and an integer arange end/start);
each of those that changes becomes an integer polynomial over per-symbol atoms: the symbol,
its square, a floor division (a*s+c)//m (m <= 64) or min/max(a*s+b, C). The expression is
checked on every trace and on one held-out trace at sizes no fit used. A value that fits
nothing, a changed non-size argument or op (a Python branch on a size) and a captured tensor
that changes with a size are ExportErrors naming the node, argument, symbol and input dim.
"""
import collections
import fractions
import itertools
import json


class ExportError(Exception):
    """.symbols: the symbols the problem is about (those to keep static to avoid it), when
    known."""

    def __init__(self, message, symbols=None):
        super().__init__(message)
        self.symbols = list(symbols or [])


BATCH = "batch"
MAX_FLOOR_DIV = 64


# ---------------------------------------------------------------- spec

class Spec:
    """Resolved spec: dims {(input index, dim): symbol}, ranges {symbol: (lo, hi)}, the
    example size of each symbol, and input names (for messages)."""

    def __init__(self, dims, ranges, base, input_names):
        self.dims = collections.OrderedDict(dims)
        self.syms = []
        for s in self.dims.values():
            if s not in self.syms:
                self.syms.append(s)
        self.ranges = {s: ranges.get(s, (None, None)) for s in self.syms}
        self.base = dict(base)
        self.input_names = list(input_names)

    def __bool__(self):
        return bool(self.dims)

    def where(self, sym):
        """'dim 1 of input 'x'' (and more) for messages."""
        return ", ".join("dim %d of input %r" % (d, self.input_names[i])
                         for (i, d), s in self.dims.items() if s == sym)

    def as_json(self):
        return [[i, d, s] for (i, d), s in self.dims.items()]


def _norm_range(r):
    if r is None:
        return (None, None)
    if isinstance(r, dict):
        lo, hi = r.get("min"), r.get("max")
    else:
        lo, hi = tuple(r)
    for v in (lo, hi):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ExportError("symbol range bound %r is not a non-negative integer" % (v,))
    if lo is not None and hi is not None and lo > hi:
        raise ExportError("symbol range min %d > max %d" % (lo, hi))
    return (lo, hi)


def resolve_spec(inputs, input_names, dynamic, probe=None, ranges=None):
    """Spec for `dynamic` (see the module doc). probe(sizes {(i, d): n}) -> bool runs the
    module with those dims resized and says whether it worked (None: no probing)."""
    shapes = [tuple(int(v) for v in t.shape) for t in inputs]
    n_in = len(shapes)
    wanted = collections.OrderedDict()  # (i, d) -> name or None

    def add(i, d, name):
        if isinstance(i, str):
            if i not in input_names:
                raise ExportError("dynamic: no input named %r (inputs: %s)" % (i, ", ".join(input_names)))
            i = input_names.index(i)
        if not isinstance(i, int) or not 0 <= i < n_in:
            raise ExportError("dynamic: input %r out of range (%d inputs)" % (i, n_in))
        r = len(shapes[i])
        if not isinstance(d, int) or not -r <= d < r:
            raise ExportError("dynamic: input %r has rank %d, no dim %r" % (input_names[i], r, d))
        d %= r
        if name is not None and not (isinstance(name, str) and name.isidentifier() and len(name) <= 32):
            raise ExportError("dynamic: symbol name %r is not an identifier of at most 32 characters" % (name,))
        wanted[(i, d)] = name

    auto = False
    if dynamic is None or dynamic is False:
        pass
    elif dynamic is True or dynamic == "auto":
        auto = True
        for i, s in enumerate(shapes):
            for d, n in enumerate(s):
                if n >= 2:
                    wanted[(i, d)] = None
    elif dynamic == "batch":
        for i, s in enumerate(shapes):
            if s:
                add(i, 0, BATCH)
        if not wanted:
            raise ExportError("dynamic_batch: no input has a batch dimension")
        sizes = sorted(set(shapes[i][0] for (i, _) in wanted))
        if len(sizes) > 1:
            raise ExportError("dynamic_batch: inputs disagree on the batch size (dim 0): %s" % sizes)
    elif isinstance(dynamic, dict):
        for i, dims in dynamic.items():
            if isinstance(dims, int) and not isinstance(dims, bool):
                add(i, dims, None)
            elif isinstance(dims, dict):
                for d, name in dims.items():
                    add(i, d, name)
            else:
                for d in dims:
                    add(i, d, None)
    elif isinstance(dynamic, (list, tuple)):
        for e in dynamic:
            e = tuple(e)
            if len(e) not in (2, 3):
                raise ExportError("dynamic: entry %r is not (input, dim) or (input, dim, name)" % (e,))
            add(e[0], e[1], e[2] if len(e) == 3 else None)
    else:
        raise ExportError("dynamic: cannot use %r (None, True, 'batch', a dict or a list)" % (dynamic,))

    def ok(sizes):
        return probe is None or probe(sizes)

    def bumped(n):
        return n + 1 if n >= 2 else 3

    # auto: drop the dims the module does not accept at another size, alone or with the dims
    # of the same size that also fail alone (these then share a symbol)
    coupled = {}
    unnamed = [k for k, v in wanted.items() if v is None]
    groups = collections.OrderedDict()
    for k in unnamed:
        groups.setdefault(shapes[k[0]][k[1]], []).append(k)
    if probe is not None:
        for n, members in groups.items():
            alone_fail = [k for k in members if not ok({k: bumped(n)})]
            if alone_fail:
                together = ok({k: bumped(n) for k in alone_fail})
                for k in alone_fail:
                    if together:
                        coupled[k] = alone_fail
                    elif auto:
                        del wanted[k]
                    # an explicitly requested dim stays: its trace will say why it fails
    # names
    names = dict((k, v) for k, v in wanted.items() if v is not None)
    used = set(names.values())
    for nm in used:
        members = [k for k, v in names.items() if v == nm]
        if len(set(shapes[i][d] for i, d in members)) > 1:
            raise ExportError("dynamic: symbol %r names dims of different example sizes: %s" % (
                nm, ", ".join("dim %d of %r is %d" % (d, input_names[i], shapes[i][d]) for i, d in members)))
    rest = [k for k in wanted if k not in names]
    ranked = [i for i, s in enumerate(shapes) if s]
    zero = [(i, 0) for i in ranked]
    if (BATCH not in used and zero and all(k in rest for k in zero)
            and len(set(shapes[i][0] for i in ranked)) == 1
            and (len(zero) == 1 or probe is None or all(k in coupled for k in zero))):
        for k in zero:
            names[k] = BATCH
        used.add(BATCH)
    counter = [0]

    def fresh():
        while "s%d" % counter[0] in used:
            counter[0] += 1
        nm = "s%d" % counter[0]
        used.add(nm)
        return nm

    for k in rest:
        if k in names:
            continue
        if probe is None:
            # duck sizing: unnamed dims of equal size share a symbol
            same = [j for j in rest if j not in names and shapes[j[0]][j[1]] == shapes[k[0]][k[1]]]
        else:
            same = [j for j in coupled.get(k, [k]) if j not in names]
        nm = fresh()
        for j in same:
            names[j] = nm
    dims = collections.OrderedDict((k, names[k]) for k in sorted(names))
    base = {}
    for (i, d), s in dims.items():
        base.setdefault(s, shapes[i][d])
    rng = {}
    for s, r in (ranges or {}).items():
        if s not in base:
            raise ExportError("dynamic: range for unknown symbol %r (symbols: %s)" % (s, ", ".join(base) or "none"))
        rng[s] = _norm_range(r)
        lo, hi = rng[s]
        if (lo is not None and base[s] < lo) or (hi is not None and base[s] > hi):
            raise ExportError("dynamic: the example size %d of symbol %r is outside its range %s..%s"
                              % (base[s], s, lo, hi))
    return Spec(dims, rng, base, input_names)


def resize(inputs, sizes):
    """inputs with dims resized {(i, d): n}: entries repeated cyclically along the dim, so that
    values such as token ids stay valid."""
    import torch
    out = list(inputs)
    for (i, d), n in sizes.items():
        t = out[i]
        if t.shape[d] == n:
            continue
        idx = torch.arange(n) % t.shape[d]
        out[i] = t.index_select(d, idx).contiguous()
    return tuple(out)


# ---------------------------------------------------------------- univariate atoms

class Atom:
    """A function of one symbol: kind "x", "x2", "floor" (a, c, m): (a*x+c)//m, "min"/"max"
    (a, b, C): min(a*x+b, C), "floorx" (a, c, m, K, e): K*((a*x+c)//m)+e*x (a size padded to a
    multiple: (8 - x % 8) % 8 is 8*((x+7)//8)-x)."""
    __slots__ = ("kind", "p")

    def __init__(self, kind, p=()):
        self.kind, self.p = kind, tuple(p)

    def __call__(self, x):
        k, p = self.kind, self.p
        if k == "x":
            return x
        if k == "x2":
            return x * x
        if k == "floor":
            return (p[0] * x + p[1]) // p[2]
        if k == "min":
            return min(p[0] * x + p[1], p[2])
        if k == "floorx":
            return p[3] * ((p[0] * x + p[1]) // p[2]) + p[4] * x
        return max(p[0] * x + p[1], p[2])

    def render(self, s):
        k, p = self.kind, self.p
        if k == "x":
            return s
        if k == "x2":
            return "%s*%s" % (s, s)
        lin = _lin(p[0], p[1], s)
        if k in ("floor", "floorx"):
            num = lin if (p[0] == 1 and p[1] == 0) else "(%s)" % lin
            fl = "%s//%d" % (num, p[2])
            if k == "floor":
                return fl
            e = _lin(p[4], 0, s)
            return "%s*(%s)%s" % (p[3], fl, e if e.startswith("-") else "+" + e)
        return "%s(%s,%d)" % (k, lin, p[2])

    def wrap(self, s):
        """render() safe as a factor of a product."""
        r = self.render(s)
        return "(%s)" % r if self.kind in ("floor", "floorx") else r

    def __eq__(self, o):
        return isinstance(o, Atom) and (self.kind, self.p) == (o.kind, o.p)

    def __hash__(self):
        return hash((self.kind, self.p))


def _lin(a, b, s):
    t = s if a == 1 else "-%s" % s if a == -1 else "%d*%s" % (a, s)
    if b > 0:
        t += "+%d" % b
    elif b < 0:
        t += "-%d" % -b
    return t


def _uni_candidates(pts):
    """Candidate fits of y = f(x) from {x: y} (not constant): a list of (basis atoms, fn),
    simplest first: linear, quadratic (integer coefficients), K*floor(...)+d, min/max."""
    xs = sorted(pts)
    ys = [pts[x] for x in xs]
    out = []
    # linear
    x0, x1 = xs[0], xs[1]
    if (ys[1] - ys[0]) % (x1 - x0) == 0:
        a = (ys[1] - ys[0]) // (x1 - x0)
        b = ys[0] - a * x0
        if all(y == a * x + b for x, y in zip(xs, ys)):
            out.append(((Atom("x"),), lambda x, a=a, b=b: a * x + b))
    if len(xs) >= 4 and not out:
        F = fractions.Fraction
        (p0, p1, p2) = xs[:3]
        (q0, q1, q2) = ys[:3]
        # Newton form
        d1 = F(q1 - q0, p1 - p0)
        d2 = (F(q2 - q1, p2 - p1) - d1) / (p2 - p0)
        c2 = d2
        c1 = d1 - d2 * (p0 + p1)
        c0 = q0 - d1 * p0 + d2 * p0 * p1
        if all(c.denominator == 1 for c in (c0, c1, c2)):
            c2, c1, c0 = int(c2), int(c1), int(c0)
            if all(y == c2 * x * x + c1 * x + c0 for x, y in zip(xs, ys)):
                out.append(((Atom("x"), Atom("x2")), lambda x, a=c2, b=c1, c=c0: a * x * x + b * x + c))
    if len(xs) >= 3:
        for m in range(2, MAX_FLOOR_DIV + 1):
            for a in (1, 2, 3, 4):
                for c in range(m):
                    fs = [(a * x + c) // m for x in xs]
                    j = next((j for j in range(1, len(fs)) if fs[j] != fs[0]), None)
                    if j is None:
                        continue
                    dy, df = ys[j] - ys[0], fs[j] - fs[0]
                    if dy % df:
                        continue
                    K = dy // df
                    d = ys[0] - K * fs[0]
                    if K and all(y == K * f + d for y, f in zip(ys, fs)):
                        at = Atom("floor", (a, c, m))
                        out.append(((at,), lambda x, at=at, K=K, d=d: K * at(x) + d))
    if not out and len(xs) >= 4:
        # K*floor(...) + e*x + d: rounding up to a multiple, less x
        F = fractions.Fraction
        for m in range(2, MAX_FLOOR_DIV + 1):
            for a in (1, 2, 3, 4):
                for c in range(m):
                    pts3 = list(zip([(a * x + c) // m for x in xs], xs, ys))
                    (f0, x0_, y0_), det = pts3[0], 0
                    for (f1, x1_, y1_), (f2, x2_, y2_) in itertools.combinations(pts3[1:], 2):
                        det = (f1 - f0) * (x2_ - x0_) - (f2 - f0) * (x1_ - x0_)
                        if det:  # three points that fix K, e and d
                            break
                    if not det:
                        continue
                    K = F((y1_ - y0_) * (x2_ - x0_) - (y2_ - y0_) * (x1_ - x0_), det)
                    e = F((f1 - f0) * (y2_ - y0_) - (f2 - f0) * (y1_ - y0_), det)
                    if K.denominator != 1 or e.denominator != 1 or not K or not e:
                        continue
                    K, e = int(K), int(e)
                    d = y0_ - K * f0 - e * x0_
                    at = Atom("floorx", (a, c, m, K, e))
                    if all(y == at(x) + d for x, y in zip(xs, ys)):
                        out.append(((at,), lambda x, at=at, d=d: at(x) + d))
        if out:
            return out
        for kind in ("min", "max"):
            for C in sorted(set(ys)):
                free = [(x, y) for x, y in zip(xs, ys) if y != C]
                if len(free) < 2:
                    continue
                (fx0, fy0), (fx1, fy1) = free[0], free[1]
                if (fy1 - fy0) % (fx1 - fx0):
                    continue
                a = (fy1 - fy0) // (fx1 - fx0)
                b = fy0 - a * fx0
                at = Atom(kind, (a, b, C))
                if a and all(y == at(x) for x, y in zip(xs, ys)):
                    out.append(((at,), at))
    return out


def _disagreement(cands, v, lo, hi, avoid):
    """The size nearest v in [lo, hi] (not in avoid, >= 2) where the candidates differ; None
    when they agree on all of [lo, hi] (where they differ only below 2: None as well)."""
    fns = [f for _, f in cands]
    for dist in range(1, hi - lo + 2):
        for x in (v + dist, v - dist):
            if x < lo or x > hi or x in avoid:
                continue
            vals = set(f(x) for f in fns)
            if len(vals) > 1:
                if x >= 2:
                    return x
    return None


# ---------------------------------------------------------------- graph comparison

def _flatten(graph, arg_types):
    """(skeleton, leaves): skeleton = per-node structural records; leaves = [(node index,
    where, type, value)] for each scalar of the node args, in order."""
    skel = []
    leaves = []
    for k, n in enumerate(graph["nodes"]):
        types, pos = arg_types(n["op"])
        skel.append((n["id"], n["op"], json.dumps(n["outputs"]), len(n["args"]),
                     tuple(sorted(n.get("kwargs", {})))))
        tag = "node %r (%s)" % (n["id"], n["op"])

        def walk(v, where, typ):
            if isinstance(v, list):
                leaves.append((k, where + "#len", "len", len(v)))
                for j, x in enumerate(v):
                    walk(x, "%s[%d]" % (where, j), typ)
            else:
                leaves.append((k, where, typ, v))

        for i, a in enumerate(n["args"]):
            nm = pos[i] if i < len(pos) else "?"
            walk(a, "%s: args[%d] '%s'" % (tag, i, nm), types.get(nm, "?"))
        for kw, a in n.get("kwargs", {}).items():
            walk(a, "%s: kwargs '%s'" % (tag, kw), types.get(kw, "?"))
    return skel, leaves


def _same(a, b):
    if isinstance(a, (list, dict)) or isinstance(b, (list, dict)):
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    return type(a) is type(b) and a == b


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# int[] slots of ATen 1.13 that later releases made SymInt[] and coil takes as sizes
_SIZE_INTS = {("aten.constant_pad_nd.default", "pad")}


def _sizable(typ, op, where):
    """Whether an integer in this slot may become an expression."""
    if typ.startswith("SymInt") or any(op == o and "'%s'" % a in where for o, a in _SIZE_INTS):
        return True
    return op.startswith("aten.arange.") and typ.startswith("Scalar") and ("'end'" in where or "'start'" in where)


# ---------------------------------------------------------------- fitting

class _Fitter:
    def __init__(self, spec, graph_at, arg_types, max_traces=None):
        self.spec = spec
        self.syms = spec.syms
        self.graph_at = graph_at
        self.arg_types = arg_types
        self.base = tuple(max(spec.base[s], 2) for s in self.syms)
        lo_hi = []
        for s, v in zip(self.syms, self.base):
            lo, hi = spec.ranges.get(s, (None, None))
            lo = 1 if lo is None else lo
            hi = max(8 * v, 512) if hi is None else hi
            lo_hi.append((lo, hi))
        self.lo_hi = lo_hi
        self.graphs = collections.OrderedDict()   # point -> graph
        self.params = None
        self.failed = {}                           # point -> error text
        self.fit_points = []
        self.uni_cache = {}                        # (symbol index, axis data) -> candidates
        self.max_traces = max_traces or (16 + 8 * len(self.syms))

    # -- tracing
    def point_desc(self, p):
        return ", ".join("%s=%d" % (s, v) for s, v in zip(self.syms, p))

    def trace(self, p):
        if p in self.graphs:
            return True
        if p in self.failed:
            return False
        if len(self.graphs) + len(self.failed) >= self.max_traces:
            return False
        sizes = {k: p[self.syms.index(s)] for k, s in self.spec.dims.items()}
        try:
            g, params = self.graph_at(sizes, not self.graphs)
        except ExportError as e:
            if not self.graphs:
                raise
            self.failed[p] = str(e)
            return False
        except Exception as e:  # noqa: BLE001 (a size the module does not take)
            if not self.graphs:
                raise
            self.failed[p] = "%s: %s" % (type(e).__name__, e)
            return False
        if self.params is None:
            self.params = params
        else:
            for k, t in params.items():
                t0 = self.params.get(k)
                if t0 is not None and t0 is not t and (t0.shape != t.shape or not _equal(t0, t)):
                    raise ExportError("dynamic shapes: captured tensor %r changes with the sizes (%s vs %s): "
                                      "a size-dependent tensor captured as a constant cannot be symbolic"
                                      % (k, self.point_desc(self.base), self.point_desc(p)), self.moved(p))
        self.graphs[p] = g
        self.check_structure(p)
        return True

    def axis_point(self, i, x):
        p = list(self.base)
        p[i] = x
        return tuple(p)

    def moved(self, p):
        return [s for s, a, b in zip(self.syms, p, self.base) if a != b]

    def branch_error(self, p, what):
        mv = self.moved(p) or self.syms
        s = mv[0]
        return ExportError(
            "dynamic shapes: the shape logic branches on %s (symbol %r: traced at %s and at %s) "
            "at %s; a Python branch on a size cannot be made symbolic (keep that dim static)" % (
                self.spec.where(s), s, self.point_desc(self.base), self.point_desc(p), what), mv)

    def check_structure(self, p):
        g0 = self.graphs[self.base]
        g = self.graphs[p]
        if p == self.base:
            return
        for key in ("format", "version", "outputs"):
            if not _same(g0[key], g[key]):
                raise self.branch_error(p, "the graph's %s" % key)
        for key, what in (("params", "param"), ("constants", "constant")):
            a, b = g0[key], g[key]
            for k in range(max(len(a), len(b))):
                if k >= len(a) or k >= len(b) or not _same(a[k], b[k]):
                    d = a[k] if k < len(a) else b[k]
                    raise ExportError(
                        "dynamic shapes: %s %r changes with the sizes (%s vs %s; %s): a size-dependent "
                        "tensor captured as a %s cannot be made symbolic" % (
                            what, d["name"], self.point_desc(self.base), self.point_desc(p),
                            " vs ".join(json.dumps(x[k]["shape"]) if k < len(x) else "absent" for x in (a, b)),
                            what), self.moved(p))
        s0, _ = self.flat(self.base)
        s1, _ = self.flat(p)
        for k in range(max(len(s0), len(s1))):
            a = s0[k] if k < len(s0) else None
            b = s1[k] if k < len(s1) else None
            if a != b:
                if a is None or b is None or a[1] != b[1]:
                    what = "op %s" % ("node %r (%s)" % (a[0], a[1]) if a else "node %r (%s)" % (b[0], b[1]))
                    what += ": %s at %s, %s at %s" % (
                        "%s" % (a[1] if a else "no node"), self.point_desc(self.base),
                        "%s" % (b[1] if b else "no node"), self.point_desc(p))
                else:
                    what = "op node %r (%s): its outputs or arguments change" % (a[0], a[1])
                raise self.branch_error(p, what)
        l0 = self.flat(self.base)[1]
        l1 = self.flat(p)[1]
        for a, b in zip(l0, l1):
            if a[1] != b[1]:
                raise self.branch_error(p, "%s (its argument list changes)" % a[1])
            if _same(a[3], b[3]):
                continue
            op = g0["nodes"][a[0]]["op"]
            if a[2] == "len":
                raise self.branch_error(p, "%s: a list of %d vs %d elements" % (a[1][:-4], a[3], b[3]))
            if _is_int(a[3]) and _is_int(b[3]) and _sizable(a[2], op, a[1]):
                continue
            raise self.branch_error(p, "%s (%s): %s vs %s; only SymInt arguments can be symbolic" % (
                a[1], a[2], json.dumps(a[3]), json.dumps(b[3])))

    _flat_cache = None

    def flat(self, p):
        if self._flat_cache is None:
            self._flat_cache = {}
        if p not in self._flat_cache:
            self._flat_cache[p] = _flatten(self.graphs[p], self.arg_types)
        return self._flat_cache[p]

    # -- the design
    def axis_values(self, i):
        v = self.base[i]
        lo, hi = self.lo_hi[i]
        lo = max(lo, 2)
        far = min(2 * v + 3, hi)
        want = [v + 1, v + 3, far if far > v + 3 else v - 1]
        got = []
        for x in want:
            cands = [x] + [x + k for k in (1, 2, 3)] + [x - k for k in (1, 2, 3)] + [v - k for k in (1, 2, 3)]
            for y in cands:
                if lo <= y <= hi and y != v and y not in got and self.axis_point(i, y) not in self.failed:
                    if self.trace(self.axis_point(i, y)):
                        got.append(y)
                        break
        return got

    def axis_data(self, vals_at, i):
        out = {}
        for p in self.fit_points:
            if all(a == b for j, (a, b) in enumerate(zip(p, self.base)) if j != i):
                out[p[i]] = vals_at[p]
        return out

    def run(self):
        if not self.trace(self.base):
            raise ExportError("dynamic shapes: cannot trace at %s: %s" % (
                self.point_desc(self.base), self.failed.get(self.base)))
        for i in range(len(self.syms)):
            self.axis_values(i)
        for _ in range(24):
            self.fit_points = list(self.graphs)
            requests, fits = self.analyse()
            if not requests:
                break
            progress = False
            for p in requests:
                if self.trace(p):
                    progress = True
            if not progress:
                break
        self.fit_points = list(self.graphs)
        requests, fits = self.analyse(final=True)
        # held-out point: every symbol at a size no fit used
        hold = []
        for i, v in enumerate(self.base):
            lo, hi = self.lo_hi[i]
            used = set(p[i] for p in self.graphs)
            x = next((y for y in (v + 5, v + 2, v + 4, v + 6, v + 7, v - 1, v - 2) if
                      max(lo, 2) <= y <= hi and y not in used), None)
            hold.append(v if x is None else x)
        hold = tuple(hold)
        held = None
        self.max_traces += 8  # the held-out trace does not depend on what the fit used
        for k in range(8):
            if hold not in self.graphs and self.trace(hold):
                held = hold
                break
            hold = tuple(min(h + 1, self.lo_hi[i][1]) for i, h in enumerate(hold))
        if held is None:
            raise ExportError("dynamic shapes: no held-out trace to check the fitted sizes on: the "
                              "module could not be traced at %s and near it (%s)" % (
                                  self.point_desc(hold), self.failed.get(hold, "sizes used already")),
                              self.syms)
        return fits, held

    def values(self):
        """{leaf index: {point: value}} for the leaves that change."""
        pts = list(self.graphs)
        l0 = self.flat(self.base)[1]
        out = collections.OrderedDict()
        for j, leaf in enumerate(l0):
            vals = {p: self.flat(p)[1][j][3] for p in pts}
            if len(set(vals.values())) > 1:
                out[j] = vals
        return out

    def analyse(self, final=False):
        vals = self.values()
        l0 = self.flat(self.base)[1]
        requests = []
        fits = {}
        uni_cache = self.uni_cache
        for j, vat in vals.items():
            where = l0[j][1]
            fitpts = {p: vat[p] for p in self.fit_points}
            deps = []
            bases = {}
            for i, s in enumerate(self.syms):
                data = self.axis_data(fitpts, i)
                if len(set(data.values())) <= 1:
                    continue
                deps.append(i)
                key = (i, tuple(sorted(data.items())))
                if key not in uni_cache:
                    uni_cache[key] = _uni_candidates(data)
                cands = uni_cache[key]
                if not cands:
                    fits[j] = ExportError(
                        "dynamic shapes: %s takes the values %s at %s=%s (other sizes at %s): no "
                        "polynomial, floor division or min/max of %r fits" % (
                            where, [data[x] for x in sorted(data)], s, sorted(data),
                            self.point_desc(self.base), s), [s])
                    break
                if len(cands) > 1:
                    avoid = set(x for x in data) | set(
                        p[i] for p in self.failed if p == self.axis_point(i, p[i]))
                    x = _disagreement(cands, self.base[i], self.lo_hi[i][0], self.lo_hi[i][1], avoid)
                    if x is not None and not final:
                        requests.append(self.axis_point(i, x))
                opts = []
                for c in cands:
                    if c[0] not in opts:
                        opts.append(c[0])
                        if len(opts) == 6:
                            break
                bases[i] = opts
            if j in fits:
                continue
            if not deps:
                fits[j] = ExportError("dynamic shapes: %s changes only where several sizes change at "
                                      "once (%s): no expression fits" % (where, sorted(set(vat.values()))), self.syms)
                continue
            r = None
            for combo in itertools.product(*[bases[i] for i in deps]):
                r1 = _multi_fit(fitpts, deps, dict(zip(deps, combo)))
                if r1 is _UNDETERMINED:
                    r = r or r1
                elif r1 is not None:
                    r = r1
                    break
            if r is _UNDETERMINED:   # rank deficient: cross points
                more = self.cross_points(deps)
                if more and not final:
                    requests.extend(more)
                    continue
                fits[j] = ExportError("dynamic shapes: %s: cannot tell apart the terms of its "
                                      "expression from the traces (%s)" % (where, ", ".join(
                                          "%s: %d" % (self.point_desc(p), v) for p, v in vat.items())),
                                      [self.syms[i] for i in deps])
                continue
            if r is None:
                fits[j] = ExportError(
                    "dynamic shapes: %s takes the values %s: no expression over %s fits" % (
                        where, ", ".join("%d at %s" % (v, self.point_desc(p)) for p, v in vat.items()),
                        ", ".join(self.syms[i] for i in deps)), [self.syms[i] for i in deps])
                continue
            fits[j] = (r, deps)
        # dedupe requests, keep the order
        seen = set()
        req = []
        for p in requests:
            if p not in seen and p not in self.graphs and p not in self.failed:
                seen.add(p)
                req.append(p)
        return req[:6], fits

    def cross_points(self, deps):
        axes = []
        for i in deps:
            xs = sorted(set(p[i] for p in self.fit_points if p == self.axis_point(i, p[i])))
            axes.append(xs)
        out = []
        for combo in itertools.product(*[[x for x in xs if x != self.base[i]] for i, xs in zip(deps, axes)]):
            p = list(self.base)
            for i, x in zip(deps, combo):
                p[i] = x
            p = tuple(p)
            if p not in self.graphs and p not in self.failed:
                out.append(p)
            if len(out) >= 2:
                break
        return out


def _equal(a, b):
    import torch
    return torch.equal(a, b)


def _monomials(deps, bases):
    """[(factors ((i, atom), ...))] for every product of one atom per symbol of a subset."""
    out = [()]
    for r in range(1, len(deps) + 1):
        for sub in itertools.combinations(deps, r):
            for choice in itertools.product(*[bases[i] for i in sub]):
                out.append(tuple(zip(sub, choice)))
    return out


def _mono_value(m, p):
    v = 1
    for i, at in m:
        v *= at(p[i])
    return v


_UNDETERMINED = object()


def _multi_fit(pts, deps, bases):
    """[(integer coefficient, monomial)] fitting {point: value} exactly; _UNDETERMINED when
    the points do not determine the coefficients, None when nothing fits."""
    monos = _monomials(deps, bases)
    F = fractions.Fraction
    rows = [[F(_mono_value(m, p)) for m in monos] + [F(v)] for p, v in pts.items()]
    n = len(monos)
    # Gaussian elimination
    r = 0
    piv = []
    for c in range(n):
        k = next((k for k in range(r, len(rows)) if rows[k][c] != 0), None)
        if k is None:
            continue
        rows[r], rows[k] = rows[k], rows[r]
        pv = rows[r][c]
        rows[r] = [x / pv for x in rows[r]]
        for k2 in range(len(rows)):
            if k2 != r and rows[k2][c] != 0:
                f = rows[k2][c]
                rows[k2] = [x - f * y for x, y in zip(rows[k2], rows[r])]
        piv.append(c)
        r += 1
    if any(all(x == 0 for x in row[:n]) and row[n] != 0 for row in rows):
        return None
    if r < n:
        return _UNDETERMINED
    coef = [F(0)] * n
    for k, c in enumerate(piv):
        coef[c] = rows[k][n]
    if any(x.denominator != 1 for x in coef):
        return None
    coef = [int(x) for x in coef]
    fit = [(c, m) for c, m in zip(coef, monos) if c]
    if any(sum(c * _mono_value(m, p) for c, m in fit) != v for p, v in pts.items()):
        return None
    return fit


def render(fit, syms):
    terms = []
    const = 0
    for c, m in fit:
        if not m:
            const += c
            continue
        facs = [at.wrap(syms[i]) if (len(m) > 1 or c != 1) else at.render(syms[i]) for i, at in m]
        body = "*".join(facs)
        if c == 1:
            t = body
        elif c == -1:
            t = "-" + body
        else:
            t = "%d*%s" % (c, body)
        terms.append(t)
    if const or not terms:
        terms.append(str(const))
    s = terms[0]
    for t in terms[1:]:
        s += t if t.startswith("-") else "+" + t
    return s


def evaluate(fit, p):
    return sum(c * _mono_value(m, p) for c, m in fit)


def _linear(pts):
    """(a, b) with y = a*x + b at every point (x, y), a > 0 an integer, else None."""
    (x0, y0), (x1, y1) = min(pts), max(pts)
    if x1 == x0 or (y1 - y0) % (x1 - x0):
        return None
    a = (y1 - y0) // (x1 - x0)
    b = y0 - a * x0
    return (a, b) if a > 0 and all(y == a * x + b for x, y in pts) else None


def _slice_bounds(fitter, l0, fits, syms):
    """({symbol: smallest value}, {symbol: largest value}) that slices imply, as torch.compile
    guards a slice's clamping on the sizes it traced with:
    - a bound fitted to a*s + b that stayed within a static size K at every trace (`pos[:, :seq]`
      of a 512-row table) was not clamped: s <= (K - b) // a, so the slice is `seq` long, not
      min(512, seq), which would not broadcast with seq;
    - a static bound within a size a*s + b at every trace (`x[:, :3]`, `x[:, -3:]` of a seq-long
      dim) was not clamped either: a*s + b >= 3, so the slice is 3 long, not min(3, seq).
    Sizes and bounds of other forms stay clamped (min/max in the graph)."""
    lo, hi = {}, {}
    nodes = fitter.graphs[fitter.base]["nodes"]
    slots = collections.defaultdict(dict)  # node index -> {"start"/"end": leaf index}
    for j, (k, where, typ, v) in enumerate(l0):
        if nodes[k]["op"] == "aten.slice.Tensor":
            for nm in ("start", "end"):
                if "'%s'" % nm in where:
                    slots[k][nm] = j
    for k, js in slots.items():
        nid = nodes[k]["id"]
        sizes = {p: fitter.graphs[p].get("slice_sizes", {}).get(nid) for p in fitter.graphs}
        if None in sizes.values():
            continue
        for nm, j in js.items():
            vals = {p: fitter.flat(p)[1][j][3] for p in fitter.graphs}
            if j in fits:  # a fitted bound against a static size
                fit_, deps = fits[j]
                if len(deps) != 1 or len(set(sizes.values())) != 1:
                    continue
                size = next(iter(sizes.values()))
                if any(v > size for v in vals.values()):
                    continue
                i = deps[0]
                ab = _linear([(p[i], vals[p]) for p in fitter.graphs])
                if ab:
                    hi[syms[i]] = min(hi.get(syms[i], size), (size - ab[1]) // ab[0])
                continue
            v = next(iter(vals.values()))
            if not _is_int(v) or v >= (1 << 62) or (nm == "start" and v == 0) or len(set(sizes.values())) == 1:
                continue
            need = abs(v)  # within the size: size >= v, or size >= -v for a bound from the end
            if any(sz < need for sz in sizes.values()):
                continue
            for i in range(len(syms)):  # the one symbol the size follows
                ab = _linear([(p[i], sizes[p]) for p in fitter.graphs]) if len({p[i] for p in fitter.graphs}) > 1 else None
                if ab and all(sizes[p] == ab[0] * p[i] + ab[1] for p in fitter.graphs):
                    a_, b_ = ab
                    lo[syms[i]] = max(lo.get(syms[i], 1), -((b_ - need) // a_))
                    break
    return lo, hi


def fit(spec, graph_at, arg_types, eval_expr):
    """Trace and fit (see the module doc). graph_at(sizes {(i, d): n}, first) -> (graph,
    params) traces the module with those input dims resized; arg_types(op name) -> (types by
    argument name, positional argument names); eval_expr(text, {symbol: value}) evaluates a
    dimension expression (the rendered text is checked with it). Returns (graph, params, info)."""
    fitter = _Fitter(spec, graph_at, arg_types)
    fits, held = fitter.run()
    syms = fitter.syms
    base = fitter.base
    g0 = fitter.graphs[base]
    l0 = fitter.flat(base)[1]
    exprs = {}
    for j, r in fits.items():
        if isinstance(r, ExportError):
            raise r
        fit_, deps = r
        text = render(fit_, syms)
        where = l0[j][1]
        for p, g in fitter.graphs.items():
            want = fitter.flat(p)[1][j][3]
            got = eval_expr(text, dict(zip(syms, p)))
            if got != want:
                kind = "held-out trace" if p == held else "trace"
                raise ExportError("dynamic shapes: %s: the fitted expression %s gives %d at %s but the %s "
                                  "has %d" % (where, text, got, fitter.point_desc(p), kind, want),
                                  [syms[i] for i in deps])
        exprs[j] = text
    # the merged graph: the base graph with expressions in the changing slots
    graph = json.loads(json.dumps(g0))
    pos_of = {}
    for j, (k, where, typ, v) in enumerate(l0):
        pos_of.setdefault(k, []).append(j)
    # rebuild args in the same walk order
    for k, n in enumerate(graph["nodes"]):
        idx = iter(pos_of.get(k, []))

        def walk(v):
            j = next(idx)
            if isinstance(v, list):
                return [walk(x) for x in v]
            return exprs.get(j, v)

        n["args"] = [walk(a) for a in n["args"]]
        if "kwargs" in n:
            n["kwargs"] = collections.OrderedDict((kw, walk(a)) for kw, a in n["kwargs"].items())
    for (i, d), s in spec.dims.items():
        graph["inputs"][i]["shape"][d] = s
    graph.pop("slice_sizes", None)
    lows, highs = _slice_bounds(fitter, l0, fits, syms)
    ranges = collections.OrderedDict()
    for s in syms:
        lo, hi = spec.ranges.get(s, (None, None))
        if s in highs:
            hi = highs[s] if hi is None else min(hi, highs[s])
        if lows.get(s, 1) > 1:
            lo = lows[s] if lo is None else max(lo, lows[s])
        r = collections.OrderedDict()
        if lo is not None:
            r["min"] = lo
        if hi is not None:
            r["max"] = hi
        if r:
            ranges[s] = r
    if ranges:
        out = collections.OrderedDict()
        for k, v in graph.items():
            out[k] = v
            if k == "inputs":
                out["symbols"] = ranges
        graph = out
    info = {"symbols": {s: [[i, d] for (i, d), t in spec.dims.items() if t == s] for s in syms},
            "traces": len(fitter.graphs), "failed_traces": len(fitter.failed),
            "points": [dict(zip(syms, p)) for p in fitter.graphs], "held_out": dict(zip(syms, held)) if held else None,
            "expressions": sorted(set(exprs.values()))}
    return graph, fitter.params, info, base
