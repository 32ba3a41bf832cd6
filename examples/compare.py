"""Compare two safetensors files of outputs: prints max error relative to scale.
usage: /usr/bin/python3 examples/compare.py EXPECTED.safetensors GOT.safetensors [TOL]"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "python"))
import coil_safetensors as st  # noqa: E402

want, got = st.load(sys.argv[1]), st.load(sys.argv[2])
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
bad = 0
for k in sorted(want):
    a = want[k].double()
    b = got.get(k)
    if b is None or tuple(b.shape) != tuple(a.shape):
        print("%s: missing or wrong shape" % k)
        bad = 1
        continue
    err = float((a - b.double()).abs().max()) / max(float(a.abs().max()), 1e-12)
    print("%s %s: max error relative to scale %.2e (tolerance %.0e) %s"
          % (k, list(a.shape), err, tol, "ok" if err <= tol else "MISMATCH"))
    bad |= err > tol
sys.exit(1 if bad else 0)
