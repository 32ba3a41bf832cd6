"""Exported real models through coil's reference interpreter versus PyTorch eager.

Each model is exported with client/python/coil_export.py (make_fx at ATen level),
evaluated with `coil eval`, and compared with the eager outputs the exporter saved:
max abs error <= 1e-4 relative to the output's scale (max |eager|).
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
    ("torchvision:resnet18", []),
    ("torchvision:mobilenet_v3_small", []),
    ("transformer:2", []),
    ("mlp", []),
]


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def rel_err(a, b):
    a, b = a.double(), b.double()
    scale = max(float(a.abs().max()), 1e-12)
    return float((a - b).abs().max()) / scale


def main():
    t = Tap()
    with tempfile.TemporaryDirectory() as tmp:
        for spec, extra in MODELS:
            d = os.path.join(tmp, spec.replace(":", "_"))
            r = run([PY, EXPORT, spec, d] + extra)
            if not t.ok(r.returncode == 0, "export %s" % spec, r.stderr[-2000:]):
                continue
            r = run([COIL, "validate", d + "/graph.json"])
            t.ok(r.returncode == 0, "validate %s" % spec, r.stderr)
            out = d + "/coil.safetensors"
            r = run([COIL, "eval", d + "/graph.json", "-w", d + "/weights.safetensors",
                     "-i", d + "/inputs.safetensors", "-o", out])
            if not t.ok(r.returncode == 0, "eval %s" % spec, r.stderr):
                continue
            want, got = st.load(d + "/outputs.safetensors"), st.load(out)
            t.ok(sorted(want) == sorted(got), "%s: same outputs" % spec, "%s vs %s" % (sorted(want), sorted(got)))
            for k in sorted(want):
                if k not in got:
                    continue
                same_shape = tuple(want[k].shape) == tuple(got[k].shape)
                err = rel_err(want[k], got[k]) if same_shape else float("inf")
                t.ok(err <= 1e-4, "%s %s matches eager (rel err %.2e)" % (spec, k, err),
                     "shapes %s vs %s" % (tuple(want[k].shape), tuple(got[k].shape)))
    t.done()


if __name__ == "__main__":
    main()
