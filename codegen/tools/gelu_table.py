#!/usr/bin/python3
"""The table behind vmath.h's fast gelu: Phi(-a) = erfc(a/sqrt2)/2 for 0 <= a < 4, on 32
intervals of width 1/8, each a degree-5 polynomial in u = 8a - floor(8a), in [0, 1).
Each is a near-minimax fit of the relative error (Lawson's iteration on weighted least
squares at 200 Chebyshev nodes), then rounded to float; the script reports the worst
relative error of the rounded table evaluated in float with FMA Horner steps.

    /usr/bin/python3 codegen/tools/gelu_table.py    (prints the C table for vmath.h)
"""
import math
import sys

import numpy as np

DEG, K, WIDTH = 5, 32, 0.125


def phi_neg(a):
    return 0.5 * math.erfc(a / math.sqrt(2))


def fit(i):
    n = 200
    u = 0.5 - 0.5 * np.cos(np.pi * (np.arange(n) + 0.5) / n)
    y = np.array([phi_neg((i + v) * WIDTH) for v in u])
    vand = np.vander(u, DEG + 1, increasing=True)
    w = np.ones(n) / n
    for _ in range(30):
        s = np.sqrt(w) / y
        c, *_ = np.linalg.lstsq(vand * s[:, None], y * s, rcond=None)
        w = w * np.abs(vand @ c - y) / y
        w /= w.sum()
    return c.astype(np.float32)


def worst(i, c):
    u = np.linspace(0, 1, 4001, dtype=np.float32)[:-1]
    p = np.full_like(u, c[DEG])
    for k in range(DEG - 1, -1, -1):
        p = (p.astype(np.float64) * u + np.float64(c[k])).astype(np.float32)  # one rounding, as FMA
    y = np.array([phi_neg((i + float(v)) * WIDTH) for v in u])
    return float(np.max(np.abs(p - y) / y))


def main():
    tab = [fit(i) for i in range(K)]
    err = max(worst(i, c) for i, c in enumerate(tab))
    print("/* Phi(-a) on [i/8, (i+1)/8) is the sum over k of coil_gelu_tab[k][i] * u^k, u = 8a - i\n"
          " * (made by codegen/tools/gelu_table.py; worst relative error %.2g) */" % err)
    print("static const float coil_gelu_tab[%d][%d] __attribute__((aligned(64))) = {" % (DEG + 1, K))
    for k in range(DEG + 1):
        vals = ["%.9gf" % c[k] for c in tab]
        rows = [", ".join(vals[j:j + 6]) for j in range(0, K, 6)]
        print("\t{" + ",\n\t ".join(rows) + "},")
    print("};")
    sys.stderr.write("worst relative error %.3g\n" % err)


if __name__ == "__main__":
    main()
