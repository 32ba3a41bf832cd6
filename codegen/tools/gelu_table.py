#!/usr/bin/python3
"""The tables behind vmath.h's fast gelu: Phi(-a) = erfc(a/sqrt2)/2 for 0 <= a < 4 as a
piecewise polynomial.

  coil_gelu_tab (1 and 16 lanes): 32 intervals of width 1/8, each a degree-5 polynomial
    in u = 8a - floor(8a), in [0, 1) (16 lanes look the coefficients up with vpermt2ps);
  coil_gelu_tab8 (8 lanes, AVX2): 8 intervals of width 1/2, each a degree-9 polynomial in
    u = 2a - floor(2a) - 1/2, in [-1/2, 1/2) (one vpermps a coefficient: AVX2 has no cheap
    32-entry lookup).

Each is a near-minimax fit of the relative error (Lawson's iteration on weighted least
squares at 200 Chebyshev nodes), then rounded to float; the script reports the worst
relative error of the rounded table evaluated in float with FMA Horner steps.

    /usr/bin/python3 codegen/tools/gelu_table.py    (prints both C tables for vmath.h)
"""
import math
import sys

import numpy as np

# name, degree, intervals, width, u's offset (u = a/width - i - off)
TABLES = (("coil_gelu_tab", 5, 32, 0.125, 0.0), ("coil_gelu_tab8", 9, 8, 0.5, 0.5))


def phi_neg(a):
    return 0.5 * math.erfc(a / math.sqrt(2))


def fit(i, deg, width, off):
    n = 200
    u = 0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n) - off
    y = np.array([phi_neg((i + off + v) * width) for v in u])
    vand = np.vander(u, deg + 1, increasing=True)
    w = np.ones(n) / n
    for _ in range(30):
        s = np.sqrt(w) / y
        c, *_ = np.linalg.lstsq(vand * s[:, None], y * s, rcond=None)
        w = w * np.abs(vand @ c - y) / y
        w /= w.sum()
    return c.astype(np.float32)


def worst(i, c, deg, width, off):
    u = (np.linspace(0, 1, 4001, dtype=np.float32)[:-1] - np.float32(off)).astype(np.float32)
    p = np.full_like(u, c[deg])
    for k in range(deg - 1, -1, -1):
        p = (p.astype(np.float64) * u + np.float64(c[k])).astype(np.float32)  # one rounding, as FMA
    y = np.array([phi_neg((i + off + float(v)) * width) for v in u])
    return float(np.max(np.abs(p - y) / y))


def main():
    for name, deg, k, width, off in TABLES:
        tab = [fit(i, deg, width, off) for i in range(k)]
        err = max(worst(i, c, deg, width, off) for i, c in enumerate(tab))
        u = "%ga - i" % (1 / width) + (" - %g" % off if off else "")
        print("/* Phi(-a) on [i*%g, (i+1)*%g) is the sum over k of %s[k][i] * u^k, u = %s\n"
              " * (made by codegen/tools/gelu_table.py; worst relative error %.2g) */" % (width, width, name, u, err))
        print("static const float %s[%d][%d] __attribute__((aligned(64))) = {" % (name, deg + 1, k))
        for j in range(deg + 1):
            vals = ["%.9gf" % c[j] for c in tab]
            rows = [", ".join(vals[r:r + 6]) for r in range(0, k, 6)]
            print("\t{" + ",\n\t ".join(rows) + "},")
        print("};")
        sys.stderr.write("%s: worst relative error %.3g\n" % (name, err))


if __name__ == "__main__":
    main()
