"""The dynamic-shape bench's models, their symbolic dims and the request traces.

Every model is plain torch (+ torchvision for resnet18), seeded, nothing downloaded. A model
is a Spec: how to build it, its inputs as lists of dims where a dim is an int or the name of
a symbol ("batch", "seq", "res"), each symbol's range and distribution. A request is a dict
{symbol: value}; Spec.inputs(req) makes the tensors for it."""
import math
import random

# symbol -> (lo, hi, distribution); distributions: "loguniform" (ints, log-uniform on
# [lo, hi]), "lognormal:MEDIAN:SIGMA" (clipped to [lo, hi]), "uniform" (ints)
MODELS = {}


class Spec:
    def __init__(self, name, build, inputs, symbols, note, fixed=None):
        self.name = name
        self._build = build
        self.input_dims = inputs      # [(dtype name, [dim or symbol]), ...]; "int:HIGH" for ids
        self.symbols = dict(symbols)  # symbol -> (lo, hi, dist)
        self.fixed = dict(fixed or {})  # symbols held at one value (not symbolic)
        self.note = note

    # ---------------------------------------------------------------- shapes
    def dynamic_symbols(self):
        return [s for s in self.symbols if s not in self.fixed]

    def shapes(self, req):
        """[[int dims] per input] for a request {symbol: value}."""
        env = dict(self.fixed)
        env.update(req)
        return [[d if isinstance(d, int) else int(env[d]) for d in dims]
                for _, dims in self.input_dims]

    def dynamic_dims(self):
        """{input index: {dim index: symbol}} of the dims that are symbolic."""
        out = {}
        for i, (_, dims) in enumerate(self.input_dims):
            for j, d in enumerate(dims):
                if isinstance(d, str) and d not in self.fixed:
                    out.setdefault(i, {})[j] = d
        return out

    def key(self, req):
        return tuple(int(req[s]) for s in self.dynamic_symbols())

    def space_size(self):
        n = 1
        for s in self.dynamic_symbols():
            lo, hi, _ = self.symbols[s]
            n *= hi - lo + 1
        return n

    def inputs(self, req, seed=0):
        import torch
        g = torch.Generator().manual_seed(seed)
        out = []
        for (dt, _), shape in zip(self.input_dims, self.shapes(req)):
            if dt.startswith("int:"):
                out.append(torch.randint(0, int(dt[4:]), shape, generator=g, dtype=torch.int64))
            else:
                out.append(torch.randn(shape, generator=g))
        return tuple(out)

    def build(self, seed=0):
        import torch
        torch.manual_seed(seed)
        return self._build().eval()

    # ---------------------------------------------------------------- traces
    def draw(self, rng):
        req = {}
        for s in self.dynamic_symbols():
            lo, hi, dist = self.symbols[s]
            if dist == "uniform":
                v = rng.randint(lo, hi)
            elif dist == "loguniform":
                v = int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))
            elif dist.startswith("lognormal:"):
                _, med, sig = dist.split(":")
                v = int(round(rng.lognormvariate(math.log(float(med)), float(sig))))
            else:
                raise ValueError(dist)
            req[s] = min(max(v, lo), hi)
        return req

    def trace(self, n, seed):
        """n requests, seeded; repeats allowed (the production mix)."""
        rng = random.Random("%s/%d/trace" % (self.name, seed))
        return [self.draw(rng) for _ in range(n)]

    def distinct(self, n, seed):
        """Up to n distinct requests in order of first appearance in a stream drawn like the
        trace; where that stream is too skewed to give n soon, unseen shapes drawn uniformly
        from the whole space fill the rest. Capped at the size of the space."""
        rng = random.Random("%s/%d/distinct" % (self.name, seed))
        n = min(n, self.space_size())
        seen, out = set(), []
        for _ in range(50 * n):
            if len(out) >= n:
                break
            r = self.draw(rng)
            k = self.key(r)
            if k not in seen:
                seen.add(k)
                out.append(r)
        syms = self.dynamic_symbols()
        while len(out) < n:
            r = {s: rng.randint(self.symbols[s][0], self.symbols[s][1]) for s in syms}
            k = self.key(r)
            if k not in seen:
                seen.add(k)
                out.append(r)
        return out

    def sample_sizes(self, trace, k, seed):
        """k distinct requests of the trace for the static comparison: the smallest, the
        largest (by elements of the inputs) and k-2 spread between them in that order."""
        uniq = {}
        for r in trace:
            uniq.setdefault(self.key(r), r)
        reqs = sorted(uniq.values(), key=lambda r: (self.elements(r), self.key(r)))
        if len(reqs) <= k:
            return reqs
        idx = sorted(set(round(i * (len(reqs) - 1) / (k - 1)) for i in range(k)))
        return [reqs[i] for i in idx]

    def elements(self, req):
        n = 0
        for shape in self.shapes(req):
            m = 1
            for d in shape:
                m *= d
            n += m
        return n


def _bert(layers=2, d=256, heads=4, ff=1024, vocab=8192, max_len=512):
    import torch

    class Encoder(torch.nn.Module):
        """BERT-style: token + learned positional embedding, LayerNorm, post-norm
        TransformerEncoderLayers (GELU, batch_first); returns the hidden states."""

        def __init__(self):
            super().__init__()
            self.tok = torch.nn.Embedding(vocab, d)
            self.pos = torch.nn.Parameter(torch.randn(1, max_len, d) * 0.02)
            self.norm = torch.nn.LayerNorm(d)
            self.layers = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(d, heads, ff, activation="gelu", batch_first=True)
                for _ in range(layers))

        def forward(self, ids):
            x = self.tok(ids) + self.pos[:, :ids.shape[1]]
            x = self.norm(x)
            for layer in self.layers:
                x = layer(x)
            return x

    return Encoder()


def _resnet18():
    import torch
    import torchvision
    m = torchvision.models.resnet18(weights=None)
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():  # trained-looking BN statistics (coil_export's rule)
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
    return m


def _cnn_small():
    import torch
    nn = torch.nn

    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]

    return nn.Sequential(*block(3, 16), nn.MaxPool2d(2), *block(16, 32), nn.MaxPool2d(2),
                         *block(32, 64), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def _mlp(d_in=512, hidden=2048, d_out=512):
    import torch
    nn = torch.nn
    return nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                         nn.Linear(hidden, d_out))


def make_specs(dynamic_res=False):
    cnn_syms = {"batch": (1, 32, "loguniform"), "res": (160, 320, "uniform")}
    cnn_fixed = {} if dynamic_res else {"res": 224}
    specs = [
        Spec("bert", _bert, [("int:8192", ["batch", "seq"])],
             {"batch": (1, 8, "loguniform"), "seq": (1, 512, "lognormal:64:1.0")},
             "2 x TransformerEncoderLayer(d=256, 4 heads, ff 1024, GELU, batch_first), token + "
             "positional embedding (512), vocab 8192; batch 1..8 log-uniform, seq 1..512 "
             "log-normal (median 64, sigma 1)"),
        Spec("resnet18", _resnet18, [("f32", ["batch", 3, "res", "res"])], cnn_syms,
             "torchvision resnet18 (random weights); batch 1..32 log-uniform, " +
             ("resolution 160..320 uniform (square)" if dynamic_res else "224 x 224"),
             fixed=cnn_fixed),
        Spec("cnn_small", _cnn_small, [("f32", ["batch", 3, "res", "res"])], cnn_syms,
             "3 x conv3x3-BN-ReLU (16/32/64 channels), 2 max pools, global pool, linear; batch "
             "1..32 log-uniform, " + ("resolution 160..320" if dynamic_res else "224 x 224"),
             fixed=dict(cnn_fixed)),
        Spec("mlp", _mlp, [("f32", ["batch", 512])], {"batch": (1, 1024, "loguniform")},
             "Linear 512-2048-2048-512 with GELU; batch 1..1024 log-uniform"),
    ]
    return {s.name: s for s in specs}


DEFAULT_MODELS = ["bert", "resnet18", "mlp"]
