"""Exported real models through coil's code generator versus the interpreter and PyTorch eager.

Each model is exported with client/python/coil_export.py at a small image size (plus
a module of extern-kernel ops: pooling variants, roll, convolutions, bilinear and nearest
upsampling, NaN inputs), then
  * `coil check` compiles it and compares the compiled outputs with the interpreter's;
  * `coil run` compiles (a cache hit by then) and runs it, and its outputs (output0..)
    are compared with the eager outputs the exporter saved: max abs error <= 1e-4
    relative to the output's scale (max |eager|); NaN where eager has NaN.
Then torchvision's lraspp_mobilenet_v3_large (random weights, 1x3x224x224) goes through
coil.compile and must match eager within 1e-3 of max |eager|.
A private cache directory keeps the user's cache untouched.

Run: COIL=build/coil PYTHONPATH=client/python /usr/bin/python3 tests/py/test_compiled_models.py
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

import coil_safetensors as st  # noqa: E402

COIL = os.environ.get("COIL", "build/coil")
PY = "/usr/bin/python3"
EXPORT = "client/python/coil_export.py"

MODELS = [
    ("torchvision:resnet18", ["--size", "64"]),
    ("torchvision:mobilenet_v3_small", ["--size", "64"]),
    ("transformer:2", []),
    ("torchvision:mobilenet_v2", ["--size", "64"]),
    # symbolic batch through convolution, pooling and linear layers (run at batch 2)
    ("torchvision:resnet18", ["--size", "32", "--batch", "2", "--dynamic-batch"]),
    # segmentation: bilinear upsampling back to the image size, symbolic batch
    ("torchvision:lraspp_mobilenet_v3_large", ["--size", "64", "--batch", "2", "--dynamic-batch"]),
]
# through coil.compile at full size: |compiled - eager| <= SEG_TOL * max |eager|
SEG_MODELS = ["lraspp_mobilenet_v3_large"]
SEG_TOL = 1e-3


def run(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def rel_err(a, b):
    a, b = a.double(), b.double()
    nan = a.isnan()
    if not bool((nan == b.isnan()).all()):
        return float("inf")
    a, b = a[~nan], b[~nan]
    if a.numel() == 0:
        return 0.0
    fin = a.isfinite()
    scale = max(float(a[fin].abs().max()) if bool(fin.any()) else 0.0, 1e-12)
    diff = (a - b).abs()
    diff[a == b] = 0  # equal infinities
    return float(diff.max()) / scale


def export_ops(d):
    """A module of the ops with extern kernels, exported to d (torch imported here only)."""
    import torch
    import torch.nn.functional as F
    import coil_export

    class Ops(torch.nn.Module):
        def __init__(self):
            super().__init__()
            nn = torch.nn
            self.c1 = nn.Conv2d(4, 6, 3, stride=(2, 1), padding=(1, 2), dilation=(1, 2))
            self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)
            self.pw = nn.Conv2d(4, 8, 1)
            self.ct = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
            self.c1d = nn.Conv1d(4, 3, 5, stride=2, padding=2, dilation=2)
            self.ct1d = nn.ConvTranspose1d(4, 2, 4, stride=3, padding=1)
            self.c3d = nn.Conv3d(1, 2, 3, stride=(1, 2, 1), padding=1)

        def forward(self, x, y):
            m, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
            ym, yi = F.max_pool2d(y, 3, 1, 1, return_indices=True)  # NaNs: the last NaN's index
            am, ai = F.adaptive_max_pool2d(y, (2, 3), return_indices=True)
            return (m, i, ym, yi, am, ai, F.hardsigmoid(y), F.hardswish(y),
                    F.max_pool2d(x, (3, 2), (2, 3), (1, 0), (2, 1), ceil_mode=True),
                    F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
                    F.avg_pool2d(x, (3, 2), 2, 1, ceil_mode=True, count_include_pad=True),
                    F.avg_pool2d(x, (2, 3), (1, 2), (0, 1), divisor_override=5),
                    F.adaptive_avg_pool2d(x, (4, 5)), F.adaptive_avg_pool2d(x, 1),
                    torch.roll(x, (1, -2), (1, 3)), torch.roll(x, 5),
                    self.c1(x), self.dw(x), self.pw(x), self.ct(x), F.relu(self.ct(x) * 0.5 + self.ct(x)),
                    self.c1d(x.flatten(2)),
                    self.ct1d(x.flatten(2)), self.c3d(x.unsqueeze(1)),
                    F.interpolate(x, size=(13, 7), mode="bilinear", align_corners=False),
                    F.interpolate(x, size=(4, 20), mode="bilinear", align_corners=True),
                    F.interpolate(x, scale_factor=1.7, mode="bilinear", align_corners=True),
                    F.interpolate(x, scale_factor=(0.5, 2.5), mode="bilinear", align_corners=False),
                    F.interpolate(x, size=(4, 20), mode="nearest"),
                    F.interpolate(x, scale_factor=(1.5, 0.7), mode="nearest"))

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 9, 11, generator=g)
    y = torch.randn(1, 2, 5, 6, generator=g)
    y[0, 0, 0, 1] = y[0, 0, 1, 0] = y[0, 1, 2, 2] = y[0, 1, 3, 4] = float("nan")
    y[0, 1, 0, 0] = float("inf")
    y[0, 0, 4, 5] = -float("inf")
    coil_export.export(Ops(), (x, y), d, input_names=["x", "y"], coil=COIL)


def compile_segmentation(t, cache):
    """torchvision segmentation models (random weights) at 1x3x224x224 through coil.compile."""
    import time
    import torch
    import torchvision
    import coil
    for name in SEG_MODELS:
        torch.manual_seed(0)
        m = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None).eval()
        x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
        t0 = time.perf_counter()
        try:
            f = coil.compile(m, (x,), cache_dir=cache, coil=COIL)
        except coil.CoilError as e:
            t.ok(False, "coil.compile %s" % name, "%s: %s" % (type(e).__name__, e))
            continue
        dt = time.perf_counter() - t0
        with torch.no_grad():
            want = m(x)
        got = f(x)
        if not t.ok(isinstance(got, dict) and sorted(got) == sorted(want), "coil.compile %s: same outputs" % name,
                    "%r vs %r" % (sorted(got) if isinstance(got, dict) else type(got), sorted(want))):
            continue
        for k in sorted(want):
            same_shape = tuple(want[k].shape) == tuple(got[k].shape)
            err = rel_err(want[k], got[k]) if same_shape else float("inf")
            t.ok(err <= SEG_TOL, "coil.compile %s[%r] 224px matches eager (rel err %.2e, %.1f s)" % (name, k, err, dt),
                 "shapes %s vs %s" % (tuple(want[k].shape), tuple(got[k].shape)))


def main():
    t = Tap()
    r = run([COIL, "help"])
    if not t.ok("coil run" in r.stdout + r.stderr and "coil check" in r.stdout + r.stderr,
                "%s help lists run and check" % COIL, r.stdout + r.stderr):
        t.done()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache"))
        for i, (spec, extra) in enumerate([("ops", [])] + MODELS):
            name = "%s %s" % (spec, " ".join(extra))
            d = os.path.join(tmp, "m%d" % i)
            if spec == "ops":
                if t.run("export ops", export_ops, d) is None and not os.path.exists(d + "/graph.json"):
                    continue
                t.ok(True, "export ops")
            else:
                r = run([PY, EXPORT, spec, d] + extra, env)
                if not t.ok(r.returncode == 0, "export %s" % name, r.stderr[-2000:]):
                    continue
            files = ["-w", d + "/weights.safetensors", "-i", d + "/inputs.safetensors"]
            r = run([COIL, "check", d + "/graph.json"] + files, env)
            t.ok(r.returncode == 0, "check %s (compiled vs interpreter)" % name,
                 (r.stdout + r.stderr)[-2000:])
            # default threads, then 2 (oneDNN and the generated kernels share the model's count)
            for threads in ([], ["--threads", "2"]):
                tname = name + (" threads=2" if threads else "")
                out = d + "/compiled%s.safetensors" % ("-2" if threads else "")
                r = run([COIL, "run", d + "/graph.json"] + files + ["-o", out] + threads, env)
                if not t.ok(r.returncode == 0, "run %s" % tname, (r.stdout + r.stderr)[-2000:]):
                    continue
                want, got = st.load(d + "/outputs.safetensors"), st.load(out)
                t.ok(sorted(want) == sorted(got), "%s: same outputs" % tname, "%s vs %s" % (sorted(want), sorted(got)))
                for k in sorted(want):
                    if k not in got:
                        continue
                    same_shape = tuple(want[k].shape) == tuple(got[k].shape)
                    err = rel_err(want[k], got[k]) if same_shape else float("inf")
                    t.ok(err <= 1e-4, "%s %s compiled matches eager (rel err %.2e)" % (tname, k, err),
                         "shapes %s vs %s" % (tuple(want[k].shape), tuple(got[k].shape)))
        t.run("coil.compile segmentation", compile_segmentation, t, os.path.join(tmp, "cache"))
    t.done()


if __name__ == "__main__":
    main()
